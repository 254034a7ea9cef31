//! Control and handoff: the LB's assign, give and revoke, a giver's handoff, a taker's
//! want, and the `took`s that tell the LB; all on the control thread.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::Duration;

use super::intake::Control;
use super::{Shared, State};
use crate::clock;
use crate::systems::slices::codec::{
    self, CheckedHandoff, Handoff, HandoffBuilder, HandoffSlice, ItemHeader, SliceEpoch, SliceRuns,
    TakenSlice, ToLb, ToPn,
};
use crate::systems::slices::ledger::{gap_items, Verdict};
use crate::systems::slices::Throttled;

/// Items a giver waits to hear for a taker that missed them (each for the ring's age at
/// most); beyond, a want is not kept and the client's re-publish is the only way back.
const MAX_WANTED: usize = 1 << 16;

impl Shared {
    /// Asks each giver for the items of its slices this PN missed.
    pub(super) fn ask(&self, wants: HashMap<u32, Vec<(u32, u64)>>) {
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
    pub(super) fn forward(&self, taker: u32, items: Vec<Vec<u8>>) {
        for bytes in items {
            self.c.forwarded.fetch_add(1, Ordering::Relaxed);
            self.send(&self.keys.fwd(taker), bytes);
        }
    }

    fn on_control(&self, msg: ToPn, sent_handoffs: &mut SentHandoffs, unreported: &mut UnreportedTakes) {
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
                    .map(|(slice, epoch)| TakenSlice {
                        slice,
                        epoch,
                        giver_last_id: None,
                        taker_first_id: first_of(&firsts, slice),
                    })
                    .collect();
                unreported.push(t_ns, took);
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
                let resent = sent_handoffs.to_send_again(&again);
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
                    sent_handoffs.keep(&given, &bytes);
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
    /// `TakenSlice`s are made afterwards (at 500 slices, fresh vectors of them cost more than
    /// the take itself, in cache misses).
    fn on_handoff(&self, h: CheckedHandoff, unreported: &mut UnreportedTakes) {
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
                took.push(TakenSlice {
                    slice,
                    epoch,
                    giver_last_id: hs.watermark.iter().map(|&(_, id)| id).max(),
                    taker_first_id: first_of(&firsts, slice),
                });
            } else if st.ledger.owned(slice) && st.ledger.epoch(slice) == epoch {
                // A handoff sent again: taken before, so only the LB is told again.
                took.push(TakenSlice {
                    slice,
                    epoch,
                    giver_last_id: None,
                    taker_first_id: None,
                });
            }
        }
        let wants = st.wants();
        drop(st);
        unreported.push(t_ns, took);
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
    fn report_takes(&self, unreported: &mut UnreportedTakes) {
        for (t_ns, slices) in unreported.0.drain(..) {
            if !slices.is_empty() && self.cfg.static_slices.is_none() {
                self.to_lb(&ToLb::Took {
                    pn: self.cfg.pn,
                    t_ns,
                    slices,
                });
            }
        }
    }
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
struct SentHandoffs {
    by_slice: Vec<Option<(u64, Arc<Vec<u8>>)>>,
}

impl SentHandoffs {
    fn new(slices: u32) -> SentHandoffs {
        SentHandoffs {
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
    fn to_send_again(&self, slices: &[SliceEpoch]) -> Vec<Arc<Vec<u8>>> {
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
/// mapped in this thread's heap, not page-faulted in while a join waits (docs/slices.md,
/// "Measured", has what the faults cost).
fn warm_up(slices: u32) {
    let mut b = HandoffBuilder::new(0);
    for slice in 0..slices {
        b.push(slice, 1, &[(0, slice as u64)], &[]);
    }
    let bytes = codec::encode_control(&b.finish());
    if let Ok(h) = codec::decode_control::<Handoff>(&bytes).and_then(Handoff::checked) {
        std::hint::black_box(h.iter().map(|s| s.to_owned()).collect::<Vec<HandoffSlice>>());
    }
    let took: Vec<TakenSlice> = (0..slices)
        .map(|slice| TakenSlice {
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
/// control message waits (or `MAX_UNREPORTED_TAKES` wait). A join takes slices from every PN
/// above its share, and their handoffs arrive together: the last one is then taken without
/// waiting behind the puts of the others' `took`s (a put is tens of us here).
struct UnreportedTakes(Vec<(u64, Vec<TakenSlice>)>);

/// Bounds how long `took`s wait when control messages keep coming.
const MAX_UNREPORTED_TAKES: usize = 64;

impl UnreportedTakes {
    fn push(&mut self, t_ns: u64, slices: Vec<TakenSlice>) {
        if !slices.is_empty() {
            self.0.push((t_ns, slices));
        }
    }
}

pub(super) fn control_loop(shared: &Shared, rx: mpsc::Receiver<Control>) {
    warm_up(shared.cfg.slices);
    let mut sent_handoffs = SentHandoffs::new(shared.cfg.slices);
    let mut unreported = UnreportedTakes(Vec::new());
    let mut bad = Throttled::new("pn control");
    loop {
        let msg = match rx.try_recv() {
            Ok(msg) => msg,
            Err(mpsc::TryRecvError::Empty) => {
                shared.report_takes(&mut unreported);
                // Ends when the subscriptions (the senders) are dropped.
                match rx.recv() {
                    Ok(msg) => msg,
                    Err(_) => break,
                }
            }
            Err(mpsc::TryRecvError::Disconnected) => break,
        };
        let result = match msg {
            Control::Pn(b) => codec::decode_control::<ToPn>(&b)
                .map(|m| shared.on_control(m, &mut sent_handoffs, &mut unreported)),
            Control::Handoff(b) => codec::decode_control::<Handoff>(&b)
                .and_then(Handoff::checked)
                .map(|h| shared.on_handoff(h, &mut unreported)),
        };
        if let Err(why) = result {
            shared.c.bad_control.fetch_add(1, Ordering::Relaxed);
            bad.note(&why);
        }
        if unreported.0.len() >= MAX_UNREPORTED_TAKES {
            shared.report_takes(&mut unreported);
        }
    }
    shared.report_takes(&mut unreported);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slice_given_again_sends_its_handoff_again_whole_and_once() {
        let mut sent_handoffs = SentHandoffs::new(10);
        let first = Arc::new(vec![1u8]);
        let second = Arc::new(vec![2u8]);
        sent_handoffs.keep(&[(2, 5), (3, 5), (4, 5)].into_iter().collect(), &first);
        sent_handoffs.keep(&[(4, 6), (7, 2)].into_iter().collect(), &second);
        // Slices 2 and 3 came in one handoff: it goes once.
        let again = sent_handoffs.to_send_again(&[(2, 5), (3, 5)]);
        assert_eq!(again.len(), 1);
        assert!(Arc::ptr_eq(&again[0], &first));
        // Slice 4 was given again later, at epoch 6: its old epoch finds nothing.
        assert!(sent_handoffs.to_send_again(&[(4, 5)]).is_empty());
        let both = sent_handoffs.to_send_again(&[(3, 5), (4, 6), (7, 2), (9, 1)]);
        assert_eq!(both.len(), 2);
        assert!(
            sent_handoffs.to_send_again(&[(99, 1)]).is_empty(),
            "no such slice"
        );
    }

    #[test]
    fn the_first_id_of_a_slice_is_found_by_slice() {
        let firsts = [(1, 11), (4, 14), (9, 29)];
        assert_eq!(first_of(&firsts, 4), Some(14));
        assert_eq!(first_of(&firsts, 5), None);
        assert_eq!(first_of(&[], 1), None);
    }
}
