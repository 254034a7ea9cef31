//! `knee-node describe`: the contract with the Python side, printed as JSON, built from the
//! constants the code itself uses (nothing here is a copy). `tests/test_contract.py` holds
//! `knee.contract`, `knee.params` and the systems' schemas to it.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::load::recorder::{Status, SAMPLE_BYTES};

/// What one system (or the load generator) puts in samples and accepts in its config.
#[derive(Serialize, Default, Debug)]
pub struct SystemContract {
    /// Sample `op` codes by name (operations that are recorded).
    pub ops: BTreeMap<&'static str, u16>,
    /// Sample `flags` bits by name.
    pub flags: BTreeMap<&'static str, u16>,
    /// Fixed sizes in bytes by name.
    pub sizes: BTreeMap<&'static str, u64>,
    /// Sample `arg` codes by name, for a system whose `arg` is a code (http: the reason a
    /// request failed); absent for the others.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub args: BTreeMap<&'static str, u32>,
    /// The largest value a node accepts, by spec key ("section.name").
    pub max: BTreeMap<&'static str, f64>,
    /// The value a node uses when the key is absent, by spec key.
    pub defaults: BTreeMap<&'static str, serde_json::Value>,
}

impl SystemContract {
    pub fn new() -> Self {
        Self::default()
    }
    pub fn op(mut self, name: &'static str, code: u16) -> Self {
        self.ops.insert(name, code);
        self
    }
    pub fn flag(mut self, name: &'static str, bit: u16) -> Self {
        self.flags.insert(name, bit);
        self
    }
    pub fn arg(mut self, name: &'static str, code: u32) -> Self {
        self.args.insert(name, code);
        self
    }
    pub fn size(mut self, name: &'static str, bytes: usize) -> Self {
        self.sizes.insert(name, bytes as u64);
        self
    }
    pub fn max(mut self, key: &'static str, value: impl Into<f64>) -> Self {
        self.max.insert(key, value.into());
        self
    }
    pub fn with_default(mut self, key: &'static str, value: impl Serialize) -> Self {
        let value = serde_json::to_value(value).unwrap_or(serde_json::Value::Null);
        self.defaults.insert(key, value);
        self
    }
}

#[derive(Serialize)]
struct Describe {
    systems: BTreeMap<&'static str, SystemContract>,
    /// Sample statuses in code order.
    statuses: [&'static str; 5],
    sample_bytes: usize,
    /// The load generator's keys (`load.*`), common to the open- and closed-loop systems.
    load: SystemContract,
}

/// The whole contract, as one JSON line.
pub fn describe() -> String {
    let d = Describe {
        systems: crate::systems::SYSTEMS
            .iter()
            .map(|s| (s.name, (s.contract)()))
            .collect(),
        statuses: Status::NAMES,
        sample_bytes: SAMPLE_BYTES,
        load: crate::load::config::contract(),
    };
    serde_json::to_string(&d).unwrap_or_default()
}
