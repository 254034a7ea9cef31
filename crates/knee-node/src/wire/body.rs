//! Operation bodies (after the request/reply headers): a bounds-checked reader and the
//! little-endian writers every framed-TCP system shares. No length is trusted: each read
//! checks what is left of the body first.

/// Reads a body front to back.
pub struct BodyReader<'a> {
    rest: &'a [u8],
}

impl<'a> BodyReader<'a> {
    pub fn new(body: &'a [u8]) -> Self {
        BodyReader { rest: body }
    }

    pub fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], String> {
        if self.rest.len() < n {
            return Err(format!("{what}: body ends {} bytes short", n - self.rest.len()));
        }
        let (head, rest) = self.rest.split_at(n);
        self.rest = rest;
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

    /// A `len u16 | bytes` field, unchecked beyond its length (callers validate content).
    pub fn bytes16(&mut self, what: &str) -> Result<&'a [u8], String> {
        let n = self.u16(what)? as usize;
        self.take(n, what)
    }

    /// A `len u32 | bytes` field of at most `max_bytes`.
    pub fn bytes32(&mut self, what: &str, max_bytes: usize) -> Result<&'a [u8], String> {
        let n = self.u32(what)? as usize;
        if n > max_bytes {
            return Err(format!("{what} must be <= {max_bytes} bytes, got {n}"));
        }
        self.take(n, what)
    }

    /// Succeeds only when the whole body was read.
    pub fn end(&self) -> Result<(), String> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(format!("{} unexpected bytes after the body", self.rest.len()))
        }
    }
}

/// Writes `len u16 | bytes`. Callers bound their strings far below 64 KiB; a longer one is
/// cut here, and the receiver's own checks refuse it.
pub fn put_str16(out: &mut Vec<u8>, s: &str) {
    let len = s.len().min(u16::MAX as usize);
    out.extend_from_slice(&(len as u16).to_le_bytes());
    out.extend_from_slice(&s.as_bytes()[..len]);
}

/// Writes `len u32 | bytes`.
pub fn put_bytes32(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

pub fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_back_what_was_written_and_never_past_the_end() {
        let mut b = Vec::new();
        put_str16(&mut b, "name");
        put_bytes32(&mut b, b"\0x'; DROP");
        put_u64(&mut b, u64::MAX);
        let mut r = BodyReader::new(&b);
        assert_eq!(r.bytes16("s").unwrap(), b"name");
        assert_eq!(r.bytes32("t", 64).unwrap(), b"\0x'; DROP");
        assert_eq!(r.u64("v").unwrap(), u64::MAX);
        r.end().unwrap();
        let mut short = BodyReader::new(&[5, 0, b'a']);
        assert_eq!(
            short.bytes16("name").unwrap_err(),
            "name: body ends 4 bytes short"
        );
        let mut long = BodyReader::new(&b[6..]);
        assert!(long.bytes32("t", 3).unwrap_err().contains("<= 3 bytes"));
        assert!(BodyReader::new(&[0]).end().unwrap_err().contains("1 unexpected"));
    }
}
