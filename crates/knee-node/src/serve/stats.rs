//! Server counters, printed as a `stats` JSON line every second for the runner's time series.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::pool::Pool;
use crate::{clock, stdio};

#[derive(Default)]
pub struct ServerStats {
    pub requests: AtomicU64,
    pub errors: AtomicU64,
    pub overloaded: AtomicU64,
    pub bytes_rx: AtomicU64,
    pub bytes_tx: AtomicU64,
    pub connections: AtomicU64,
    /// Connections closed because of a malformed, truncated or oversized frame.
    pub bad_frames: AtomicU64,
}

pub(super) fn spawn_reporter(stats: Arc<ServerStats>, pool: Option<Arc<Pool>>) {
    std::thread::spawn(move || loop {
        std::thread::sleep(Duration::from_secs(1));
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        stdio::emit(&serde_json::json!({
            "event": "stats",
            "t_ns": clock::now_ns(),
            "requests": get(&stats.requests),
            "errors": get(&stats.errors),
            "overloaded": get(&stats.overloaded),
            "bytes_rx": get(&stats.bytes_rx),
            "bytes_tx": get(&stats.bytes_tx),
            "connections": get(&stats.connections),
            "bad_frames": get(&stats.bad_frames),
            "queue_len": pool.as_ref().map_or(0, |p| p.len()),
        }));
    });
}
