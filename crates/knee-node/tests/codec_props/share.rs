//! share's request and reply bodies.

use knee_node::systems::share::codec::{
    decode_list, decode_name, decode_register, decode_search_reply, decode_unregister, list_reply, put_str16,
    register_body, search_reply, unregister_body, Entry, SharedFile,
};
use proptest::prelude::*;

/// A peer address ("host:port", IPv4 or IPv6); built from numbers, as regex strategies
/// are slow in a debug build.
fn peer() -> impl Strategy<Value = String> {
    (any::<[u8; 4]>(), any::<u16>(), any::<bool>()).prop_map(|(ip, port, v6)| {
        if v6 {
            format!("[::{:x}]:{port}", u32::from_le_bytes(ip))
        } else {
            format!("{}.{}.{}.{}:{port}", ip[0], ip[1], ip[2], ip[3])
        }
    })
}

/// A plain file name of the shared folder (not "." or ".."), quotes and non-ASCII included.
fn file_name() -> impl Strategy<Value = String> {
    const CHARS: &[char] = &['a', 'Z', '0', '9', '_', '-', '.', ' ', '\'', '"', 'é', '✓'];
    prop::collection::vec(prop::sample::select(CHARS), 1..40)
        .prop_map(|v| v.into_iter().collect::<String>())
        .prop_filter("not . or ..", |n| n != "." && n != "..")
}

fn entry(name: impl Strategy<Value = String>) -> impl Strategy<Value = Entry> {
    (peer(), name, any::<u64>(), any::<u64>()).prop_map(|(peer, name, size_bytes, checksum)| Entry {
        peer,
        name,
        size_bytes,
        checksum,
    })
}

proptest! {
    #![proptest_config(crate::config())]

    #[test]
    fn requests_round_trip(e in entry(file_name())) {
        let mut b = Vec::new();
        register_body(&mut b, &e);
        prop_assert_eq!(decode_register(&b), Ok(e.clone()));
        b.clear();
        unregister_body(&mut b, &e.peer, &e.name);
        prop_assert_eq!(decode_unregister(&b), Ok((e.peer.clone(), e.name.as_str())));
        b.clear();
        put_str16(&mut b, &e.name);
        prop_assert_eq!(decode_name(&b), Ok(e.name.as_str()));
    }

    #[test]
    fn replies_round_trip(holders in prop::collection::vec(entry(Just("f".to_string())), 0..64),
                          files in prop::option::of(prop::collection::vec(entry(file_name()), 0..20))) {
        let mut b = Vec::new();
        search_reply(&mut b, &holders);
        prop_assert_eq!(decode_search_reply("f", &b), Ok(holders));
        // A list reply carries (name, size, checksum) per file: the entries without peer.
        let files: Option<Vec<_>> = files.map(|v| {
            v.into_iter()
                .map(|e| SharedFile { name: e.name, size_bytes: e.size_bytes, checksum: e.checksum })
                .collect()
        });
        b.clear();
        list_reply(&mut b, files.as_deref());
        prop_assert_eq!(decode_list(&b), Ok(files));
    }

    #[test]
    fn any_body_decodes_or_is_refused(body in prop::collection::vec(any::<u8>(), 0..200)) {
        let mut again = Vec::new();
        if let Ok(e) = decode_register(&body) {
            register_body(&mut again, &e);
            prop_assert_eq!(&again, &body);
        }
        let _ = decode_unregister(&body);
        let _ = decode_name(&body);
        if let Ok(h) = decode_search_reply("f", &body) {
            again.clear();
            search_reply(&mut again, &h);
            prop_assert_eq!(&again, &body);
        }
        let _ = decode_list(&body);
    }
}
