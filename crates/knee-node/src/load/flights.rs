//! The requests in flight of a sending engine, each with its deadline: what the open loop,
//! slices and stream share, whatever their transport.
//!
//! A request goes in when it is sent (with its deadline), and leaves by one of three ways:
//! taken with its reply ([`Flights::take`]; the caller compares the deadline with the
//! reply's arrival, [`past`]), expired ([`Flights::pop_expired`]: a timeout, or the
//! engine's retry), or drained at the stop once the harness's grace is over
//! ([`Flights::drain`]: a drop). The table holds at most `max` requests; a send beyond it is
//! refused, for the caller to record as dropped.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

/// Heap entries kept beyond the live requests before the heap is rebuilt from them: a
/// reply leaves its entry behind, so without this the heap would grow with every request
/// sent within one timeout.
const SLACK_ENTRIES: usize = 1024;

/// Whether a reply that arrived at `received_ns` came after its `deadline_ns`: it is then a
/// timeout, as if the expiry had come first.
pub fn past(deadline_ns: u64, received_ns: u64) -> bool {
    received_ns >= deadline_ns
}

pub struct Flights<T> {
    /// Request id to (deadline, the engine's own record of it).
    by_id: HashMap<u64, (u64, T)>,
    /// (deadline, id), earliest first. An entry whose request has left, or has a later
    /// deadline since (a retry), is skipped when it comes up. Bounded: rebuilt from `by_id`
    /// once it holds `SLACK_ENTRIES` more than twice the live requests.
    deadlines: BinaryHeap<Reverse<(u64, u64)>>,
    /// The outstanding bound: a mistyped rate against a dead server cannot grow the table
    /// without end.
    max: usize,
}

impl<T> Flights<T> {
    pub fn new(max: usize) -> Flights<T> {
        Flights {
            by_id: HashMap::new(),
            deadlines: BinaryHeap::new(),
            max,
        }
    }

    pub fn len(&self) -> usize {
        self.by_id.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// No room for another request: the next send is recorded as dropped instead.
    pub fn is_full(&self) -> bool {
        self.by_id.len() >= self.max
    }

    /// Request `id` is in flight until `deadline_ns`; refused (given back) when the table is
    /// full. An `id` already in flight gets the new deadline and value (a retry).
    pub fn insert(&mut self, id: u64, deadline_ns: u64, value: T) -> Result<(), T> {
        if self.is_full() && !self.by_id.contains_key(&id) {
            return Err(value);
        }
        self.by_id.insert(id, (deadline_ns, value));
        self.deadlines.push(Reverse((deadline_ns, id)));
        if self.deadlines.len() > 2 * self.by_id.len() + SLACK_ENTRIES {
            self.deadlines = self.by_id.iter().map(|(&id, &(d, _))| Reverse((d, id))).collect();
        }
        Ok(())
    }

    /// Request `id`'s deadline and value, if it is in flight.
    pub fn get(&self, id: u64) -> Option<(u64, &T)> {
        self.by_id.get(&id).map(|(d, v)| (*d, v))
    }

    /// Request `id` leaves with its reply: its deadline and value (None: not in flight, it
    /// expired already or was never sent).
    pub fn take(&mut self, id: u64) -> Option<(u64, T)> {
        self.by_id.remove(&id)
    }

    /// Request `id` leaves with its reply, its deadline not looked at: for an engine whose
    /// expiry alone decides a timeout (slices: an answer to any attempt completes the item).
    pub fn remove(&mut self, id: &u64) -> Option<T> {
        self.by_id.remove(id).map(|(_, v)| v)
    }

    /// A request whose deadline is at or before `now_ns`, earliest first, taken out of the
    /// table: (id, deadline, value).
    pub fn pop_expired(&mut self, now_ns: u64) -> Option<(u64, u64, T)> {
        while let Some(&Reverse((deadline_ns, id))) = self.deadlines.peek() {
            if deadline_ns > now_ns {
                return None;
            }
            self.deadlines.pop();
            if self.by_id.get(&id).is_some_and(|(d, _)| *d == deadline_ns) {
                let (_, value) = self.by_id.remove(&id)?;
                return Some((id, deadline_ns, value));
            }
        }
        None
    }

    /// The earliest deadline in flight (None: nothing is).
    pub fn next_deadline_ns(&mut self) -> Option<u64> {
        while let Some(&Reverse((deadline_ns, id))) = self.deadlines.peek() {
            if self.by_id.get(&id).is_some_and(|(d, _)| *d == deadline_ns) {
                return Some(deadline_ns);
            }
            self.deadlines.pop();
        }
        None
    }

    /// The requests `pick` chooses, taken out (a connection that closed: what was sent on it
    /// will never be answered).
    pub fn take_if(&mut self, mut pick: impl FnMut(&T) -> bool) -> Vec<(u64, T)> {
        let ids: Vec<u64> = self
            .by_id
            .iter()
            .filter(|(_, (_, v))| pick(v))
            .map(|(&id, _)| id)
            .collect();
        ids.into_iter()
            .filter_map(|id| self.by_id.remove(&id).map(|(_, v)| (id, v)))
            .collect()
    }

    /// Everything still in flight, taken out: at the stop, once the grace is over, each is
    /// a drop (its timeout did not pass).
    pub fn drain(&mut self) -> Vec<(u64, T)> {
        self.deadlines.clear();
        self.by_id.drain().map(|(id, (_, v))| (id, v)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_expire_in_deadline_order_and_a_taken_one_never_does() {
        let mut f = Flights::new(10);
        for (id, d) in [(1, 30), (2, 10), (3, 20)] {
            f.insert(id, d, id * 100).unwrap();
        }
        assert_eq!(f.take(3), Some((20, 300)));
        assert_eq!(f.next_deadline_ns(), Some(10));
        assert_eq!(f.pop_expired(9), None);
        assert_eq!(f.pop_expired(25), Some((2, 10, 200)));
        assert_eq!(f.pop_expired(25), None, "3 was taken with its reply");
        assert_eq!(f.pop_expired(30), Some((1, 30, 100)));
        assert!(f.is_empty() && f.next_deadline_ns().is_none());
    }

    #[test]
    fn a_retry_moves_the_deadline_and_the_old_one_is_skipped() {
        let mut f = Flights::new(10);
        f.insert(7, 10, 1).unwrap();
        let (id, _, attempt) = f.pop_expired(10).unwrap();
        f.insert(id, 50, attempt + 1).unwrap();
        f.insert(8, 20, 1).unwrap();
        f.insert(8, 60, 2).unwrap(); // re-armed while still in flight
        assert_eq!(f.pop_expired(40), None, "8's first deadline is no longer its own");
        assert_eq!(f.pop_expired(55), Some((7, 50, 2)));
        assert_eq!(f.get(8), Some((60, &2)));
    }

    #[test]
    fn the_bound_refuses_and_the_stop_drains() {
        let mut f = Flights::new(2);
        f.insert(1, 5, 'a').unwrap();
        f.insert(2, 6, 'b').unwrap();
        assert!(f.is_full());
        assert_eq!(f.insert(3, 7, 'c'), Err('c'));
        assert_eq!(f.take_if(|&v| v == 'a'), vec![(1, 'a')]);
        let mut left = f.drain();
        left.sort();
        assert_eq!(left, vec![(2, 'b')]);
        assert!(f.is_empty() && f.pop_expired(u64::MAX).is_none());
    }

    #[test]
    fn the_heap_stays_bounded_when_every_request_is_answered() {
        let mut f = Flights::new(10);
        for id in 0..100_000u64 {
            f.insert(id, id + 1_000_000, ()).unwrap();
            f.take(id);
        }
        assert!(f.deadlines.len() <= SLACK_ENTRIES + 1);
    }

    #[test]
    fn a_reply_at_its_deadline_is_past_it() {
        assert!(!past(100, 99));
        assert!(past(100, 100) && past(100, 101));
    }
}
