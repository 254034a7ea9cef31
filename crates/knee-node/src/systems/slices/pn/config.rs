//! The PN's configuration (`server.*` keys) and its bounds.

use serde::Deserialize;

pub const MAX_THREADS: usize = 256;
pub const MAX_QUEUE: usize = 1_000_000;

fn default_work_repeat() -> u32 {
    1
}
fn default_queue_max() -> usize {
    // 10,000 images of ~8 KB: 80 MB, minutes of work for a PN of a few tens of items/s.
    10_000
}
fn default_heartbeat_ms() -> u64 {
    100
}
fn default_ring_bytes() -> usize {
    64 << 20
}
fn default_ring_age_ms() -> u64 {
    5000
}
fn default_hello_after_ms() -> u64 {
    // A taker given slices before it hears the clients has no ring to replay: the items
    // after the giver's watermark are missing and only a re-publication brings them. A PN
    // that hears nothing for this long joins anyway (no client, nothing to lose).
    30_000
}

#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct PnConfig {
    pub pn: u32,
    pub slices: u32,
    /// Workers (0: the cores available to this process).
    #[serde(default)]
    pub threads: usize,
    /// The grayscale is computed this many times per item (capacity knob).
    #[serde(default = "default_work_repeat")]
    pub work_repeat: u32,
    /// Accepted items waiting for a worker; beyond, an item is dropped (and owed).
    #[serde(default = "default_queue_max")]
    pub queue_max: usize,
    pub log_path: String,
    #[serde(default = "default_heartbeat_ms")]
    pub heartbeat_ms: u64,
    pub prefix: String,
    #[serde(default)]
    pub connect: Vec<String>,
    /// The baseline: own these slices from the start, with no LB and no monitoring traffic.
    #[serde(default)]
    pub static_slices: Option<Vec<u32>>,
    /// The ring of other slices' recent items: its bounds in bytes and in age.
    #[serde(default = "default_ring_bytes")]
    pub ring_bytes: usize,
    #[serde(default = "default_ring_age_ms")]
    pub ring_age_ms: u64,
    /// The PN says hello (and may be given slices) once it receives items, or after this
    /// long without any: a taker must already hear the clients to fill its ring.
    #[serde(default = "default_hello_after_ms")]
    pub hello_after_ms: u64,
    /// Fault injection (0: none): a giver waits this long between stopping a slice and
    /// sending its handoff, so that a kill can land in the middle of a handoff.
    #[serde(default)]
    pub give_delay_ms: u64,
    /// Tests only: the first GRAY_DUMP_MAX items processed, each as u16 width, u16 height,
    /// the RGB bytes and the gray bytes, so a reference outside knee-node can check them.
    #[serde(default)]
    pub gray_dump_path: Option<String>,
    /// Tests only (0: never): items whose id is a multiple of this are answered with a
    /// wrong grayscale checksum, so a test can show that a wrong result fails the checker.
    #[serde(default)]
    pub wrong_reply_every: u64,
}

/// The longest injected handoff delay: a minute covers any test, and bounds the control
/// thread's stall.
pub const MAX_GIVE_DELAY_MS: u64 = 60_000;

impl PnConfig {
    pub fn check(&self) -> Result<(), String> {
        crate::systems::slices::check_slices(self.slices)?;
        if self.threads > MAX_THREADS {
            return Err(format!("threads must be 0..={MAX_THREADS}"));
        }
        if !(1..=MAX_QUEUE).contains(&self.queue_max) {
            return Err(format!("queue_max must be 1..={MAX_QUEUE}"));
        }
        if self.give_delay_ms > MAX_GIVE_DELAY_MS {
            return Err(format!("give_delay_ms must be 0..={MAX_GIVE_DELAY_MS}"));
        }
        if self.work_repeat == 0 || self.heartbeat_ms == 0 {
            return Err("work_repeat and heartbeat_ms must be >= 1".into());
        }
        if let Some(s) = &self.static_slices {
            if s.iter().any(|&x| x >= self.slices) {
                return Err(format!("static_slices must be below slices ({})", self.slices));
            }
        }
        Ok(())
    }
}
