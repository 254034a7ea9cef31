//! The reply header: decodes any payload of at least 44 bytes, refuses shorter ones, what it
//! decodes encodes back to the same bytes, and a known status maps back to its code.
#![no_main]

use knee_node::wire::{ReplyHeader, WireStatus, REPLY_HEADER_BYTES};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|payload: &[u8]| {
    match ReplyHeader::decode(payload) {
        Some((h, body)) => {
            assert_eq!(h.encode()[..], payload[..REPLY_HEADER_BYTES]);
            assert_eq!(body, &payload[REPLY_HEADER_BYTES..]);
            if let Some(s) = WireStatus::from_u16(h.status) {
                assert_eq!(s as u16, h.status);
            } else {
                assert!(h.status > 4);
            }
        }
        None => assert!(payload.len() < REPLY_HEADER_BYTES),
    }
});
