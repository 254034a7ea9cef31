//! The request header: decodes any payload of at least 12 bytes, refuses shorter ones, and
//! what it decodes encodes back to the same bytes.
#![no_main]

use knee_node::wire::{RequestHeader, REQUEST_HEADER_BYTES};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|payload: &[u8]| {
    match RequestHeader::decode(payload) {
        Some((h, body)) => {
            assert_eq!(h.encode()[..], payload[..REQUEST_HEADER_BYTES]);
            assert_eq!(body, &payload[REQUEST_HEADER_BYTES..]);
        }
        None => assert!(payload.len() < REQUEST_HEADER_BYTES),
    }
});
