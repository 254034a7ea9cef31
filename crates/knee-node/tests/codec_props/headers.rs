//! Request and reply headers.

use knee_node::wire::{ReplyHeader, RequestHeader, WireStatus, REPLY_HEADER_BYTES, REQUEST_HEADER_BYTES};
use proptest::prelude::*;

fn reply_header() -> impl Strategy<Value = ReplyHeader> {
    (any::<[u64; 5]>(), any::<[u16; 2]>()).prop_map(|(w, h)| ReplyHeader {
        request_id: w[0],
        status: h[0],
        flags: h[1],
        server_ns: w[1],
        queue_ns: w[2],
        service_ns: w[3],
        detail_ns: w[4],
    })
}

proptest! {
    #![proptest_config(crate::config())]

    #[test]
    fn request_header_round_trips(id: u64, op: u16, flags: u16, body in prop::collection::vec(any::<u8>(), 0..64)) {
        let h = RequestHeader { request_id: id, op, flags };
        let mut payload = h.encode().to_vec();
        payload.extend_from_slice(&body);
        prop_assert_eq!(RequestHeader::decode(&payload), Some((h, &body[..])));
    }

    #[test]
    fn reply_header_round_trips(h in reply_header(), body in prop::collection::vec(any::<u8>(), 0..64)) {
        let mut payload = h.encode().to_vec();
        payload.extend_from_slice(&body);
        prop_assert_eq!(ReplyHeader::decode(&payload), Some((h, &body[..])));
        if let Some(s) = WireStatus::from_u16(h.status) {
            prop_assert_eq!(s as u16, h.status);
        }
    }

    #[test]
    fn headers_decode_any_bytes_by_length_alone(bytes in prop::collection::vec(any::<u8>(), 0..80)) {
        prop_assert_eq!(RequestHeader::decode(&bytes).is_some(), bytes.len() >= REQUEST_HEADER_BYTES);
        prop_assert_eq!(ReplyHeader::decode(&bytes).is_some(), bytes.len() >= REPLY_HEADER_BYTES);
    }
}
