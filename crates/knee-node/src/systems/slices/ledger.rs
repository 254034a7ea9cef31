//! A PN's ownership of slices, as pure logic (no threads, no network), and the ring of
//! recent items of the slices it does not own. `docs/slices.md` argues why the rules give
//! exactly-once processing across a handoff; the tests below hold the rules.
//!
//! Per slice, the owner keeps a watermark per sender: the last id the slice's owners (it
//! and those before it) accepted. An item of an owned slice is accepted when its id is above
//! the watermark, or when it is owed (at or below it, but dropped on a full queue by some
//! owner, so the client will publish it again). After a crash the dead owner's watermark
//! is unknown: the new owner then accepts any id it has not seen itself (`seen`).

use std::collections::{HashSet, VecDeque};

use super::codec::{HandoffBuilder, HandoffSliceRef, Watermark};

/// Owed ids kept per slice: beyond, an id dropped on a full queue is forgotten (counted),
/// and its re-publish is then ignored by a later owner (the client times it out).
pub const MAX_OWED_PER_SLICE: usize = 4096;
/// Ids remembered per slice owned after a crash, for deduplication (oldest forgotten).
pub const MAX_SEEN_PER_SLICE: usize = 1 << 16;
/// Missing ids noted for the PN to ask of givers, between two looks (`take_missing`);
/// beyond, they stay owed but are not asked for (their re-publish still brings them).
pub const MAX_MISSING_PENDING: usize = MAX_OWED_PER_SLICE;

#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum Verdict {
    /// Mine to process.
    Accept,
    /// Of a slice this PN does not own (at its epoch): for the ring.
    NotOwned,
    /// Already accepted here or by an earlier owner: ignored.
    Already,
}

/// A bounded set of (sender, id), the oldest forgotten first.
#[derive(Debug)]
pub struct Seen {
    set: HashSet<(u32, u64)>,
    order: VecDeque<(u32, u64)>,
    max: usize,
}

impl Default for Seen {
    fn default() -> Self {
        Seen::with_max(MAX_SEEN_PER_SLICE)
    }
}

impl Seen {
    pub fn with_max(max: usize) -> Seen {
        Seen {
            set: HashSet::new(),
            order: VecDeque::new(),
            max,
        }
    }

    pub fn contains(&self, key: &(u32, u64)) -> bool {
        self.set.contains(key)
    }

    /// Whether the id is new (and now remembered).
    pub fn insert(&mut self, key: (u32, u64)) -> bool {
        if !self.set.insert(key) {
            return false;
        }
        self.order.push_back(key);
        if self.order.len() > self.max {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(&old);
            }
        }
        true
    }
    fn forget(&mut self, key: &(u32, u64)) {
        self.set.remove(key);
    }
}

#[derive(Default, Debug)]
struct Slice {
    epoch: u64,
    owned: bool,
    /// (sender, last accepted id), sorted by sender: a slice hears few senders, and a
    /// handoff moves this vector as it is (no map to build per slice moved).
    watermark: Watermark,
    /// Owned through a giver's handoff: ids found missing above its watermark may still
    /// reach the giver (which heard the clients later than this PN), so they are noted.
    by_handoff: bool,
    /// Owed ids and the crash dedupe, None while there are none: kept apart so that a
    /// slice's usual state is one cache line (a 1,000-slice join touches 500 of them).
    owed_and_seen: Option<Box<OwedAndSeen>>,
}

#[derive(Default, Debug)]
struct OwedAndSeen {
    owed: HashSet<(u32, u64)>,
    /// Some after a crash assignment: the ids this PN accepted, the only dedupe it has.
    seen: Option<Seen>,
}

impl Slice {
    fn seen_mut(&mut self) -> Option<&mut Seen> {
        self.owed_and_seen.as_mut().and_then(|r| r.seen.as_mut())
    }

    fn owed_len(&self) -> usize {
        self.owed_and_seen.as_ref().map_or(0, |r| r.owed.len())
    }

    fn owed_remove(&mut self, key: &(u32, u64)) -> bool {
        self.owed_and_seen.as_mut().is_some_and(|r| r.owed.remove(key))
    }

    fn owed_insert(&mut self, key: (u32, u64)) {
        self.owed_and_seen.get_or_insert_default().owed.insert(key);
    }
}

#[derive(Debug)]
pub struct Ledger {
    slices: Vec<Slice>,
    /// S: a client's consecutive ids of one slice differ by it.
    stride: u64,
    /// Owed ids forgotten because a slice's owed set was full.
    pub owed_overflow: u64,
    /// (slice, sender, id) newly owed in slices owned through a handoff: what this PN
    /// missed after the giver's watermark, for it to ask the giver for.
    missing: Vec<(u32, u32, u64)>,
}

impl Ledger {
    pub fn new(slices: u32) -> Ledger {
        Ledger {
            slices: (0..slices).map(|_| Slice::default()).collect(),
            stride: slices.max(1) as u64,
            owed_overflow: 0,
            missing: Vec::new(),
        }
    }

    pub fn owned(&self, slice: u32) -> bool {
        self.slices.get(slice as usize).is_some_and(|s| s.owned)
    }

    pub fn epoch(&self, slice: u32) -> u64 {
        self.slices.get(slice as usize).map_or(0, |s| s.epoch)
    }

    pub fn owned_count(&self) -> usize {
        self.slices.iter().filter(|s| s.owned).count()
    }

    pub fn owned_slices(&self) -> Vec<u32> {
        (0..self.slices.len() as u32).filter(|&s| self.owned(s)).collect()
    }

    /// The last id of `sender` the slice's owners accepted, as far as this PN knows.
    pub fn watermark(&self, slice: u32, sender: u32) -> Option<u64> {
        let s = self.slices.get(slice as usize)?;
        let at = s.watermark.binary_search_by_key(&sender, |&(x, _)| x).ok()?;
        Some(s.watermark[at].1)
    }

    /// Decides on an item and, when it is accepted, records it.
    pub fn decide(&mut self, slice: u32, sender: u32, id: u64) -> Verdict {
        let (stride, mut overflow) = (self.stride, 0);
        let Some(s) = self.slices.get_mut(slice as usize) else {
            return Verdict::NotOwned;
        };
        if !s.owned {
            return Verdict::NotOwned;
        }
        let key = (sender, id);
        let at = s.watermark.binary_search_by_key(&sender, |&(x, _)| x);
        let prev = at.ok().map(|i| s.watermark[i].1);
        let crashed = s.seen_mut().is_some();
        let fresh = match s.seen_mut() {
            Some(seen) => seen.insert(key),
            None => prev.is_none_or(|w| id > w) || s.owed_remove(&key),
        };
        if !fresh {
            return Verdict::Already;
        }
        if !crashed && prev.is_none_or(|w| id > w) {
            // Ids of this slice skipped on the way up never reached an owner (published
            // before this PN heard the client, or missing from its ring): owed, so that
            // their re-publish is accepted.
            let from = prev.map_or(slice as u64, |w| w.saturating_add(stride));
            let missing = (id.saturating_sub(from) / stride) as usize;
            let room = MAX_OWED_PER_SLICE.saturating_sub(s.owed_len());
            for k in 1..=missing.min(room) as u64 {
                let skipped = id - k * stride;
                s.owed_insert((sender, skipped));
                if s.by_handoff && self.missing.len() < MAX_MISSING_PENDING {
                    self.missing.push((slice, sender, skipped));
                }
            }
            overflow = missing.saturating_sub(room) as u64;
        }
        match at {
            Ok(i) => s.watermark[i].1 = s.watermark[i].1.max(id),
            Err(i) => s.watermark.insert(i, (sender, id)),
        }
        s.owed_remove(&key);
        self.owed_overflow += overflow;
        Verdict::Accept
    }

    /// An accepted item could not be queued: still owed, to whoever owns the slice when the
    /// client publishes it again.
    pub fn dropped(&mut self, slice: u32, sender: u32, id: u64) {
        let Some(s) = self.slices.get_mut(slice as usize) else {
            return;
        };
        if let Some(seen) = s.seen_mut() {
            seen.forget(&(sender, id));
        }
        if s.owed_len() >= MAX_OWED_PER_SLICE {
            self.owed_overflow += 1;
        } else {
            s.owed_insert((sender, id));
        }
    }

    /// Stops owning `slice` (the LB gave it away at `epoch`) and writes what the taker
    /// needs into `out`, with `also_owed` (sorted) added to its owed ids; false when this
    /// PN does not own it below that epoch (a stale or repeated give).
    pub fn give(
        &mut self,
        slice: u32,
        epoch: u64,
        also_owed: &[(u32, u64)],
        out: &mut HandoffBuilder,
    ) -> bool {
        let Some(s) = self.slices.get_mut(slice as usize) else {
            return false;
        };
        if !s.owned || epoch <= s.epoch {
            return false;
        }
        s.owned = false;
        s.epoch = epoch;
        let watermark = std::mem::take(&mut s.watermark);
        match s.owed_and_seen.take() {
            None => out.push(slice, epoch, &watermark, also_owed),
            Some(owed_and_seen) => {
                let mut owed: Vec<_> = owed_and_seen
                    .owed
                    .into_iter()
                    .chain(also_owed.iter().copied())
                    .collect();
                owed.sort_unstable();
                owed.dedup();
                out.push(slice, epoch, &watermark, &owed);
            }
        }
        true
    }

    /// Owns the slice from the giver's handoff, if its epoch is newer than any seen here.
    /// Its watermark is kept as it came (a giver sends it sorted by sender); one from
    /// elsewhere is sorted, with a sender named twice kept at its highest id.
    pub fn take(&mut self, h: HandoffSliceRef<'_>) -> bool {
        let Some(s) = self.slices.get_mut(h.slice as usize) else {
            return false;
        };
        if h.epoch <= s.epoch {
            return false;
        }
        let mut watermark = Watermark::from_slice(h.watermark);
        if !watermark.is_sorted_by(|a, b| a.0 < b.0) {
            // Highest id first within a sender, so that dedup keeps it.
            watermark.sort_unstable_by_key(|&(sender, id)| (sender, std::cmp::Reverse(id)));
            watermark.dedup_by_key(|&mut (sender, _)| sender);
        }
        *s = Slice {
            epoch: h.epoch,
            owned: true,
            watermark,
            by_handoff: true,
            owed_and_seen: (!h.owed.is_empty()).then(|| {
                Box::new(OwedAndSeen {
                    owed: h.owed.iter().copied().collect(),
                    seen: None,
                })
            }),
        };
        true
    }

    /// The ids noted missing since the last call: (slice, sender, id).
    pub fn take_missing(&mut self) -> Vec<(u32, u32, u64)> {
        std::mem::take(&mut self.missing)
    }

    /// Owns the slice with no giver. Already owning it (at a lower epoch), it keeps its
    /// watermarks; else it starts with none, deduplicating by what it sees after a crash.
    pub fn assign(&mut self, slice: u32, epoch: u64, crash: bool) -> bool {
        let Some(s) = self.slices.get_mut(slice as usize) else {
            return false;
        };
        if epoch <= s.epoch {
            return false;
        }
        if !s.owned {
            *s = Slice {
                owned: true,
                owed_and_seen: crash.then(|| {
                    Box::new(OwedAndSeen {
                        seen: Some(Seen::default()),
                        ..OwedAndSeen::default()
                    })
                }),
                ..Slice::default()
            };
        }
        s.epoch = epoch;
        true
    }

    /// The slice moved on at `epoch` without this PN (it was thought dead): stop owning it.
    pub fn revoke(&mut self, slice: u32, epoch: u64) -> bool {
        let Some(s) = self.slices.get_mut(slice as usize) else {
            return false;
        };
        if epoch <= s.epoch {
            return false;
        }
        let was = s.owned;
        *s = Slice {
            epoch,
            ..Slice::default()
        };
        was
    }
}

/// Items a taker's ring misses right after a sender's watermark `w`: the slice's next id is
/// `w + slices` (a client numbers its items 0, 1, 2, ...); if the ring's first later id of
/// that sender, `first`, is further on, the ones between are missing (their re-publish
/// brings them).
pub fn gap_items(w: u64, first: u64, slices: u32) -> u64 {
    w.checked_add(slices as u64)
        .map_or(0, |next| first.saturating_sub(next) / slices.max(1) as u64)
}

/// One item held for a slice this PN may be given: its whole message.
#[derive(Debug, Clone)]
pub struct RingItem {
    pub slice: u32,
    pub sender: u32,
    pub id: u64,
    pub arrived_ns: u64,
    pub bytes: Vec<u8>,
}

/// Spare item buffers a ring keeps, in bytes of capacity: an item's copy reuses the
/// buffer of one that left the ring (allocating and freeing an item's buffer, with the page
/// faults of a heap that grows and shrinks, cost a PN throughput: bench/README.md, "Slices goals").
pub const MAX_SPARE_BYTES: usize = 16 << 20;

/// Recent items of the slices this PN does not own, bounded by bytes and by age: what a
/// taker may need after a giver's watermark. Arrival order.
#[derive(Debug)]
pub struct Ring {
    items: VecDeque<RingItem>,
    bytes: usize,
    max_bytes: usize,
    max_age_ns: u64,
    /// Items evicted by the byte bound (not by age): a sign the ring is too small.
    pub evicted_full: u64,
    spare: Vec<Vec<u8>>,
    spare_bytes: usize,
}

impl Ring {
    pub fn new(max_bytes: usize, max_age_ns: u64) -> Ring {
        Ring {
            items: VecDeque::new(),
            bytes: 0,
            max_bytes,
            max_age_ns,
            evicted_full: 0,
            spare: Vec::new(),
            spare_bytes: 0,
        }
    }

    /// A copy of `bytes` in a buffer that left the ring, or a new one.
    pub fn copy_of(&mut self, bytes: &[u8]) -> Vec<u8> {
        let mut buf = match self.spare.pop() {
            Some(b) => {
                self.spare_bytes -= b.capacity();
                b
            }
            None => Vec::with_capacity(bytes.len()),
        };
        buf.clear();
        buf.extend_from_slice(bytes);
        buf
    }

    /// Bytes of spare buffers kept (at most MAX_SPARE_BYTES).
    pub fn spare_bytes(&self) -> usize {
        self.spare_bytes
    }

    pub fn len(&self) -> usize {
        self.items.len()
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    pub fn push(&mut self, item: RingItem) {
        self.bytes += item.bytes.len();
        let now = item.arrived_ns;
        self.items.push_back(item);
        while self.bytes > self.max_bytes {
            self.pop();
            self.evicted_full += 1;
        }
        self.expire(now);
    }

    /// Drops items older than the age bound.
    pub fn expire(&mut self, now_ns: u64) {
        while self
            .items
            .front()
            .is_some_and(|i| now_ns.saturating_sub(i.arrived_ns) > self.max_age_ns)
        {
            self.pop();
        }
    }

    fn pop(&mut self) {
        if let Some(i) = self.items.pop_front() {
            self.bytes -= i.bytes.len();
            if self.spare_bytes + i.bytes.capacity() <= MAX_SPARE_BYTES {
                self.spare_bytes += i.bytes.capacity();
                self.spare.push(i.bytes);
            }
        }
    }

    /// Copies of the items whose (sender, id) is in `wanted`.
    pub fn copies_of(&self, wanted: &HashSet<(u32, u64)>) -> Vec<RingItem> {
        self.items
            .iter()
            .filter(|i| wanted.contains(&(i.sender, i.id)))
            .cloned()
            .collect()
    }

    /// Removes and returns the items of the slices marked in `slices` (indexed by slice),
    /// in (slice, sender, id) order.
    pub fn take(&mut self, slices: &[bool]) -> Vec<RingItem> {
        let mut taken = Vec::new();
        let mut kept = VecDeque::with_capacity(self.items.len());
        for i in self.items.drain(..) {
            if slices.get(i.slice as usize).copied().unwrap_or(false) {
                taken.push(i);
            } else {
                kept.push_back(i);
            }
        }
        self.items = kept;
        self.bytes = self.items.iter().map(|i| i.bytes.len()).sum();
        taken.sort_by_key(|i| (i.slice, i.sender, i.id));
        taken
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::systems::slices::codec::HandoffSlice;

    /// What `give` writes for one slice, read back as the taker reads it; None when it
    /// writes nothing.
    fn give_one(l: &mut Ledger, slice: u32, epoch: u64) -> Option<HandoffSlice> {
        let mut b = HandoffBuilder::new(0);
        if !l.give(slice, epoch, &[], &mut b) {
            assert!(b.is_empty());
            return None;
        }
        let h = b.finish().checked().unwrap();
        let read: Vec<HandoffSlice> = h.iter().map(|s| s.to_owned()).collect();
        assert_eq!(read.len(), 1);
        read.into_iter().next()
    }

    fn handoff_of(l: &mut Ledger, slice: u32, epoch: u64) -> HandoffSlice {
        give_one(l, slice, epoch).unwrap()
    }

    #[test]
    fn a_join_hands_over_at_the_watermark_so_each_id_is_accepted_once() {
        let (mut giver, mut taker) = (Ledger::new(10), Ledger::new(10));
        assert!(giver.assign(3, 1, false));
        // ids of slice 3 from sender 7: 3, 13, 23, ...
        let ids: Vec<u64> = (0..20).map(|k| 3 + 10 * k).collect();
        let (before, after) = ids.split_at(8);
        let mut accepted = Vec::new();
        for &id in before {
            assert_eq!(giver.decide(3, 7, id), Verdict::Accept);
            accepted.push(id);
            assert_eq!(taker.decide(3, 7, id), Verdict::NotOwned);
        }
        let h = handoff_of(&mut giver, 3, 2);
        assert_eq!(h.watermark.to_vec(), vec![(7, before[7])]);
        // Items after the give: the giver no longer owns the slice.
        assert_eq!(giver.decide(3, 7, after[0]), Verdict::NotOwned);
        assert!(taker.take(h.as_ref()));
        // The taker replays its ring (every id) and then live ones: only those above.
        for &id in ids.iter() {
            if taker.decide(3, 7, id) == Verdict::Accept {
                accepted.push(id);
            }
        }
        accepted.sort_unstable();
        assert_eq!(accepted, ids);
        // A re-publish of an id already accepted is ignored.
        assert_eq!(taker.decide(3, 7, after[2]), Verdict::Already);
        assert_eq!(taker.epoch(3), 2);
    }

    #[test]
    fn ids_a_taker_missed_after_the_watermark_are_noted_and_accepted_once_when_they_come() {
        let (mut giver, mut taker) = (Ledger::new(10), Ledger::new(10));
        giver.assign(3, 1, false);
        assert_eq!(giver.decide(3, 7, 3), Verdict::Accept);
        let h = handoff_of(&mut giver, 3, 2);
        assert!(taker.take(h.as_ref()));
        // The taker heard the client only from 33 on: 13 and 23 never reached an owner.
        assert_eq!(taker.decide(3, 7, 33), Verdict::Accept);
        assert_eq!(taker.take_missing(), vec![(3, 7, 23), (3, 7, 13)]);
        assert!(taker.take_missing().is_empty());
        // The giver, which heard them after the give, forwards them: each accepted once.
        for id in [13, 23] {
            assert_eq!(taker.decide(3, 7, id), Verdict::Accept);
            assert_eq!(taker.decide(3, 7, id), Verdict::Already);
        }
        // A slice owned with no giver notes nothing: there is no one to ask.
        let mut lone = Ledger::new(10);
        lone.assign(4, 1, false);
        assert_eq!(lone.decide(4, 7, 4), Verdict::Accept);
        assert_eq!(lone.decide(4, 7, 24), Verdict::Accept);
        assert!(lone.take_missing().is_empty());
    }

    #[test]
    fn an_id_dropped_on_a_full_queue_stays_owed_across_a_handoff() {
        let (mut giver, mut taker) = (Ledger::new(4), Ledger::new(4));
        giver.assign(1, 1, false);
        for id in [1, 5, 9] {
            assert_eq!(giver.decide(1, 0, id), Verdict::Accept);
        }
        giver.dropped(1, 0, 5);
        let h = handoff_of(&mut giver, 1, 2);
        assert_eq!(h.owed, vec![(0, 5)]);
        taker.take(h.as_ref());
        assert_eq!(taker.decide(1, 0, 9), Verdict::Already);
        assert_eq!(taker.decide(1, 0, 5), Verdict::Accept, "the re-publish");
        assert_eq!(taker.decide(1, 0, 5), Verdict::Already);
    }

    #[test]
    fn a_leaving_givers_queued_ids_join_the_owed_ones_sorted_and_once() {
        let mut giver = Ledger::new(4);
        giver.assign(1, 1, false);
        for id in [1, 5, 9, 13] {
            assert_eq!(giver.decide(1, 0, id), Verdict::Accept);
        }
        giver.dropped(1, 0, 5);
        let mut b = HandoffBuilder::new(0);
        // 9 and 13 were still queued; 5 is named twice.
        assert!(giver.give(1, 2, &[(0, 5), (0, 9), (0, 13)], &mut b));
        let h = b.finish().checked().unwrap();
        let given: Vec<HandoffSlice> = h.iter().map(|s| s.to_owned()).collect();
        assert_eq!(given[0].owed, vec![(0, 5), (0, 9), (0, 13)]);
        let mut taker = Ledger::new(4);
        assert!(taker.take(given[0].as_ref()));
        for id in [5, 9, 13] {
            assert_eq!(taker.decide(1, 0, id), Verdict::Accept, "{id} re-published");
        }
        assert_eq!(taker.decide(1, 0, 1), Verdict::Already);
    }

    #[test]
    fn ids_skipped_on_the_way_up_are_owed_until_they_come_again() {
        let mut l = Ledger::new(10);
        l.assign(2, 1, false);
        // The first id heard is 32: 2, 12 and 22 never arrived.
        assert_eq!(l.decide(2, 0, 32), Verdict::Accept);
        assert_eq!(l.decide(2, 0, 52), Verdict::Accept, "42 skipped");
        for id in [2, 12, 22, 42] {
            assert_eq!(l.decide(2, 0, id), Verdict::Accept, "{id}");
            assert_eq!(l.decide(2, 0, id), Verdict::Already, "{id}");
        }
        assert_eq!(l.decide(2, 0, 62), Verdict::Accept);
    }

    #[test]
    fn epochs_fence_stale_gives_handoffs_and_assigns() {
        let mut l = Ledger::new(2);
        assert!(l.assign(0, 3, false));
        assert!(!l.assign(0, 3, false));
        assert!(give_one(&mut l, 0, 3).is_none(), "not newer");
        let stale = HandoffSlice {
            slice: 0,
            epoch: 2,
            ..Default::default()
        };
        assert!(!l.take(stale.as_ref()));
        assert!(l.revoke(0, 4));
        assert!(!l.owned(0));
        assert_eq!(l.decide(0, 1, 1), Verdict::NotOwned);
        assert!(give_one(&mut l, 1, 1).is_none(), "never owned");
        assert!(!l.assign(9, 1, false), "no such slice");
        assert_eq!(l.decide(9, 0, 0), Verdict::NotOwned);
    }

    #[test]
    fn after_a_crash_the_new_owner_dedupes_by_what_it_saw() {
        let mut l = Ledger::new(2);
        l.assign(1, 5, true);
        assert_eq!(l.decide(1, 0, 11), Verdict::Accept);
        assert_eq!(l.decide(1, 0, 3), Verdict::Accept, "older, maybe never processed");
        assert_eq!(l.decide(1, 0, 3), Verdict::Already);
        l.dropped(1, 0, 7);
        // Owning it already, a newer assign keeps its state.
        assert!(l.assign(1, 6, true));
        assert_eq!(l.decide(1, 0, 11), Verdict::Already);
        let h = give_one(&mut l, 1, 7).unwrap();
        assert_eq!(h.watermark.to_vec(), vec![(0, 11)]);
    }

    #[test]
    fn gaps_count_the_ids_missing_after_the_watermark() {
        // Watermark 3, next 13, ring starts at 53: 13, 23, 33, 43 missing.
        assert_eq!(gap_items(3, 53, 10), 4);
        assert_eq!(gap_items(3, 13, 10), 0);
        assert_eq!(gap_items(u64::MAX, 13, 10), 0);
    }

    #[test]
    fn a_watermark_from_elsewhere_is_sorted_with_each_sender_once_at_its_highest() {
        let mut l = Ledger::new(4);
        let h = HandoffSlice {
            slice: 2,
            epoch: 1,
            watermark: [(9, 6), (1, 10), (9, 30), (1, 2)].into_iter().collect(),
            owed: vec![],
        };
        assert!(l.take(h.as_ref()));
        assert_eq!(
            (l.watermark(2, 1), l.watermark(2, 9), l.watermark(2, 5)),
            (Some(10), Some(30), None)
        );
        assert_eq!(l.decide(2, 9, 26), Verdict::Already);
        assert_eq!(l.decide(2, 5, 2), Verdict::Accept, "a sender new to the slice");
        assert_eq!(
            give_one(&mut l, 2, 2).unwrap().watermark.to_vec(),
            vec![(1, 10), (5, 2), (9, 30)]
        );
    }

    #[test]
    fn the_ring_is_bounded_by_bytes_and_age_and_gives_items_in_order() {
        let item = |slice, id, t| RingItem {
            slice,
            sender: 0,
            id,
            arrived_ns: t,
            bytes: vec![0; 10],
        };
        let mut r = Ring::new(35, 100);
        for (k, id) in [5u64, 1, 3].into_iter().enumerate() {
            r.push(item(1, id, k as u64));
        }
        r.push(item(2, 9, 3));
        assert_eq!((r.len(), r.evicted_full), (3, 1));
        let taken = r.take(&[false, true, false]);
        assert_eq!(taken.iter().map(|i| i.id).collect::<Vec<_>>(), vec![1, 3]);
        assert_eq!((r.len(), r.bytes()), (1, 10));
        r.expire(104);
        assert_eq!(r.len(), 0);
    }

    #[test]
    fn buffers_that_leave_the_ring_are_reused_up_to_a_bound() {
        let mut r = Ring::new(1 << 30, 10);
        let item = |r: &mut Ring, t: u64, n: usize| RingItem {
            slice: 0,
            sender: 0,
            id: t,
            arrived_ns: t,
            bytes: r.copy_of(&vec![t as u8; n]),
        };
        let first = item(&mut r, 0, 100);
        let ptr = first.bytes.as_ptr();
        r.push(first);
        r.expire(11); // gone by age: its buffer is kept
        assert_eq!((r.len(), r.spare_bytes()), (0, 100));
        let again = item(&mut r, 12, 60);
        assert_eq!(
            (again.bytes.as_ptr(), again.bytes.len(), r.spare_bytes()),
            (ptr, 60, 0)
        );
        assert!(again.bytes.iter().all(|&b| b == 12));
        // Spares are kept only up to MAX_SPARE_BYTES of capacity.
        let mut r = Ring::new(1 << 30, 1_000);
        let n = MAX_SPARE_BYTES / (1 << 20) + 3;
        for k in 0..n as u64 {
            let big = item(&mut r, k, 1 << 20);
            r.push(big);
        }
        assert_eq!(r.len(), n);
        r.expire(10_000);
        assert_eq!(r.len(), 0);
        assert!(r.spare_bytes() <= MAX_SPARE_BYTES);
        assert!(r.spare_bytes() >= MAX_SPARE_BYTES - (1 << 20));
    }
}
