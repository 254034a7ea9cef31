//! The FrameAccessor client role (`knee-node load stream`): its config, its `start`,
//! `progress` and `done` lines, and the run's bounds. The fetching itself is in
//! `accessor.rs`.

use std::net::UdpSocket;

use serde::Deserialize;

use super::accessor::{Accessor, Totals};
use crate::load::recorder::Recorder;
use crate::{clock, report};

const MAX_SERVICES: usize = 64;
const MAX_OUTSTANDING: usize = 1024;
const MAX_BLOCKS_PER_FRAME: u32 = (4096 / 16) * (4096 / 16);
const MAX_RETRANSMISSIONS: u32 = 100;
/// Longest block timeout: the run's end waits up to twice this for the last replies.
const MAX_TIMEOUT_MS: f64 = 60_000.0;

fn one() -> usize {
    1
}
fn default_min_rto_ms() -> f64 {
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

    fn check(&self) -> Result<(), String> {
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
        if !(1..=MAX_BLOCKS_PER_FRAME).contains(&self.blocks_per_frame) {
            return Err(format!("blocks_per_frame must be 1..={MAX_BLOCKS_PER_FRAME}"));
        }
        if self.frames == 0 || self.first_frame.checked_add(self.frames).is_none() {
            return Err("frames must be >= 1 (and first_frame + frames fit in a u32)".into());
        }
        if !(1..=MAX_OUTSTANDING).contains(&self.outstanding) {
            return Err(format!("outstanding must be 1..={MAX_OUTSTANDING}"));
        }
        if !(self.timeout_ms > 0.0 && self.timeout_ms <= MAX_TIMEOUT_MS) {
            return Err(format!("timeout_ms must be in (0, {MAX_TIMEOUT_MS}]"));
        }
        if !(self.min_rto_ms > 0.0 && self.min_rto_ms <= self.timeout_ms) {
            return Err("min_rto_ms must be in (0, timeout_ms]".into());
        }
        if self
            .late_window_ms
            .is_some_and(|w| !(0.0..=MAX_TIMEOUT_MS).contains(&w))
        {
            return Err(format!("late_window_ms must be in [0, {MAX_TIMEOUT_MS}]"));
        }
        if self.retransmit > MAX_RETRANSMISSIONS {
            return Err(format!("retransmit must be <= {MAX_RETRANSMISSIONS}"));
        }
        if self.hedge && n < 2 {
            return Err("hedge needs at least two services".into());
        }
        if !(self.duration_s > 0.0 && self.duration_s.is_finite()) {
            return Err("duration_s must be > 0: a load must stop by itself".into());
        }
        Ok(())
    }
}

pub fn run(config: &serde_json::Value) -> Result<(), String> {
    let cfg: ClientConfig =
        serde_json::from_value(config.clone()).map_err(|e| format!("load config: {e}"))?;
    cfg.check().map_err(|e| format!("load config: {e}"))?;
    let sockets = cfg
        .services
        .iter()
        .map(|addr| {
            // One connected socket per service: the kernel keeps other senders' datagrams out.
            let s = UdpSocket::bind("127.0.0.1:0").map_err(|e| format!("binding a socket: {e}"))?;
            s.connect(addr).map_err(|e| format!("service {addr}: {e}"))?;
            s.set_nonblocking(true).map_err(|e| e.to_string())?;
            Ok(s)
        })
        .collect::<Result<Vec<_>, String>>()?;
    let recorder =
        Recorder::create(&cfg.samples_path).map_err(|e| format!("creating {}: {e}", cfg.samples_path))?;
    clock::tighten_timer_slack();
    let start_ns = clock::now_ns();
    recorder.set_warmup_end(start_ns + (cfg.warmup_s * 1e9) as u64);
    report::emit(&serde_json::json!({"event": "start", "start_ns": start_ns}));
    let mut accessor = Accessor::new(&cfg, sockets, &recorder, start_ns);
    accessor.run();
    let totals = accessor.totals();
    let latency = recorder.finish(&cfg.histogram_path)?;
    let mut done = summary(&totals, clock::now_ns() - start_ns);
    done["event"] = "done".into();
    done["latency"] = latency;
    report::emit(&done);
    Ok(())
}

/// Every second: counts so far (the runner shows `completed`, `rate_per_s` and `p99_ns`).
pub fn emit_progress(totals: &Totals, elapsed_ns: u64, recorder: &Recorder, rate_per_s: f64) {
    let mut line = summary(totals, elapsed_ns);
    line["event"] = "progress".into();
    line["t_s"] = (elapsed_ns as f64 / 1e9).into();
    line["rate_per_s"] = rate_per_s.into();
    line["p99_ns"] = recorder.quantile_ns(0.99).into();
    report::emit(&line);
}

fn summary(t: &Totals, elapsed_ns: u64) -> serde_json::Value {
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
