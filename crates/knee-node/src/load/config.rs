//! The load generator's configuration, as the runner writes it (JSON).

use serde::Deserialize;

use super::harness::{Bounds, Plan};
use super::schedule::Schedule;
pub use super::schedule::{ScheduleConfig, Think};

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

/// A load config as the runner writes it: one JSON object for every system (the spec keys;
/// `target` and `connections` included where nothing reads them). Parsed once, then split
/// into the generic [`LoadConfig`] and, for a load over TCP, its [`TcpTarget`].
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LoadSpec {
    /// Server address, `host:port` (http: a URL); empty or absent where the load reaches its
    /// servers by other means (Zenoh, UDP).
    #[serde(default)]
    target: Option<String>,
    schedule: ScheduleConfig,
    #[serde(default = "default_connections")]
    connections: usize,
    #[serde(default)]
    duration_s: Option<f64>,
    #[serde(default)]
    requests: Option<u64>,
    #[serde(default = "default_timeout_ms")]
    timeout_ms: f64,
    #[serde(default = "default_late_ms")]
    late_ms: f64,
    #[serde(default = "default_max_outstanding")]
    max_outstanding: usize,
    #[serde(default)]
    seed: u64,
    #[serde(default)]
    warmup_s: f64,
    samples_path: String,
    histogram_path: String,
    #[serde(default = "crate::config_defaults::max_frame_bytes")]
    max_frame_bytes: usize,
    #[serde(default)]
    driver: serde_json::Value,
}

/// The generic load: schedule, bounds, warm-up, seed, timeouts and outputs. What every
/// sending engine reads, whatever its transport.
#[derive(Clone, Debug)]
pub struct LoadConfig {
    pub schedule: ScheduleConfig,
    /// Stop after this long, warm-up included (None: no time limit).
    pub duration_s: Option<f64>,
    /// Stop after this many requests, warm-up included (None: no count limit).
    pub requests: Option<u64>,
    pub timeout_ms: f64,
    pub late_ms: f64,
    /// Open loop: requests in flight beyond this are recorded as dropped instead of sent.
    pub max_outstanding: usize,
    pub seed: u64,
    /// Samples whose intended time falls in the warm-up stay on disk but out of the histogram.
    pub warmup_s: f64,
    /// Where every request's sample is appended (binary records, see `recorder.rs`).
    pub samples_path: String,
    /// Where the HDR histogram of post-warm-up latencies is written at the end.
    pub histogram_path: String,
    /// The system driver's own parameters.
    pub driver: serde_json::Value,
}

/// Where a load over TCP sends: the framed systems (echo, matrix) and http.
#[derive(Clone, Debug)]
pub struct TcpTarget {
    /// Server address, `host:port` (http: also `http://` or `https://` URLs).
    pub target: String,
    /// Open loop: connections the requests are spread over, round robin.
    pub connections: usize,
    pub max_frame_bytes: usize,
}

/// Why a load config was refused; its text is the node's error line.
#[derive(Debug, Clone, PartialEq)]
pub enum LoadConfigError {
    /// Not a load config (a missing, unknown or mistyped key): serde's words.
    Json(String),
    /// A TCP load without a `target`.
    NoTarget,
    NoStop,
    Steps,
}

impl std::fmt::Display for LoadConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LoadConfigError::Json(e) => f.write_str(e),
            LoadConfigError::NoTarget => f.write_str("missing field `target`"),
            LoadConfigError::NoStop => f.write_str("give duration_s or requests: a load must stop by itself"),
            LoadConfigError::Steps => {
                f.write_str("steps must be a non-empty list of [rate_per_s > 0, duration_s > 0]")
            }
        }
    }
}

impl std::error::Error for LoadConfigError {}

/// The node's error line (its callers return `Result<_, String>`).
impl From<LoadConfigError> for String {
    fn from(e: LoadConfigError) -> String {
        e.to_string()
    }
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
        // The most closed-loop clients a node runs: the queueing models solve up to it.
        .constant("max_clients", MAX_CLIENTS)
        .reads::<LoadSpec>("load")
        // Required by the loads over TCP (they say so when it is missing), absent for the
        // others (slices reaches its servers through Zenoh).
        .key("load.target", Key::str())
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
    /// A load that reaches its servers by other means than a TCP target (Zenoh, UDP): the
    /// `target` and `connections` the runner writes for every system are not read.
    pub fn parse(config: &serde_json::Value) -> Result<LoadConfig, LoadConfigError> {
        Ok(Self::parse_spec(config)?.0)
    }

    /// A load over TCP connections to its `target`.
    pub fn parse_tcp(config: &serde_json::Value) -> Result<(LoadConfig, TcpTarget), LoadConfigError> {
        let (load, spec) = Self::parse_spec(config)?;
        let target = TcpTarget {
            target: spec.target.ok_or(LoadConfigError::NoTarget)?,
            connections: spec.connections,
            max_frame_bytes: spec.max_frame_bytes,
        };
        Ok((load, target))
    }

    fn parse_spec(config: &serde_json::Value) -> Result<(LoadConfig, LoadSpec), LoadConfigError> {
        let spec: LoadSpec =
            serde_json::from_value(config.clone()).map_err(|e| LoadConfigError::Json(e.to_string()))?;
        let load = LoadConfig {
            schedule: spec.schedule.clone(),
            duration_s: spec.duration_s,
            requests: spec.requests,
            timeout_ms: spec.timeout_ms,
            late_ms: spec.late_ms,
            max_outstanding: spec.max_outstanding,
            seed: spec.seed,
            warmup_s: spec.warmup_s,
            samples_path: spec.samples_path.clone(),
            histogram_path: spec.histogram_path.clone(),
            driver: spec.driver.clone(),
        };
        load.check()?;
        Ok((load, spec))
    }

    /// What the contract cannot say: a stop, and the steps' entries. Its bounds (rates,
    /// timeouts, clients, connections) are checked once, by the contract, before the parse
    /// (`describe::check`).
    fn check(&self) -> Result<(), LoadConfigError> {
        if self.duration_s.is_none()
            && self.requests.is_none()
            && !matches!(self.schedule, ScheduleConfig::Steps { .. })
        {
            return Err(LoadConfigError::NoStop);
        }
        if let ScheduleConfig::Steps { steps } = &self.schedule {
            if steps.is_empty() || steps.iter().any(|(r, d)| !positive(*r) || !positive(*d)) {
                return Err(LoadConfigError::Steps);
            }
        }
        Ok(())
    }

    /// The harness's plan of this load, with its schedule (built here, once per config: the
    /// run paces its sends with it, the progress lines read its rate, and its length bounds
    /// a run without `duration_s`); `max_in_flight` is the role's bound.
    /// The plan with the in-flight bound by the schedule: `max_outstanding` for an open one;
    /// none for a closed loop (one request in flight per client by construction).
    pub fn plan_by_schedule<P>(&self) -> Plan<P> {
        let open = !matches!(self.schedule, ScheduleConfig::Closed { .. });
        self.plan(open.then_some(self.max_outstanding))
    }

    pub fn plan<P>(&self, max_in_flight: Option<usize>) -> Plan<P> {
        let schedule = Schedule::new(&self.schedule);
        let duration_s = self.duration_s.or(schedule.as_ref().and_then(Schedule::length_s));
        let bounds = Bounds {
            duration_s,
            deadline_ns: None,
            requests: self.requests,
            max_in_flight,
        };
        Plan {
            schedule,
            pace_seed: self.seed,
            ..Plan::new(
                &self.samples_path,
                &self.histogram_path,
                self.warmup_s,
                Some(self.late_ms),
                bounds,
            )
        }
    }
}

/// True for a finite number > 0 (false for NaN).
fn positive(x: f64) -> bool {
    x.is_finite() && x > 0.0
}
