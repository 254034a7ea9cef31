//! The HTTP response reader, fed the same bytes whole and in reads of sizes the input
//! chooses: framing must not depend on where reads end. Both ways give the same response,
//! or both fail (a whole feed may see bytes past the end in the same read, which a split
//! feed sees only after the response is done), and a response never counts more bytes than
//! it was fed.
#![no_main]

use knee_node::systems::http::response::{Limits, Reason, Response, ResponseReader};
use knee_node::systems::http::timing::{TimingKeys, MAX_DURATION_NS};
use libfuzzer_sys::fuzz_target;

type Outcome = Result<Option<Response>, Reason>;

fn keys() -> TimingKeys {
    TimingKeys {
        server: vec!["app".into()],
        detail: Some("db".into()),
    }
}

/// Feeds `bytes` in reads cycling through `sizes` (all of it at once when empty); the
/// outcome, the bytes not fed, and the `eof` outcome when the feed ended without one.
fn feed(
    limits: Limits,
    head: bool,
    bytes: &[u8],
    sizes: &[u8],
) -> (Outcome, usize, Option<Result<Response, Reason>>) {
    let keys = keys();
    let mut r = ResponseReader::new(limits);
    r.start(head);
    let mut rest = bytes;
    let mut out = Ok(None);
    let mut i = 0;
    while !rest.is_empty() {
        let n = match sizes {
            [] => rest.len(),
            s => (s[i % s.len()] as usize).clamp(1, rest.len()),
        };
        i += 1;
        out = r.feed(&rest[..n], &keys);
        rest = &rest[n..];
        if !matches!(out, Ok(None)) {
            break;
        }
    }
    if let Ok(Some(resp)) = out {
        assert!(resp.bytes <= (bytes.len() - rest.len()) as u64);
        // Times a server sends stay below the recorder's "no server time" mark.
        assert!(resp.split.server_ns <= MAX_DURATION_NS && resp.split.detail_ns <= MAX_DURATION_NS);
    }
    let eof = matches!(out, Ok(None)).then(|| r.eof());
    (out, rest.len(), eof)
}

fuzz_target!(|input: &[u8]| {
    let [mode, n_sizes, rest @ ..] = input else {
        return;
    };
    let limits = Limits {
        max_header_bytes: if mode & 2 == 0 { 1024 } else { 64 },
        max_body_bytes: if mode & 4 == 0 { 4096 } else { 16 },
    };
    let head = mode & 1 == 1;
    let n_sizes = (*n_sizes as usize % 16).min(rest.len());
    let (sizes, bytes) = rest.split_at(n_sizes);
    let (whole, _, whole_eof) = feed(limits, head, bytes, &[]);
    let (split, left, split_eof) = feed(limits, head, bytes, sizes);
    match whole {
        Err(Reason::ExtraBytes) => assert!(
            matches!(split, Err(_)) || (matches!(split, Ok(Some(_))) && left > 0),
            "whole: extra bytes; split: {split:?} with {left} bytes left"
        ),
        Err(_) => assert!(split.is_err(), "whole: {whole:?}; split: {split:?}"),
        Ok(_) => {
            assert_eq!(whole, split);
            assert_eq!(whole_eof, split_eof);
        }
    }
    if let Ok(Some(r)) = whole {
        assert_eq!(r.bytes, bytes.len() as u64);
    }
});
