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

use std::collections::{HashMap, HashSet, VecDeque};
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use zenoh::{Session, Wait};

use super::codec::{
    self, CheckedHandoff, Handoff, HandoffBuilder, HandoffSlice, ItemHeader, Reply, SliceEpoch, SliceRuns,
    ToLb, ToPn, Took,
};
use super::gray;
use super::ledger::{gap_items, Ledger, Ring, RingItem, Seen, Verdict};
use super::pnlog::{self, PnLog, Record};
use super::session::{self, Keys, Mode};
use super::Throttled;
use crate::events::{self, Stats};
use crate::serve::{Lifecycle, ServeOptions, Stop};
use crate::{clock, stdio};

/// Control messages waiting for the control thread (a few per heartbeat and move).
const CONTROL_INBOX: usize = 1024;
pub const MAX_THREADS: usize = 256;
pub const MAX_QUEUE: usize = 1_000_000;
/// The main loop's longest sleep: how late a heartbeat or a stop is noticed.
const MAIN_TICK: Duration = Duration::from_millis(5);
/// A planned leave waits this long at most for its slices to move and its workers to
/// finish, well within the runner's 3 s stop grace.
const LEAVE_WAIT_NS: u64 = 2_000_000_000;
/// Acknowledged ids remembered (every PN hears every client's acks): a crash takeover
/// skips the ring items already acknowledged. 2^20 covers minutes at the report's rates.
const MAX_ACKED: usize = 1 << 20;
/// Items a giver waits to hear for a taker that missed them (each for the ring's age at
/// most); beyond, a want is not kept and the client's re-publish is the only way back.
const MAX_WANTED: usize = 1 << 16;

fn default_work_repeat() -> u32 {
    1
}
fn default_queue_max() -> usize {
    // 10,000 images of ~8 KB: 80 MB, minutes of work for a PN of a few tens of items/s.
    10_000
}
fn default_heartbeat_ms() -> u64 {
    100
}
fn default_ring_bytes() -> usize {
    64 << 20
}
fn default_ring_age_ms() -> u64 {
    5000
}
fn default_hello_after_ms() -> u64 {
    // A taker given slices before it hears the clients has no ring to replay: the items
    // after the giver's watermark are missing and only a re-publication brings them. A PN
    // that hears nothing for this long joins anyway (no client, nothing to lose).
    30_000
}

#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct PnConfig {
    pub pn: u32,
    pub slices: u32,
    /// Workers (0: the cores available to this process).
    #[serde(default)]
    pub threads: usize,
    /// The grayscale is computed this many times per item (capacity knob).
    #[serde(default = "default_work_repeat")]
    pub work_repeat: u32,
    /// Accepted items waiting for a worker; beyond, an item is dropped (and owed).
    #[serde(default = "default_queue_max")]
    pub queue_max: usize,
    pub log_path: String,
    #[serde(default = "default_heartbeat_ms")]
    pub heartbeat_ms: u64,
    pub prefix: String,
    #[serde(default)]
    pub connect: Vec<String>,
    /// The baseline: own these slices from the start, with no LB and no monitoring traffic.
    #[serde(default)]
    pub static_slices: Option<Vec<u32>>,
    /// The ring of other slices' recent items: its bounds in bytes and in age.
    #[serde(default = "default_ring_bytes")]
    pub ring_bytes: usize,
    #[serde(default = "default_ring_age_ms")]
    pub ring_age_ms: u64,
    /// The PN says hello (and may be given slices) once it receives items, or after this
    /// long without any: a taker must already hear the clients to fill its ring.
    #[serde(default = "default_hello_after_ms")]
    pub hello_after_ms: u64,
    /// Fault injection (0: none): a giver waits this long between stopping a slice and
    /// sending its handoff, so that a kill can land in the middle of a handoff.
    #[serde(default)]
    pub give_delay_ms: u64,
    /// Tests only: the first GRAY_DUMP_MAX items processed, each as u16 width, u16 height,
    /// the RGB bytes and the gray bytes, so a reference outside knee-node can check them.
    #[serde(default)]
    pub gray_dump_path: Option<String>,
}

/// The longest injected handoff delay: a minute covers any test, and bounds the control
/// thread's stall.
pub const MAX_GIVE_DELAY_MS: u64 = 60_000;
/// Items a gray dump holds at most: enough to check the arithmetic, bounded on disk.
const GRAY_DUMP_MAX: u32 = 64;

impl PnConfig {
    pub fn check(&self) -> Result<(), String> {
        super::check_slices(self.slices)?;
        if self.threads > MAX_THREADS {
            return Err(format!("threads must be 0..={MAX_THREADS}"));
        }
        if !(1..=MAX_QUEUE).contains(&self.queue_max) {
            return Err(format!("queue_max must be 1..={MAX_QUEUE}"));
        }
        if self.give_delay_ms > MAX_GIVE_DELAY_MS {
            return Err(format!("give_delay_ms must be 0..={MAX_GIVE_DELAY_MS}"));
        }
        if self.work_repeat == 0 || self.heartbeat_ms == 0 {
            return Err("work_repeat and heartbeat_ms must be >= 1".into());
        }
        if let Some(s) = &self.static_slices {
            if s.iter().any(|&x| x >= self.slices) {
                return Err(format!("static_slices must be below slices ({})", self.slices));
            }
        }
        Ok(())
    }
}

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
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn job(&self, h: ItemHeader, bytes: Vec<u8>, epoch: u64) -> Job {
        Job {
            h,
            bytes,
            epoch,
            accepted_ns: clock::now_ns(),
        }
    }

    /// Tests only (`gray_dump_path`): appends the item's image and its grayscale.
    fn dump_gray(&self, h: &ItemHeader, image: &[u8], gray_out: &[u8]) {
        let mut dump = self.gray_dump.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((file, written)) = dump.as_mut() {
            if *written < GRAY_DUMP_MAX {
                *written += 1;
                let mut record = Vec::with_capacity(4 + image.len() + gray_out.len());
                record.extend_from_slice(&h.width.to_le_bytes());
                record.extend_from_slice(&h.height.to_le_bytes());
                record.extend_from_slice(image);
                record.extend_from_slice(gray_out);
                if let Err(e) = file.write_all(&record) {
                    stdio::log(&format!("gray dump: {e}"));
                }
            }
        }
    }

    /// An item from the network: decided under the lock.
    fn on_item(&self, bytes: &[u8]) {
        let c = &self.c;
        c.items_rx.fetch_add(1, Ordering::Relaxed);
        c.bytes_rx.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        let h = match ItemHeader::decode(bytes, self.cfg.slices) {
            Ok(h) => h,
            Err(why) => {
                c.dropped_bad.fetch_add(1, Ordering::Relaxed);
                self.bad_items
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .note(&why);
                return;
            }
        };
        let mut st = self.lock();
        if self.cfg.static_slices.is_none() {
            for id in h.acked(bytes) {
                st.acked.insert((h.sender, id));
            }
        }
        match st.ledger.decide(h.slice, h.sender, h.id) {
            Verdict::Accept => {
                let epoch = st.ledger.epoch(h.slice);
                let job = self.job(h, bytes.to_vec(), epoch);
                if st.enqueue(job, self.cfg.queue_max, c) {
                    self.work.notify_one();
                }
                let wants = st.wants();
                drop(st);
                self.ask(wants);
            }
            Verdict::NotOwned => {
                // A taker missed it: it goes to the taker too (and stays in the ring).
                let taker = if st.wanted.is_empty() {
                    None
                } else {
                    st.wanted.remove(&(h.sender, h.id)).map(|(taker, _)| taker)
                };
                if self.cfg.static_slices.is_none() {
                    let copy = st.ring.copy_of(bytes);
                    st.ring.push(RingItem {
                        slice: h.slice,
                        sender: h.sender,
                        id: h.id,
                        arrived_ns: clock::now_ns(),
                        bytes: copy,
                    });
                }
                drop(st);
                if let Some(taker) = taker {
                    self.forward(taker, vec![bytes.to_vec()]);
                }
            }
            Verdict::Already => {
                c.already.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// A client's acks that no item of its carried in time: the ids it was answered for
    /// (a crash takeover does none of them again).
    fn on_acks(&self, bytes: &[u8]) {
        match codec::Acks::decode(bytes) {
            Ok(a) => {
                let mut st = self.lock();
                for id in a.ids {
                    st.acked.insert((a.sender, id));
                }
            }
            Err(why) => {
                self.c.dropped_bad.fetch_add(1, Ordering::Relaxed);
                self.bad_items
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .note(&format!("acks: {why}"));
            }
        }
    }

    fn send(&self, key: &str, bytes: Vec<u8>) {
        if let Err(e) = session::put(&self.session, key, bytes) {
            stdio::log(&e);
        }
    }

    /// Asks each giver for the items of its slices this PN missed.
    fn ask(&self, wants: HashMap<u32, Vec<(u32, u64)>>) {
        for (giver, items) in wants {
            self.c
                .missing_asked
                .fetch_add(items.len() as u64, Ordering::Relaxed);
            let msg = ToPn::Want {
                from: self.cfg.pn,
                items,
            };
            self.send(&self.keys.pn(giver), codec::encode_control(&msg));
        }
    }

    /// A taker's want: the ring's copies, to forward now; the rest is kept to forward when
    /// heard (for the ring's age, the longest this PN keeps an item it does not own).
    fn on_want(&self, st: &mut State, taker: u32, items: Vec<(u32, u64)>) -> Vec<Vec<u8>> {
        let wanted: HashSet<(u32, u64)> = items.into_iter().collect();
        let found = st.ring.copies_of(&wanted);
        let until_ns = clock::now_ns() + self.cfg.ring_age_ms * 1_000_000;
        let have: HashSet<(u32, u64)> = found.iter().map(|i| (i.sender, i.id)).collect();
        for key in wanted.difference(&have) {
            if st.wanted.len() >= MAX_WANTED {
                break;
            }
            st.wanted.insert(*key, (taker, until_ns));
        }
        found.into_iter().map(|i| i.bytes).collect()
    }

    /// Items to a taker that missed them, on its `P/fwd/<taker>`.
    fn forward(&self, taker: u32, items: Vec<Vec<u8>>) {
        for bytes in items {
            self.c.forwarded.fetch_add(1, Ordering::Relaxed);
            self.send(&self.keys.fwd(taker), bytes);
        }
    }

    fn to_lb(&self, msg: &ToLb) {
        self.send(&self.keys.lb(), codec::encode_control(msg));
    }

    /// A heartbeat: the next one replaces it, so it is dropped rather than waited on.
    fn beat(&self, processed_per_s: f64) {
        let msg = codec::encode_control(&heartbeat(self, processed_per_s));
        if let Err(e) = session::put_on(&self.beats, msg) {
            stdio::log(&e);
        }
    }

    fn on_control(&self, msg: ToPn, handed: &mut Handed, tooks: &mut Tooks) {
        let mut st = self.lock();
        // Stopping: a late revoke or give must not take away what is about to be logged as
        // held (the LB calls a stopped PN crashed and moves its slices on by itself).
        if st.stop_workers {
            return;
        }
        match msg {
            ToPn::Assign { slices, crash } => {
                let newly: SliceRuns = slices
                    .iter()
                    .filter(|&(s, e)| st.ledger.assign(s, e, crash))
                    .collect();
                let (t_ns, firsts) = self.replay(&mut st, &newly, false);
                let took = newly
                    .iter()
                    .map(|(slice, epoch)| Took {
                        slice,
                        epoch,
                        giver_last_id: None,
                        taker_first_id: first_of(&firsts, slice),
                    })
                    .collect();
                tooks.push(t_ns, took);
            }
            ToPn::Give { to, slices } => {
                // A leaving giver does not drain: its queued items of the slices it gives
                // go to the taker as owed (`release`).
                let released = if st.leaving {
                    self.release(&mut st, &slices)
                } else {
                    HashMap::new()
                };
                let mut handoff = HandoffBuilder::new(self.cfg.pn);
                let mut again = Vec::new();
                for (s, e) in slices.iter() {
                    let owed = released.get(&s).map_or(&[][..], Vec::as_slice);
                    if !st.ledger.give(s, e, owed, &mut handoff) {
                        // The LB gives again when the taker never said it took the slice.
                        again.push((s, e));
                    }
                }
                drop(st);
                let gave = handoff.len();
                let handoff = handoff.finish();
                let given = handoff.slices.clone();
                let sent = (gave > 0).then(|| Arc::new(codec::encode_control(&handoff)));
                let resent = handed.again(&again);
                if sent.is_none() && resent.is_empty() {
                    return;
                }
                self.c.gave.fetch_add(gave as u64, Ordering::Relaxed);
                self.c
                    .gave_again
                    .fetch_add(resent.len() as u64, Ordering::Relaxed);
                if self.cfg.give_delay_ms > 0 {
                    std::thread::sleep(Duration::from_millis(self.cfg.give_delay_ms));
                }
                let key = self.keys.handoff(to);
                for bytes in sent.iter().chain(&resent) {
                    self.send(&key, bytes.to_vec());
                }
                // Kept after the send, off the join's path: what to send again.
                if let Some(bytes) = sent {
                    handed.keep(&given, &bytes);
                }
            }
            ToPn::Revoke { slices } => {
                let gone: HashSet<u32> = slices
                    .iter()
                    .filter(|&(s, e)| st.ledger.revoke(s, e))
                    .map(|(s, _)| s)
                    .collect();
                // Fenced: queued items of a slice that moved on are not processed here.
                let before = st.queue.len();
                st.queue.retain(|j| !gone.contains(&j.h.slice));
                let fenced = (before - st.queue.len()) as u64;
                self.c.fenced.fetch_add(fenced, Ordering::Relaxed);
            }
            ToPn::Want { from, items } => {
                let found = self.on_want(&mut st, from, items);
                drop(st);
                self.forward(from, found);
            }
        }
    }

    /// A leaving giver does not drain: its queued items of the slices it gives now (owned
    /// below the give's epoch) become owed to the taker (which finds them in its ring, or
    /// gets them re-published), so it can exit within the stop grace. By slice, sorted.
    fn release(&self, st: &mut State, slices: &SliceRuns) -> HashMap<u32, Vec<(u32, u64)>> {
        let mut giving = vec![false; self.cfg.slices as usize];
        for (s, e) in slices.iter() {
            if st.ledger.owned(s) && st.ledger.epoch(s) < e {
                if let Some(g) = giving.get_mut(s as usize) {
                    *g = true;
                }
            }
        }
        let mut released: HashMap<u32, Vec<(u32, u64)>> = HashMap::new();
        let mut kept = VecDeque::with_capacity(st.queue.len());
        for j in st.queue.drain(..) {
            if giving.get(j.h.slice as usize).copied().unwrap_or(false) {
                released.entry(j.h.slice).or_default().push((j.h.sender, j.h.id));
                self.c.released.fetch_add(1, Ordering::Relaxed);
            } else {
                kept.push_back(j);
            }
        }
        st.queue = kept;
        for owed in released.values_mut() {
            owed.sort_unstable();
        }
        released
    }

    /// A giver's handoff. Until the slices are owned and their ring items queued (the
    /// `took`'s time), nothing per slice is written but the ledger's own state: the
    /// `Took`s are made afterwards (at 500 slices, fresh vectors of them cost more than
    /// the take itself, in cache misses).
    fn on_handoff(&self, h: CheckedHandoff, tooks: &mut Tooks) {
        let mut st = self.lock();
        let mut taken = SliceRuns::new();
        let mut was_taken = Vec::with_capacity(h.len());
        for hs in h.iter() {
            let (slice, epoch) = (hs.slice, hs.epoch);
            let took = st.ledger.take(hs);
            if took {
                taken.push(slice, epoch);
                if let Some(g) = st.givers.get_mut(slice as usize) {
                    *g = Some(h.from);
                }
            }
            was_taken.push(took);
        }
        let (t_ns, firsts) = self.replay(&mut st, &taken, true);
        let mut took = Vec::with_capacity(h.len());
        for (hs, taken) in h.iter().zip(was_taken) {
            let (slice, epoch) = (hs.slice, hs.epoch);
            if taken {
                took.push(Took {
                    slice,
                    epoch,
                    giver_last_id: hs.watermark.iter().map(|&(_, id)| id).max(),
                    taker_first_id: first_of(&firsts, slice),
                });
            } else if st.ledger.owned(slice) && st.ledger.epoch(slice) == epoch {
                // A handoff sent again: taken before, so only the LB is told again.
                took.push(Took {
                    slice,
                    epoch,
                    giver_last_id: None,
                    taker_first_id: None,
                });
            }
        }
        let wants = st.wants();
        drop(st);
        tooks.push(t_ns, took);
        self.ask(wants);
    }

    /// Newly owned slices: their ring items, in id order per sender, go through the
    /// ledger (those above the watermark, or owed, are accepted). After a handoff
    /// (`by_handoff`), the ids missing between each sender's watermark and its first ring
    /// item above it are counted as gaps. Returns when the slices were owned with their
    /// ring items queued (the `took`'s time), and the first id accepted from the ring of
    /// each slice that had one, by slice.
    fn replay(&self, st: &mut State, slices: &SliceRuns, by_handoff: bool) -> (u64, Vec<(u32, u64)>) {
        let mut marked = vec![false; self.cfg.slices as usize];
        for (s, _) in slices.iter() {
            if let Some(m) = marked.get_mut(s as usize) {
                *m = true;
            }
        }
        let items = st.ring.take(&marked);
        let mut firsts: Vec<(u32, u64)> = Vec::new();
        // Items come in (slice, sender, id) order: the first one above a sender's
        // watermark is the first of its run past it. Until then the watermark is the
        // giver's (ids at or below it leave it as it is).
        let mut gap_done: Option<(u32, u32)> = None;
        let mut gap = 0;
        let mut queued = false;
        for item in items {
            let run = Some((item.slice, item.sender));
            if by_handoff && gap_done != run {
                if let Some(w) = st.ledger.watermark(item.slice, item.sender) {
                    if item.id > w {
                        gap += gap_items(w, item.id, self.cfg.slices);
                        gap_done = run;
                    }
                }
            }
            // Acknowledged already (by a PN that crashed since): not to be done again.
            if st.acked.contains(&(item.sender, item.id)) {
                continue;
            }
            if st.ledger.decide(item.slice, item.sender, item.id) != Verdict::Accept {
                continue;
            }
            if firsts.last().map(|&(s, _)| s) != Some(item.slice) {
                firsts.push((item.slice, item.id));
            }
            let Ok(h) = ItemHeader::decode(&item.bytes, self.cfg.slices) else {
                continue;
            };
            let epoch = st.ledger.epoch(item.slice);
            let job = self.job(h, item.bytes, epoch);
            queued |= st.enqueue(job, self.cfg.queue_max, &self.c);
        }
        if queued {
            self.work.notify_all();
        }
        let t_ns = clock::now_ns();
        self.c.gaps.fetch_add(gap, Ordering::Relaxed);
        self.c.took.fetch_add(slices.len() as u64, Ordering::Relaxed);
        (t_ns, firsts)
    }

    /// Tells the LB which slices are owned here, and since when.
    fn send_tooks(&self, tooks: &mut Tooks) {
        for (t_ns, slices) in tooks.0.drain(..) {
            if !slices.is_empty() && self.cfg.static_slices.is_none() {
                self.to_lb(&ToLb::Took {
                    pn: self.cfg.pn,
                    t_ns,
                    slices,
                });
            }
        }
    }

    fn worker(&self) {
        let mut gray_out = Vec::new();
        let mut reply = Vec::with_capacity(codec::REPLY_HEADER_BYTES + 8);
        loop {
            let job = {
                let mut st = self.lock();
                loop {
                    // At the stop, what is still queued stays there and is logged as held:
                    // past capacity, draining it could take minutes.
                    if st.stop_workers {
                        return;
                    }
                    if let Some(j) = st.queue.pop_front() {
                        st.busy += 1;
                        break j;
                    }
                    st = self.work.wait(st).unwrap_or_else(|p| p.into_inner());
                }
            };
            let start_ns = clock::now_ns();
            let image = job.h.image(&job.bytes);
            let checksum = gray::work_repeat(image, self.cfg.work_repeat, &mut gray_out);
            let done_ns = clock::now_ns();
            let h = &job.h;
            self.dump_gray(h, image, &gray_out);
            self.log
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .append(&Record {
                    pn: self.cfg.pn,
                    slice: h.slice,
                    sender: h.sender,
                    kind: pnlog::PROCESSED,
                    id: h.id,
                    epoch: job.epoch,
                    done_ns,
                });
            reply.clear();
            Reply {
                sender: h.sender,
                pn: self.cfg.pn,
                id: h.id,
                slice: h.slice,
                epoch: job.epoch,
                timestamp_ns: h.timestamp_ns,
                queue_ns: start_ns.saturating_sub(job.accepted_ns),
                service_ns: done_ns - start_ns,
                gray_checksum: checksum,
            }
            .encode(&mut reply);
            self.c.bytes_tx.fetch_add(reply.len() as u64, Ordering::Relaxed);
            if let Err(e) = session::put(&self.session, &self.keys.replies(h.sender), reply.clone()) {
                self.c.reply_errors.fetch_add(1, Ordering::Relaxed);
                stdio::log(&e);
            }
            self.c.processed.fetch_add(1, Ordering::Relaxed);
            self.lock().busy -= 1;
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

    fn threads(&self) -> usize {
        if self.cfg.threads > 0 {
            self.cfg.threads
        } else {
            available_cores()
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

enum Control {
    Pn(Vec<u8>),
    Handoff(Vec<u8>),
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

type Subscriber = zenoh::pubsub::Subscriber<()>;

fn subscribe(shared: &Arc<Shared>, ctl: mpsc::SyncSender<Control>) -> Result<Vec<Subscriber>, String> {
    let sub = |key: String, f: Box<dyn Fn(Vec<u8>) + Send + Sync>| {
        shared
            .session
            .declare_subscriber(key.clone())
            .callback(move |sample| f(sample.payload().to_bytes().into_owned()))
            .wait()
            .map_err(|e| format!("subscribing to {key}: {e}"))
    };
    let s = shared.clone();
    let items = shared
        .session
        .declare_subscriber(shared.keys.items())
        .callback(move |sample| s.on_item(&sample.payload().to_bytes()))
        .wait()
        .map_err(|e| format!("subscribing to items: {e}"))?;
    let s = shared.clone();
    let acks = shared
        .session
        .declare_subscriber(shared.keys.all_acks())
        .callback(move |sample| s.on_acks(&sample.payload().to_bytes()))
        .wait()
        .map_err(|e| format!("subscribing to acks: {e}"))?;
    let tx = ctl.clone();
    let pn = sub(
        shared.keys.pn(shared.cfg.pn),
        Box::new(move |b| {
            let _ = tx.send(Control::Pn(b));
        }),
    )?;
    let handoff = sub(
        shared.keys.handoff(shared.cfg.pn),
        Box::new(move |b| {
            let _ = ctl.send(Control::Handoff(b));
        }),
    )?;
    let s = shared.clone();
    let forwarded = shared
        .session
        .declare_subscriber(shared.keys.fwd(shared.cfg.pn))
        .callback(move |sample| s.on_item(&sample.payload().to_bytes()))
        .wait()
        .map_err(|e| format!("subscribing to forwarded items: {e}"))?;
    let mut subs = vec![items, pn, handoff];
    if shared.cfg.static_slices.is_none() {
        subs.push(acks);
        subs.push(forwarded);
    }
    Ok(subs)
}

/// The first id accepted from the ring of `slice` (`replay`'s list, by slice).
fn first_of(firsts: &[(u32, u64)], slice: u32) -> Option<u64> {
    let at = firsts.binary_search_by_key(&slice, |&(s, _)| s).ok()?;
    Some(firsts[at].1)
}

/// The handoffs this PN sent, by the slices they gave, kept to be sent again when the LB
/// gives a slice again at the same epoch: its taker never said it took it (a handoff sent
/// before the giver is connected to a new taker goes nowhere). A handoff is sent again
/// whole; the taker answers the slices it took already with `took` alone. Only the control
/// thread uses it; a handoff is dropped once no slice refers to it (at most one per slice).
struct Handed {
    by_slice: Vec<Option<(u64, Arc<Vec<u8>>)>>,
}

impl Handed {
    fn new(slices: u32) -> Handed {
        Handed {
            by_slice: vec![None; slices as usize],
        }
    }

    fn keep(&mut self, given: &SliceRuns, bytes: &Arc<Vec<u8>>) {
        for (s, e) in given.iter() {
            if let Some(kept) = self.by_slice.get_mut(s as usize) {
                *kept = Some((e, bytes.clone()));
            }
        }
    }

    /// The handoffs that gave these slices at these epochs, each once.
    fn again(&self, slices: &[SliceEpoch]) -> Vec<Arc<Vec<u8>>> {
        let mut out: Vec<Arc<Vec<u8>>> = Vec::new();
        for &(s, e) in slices {
            if let Some(Some((epoch, bytes))) = self.by_slice.get(s as usize) {
                if *epoch == e && !out.iter().any(|b| Arc::ptr_eq(b, bytes)) {
                    out.push(bytes.clone());
                }
            }
        }
        out
    }
}

/// Before the first control message, the control thread encodes and decodes a handoff and
/// a `took` of every slice once, and drops them: the memory a join's messages need is then
/// mapped in this thread's heap, not page-faulted in while a join waits (on this machine a
/// fresh 500-slice take paid about 40 us of faults).
fn warm_up(slices: u32) {
    let mut b = HandoffBuilder::new(0);
    for slice in 0..slices {
        b.push(slice, 1, &[(0, slice as u64)], &[]);
    }
    let bytes = codec::encode_control(&b.finish());
    if let Ok(h) = codec::decode_control::<Handoff>(&bytes).and_then(Handoff::checked) {
        std::hint::black_box(h.iter().map(|s| s.to_owned()).collect::<Vec<HandoffSlice>>());
    }
    let took: Vec<Took> = (0..slices)
        .map(|slice| Took {
            slice,
            epoch: 1,
            giver_last_id: Some(1),
            taker_first_id: Some(1),
        })
        .collect();
    std::hint::black_box(codec::encode_control(&ToLb::Took {
        pn: 0,
        t_ns: 0,
        slices: took,
    }));
}

/// `took` messages waiting to go to the LB: the control thread sends them once no other
/// control message waits (or `MAX_PENDING_TOOKS` wait). A join takes slices from every PN
/// above its share, and their handoffs arrive together: the last one is then taken without
/// waiting behind the puts of the others' `took`s (a put is tens of us here).
struct Tooks(Vec<(u64, Vec<Took>)>);

/// Bounds how long `took`s wait when control messages keep coming.
const MAX_PENDING_TOOKS: usize = 64;

impl Tooks {
    fn push(&mut self, t_ns: u64, slices: Vec<Took>) {
        if !slices.is_empty() {
            self.0.push((t_ns, slices));
        }
    }
}

fn control_loop(shared: &Shared, rx: mpsc::Receiver<Control>) {
    warm_up(shared.cfg.slices);
    let mut handed = Handed::new(shared.cfg.slices);
    let mut tooks = Tooks(Vec::new());
    let mut bad = Throttled::new("pn control");
    loop {
        let msg = match rx.try_recv() {
            Ok(msg) => msg,
            Err(mpsc::TryRecvError::Empty) => {
                shared.send_tooks(&mut tooks);
                // Ends when the subscriptions (the senders) are dropped.
                match rx.recv() {
                    Ok(msg) => msg,
                    Err(_) => break,
                }
            }
            Err(mpsc::TryRecvError::Disconnected) => break,
        };
        let result = match msg {
            Control::Pn(b) => {
                codec::decode_control::<ToPn>(&b).map(|m| shared.on_control(m, &mut handed, &mut tooks))
            }
            Control::Handoff(b) => codec::decode_control::<Handoff>(&b)
                .and_then(Handoff::checked)
                .map(|h| shared.on_handoff(h, &mut tooks)),
        };
        if let Err(why) = result {
            shared.c.bad_control.fetch_add(1, Ordering::Relaxed);
            bad.note(&why);
        }
        if tooks.0.len() >= MAX_PENDING_TOOKS {
            shared.send_tooks(&mut tooks);
        }
    }
    shared.send_tooks(&mut tooks);
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

/// The cores this process may run on: std reads its CPU affinity and its cgroup's CPU
/// quota (v1 `cpu.cfs_quota_us` or v2 `cpu.max`, rounded down, at least 1), so a PN capped
/// at a quarter core runs one worker (tests/test_slices.py checks it).
pub fn available_cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slice_given_again_sends_its_handoff_again_whole_and_once() {
        let mut handed = Handed::new(10);
        let first = Arc::new(vec![1u8]);
        let second = Arc::new(vec![2u8]);
        handed.keep(&[(2, 5), (3, 5), (4, 5)].into_iter().collect(), &first);
        handed.keep(&[(4, 6), (7, 2)].into_iter().collect(), &second);
        // Slices 2 and 3 came in one handoff: it goes once.
        let again = handed.again(&[(2, 5), (3, 5)]);
        assert_eq!(again.len(), 1);
        assert!(Arc::ptr_eq(&again[0], &first));
        // Slice 4 was given again later, at epoch 6: its old epoch finds nothing.
        assert!(handed.again(&[(4, 5)]).is_empty());
        let both = handed.again(&[(3, 5), (4, 6), (7, 2), (9, 1)]);
        assert_eq!(both.len(), 2);
        assert!(handed.again(&[(99, 1)]).is_empty(), "no such slice");
    }

    #[test]
    fn the_first_id_of_a_slice_is_found_by_slice() {
        let firsts = [(1, 11), (4, 14), (9, 29)];
        assert_eq!(first_of(&firsts, 4), Some(14));
        assert_eq!(first_of(&firsts, 5), None);
        assert_eq!(first_of(&[], 1), None);
    }
}
