//! The load generator's configuration, as the runner writes it (JSON).

use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase", deny_unknown_fields)]
pub enum ScheduleConfig {
    /// Open loop, exponential inter-arrival times.
    Poisson { rate_per_s: f64 },
    /// Open loop, evenly spaced sends.
    Constant { rate_per_s: f64 },
    /// Open loop, Poisson at each `[rate_per_s, duration_s]` step in turn.
    Steps { steps: Vec<(f64, f64)> },
    /// Closed loop: `clients` each send, wait for the reply, think, and send again.
    Closed {
        clients: usize,
        #[serde(default)]
        think_ms: f64,
        #[serde(default)]
        think: Think,
    },
}

#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq)]
#[serde(rename_all = "lowercase")]
pub enum Think {
    #[default]
    Fixed,
    Exponential,
}

fn default_connections() -> usize {
    1
}
fn default_timeout_ms() -> f64 {
    5000.0
}
fn default_late_ms() -> f64 {
    1.0
}
fn default_max_outstanding() -> usize {
    100_000
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoadConfig {
    /// Server address, `host:port`.
    pub target: String,
    pub schedule: ScheduleConfig,
    /// Open loop: connections the requests are spread over, round robin.
    #[serde(default = "default_connections")]
    pub connections: usize,
    /// Stop after this long, warm-up included (None: no time limit).
    #[serde(default)]
    pub duration_s: Option<f64>,
    /// Stop after this many requests, warm-up included (None: no count limit).
    #[serde(default)]
    pub requests: Option<u64>,
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: f64,
    #[serde(default = "default_late_ms")]
    pub late_ms: f64,
    /// Open loop: requests in flight beyond this are recorded as dropped instead of sent.
    #[serde(default = "default_max_outstanding")]
    pub max_outstanding: usize,
    #[serde(default)]
    pub seed: u64,
    /// Samples whose intended time falls in the warm-up stay on disk but out of the histogram.
    #[serde(default)]
    pub warmup_s: f64,
    /// Where every request's sample is appended (binary records, see `recorder.rs`).
    pub samples_path: String,
    /// Where the HDR histogram of post-warm-up latencies is written at the end.
    pub histogram_path: String,
    #[serde(default = "crate::config_defaults::max_frame_bytes")]
    pub max_frame_bytes: usize,
    /// The system driver's own parameters.
    #[serde(default)]
    pub driver: serde_json::Value,
}

/// Limits that keep a mistyped config from exhausting the machine.
const MAX_CONNECTIONS: usize = 1024;
/// Closed-loop clients (a thread each), for every closed-loop role (chat too).
pub(crate) const MAX_CLIENTS: usize = 4096;
/// The longest wait one request may ask (timeout, think time, lateness): an hour. Waits
/// become durations, which need a finite bound, and a longer one is a unit mistake.
pub(crate) const MAX_WAIT_MS: f64 = 3_600_000.0;
/// A day: the longest point (and warm-up) a config may ask for.
pub(crate) const MAX_DURATION_S: f64 = 86_400.0;
const MAX_RATE_PER_S: f64 = 10_000_000.0;
const MAX_REQUESTS: u64 = 1_000_000_000;
/// Requests in flight, each an entry of the in-flight table.
const MAX_OUTSTANDING: usize = 10_000_000;

/// The load generator's part of `knee-node describe`: every key of its config.
pub fn contract() -> crate::contract::SystemContract {
    use crate::contract::Key;
    let wait = || Key::float(0, MAX_WAIT_MS);
    crate::contract::SystemContract::new()
        .reads::<LoadConfig>("load")
        .key("load.target", Key::str().required())
        .key("load.schedule", Key::object().required())
        .key(
            "load.connections",
            Key::int(1, MAX_CONNECTIONS).default(default_connections()),
        )
        .key("load.duration_s", Key::float(0, MAX_DURATION_S).above())
        .key("load.requests", Key::int(1, MAX_REQUESTS))
        .key("load.timeout_ms", wait().above().default(default_timeout_ms()))
        .key("load.late_ms", wait().above().default(default_late_ms()))
        .key(
            "load.max_outstanding",
            Key::int(1, MAX_OUTSTANDING).default(default_max_outstanding()),
        )
        .key("load.seed", Key::int(0, u64::MAX).default(0))
        .key("load.warmup_s", Key::float(0, MAX_DURATION_S).default(0.0))
        .key("load.samples_path", Key::str().required())
        .key("load.histogram_path", Key::str().required())
        .key(
            "load.max_frame_bytes",
            Key::int_from(1).default(crate::config_defaults::max_frame_bytes()),
        )
        .key("load.driver", Key::object())
        // The schedule's table (`kind` picks its variant).
        .key(
            "load.schedule.kind",
            Key::one_of(&["poisson", "constant", "steps", "closed"]).required(),
        )
        .key("load.schedule.rate_per_s", Key::float(0, MAX_RATE_PER_S).above())
        .key("load.schedule.steps", Key::list(None))
        .key("load.schedule.clients", Key::int(1, MAX_CLIENTS))
        .key("load.schedule.think_ms", wait().default(0.0))
        .key(
            "load.schedule.think",
            Key::one_of(&["fixed", "exponential"]).default(Think::default()),
        )
}

impl LoadConfig {
    pub fn check(&self) -> Result<(), String> {
        if self.duration_s.is_none()
            && self.requests.is_none()
            && !matches!(self.schedule, ScheduleConfig::Steps { .. })
        {
            return Err("give duration_s or requests: a load must stop by itself".into());
        }
        if !(1..=MAX_CONNECTIONS).contains(&self.connections) {
            return Err(format!("connections must be 1..={MAX_CONNECTIONS}"));
        }
        if !positive(self.timeout_ms) || !positive(self.late_ms) {
            return Err("timeout_ms and late_ms must be > 0".into());
        }
        match &self.schedule {
            ScheduleConfig::Poisson { rate_per_s } | ScheduleConfig::Constant { rate_per_s } => {
                if !positive(*rate_per_s) {
                    return Err(format!("rate_per_s must be > 0, got {rate_per_s}"));
                }
            }
            ScheduleConfig::Steps { steps } => {
                if steps.is_empty() || steps.iter().any(|(r, d)| !positive(*r) || !positive(*d)) {
                    return Err("steps must be a non-empty list of [rate_per_s > 0, duration_s > 0]".into());
                }
            }
            ScheduleConfig::Closed {
                clients, think_ms, ..
            } => {
                if !(1..=MAX_CLIENTS).contains(clients) || !(positive(*think_ms) || *think_ms == 0.0) {
                    return Err(format!("clients must be 1..={MAX_CLIENTS} and think_ms >= 0"));
                }
            }
        }
        Ok(())
    }
}

/// True for a finite number > 0 (false for NaN).
fn positive(x: f64) -> bool {
    x.is_finite() && x > 0.0
}
