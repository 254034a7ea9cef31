//! The load generator: connects, follows an open- or closed-loop schedule, records every
//! request, prints a progress line each second and a summary at the end.

mod closed_loop;
pub mod config;
pub mod driver;
mod open_loop;
pub mod recorder;
mod schedule;

use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use config::{LoadConfig, ScheduleConfig};
use driver::DriverFactory;
use recorder::{Recorder, Sample, Status};
use schedule::Schedule;

use crate::wire::{ReplyHeader, WireStatus};
use crate::{clock, stdio};

/// Bounds of one run, in the units the loops use.
#[derive(Clone, Debug)]
pub struct Limits {
    pub start_ns: u64,
    pub end_ns: Option<u64>,
    pub requests: Option<u64>,
    pub timeout_ns: u64,
    pub late_ns: u64,
    pub max_outstanding: usize,
    pub max_frame_bytes: usize,
    pub seed: u64,
}

/// When the last request actually left, for the achieved rate.
#[derive(Default)]
pub struct SendWindow {
    pub last_sent_ns: u64,
}

const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

fn connect(target: &str, count: usize) -> Result<Vec<TcpStream>, String> {
    let addr: SocketAddr = target
        .to_socket_addrs()
        .map_err(|e| format!("target {target}: {e}"))?
        .next()
        .ok_or_else(|| format!("target {target}: no address"))?;
    (0..count)
        .map(|i| {
            let s = TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT)
                .map_err(|e| format!("connection {i} to {addr}: {e}"))?;
            s.set_nodelay(true).map_err(|e| e.to_string())?;
            Ok(s)
        })
        .collect()
}

/// The sample of a request that got a reply; the caller fills in its own times and ids.
pub(crate) fn reply_sample(
    h: &ReplyHeader,
    body: &[u8],
    factory: &dyn DriverFactory,
    op: u16,
    bytes_in: usize,
) -> Sample {
    let status = match WireStatus::from_u16(h.status) {
        Some(WireStatus::Ok) => match factory.check_reply(op, body) {
            Ok(()) => Status::Ok,
            Err(reason) => {
                stdio::log(&format!("request {}: bad reply: {reason}", h.request_id));
                Status::Error
            }
        },
        Some(WireStatus::Overloaded) => Status::Drop,
        _ => Status::Error,
    };
    Sample {
        request_id: h.request_id,
        server_ns: h.server_ns,
        queue_ns: h.queue_ns,
        service_ns: h.service_ns,
        detail_ns: h.detail_ns,
        bytes_in: bytes_in as u64,
        op,
        flags: h.flags,
        status: status as u8,
        ..Default::default()
    }
}

/// Runs a whole load: returns an error message for the runner on failure.
pub fn run(cfg: LoadConfig, factory: Arc<dyn DriverFactory>) -> Result<(), String> {
    cfg.check()?;
    clock::tighten_timer_slack();
    let schedule = Schedule::new(&cfg.schedule);
    let streams = match &cfg.schedule {
        ScheduleConfig::Closed { clients, .. } => connect(&cfg.target, *clients)?,
        _ => connect(&cfg.target, cfg.connections)?,
    };
    let recorder = Arc::new(
        Recorder::create(&cfg.samples_path).map_err(|e| format!("creating {}: {e}", cfg.samples_path))?,
    );
    let progress = Progress::spawn(&recorder, Schedule::new(&cfg.schedule));
    // The schedule starts now, after every setup step, so the first sends are not late.
    let start = progress.start(&recorder, cfg.warmup_s);
    let duration_s = cfg.duration_s.or(schedule.as_ref().and_then(Schedule::length_s));
    let limits = Limits {
        start_ns: start,
        end_ns: duration_s.map(|d| start + (d * 1e9) as u64),
        requests: cfg.requests,
        timeout_ns: (cfg.timeout_ms * 1e6) as u64,
        late_ns: (cfg.late_ms * 1e6) as u64,
        max_outstanding: cfg.max_outstanding,
        max_frame_bytes: cfg.max_frame_bytes,
        seed: cfg.seed,
    };
    let target_rate = schedule.as_ref().map(|s| s.rate_at(0));
    let window = match (&cfg.schedule, schedule) {
        (ScheduleConfig::Closed { think_ms, think, .. }, _) => {
            let params = closed_loop::ClosedLoop {
                think_ns: think_ms * 1e6,
                think: *think,
            };
            closed_loop::run(streams, &params, factory, recorder.clone(), &limits)
        }
        (_, Some(schedule)) => open_loop::run(streams, schedule, factory, recorder.clone(), &limits),
        (_, None) => unreachable!("every open-loop schedule config builds a schedule"),
    };
    progress.stop();
    let window = window?;
    let latency = recorder.finish(&cfg.histogram_path)?;
    let c = &recorder.counters;
    let get = |x: &AtomicU64| x.load(Ordering::Relaxed);
    let send_s = window.last_sent_ns.saturating_sub(start) as f64 / 1e9;
    stdio::emit(&serde_json::json!({
        "event": "done",
        "sent": get(&c.sent), "completed": c.completed(), "ok": get(&c.ok),
        "timeouts": get(&c.timeouts), "drops": get(&c.drops), "errors": get(&c.errors),
        "late": get(&c.late), "bytes_tx": get(&c.bytes_tx), "bytes_rx": get(&c.bytes_rx),
        "elapsed_s": (clock::now_ns() - start) as f64 / 1e9,
        "achieved_rate_per_s": if send_s > 0.0 { get(&c.sent) as f64 / send_s } else { 0.0 },
        "target_rate_per_s": target_rate,
        "latency": latency,
    }));
    Ok(())
}

/// A load node's progress reporter: once the schedule has started, a thread prints a
/// progress line each second from the recorder's counters and flushes the samples.
pub(crate) struct Progress {
    done: Arc<AtomicBool>,
    start_ns: Arc<AtomicU64>,
    thread: std::thread::JoinHandle<()>,
}

impl Progress {
    pub(crate) fn spawn(recorder: &Arc<Recorder>, rates: Option<Schedule>) -> Progress {
        let done = Arc::new(AtomicBool::new(false));
        let start_ns = Arc::new(AtomicU64::new(0));
        let thread = {
            let (recorder, done, start_ns) = (recorder.clone(), done.clone(), start_ns.clone());
            std::thread::spawn(move || progress_loop(&recorder, &done, &start_ns, rates))
        };
        Progress {
            done,
            start_ns,
            thread,
        }
    }

    /// Starts the schedule's clock now: sets the warm-up end, prints `start`; returns its ns.
    pub(crate) fn start(&self, recorder: &Recorder, warmup_s: f64) -> u64 {
        let start = clock::now_ns();
        self.start_ns.store(start, Ordering::SeqCst);
        recorder.set_warmup_end(start + (warmup_s * 1e9) as u64);
        stdio::emit(&serde_json::json!({"event": "start", "start_ns": start}));
        start
    }

    pub(crate) fn stop(self) {
        self.done.store(true, Ordering::SeqCst);
        let _ = self.thread.join();
    }
}

fn progress_loop(recorder: &Recorder, done: &AtomicBool, start: &AtomicU64, rates: Option<Schedule>) {
    while start.load(Ordering::SeqCst) == 0 && !done.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(1));
    }
    let start_ns = start.load(Ordering::SeqCst);
    let get = |x: &AtomicU64| x.load(Ordering::Relaxed);
    let c = &recorder.counters;
    let (mut last_completed, mut last_sent, mut last_ns) = (0, 0, start_ns);
    let mut next_ns = start_ns + 1_000_000_000;
    while !done.load(Ordering::SeqCst) {
        std::thread::sleep(Duration::from_millis(20));
        let now = clock::now_ns();
        if now < next_ns {
            continue;
        }
        next_ns += 1_000_000_000;
        // Counters first, then the flush: the file then holds at least `completed` records.
        let (completed, sent) = (c.completed(), get(&c.sent));
        recorder.flush();
        let dt_s = (now - last_ns) as f64 / 1e9;
        stdio::emit(&serde_json::json!({
            "event": "progress",
            "t_s": (now - start_ns) as f64 / 1e9,
            "sent": sent, "completed": completed, "ok": get(&c.ok), "timeouts": get(&c.timeouts),
            "drops": get(&c.drops), "errors": get(&c.errors), "late": get(&c.late),
            "bytes_tx": get(&c.bytes_tx), "bytes_rx": get(&c.bytes_rx),
            "rate_per_s": (completed - last_completed) as f64 / dt_s,
            "sent_rate_per_s": (sent - last_sent) as f64 / dt_s,
            "target_rate_per_s": rates.as_ref().map(|s| s.rate_at(now - start_ns)),
            "p99_ns": recorder.quantile_ns(0.99),
        }));
        (last_completed, last_sent, last_ns) = (completed, sent, now);
    }
}
