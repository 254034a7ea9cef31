//! Frame assembly: which blocks of the frame being fetched are queued, in flight, done or
//! missing. A frame is resolved when every block is done or given up on, as the report's
//! FrameAccessor.getFrame returns once each block arrived or timed out.

use std::collections::VecDeque;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Block {
    Queued,
    /// Copies in flight (2 when hedged).
    InFlight(u8),
    Done,
    Missing,
}

pub struct Frame {
    pub number: u32,
    blocks: Vec<Block>,
    /// Sends so far per block (retransmissions included; a hedge pair counts once).
    attempts: Vec<u8>,
    queue: VecDeque<u32>,
    unresolved: u32,
    pub ok: u32,
    pub missing: u32,
}

impl Frame {
    pub fn new(number: u32, blocks: u32) -> Self {
        Frame {
            number,
            blocks: vec![Block::Queued; blocks as usize],
            attempts: vec![0; blocks as usize],
            queue: (0..blocks).collect(),
            unresolved: blocks,
            ok: 0,
            missing: 0,
        }
    }

    pub fn is_resolved(&self) -> bool {
        self.unresolved == 0
    }

    /// The next block to request and its attempt number (1 = first send).
    pub fn next_block(&mut self) -> Option<(u32, u8)> {
        let block = self.queue.pop_front()?;
        let i = block as usize;
        self.blocks[i] = Block::InFlight(1);
        self.attempts[i] = self.attempts[i].saturating_add(1);
        Some((block, self.attempts[i]))
    }

    /// A second copy of a block just taken by `next_block` (hedging).
    pub fn add_copy(&mut self, block: u32) {
        if let Block::InFlight(n) = &mut self.blocks[block as usize] {
            *n += 1;
        }
    }

    /// A copy came back with the block; false if the block was already done (a redundant
    /// hedge copy) or the frame no longer waits for it.
    pub fn on_ok(&mut self, block: u32) -> bool {
        let Some(state) = self.blocks.get_mut(block as usize) else {
            return false;
        };
        match *state {
            Block::InFlight(_) => {
                *state = Block::Done;
                self.unresolved -= 1;
                self.ok += 1;
                true
            }
            _ => false,
        }
    }

    /// A copy failed (timed out or came back wrong). While another copy is in flight the
    /// block waits for it; otherwise it is queued again if `retransmissions` allow, else
    /// given up as missing.
    pub fn on_failed(&mut self, block: u32, retransmissions: u32) {
        let i = block as usize;
        let Some(state) = self.blocks.get_mut(i) else {
            return;
        };
        match *state {
            Block::InFlight(n) if n > 1 => *state = Block::InFlight(n - 1),
            Block::InFlight(_) => {
                if u32::from(self.attempts[i]) <= retransmissions {
                    *state = Block::Queued;
                    // First in line: a frame is displayed in order, so its holes go first.
                    self.queue.push_front(block);
                } else {
                    *state = Block::Missing;
                    self.unresolved -= 1;
                    self.missing += 1;
                }
            }
            _ => {}
        }
    }

    /// Gives up on every block not yet done (the run's time is up or a stop was asked).
    pub fn abandon(&mut self) {
        for state in &mut self.blocks {
            if matches!(state, Block::Queued | Block::InFlight(_)) {
                *state = Block::Missing;
                self.missing += 1;
            }
        }
        self.queue.clear();
        self.unresolved = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_resolve_by_reply_retry_or_miss() {
        let mut f = Frame::new(0, 3);
        assert_eq!(f.next_block(), Some((0, 1)));
        assert_eq!(f.next_block(), Some((1, 1)));
        assert_eq!(f.next_block(), Some((2, 1)));
        assert_eq!(f.next_block(), None);
        assert!(f.on_ok(0));
        assert!(!f.on_ok(0), "a second copy of a done block is redundant");
        f.on_failed(1, 1); // one retransmission allowed: queued again, first in line
        assert_eq!(f.next_block(), Some((1, 2)));
        f.on_failed(1, 1); // second failure: missing
        f.on_failed(2, 0);
        assert!(f.is_resolved());
        assert_eq!((f.ok, f.missing), (1, 2));
    }

    #[test]
    fn a_hedged_block_waits_for_its_last_copy() {
        let mut f = Frame::new(5, 1);
        let (b, _) = f.next_block().expect("one block");
        f.add_copy(b);
        f.on_failed(b, 0);
        assert!(!f.is_resolved(), "the other copy is still in flight");
        assert!(f.on_ok(b));
        assert!(f.is_resolved());
    }
}
