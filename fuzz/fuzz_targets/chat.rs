//! The chat request body, for every operation code (known or not): a request either decodes
//! within the codec's limits, and then encodes back to bytes that decode to the same
//! request (the same bytes, when the fetch count was not clamped), or is refused with a reason.
#![no_main]

use knee_node::systems::chat::codec::{
    Op, Request, MAX_FETCH, MAX_NAME_BYTES, MAX_REPLY_BYTES, MAX_TEXT_BYTES,
};
use libfuzzer_sys::fuzz_target;

fn name_ok(s: &str) -> bool {
    (1..=MAX_NAME_BYTES).contains(&s.len()) && !s.contains('\0')
}

fuzz_target!(|input: &[u8]| {
    let [op, body @ ..] = input else {
        return;
    };
    // Codes 0..=7: the six operations and unknown ones on both sides.
    let op = u16::from(*op % 8);
    let Ok(req) = Request::decode(op, body) else {
        return;
    };
    assert_eq!(req.code(), op);
    assert!(name_ok(&req.client));
    assert!(req.reply_bytes <= MAX_REPLY_BYTES);
    let clamped = match &req.op {
        Op::Login { user, password } => {
            assert!(name_ok(user) && name_ok(password));
            false
        }
        Op::Logout { user, .. } | Op::Join { user, .. } => {
            assert!(name_ok(user));
            false
        }
        Op::Post { user, text, .. } => {
            assert!(name_ok(user) && text.len() <= MAX_TEXT_BYTES);
            false
        }
        Op::Fetch { max, .. } => {
            assert!(*max <= MAX_FETCH);
            *max == MAX_FETCH
        }
        Op::Audit => false,
    };
    let mut again = Vec::new();
    req.encode(&mut again);
    if !clamped {
        assert_eq!(again, body, "{req:?} encodes to other bytes");
    }
    assert_eq!(Request::decode(op, &again).as_ref(), Ok(&req));
});
