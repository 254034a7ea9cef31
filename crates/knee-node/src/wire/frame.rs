//! Length-prefixed framing with a size limit, tolerant of read timeouts.

use std::fmt;
use std::io::{self, Read, Write};

/// Bytes of the length prefix.
pub const LENGTH_BYTES: usize = 4;

/// Default limit on one frame's payload: large enough for a 1024 x 1024 f64 matrix (8 MiB)
/// with its header, small enough that one bad length cannot exhaust memory.
pub const DEFAULT_MAX_FRAME_BYTES: usize = 16 << 20;

/// Why a connection's byte stream can no longer be read as frames.
#[derive(Debug)]
pub enum FrameError {
    /// The peer closed the connection between two frames.
    Closed,
    /// The peer closed the connection inside a frame.
    Truncated { have_bytes: usize, want_bytes: usize },
    /// The length prefix exceeds the limit.
    Oversized { length_bytes: usize, max_bytes: usize },
    /// The frame is whole but its payload cannot be a message (e.g. shorter than a header).
    Malformed(String),
    /// A socket error other than a read timeout.
    Io(io::Error),
}

impl fmt::Display for FrameError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrameError::Closed => write!(f, "connection closed"),
            FrameError::Truncated {
                have_bytes,
                want_bytes,
            } => write!(
                f,
                "truncated frame: connection closed after {have_bytes} of {want_bytes} bytes"
            ),
            FrameError::Oversized {
                length_bytes,
                max_bytes,
            } => write!(
                f,
                "oversized frame: length {length_bytes} bytes exceeds the limit of {max_bytes}"
            ),
            FrameError::Malformed(reason) => write!(f, "malformed frame: {reason}"),
            FrameError::Io(e) => write!(f, "socket error: {e}"),
        }
    }
}

impl std::error::Error for FrameError {}

/// Reads frames from a byte stream into one reusable buffer.
///
/// A read timeout on the socket (`WouldBlock`/`TimedOut`) returns `Ok(None)` and keeps any
/// partial frame, so a caller can wake up periodically (to expire requests, or to stop)
/// without losing bytes.
pub struct FrameReader {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    max_frame_bytes: usize,
}

/// Read size when the buffer has room: enough for many small frames per syscall.
const READ_CHUNK_BYTES: usize = 64 << 10;

impl FrameReader {
    pub fn new(max_frame_bytes: usize) -> Self {
        FrameReader {
            buf: vec![0; READ_CHUNK_BYTES],
            start: 0,
            end: 0,
            max_frame_bytes,
        }
    }

    /// Returns the next frame's payload, `Ok(None)` on a read timeout.
    pub fn read_frame<R: Read>(&mut self, src: &mut R) -> Result<Option<&[u8]>, FrameError> {
        loop {
            let have = self.end - self.start;
            if have >= LENGTH_BYTES {
                let mut len = [0u8; LENGTH_BYTES];
                len.copy_from_slice(&self.buf[self.start..self.start + LENGTH_BYTES]);
                let length_bytes = u32::from_le_bytes(len) as usize;
                if length_bytes > self.max_frame_bytes {
                    return Err(FrameError::Oversized {
                        length_bytes,
                        max_bytes: self.max_frame_bytes,
                    });
                }
                let total = LENGTH_BYTES + length_bytes;
                if have >= total {
                    let at = self.start + LENGTH_BYTES;
                    self.start += total;
                    return Ok(Some(&self.buf[at..at + length_bytes]));
                }
                self.make_room(total);
            } else {
                self.make_room(LENGTH_BYTES);
            }
            match src.read(&mut self.buf[self.end..]) {
                Ok(0) => {
                    let have_bytes = self.end - self.start;
                    if have_bytes == 0 {
                        return Err(FrameError::Closed);
                    }
                    let want_bytes = if have_bytes >= LENGTH_BYTES {
                        let mut len = [0u8; LENGTH_BYTES];
                        len.copy_from_slice(&self.buf[self.start..self.start + LENGTH_BYTES]);
                        LENGTH_BYTES + u32::from_le_bytes(len) as usize
                    } else {
                        LENGTH_BYTES
                    };
                    return Err(FrameError::Truncated {
                        have_bytes,
                        want_bytes,
                    });
                }
                Ok(n) => self.end += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::TimedOut => {
                    return Ok(None)
                }
                Err(e) => return Err(FrameError::Io(e)),
            }
        }
    }

    /// Ensures `buf[start..]` can hold `need_bytes` (> bytes buffered), compacting or growing.
    /// Afterwards `end < buf.len()`, so the next read has room.
    fn make_room(&mut self, need_bytes: usize) {
        if self.start + need_bytes > self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if need_bytes > self.buf.len() {
            self.buf.resize(need_bytes, 0);
        }
    }
}

/// Writes one frame (length prefix, then `parts` back to back) with a single `write_all`.
/// `scratch` is reused between calls to avoid an allocation per frame.
pub fn write_frame<W: Write>(dst: &mut W, scratch: &mut Vec<u8>, parts: &[&[u8]]) -> io::Result<()> {
    let length: usize = parts.iter().map(|p| p.len()).sum();
    let length = u32::try_from(length)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "frame longer than 4 GiB"))?;
    scratch.clear();
    scratch.extend_from_slice(&length.to_le_bytes());
    for p in parts {
        scratch.extend_from_slice(p);
    }
    dst.write_all(scratch)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn framed(payloads: &[&[u8]]) -> Vec<u8> {
        let mut out = Vec::new();
        let mut scratch = Vec::new();
        for p in payloads {
            write_frame(&mut out, &mut scratch, &[p]).unwrap();
        }
        out
    }

    #[test]
    fn reads_frames_back_to_back() {
        let bytes = framed(&[b"abc", b"", b"0123456789"]);
        let mut src = &bytes[..];
        let mut r = FrameReader::new(100);
        assert_eq!(r.read_frame(&mut src).unwrap().unwrap(), b"abc");
        assert_eq!(r.read_frame(&mut src).unwrap().unwrap(), b"");
        assert_eq!(r.read_frame(&mut src).unwrap().unwrap(), b"0123456789");
        assert!(matches!(r.read_frame(&mut src), Err(FrameError::Closed)));
    }

    #[test]
    fn refuses_oversized_length_before_buffering() {
        let bytes = (1_000_000u32).to_le_bytes();
        let mut r = FrameReader::new(1000);
        let err = r.read_frame(&mut &bytes[..]).unwrap_err();
        assert!(matches!(
            err,
            FrameError::Oversized {
                length_bytes: 1_000_000,
                max_bytes: 1000
            }
        ));
    }

    #[test]
    fn reports_truncation() {
        let mut bytes = framed(&[b"hello world"]);
        bytes.truncate(9);
        let mut r = FrameReader::new(100);
        let err = r.read_frame(&mut &bytes[..]).unwrap_err();
        assert!(matches!(
            err,
            FrameError::Truncated {
                have_bytes: 9,
                want_bytes: 15
            }
        ));
    }

    #[test]
    fn large_frames_grow_the_buffer() {
        let big = vec![7u8; 300_000];
        let bytes = framed(&[&big, b"x"]);
        let mut src = &bytes[..];
        let mut r = FrameReader::new(1 << 20);
        assert_eq!(r.read_frame(&mut src).unwrap().unwrap().len(), 300_000);
        assert_eq!(r.read_frame(&mut src).unwrap().unwrap(), b"x");
    }

    /// A reader that returns one byte per call and a timeout between calls.
    struct Trickle<'a> {
        bytes: &'a [u8],
        timeout_next: bool,
    }

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.timeout_next = !self.timeout_next;
            if !self.timeout_next {
                return Err(io::Error::new(io::ErrorKind::WouldBlock, "timeout"));
            }
            if self.bytes.is_empty() {
                return Ok(0);
            }
            buf[0] = self.bytes[0];
            self.bytes = &self.bytes[1..];
            Ok(1)
        }
    }

    #[test]
    fn timeouts_keep_partial_frames() {
        let bytes = framed(&[b"abcdef", b"gh"]);
        let mut src = Trickle {
            bytes: &bytes,
            timeout_next: false,
        };
        let mut r = FrameReader::new(100);
        let mut got = Vec::new();
        loop {
            match r.read_frame(&mut src) {
                Ok(Some(p)) => got.push(p.to_vec()),
                Ok(None) => continue,
                Err(FrameError::Closed) => break,
                Err(e) => panic!("{e}"),
            }
        }
        assert_eq!(got, vec![b"abcdef".to_vec(), b"gh".to_vec()]);
    }
}
