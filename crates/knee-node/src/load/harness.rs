//! The load harness: what every client role shares. A role (open loop, closed loop, chat,
//! share, stream, ...) supplies its protocol through [`Role`]; the harness owns the rest:
//!
//! - the recorder: created before the start, its warm-up end set at the start, finished
//!   (flushed, histogram written) at the end, even when the role failed;
//! - the bounds: duration (or a deadline), request count, requests in flight;
//! - the stop signal: no new sends once SIGTERM/SIGINT came, and a 1 s grace for the
//!   replies in flight, timed from when the node first noticed the stop;
//! - the stdout lines (`events.rs`): `start`, a `progress` line every second (its samples
//!   flushed just before it, and pushed on a swarm task's control connection,
//!   `control::push_new`; on a thread of its own, so the role's send path never prints),
//!   and `done`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use super::recorder::Recorder;
use super::schedule::{Pacer, Schedule};
use crate::events::{self, Counts, Done, LatencySummary, Progress, Start};
use crate::{clock, signals};

/// After a stop request, how long replies already in flight are still waited for; a request
/// still unanswered then is a drop (its timeout did not pass).
pub(crate) const STOP_GRACE_NS: u64 = 1_000_000_000;
const PROGRESS_EVERY_NS: u64 = 1_000_000_000;
/// How often the progress thread looks at the clock (and notices the run's end).
const PROGRESS_TICK: Duration = Duration::from_millis(20);

/// Whether the stop grace is over at `now_ns` for a stop first seen at `seen_ns`.
fn grace_over_since(seen_ns: Option<u64>, now_ns: u64) -> bool {
    seen_ns.is_some_and(|seen| now_ns >= seen.saturating_add(STOP_GRACE_NS))
}

/// When a role stops sending. Whichever bound comes first ends it.
#[derive(Clone, Copy, Debug, Default)]
pub struct Bounds {
    /// Sending ends this long after the start.
    pub duration_s: Option<f64>,
    /// Sending ends at this monotonic time: for a bound that counts from before the start
    /// (share's counts from the process start, setup included).
    pub deadline_ns: Option<u64>,
    /// Requests the node sends in all (a retried request counts once).
    pub requests: Option<u64>,
    /// Requests in flight at once; beyond, a request is recorded as dropped instead of sent
    /// (None: the role's own shape bounds it, e.g. one per closed-loop client).
    pub max_in_flight: Option<usize>,
}

/// What the harness needs from a role before it starts.
pub struct Plan<P = events::NoExtra> {
    pub samples_path: String,
    pub histogram_path: String,
    /// Requests intended before start + warmup_s stay out of the histogram.
    pub warmup_s: f64,
    /// A send more than this behind its intended time counts in `late_sends` (None: the
    /// role's intended time is its send time, so no send is ever late).
    pub late_ms: Option<f64>,
    pub bounds: Bounds,
    /// The open-loop schedule: the run's pacing (`RunContext::pacer`) and the progress
    /// lines' `target_rate_per_s` (None: no schedule).
    pub schedule: Option<Schedule>,
    /// The load's seed, which the pacer's own draws derive from.
    pub pace_seed: u64,
    /// The system's own `progress` fields, from the counts so far and the ns since the
    /// start; called on the progress thread while the role runs (None: none).
    pub progress: Option<ProgressFields<P>>,
}

/// A role's own progress fields from (the counts so far, ns since the start).
pub type ProgressFields<P> = Box<dyn Fn(&Counts, u64) -> P + Send>;

impl<P> Plan<P> {
    /// A plan with no schedule and no system progress fields.
    pub fn new(
        samples_path: &str,
        histogram_path: &str,
        warmup_s: f64,
        late_ms: Option<f64>,
        bounds: Bounds,
    ) -> Self {
        Plan {
            samples_path: samples_path.to_string(),
            histogram_path: histogram_path.to_string(),
            warmup_s,
            late_ms,
            bounds,
            schedule: None,
            pace_seed: 0,
            progress: None,
        }
    }
}

/// A client role: the protocol one system speaks under load.
pub trait Role {
    /// The system's own fields of each `progress` line (`events::NoExtra`: none).
    type Progress: Serialize;
    /// The system's own fields of the `done` line.
    type Done: Serialize;
    /// Called once, after the role's setup (connections made, files listed) and before the
    /// start, so the start is not held up by it.
    fn plan(&self) -> Plan<Self::Progress>;
    /// Sends from `ctx.start_ns` until `ctx` says it is over, records every request in
    /// `ctx.recorder`, counts each send with `ctx.count_send`, and gives up what is in
    /// flight once `ctx.grace_over`. Returns the system's `done` fields.
    fn run(&mut self, ctx: &RunContext) -> Result<Self::Done, String>;
}

/// A role with its line types erased, as `systems::client` returns it.
pub trait ClientRole {
    fn run_in_harness(self: Box<Self>) -> Result<(), String>;
}

impl<R: Role> ClientRole for R {
    fn run_in_harness(self: Box<Self>) -> Result<(), String> {
        run(*self)
    }
}

/// What a running role is given: its start, bounds, recorder and the stop signal.
pub struct RunContext {
    /// Intended send times count from here (monotonic ns).
    pub start_ns: u64,
    pub recorder: Arc<Recorder>,
    pub bounds: Bounds,
    /// The plan's schedule (None: no open loop) and its pacer's seed.
    schedule: Option<Arc<Schedule>>,
    pace_seed: u64,
    /// Sending ends here (None: no time bound).
    end_ns: Option<u64>,
    late_ns: u64,
    last_sent_ns: AtomicU64,
    /// When the node first noticed a stop request (0: not yet).
    stop_seen_ns: AtomicU64,
}

impl RunContext {
    /// Whether a request meant for `t_ns` falls outside the time bound.
    pub fn past_end(&self, t_ns: u64) -> bool {
        self.end_ns.is_some_and(|end| t_ns >= end)
    }

    /// Whether the node may send its request number `n` (counting from 0).
    pub fn allows_request(&self, n: u64) -> bool {
        self.bounds.requests.is_none_or(|max| n < max)
    }

    /// The send times of the plan's schedule, from the first (None: the role has none).
    pub fn pacer(&self) -> Option<Pacer> {
        let schedule = self.schedule.clone()?;
        Some(Pacer::new(schedule, self.pace_seed))
    }

    /// When request number `n` (counting from 0) is due, in monotonic ns: None when the
    /// request bound, the schedule or the time bound says there is none. Every open loop
    /// paces its sends with it.
    pub fn next_due(&self, pacer: &mut Pacer, n: u64) -> Option<u64> {
        if !self.allows_request(n) {
            return None;
        }
        let due_ns = self.start_ns + pacer.next_offset_ns()?;
        (!self.past_end(due_ns)).then_some(due_ns)
    }

    /// A stop was asked (SIGTERM/SIGINT): send nothing new.
    pub fn stopping(&self) -> bool {
        self.stop_seen_ns().is_some()
    }

    /// No new sends: a stop was asked or the time is up.
    pub fn over(&self) -> bool {
        self.stopping() || self.past_end(clock::now_ns())
    }

    /// The grace after a stop request has passed: what is still in flight is given up.
    pub fn grace_over(&self, now_ns: u64) -> bool {
        grace_over_since(self.stop_seen_ns(), now_ns)
    }

    /// The grace is over after a stop request or after the time bound, whichever came
    /// first: a role that ends by itself at its duration plus the grace, whatever the
    /// target does, gives up what still waits or is in flight then (the http role).
    pub fn past_grace(&self, now_ns: u64) -> bool {
        self.grace_over(now_ns) || grace_over_since(self.end_ns, now_ns)
    }

    fn stop_seen_ns(&self) -> Option<u64> {
        let seen = self.stop_seen_ns.load(Ordering::Relaxed);
        if seen != 0 {
            return Some(seen);
        }
        if !signals::stop_requested() {
            return None;
        }
        let now = clock::now_ns();
        Some(
            match self
                .stop_seen_ns
                .compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => now,
                Err(seen) => seen,
            },
        )
    }

    /// Counts a request written to the wire: `sent`, its bytes, and a late send when it
    /// left more than `late_ms` after its intended time.
    pub fn count_send(&self, intended_ns: u64, sent_ns: u64, bytes: u64) {
        let c = &self.recorder.counters;
        c.sent.fetch_add(1, Ordering::Relaxed);
        c.bytes_tx.fetch_add(bytes, Ordering::Relaxed);
        if sent_ns.saturating_sub(intended_ns) > self.late_ns {
            c.late_sends.fetch_add(1, Ordering::Relaxed);
        }
        self.last_sent_ns.fetch_max(sent_ns, Ordering::Relaxed);
    }

    /// Counts the bytes of a request's further attempt (it was counted as sent once).
    pub fn count_resend(&self, sent_ns: u64, bytes: u64) {
        self.recorder
            .counters
            .bytes_tx
            .fetch_add(bytes, Ordering::Relaxed);
        self.last_sent_ns.fetch_max(sent_ns, Ordering::Relaxed);
    }

    /// Counts bytes received that no sample carries (stream's stray and malformed
    /// datagrams), so that `bytes_rx` is every byte received.
    pub fn count_unrecorded_rx(&self, bytes: u64) {
        self.recorder
            .counters
            .bytes_rx
            .fetch_add(bytes, Ordering::Relaxed);
    }

    /// The counts so far.
    pub fn counts(&self) -> Counts {
        self.recorder.counters.snapshot()
    }
}

#[cfg(test)]
impl RunContext {
    /// A context for a test of an engine: starting at `start_ns`, sending until `end_ns`,
    /// paced by `schedule`, its recorder in `dir`.
    pub(crate) fn for_test(
        dir: &std::path::Path,
        start_ns: u64,
        bounds: Bounds,
        end_ns: Option<u64>,
        schedule: Option<Schedule>,
    ) -> RunContext {
        std::fs::create_dir_all(dir).unwrap();
        let recorder = Recorder::create(dir.join("s.bin").to_str().unwrap()).unwrap();
        RunContext {
            start_ns,
            recorder: Arc::new(recorder),
            bounds,
            schedule: schedule.map(Arc::new),
            pace_seed: 0,
            end_ns,
            late_ns: u64::MAX,
            last_sent_ns: AtomicU64::new(0),
            stop_seen_ns: AtomicU64::new(0),
        }
    }

    /// A stop request, as if the node had first seen one at `at_ns`.
    pub(crate) fn stop_at(&self, at_ns: u64) {
        let _ = self
            .stop_seen_ns
            .compare_exchange(0, at_ns, Ordering::Relaxed, Ordering::Relaxed);
    }
}

/// Runs a role from its start to its `done` line.
pub fn run<R: Role>(mut role: R) -> Result<(), String> {
    let plan = role.plan();
    clock::tighten_timer_slack();
    let recorder = Arc::new(
        Recorder::create(&plan.samples_path).map_err(|e| format!("creating {}: {e}", plan.samples_path))?,
    );
    let target_rate_per_s = plan.schedule.as_ref().map(|s| s.rate_at(0));
    let (started, start_rx) = mpsc::channel();
    let finished = AtomicBool::new(false);
    // A replica of a Swarm service starts at the time its runner gives (KNEE_NODE_START_GATE).
    signals::wait_for_start()?;
    let (ctx, outcome) = std::thread::scope(|s| {
        // The thread exists before the start: spawning it after could make the first sends
        // late.
        let (shared, finished) = (&*recorder, &finished);
        let schedule = plan.schedule.map(Arc::new);
        let (shown, fields) = (schedule.clone(), plan.progress);
        s.spawn(move || {
            if let Ok(start_ns) = start_rx.recv() {
                progress_loop(shared, start_ns, finished, shown.as_deref(), fields.as_ref());
            }
        });
        let start_ns = clock::now_ns();
        recorder.set_warmup_end(start_ns + (plan.warmup_s * 1e9) as u64);
        events::emit(&Start { start_ns });
        let _ = started.send(start_ns);
        let bounds = plan.bounds;
        let duration_end = bounds.duration_s.map(|d| start_ns + (d * 1e9) as u64);
        let ctx = RunContext {
            start_ns,
            recorder: recorder.clone(),
            bounds,
            schedule,
            pace_seed: plan.pace_seed,
            end_ns: duration_end.into_iter().chain(bounds.deadline_ns).min(),
            late_ns: plan.late_ms.map_or(u64::MAX, |ms| (ms * 1e6) as u64),
            last_sent_ns: AtomicU64::new(0),
            stop_seen_ns: AtomicU64::new(0),
        };
        let outcome = role.run(&ctx);
        finished.store(true, Ordering::SeqCst);
        (ctx, outcome)
    });
    // Finished (samples flushed, histogram written) whatever the role's outcome.
    let latency = ctx.recorder.finish(&plan.histogram_path);
    let extra = outcome?;
    let latency: LatencySummary = latency?;
    let counts = ctx.counts();
    let start_ns = ctx.start_ns;
    let send_s = ctx.last_sent_ns.load(Ordering::Relaxed).saturating_sub(start_ns) as f64 / 1e9;
    events::emit(&Done {
        counts,
        elapsed_s: (clock::now_ns() - start_ns) as f64 / 1e9,
        achieved_rate_per_s: if send_s > 0.0 {
            counts.sent as f64 / send_s
        } else {
            0.0
        },
        target_rate_per_s,
        latency,
        extra,
    });
    Ok(())
}

fn progress_loop<P: Serialize>(
    recorder: &Recorder,
    start_ns: u64,
    finished: &AtomicBool,
    schedule: Option<&Schedule>,
    fields: Option<&ProgressFields<P>>,
) {
    let (mut last, mut last_ns) = (Counts::default(), start_ns);
    let mut next_ns = start_ns + PROGRESS_EVERY_NS;
    while !finished.load(Ordering::SeqCst) {
        std::thread::sleep(PROGRESS_TICK);
        let now = clock::now_ns();
        if now < next_ns {
            continue;
        }
        next_ns += PROGRESS_EVERY_NS;
        // Counters first, then the flush: the file then holds at least `completed` records.
        let counts = recorder.counters.snapshot();
        recorder.flush();
        // A swarm task's files go over its control connection: what they gained, before
        // the line (a task killed then keeps its samples up to it). A no-op elsewhere.
        crate::control::push_new();
        let dt_s = (now - last_ns) as f64 / 1e9;
        let offset_ns = now - start_ns;
        events::emit(&Progress {
            t_s: offset_ns as f64 / 1e9,
            counts,
            rate_per_s: (counts.completed - last.completed) as f64 / dt_s,
            sent_rate_per_s: (counts.sent - last.sent) as f64 / dt_s,
            target_rate_per_s: schedule.map(|s| s.rate_at(offset_ns)),
            p99_ns: recorder.quantile_ns(0.99),
            extra: fields.map(|f| f(&counts, offset_ns)),
        });
        (last, last_ns) = (counts, now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A context whose recorder writes in its own folder (`tag`: one per test, since the
    /// tests run in parallel and each removes its folder).
    fn context(tag: &str, late_ms: Option<f64>) -> (RunContext, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("knee-harness-{}-{tag}-{late_ms:?}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let recorder = Recorder::create(dir.join("s.bin").to_str().unwrap()).unwrap();
        let ctx = RunContext {
            start_ns: 1_000,
            recorder: Arc::new(recorder),
            bounds: Bounds {
                requests: Some(2),
                ..Bounds::default()
            },
            schedule: None,
            pace_seed: 0,
            end_ns: Some(5_000),
            late_ns: late_ms.map_or(u64::MAX, |ms| (ms * 1e6) as u64),
            last_sent_ns: AtomicU64::new(0),
            stop_seen_ns: AtomicU64::new(0),
        };
        (ctx, dir)
    }

    #[test]
    fn a_send_is_late_only_beyond_late_ms_and_a_resend_is_not_a_send() {
        let (ctx, dir) = context("late", Some(1.0));
        ctx.count_send(0, 1_000_000, 10); // exactly late_ms behind: on time
        ctx.count_send(0, 1_000_001, 10);
        ctx.count_resend(3_000_000, 10);
        let c = ctx.counts();
        assert_eq!((c.sent, c.late_sends, c.bytes_tx), (2, 1, 30));
        assert_eq!(ctx.last_sent_ns.load(Ordering::Relaxed), 3_000_000);
        let (never, dir2) = context("late", None);
        never.count_send(0, u64::MAX, 1);
        assert_eq!(never.counts().late_sends, 0);
        for d in [dir, dir2] {
            let _ = std::fs::remove_dir_all(d);
        }
    }

    #[test]
    fn replies_in_flight_are_waited_for_1_s_after_a_stop() {
        let s = 1_000_000_000;
        assert!(!grace_over_since(None, u64::MAX), "no stop, no grace to end");
        assert!(!grace_over_since(Some(5 * s), 6 * s - 1));
        assert!(grace_over_since(Some(5 * s), 6 * s));
    }

    #[test]
    fn bounds_end_sending() {
        let (ctx, dir) = context("bounds", None);
        assert!(ctx.allows_request(1) && !ctx.allows_request(2));
        assert!(!ctx.past_end(4_999) && ctx.past_end(5_000));
        assert!(!ctx.past_grace(5_000 + STOP_GRACE_NS - 1) && ctx.past_grace(5_000 + STOP_GRACE_NS));
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_progress_line_without_system_fields_has_the_common_ones_only() {
        let line = serde_json::to_value(Progress::<Option<events::NoExtra>> {
            t_s: 1.0,
            counts: Counts::default(),
            rate_per_s: 0.0,
            sent_rate_per_s: 0.0,
            target_rate_per_s: None,
            p99_ns: 0,
            extra: None,
        })
        .unwrap();
        let keys: Vec<&str> = line.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys.len(), 15, "{keys:?}");
        assert!(keys.contains(&"late_sends") && keys.contains(&"late_replies"));
    }
}
