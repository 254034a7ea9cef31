//! The reply's body as gRPC length-prefixed messages, read as its bytes arrive: each
//! message's 5-byte prefix (compressed flag, length big-endian) is checked and its bytes
//! counted, never kept (the reply message is counted, not decoded).

use super::message::PREFIX_BYTES;

/// What is wrong with a reply's framing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameError {
    /// A compressed flag other than 0 and 1, a compressed message when the reply named no
    /// `grpc-encoding`, or a body that ends inside a message.
    Malformed,
    /// A message longer than the bound.
    TooLarge,
}

/// Reads one reply's messages.
#[derive(Clone, Copy, Debug)]
pub struct Frames {
    max_message_bytes: u64,
    /// The reply named a `grpc-encoding`: a compressed message (flag 1) is allowed.
    compression: bool,
    /// Bytes of the current prefix seen, and the prefix so far.
    prefix_seen: usize,
    prefix: [u8; PREFIX_BYTES],
    /// Bytes of the current message still to come.
    remaining: u64,
    /// Whole messages read.
    pub messages: u32,
    /// Message bytes read (prefixes left out).
    pub message_bytes: u64,
}

impl Frames {
    pub fn new(max_message_bytes: u64, compression: bool) -> Frames {
        Frames {
            max_message_bytes,
            compression,
            prefix_seen: 0,
            prefix: [0; PREFIX_BYTES],
            remaining: 0,
            messages: 0,
            message_bytes: 0,
        }
    }

    /// Reads the next bytes of the body.
    pub fn feed(&mut self, mut data: &[u8]) -> Result<(), FrameError> {
        while !data.is_empty() {
            if self.remaining > 0 {
                let n = (self.remaining.min(data.len() as u64)) as usize;
                self.remaining -= n as u64;
                self.message_bytes += n as u64;
                data = &data[n..];
                if self.remaining == 0 {
                    self.messages += 1;
                }
                continue;
            }
            let n = (PREFIX_BYTES - self.prefix_seen).min(data.len());
            self.prefix[self.prefix_seen..self.prefix_seen + n].copy_from_slice(&data[..n]);
            self.prefix_seen += n;
            data = &data[n..];
            if self.prefix_seen < PREFIX_BYTES {
                return Ok(());
            }
            self.prefix_seen = 0;
            match self.prefix[0] {
                0 => {}
                1 if self.compression => {}
                _ => return Err(FrameError::Malformed),
            }
            let len = u32::from_be_bytes([self.prefix[1], self.prefix[2], self.prefix[3], self.prefix[4]]);
            if u64::from(len) > self.max_message_bytes {
                return Err(FrameError::TooLarge);
            }
            if len == 0 {
                self.messages += 1;
            }
            self.remaining = u64::from(len);
        }
        Ok(())
    }

    /// The body ended: every message must be whole. Returns the count of messages.
    pub fn end(&self) -> Result<u32, FrameError> {
        if self.prefix_seen > 0 || self.remaining > 0 {
            return Err(FrameError::Malformed);
        }
        Ok(self.messages)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    fn read(parts: &[&[u8]], compression: bool) -> Result<(u32, u64), FrameError> {
        let mut f = Frames::new(100, compression);
        for p in parts {
            f.feed(p)?;
        }
        f.end().map(|n| (n, f.message_bytes))
    }

    #[test]
    fn messages_are_counted_wherever_reads_end() {
        let body = [0u8, 0, 0, 0, 3, b'a', b'b', b'c', 0, 0, 0, 0, 0];
        assert_eq!(read(&[&body], false), Ok((2, 3)));
        let singles: Vec<&[u8]> = body.chunks(1).collect();
        assert_eq!(read(&singles, false), Ok((2, 3)));
        assert_eq!(read(&[], false), Ok((0, 0)));
    }

    #[test]
    fn bad_framing_is_malformed_or_too_large() {
        assert_eq!(read(&[&[0, 0, 0, 0, 3, b'a']], false), Err(FrameError::Malformed));
        assert_eq!(read(&[&[0, 0, 0]], false), Err(FrameError::Malformed));
        assert_eq!(read(&[&[2, 0, 0, 0, 0]], false), Err(FrameError::Malformed));
        assert_eq!(read(&[&[1, 0, 0, 0, 0]], false), Err(FrameError::Malformed));
        assert_eq!(read(&[&[1, 0, 0, 0, 0]], true), Ok((1, 0)));
        assert_eq!(read(&[&[0, 0, 0, 1, 0]], false), Err(FrameError::TooLarge));
    }

    #[test]
    fn never_panics_on_random_bytes() {
        let mut rng = Rng::new(35);
        for _ in 0..20_000 {
            let n = rng.range_u32(0, 64) as usize;
            let bytes: Vec<u8> = (0..n).map(|_| (rng.next_u64() % 4) as u8).collect();
            let mut f = Frames::new(8, rng.next_u64() % 2 == 0);
            let mut rest = &bytes[..];
            while !rest.is_empty() {
                let k = (rng.range_u32(1, 9) as usize).min(rest.len());
                if f.feed(&rest[..k]).is_err() {
                    break;
                }
                rest = &rest[k..];
            }
            let _ = f.end();
        }
    }
}
