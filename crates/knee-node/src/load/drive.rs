//! The drive loop: the one control flow of every engine that sends on a schedule (the open
//! loop of echo and matrix, slices, HTTP/1.1, HTTP/2 and gRPC). A transport says what it
//! does through [`Sender`]: send one due request, poll replies, expire, close. The loop
//! owns the rest, in one order for all:
//!
//! 1. expire: requests past their deadline are timeouts (or are sent again);
//! 2. stop: after a stop request nothing new is due;
//! 3. send what is due, one request at a time, reading what has arrived after each;
//! 4. the end: nothing more due and nothing left in flight;
//! 5. the grace: one second after a stop request (and, for a sender that ends by itself,
//!    after the time bound) what is still in flight is given up;
//! 6. wait: until just before the next send (the shared pacing), or the sender's own
//!    next time, whichever comes first.
//!
//! Latency counts from the intended send time the loop hands to `send`, and every request
//! the schedule makes due reaches `send` once: the sender records one sample for it.

use super::harness::RunContext;
use super::schedule::{pace_wait_ns, IDLE_WAIT_NS};
use crate::clock;

/// When a sender gives up what is still in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grace {
    /// One second after a stop request; else requests end by their own timeouts.
    AfterStop,
    /// Also one second after the time bound: the run ends at duration + grace whatever the
    /// target does (http, h2, grpc).
    AfterStopOrEnd,
}

/// What a transport does for the drive loop.
pub trait Sender {
    /// `expire` runs at most this often (0: on every pass of the loop).
    const EXPIRY_EVERY_NS: u64 = 0;
    /// When what is in flight is given up.
    const GRACE: Grace = Grace::AfterStop;

    /// Now, in monotonic ns (a test's sender keeps its own time).
    fn now_ns(&self) -> u64 {
        clock::now_ns()
    }
    /// Takes request `id`, due at `intended_ns`: writes it, queues it for a free connection,
    /// or records it as dropped. Either way it is recorded once, in the end.
    fn send(&mut self, id: u64, intended_ns: u64);
    /// Handles every reply that has arrived within `wait_ns` (0: what is there now).
    fn poll(&mut self, wait_ns: u64);
    /// Records the requests past their deadline at `now_ns` as timeouts (or sends them again).
    fn expire(&mut self, now_ns: u64);
    /// A stop was asked: no new request of the sender's own (closed-loop clients) either.
    fn stop(&mut self) {}
    /// Work that no due request starts: queued requests onto free connections, closed-loop
    /// clients whose think time is over, the sender's own timers.
    fn advance(&mut self, _now_ns: u64) {}
    /// Replies are awaited (the pacing spins just after a send while they are).
    fn in_flight(&self) -> bool;
    /// Nothing is left: nothing in flight, waiting, or still to send by the sender itself.
    fn done(&self) -> bool {
        !self.in_flight()
    }
    /// When the sender last wrote a request.
    fn last_sent_ns(&self) -> u64;
    /// The longest the loop may wait at `now_ns` without missing one of the sender's own
    /// times (a deadline, a connect, a timer).
    fn wake_ns(&mut self, _now_ns: u64) -> u64 {
        IDLE_WAIT_NS
    }
    /// The run ended with nothing left in flight.
    fn finish(&mut self) {}
    /// After the grace: what is in flight or waiting is recorded as dropped; connections close.
    fn close(&mut self, now_ns: u64);
}

/// Whether the grace of `grace` is over at `now_ns`.
fn grace_over(ctx: &RunContext, grace: Grace, now_ns: u64) -> bool {
    match grace {
        Grace::AfterStop => ctx.grace_over(now_ns),
        Grace::AfterStopOrEnd => ctx.past_grace(now_ns),
    }
}

/// Runs `sender` from `ctx`'s start to its end: the open loop paced by the plan's schedule
/// (`ctx.pacer()`), or, without one, only what the sender starts itself (a closed loop's
/// clients, in `advance`).
pub fn drive<S: Sender>(sender: &mut S, ctx: &RunContext) {
    let mut pacer = ctx.pacer();
    let paced = pacer.is_some();
    let mut next_id = 0;
    let mut due = pacer.as_mut().and_then(|p| ctx.next_due(p, next_id));
    let mut next_expiry_ns = 0;
    let mut stopped = false;
    loop {
        let now = sender.now_ns();
        // Checked on every pass, also while the sender is behind and sends back to back.
        if now >= next_expiry_ns {
            sender.expire(now);
            next_expiry_ns = now + S::EXPIRY_EVERY_NS;
        }
        if !stopped && ctx.stopping() {
            stopped = true;
            due = None;
            sender.stop();
        }
        if let Some(intended_ns) = due.filter(|&t| now >= t) {
            sender.send(next_id, intended_ns);
            next_id += 1;
            due = pacer.as_mut().and_then(|p| ctx.next_due(p, next_id));
            // Read what has arrived before the next send, even when behind schedule, so
            // replies never pile up unread.
            sender.poll(0);
            continue;
        }
        sender.advance(now);
        if due.is_none() && sender.done() {
            sender.finish();
            return;
        }
        let now = sender.now_ns();
        if grace_over(ctx, S::GRACE, now) {
            sender.close(now);
            return;
        }
        let mut wait_ns = sender.wake_ns(now);
        if paced {
            let pace_ns = pace_wait_ns(now, due, sender.in_flight(), sender.last_sent_ns());
            wait_ns = wait_ns.min(pace_ns);
        }
        sender.poll(wait_ns);
    }
}

#[cfg(test)]
mod tests {
    //! The drive loop with a fake sender on its own clock: every engine runs this loop, so
    //! what these tests hold (due times, deadlines, the grace, the stop, one outcome per
    //! scheduled request) holds for each of them.

    use std::collections::BTreeMap;

    use super::*;
    use crate::load::harness::{Bounds, STOP_GRACE_NS};
    use crate::load::schedule::{Schedule, ScheduleConfig};

    const MS: u64 = 1_000_000;
    const START_NS: u64 = 1_000 * MS;
    /// The fake clock's step when the loop polls without waiting.
    const TICK_NS: u64 = 1_000;

    #[derive(Debug, Clone, Copy, PartialEq)]
    enum Outcome {
        Reply,
        Timeout,
        Dropped,
    }

    /// A transport on a fake clock: a request is answered `reply_after_ns` after its send
    /// (never, if None), and times out `timeout_ns` after it.
    struct Fake<'a, const G: u8> {
        ctx: &'a RunContext,
        now_ns: u64,
        reply_after_ns: Option<u64>,
        timeout_ns: u64,
        /// id -> (intended, sent, deadline)
        flying: BTreeMap<u64, (u64, u64, u64)>,
        /// id -> (intended, sent, outcome, when)
        outcomes: BTreeMap<u64, (u64, u64, Outcome, u64)>,
        last_sent_ns: u64,
        /// Stop the run (as a signal would) once the clock reaches this.
        stop_at_ns: Option<u64>,
        finished: bool,
        closed_at_ns: Option<u64>,
    }

    impl<'a, const G: u8> Fake<'a, G> {
        fn new(ctx: &'a RunContext, reply_after_ns: Option<u64>, timeout_ns: u64) -> Self {
            Fake {
                ctx,
                now_ns: START_NS,
                reply_after_ns,
                timeout_ns,
                flying: BTreeMap::new(),
                outcomes: BTreeMap::new(),
                last_sent_ns: 0,
                stop_at_ns: None,
                finished: false,
                closed_at_ns: None,
            }
        }

        fn record(&mut self, id: u64, (intended, sent): (u64, u64), outcome: Outcome) {
            let old = self.outcomes.insert(id, (intended, sent, outcome, self.now_ns));
            assert!(old.is_none(), "request {id} recorded twice");
        }

        fn advance_clock(&mut self, by_ns: u64) {
            self.now_ns += by_ns.max(TICK_NS);
            if self.stop_at_ns.is_some_and(|t| self.now_ns >= t) {
                self.ctx.stop_at(self.stop_at_ns.unwrap_or_default());
            }
        }
    }

    impl<const G: u8> Sender for Fake<'_, G> {
        const GRACE: Grace = if G == 0 {
            Grace::AfterStop
        } else {
            Grace::AfterStopOrEnd
        };

        fn now_ns(&self) -> u64 {
            self.now_ns
        }

        fn send(&mut self, id: u64, intended_ns: u64) {
            assert!(self.now_ns >= intended_ns, "request {id} sent before it was due");
            let sent = self.now_ns;
            self.flying
                .insert(id, (intended_ns, sent, sent + self.timeout_ns));
            self.last_sent_ns = sent;
        }

        /// Replies due by the end of the wait arrive; the clock moves on by the wait.
        fn poll(&mut self, wait_ns: u64) {
            let Some(after) = self.reply_after_ns else {
                return self.advance_clock(wait_ns);
            };
            let first = self.flying.values().map(|f| f.1 + after).min();
            let by = first.map_or(wait_ns, |t| t.saturating_sub(self.now_ns).min(wait_ns));
            self.advance_clock(by);
            let now = self.now_ns;
            let answered: Vec<u64> = self
                .flying
                .iter()
                .filter(|(_, f)| f.1 + after <= now && f.2 > now)
                .map(|(&id, _)| id)
                .collect();
            for id in answered {
                let (i, s, _) = self.flying.remove(&id).unwrap();
                self.record(id, (i, s), Outcome::Reply);
            }
        }

        fn expire(&mut self, now_ns: u64) {
            let expired: Vec<u64> = self
                .flying
                .iter()
                .filter(|(_, f)| f.2 <= now_ns)
                .map(|(&id, _)| id)
                .collect();
            for id in expired {
                let (i, s, _) = self.flying.remove(&id).unwrap();
                self.record(id, (i, s), Outcome::Timeout);
            }
        }

        fn in_flight(&self) -> bool {
            !self.flying.is_empty()
        }

        fn last_sent_ns(&self) -> u64 {
            self.last_sent_ns
        }

        fn wake_ns(&mut self, now_ns: u64) -> u64 {
            let next = self.flying.values().map(|f| f.2).min();
            next.map_or(IDLE_WAIT_NS, |t| t.saturating_sub(now_ns).min(IDLE_WAIT_NS))
        }

        fn finish(&mut self) {
            self.finished = true;
        }

        fn close(&mut self, now_ns: u64) {
            self.closed_at_ns = Some(now_ns);
            let left: Vec<u64> = self.flying.keys().copied().collect();
            for id in left {
                let (i, s, _) = self.flying.remove(&id).unwrap();
                self.record(id, (i, s), Outcome::Dropped);
            }
        }
    }

    /// A context starting at `START_NS`, constant at `rate_per_s`, bounded by `requests`
    /// and `duration_ms`.
    fn context(tag: &str, rate_per_s: f64, requests: Option<u64>, duration_ms: Option<u64>) -> RunContext {
        let dir = std::env::temp_dir().join(format!("knee-drive-{}-{tag}", std::process::id()));
        let bounds = Bounds {
            requests,
            ..Bounds::default()
        };
        let end_ns = duration_ms.map(|d| START_NS + d * MS);
        let schedule = Schedule::new(&ScheduleConfig::Constant { rate_per_s });
        let ctx = RunContext::for_test(&dir, START_NS, bounds, end_ns, schedule);
        let _ = std::fs::remove_dir_all(dir); // the recorder's file is open; nothing reads it
        ctx
    }

    #[test]
    fn every_request_goes_out_at_its_due_time_and_is_recorded_once() {
        let ctx = context("due", 1000.0, Some(5), None);
        let mut fake = Fake::<0>::new(&ctx, Some(100_000), 10 * MS);
        drive(&mut fake, &ctx);
        assert!(fake.finished && fake.closed_at_ns.is_none());
        assert_eq!(fake.outcomes.len(), 5, "one outcome per scheduled request");
        for (&id, &(intended, sent, outcome, at)) in &fake.outcomes {
            assert_eq!(intended, START_NS + id * MS, "request {id}'s intended time");
            assert!(
                sent - intended <= TICK_NS,
                "request {id} sent {} ns late",
                sent - intended
            );
            assert_eq!((outcome, at), (Outcome::Reply, sent + 100_000));
        }
    }

    #[test]
    fn a_request_unanswered_by_its_deadline_is_a_timeout_then() {
        let ctx = context("deadline", 100.0, Some(3), None);
        let mut fake = Fake::<0>::new(&ctx, None, 25 * MS);
        drive(&mut fake, &ctx);
        assert!(fake.finished);
        for (&id, &(_, sent, outcome, at)) in &fake.outcomes {
            assert_eq!(outcome, Outcome::Timeout, "request {id}");
            assert!(
                at >= sent + 25 * MS && at <= sent + 25 * MS + TICK_NS,
                "request {id} at {at}"
            );
        }
        assert_eq!(fake.outcomes.len(), 3);
    }

    #[test]
    fn after_a_stop_nothing_is_sent_and_what_flies_is_dropped_at_the_grace() {
        let ctx = context("stop", 1000.0, Some(1000), None);
        let mut fake = Fake::<0>::new(&ctx, None, 60_000 * MS);
        let stop_ns = START_NS + 10 * MS + MS / 2;
        fake.stop_at_ns = Some(stop_ns);
        drive(&mut fake, &ctx);
        // Requests 0..=10 were due before the stop; none after it.
        assert_eq!(fake.outcomes.len(), 11);
        let closed = fake.closed_at_ns.expect("given up at the grace");
        assert!(closed >= stop_ns + STOP_GRACE_NS && closed <= stop_ns + STOP_GRACE_NS + IDLE_WAIT_NS);
        assert!(fake
            .outcomes
            .values()
            .all(|o| o.2 == Outcome::Dropped && o.3 == closed));
        assert!(!fake.finished);
    }

    #[test]
    fn a_sender_that_ends_by_itself_gives_up_at_the_duration_and_its_grace() {
        let end_ns = START_NS + 20 * MS;
        let ctx = context("grace-end", 1000.0, None, Some(20));
        let mut fake = Fake::<1>::new(&ctx, None, 60_000 * MS);
        drive(&mut fake, &ctx);
        assert_eq!(fake.outcomes.len(), 20, "due before the end: 0..20 ms");
        let closed = fake.closed_at_ns.expect("given up at the grace");
        assert!(closed >= end_ns + STOP_GRACE_NS && closed <= end_ns + STOP_GRACE_NS + IDLE_WAIT_NS);
        assert!(fake.outcomes.values().all(|o| o.2 == Outcome::Dropped));
        // Without it, requests end by their timeouts alone.
        let ctx = context("grace-stop", 1000.0, None, Some(20));
        let mut fake = Fake::<0>::new(&ctx, None, 2_000 * MS);
        drive(&mut fake, &ctx);
        assert!(fake.finished && fake.closed_at_ns.is_none());
        assert!(fake.outcomes.values().all(|o| o.2 == Outcome::Timeout));
    }
}
