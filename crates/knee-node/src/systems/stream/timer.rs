//! A bounded timer queue of delayed replies: a min-heap on the time each is due.
//!
//! The service's one thread pushes a reply with its emulated delay and sends whatever is due
//! between reads. The limit bounds memory under overload; a reply refused for lack of room
//! is counted as an overflow drop, as a full router queue would drop it.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::datagram::ReplyHeader;

/// One reply waiting for its emulated delay.
pub struct Pending {
    pub due_ns: u64,
    pub arrived_ns: u64,
    pub header: ReplyHeader,
    pub to: std::net::SocketAddr,
}

pub struct TimerQueue {
    /// (due, sequence) orders replies due at the same ns by arrival.
    heap: BinaryHeap<Reverse<(u64, u64, usize)>>,
    slots: Vec<Option<Pending>>,
    free: Vec<usize>,
    seq: u64,
    limit: usize,
}

impl TimerQueue {
    pub fn new(limit: usize) -> Self {
        TimerQueue {
            heap: BinaryHeap::new(),
            slots: Vec::new(),
            free: Vec::new(),
            seq: 0,
            limit,
        }
    }

    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Queues a reply; false (nothing queued) when the queue is full.
    pub fn push(&mut self, p: Pending) -> bool {
        if self.heap.len() >= self.limit {
            return false;
        }
        let due = p.due_ns;
        let slot = match self.free.pop() {
            Some(i) => {
                self.slots[i] = Some(p);
                i
            }
            None => {
                self.slots.push(Some(p));
                self.slots.len() - 1
            }
        };
        self.heap.push(Reverse((due, self.seq, slot)));
        self.seq += 1;
        true
    }

    /// When the earliest reply is due.
    pub fn next_due_ns(&self) -> Option<u64> {
        self.heap.peek().map(|Reverse((due, _, _))| *due)
    }

    /// Takes the earliest reply if it is due at `now_ns`.
    pub fn pop_due(&mut self, now_ns: u64) -> Option<Pending> {
        let &Reverse((due, _, slot)) = self.heap.peek()?;
        if due > now_ns {
            return None;
        }
        self.heap.pop();
        self.free.push(slot);
        self.slots[slot].take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::systems::stream::datagram::{BlockId, REPLY_OK};

    fn pending(due_ns: u64, request_id: u64) -> Pending {
        Pending {
            due_ns,
            arrived_ns: 0,
            header: ReplyHeader {
                status: REPLY_OK,
                id: BlockId {
                    stream: 0,
                    frame: 0,
                    block: 0,
                },
                request_id,
                server_ns: 0,
                delay_ns: 0,
            },
            to: "127.0.0.1:9".parse().expect("address"),
        }
    }

    #[test]
    fn pops_in_due_order_and_refuses_beyond_the_limit() {
        let mut q = TimerQueue::new(3);
        assert!(q.push(pending(30, 1)));
        assert!(q.push(pending(10, 2)));
        assert!(q.push(pending(10, 3)));
        assert!(!q.push(pending(5, 4)), "over the limit");
        assert_eq!(q.next_due_ns(), Some(10));
        assert!(q.pop_due(9).is_none());
        let order: Vec<u64> = std::iter::from_fn(|| q.pop_due(100))
            .map(|p| p.header.request_id)
            .collect();
        assert_eq!(order, vec![2, 3, 1]);
        assert_eq!(q.len(), 0);
        assert!(q.push(pending(1, 5)), "room again after popping");
    }
}
