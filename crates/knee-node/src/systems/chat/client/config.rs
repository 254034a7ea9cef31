//! The chat client role's configuration (`knee-node load chat --config ...`).

use serde::Deserialize;

pub(crate) fn default_timeout_ms() -> f64 {
    1000.0
}
pub(crate) fn default_retries() -> u32 {
    50
}
pub(crate) fn default_backoff_ms() -> f64 {
    10.0
}
pub(crate) fn default_max_backoff_ms() -> f64 {
    200.0
}
/// As `load.late_ms`'s default (`load/config.rs`).
pub(crate) fn default_late_ms() -> f64 {
    1.0
}
pub(crate) fn default_reply_bytes() -> u32 {
    4
}
pub(crate) fn default_rooms() -> u32 {
    1
}
pub(crate) fn default_message_bytes() -> usize {
    64
}
pub(crate) fn default_prefix() -> String {
    "load".into()
}

#[derive(Clone, Copy, Debug, Deserialize, serde::Serialize, PartialEq)]
#[serde(rename_all = "snake_case")]
pub enum Mix {
    /// The report's measurement: login, logout, login, ...
    LoginLogout,
    /// A chat session: login, join, post, fetch, logout, ...
    Session,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatDriver {
    #[serde(default = "default_mix")]
    pub mix: Mix,
    /// Each reply is padded to this many body bytes.
    #[serde(default = "default_reply_bytes")]
    pub reply_bytes: u32,
    /// Client i uses room i % rooms.
    #[serde(default = "default_rooms")]
    pub rooms: u32,
    #[serde(default = "default_message_bytes")]
    pub message_bytes: usize,
    /// Client i's name in the database (and its user's) is "{client_prefix}-{i}".
    #[serde(default = "default_prefix")]
    pub client_prefix: String,
}

fn default_mix() -> Mix {
    Mix::LoginLogout
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatLoadConfig {
    /// Replica addresses in replica order (index = replica number).
    pub replicas: Vec<String>,
    pub clients: usize,
    /// Pause between a reply and the next request of the same client.
    #[serde(default)]
    pub think_ms: f64,
    #[serde(default)]
    pub requests_per_client: Option<u64>,
    #[serde(default)]
    pub duration_s: Option<f64>,
    /// One attempt's wait for its reply.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: f64,
    /// Attempts after the first, on a timeout, a lost connection or "not primary".
    #[serde(default = "default_retries")]
    pub retries: u32,
    #[serde(default = "default_backoff_ms")]
    pub backoff_ms: f64,
    #[serde(default = "default_max_backoff_ms")]
    pub max_backoff_ms: f64,
    /// A request's first attempt sent more than this behind its intended time is late.
    #[serde(default = "default_late_ms")]
    pub late_ms: f64,
    #[serde(default)]
    pub warmup_s: f64,
    #[serde(default)]
    pub seed: u64,
    pub samples_path: String,
    pub histogram_path: String,
    /// Where the database's audit of this node's writes goes (default: next to the samples).
    #[serde(default)]
    pub audit_path: Option<String>,
    #[serde(default = "crate::config_defaults::max_frame_bytes")]
    pub max_frame_bytes: usize,
    #[serde(default)]
    pub driver: Option<ChatDriver>,
}

use crate::systems::chat::server::MAX_REPLICAS;
pub(crate) const MAX_RETRIES: u32 = 1000;
/// Rooms of one load (each a row, and a membership per client).
pub(crate) const MAX_ROOMS: u32 = 1_000_000;

impl ChatLoadConfig {
    pub fn check(&self) -> Result<(), String> {
        if self.duration_s.is_none() && self.requests_per_client.is_none() {
            return Err("give duration_s or requests_per_client: a load must stop by itself".into());
        }
        // clients, retries and at most MAX_REPLICAS replicas: the contract's bounds.
        if self.replicas.is_empty() {
            return Err(format!("replicas: give 1..={MAX_REPLICAS} addresses"));
        }
        let positive = |x: f64| x.is_finite() && x > 0.0;
        if [
            self.timeout_ms,
            self.backoff_ms,
            self.max_backoff_ms,
            self.late_ms,
        ]
        .iter()
        .any(|&x| !positive(x))
        {
            return Err("timeout_ms, backoff_ms, max_backoff_ms and late_ms must be > 0".into());
        }
        if !(self.think_ms.is_finite() && self.think_ms >= 0.0) {
            return Err("think_ms must be >= 0".into());
        }
        let d = self.driver();
        if d.reply_bytes > super::super::codec::MAX_REPLY_BYTES
            || d.message_bytes > super::super::codec::MAX_TEXT_BYTES
            || !(1..=MAX_ROOMS).contains(&d.rooms)
        {
            return Err("driver: reply_bytes <= 1 MiB, message_bytes <= 4096, rooms >= 1".into());
        }
        super::super::codec::check_name("client_prefix", &format!("{}-{}", d.client_prefix, self.clients))
    }

    pub fn driver(&self) -> ChatDriver {
        self.driver.clone().unwrap_or(ChatDriver {
            mix: default_mix(),
            reply_bytes: default_reply_bytes(),
            rooms: default_rooms(),
            message_bytes: default_message_bytes(),
            client_prefix: default_prefix(),
        })
    }

    pub fn audit_path(&self) -> String {
        self.audit_path
            .clone()
            .unwrap_or_else(|| match self.samples_path.strip_suffix(".samples.bin") {
                Some(stem) => format!("{stem}.audit.csv"),
                None => format!("{}.audit.csv", self.samples_path),
            })
    }
}
