//! `knee-node describe`: the contract with the Python side, printed as JSON (pretty, keys in
//! a stable order), assembled from every system's `contract()`, the load generator's, the
//! sample statuses and the events' fields. Only `main.rs` calls it; the types it assembles
//! live in the leaf module `contract`. `python/knee/contract.json` is its output, checked in,
//! and `tests/test_contract.py` holds the two equal.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;

use crate::contract::SystemContract;
use crate::events::{self, Counts, LatencySummary, NoExtra, NodeEvent};
use crate::load::recorder::{Status, SAMPLE_BYTES, SAMPLE_LAYOUT};

#[derive(Serialize)]
struct Describe {
    systems: BTreeMap<&'static str, SystemContract>,
    /// Sample statuses in code order.
    statuses: [&'static str; 5],
    sample_bytes: usize,
    /// A sample record's fields in file order, each `[name, numpy type]`.
    sample_layout: [(&'static str, &'static str); 17],
    /// The load generator's keys (`load.*`), common to the open- and closed-loop systems.
    load: SystemContract,
    /// Every stdout event's common fields, by event name, in line order (a system adds its
    /// own through the event's `extra`).
    events: BTreeMap<&'static str, Vec<String>>,
    /// The fields of `stats` and `progress` lines the runner keeps as time-series columns,
    /// each second, per node.
    timeseries: [&'static str; 13],
}

/// Cumulative counters and rates of a server's `stats` or a load node's `progress` line
/// (the rest of those lines is bookkeeping); a test holds each to the lines' fields.
const TIMESERIES: [&str; 13] = [
    "requests",
    "completed",
    "errors",
    "timeouts",
    "drops",
    "bytes_rx",
    "bytes_tx",
    "queue_len",
    "connections",
    "rate_per_s",
    "p99_ns",
    "late_sends",
    "late_replies",
];

/// The whole contract, as pretty-printed JSON.
pub fn describe() -> String {
    let d = Describe {
        systems: crate::systems::SYSTEMS
            .iter()
            .map(|s| (s.name, (s.contract)()))
            .collect(),
        statuses: Status::NAMES,
        sample_bytes: SAMPLE_BYTES,
        sample_layout: SAMPLE_LAYOUT,
        load: crate::load::config::contract(),
        events: event_fields(),
        timeseries: TIMESERIES,
    };
    serde_json::to_string_pretty(&d).unwrap_or_default()
}

/// Refuses a node's config (`knee-node serve|load <system> --config`) with a value outside
/// what `describe` says the system accepts, before the role parses it: the bounds are
/// written once, in the contract, and hold for every node.
pub fn check(role: &str, system: &str, config: &Value) -> Result<(), String> {
    let Some(s) = crate::systems::SYSTEMS.iter().find(|s| s.name == system) else {
        return Ok(()); // the role names the known systems
    };
    let own = (s.contract)();
    let load = crate::load::config::contract();
    // A client role on the load generator is described by its keys plus the system's own
    // bounds on them; one with a config of its own, by its "client" keys.
    let generic = role == "load" && !own.keys.keys().any(|k| k.starts_with("client."));
    let contracts: &[&SystemContract] = if generic { &[&load, &own] } else { &[&own] };
    for c in contracts {
        for section in c.sections() {
            let mut path = section.split('.');
            // Where a section's table is in this role's config.
            let table = match (role, path.next()) {
                ("serve", Some("server")) => &config["server"],
                ("load", Some("driver")) => &config["driver"],
                ("load", Some("client" | "load")) => config,
                _ => continue,
            };
            let table = path.fold(table, |t, name| &t[name]);
            c.check(section, table)
                .map_err(|e| format!("{role} config: {e}"))?;
        }
    }
    Ok(())
}

/// The fields of each event, from serializing one (so they are the lines' own).
fn event_fields() -> BTreeMap<&'static str, Vec<String>> {
    fn fields<T: NodeEvent>(event: &T) -> (&'static str, Vec<String>) {
        let names = match serde_json::to_value(event) {
            Ok(serde_json::Value::Object(map)) => map.keys().cloned().collect(),
            _ => Vec::new(),
        };
        (T::NAME, names)
    }
    let counts = Counts::default();
    [
        fields(&events::Ready::now(String::new())),
        fields(&events::Stats::<NoExtra>::default()),
        fields(&events::Primary {
            replica: 0,
            primary: 0,
            was: 0,
            t_ns: 0,
        }),
        fields(&events::Start { start_ns: 0 }),
        fields(&events::Progress {
            t_s: 0.0,
            counts,
            rate_per_s: 0.0,
            sent_rate_per_s: 0.0,
            target_rate_per_s: None,
            p99_ns: 0,
            extra: NoExtra {},
        }),
        fields(&events::Done {
            counts,
            elapsed_s: 0.0,
            achieved_rate_per_s: 0.0,
            target_rate_per_s: None,
            latency: LatencySummary::default(),
            extra: NoExtra {},
        }),
    ]
    .into_iter()
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every field serde reads of each config struct is a described key, and every described
    /// key of a section is one serde reads: the description cannot drift from the structs.
    fn check_described(who: &str, c: &SystemContract, load: &SystemContract) {
        assert!(
            !c.read.is_empty(),
            "{who}: no config struct registered with reads()"
        );
        for (section, fields) in &c.read {
            assert!(!fields.is_empty(), "{who} {section}: serde gave no fields");
            for field in fields {
                let key = format!("{section}.{field}");
                assert!(
                    c.keys.contains_key(&key),
                    "{who}: {key} is read but not described"
                );
            }
        }
        for (key, spec) in &c.keys {
            let (section, name) = key.rsplit_once('.').expect("section.name");
            if section == "load" && who != "load" {
                // A system's own bound on a load key: the key must be the load generator's.
                let generic = &load.keys[key.as_str()];
                assert_eq!(spec.kind, generic.kind, "{who}: {key}");
                continue;
            }
            // A sub-table without a struct of its own (an enum's variants) is not probed.
            let Some(fields) = c.read.get(section) else {
                continue;
            };
            assert!(fields.contains(name), "{who}: {key} is described but not read");
        }
    }

    #[test]
    fn every_config_field_is_described() {
        let load = crate::load::config::contract();
        for s in crate::systems::SYSTEMS {
            check_described(s.name, &(s.contract)(), &load);
        }
        check_described("load", &load, &load);
    }

    #[test]
    fn a_node_refuses_what_its_contract_does_not_allow() {
        use serde_json::json;
        assert!(check("serve", "matrix", &json!({"server": {"threads": 4}})).is_ok());
        assert!(check("serve", "matrix", &json!({"server": {"threads": 0}})).is_err());
        assert!(check("serve", "matrix", &json!({"server": {"algorithm": "fast"}})).is_err());
        // The advertised heartbeat range is the one the nodes keep (0 is a spec's rule).
        assert!(check("serve", "slices", &json!({"server": {"heartbeat_ms": 0}})).is_err());
        assert!(check("serve", "http", &json!({"server": {"nginx": {"cpu": 4096}}})).is_err());
        let open = json!({"schedule": {"kind": "poisson", "rate_per_s": 10.0}});
        assert!(check("load", "echo", &open).is_ok());
        let zero = json!({"schedule": {"kind": "poisson", "rate_per_s": 0.0}});
        assert!(check("load", "echo", &zero).is_err());
        // A system's own bound on a load key, and a client with keys of its own.
        assert!(check("load", "slices", &json!({"max_outstanding": 2_000_000})).is_err());
        assert!(check("load", "echo", &json!({"max_outstanding": 2_000_000})).is_ok());
        assert!(check("load", "stream", &json!({"timeout_ms": 60_001.0})).is_err());
        assert!(check("load", "chat", &json!({"driver": {"mix": "session"}})).is_ok());
    }

    #[test]
    fn every_timeseries_column_is_a_field_of_stats_or_progress() {
        let events = event_fields();
        for name in TIMESERIES {
            let found = ["stats", "progress"]
                .iter()
                .any(|e| events[e].iter().any(|f| f == name));
            assert!(found, "{name} is in neither stats nor progress");
        }
    }

    #[test]
    fn describe_is_json_with_every_system_and_event() {
        let v: serde_json::Value = serde_json::from_str(&describe()).unwrap();
        assert_eq!(
            v["systems"].as_object().unwrap().len(),
            crate::systems::SYSTEMS.len()
        );
        assert_eq!(v["events"]["start"], serde_json::json!(["start_ns"]));
        assert!(v["events"]["done"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f == "latency"));
    }
}
