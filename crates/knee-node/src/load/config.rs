//! The load generator's configuration, as the runner writes it (JSON).

use serde::Deserialize;

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

#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq)]
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

/// The load generator's part of `knee-node describe`: its limits and defaults by spec key.
pub fn contract() -> crate::contract::SystemContract {
    crate::contract::SystemContract::new()
        .max("load.connections", MAX_CONNECTIONS as f64)
        .max("load.clients", MAX_CLIENTS as f64)
        .with_default("load.connections", default_connections())
        .with_default("load.timeout_ms", default_timeout_ms())
        .with_default("load.late_ms", default_late_ms())
        .with_default("load.max_outstanding", default_max_outstanding())
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
