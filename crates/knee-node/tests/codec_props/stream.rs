//! stream's datagrams.

use knee_node::systems::stream::datagram::{
    block_matches, BlockId, ReplyHeader, Request, REPLY_BYTES, REPLY_HEADER_BYTES, REPLY_OK,
};
use proptest::prelude::*;

fn block_id() -> impl Strategy<Value = BlockId> {
    (any::<u16>(), any::<u32>(), any::<u32>()).prop_map(|(stream, frame, block)| BlockId {
        stream,
        frame,
        block,
    })
}

proptest! {
    #![proptest_config(crate::config())]

    #[test]
    fn datagrams_round_trip(id in block_id(), request_id: u64, status in 0u8..3, server_ns: u64, delay_ns: u64) {
        let mut b = Vec::new();
        let req = Request { id, request_id };
        req.encode(&mut b);
        prop_assert_eq!(Request::decode(&b), Ok(req));
        let h = ReplyHeader { status, id, request_id, server_ns, delay_ns };
        h.encode(&mut b);
        prop_assert_eq!(b.len(), if status == REPLY_OK { REPLY_BYTES } else { REPLY_HEADER_BYTES });
        let (back, block) = ReplyHeader::decode(&b).expect("a reply it encoded");
        prop_assert_eq!(back, h);
        prop_assert_eq!(block_matches(&id, block), status == REPLY_OK);
    }

    #[test]
    fn any_datagram_decodes_or_is_refused(mut b in prop::collection::vec(any::<u8>(), 0..900), valid_prefix: bool) {
        if valid_prefix && b.len() >= 5 {
            b[..4].copy_from_slice(b"KNST");
            b[4] = 1;
        }
        if let Ok(r) = Request::decode(&b) {
            let mut again = Vec::new();
            r.encode(&mut again);
            prop_assert_eq!(again, b.clone());
        }
        if let Ok((h, _)) = ReplyHeader::decode(&b) {
            let mut again = Vec::new();
            h.encode(&mut again);
            prop_assert_eq!(&again[..REPLY_HEADER_BYTES], &b[..REPLY_HEADER_BYTES]);
        }
    }
}
