//! A framed-TCP server's counters, printed as a `stats` line every second (the lifecycle's
//! clock) for the runner's time series.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

use crate::clock;
use crate::events::Stats;

#[derive(Default)]
pub struct ServerStats {
    pub requests: AtomicU64,
    pub errors: AtomicU64,
    pub overloaded: AtomicU64,
    /// Request frames, length prefixes included.
    pub bytes_rx: AtomicU64,
    /// Reply frames and the file tails after them.
    pub bytes_tx: AtomicU64,
    pub connections: AtomicU64,
    /// Connections closed because of a malformed, truncated or oversized frame.
    pub bad_frames: AtomicU64,
    /// Connections closed on accept because `max_connections` were open.
    pub refused: AtomicU64,
    /// Connections closed by the read timeout (a frame too slow to arrive) or the write
    /// timeout (replies not taken).
    pub timed_out: AtomicU64,
}

/// The `stats` fields of every framed-TCP server beyond the common ones, then the system's.
#[derive(Serialize)]
pub struct Guarded<E: Serialize> {
    pub refused: u64,
    pub timed_out: u64,
    #[serde(flatten)]
    pub extra: E,
}

impl ServerStats {
    /// The `stats` line of these counters now, with `queue_len` requests waiting for a
    /// worker and the system's own fields.
    pub fn line<E: Serialize>(&self, queue_len: usize, extra: E) -> Stats<Guarded<E>> {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Stats {
            t_ns: clock::now_ns(),
            requests: get(&self.requests),
            errors: get(&self.errors),
            overloaded: get(&self.overloaded),
            bytes_rx: get(&self.bytes_rx),
            bytes_tx: get(&self.bytes_tx),
            connections: get(&self.connections),
            bad_frames: get(&self.bad_frames),
            queue_len: queue_len as u64,
            extra: Guarded {
                refused: get(&self.refused),
                timed_out: get(&self.timed_out),
                extra,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::NoExtra;

    #[derive(Serialize, Default)]
    struct Files {
        files_ready: bool,
    }

    #[test]
    fn the_line_has_every_counter_and_the_systems_fields_at_the_top() {
        let stats = ServerStats::default();
        stats.requests.store(10, Ordering::Relaxed);
        stats.errors.store(2, Ordering::Relaxed);
        stats.bytes_tx.store(1 << 33, Ordering::Relaxed);
        stats.connections.store(3, Ordering::Relaxed);
        let line = serde_json::to_value(stats.line(4, Files { files_ready: true })).unwrap();
        let expect = [
            ("requests", 10u64),
            ("errors", 2),
            ("overloaded", 0),
            ("bytes_rx", 0),
            ("bytes_tx", 1 << 33),
            ("connections", 3),
            ("bad_frames", 0),
            ("queue_len", 4),
            ("refused", 0),
            ("timed_out", 0),
        ];
        for (key, value) in expect {
            assert_eq!(line[key], value, "{key}");
        }
        assert_eq!(line["files_ready"], true);
        assert!(line["t_ns"].as_u64().unwrap() > 0);
        let keys = line.as_object().unwrap().len();
        assert_eq!(keys, expect.len() + 2, "{line}");
        let plain = serde_json::to_value(stats.line(0, NoExtra {})).unwrap();
        assert_eq!(plain.as_object().unwrap().len(), expect.len() + 1);
    }
}
