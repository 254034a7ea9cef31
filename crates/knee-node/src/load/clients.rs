//! A closed loop's clients as an engine on the drive loop keeps them (http's HTTP/1.1 and
//! HTTP/2 engines): when each sends next, taken when it sends, and set again after its
//! reply and think time.

use super::config::{ScheduleConfig, Think};
use crate::rng::Rng;

/// How an engine's requests come: open (they fall due on the drive loop's schedule; `Q`:
/// what it keeps of them while they wait, if anything) or closed (its clients).
pub enum Mode<Q> {
    Open(Q),
    Closed(Clients),
}

impl<Q> Mode<Q> {
    /// The schedule's mode: closed, its clients due at `start_ns`; else open, with `open`.
    pub fn new(schedule: &ScheduleConfig, start_ns: u64, open: Q) -> Mode<Q> {
        match schedule {
            ScheduleConfig::Closed {
                clients,
                think_ms,
                think,
            } => Mode::Closed(Clients::new(*clients, start_ns, *think_ms, *think)),
            _ => Mode::Open(open),
        }
    }

    /// The stop: no closed-loop client sends again.
    pub fn stop(&mut self) {
        if let Mode::Closed(clients) = self {
            clients.stop();
        }
    }

    /// Client `i`'s request is over at `now` (closed loop: see `Clients::think`).
    pub fn client_done(&mut self, i: usize, now: u64, stopping: bool, rng: &mut Rng) {
        if let Mode::Closed(clients) = self {
            clients.think(i, now, stopping, rng);
        }
    }
}

pub struct Clients {
    think_ns: f64,
    think: Think,
    /// When each client sends next (None: it is done, or its request is out).
    next_ns: Vec<Option<u64>>,
}

impl Clients {
    /// `count` clients, each due at `start_ns`, thinking `think_ms` (fixed or its mean)
    /// between a reply and the next send.
    pub fn new(count: usize, start_ns: u64, think_ms: f64, think: Think) -> Clients {
        Clients {
            think_ns: think_ms * 1e6,
            think,
            next_ns: vec![Some(start_ns); count],
        }
    }

    pub fn count(&self) -> usize {
        self.next_ns.len()
    }

    /// The stop: no client sends again.
    pub fn stop(&mut self) {
        self.next_ns.iter_mut().for_each(|n| *n = None);
    }

    /// No client will send again (none waits for a reply either: the caller counts those).
    pub fn done(&self) -> bool {
        self.next_ns.iter().all(Option::is_none)
    }

    /// The clients that send next, and when.
    pub fn pending(&self) -> impl Iterator<Item = (usize, u64)> + '_ {
        self.next_ns
            .iter()
            .enumerate()
            .filter_map(|(i, t)| t.map(|t| (i, t)))
    }

    /// Client `i`'s intended send time if it is due at `now`, its turn taken (set again by
    /// `think` when its reply is in; left unset, the client is done).
    pub fn take_due(&mut self, i: usize, now: u64) -> Option<u64> {
        let due = self.next_ns[i].filter(|&t| t <= now)?;
        self.next_ns[i] = None;
        Some(due)
    }

    /// Client `i`'s request is over at `now`: unless `stopping`, it sends again after its
    /// think time (drawn from `rng` when exponential).
    pub fn think(&mut self, i: usize, now: u64, stopping: bool, rng: &mut Rng) {
        let pause = match self.think {
            Think::Fixed => self.think_ns,
            Think::Exponential => rng.exponential(self.think_ns),
        };
        if !stopping {
            self.next_ns[i] = Some(now + pause as u64);
        }
    }
}
