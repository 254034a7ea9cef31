//! The LB's slice table as pure logic: who owns each slice at which epoch, which moves are
//! under way, and what to send when a PN joins, leaves or goes silent. `lb.rs` runs it.

use std::collections::BTreeMap;
use std::ops::Range;

use serde::Serialize;

use super::codec::{SliceEpoch, SliceRuns, ToLb, ToPn};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Reason {
    /// The first assignment (or of slices nobody held): no giver, no event.
    Assign,
    Join,
    Leave,
    Crash,
}

/// One slice move done, printed as a `handoff` line when the taker reports it owns the
/// slice (not the giver's `codec::Handoff` message).
#[derive(Serialize, Debug, Clone, PartialEq)]
pub struct SliceMoved {
    pub slice: u32,
    pub epoch: u64,
    pub from: Option<u32>,
    pub to: u32,
    pub reason: Reason,
    pub t_ns_start: u64,
    pub t_ns_done: u64,
    pub giver_last_id: Option<u64>,
    pub taker_first_id: Option<u64>,
}

impl crate::events::NodeEvent for SliceMoved {
    const NAME: &'static str = "handoff";
}

#[derive(Debug, Clone)]
struct Move {
    from: Option<u32>,
    reason: Reason,
    t_ns_start: u64,
    /// When the give was last sent (it is sent again after `GIVE_AGAIN_NS`).
    sent_ns: u64,
}

/// A give whose taker has not said `took` after this long is sent again: the giver's
/// handoff can be lost when it goes out before the giver is connected to a new taker
/// (peers learn of each other by gossip). A handoff takes a few ms at low load and tens of
/// ms on an overloaded quarter-core PN; a give sent again early costs only a repeated
/// handoff, which the taker answers with `took` alone.
const GIVE_AGAIN_NS: u64 = 100_000_000;

#[derive(Debug, Clone, Default)]
struct Entry {
    /// The owner, or the taker while a move is under way.
    owner: Option<u32>,
    epoch: u64,
    moving: Option<Move>,
}

#[derive(Debug, Clone, Default)]
struct Pn {
    last_seen_ns: u64,
    queue_len: u64,
    /// When it asked to leave (None: it stays).
    leave_ns: Option<u64>,
}

impl Pn {
    fn leaving(&self) -> bool {
        self.leave_ns.is_some()
    }
}

/// What the LB does after a message or a tick.
#[derive(Debug, PartialEq)]
pub enum Out {
    Send(u32, ToPn),
    Event(SliceMoved),
}

#[derive(Debug)]
pub struct Table {
    slices: Vec<Entry>,
    pns: BTreeMap<u32, Pn>,
    pub moves: u64,
    /// Gives sent again (`give_again`).
    pub gives_again: u64,
    /// A leaving PN's slices move this long after its `leave`, once every PN that leaves
    /// at about the same time has said so: at a run's end every PN leaves at once, and
    /// slices handed to a PN that leaves next would take its giver's queue with them.
    pub leave_settle_ns: u64,
}

impl Table {
    pub fn new(slices: u32) -> Table {
        Table {
            slices: vec![Entry::default(); slices as usize],
            pns: BTreeMap::new(),
            moves: 0,
            gives_again: 0,
            leave_settle_ns: 0,
        }
    }

    /// (owner, epoch) per slice, for the `stats` line.
    pub fn view(&self) -> Vec<(Option<u32>, u64)> {
        self.slices.iter().map(|e| (e.owner, e.epoch)).collect()
    }

    pub fn pns(&self) -> Vec<u32> {
        self.pns.keys().copied().collect()
    }

    /// Slices per known PN (a move's taker counts as the owner), counted once per decision
    /// and kept up to date by the caller as it moves slices: a decision then costs
    /// O(S + moves x PNs), not O(S) per slice moved, so moving 500 of 1,000 slices takes
    /// about as long as moving 5 of 10.
    fn counts(&self) -> BTreeMap<u32, usize> {
        let mut counts: BTreeMap<u32, usize> = self.pns.keys().map(|&p| (p, 0)).collect();
        for (owner, run) in runs(self.slices.iter().map(|e| e.owner)) {
            if let Some(owner) = owner {
                *counts.entry(owner).or_default() += run.len();
            }
        }
        counts
    }

    /// Each PN's settled slices (owned, not moving), as ranges in slice order: what it can
    /// give, the last one first.
    fn settled(&self) -> BTreeMap<u32, Vec<Range<usize>>> {
        let mut settled: BTreeMap<u32, Vec<Range<usize>>> = BTreeMap::new();
        let settled_owner = self.slices.iter().map(|e| e.owner.filter(|_| e.moving.is_none()));
        for (owner, run) in runs(settled_owner) {
            if let Some(owner) = owner {
                settled.entry(owner).or_default().push(run);
            }
        }
        settled
    }

    /// The live PN that takes slices best: not leaving, fewest slices, then shortest queue.
    fn emptiest(&self, counts: &BTreeMap<u32, usize>, except: Option<u32>) -> Option<u32> {
        self.pns
            .iter()
            .filter(|(&p, s)| !s.leaving() && Some(p) != except)
            .min_by_key(|(&p, s)| (counts.get(&p).copied().unwrap_or(0), s.queue_len, p))
            .map(|(&p, _)| p)
    }

    pub fn on_message(&mut self, msg: ToLb, now_ns: u64) -> Vec<Out> {
        match msg {
            ToLb::Hello { pn } => self.heard(pn, now_ns, None),
            ToLb::Heartbeat { pn, queue_len, .. } => self.heard(pn, now_ns, Some(queue_len)),
            ToLb::Leave { pn } => {
                // Its slices move on a tick once `leave_settle_ns` has passed.
                let out = self.heard(pn, now_ns, None);
                if let Some(p) = self.pns.get_mut(&pn) {
                    p.leave_ns.get_or_insert(now_ns);
                }
                out
            }
            ToLb::Took { pn, slices, t_ns } => {
                let mut out = Vec::new();
                for t in slices {
                    let Some(e) = self.slices.get_mut(t.slice as usize) else {
                        continue;
                    };
                    if e.epoch != t.epoch || e.owner != Some(pn) {
                        continue;
                    }
                    if let Some(m) = e.moving.take() {
                        if m.reason != Reason::Assign {
                            out.push(Out::Event(SliceMoved {
                                slice: t.slice,
                                epoch: t.epoch,
                                from: m.from,
                                to: pn,
                                reason: m.reason,
                                t_ns_start: m.t_ns_start,
                                t_ns_done: t_ns,
                                giver_last_id: t.giver_last_id,
                                taker_first_id: t.taker_first_id,
                            }));
                        }
                    }
                }
                out
            }
        }
    }

    /// A PN spoke: a newcomer joins (gets the unowned slices, or a fair share).
    fn heard(&mut self, pn: u32, now_ns: u64, queue_len: Option<u64>) -> Vec<Out> {
        let known = self.pns.contains_key(&pn);
        let p = self.pns.entry(pn).or_default();
        p.last_seen_ns = now_ns;
        if let Some(q) = queue_len {
            p.queue_len = q;
        }
        if known {
            return Vec::new();
        }
        let mut out = self.assign_orphans(now_ns);
        out.extend(self.join(pn, now_ns));
        out
    }

    /// Slices with no owner (none yet, or every PN died) go to the emptiest PNs.
    fn assign_orphans(&mut self, now_ns: u64) -> Vec<Out> {
        if self.slices.iter().all(|e| e.owner.is_some()) {
            return Vec::new();
        }
        let mut by_pn: BTreeMap<u32, Vec<SliceEpoch>> = BTreeMap::new();
        let mut counts = self.counts();
        for s in 0..self.slices.len() {
            if self.slices[s].owner.is_some() {
                continue;
            }
            let Some(to) = self.emptiest(&counts, None) else {
                return Vec::new();
            };
            *counts.entry(to).or_default() += 1;
            let crash = self.slices[s].epoch > 0;
            let e = &mut self.slices[s];
            e.owner = Some(to);
            e.epoch += 1;
            e.moving = Some(Move {
                from: None,
                reason: if crash { Reason::Crash } else { Reason::Assign },
                t_ns_start: now_ns,
                sent_ns: now_ns,
            });
            by_pn.entry(to).or_default().push((s as u32, e.epoch));
        }
        by_pn
            .into_iter()
            .map(|(pn, slices)| {
                let crash = slices.iter().any(|&(_, e)| e > 1);
                let slices = sorted_runs(slices);
                Out::Send(pn, ToPn::Assign { slices, crash })
            })
            .collect()
    }

    /// A newcomer's fair share, floor(S / N), taken one slice at a time from the PN with
    /// the most slices (then the longest queue), each giver's last settled slices; slices
    /// already moving stay put.
    fn join(&mut self, pn: u32, now_ns: u64) -> Vec<Out> {
        /// A PN that can give: its slice count, its queue, its settled slices, how many of
        /// them it gives.
        struct Giver {
            pn: u32,
            count: usize,
            queue_len: u64,
            settled: Vec<Range<usize>>,
            left: usize,
            gives: usize,
        }
        let live = self.pns.values().filter(|p| !p.leaving()).count().max(1);
        let share = self.slices.len() / live;
        let counts = self.counts();
        let mut settled = self.settled();
        // The candidates in a vector: the choice below is made once per slice moved.
        let mut givers: Vec<Giver> = self
            .pns
            .iter()
            .filter(|(&p, _)| p != pn)
            .filter_map(|(&p, s)| {
                let settled = settled.remove(&p).filter(|v| !v.is_empty())?;
                Some(Giver {
                    pn: p,
                    count: counts.get(&p).copied().unwrap_or(0),
                    queue_len: s.queue_len,
                    left: settled.iter().map(ExactSizeIterator::len).sum(),
                    settled,
                    gives: 0,
                })
            })
            .collect();
        let mut mine = counts.get(&pn).copied().unwrap_or(0);
        while mine < share {
            let giver = givers
                .iter_mut()
                .filter(|g| g.left > 0)
                .max_by_key(|g| (g.count, g.queue_len, std::cmp::Reverse(g.pn)));
            let Some(g) = giver else { break };
            (g.left, g.count, g.gives) = (g.left - 1, g.count - 1, g.gives + 1);
            mine += 1;
        }
        let mut out = Vec::new();
        for g in givers.iter().filter(|g| g.gives > 0) {
            // Its last `gives` settled slices, in slice order: one run on the wire.
            let mut slices = SliceRuns::new();
            for s in last_of(&g.settled, g.gives).into_iter().flatten() {
                self.moves += 1;
                let (slice, epoch) = start_move(&mut self.slices[s], s, g.pn, pn, Reason::Join, now_ns);
                slices.push(slice, epoch);
            }
            out.push(Out::Send(g.pn, ToPn::Give { to: pn, slices }));
        }
        out
    }

    /// Gives every settled slice of `pn` to the emptiest others (a planned leave).
    fn move_off(&mut self, pn: u32, reason: Reason, now_ns: u64) -> Vec<Out> {
        let mut gives: BTreeMap<u32, Vec<SliceEpoch>> = BTreeMap::new();
        let mut counts = self.counts();
        let mut settled: Vec<usize> = self
            .settled()
            .remove(&pn)
            .unwrap_or_default()
            .into_iter()
            .flatten()
            .collect();
        while let Some(&s) = settled.last() {
            let Some(to) = self.emptiest(&counts, Some(pn)) else {
                break;
            };
            settled.pop();
            *counts.entry(to).or_default() += 1;
            self.moves += 1;
            let se = start_move(&mut self.slices[s], s, pn, to, reason, now_ns);
            gives.entry(to).or_default().push(se);
        }
        gives
            .into_iter()
            .map(|(to, slices)| {
                let slices = sorted_runs(slices);
                Out::Send(pn, ToPn::Give { to, slices })
            })
            .collect()
    }

    /// PNs below their fair share take it once slices can move: a PN that joined while
    /// every slice was still moving (PNs started together, all assigned to the first one)
    /// got nothing at its hello.
    fn fill_shares(&mut self, now_ns: u64) -> Vec<Out> {
        // While a PN leaves, its slices move by the leave's rules (after the settle).
        if self.pns.values().any(Pn::leaving) {
            return Vec::new();
        }
        let live: Vec<u32> = self
            .pns
            .iter()
            .filter(|(_, p)| !p.leaving())
            .map(|(&pn, _)| pn)
            .collect();
        let share = self.slices.len() / live.len().max(1);
        let counts = self.counts();
        let mut out = Vec::new();
        for pn in live {
            if counts.get(&pn).copied().unwrap_or(0) < share {
                out.extend(self.join(pn, now_ns));
            }
        }
        out
    }

    /// Gives (join and leave moves) whose taker has not said `took` within
    /// `GIVE_AGAIN_NS`, sent again to their givers.
    fn give_again(&mut self, now_ns: u64) -> Vec<Out> {
        let mut again: BTreeMap<(u32, u32), Vec<SliceEpoch>> = BTreeMap::new();
        for (s, e) in self.slices.iter_mut().enumerate() {
            let (Some(to), Some(m)) = (e.owner, e.moving.as_mut()) else {
                continue;
            };
            let Some(from) = m.from.filter(|_| m.reason != Reason::Crash) else {
                continue;
            };
            if now_ns.saturating_sub(m.sent_ns) >= GIVE_AGAIN_NS {
                m.sent_ns = now_ns;
                again.entry((from, to)).or_default().push((s as u32, e.epoch));
            }
        }
        self.gives_again += again.values().map(Vec::len).sum::<usize>() as u64;
        again
            .into_iter()
            .map(|((from, to), slices)| {
                let slices = sorted_runs(slices);
                Out::Send(from, ToPn::Give { to, slices })
            })
            .collect()
    }

    /// The LB itself did not run for `paused_ns` (descheduled, or blocked on a congested
    /// link): silence it could not have heard is not a PN's, so every PN's clock of silence
    /// moves on by the pause.
    pub fn paused(&mut self, paused_ns: u64) {
        for p in self.pns.values_mut() {
            p.last_seen_ns = p.last_seen_ns.saturating_add(paused_ns);
        }
    }

    /// PNs silent for `failure_timeout_ns` are dead: their slices (owned, or being given to
    /// them, or being given by them) go to the others at new epochs, with no watermark.
    pub fn on_tick(&mut self, now_ns: u64, failure_timeout_ns: u64) -> Vec<Out> {
        let dead: Vec<u32> = self
            .pns
            .iter()
            .filter(|(_, p)| now_ns.saturating_sub(p.last_seen_ns) > failure_timeout_ns)
            .map(|(&pn, _)| pn)
            .collect();
        let mut out = Vec::new();
        for pn in dead {
            self.pns.remove(&pn);
            let mut counts = self.counts();
            let mut assigns: BTreeMap<u32, Vec<SliceEpoch>> = BTreeMap::new();
            let mut revoked = Vec::new();
            for s in 0..self.slices.len() {
                let e = &self.slices[s];
                let owned_by_dead = e.owner == Some(pn);
                let given_by_dead = e.moving.as_ref().is_some_and(|m| m.from == Some(pn));
                if !owned_by_dead && !given_by_dead {
                    continue;
                }
                // Given by the dead PN: its taker keeps it (it may never get the handoff).
                let to = if owned_by_dead {
                    let to = self.emptiest(&counts, None);
                    if let Some(to) = to {
                        *counts.entry(to).or_default() += 1;
                    }
                    to
                } else {
                    e.owner
                };
                self.moves += 1;
                let e = &mut self.slices[s];
                e.epoch += 1;
                revoked.push((s as u32, e.epoch));
                e.owner = to;
                match to {
                    Some(to) => {
                        e.moving = Some(Move {
                            from: Some(pn),
                            reason: Reason::Crash,
                            t_ns_start: now_ns,
                            sent_ns: now_ns,
                        });
                        assigns.entry(to).or_default().push((s as u32, e.epoch));
                    }
                    None => e.moving = None,
                }
            }
            if !revoked.is_empty() {
                let slices = sorted_runs(revoked);
                out.push(Out::Send(pn, ToPn::Revoke { slices }));
            }
            out.extend(assigns.into_iter().map(|(to, slices)| {
                let slices = sorted_runs(slices);
                Out::Send(to, ToPn::Assign { slices, crash: true })
            }));
        }
        out.extend(self.give_again(now_ns));
        out.extend(self.fill_shares(now_ns));
        // Leaving PNs whose settle time is over give their settled slices (also those they
        // were still taking when they asked to leave) to PNs that stay.
        let settle_ns = self.leave_settle_ns;
        let due: Vec<u32> = self
            .pns
            .iter()
            .filter(|(_, p)| p.leave_ns.is_some_and(|t| now_ns >= t.saturating_add(settle_ns)))
            .map(|(&pn, _)| pn)
            .collect();
        for pn in due {
            out.extend(self.move_off(pn, Reason::Leave, now_ns));
        }
        out
    }
}

/// Starts moving slice `s` (its entry `e`) from `from` to `to`: the taker owns it at the
/// next epoch.
fn start_move(e: &mut Entry, s: usize, from: u32, to: u32, reason: Reason, now_ns: u64) -> SliceEpoch {
    e.owner = Some(to);
    e.epoch += 1;
    e.moving = Some(Move {
        from: Some(from),
        reason,
        t_ns_start: now_ns,
        sent_ns: now_ns,
    });
    (s as u32, e.epoch)
}

/// The last `k` positions covered by `ranges` (ascending, disjoint), as ranges in order.
fn last_of(ranges: &[Range<usize>], k: usize) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut left = k;
    for r in ranges.iter().rev() {
        if left == 0 {
            break;
        }
        let n = r.len().min(left);
        out.push(r.end - n..r.end);
        left -= n;
    }
    out.reverse();
    out
}

/// (slice, epoch) pairs as runs, in slice order (a join collects a giver's slices from the
/// last one down): a block of slices that moved together is one run on the wire.
fn sorted_runs(mut slices: Vec<SliceEpoch>) -> SliceRuns {
    slices.sort_unstable();
    slices.into_iter().collect()
}

/// Consecutive equal values, each with the range of positions it covers: slices are owned
/// in runs (the first PN gets them all, a joiner takes a block from each giver), so a
/// tally by owner costs a map update per run, not per slice.
fn runs<T: PartialEq + Copy>(values: impl Iterator<Item = T>) -> Vec<(T, std::ops::Range<usize>)> {
    let mut out: Vec<(T, std::ops::Range<usize>)> = Vec::new();
    for (i, v) in values.enumerate() {
        match out.last_mut() {
            Some((last, range)) if *last == v => range.end = i + 1,
            _ => out.push((v, i..i + 1)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::systems::slices::codec::TakenSlice;

    fn sends(out: &[Out]) -> Vec<(u32, ToPn)> {
        out.iter()
            .filter_map(|o| match o {
                Out::Send(p, m) => Some((*p, m.clone())),
                Out::Event(_) => None,
            })
            .collect()
    }

    fn runs_of(slices: &[SliceEpoch]) -> SliceRuns {
        slices.iter().copied().collect()
    }

    fn took(pn: u32, slices: &[SliceEpoch]) -> ToLb {
        ToLb::Took {
            pn,
            t_ns: 50,
            slices: slices
                .iter()
                .map(|&(slice, epoch)| TakenSlice {
                    slice,
                    epoch,
                    giver_last_id: Some(1),
                    taker_first_id: Some(2),
                })
                .collect(),
        }
    }

    #[test]
    fn the_last_k_positions_of_ranges_come_in_order() {
        let ranges = [0..3, 5..7, 9..10];
        assert_eq!(last_of(&ranges, 0), Vec::<Range<usize>>::new());
        assert_eq!(last_of(&ranges, 1), vec![9..10]);
        assert_eq!(last_of(&ranges, 2), vec![6..7, 9..10]);
        assert_eq!(last_of(&ranges, 4), vec![2..3, 5..7, 9..10]);
        assert_eq!(last_of(&ranges, 9), vec![0..3, 5..7, 9..10]);
    }

    #[test]
    fn runs_cover_every_position_once_in_order() {
        let owners = [Some(1), Some(1), None, Some(2), Some(1), Some(1)];
        let got = runs(owners.into_iter());
        assert_eq!(
            got,
            vec![(Some(1), 0..2), (None, 2..3), (Some(2), 3..4), (Some(1), 4..6)]
        );
        assert!(runs(std::iter::empty::<u32>()).is_empty());
    }

    #[test]
    fn the_first_pn_gets_every_slice_and_joiners_a_fair_share() {
        let mut t = Table::new(10);
        let out = sends(&t.on_message(ToLb::Hello { pn: 0 }, 1));
        let all: Vec<SliceEpoch> = (0..10).map(|s| (s, 1)).collect();
        assert_eq!(
            out,
            vec![(
                0,
                ToPn::Assign {
                    slices: runs_of(&all),
                    crash: false
                }
            )]
        );
        assert!(
            t.on_message(took(0, &all), 2).is_empty(),
            "no event for the first assignment"
        );
        let out = sends(&t.on_message(ToLb::Hello { pn: 1 }, 3));
        let ToPn::Give { to: 1, slices } = &out[0].1 else {
            panic!("{out:?}")
        };
        assert_eq!((out[0].0, slices.len()), (0, 5));
        let events = t.on_message(took(1, &slices.iter().collect::<Vec<_>>()), 9);
        assert_eq!(events.len(), 5);
        let Out::Event(h) = &events[0] else { panic!() };
        assert_eq!(
            (h.from, h.to, h.reason, h.t_ns_start, h.t_ns_done),
            (Some(0), 1, Reason::Join, 3, 50)
        );
        // A third PN: floor(10 / 3) = 3 slices, from the two others (5 and 5).
        let out = sends(&t.on_message(ToLb::Hello { pn: 2 }, 10));
        let given: usize = out
            .iter()
            .map(|(_, m)| match m {
                ToPn::Give { slices, to: 2 } => slices.len(),
                _ => panic!("{m:?}"),
            })
            .sum();
        assert_eq!(given, 3);
        let counts: Vec<usize> = (0..3).map(|p| t.counts().get(&p).copied().unwrap_or(0)).collect();
        assert_eq!(counts.iter().sum::<usize>(), 10);
        assert!(counts.iter().all(|&c| c >= 3), "{counts:?}");
    }

    #[test]
    fn a_leave_moves_everything_off_and_a_silent_pn_is_replaced_at_new_epochs() {
        let mut t = Table::new(4);
        t.on_message(ToLb::Hello { pn: 0 }, 0);
        let all: Vec<SliceEpoch> = (0..4).map(|s| (s, 1)).collect();
        t.on_message(took(0, &all), 0);
        t.on_message(ToLb::Hello { pn: 1 }, 0);
        t.on_message(ToLb::Hello { pn: 2 }, 0);
        assert!(t.on_message(ToLb::Leave { pn: 0 }, 5).is_empty()); // moves on a tick
        let out = sends(&t.on_tick(5, 100));
        assert!(!out.is_empty() && out.iter().all(|(p, m)| *p == 0 && matches!(m, ToPn::Give { .. })));
        assert_eq!(t.counts().get(&0).copied().unwrap_or(0), 0);
        // PN 1 goes silent: its slices (some still moving to it) go to PN 2 at new epochs.
        t.on_message(
            ToLb::Heartbeat {
                pn: 2,
                queue_len: 0,
                processed_per_s: 0.0,
                owned: 0,
            },
            100,
        );
        t.on_message(
            ToLb::Heartbeat {
                pn: 0,
                queue_len: 0,
                processed_per_s: 0.0,
                owned: 0,
            },
            100,
        );
        let out = sends(&t.on_tick(150, 100));
        assert!(out
            .iter()
            .any(|(p, m)| *p == 1 && matches!(m, ToPn::Revoke { .. })));
        assert!(out
            .iter()
            .any(|(p, m)| *p == 2 && matches!(m, ToPn::Assign { crash: true, .. })));
        assert_eq!(t.counts().get(&1).copied().unwrap_or(0), 0);
        assert!(t.view().iter().all(|&(o, e)| o.is_some() && e >= 2));
    }

    #[test]
    fn pns_leaving_together_keep_their_slices() {
        let mut t = Table::new(4);
        t.leave_settle_ns = 50;
        t.on_message(ToLb::Hello { pn: 0 }, 0);
        let all: Vec<SliceEpoch> = (0..4).map(|s| (s, 1)).collect();
        t.on_message(took(0, &all), 0);
        t.on_message(ToLb::Hello { pn: 1 }, 0);
        let gives = t.on_tick(0, 1_000);
        assert!(gives.is_empty()); // the join's gives came with the hello
                                   // Both leave 10 ns apart (a run's end): no slice goes to a PN about to leave.
        t.on_message(ToLb::Leave { pn: 0 }, 100);
        t.on_message(ToLb::Leave { pn: 1 }, 110);
        assert!(t.on_tick(120, 1_000).is_empty()); // settling
        assert!(t.on_tick(200, 1_000).is_empty()); // nobody stays: nothing moves

        // A PN that stays is given the slices of one that leaves alone, after the settle.
        let mut t = Table::new(2);
        t.leave_settle_ns = 50;
        t.on_message(ToLb::Hello { pn: 0 }, 0);
        t.on_message(took(0, &[(0, 1), (1, 1)]), 0);
        t.on_message(ToLb::Hello { pn: 1 }, 0);
        t.on_message(took(1, &[(1, 2)]), 0);
        t.on_message(ToLb::Leave { pn: 0 }, 100);
        assert!(t.on_tick(120, 1_000).is_empty());
        let out = sends(&t.on_tick(150, 1_000));
        assert_eq!(
            out,
            vec![(
                0,
                ToPn::Give {
                    to: 1,
                    slices: runs_of(&[(0, 2)])
                }
            )]
        );
    }

    #[test]
    fn pns_that_joined_together_get_their_share_once_slices_settle() {
        let mut t = Table::new(4);
        t.on_message(ToLb::Hello { pn: 0 }, 0);
        // pn 1 says hello before pn 0 said it took its assignment: nothing can move yet.
        let at_hello = sends(&t.on_message(ToLb::Hello { pn: 1 }, 0));
        assert!(at_hello
            .iter()
            .all(|(p, m)| *p == 0 && matches!(m, ToPn::Assign { .. })));
        assert!(t.on_tick(1, u64::MAX).is_empty());
        t.on_message(took(0, &[(0, 1), (1, 1), (2, 1), (3, 1)]), 2);
        let out = sends(&t.on_tick(3, u64::MAX));
        assert_eq!(
            out,
            vec![(
                0,
                ToPn::Give {
                    to: 1,
                    slices: runs_of(&[(2, 2), (3, 2)])
                }
            )]
        );
        assert!(t.on_tick(4, u64::MAX).is_empty()); // counted as pn 1's already
    }

    #[test]
    fn a_give_with_no_took_is_sent_again() {
        let mut t = Table::new(2);
        t.on_message(ToLb::Hello { pn: 0 }, 0);
        t.on_message(took(0, &[(0, 1), (1, 1)]), 0);
        let first = sends(&t.on_message(ToLb::Hello { pn: 1 }, 0));
        assert_eq!(
            first,
            vec![(
                0,
                ToPn::Give {
                    to: 1,
                    slices: runs_of(&[(1, 2)])
                }
            )]
        );
        assert!(t.on_tick(GIVE_AGAIN_NS - 1, u64::MAX).is_empty());
        assert_eq!(sends(&t.on_tick(GIVE_AGAIN_NS, u64::MAX)), first);
        assert_eq!(t.gives_again, 1);
        t.on_message(took(1, &[(1, 2)]), GIVE_AGAIN_NS + 1);
        assert!(t.on_tick(3 * GIVE_AGAIN_NS, u64::MAX).is_empty());
    }

    #[test]
    fn silence_while_the_lb_was_paused_is_not_a_crash() {
        let mut t = Table::new(4);
        t.on_message(ToLb::Hello { pn: 0 }, 0);
        // Silent for 150 ns against a timeout of 100, but the LB itself was paused for 80.
        t.paused(80);
        assert!(t.on_tick(150, 100).is_empty());
        assert!(!t.on_tick(190, 100).is_empty()); // 190 - 80 > 100: now it is silence
    }

    #[test]
    fn with_no_pn_left_slices_wait_for_the_next_one() {
        let mut t = Table::new(2);
        t.on_message(ToLb::Hello { pn: 0 }, 0);
        t.on_tick(1_000, 10);
        assert!(t.view().iter().all(|&(o, _)| o.is_none()));
        let out = sends(&t.on_message(ToLb::Hello { pn: 3 }, 1_001));
        assert_eq!(
            out,
            vec![(
                3,
                ToPn::Assign {
                    slices: runs_of(&[(0, 3), (1, 3)]),
                    crash: true
                }
            )]
        );
    }
}
