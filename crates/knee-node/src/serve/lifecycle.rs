//! What every server does around its serving, whatever its transport (framed TCP in
//! `serve::run`, the stream service's UDP loop): print `ready` once it can serve, a `stats`
//! line every second, and end on the one stop path: SIGTERM/SIGINT (`signals.rs`), or a
//! failure one of its threads reports.
//!
//! A server's loop calls [`Lifecycle::tick`] at least every [`MAX_WAIT_NS`] and returns its
//! result when the tick gives one; nothing else in a server stops the process.

use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::sync::{Arc, OnceLock};

use serde::Serialize;

use crate::events::{self, Ready, Stats};
use crate::{poll, signals};

/// Between two `stats` lines.
pub const STATS_PERIOD_NS: u64 = 1_000_000_000;
/// Longest a serving loop waits before it looks at the stop flag again: how late a stop
/// is noticed, at a cost of 50 wake-ups a second.
pub const MAX_WAIT_NS: u64 = 20_000_000;

/// How a server learns it must end. Cloned into the threads that can fail it.
#[derive(Clone, Default)]
pub struct Stop {
    failure: Arc<OnceLock<String>>,
}

impl Stop {
    /// Ends the server with `reason` (its node then exits with code 2, the reason on
    /// stderr). The first reason wins.
    pub fn fail(&self, reason: String) {
        let _ = self.failure.set(reason);
    }

    /// None while the server goes on; its result once it must end.
    pub fn ended(&self) -> Option<Result<(), String>> {
        if let Some(reason) = self.failure.get() {
            return Some(Err(reason.clone()));
        }
        signals::stop_requested().then_some(Ok(()))
    }
}

/// A serving server: its stats clock and its stop.
pub struct Lifecycle {
    next_stats_ns: u64,
    stop: Stop,
}

impl Lifecycle {
    /// Prints `ready` for `addr`: call it once the server takes requests there.
    pub fn ready(addr: SocketAddr, stop: Stop) -> Self {
        Lifecycle::ready_at(addr.to_string(), stop)
    }

    /// Prints `ready` for an address that is not a socket address (slices' Zenoh
    /// endpoints, "tcp/IP:PORT").
    pub fn ready_at(addr: String, stop: Stop) -> Self {
        let ready = Ready::now(addr);
        events::emit(&ready);
        Lifecycle {
            next_stats_ns: ready.t_ns + STATS_PERIOD_NS,
            stop,
        }
    }

    /// Prints the `stats` line that `line` builds when one is due at `now_ns`; the server's
    /// result once it must end.
    pub fn tick<E: Serialize>(
        &mut self,
        now_ns: u64,
        line: impl FnOnce() -> Stats<E>,
    ) -> Option<Result<(), String>> {
        if let Some(end) = self.stop.ended() {
            return Some(end);
        }
        if self.stats_due(now_ns) {
            events::emit(&line());
        }
        None
    }

    /// Whether a `stats` line is due; the clock then moves on one period, or past `now_ns`
    /// after a stall (one line, not a burst of late ones).
    fn stats_due(&mut self, now_ns: u64) -> bool {
        if now_ns < self.next_stats_ns {
            return false;
        }
        self.next_stats_ns += STATS_PERIOD_NS;
        if self.next_stats_ns <= now_ns {
            self.next_stats_ns = now_ns + STATS_PERIOD_NS;
        }
        true
    }

    /// How long the loop may wait at `now_ns` before its next tick.
    pub fn wait_ns(&self, now_ns: u64) -> u64 {
        self.next_stats_ns.saturating_sub(now_ns).min(MAX_WAIT_NS)
    }

    /// Waits until `fd` is readable, for at most `at_most_ns` and never past the next tick;
    /// whether it is readable.
    pub fn wait_readable(&self, fd: RawFd, now_ns: u64, at_most_ns: u64) -> bool {
        let mut p = poll::readable(fd);
        let wait_ns = self.wait_ns(now_ns).min(at_most_ns);
        poll::ppoll_ns(std::slice::from_mut(&mut p), wait_ns) > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(next_stats_ns: u64) -> Lifecycle {
        Lifecycle {
            next_stats_ns,
            stop: Stop::default(),
        }
    }

    #[test]
    fn stats_are_due_once_a_period_and_a_stall_gives_one_line() {
        let mut life = at(STATS_PERIOD_NS);
        assert!(!life.stats_due(STATS_PERIOD_NS - 1));
        assert!(life.stats_due(STATS_PERIOD_NS));
        assert!(!life.stats_due(STATS_PERIOD_NS + 1));
        assert!(life.stats_due(2 * STATS_PERIOD_NS + 5));
        // Five periods late: one line now, the next a period later.
        assert!(life.stats_due(8 * STATS_PERIOD_NS));
        assert!(!life.stats_due(8 * STATS_PERIOD_NS + 1));
        assert!(life.stats_due(9 * STATS_PERIOD_NS));
    }

    #[test]
    fn the_loop_waits_until_the_next_line_and_never_past_the_stop_poll() {
        let life = at(STATS_PERIOD_NS);
        assert_eq!(life.wait_ns(0), MAX_WAIT_NS);
        assert_eq!(life.wait_ns(STATS_PERIOD_NS - 5), 5);
        assert_eq!(life.wait_ns(STATS_PERIOD_NS + 5), 0);
    }

    #[test]
    fn a_reported_failure_ends_the_server_with_its_first_reason() {
        let stop = Stop::default();
        let mut life = at(u64::MAX);
        assert_eq!(life.tick(0, Stats::<events::NoExtra>::default), None);
        stop.fail("generating the files: disk full".into());
        let other = stop.clone();
        other.fail("a later reason".into());
        let mut life = Lifecycle { stop, ..life };
        let end = life.tick(0, Stats::<events::NoExtra>::default);
        assert_eq!(end, Some(Err("generating the files: disk full".into())));
    }
}
