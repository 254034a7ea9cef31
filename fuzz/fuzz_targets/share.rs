//! The share bodies: register, unregister, search/obtain (one name), the search reply and
//! the list reply. What decodes encodes back to the same bytes (the list reply: to bytes
//! that decode the same, as names are read lossily) and respects the codec's limits.
#![no_main]

use knee_node::systems::share::codec::{
    decode_list, decode_name, decode_register, decode_search_reply, decode_unregister, list_reply, put_str16,
    register_body, search_reply, unregister_body, MAX_HOLDERS, MAX_PEER_BYTES,
};
use libfuzzer_sys::fuzz_target;

fn peer_ok(p: &str) -> bool {
    (1..=MAX_PEER_BYTES).contains(&p.len()) && !p.contains('\0')
}

fn name_ok(n: &str) -> bool {
    !n.is_empty() && n.len() <= 255 && !n.contains(['\0', '/']) && n != "." && n != ".."
}

fuzz_target!(|input: &[u8]| {
    let [which, body @ ..] = input else {
        return;
    };
    let mut again = Vec::new();
    match which % 5 {
        0 => {
            if let Ok(e) = decode_register(body) {
                assert!(peer_ok(&e.peer) && name_ok(&e.name));
                register_body(&mut again, &e);
                assert_eq!(again, body);
            }
        }
        1 => {
            if let Ok((peer, name)) = decode_unregister(body) {
                assert!(peer_ok(&peer) && name_ok(name));
                unregister_body(&mut again, &peer, name);
                assert_eq!(again, body);
            }
        }
        2 => {
            if let Ok(name) = decode_name(body) {
                assert!(name_ok(name));
                put_str16(&mut again, name);
                assert_eq!(again, body);
            }
        }
        3 => {
            if let Ok(holders) = decode_search_reply("f", body) {
                assert!(holders.len() <= MAX_HOLDERS);
                assert!(holders.iter().all(|h| peer_ok(&h.peer) && h.name == "f"));
                search_reply(&mut again, &holders);
                assert_eq!(again, body);
            }
        }
        _ => match decode_list(body) {
            Ok(None) => assert_eq!(body.first(), Some(&0)),
            Ok(Some(files)) => {
                assert_ne!(body[0], 0);
                list_reply(&mut again, Some(&files));
                assert_eq!(decode_list(&again), Ok(Some(files)));
            }
            Err(_) => {}
        },
    }
});
