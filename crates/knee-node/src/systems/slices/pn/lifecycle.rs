//! The PN's lifetime: `run` starts the threads; the main loop says hello, beats, flushes
//! the log and expires the ring until the stop; then a planned leave, the held items, and
//! the final stats.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex};
use std::time::Duration;

use serde::Serialize;
use zenoh::Wait;

use super::handoff::control_loop;
use super::intake::{subscribe, Control};
use super::{Counters, PnConfig, Shared, State};
use crate::events::{self, Stats};
use crate::serve::{Lifecycle, ServeOptions, Stop};
use crate::systems::slices::codec::{self, ToLb};
use crate::systems::slices::ledger::{Ledger, Ring, Seen};
use crate::systems::slices::pnlog::{self, PnLog, Record};
use crate::systems::slices::session::{self, Keys, Mode};
use crate::systems::slices::Throttled;
use crate::{clock, stdio};

/// Control messages waiting for the control thread (a few per heartbeat and move).
const CONTROL_INBOX: usize = 1024;
/// The main loop's longest sleep: how late a heartbeat or a stop is noticed.
const MAIN_TICK: Duration = Duration::from_millis(5);
/// A planned leave waits this long at most for its slices to move and its workers to
/// finish, well within the runner's 3 s stop grace.
const LEAVE_WAIT_NS: u64 = 2_000_000_000;
/// Acknowledged ids remembered (every PN hears every client's acks): a crash takeover
/// skips the ring items already acknowledged. 2^20 covers minutes at the report's rates.
const MAX_ACKED: usize = 1 << 20;

impl Shared {
    /// A heartbeat: the next one replaces it, so it is dropped rather than waited on.
    fn beat(&self, processed_per_s: f64) {
        let msg = codec::encode_control(&heartbeat(self, processed_per_s));
        if let Err(e) = session::put_on(&self.beats, msg) {
            stdio::log(&e);
        }
    }

    fn stats(&self, last: bool) -> Stats<PnStats> {
        let st = self.lock();
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let c = &self.c;
        Stats {
            t_ns: clock::now_ns(),
            requests: get(&c.items_rx),
            errors: get(&c.dropped_bad) + get(&c.bad_control),
            overloaded: get(&c.dropped_full),
            bytes_rx: get(&c.bytes_rx),
            bytes_tx: get(&c.bytes_tx),
            connections: 0,
            bad_frames: get(&c.dropped_bad),
            queue_len: st.queue.len() as u64,
            extra: PnStats {
                pn: self.cfg.pn,
                owned: st.ledger.owned_slices(),
                processed: get(&c.processed),
                dropped_bad: get(&c.dropped_bad),
                dropped_full: get(&c.dropped_full),
                already: get(&c.already),
                handoffs_gave: get(&c.gave),
                handoffs_sent_again: get(&c.gave_again),
                handoffs_took: get(&c.took),
                gap_items: get(&c.gaps),
                missing_asked: get(&c.missing_asked),
                forwarded: get(&c.forwarded),
                fenced: get(&c.fenced),
                released: get(&c.released),
                owed_overflow: st.ledger.owed_overflow,
                ring_items: st.ring.len() as u64,
                ring_bytes: st.ring.bytes() as u64,
                ring_spare_bytes: st.ring.spare_bytes() as u64,
                ring_evicted_full: st.ring.evicted_full,
                bad_control: get(&c.bad_control),
                threads: self.threads(),
                last,
            },
        }
    }
}

/// The PN's fields of its `stats` line.
#[derive(Serialize, Default)]
struct PnStats {
    pn: u32,
    owned: Vec<u32>,
    processed: u64,
    dropped_bad: u64,
    dropped_full: u64,
    /// Items ignored because they were already accepted (here or by an earlier owner).
    already: u64,
    handoffs_gave: u64,
    /// Handoff messages sent again because the LB gave one of their slices again (its
    /// taker never said it took it).
    handoffs_sent_again: u64,
    handoffs_took: u64,
    /// Items a taker's ring missed after a watermark (asked of the giver; the client's
    /// re-publish brings those the giver never heard).
    gap_items: u64,
    /// Items this PN, as a taker, asked its givers for (missing after their watermarks).
    missing_asked: u64,
    /// Items this PN, as a giver, forwarded to takers that missed them.
    forwarded: u64,
    fenced: u64,
    /// Queued items a leaving PN passed to its takers instead of draining them.
    released: u64,
    owed_overflow: u64,
    ring_items: u64,
    ring_bytes: u64,
    /// Buffers of items that left the ring, kept for the next ones (bounded).
    ring_spare_bytes: u64,
    ring_evicted_full: u64,
    bad_control: u64,
    threads: usize,
    #[serde(rename = "final")]
    last: bool,
}

pub fn run(opts: &ServeOptions, cfg: PnConfig) -> Result<(), String> {
    cfg.check()?;
    let keys = Keys::new(&cfg.prefix)?;
    let log = PnLog::create(&cfg.log_path)?;
    let opened = session::open(Mode::Peer, &opts.listen, &cfg.connect)?;
    let mut ledger = Ledger::new(cfg.slices);
    for &s in cfg.static_slices.iter().flatten() {
        ledger.assign(s, 1, false);
    }
    let ring = Ring::new(cfg.ring_bytes, cfg.ring_age_ms * 1_000_000);
    let beats = session::droppable_publisher(&opened.session, keys.lb())?;
    let shared = Arc::new(Shared {
        keys,
        session: opened.session,
        beats,
        state: Mutex::new(State {
            ledger,
            ring,
            queue: VecDeque::new(),
            busy: 0,
            stop_workers: false,
            leaving: false,
            acked: Seen::with_max(MAX_ACKED),
            givers: vec![None; cfg.slices as usize],
            wanted: HashMap::new(),
        }),
        work: Condvar::new(),
        log: Mutex::new(log),
        c: Counters::default(),
        bad_items: Mutex::new(Throttled::new("pn items")),
        stop: Stop::default(),
        hello_sent: AtomicBool::new(false),
        gray_dump: Mutex::new(match &cfg.gray_dump_path {
            Some(path) => Some((
                std::fs::File::create(path).map_err(|e| format!("gray_dump_path {path}: {e}"))?,
                0,
            )),
            None => None,
        }),
        cfg,
    });
    let workers: Vec<_> = (0..shared.threads())
        .map(|_| {
            let s = shared.clone();
            std::thread::Builder::new()
                .name("pn-worker".into())
                .spawn(move || s.worker())
                .map_err(|e| format!("spawning a worker: {e}"))
        })
        .collect::<Result<_, _>>()?;
    let (ctl_tx, ctl_rx) = mpsc::sync_channel::<Control>(CONTROL_INBOX);
    let s = shared.clone();
    let control = std::thread::Builder::new()
        .name("pn-control".into())
        .spawn(move || control_loop(&s, ctl_rx))
        .map_err(|e| format!("spawning the control thread: {e}"))?;
    let subs = subscribe(&shared, ctl_tx)?;
    let life = Lifecycle::ready_at(opened.endpoint, shared.stop.clone());
    let end = main_loop(&shared, life);
    {
        let mut st = shared.lock();
        st.stop_workers = true;
        shared.work.notify_all();
    }
    for w in workers {
        let _ = w.join();
    }
    log_held(&shared);
    drop(subs);
    let _ = control.join();
    events::emit(&shared.stats(true));
    let _ = shared.session.close().wait();
    end
}

/// Logs the items still queued at the stop as held (the workers have ended), and flushes.
fn log_held(shared: &Shared) {
    let now = clock::now_ns();
    let st = shared.lock();
    let mut log = shared.log.lock().unwrap_or_else(|p| p.into_inner());
    for j in &st.queue {
        log.append(&Record {
            pn: shared.cfg.pn,
            slice: j.h.slice,
            sender: j.h.sender,
            kind: pnlog::HELD,
            id: j.h.id,
            epoch: j.epoch,
            done_ns: now,
        });
    }
    log.flush(now);
    if !st.queue.is_empty() {
        stdio::log(&format!(
            "stopped with {} items queued: logged as held",
            st.queue.len()
        ));
    }
}

/// Hello, heartbeats, log flushes and ring expiry until the stop; then a planned leave.
fn main_loop(shared: &Shared, mut life: Lifecycle) -> Result<(), String> {
    let cfg = &shared.cfg;
    let balance = cfg.static_slices.is_none();
    let start_ns = clock::now_ns();
    let heartbeat_ns = cfg.heartbeat_ms * 1_000_000;
    let mut next_beat_ns = 0;
    let mut last_processed = (0u64, start_ns);
    loop {
        let now = clock::now_ns();
        if let Some(end) = life.tick(now, || shared.stats(false)) {
            if balance && shared.hello_sent.load(Ordering::Relaxed) {
                leave(shared);
            }
            return end;
        }
        let hello_sent = shared.hello_sent.load(Ordering::Relaxed);
        let heard_items = shared.c.items_rx.load(Ordering::Relaxed) > 0;
        let hello_due = now - start_ns >= cfg.hello_after_ms.saturating_mul(1_000_000);
        if balance && !hello_sent && (heard_items || hello_due) {
            shared.to_lb(&ToLb::Hello { pn: cfg.pn });
            shared.hello_sent.store(true, Ordering::Relaxed);
        }
        if balance && hello_sent && now >= next_beat_ns {
            next_beat_ns = now + heartbeat_ns;
            let processed = shared.c.processed.load(Ordering::Relaxed);
            let dt_s = (now - last_processed.1).max(1) as f64 / 1e9;
            let rate = (processed - last_processed.0) as f64 / dt_s;
            last_processed = (processed, now);
            shared.beat(rate);
        }
        {
            let mut st = shared.lock();
            st.ring.expire(now);
            st.wanted.retain(|_, &mut (_, until_ns)| until_ns > now);
        }
        shared
            .log
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .flush_if_due(now);
        std::thread::sleep(MAIN_TICK);
    }
}

fn heartbeat(shared: &Shared, processed_per_s: f64) -> ToLb {
    let st = shared.lock();
    ToLb::Heartbeat {
        pn: shared.cfg.pn,
        queue_len: (st.queue.len() + st.busy) as u64,
        processed_per_s,
        owned: st.ledger.owned_count() as u32,
    }
}

/// A planned leave: ask the LB to move every slice off, keep beating while it does, and
/// return once nothing is owned and the workers are idle (or the wait is over).
fn leave(shared: &Shared) {
    shared.lock().leaving = true;
    shared.to_lb(&ToLb::Leave { pn: shared.cfg.pn });
    let deadline = clock::now_ns() + LEAVE_WAIT_NS;
    let mut next_beat_ns = 0;
    while clock::now_ns() < deadline {
        {
            let st = shared.lock();
            if st.ledger.owned_count() == 0 && st.queue.is_empty() && st.busy == 0 {
                return;
            }
        }
        let now = clock::now_ns();
        if now >= next_beat_ns {
            next_beat_ns = now + shared.cfg.heartbeat_ms * 1_000_000;
            shared.beat(0.0);
        }
        std::thread::sleep(MAIN_TICK);
    }
    stdio::log("leaving with slices still owned or items in hand: the wait is over");
}
