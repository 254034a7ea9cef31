//! What the FrameAccessor client adds to the harness's `progress` and `done` lines.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

use super::datagram::BLOCK_BYTES;
use crate::events::Counts;

/// The client's own counts: kept by the accessor, read by the progress thread.
#[derive(Default, Debug)]
pub struct Live {
    /// Ok replies for blocks already done (hedge losers): on the wire, not goodput.
    pub redundant: AtomicU64,
    pub useful_blocks: AtomicU64,
    pub retransmissions: AtomicU64,
    pub hedged: AtomicU64,
    /// Replies after their late window, or never asked for (not recorded).
    pub stray: AtomicU64,
    /// Datagrams that are no reply to the request they name (not recorded).
    pub bad_replies: AtomicU64,
    pub send_errors: AtomicU64,
    pub frames: AtomicU64,
    pub complete_frames: AtomicU64,
    pub blocks_missing: AtomicU64,
}

pub fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

/// stream's own fields of its `progress` and `done` lines.
#[derive(Serialize, Debug)]
pub struct StreamFields {
    pub redundant: u64,
    pub retransmissions: u64,
    pub hedged: u64,
    pub stray_replies: u64,
    pub bad_replies: u64,
    pub send_errors: u64,
    pub frames: u64,
    pub complete_frames: u64,
    pub blocks_missing: u64,
    pub frames_per_s: f64,
    /// Blocks received in time, once, x 6,144 bits.
    pub goodput_bits_per_s: f64,
    /// UDP payloads both ways, every datagram (redundant, late, stray included).
    pub wire_bits_per_s: f64,
}

impl Live {
    /// The fields at `elapsed_ns` after the start, with the harness's counts so far.
    pub fn fields(&self, counts: &Counts, elapsed_ns: u64) -> StreamFields {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let secs = (elapsed_ns as f64 / 1e9).max(1e-9);
        StreamFields {
            redundant: get(&self.redundant),
            retransmissions: get(&self.retransmissions),
            hedged: get(&self.hedged),
            stray_replies: get(&self.stray),
            bad_replies: get(&self.bad_replies),
            send_errors: get(&self.send_errors),
            frames: get(&self.frames),
            complete_frames: get(&self.complete_frames),
            blocks_missing: get(&self.blocks_missing),
            frames_per_s: get(&self.frames) as f64 / secs,
            goodput_bits_per_s: get(&self.useful_blocks) as f64 * BLOCK_BYTES as f64 * 8.0 / secs,
            wire_bits_per_s: (counts.bytes_tx + counts.bytes_rx) as f64 * 8.0 / secs,
        }
    }
}
