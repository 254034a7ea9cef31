//! The HTTP response reader: valid responses are read whole however their bytes are split;
//! any bytes give a response, "more", or a reason, and split feeds agree with whole ones.

use knee_node::systems::http::response::{Limits, Reason, Response, ResponseReader};
use knee_node::systems::http::timing::TimingKeys;
use proptest::prelude::*;

const LIMITS: Limits = Limits {
    max_header_bytes: 1024,
    max_body_bytes: 4096,
};

type Outcome = Result<Option<Response>, Reason>;

/// Feeds `bytes` in reads cycling through `sizes`; the outcome and the bytes not fed.
fn feed(head: bool, bytes: &[u8], sizes: &[usize]) -> (Outcome, usize) {
    let keys = TimingKeys {
        server: vec!["app".into()],
        detail: Some("db".into()),
    };
    let mut r = ResponseReader::new(LIMITS);
    r.start(head);
    let (mut rest, mut out, mut i) = (bytes, Ok(None), 0);
    while !rest.is_empty() {
        let n = sizes[i % sizes.len()].clamp(1, rest.len());
        i += 1;
        out = r.feed(&rest[..n], &keys);
        rest = &rest[n..];
        if !matches!(out, Ok(None)) {
            break;
        }
    }
    (out, rest.len())
}

/// A valid response: (bytes, status), its body by Content-Length or in chunks.
fn response() -> impl Strategy<Value = (Vec<u8>, u16)> {
    let chunks = prop::collection::vec(prop::collection::vec(any::<u8>(), 1..200), 0..6);
    (200u16..600, any::<bool>(), chunks, 0u32..5000).prop_map(|(status, chunked, chunks, ms)| {
        let status = if status == 204 || status == 304 {
            200
        } else {
            status
        };
        let timing = format!(
            "Server-Timing: app;dur={}.{:03}, db;dur=1\r\n",
            ms / 1000,
            ms % 1000
        );
        let mut b = format!("HTTP/1.1 {status} X\r\n{timing}").into_bytes();
        if chunked {
            b.extend_from_slice(b"Transfer-Encoding: chunked\r\n\r\n");
            for c in &chunks {
                b.extend_from_slice(format!("{:x}\r\n", c.len()).as_bytes());
                b.extend_from_slice(c);
                b.extend_from_slice(b"\r\n");
            }
            b.extend_from_slice(b"0\r\n\r\n");
        } else {
            let body: Vec<u8> = chunks.concat();
            b.extend_from_slice(format!("Content-Length: {}\r\n\r\n", body.len()).as_bytes());
            b.extend_from_slice(&body);
        }
        (b, status)
    })
}

proptest! {
    #![proptest_config(crate::config())]

    #[test]
    fn valid_responses_read_whole_across_any_split((bytes, status) in response(), sizes in prop::collection::vec(1usize..300, 1..5)) {
        let (out, left) = feed(false, &bytes, &sizes);
        let r = out.expect("a valid response").expect("whole");
        prop_assert_eq!(left, 0);
        prop_assert_eq!((r.status, r.bytes), (status, bytes.len() as u64));
        prop_assert!(r.split.present);
    }

    #[test]
    fn any_bytes_give_the_same_outcome_whole_or_split(
        bytes in prop::collection::vec(any::<u8>(), 0..400),
        prefix: bool,
        head: bool,
        sizes in prop::collection::vec(1usize..50, 1..5),
    ) {
        let bytes = if prefix { [b"HTTP/1.1 200 OK\r\n".as_slice(), &bytes].concat() } else { bytes };
        let (whole, _) = feed(head, &bytes, &[usize::MAX]);
        let (split, left) = feed(head, &bytes, &sizes);
        match whole {
            Err(Reason::ExtraBytes) => prop_assert!(split.is_err() || left > 0),
            Err(_) => prop_assert!(split.is_err(), "whole {:?}, split {:?}", whole, split),
            Ok(_) => prop_assert_eq!(whole, split),
        }
    }
}
