//! Request and reply headers: fixed-size, little-endian.
//!
//! ```text
//! request  (12 B): request_id u64 | op u16 | flags u16
//! reply    (44 B): request_id u64 | status u16 | flags u16
//!                  | server_ns u64 | queue_ns u64 | service_ns u64 | detail_ns u64
//! ```
//! `server_ns` is the server's residence time (frame fully read to reply about to be written);
//! `queue_ns` the part spent waiting for a worker; `service_ns` the part spent in the handler;
//! `detail_ns` a system-specific part of the service time (the database, for chat; 0 if none).

/// Bytes of a request header.
pub const REQUEST_HEADER_BYTES: usize = 12;
/// Bytes of a reply header.
pub const REPLY_HEADER_BYTES: usize = 44;

/// Outcome of a request as the server reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub enum WireStatus {
    Ok = 0,
    /// The body did not parse; the reply body carries a UTF-8 reason.
    BadRequest = 1,
    /// The operation code is not one this server knows.
    UnknownOp = 2,
    /// The server's queue is full; the request was not served.
    Overloaded = 3,
    /// The handler failed; the reply body carries a UTF-8 reason.
    ServerError = 4,
}

impl WireStatus {
    pub fn from_u16(v: u16) -> Option<Self> {
        Some(match v {
            0 => WireStatus::Ok,
            1 => WireStatus::BadRequest,
            2 => WireStatus::UnknownOp,
            3 => WireStatus::Overloaded,
            4 => WireStatus::ServerError,
            _ => return None,
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestHeader {
    pub request_id: u64,
    pub op: u16,
    pub flags: u16,
}

impl RequestHeader {
    pub fn encode(&self) -> [u8; REQUEST_HEADER_BYTES] {
        let mut b = [0u8; REQUEST_HEADER_BYTES];
        b[0..8].copy_from_slice(&self.request_id.to_le_bytes());
        b[8..10].copy_from_slice(&self.op.to_le_bytes());
        b[10..12].copy_from_slice(&self.flags.to_le_bytes());
        b
    }

    /// Splits a request payload into its header and body; `None` if it is too short.
    pub fn decode(payload: &[u8]) -> Option<(RequestHeader, &[u8])> {
        if payload.len() < REQUEST_HEADER_BYTES {
            return None;
        }
        let h = RequestHeader {
            request_id: u64_at(payload, 0),
            op: u16_at(payload, 8),
            flags: u16_at(payload, 10),
        };
        Some((h, &payload[REQUEST_HEADER_BYTES..]))
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplyHeader {
    pub request_id: u64,
    pub status: u16,
    pub flags: u16,
    pub server_ns: u64,
    pub queue_ns: u64,
    pub service_ns: u64,
    pub detail_ns: u64,
}

impl ReplyHeader {
    pub fn encode(&self) -> [u8; REPLY_HEADER_BYTES] {
        let mut b = [0u8; REPLY_HEADER_BYTES];
        b[0..8].copy_from_slice(&self.request_id.to_le_bytes());
        b[8..10].copy_from_slice(&self.status.to_le_bytes());
        b[10..12].copy_from_slice(&self.flags.to_le_bytes());
        b[12..20].copy_from_slice(&self.server_ns.to_le_bytes());
        b[20..28].copy_from_slice(&self.queue_ns.to_le_bytes());
        b[28..36].copy_from_slice(&self.service_ns.to_le_bytes());
        b[36..44].copy_from_slice(&self.detail_ns.to_le_bytes());
        b
    }

    /// Splits a reply payload into its header and body; `None` if it is too short.
    pub fn decode(payload: &[u8]) -> Option<(ReplyHeader, &[u8])> {
        if payload.len() < REPLY_HEADER_BYTES {
            return None;
        }
        let h = ReplyHeader {
            request_id: u64_at(payload, 0),
            status: u16_at(payload, 8),
            flags: u16_at(payload, 10),
            server_ns: u64_at(payload, 12),
            queue_ns: u64_at(payload, 20),
            service_ns: u64_at(payload, 28),
            detail_ns: u64_at(payload, 36),
        };
        Some((h, &payload[REPLY_HEADER_BYTES..]))
    }
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_round_trip() {
        let q = RequestHeader {
            request_id: u64::MAX - 3,
            op: 7,
            flags: 0x8001,
        };
        let mut payload = q.encode().to_vec();
        payload.extend_from_slice(b"body");
        assert_eq!(RequestHeader::decode(&payload), Some((q, &b"body"[..])));

        let r = ReplyHeader {
            request_id: 42,
            status: WireStatus::Overloaded as u16,
            flags: 1,
            server_ns: 5,
            queue_ns: 2,
            service_ns: 3,
            detail_ns: 1,
        };
        assert_eq!(ReplyHeader::decode(&r.encode()), Some((r, &b""[..])));
        assert_eq!(ReplyHeader::decode(&[0u8; 43]), None);
        assert_eq!(RequestHeader::decode(&[0u8; 11]), None);
    }
}
