//! Request and reply bodies of chat, with their limits.
//!
//! ```text
//! request = client str16 | reply_bytes u32 | op fields
//!   login  : user str16 | password str16
//!   logout : user str16 | room u32
//!   join   : user str16 | room u32
//!   post   : user str16 | room u32 | text bytes32
//!   fetch  : room u32 | since_id u64 | max u32
//!   audit  : (nothing: the client's own writes)
//! reply   = ack u32 | op data | zero padding up to reply_bytes
//!   post   : message_id u64
//!   fetch  : n u32 | n x (id u64 | user str16 | text bytes32)
//!   audit  : n u32 | n x (request_id u64 | op u16 | applied u32)
//! str16 = len u16 | UTF-8 bytes (1..=64, no NUL); bytes32 = len u32 | bytes (<= 4096, any)
//! ```
//! Names are refused rather than altered when they break a rule; message text is stored
//! exactly, NUL bytes and SQL metacharacters included (every query is parameterized).

use super::{OP_AUDIT, OP_FETCH, OP_JOIN, OP_LOGIN, OP_LOGOUT, OP_POST};
pub use crate::wire::body::{put_bytes32, put_str16};
use crate::wire::BodyReader;

pub const MAX_NAME_BYTES: usize = 64;
pub const MAX_TEXT_BYTES: usize = 4096;
pub const MAX_REPLY_BYTES: u32 = 1 << 20;
/// Messages one fetch returns at most.
pub const MAX_FETCH: u32 = 1000;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    Login { user: String, password: String },
    Logout { user: String, room: u32 },
    Join { user: String, room: u32 },
    Post { user: String, room: u32, text: Vec<u8> },
    Fetch { room: u32, since_id: u64, max: u32 },
    Audit,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    pub client: String,
    pub reply_bytes: u32,
    pub op: Op,
}

impl Request {
    pub fn code(&self) -> u16 {
        match self.op {
            Op::Login { .. } => OP_LOGIN,
            Op::Logout { .. } => OP_LOGOUT,
            Op::Join { .. } => OP_JOIN,
            Op::Post { .. } => OP_POST,
            Op::Fetch { .. } => OP_FETCH,
            Op::Audit => OP_AUDIT,
        }
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        put_str16(out, &self.client);
        out.extend_from_slice(&self.reply_bytes.to_le_bytes());
        match &self.op {
            Op::Login { user, password } => {
                put_str16(out, user);
                put_str16(out, password);
            }
            Op::Logout { user, room } | Op::Join { user, room } => {
                put_str16(out, user);
                out.extend_from_slice(&room.to_le_bytes());
            }
            Op::Post { user, room, text } => {
                put_str16(out, user);
                out.extend_from_slice(&room.to_le_bytes());
                put_bytes32(out, text);
            }
            Op::Fetch { room, since_id, max } => {
                out.extend_from_slice(&room.to_le_bytes());
                out.extend_from_slice(&since_id.to_le_bytes());
                out.extend_from_slice(&max.to_le_bytes());
            }
            Op::Audit => {}
        }
    }

    /// Parses and checks a request body; the error is the reason sent back to the client.
    pub fn decode(op: u16, body: &[u8]) -> Result<Request, String> {
        let mut r = BodyReader::new(body);
        let client = read_name(&mut r, "client")?;
        let reply_bytes = r.u32("reply_bytes")?;
        if reply_bytes > MAX_REPLY_BYTES {
            return Err(format!("reply_bytes {reply_bytes} exceeds {MAX_REPLY_BYTES}"));
        }
        let op = match op {
            OP_LOGIN => Op::Login {
                user: read_name(&mut r, "user")?,
                password: read_name(&mut r, "password")?,
            },
            OP_LOGOUT => Op::Logout {
                user: read_name(&mut r, "user")?,
                room: r.u32("room")?,
            },
            OP_JOIN => Op::Join {
                user: read_name(&mut r, "user")?,
                room: r.u32("room")?,
            },
            OP_POST => Op::Post {
                user: read_name(&mut r, "user")?,
                room: r.u32("room")?,
                text: read_text(&mut r)?,
            },
            OP_FETCH => Op::Fetch {
                room: r.u32("room")?,
                since_id: r.u64("since_id")?,
                max: r.u32("max")?.min(MAX_FETCH),
            },
            OP_AUDIT => Op::Audit,
            other => return Err(format!("chat has no operation {other}")),
        };
        r.end()?;
        Ok(Request {
            client,
            reply_bytes,
            op,
        })
    }
}

/// Checks a name (client, user, password): what the database stores as TEXT.
pub fn check_name(what: &str, s: &str) -> Result<(), String> {
    if s.is_empty() || s.len() > MAX_NAME_BYTES {
        return Err(format!(
            "{what} must be 1..={MAX_NAME_BYTES} bytes, got {}",
            s.len()
        ));
    }
    if s.contains('\0') {
        return Err(format!("{what} contains a NUL byte"));
    }
    Ok(())
}

/// A name field: `str16`, checked by [`check_name`].
pub fn read_name(r: &mut BodyReader, what: &str) -> Result<String, String> {
    let raw = r.bytes16(what)?;
    if raw.len() > MAX_NAME_BYTES {
        return Err(format!(
            "{what} must be 1..={MAX_NAME_BYTES} bytes, got {}",
            raw.len()
        ));
    }
    let s = std::str::from_utf8(raw).map_err(|_| format!("{what} is not valid UTF-8"))?;
    check_name(what, s)?;
    Ok(s.to_string())
}

/// Message text: `bytes32`, stored exactly.
pub fn read_text(r: &mut BodyReader) -> Result<Vec<u8>, String> {
    Ok(r.bytes32("text", MAX_TEXT_BYTES)?.to_vec())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_names_and_lengths_are_refused() {
        let mut body = Vec::new();
        put_str16(&mut body, "c");
        body.extend_from_slice(&4u32.to_le_bytes());
        let mut bad_user = body.clone();
        put_str16(&mut bad_user, "a\0b");
        put_str16(&mut bad_user, "pw");
        assert!(Request::decode(OP_LOGIN, &bad_user).unwrap_err().contains("NUL"));
        let mut long = body.clone();
        put_str16(&mut long, &"x".repeat(65));
        assert!(Request::decode(OP_LOGIN, &long).unwrap_err().contains("1..=64"));
        let mut lying = body.clone();
        lying.extend_from_slice(&60u16.to_le_bytes());
        assert!(Request::decode(OP_LOGIN, &lying).unwrap_err().contains("short"));
        let mut huge = body;
        put_str16(&mut huge, "u");
        huge.extend_from_slice(&1u32.to_le_bytes());
        huge.extend_from_slice(&u32::MAX.to_le_bytes());
        assert!(Request::decode(OP_POST, &huge).unwrap_err().contains("4096"));
    }
}
