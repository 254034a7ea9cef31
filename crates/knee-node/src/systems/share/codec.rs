//! Bodies of the share operations (after the wire request/reply headers). Little-endian;
//! a string is `len u16 | bytes`. Every length is checked against what is left.
//!
//! ```text
//! register   peer str | name str | size u64 | checksum u64      reply: empty
//! unregister peer str | name str                                reply: removed u8
//! search     name str                      reply: count u16 | (peer str | size u64 | checksum u64)*
//! obtain     name str                      reply: size u64, then `size` raw bytes after the frame
//! list       (empty)                       reply: ready u8 | count u32 | (name str | size u64 | checksum u64)*
//! ```

/// Longest peer address accepted ("host:port").
pub const MAX_PEER_BYTES: usize = 64;
/// Most holders one search returns.
pub const MAX_HOLDERS: usize = 64;

/// One index entry: `peer` holds `name`, of `size_bytes`, whose xxh3 is `checksum`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub peer: String,
    pub name: String,
    pub size_bytes: u64,
    pub checksum: u64,
}

pub fn put_str(out: &mut Vec<u8>, s: &str) {
    // Callers bound their strings far below 64 KiB (names, addresses).
    out.extend_from_slice(&(s.len().min(u16::MAX as usize) as u16).to_le_bytes());
    out.extend_from_slice(&s.as_bytes()[..s.len().min(u16::MAX as usize)]);
}

pub fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// Reads a body front to back; every read is bounds-checked.
pub struct Cursor<'a> {
    b: &'a [u8],
}

impl<'a> Cursor<'a> {
    pub fn new(b: &'a [u8]) -> Self {
        Cursor { b }
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], String> {
        if self.b.len() < n {
            return Err(format!("body too short for {what}"));
        }
        let (head, rest) = self.b.split_at(n);
        self.b = rest;
        Ok(head)
    }

    pub fn u8(&mut self, what: &str) -> Result<u8, String> {
        Ok(self.take(1, what)?[0])
    }

    pub fn u16(&mut self, what: &str) -> Result<u16, String> {
        let b = self.take(2, what)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    pub fn u32(&mut self, what: &str) -> Result<u32, String> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub fn u64(&mut self, what: &str) -> Result<u64, String> {
        let mut x = [0u8; 8];
        x.copy_from_slice(self.take(8, what)?);
        Ok(u64::from_le_bytes(x))
    }

    /// A string's raw bytes (names are validated by `names::check_name`).
    pub fn bytes(&mut self, what: &str) -> Result<&'a [u8], String> {
        let n = self.u16(what)? as usize;
        self.take(n, what)
    }

    pub fn peer(&mut self) -> Result<String, String> {
        let raw = self.bytes("peer")?;
        if raw.is_empty() || raw.len() > MAX_PEER_BYTES || raw.contains(&0) {
            return Err(format!(
                "peer address must be 1..={MAX_PEER_BYTES} bytes without NUL"
            ));
        }
        String::from_utf8(raw.to_vec()).map_err(|_| "peer address is not UTF-8".to_string())
    }

    pub fn end(&self) -> Result<(), String> {
        if self.b.is_empty() {
            Ok(())
        } else {
            Err(format!("{} unexpected bytes after the body", self.b.len()))
        }
    }
}

pub fn register_body(out: &mut Vec<u8>, e: &Entry) {
    put_str(out, &e.peer);
    put_str(out, &e.name);
    put_u64(out, e.size_bytes);
    put_u64(out, e.checksum);
}

pub fn unregister_body(out: &mut Vec<u8>, peer: &str, name: &str) {
    put_str(out, peer);
    put_str(out, name);
}

pub fn search_reply(out: &mut Vec<u8>, holders: &[Entry]) {
    out.extend_from_slice(&(holders.len() as u16).to_le_bytes());
    for h in holders {
        put_str(out, &h.peer);
        put_u64(out, h.size_bytes);
        put_u64(out, h.checksum);
    }
}

pub fn decode_search_reply(name: &str, body: &[u8]) -> Result<Vec<Entry>, String> {
    let mut c = Cursor::new(body);
    let count = c.u16("count")? as usize;
    if count > MAX_HOLDERS {
        return Err(format!(
            "search reply lists {count} holders, more than {MAX_HOLDERS}"
        ));
    }
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        out.push(Entry {
            peer: c.peer()?,
            name: name.to_string(),
            size_bytes: c.u64("size")?,
            checksum: c.u64("checksum")?,
        });
    }
    c.end()?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn search_reply_round_trips_and_short_bodies_fail() {
        let e = Entry {
            peer: "127.0.0.1:9".into(),
            name: "f".into(),
            size_bytes: 7,
            checksum: u64::MAX,
        };
        let mut b = Vec::new();
        search_reply(&mut b, &[e.clone(), e.clone()]);
        assert_eq!(decode_search_reply("f", &b).unwrap(), vec![e.clone(), e]);
        assert!(decode_search_reply("f", &b[..b.len() - 1]).is_err());
        let mut c = Cursor::new(&[5, 0, b'a']);
        assert!(c.bytes("name").unwrap_err().contains("too short"));
    }
}
