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

/// A byte source that knows when the bytes it returns reached the host.
pub trait StampedRead {
    /// Reads like [`Read::read`]; with the count, a `CLOCK_MONOTONIC` ns at or after which
    /// every byte of this read had reached the host (`None` if the source cannot tell).
    fn read_stamped(&mut self, buf: &mut [u8]) -> io::Result<(usize, Option<u64>)>;
}

/// A frame's payload and the stamp of the read that completed it.
pub type StampedFrame<'a> = (&'a [u8], Option<u64>);

/// A plain [`Read`] as a [`StampedRead`] that knows no times.
struct Unstamped<R>(R);

impl<R: Read> StampedRead for Unstamped<R> {
    fn read_stamped(&mut self, buf: &mut [u8]) -> io::Result<(usize, Option<u64>)> {
        self.0.read(buf).map(|n| (n, None))
    }
}

/// Reads frames from a byte stream into one reusable buffer.
///
/// A read timeout on the socket (`WouldBlock`/`TimedOut`) returns `Ok(None)` and keeps any
/// partial frame, so a caller can wake up periodically (to expire requests, or to stop)
/// without losing bytes.
///
/// The reader reads only when the buffer holds no whole frame, so every frame it returns was
/// completed by its most recent read: [`FrameReader::read_frame_stamped`] gives each frame
/// that read's stamp, never the stamp of a later read.
pub struct FrameReader {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    max_frame_bytes: usize,
    /// The stamp of the most recent read (see [`StampedRead`]).
    read_stamp_ns: Option<u64>,
}

/// Read size when the buffer has room: enough for many small frames per syscall.
const READ_CHUNK_BYTES: usize = 64 << 10;
/// Stamped reads take at most this much when no frame is under way, and then exactly the
/// rest of the frame under way: a backlog of small frames is read in several reads, each
/// stamped with its own (latest) segment, instead of in one read stamped with the last
/// arrival of all.
const STAMPED_READ_BYTES: usize = 512;

impl FrameReader {
    pub fn new(max_frame_bytes: usize) -> Self {
        FrameReader {
            buf: vec![0; READ_CHUNK_BYTES],
            start: 0,
            end: 0,
            max_frame_bytes,
            read_stamp_ns: None,
        }
    }

    /// Returns the next frame's payload, `Ok(None)` on a read timeout.
    pub fn read_frame<R: Read>(&mut self, src: &mut R) -> Result<Option<&[u8]>, FrameError> {
        let range = self.next_frame(&mut Unstamped(src), false)?;
        Ok(range.map(|(at, len)| &self.buf[at..at + len]))
    }

    /// Like [`FrameReader::read_frame`], with the stamp of the read that completed the frame:
    /// a monotonic ns at or after which the whole frame had reached the host. Reads are
    /// short (see `STAMPED_READ_BYTES`), so that stamp is close to the frame's own arrival.
    pub fn read_frame_stamped<S: StampedRead>(
        &mut self,
        src: &mut S,
    ) -> Result<Option<StampedFrame<'_>>, FrameError> {
        let range = self.next_frame(src, true)?;
        Ok(range.map(|(at, len)| (&self.buf[at..at + len], self.read_stamp_ns)))
    }

    /// The next whole frame's payload as (offset, length) in `buf`. With `short_reads`, a
    /// read takes at most `STAMPED_READ_BYTES`, or exactly the rest of a frame whose length
    /// is known.
    fn next_frame<S: StampedRead>(
        &mut self,
        src: &mut S,
        short_reads: bool,
    ) -> Result<Option<(usize, usize)>, FrameError> {
        loop {
            let have = self.end - self.start;
            // Where the next read may write up to (`make_room` leaves room past `end`).
            let read_end = if have >= LENGTH_BYTES {
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
                    return Ok(Some((at, length_bytes)));
                }
                self.make_room(total);
                if short_reads {
                    (self.start + total).min(self.buf.len())
                } else {
                    self.buf.len()
                }
            } else {
                self.make_room(LENGTH_BYTES);
                if short_reads {
                    (self.end + STAMPED_READ_BYTES).min(self.buf.len())
                } else {
                    self.buf.len()
                }
            };
            match src.read_stamped(&mut self.buf[self.end..read_end]) {
                Ok((0, _)) => {
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
                Ok((n, stamp_ns)) => {
                    self.end += n;
                    self.read_stamp_ns = stamp_ns;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::TimedOut => {
                    return Ok(None)
                }
                Err(e) => return Err(FrameError::Io(e)),
            }
        }
    }

    /// Makes room in `buf[start..]` towards `need_bytes` (> bytes buffered), compacting or
    /// growing. Afterwards `end < buf.len()`, so the next read has room.
    ///
    /// The buffer grows at most twofold at a time, as the frame's bytes arrive: a length
    /// prefix alone must not allocate `max_frame_bytes` (a thousand slow clients, each
    /// announcing 16 MiB, would cost 16 GiB). Memory is at most twice what was received.
    fn make_room(&mut self, need_bytes: usize) {
        if self.start + need_bytes > self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        if need_bytes > self.buf.len() {
            let grown = need_bytes.min(self.buf.len().saturating_mul(2).max(READ_CHUNK_BYTES));
            self.buf.resize(grown, 0);
        }
    }

    /// Bytes the reader's buffer holds now (what one connection's reads cost in memory).
    pub fn capacity_bytes(&self) -> usize {
        self.buf.len()
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

    #[test]
    fn a_length_prefix_alone_does_not_allocate_the_frame() {
        // 16 MiB announced, 1000 bytes sent: the buffer stays near what arrived.
        let mut bytes = (16u32 << 20).to_le_bytes().to_vec();
        bytes.extend_from_slice(&[1u8; 1000]);
        let mut src = &bytes[..];
        let mut r = FrameReader::new(32 << 20);
        assert!(matches!(
            r.read_frame(&mut src),
            Err(FrameError::Truncated { .. })
        ));
        assert!(
            r.capacity_bytes() <= 2 * READ_CHUNK_BYTES,
            "{}",
            r.capacity_bytes()
        );
        // Received bytes grow it, at most twofold: a 1 MiB frame read whole.
        let big = vec![3u8; 1 << 20];
        let bytes = framed(&[&big]);
        let mut r = FrameReader::new(32 << 20);
        assert_eq!(r.read_frame(&mut &bytes[..]).unwrap().unwrap(), &big[..]);
        assert!(r.capacity_bytes() < 2 * bytes.len(), "{}", r.capacity_bytes());
    }

    /// Hands out one chunk per read, each with its own stamp.
    struct Chunks(Vec<(Vec<u8>, u64)>);

    impl StampedRead for Chunks {
        fn read_stamped(&mut self, buf: &mut [u8]) -> io::Result<(usize, Option<u64>)> {
            if self.0.is_empty() {
                return Ok((0, None));
            }
            let (chunk, stamp) = self.0.remove(0);
            buf[..chunk.len()].copy_from_slice(&chunk);
            Ok((chunk.len(), Some(stamp)))
        }
    }

    #[test]
    fn each_frame_gets_the_stamp_of_the_read_that_completed_it() {
        // Frames of 6, 7, 8 and 5 bytes. Read 1: the first and 3 bytes of the second;
        // read 2: the rest of the second and the third; read 3: the fourth.
        let bytes = framed(&[b"aa", b"bbb", b"cccc", b"d"]);
        let mut src = Chunks(vec![
            (bytes[..9].to_vec(), 10),
            (bytes[9..21].to_vec(), 20),
            (bytes[21..].to_vec(), 30),
        ]);
        let mut r = FrameReader::new(100);
        let mut got = Vec::new();
        while let Ok(Some((payload, stamp))) = r.read_frame_stamped(&mut src) {
            got.push((payload.to_vec(), stamp));
        }
        let want: Vec<(Vec<u8>, Option<u64>)> = vec![
            (b"aa".to_vec(), Some(10)),
            (b"bbb".to_vec(), Some(20)),
            (b"cccc".to_vec(), Some(20)),
            (b"d".to_vec(), Some(30)),
        ];
        assert_eq!(got, want);
    }

    /// Serves `bytes` as fast as asked, stamping each read with its index.
    struct Backlog {
        bytes: Vec<u8>,
        asked: Vec<usize>,
    }

    impl StampedRead for Backlog {
        fn read_stamped(&mut self, buf: &mut [u8]) -> io::Result<(usize, Option<u64>)> {
            self.asked.push(buf.len());
            let n = buf.len().min(self.bytes.len());
            buf[..n].copy_from_slice(&self.bytes[..n]);
            self.bytes.drain(..n);
            Ok((n, Some(self.asked.len() as u64)))
        }
    }

    impl Read for Backlog {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.read_stamped(buf).map(|(n, _)| n)
        }
    }

    #[test]
    fn stamped_reads_take_a_backlog_in_short_reads() {
        // 100 small frames (30 B each) then one of 2000 B: all waiting at once.
        let small = vec![1u8; 26];
        let big = vec![2u8; 1996];
        let mut payloads: Vec<&[u8]> = vec![&small; 100];
        payloads.push(&big);
        let mut src = Backlog {
            bytes: framed(&payloads),
            asked: Vec::new(),
        };
        let mut r = FrameReader::new(1 << 20);
        let mut stamps = Vec::new();
        while let Ok(Some((_, stamp))) = r.read_frame_stamped(&mut src) {
            stamps.push(stamp.unwrap());
        }
        assert_eq!(stamps.len(), 101);
        // Reads of at most 512 B, but the one that finishes the big frame (exactly its rest).
        let long_reads = src.asked.iter().filter(|&&n| n > STAMPED_READ_BYTES).count();
        assert!(long_reads <= 1, "{:?}", src.asked);
        // Each read of at most 512 B completes at most 17 of the small frames.
        let mut per_read = std::collections::HashMap::new();
        for s in &stamps[..100] {
            *per_read.entry(*s).or_insert(0) += 1;
        }
        assert!(
            per_read.values().all(|&k| k <= STAMPED_READ_BYTES / 30 + 1),
            "{per_read:?}"
        );
        // The big frame is finished by a read of exactly its rest, its own stamp.
        assert!(stamps[100] > stamps[99]);
        // Plain reads still take whatever is there, up to the buffer.
        let mut src = Backlog {
            bytes: framed(&payloads),
            asked: Vec::new(),
        };
        let mut r = FrameReader::new(1 << 20);
        while let Ok(Some(_)) = r.read_frame(&mut src) {}
        assert_eq!(src.asked[0], READ_CHUNK_BYTES);
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
