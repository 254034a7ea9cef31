//! The FrameAccessor client's config (`knee-node load stream`) and its bounds.

use serde::Deserialize;

pub(crate) const MAX_SERVICES: usize = 64;
pub(crate) const MAX_OUTSTANDING: usize = 1024;
pub(crate) const MAX_BLOCKS_PER_FRAME: u32 = (4096 / 16) * (4096 / 16);
pub(crate) const MAX_RETRANSMISSIONS: u32 = 100;
/// Longest block timeout: the run's end waits up to twice this for the last replies.
pub(crate) const MAX_TIMEOUT_MS: f64 = 60_000.0;

fn one() -> usize {
    1
}
pub(crate) fn default_min_rto_ms() -> f64 {
    1.0
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientConfig {
    /// The block services' addresses (one: serial; several: parallel).
    pub services: Vec<String>,
    /// Each service's index, stored in every sample (default: the position in `services`).
    #[serde(default)]
    pub service_ids: Vec<u8>,
    pub stream: u16,
    /// Blocks of one frame of `stream` (the runner knows the stream catalog).
    pub blocks_per_frame: u32,
    /// Frames to fetch, in order from `first_frame`.
    pub frames: u32,
    #[serde(default)]
    pub first_frame: u32,
    /// Requests in flight per service.
    #[serde(default = "one")]
    pub outstanding: usize,
    /// Per-block timeout (with `adaptive_timeout`: the initial and largest RTO).
    pub timeout_ms: f64,
    /// Retransmissions per block after a timeout (0: none, as in the report).
    #[serde(default)]
    pub retransmit: u32,
    /// Per-service RFC 6298 timeout instead of the fixed one.
    #[serde(default)]
    pub adaptive_timeout: bool,
    #[serde(default = "default_min_rto_ms")]
    pub min_rto_ms: f64,
    /// Send each block to two services at once; the first reply wins.
    #[serde(default)]
    pub hedge: bool,
    /// How long after its timeout a reply is still recognized as late (default: the timeout,
    /// at least 1 s); a reply after that counts as stray, its request as timed out.
    #[serde(default)]
    pub late_window_ms: Option<f64>,
    /// Stop fetching after this long.
    pub duration_s: f64,
    #[serde(default)]
    pub warmup_s: f64,
    pub samples_path: String,
    pub histogram_path: String,
}

impl ClientConfig {
    pub fn late_window_ns(&self) -> u64 {
        (self.late_window_ms.unwrap_or(self.timeout_ms.max(1000.0)) * 1e6) as u64
    }

    pub(super) fn check(&self) -> Result<(), String> {
        let n = self.services.len();
        if !(1..=MAX_SERVICES).contains(&n) {
            return Err(format!("services: give 1..={MAX_SERVICES} addresses"));
        }
        if !self.service_ids.is_empty() && self.service_ids.len() != n {
            return Err(format!(
                "service_ids: {} ids for {n} services",
                self.service_ids.len()
            ));
        }
        if self.frames == 0 || self.first_frame.checked_add(self.frames).is_none() {
            return Err("frames must be >= 1 (and first_frame + frames fit in a u32)".into());
        }
        if self.min_rto_ms > self.timeout_ms {
            return Err("min_rto_ms must be in (0, timeout_ms]".into());
        }
        if self.hedge && n < 2 {
            return Err("hedge needs at least two services".into());
        }
        Ok(())
    }
}
