//! The slices item (ClientTopic) and reply (ServerTopic): what decodes respects the limits
//! (image size, acks per item, slice = id mod slices, message length) and encodes back to
//! the same bytes (the reply: to bytes that decode the same, as its message and padding are
//! not kept).
#![no_main]

use knee_node::systems::slices::codec::{
    ItemHeader, Reply, ITEM_HEADER_BYTES, MAX_IMAGE_BYTES, MAX_ITEM_ACKS, MAX_MESSAGE_BYTES,
    REPLY_HEADER_BYTES,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: &[u8]| {
    let [s0, s1, bytes @ ..] = input else {
        return;
    };
    let slices = u32::from(u16::from_le_bytes([*s0, *s1]));
    if let Ok(h) = ItemHeader::decode(bytes, slices) {
        assert!(h.image_bytes() <= MAX_IMAGE_BYTES);
        let acked: Vec<u64> = h.acked(bytes).collect();
        assert!(acked.len() <= MAX_ITEM_ACKS);
        assert_eq!(bytes.len(), ITEM_HEADER_BYTES + h.image_bytes() + 8 * acked.len());
        assert_eq!(h.id % u64::from(slices), u64::from(h.slice));
        let mut again = Vec::new();
        h.encode_acked(h.image(bytes), &acked, &mut again);
        assert_eq!(again, bytes);
        assert_eq!(ItemHeader::decode(&again, slices), Ok(h));
    }
    if let Ok(r) = Reply::decode(bytes) {
        assert!(bytes.len() <= REPLY_HEADER_BYTES + MAX_MESSAGE_BYTES);
        let mut again = Vec::new();
        r.encode(&mut again);
        assert_eq!(again[..24], bytes[..24]);
        assert_eq!(again[28..REPLY_HEADER_BYTES], bytes[28..REPLY_HEADER_BYTES]);
        assert_eq!(Reply::decode(&again), Ok(r));
    }
});
