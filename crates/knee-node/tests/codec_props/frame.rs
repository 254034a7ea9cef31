//! The frame reader: frames written back to back come back whole, however the stream is
//! split into reads; any stream gives frames that are exactly its bytes, then a reason.

use std::io::{self, Read};

use knee_node::wire::{write_frame, FrameError, FrameReader};
use proptest::prelude::*;

/// The stream in reads cycling through `sizes` (each at least one byte).
struct Chunked {
    data: Vec<u8>,
    sizes: Vec<usize>,
    calls: usize,
}

impl Read for Chunked {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let size = self.sizes[self.calls % self.sizes.len()];
        self.calls += 1;
        let n = size.min(buf.len()).min(self.data.len());
        buf[..n].copy_from_slice(&self.data[..n]);
        self.data.drain(..n);
        Ok(n)
    }
}

fn framed(payloads: &[Vec<u8>]) -> Vec<u8> {
    let (mut out, mut scratch) = (Vec::new(), Vec::new());
    for p in payloads {
        write_frame(&mut out, &mut scratch, &[p]).expect("vec write");
    }
    out
}

/// Reads frames until an error; the frames (framed again) and the error.
fn read_all(data: Vec<u8>, sizes: Vec<usize>, max_frame_bytes: usize) -> (Vec<Vec<u8>>, FrameError) {
    let mut src = Chunked {
        data,
        sizes,
        calls: 0,
    };
    let mut r = FrameReader::new(max_frame_bytes);
    let mut frames = Vec::new();
    loop {
        match r.read_frame(&mut src) {
            Ok(Some(p)) => frames.push(p.to_vec()),
            Ok(None) => unreachable!("this source never times out"),
            Err(e) => return (frames, e),
        }
    }
}

proptest! {
    #![proptest_config(crate::config())]

    #[test]
    fn frames_round_trip_across_any_split(
        payloads in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..300), 0..8),
        sizes in prop::collection::vec(1usize..700, 1..6),
    ) {
        let (frames, err) = read_all(framed(&payloads), sizes, 1 << 16);
        prop_assert_eq!(frames, payloads);
        prop_assert!(matches!(err, FrameError::Closed), "{}", err);
    }

    #[test]
    fn any_stream_reads_as_its_own_bytes_then_a_reason(
        data in prop::collection::vec(any::<u8>(), 0..600),
        sizes in prop::collection::vec(1usize..100, 1..4),
        max_frame_bytes in 0usize..400,
    ) {
        let (frames, err) = read_all(data.clone(), sizes, max_frame_bytes);
        let consumed = framed(&frames);
        prop_assert_eq!(&consumed[..], &data[..consumed.len()]);
        let left = data.len() - consumed.len();
        match err {
            FrameError::Closed => prop_assert_eq!(left, 0),
            FrameError::Truncated { have_bytes, want_bytes } => {
                prop_assert_eq!(have_bytes, left);
                prop_assert!(have_bytes < want_bytes);
            }
            FrameError::Oversized { length_bytes, max_bytes } => {
                prop_assert!(length_bytes > max_bytes && left >= 4);
            }
            other => prop_assert!(false, "unexpected {}", other),
        }
    }
}
