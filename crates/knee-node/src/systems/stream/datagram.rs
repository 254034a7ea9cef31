//! The stream datagrams: a block request and its reply, each one UDP datagram.
//!
//! ```text
//! request (24 B) = magic u32 | version u8 | kind u8 | stream u16 | frame u32 | block u32
//!                | request_id u64
//! reply          = magic u32 | version u8 | status u8 | stream u16 | frame u32 | block u32
//!                | request_id u64 | server_ns u64 | delay_ns u64 | block (768 B, status ok only)
//! ```
//! All integers little-endian. A datagram that is not exactly one of these (short, long,
//! wrong magic or version, unknown kind) is malformed: a service counts and ignores it.

/// "KNST" read as a little-endian u32.
pub const MAGIC: u32 = u32::from_le_bytes(*b"KNST");
pub const VERSION: u8 = 1;
pub const KIND_BLOCK: u8 = 0;
pub const REQUEST_BYTES: usize = 24;
pub const REPLY_HEADER_BYTES: usize = 40;
/// A block is 16 x 16 RGB pixels.
pub const BLOCK_SIDE_PX: u32 = 16;
/// The sample `op` of a block request (stream has one operation).
pub const OP_BLOCK: u16 = 0;
pub const BLOCK_BYTES: usize = (BLOCK_SIDE_PX * BLOCK_SIDE_PX * 3) as usize;
pub const REPLY_BYTES: usize = REPLY_HEADER_BYTES + BLOCK_BYTES;

/// Reply status: the block follows.
pub const REPLY_OK: u8 = 0;
/// Reply status: no such stream, or the block is outside the stream's frame.
pub const REPLY_NO_SUCH_BLOCK: u8 = 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockId {
    pub stream: u16,
    pub frame: u32,
    pub block: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    pub id: BlockId,
    pub request_id: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplyHeader {
    pub status: u8,
    pub id: BlockId,
    pub request_id: u64,
    /// The service's own residence (processing and timer lateness), emulated delay excluded.
    pub server_ns: u64,
    /// The emulated link delay the reply waited for.
    pub delay_ns: u64,
}

/// Why a datagram was refused (for the service's log; each kind is counted the same).
#[derive(Debug, PartialEq, Eq)]
pub enum Malformed {
    Length(usize),
    Magic(u32),
    Version(u8),
    Kind(u8),
}

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Malformed::Length(n) => write!(f, "{n} bytes, expected {REQUEST_BYTES}"),
            Malformed::Magic(m) => write!(f, "wrong magic {m:#010x}"),
            Malformed::Version(v) => write!(f, "version {v}, expected {VERSION}"),
            Malformed::Kind(k) => write!(f, "unknown kind {k}"),
        }
    }
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

/// The 16-byte prefix shared by requests and replies (magic, version, kind/status, block id).
fn encode_prefix(out: &mut Vec<u8>, code: u8, id: &BlockId) {
    out.extend_from_slice(&MAGIC.to_le_bytes());
    out.push(VERSION);
    out.push(code);
    out.extend_from_slice(&id.stream.to_le_bytes());
    out.extend_from_slice(&id.frame.to_le_bytes());
    out.extend_from_slice(&id.block.to_le_bytes());
}

/// Checks the prefix of a datagram of the expected length; returns (code, block id).
fn decode_prefix(b: &[u8], ok_len: impl Fn(usize) -> bool) -> Result<(u8, BlockId), Malformed> {
    if !ok_len(b.len()) {
        return Err(Malformed::Length(b.len()));
    }
    let magic = u32_at(b, 0);
    if magic != MAGIC {
        return Err(Malformed::Magic(magic));
    }
    if b[4] != VERSION {
        return Err(Malformed::Version(b[4]));
    }
    let id = BlockId {
        stream: u16_at(b, 6),
        frame: u32_at(b, 8),
        block: u32_at(b, 12),
    };
    Ok((b[5], id))
}

impl Request {
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.clear();
        encode_prefix(out, KIND_BLOCK, &self.id);
        out.extend_from_slice(&self.request_id.to_le_bytes());
    }

    pub fn decode(b: &[u8]) -> Result<Request, Malformed> {
        let (kind, id) = decode_prefix(b, |n| n == REQUEST_BYTES)?;
        if kind != KIND_BLOCK {
            return Err(Malformed::Kind(kind));
        }
        Ok(Request {
            id,
            request_id: u64_at(b, 16),
        })
    }
}

impl ReplyHeader {
    /// Encodes the header; an ok reply then carries the block's pixels.
    pub fn encode(&self, out: &mut Vec<u8>) {
        out.clear();
        encode_prefix(out, self.status, &self.id);
        for v in [self.request_id, self.server_ns, self.delay_ns] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        if self.status == REPLY_OK {
            fill_block(&self.id, out);
        }
    }

    /// Decodes a reply; returns the header and the block (empty unless ok).
    pub fn decode(b: &[u8]) -> Result<(ReplyHeader, &[u8]), Malformed> {
        let (status, id) = decode_prefix(b, |n| n == REPLY_HEADER_BYTES || n == REPLY_BYTES)?;
        let h = ReplyHeader {
            status,
            id,
            request_id: u64_at(b, 16),
            server_ns: u64_at(b, 24),
            delay_ns: u64_at(b, 32),
        };
        Ok((h, &b[REPLY_HEADER_BYTES..]))
    }
}

/// Appends a block's 768 bytes of pixels: a pattern of its (stream, frame, block), so a
/// client can check that it got the block it asked for.
pub fn fill_block(id: &BlockId, out: &mut Vec<u8>) {
    let seed = (id.stream as u32).wrapping_mul(131) ^ id.frame.wrapping_mul(31) ^ id.block.wrapping_mul(7);
    out.extend((0..BLOCK_BYTES as u32).map(|i| seed.wrapping_add(i).to_le_bytes()[0] ^ (seed >> 8) as u8));
}

/// True if `pixels` are the block `id`'s.
pub fn block_matches(id: &BlockId, pixels: &[u8]) -> bool {
    let mut expected = Vec::with_capacity(BLOCK_BYTES);
    fill_block(id, &mut expected);
    pixels == expected.as_slice()
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: BlockId = BlockId {
        stream: 7,
        frame: 3,
        block: 191,
    };

    #[test]
    fn request_round_trip_and_length_checks() {
        let mut b = Vec::new();
        Request {
            id: ID,
            request_id: 42,
        }
        .encode(&mut b);
        assert_eq!(b.len(), REQUEST_BYTES);
        assert_eq!(
            Request::decode(&b),
            Ok(Request {
                id: ID,
                request_id: 42
            })
        );
        assert_eq!(Request::decode(&b[..23]), Err(Malformed::Length(23)));
        let mut bad = b.clone();
        bad[0] ^= 1;
        assert!(matches!(Request::decode(&bad), Err(Malformed::Magic(_))));
        let mut bad = b.clone();
        bad[4] = 9;
        assert_eq!(Request::decode(&bad), Err(Malformed::Version(9)));
        let mut bad = b;
        bad[5] = 3;
        assert_eq!(Request::decode(&bad), Err(Malformed::Kind(3)));
    }

    #[test]
    fn reply_round_trip_carries_the_block() {
        let h = ReplyHeader {
            status: REPLY_OK,
            id: ID,
            request_id: 5,
            server_ns: 11,
            delay_ns: 22,
        };
        let mut b = Vec::new();
        h.encode(&mut b);
        assert_eq!(b.len(), REPLY_BYTES);
        let (back, pixels) = ReplyHeader::decode(&b).expect("valid reply");
        assert_eq!(back, h);
        assert!(block_matches(&ID, pixels));
        assert!(!block_matches(&BlockId { block: 190, ..ID }, pixels));
    }
}
