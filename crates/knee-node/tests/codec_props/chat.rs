//! chat's request bodies.

use knee_node::systems::chat::codec::{Op, Request, MAX_FETCH, MAX_TEXT_BYTES};
use proptest::prelude::*;

/// A valid name: 1..=64 bytes of UTF-8 without NUL (SQL metacharacters welcome).
fn name() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9 ';\\-\"é✓]{1,16}"
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (name(), name()).prop_map(|(user, password)| Op::Login { user, password }),
        (name(), any::<u32>()).prop_map(|(user, room)| Op::Logout { user, room }),
        (name(), any::<u32>()).prop_map(|(user, room)| Op::Join { user, room }),
        (
            name(),
            any::<u32>(),
            // Short texts, and texts at the limit (generating 4 KiB of bytes every case is slow).
            prop_oneof![
                prop::collection::vec(any::<u8>(), 0..64),
                prop::collection::vec(any::<u8>(), MAX_TEXT_BYTES..=MAX_TEXT_BYTES)
            ]
        )
            .prop_map(|(user, room, text)| Op::Post { user, room, text }),
        (any::<u32>(), any::<u64>(), 0..=MAX_FETCH).prop_map(|(room, since_id, max)| Op::Fetch {
            room,
            since_id,
            max
        }),
        Just(Op::Audit),
    ]
}

proptest! {
    #![proptest_config(crate::config())]

    #[test]
    fn requests_round_trip(client in name(), reply_bytes in 0u32..=1 << 20, op in op()) {
        let req = Request { client, reply_bytes, op };
        let mut body = Vec::new();
        req.encode(&mut body);
        prop_assert_eq!(Request::decode(req.code(), &body), Ok(req));
    }

    #[test]
    fn any_body_decodes_or_is_refused(op in 0u16..10, body in prop::collection::vec(any::<u8>(), 0..200)) {
        if let Ok(req) = Request::decode(op, &body) {
            prop_assert_eq!(req.code(), op);
            let mut again = Vec::new();
            req.encode(&mut again);
            prop_assert_eq!(Request::decode(op, &again), Ok(req));
        }
    }
}
