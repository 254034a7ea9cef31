//! The stream datagrams: a request decodes only from exactly 24 bytes and encodes back to
//! them; a reply decodes only from a header (40 bytes) or a header and one block (808), and
//! its header encodes back to the same 40 bytes.
#![no_main]

use knee_node::systems::stream::datagram::{
    block_matches, ReplyHeader, Request, BLOCK_BYTES, REPLY_BYTES, REPLY_HEADER_BYTES, REPLY_OK,
    REQUEST_BYTES,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|b: &[u8]| {
    let mut again = Vec::new();
    if let Ok(r) = Request::decode(b) {
        assert_eq!(b.len(), REQUEST_BYTES);
        r.encode(&mut again);
        assert_eq!(again, b);
    }
    if let Ok((h, block)) = ReplyHeader::decode(b) {
        assert!(b.len() == REPLY_HEADER_BYTES || b.len() == REPLY_BYTES);
        assert!(block.is_empty() || block.len() == BLOCK_BYTES);
        // The status is echoed as sent; only an ok status adds the block's pixels.
        h.encode(&mut again);
        assert_eq!(again[..REPLY_HEADER_BYTES], b[..REPLY_HEADER_BYTES]);
        if h.status == REPLY_OK && block.len() == BLOCK_BYTES {
            assert_eq!(block_matches(&h.id, block), again[REPLY_HEADER_BYTES..] == *block);
        }
    }
});
