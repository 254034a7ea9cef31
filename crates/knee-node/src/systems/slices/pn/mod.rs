//! A processing node (`serve slices`, role "pn"): every PN hears every item on
//! `P/items/*`; it processes the items of the slices it owns at their current epoch on a
//! bounded worker pool, keeps a bounded ring of the others' recent items (what it needs if
//! given one of their slices), replies on `P/replies/<sender>`, logs each processed id, and
//! tells the LB its load. The handoff rules are in `ledger.rs`; `docs/slices.md` explains
//! them.
//!
//! Threads: zenoh's receive callback decides on each item under the state lock (cheap: a
//! decode and a table look-up); a control thread handles LB and handoff messages (they
//! publish, which a zenoh callback should not block on); `threads` workers process; the
//! main thread keeps the lifecycle, the hello/heartbeats and the log flushes.

mod config;
mod handoff;
mod intake;
mod lifecycle;
mod workers;

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};

use zenoh::Session;

use super::codec::{self, ItemHeader, ToLb};
use super::ledger::{Ledger, Ring, Seen};
use super::pnlog::PnLog;
use super::session::{self, Keys};
use super::Throttled;
use crate::serve::Stop;
use crate::stdio;

pub use config::{PnConfig, MAX_GIVE_DELAY_MS, MAX_QUEUE, MAX_THREADS};
pub use lifecycle::run;

struct Job {
    h: ItemHeader,
    bytes: Vec<u8>,
    epoch: u64,
    accepted_ns: u64,
}

struct State {
    ledger: Ledger,
    ring: Ring,
    queue: VecDeque<Job>,
    busy: usize,
    /// The PN is stopping: workers end after the item in hand, control messages are ignored.
    stop_workers: bool,
    /// Set once this PN asked to leave: what it gives away then, it does not drain.
    leaving: bool,
    /// Items a client was answered for (its `Acks`, on `P/acks/*`).
    acked: Seen,
    /// Who gave this PN each slice it took by a handoff (indexed by slice): whom to ask
    /// for missing items.
    givers: Vec<Option<u32>>,
    /// As a giver: items a taker wants and this PN has not heard yet, (sender, id) ->
    /// (taker, until_ns); forwarded when heard.
    wanted: HashMap<(u32, u64), (u32, u64)>,
}

impl State {
    /// The missing items the ledger noted since the last look, by the giver to ask.
    fn wants(&mut self) -> HashMap<u32, Vec<(u32, u64)>> {
        let mut by_giver: HashMap<u32, Vec<(u32, u64)>> = HashMap::new();
        for (slice, sender, id) in self.ledger.take_missing() {
            if let Some(&Some(giver)) = self.givers.get(slice as usize) {
                by_giver.entry(giver).or_default().push((sender, id));
            }
        }
        by_giver
    }

    /// Queues an accepted item; a full queue drops it and keeps it owed.
    fn enqueue(&mut self, job: Job, queue_max: usize, c: &Counters) -> bool {
        if self.queue.len() >= queue_max {
            self.ledger.dropped(job.h.slice, job.h.sender, job.h.id);
            c.dropped_full.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        self.queue.push_back(job);
        true
    }
}

#[derive(Default)]
struct Counters {
    items_rx: AtomicU64,
    bytes_rx: AtomicU64,
    bytes_tx: AtomicU64,
    processed: AtomicU64,
    dropped_bad: AtomicU64,
    dropped_full: AtomicU64,
    already: AtomicU64,
    gave: AtomicU64,
    gave_again: AtomicU64,
    took: AtomicU64,
    gaps: AtomicU64,
    missing_asked: AtomicU64,
    forwarded: AtomicU64,
    fenced: AtomicU64,
    released: AtomicU64,
    reply_errors: AtomicU64,
    bad_control: AtomicU64,
}

struct Shared {
    cfg: PnConfig,
    keys: Keys,
    session: Session,
    /// Heartbeats, on `P/ctl/lb`.
    beats: zenoh::pubsub::Publisher<'static>,
    state: Mutex<State>,
    work: Condvar,
    log: Mutex<PnLog>,
    c: Counters,
    bad_items: Mutex<Throttled>,
    stop: Stop,
    hello_sent: AtomicBool,
    gray_dump: Mutex<Option<(std::fs::File, u32)>>,
}

impl Shared {
    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn send(&self, key: &str, bytes: Vec<u8>) {
        if let Err(e) = session::put(&self.session, key, bytes) {
            stdio::log(&e);
        }
    }

    pub(super) fn to_lb(&self, msg: &ToLb) {
        self.send(&self.keys.lb(), codec::encode_control(msg));
    }
}
