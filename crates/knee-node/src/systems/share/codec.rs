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

pub use super::files::SharedFile;
use super::names::check_name;
pub use crate::wire::body::{put_str16, put_u64};
use crate::wire::BodyReader;

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

/// A peer address field: `str`, 1..=MAX_PEER_BYTES of UTF-8 without NUL.
pub fn read_peer(c: &mut BodyReader) -> Result<String, String> {
    let raw = c.bytes16("peer")?;
    if raw.is_empty() || raw.len() > MAX_PEER_BYTES || raw.contains(&0) {
        return Err(format!(
            "peer address must be 1..={MAX_PEER_BYTES} bytes without NUL"
        ));
    }
    String::from_utf8(raw.to_vec()).map_err(|_| "peer address is not UTF-8".to_string())
}

pub fn register_body(out: &mut Vec<u8>, e: &Entry) {
    put_str16(out, &e.peer);
    put_str16(out, &e.name);
    put_u64(out, e.size_bytes);
    put_u64(out, e.checksum);
}

pub fn unregister_body(out: &mut Vec<u8>, peer: &str, name: &str) {
    put_str16(out, peer);
    put_str16(out, name);
}

/// A register request's entry; the error is the reason sent back.
pub fn decode_register(body: &[u8]) -> Result<Entry, String> {
    let mut c = BodyReader::new(body);
    let peer = read_peer(&mut c)?;
    let name = check_name(c.bytes16("name")?)?.to_string();
    let (size_bytes, checksum) = (c.u64("size")?, c.u64("checksum")?);
    c.end()?;
    Ok(Entry {
        peer,
        name,
        size_bytes,
        checksum,
    })
}

/// An unregister request: (peer, name).
pub fn decode_unregister(body: &[u8]) -> Result<(String, &str), String> {
    let mut c = BodyReader::new(body);
    let peer = read_peer(&mut c)?;
    let name = check_name(c.bytes16("name")?)?;
    c.end()?;
    Ok((peer, name))
}

/// A search or obtain request: one checked file name.
pub fn decode_name(body: &[u8]) -> Result<&str, String> {
    let mut c = BodyReader::new(body);
    let name = check_name(c.bytes16("name")?)?;
    c.end()?;
    Ok(name)
}

/// A list reply: `ready u8 | count u32 | (name str | size u64 | checksum u64)*`; not
/// ready (`None`) while the peer is still generating its files.
pub fn list_reply(out: &mut Vec<u8>, files: Option<&[SharedFile]>) {
    out.push(u8::from(files.is_some()));
    let files = files.unwrap_or_default();
    out.extend_from_slice(&(files.len() as u32).to_le_bytes());
    for f in files {
        put_str16(out, &f.name);
        put_u64(out, f.size_bytes);
        put_u64(out, f.checksum);
    }
}

/// A list reply: `None` while the peer is still generating its files.
pub fn decode_list(body: &[u8]) -> Result<Option<Vec<SharedFile>>, String> {
    let mut c = BodyReader::new(body);
    if c.u8("ready")? == 0 {
        return Ok(None);
    }
    let count = c.u32("count")? as usize;
    // No trust in `count` for the allocation: each entry takes at least 18 bytes.
    let mut files = Vec::with_capacity(count.min(body.len() / 18));
    for _ in 0..count {
        files.push(SharedFile {
            name: String::from_utf8_lossy(c.bytes16("name")?).into_owned(),
            size_bytes: c.u64("size")?,
            checksum: c.u64("checksum")?,
        });
    }
    c.end()?;
    Ok(Some(files))
}

pub fn search_reply(out: &mut Vec<u8>, holders: &[Entry]) {
    out.extend_from_slice(&(holders.len() as u16).to_le_bytes());
    for h in holders {
        put_str16(out, &h.peer);
        put_u64(out, h.size_bytes);
        put_u64(out, h.checksum);
    }
}

pub fn decode_search_reply(name: &str, body: &[u8]) -> Result<Vec<Entry>, String> {
    let mut c = BodyReader::new(body);
    let count = c.u16("count")? as usize;
    if count > MAX_HOLDERS {
        return Err(format!(
            "search reply lists {count} holders, more than {MAX_HOLDERS}"
        ));
    }
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        out.push(Entry {
            peer: read_peer(&mut c)?,
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
        let mut c = BodyReader::new(&[5, 0, b'a']);
        assert!(c.bytes16("name").unwrap_err().contains("bytes short"));
    }
}
