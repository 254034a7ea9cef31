//! The frame reader over an arbitrary byte stream, handed out in reads of sizes the input
//! chooses (with read timeouts between some), plain or stamped. Whatever it returns must be
//! exactly the stream: the frames it yields, framed again, are the bytes it consumed, and an
//! error accounts for the rest.
#![no_main]

use std::io::{self, Read};

use knee_node::wire::{write_frame, FrameError, FrameReader, StampedRead, LENGTH_BYTES};
use libfuzzer_sys::fuzz_target;

/// The stream in reads of up to `7 * sizes[i]` bytes, cycling through `sizes`; a 0 is a
/// read timeout (never two in a row, so the stream always moves on).
struct Chunked<'a> {
    data: &'a [u8],
    sizes: &'a [u8],
    calls: usize,
    timed_out: bool,
}

impl Read for Chunked<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let size = match self.sizes {
            [] => usize::MAX,
            s => s[self.calls % s.len()] as usize * 7,
        };
        self.calls += 1;
        if size == 0 && !self.timed_out {
            self.timed_out = true;
            return Err(io::Error::new(io::ErrorKind::WouldBlock, "timeout"));
        }
        self.timed_out = false;
        let n = size.max(1).min(buf.len()).min(self.data.len());
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data = &self.data[n..];
        Ok(n)
    }
}

impl StampedRead for Chunked<'_> {
    fn read_stamped(&mut self, buf: &mut [u8]) -> io::Result<(usize, Option<u64>)> {
        let call = self.calls as u64;
        self.read(buf).map(|n| (n, Some(call)))
    }
}

fuzz_target!(|input: &[u8]| {
    let [mode, max_lo, max_hi, n_sizes, rest @ ..] = input else {
        return;
    };
    // 1 MiB rather than the 16 MiB default: a length prefix makes the reader grow its
    // buffer to the announced frame (within the limit), and zeroing 16 MiB an input cut
    // the rate to 2,500 inputs/s; the code paths are the same at 1 MiB.
    let max_frame_bytes = if mode & 1 == 1 {
        1 << 20
    } else {
        u16::from_le_bytes([*max_lo, *max_hi]) as usize
    };
    let stamped = mode & 2 == 2;
    let n_sizes = (*n_sizes as usize % 16).min(rest.len());
    let (sizes, data) = rest.split_at(n_sizes);
    let mut src = Chunked {
        data,
        sizes,
        calls: 0,
        timed_out: false,
    };
    let mut reader = FrameReader::new(max_frame_bytes);
    let mut reframed = Vec::new();
    let mut scratch = Vec::new();
    // Every second read at least moves the stream on, so this ends well within the bound.
    for _ in 0..1_000_000 {
        let got = if stamped {
            reader.read_frame_stamped(&mut src).map(|f| {
                f.map(|(p, stamp)| {
                    assert!(stamp.is_some_and(|s| s < src.calls as u64));
                    p
                })
            })
        } else {
            reader.read_frame(&mut src)
        };
        match got {
            Ok(Some(payload)) => {
                assert!(payload.len() <= max_frame_bytes);
                write_frame(&mut reframed, &mut scratch, &[payload]).expect("vec write");
            }
            Ok(None) => assert!(!sizes.is_empty(), "a timeout from a source that never times out"),
            Err(FrameError::Closed) => {
                assert_eq!(reframed, data, "frames read are not the stream");
                return;
            }
            Err(FrameError::Truncated {
                have_bytes,
                want_bytes,
            }) => {
                assert!(have_bytes < want_bytes);
                assert_eq!(reframed.len() + have_bytes, data.len());
                assert_eq!(reframed[..], data[..reframed.len()]);
                return;
            }
            Err(FrameError::Oversized {
                length_bytes,
                max_bytes,
            }) => {
                assert_eq!(max_bytes, max_frame_bytes);
                assert!(length_bytes > max_bytes);
                let at = reframed.len();
                assert_eq!(reframed[..], data[..at]);
                let prefix: [u8; LENGTH_BYTES] = data[at..at + LENGTH_BYTES].try_into().expect("4 bytes");
                assert_eq!(u32::from_le_bytes(prefix) as usize, length_bytes);
                return;
            }
            Err(e) => panic!("unexpected error from an in-memory stream: {e}"),
        }
    }
    panic!("the frame reader did not finish a {}-byte stream", data.len());
});
