//! What the FrameAccessor client's `progress` and `done` lines say.

use super::accessor::Totals;
use crate::load::recorder::Recorder;
use crate::stdio;

/// Every second: counts so far (the runner shows `completed`, `rate_per_s` and `p99_ns`).
pub fn emit_progress(totals: &Totals, elapsed_ns: u64, recorder: &Recorder, rate_per_s: f64) {
    let mut line = summary(totals, elapsed_ns);
    line["event"] = "progress".into();
    line["t_s"] = (elapsed_ns as f64 / 1e9).into();
    line["rate_per_s"] = rate_per_s.into();
    line["p99_ns"] = recorder.quantile_ns(0.99).into();
    stdio::emit(&line);
}

pub(super) fn summary(t: &Totals, elapsed_ns: u64) -> serde_json::Value {
    let secs = (elapsed_ns as f64 / 1e9).max(1e-9);
    serde_json::json!({
        "sent": t.sent, "completed": t.completed(), "ok": t.ok, "timeouts": t.timeouts,
        "late_replies": t.late, "errors": t.errors, "redundant": t.redundant,
        "retransmissions": t.retransmissions, "hedged": t.hedged, "drops": 0, "late": 0,
        "stray_replies": t.stray, "bad_replies": t.bad_replies, "send_errors": t.send_errors,
        "frames": t.frames, "complete_frames": t.complete_frames, "blocks_missing": t.blocks_missing,
        "bytes_tx": t.bytes_tx, "bytes_rx": t.bytes_rx, "elapsed_s": secs,
        "frames_per_s": t.frames as f64 / secs,
        "goodput_bits_per_s": t.useful_blocks as f64 * super::datagram::BLOCK_BYTES as f64 * 8.0 / secs,
        "wire_bits_per_s": (t.bytes_tx + t.bytes_rx) as f64 * 8.0 / secs,
    })
}
