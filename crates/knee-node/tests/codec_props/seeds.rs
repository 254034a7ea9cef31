//! The fuzz targets' seed corpora (`fuzz/seeds/<target>/`): valid messages of every kind,
//! built with knee-node's own encoders, laid out as each target reads its input (a few
//! leading bytes choose the decoder or the read sizes; see `fuzz/fuzz_targets/`).
//!
//! This test checks that the committed seeds are exactly these messages, and that each one
//! decodes. `KNEE_WRITE_SEEDS=1 cargo test --test codec_props seeds` writes them again.

use std::collections::BTreeMap;
use std::path::PathBuf;

use knee_node::systems::chat::codec::{Op, Request};
use knee_node::systems::chat::{OP_AUDIT, OP_FETCH, OP_JOIN, OP_LOGIN, OP_LOGOUT, OP_POST};
use knee_node::systems::share::codec::{
    decode_list, decode_name, decode_register, decode_search_reply, decode_unregister, list_reply, put_str16,
    register_body, search_reply, unregister_body, Entry, SharedFile,
};
use knee_node::systems::slices::codec::{
    decode_control, encode_control, Handoff, HandoffSlice, ItemHeader, Reply, TakenSlice, ToLb, ToPn,
};
use knee_node::systems::stream::datagram::{self, BlockId};
use knee_node::wire::{write_frame, ReplyHeader, RequestHeader};

/// Seeds by target, then by file name.
type Seeds = BTreeMap<&'static str, BTreeMap<String, Vec<u8>>>;

fn add(seeds: &mut Seeds, target: &'static str, name: &str, bytes: Vec<u8>) {
    seeds.entry(target).or_default().insert(name.to_string(), bytes);
}

fn with(prefix: &[u8], body: &[u8]) -> Vec<u8> {
    [prefix, body].concat()
}

fn wire_seeds(seeds: &mut Seeds) {
    let req = RequestHeader {
        request_id: 7,
        op: 4,
        flags: 0,
    };
    let reply = ReplyHeader {
        request_id: 7,
        status: 0,
        flags: 2,
        server_ns: 51_000,
        queue_ns: 1_000,
        service_ns: 50_000,
        detail_ns: 20_000,
    };
    add(
        seeds,
        "request_header",
        "echo",
        with(&req.encode(), b"0123456789abcdef"),
    );
    add(
        seeds,
        "reply_header",
        "ok",
        with(&reply.encode(), b"0123456789abcdef"),
    );
    // Frames of requests and replies back to back: plain reads of 3*7 and 5*7 bytes, and
    // stamped reads with a timeout (0) between them.
    let (mut stream, mut scratch) = (Vec::new(), Vec::new());
    for payload in [
        with(&req.encode(), b"body"),
        reply.encode().to_vec(),
        Vec::new(),
        vec![b'x'; 300],
    ] {
        write_frame(&mut stream, &mut scratch, &[&payload]).expect("vec write");
    }
    add(seeds, "frame", "plain", with(&[0, 0x00, 0x10, 2, 3, 5], &stream));
    add(
        seeds,
        "frame",
        "stamped",
        with(&[2, 0x00, 0x10, 3, 1, 0, 40], &stream),
    );
    add(seeds, "frame", "default_max", with(&[1, 0, 0, 0], &stream));
}

fn chat_seeds(seeds: &mut Seeds) {
    let ops = [
        (
            "login",
            Op::Login {
                user: "ann".into(),
                password: "pw'; DROP TABLE users;--".into(),
            },
        ),
        (
            "logout",
            Op::Logout {
                user: "ann".into(),
                room: 3,
            },
        ),
        (
            "join",
            Op::Join {
                user: "ann".into(),
                room: 3,
            },
        ),
        (
            "post",
            Op::Post {
                user: "ann".into(),
                room: 3,
                text: b"hello\0world".to_vec(),
            },
        ),
        (
            "fetch",
            Op::Fetch {
                room: 3,
                since_id: 10,
                max: 20,
            },
        ),
        ("audit", Op::Audit),
    ];
    for (name, op) in ops {
        let req = Request {
            client: "load/1".into(),
            reply_bytes: 256,
            op,
        };
        let mut body = Vec::new();
        req.encode(&mut body);
        add(seeds, "chat", name, with(&[req.code() as u8], &body));
    }
}

fn share_seeds(seeds: &mut Seeds) {
    let e = Entry {
        peer: "127.0.0.1:7001".into(),
        name: "f0-0001.bin".into(),
        size_bytes: 1 << 20,
        checksum: 0x0123_4567_89ab_cdef,
    };
    let mut b = Vec::new();
    register_body(&mut b, &e);
    add(seeds, "share", "register", with(&[0], &b));
    b.clear();
    unregister_body(&mut b, &e.peer, &e.name);
    add(seeds, "share", "unregister", with(&[1], &b));
    b.clear();
    put_str16(&mut b, &e.name);
    add(seeds, "share", "search", with(&[2], &b));
    b.clear();
    let holder = Entry {
        name: "f".into(),
        ..e.clone()
    };
    search_reply(&mut b, &[holder.clone(), holder]);
    add(seeds, "share", "search_reply", with(&[3], &b));
    b.clear();
    let file = SharedFile {
        name: e.name,
        size_bytes: e.size_bytes,
        checksum: e.checksum,
    };
    list_reply(&mut b, Some(&[file.clone(), file]));
    add(seeds, "share", "list_reply", with(&[4], &b));
}

fn stream_seeds(seeds: &mut Seeds) {
    let id = BlockId {
        stream: 2,
        frame: 40,
        block: 191,
    };
    let mut b = Vec::new();
    datagram::Request { id, request_id: 9 }.encode(&mut b);
    add(seeds, "stream", "request", b.clone());
    for (name, status) in [
        ("reply_ok", datagram::REPLY_OK),
        ("reply_no_block", datagram::REPLY_NO_SUCH_BLOCK),
    ] {
        datagram::ReplyHeader {
            status,
            id,
            request_id: 9,
            server_ns: 30_000,
            delay_ns: 5_000_000,
        }
        .encode(&mut b);
        add(seeds, "stream", name, b.clone());
    }
}

fn slices_seeds(seeds: &mut Seeds) {
    let slices: u16 = 10;
    let h = ItemHeader {
        slice: 7,
        sender: 1,
        id: 1237,
        attempt: 0,
        width: 4,
        height: 3,
        timestamp_ns: 123_456_789,
    };
    let mut b = Vec::new();
    h.encode(&[200; 36], &mut b);
    add(seeds, "slices_item", "item", with(&slices.to_le_bytes(), &b));
    b.clear();
    Reply {
        sender: 1,
        pn: 2,
        id: 1237,
        slice: 7,
        epoch: 3,
        timestamp_ns: 123_456_789,
        queue_ns: 1_000,
        service_ns: 90_000,
        gray_checksum: 0xfeed,
    }
    .encode(&mut b);
    add(seeds, "slices_item", "reply", with(&slices.to_le_bytes(), &b));
    let to_lb = [
        ("hello", ToLb::Hello { pn: 1 }),
        (
            "heartbeat",
            ToLb::Heartbeat {
                pn: 1,
                queue_len: 4,
                processed_per_s: 812.5,
                owned: 3,
            },
        ),
        ("leave", ToLb::Leave { pn: 1 }),
        (
            "took",
            ToLb::Took {
                pn: 1,
                t_ns: 99,
                slices: vec![TakenSlice {
                    slice: 2,
                    epoch: 3,
                    giver_last_id: Some(1200),
                    taker_first_id: None,
                }],
            },
        ),
    ];
    for (name, m) in to_lb {
        add(seeds, "slices_control", name, with(&[0], &encode_control(&m)));
    }
    let to_pn = [
        (
            "assign",
            ToPn::Assign {
                slices: [(0, 1), (1, 1), (3, 2)].into_iter().collect(),
                crash: true,
            },
        ),
        (
            "give",
            ToPn::Give {
                to: 2,
                slices: [(4, 2), (5, 2)].into_iter().collect(),
            },
        ),
        (
            "revoke",
            ToPn::Revoke {
                slices: [(4, 3)].into_iter().collect(),
            },
        ),
        (
            "want",
            ToPn::Want {
                from: 2,
                items: vec![(1, 1204), (1, 1214)],
            },
        ),
    ];
    for (name, m) in to_pn {
        add(seeds, "slices_control", name, with(&[1], &encode_control(&m)));
    }
    let handoff = Handoff::new(
        1,
        &[
            HandoffSlice {
                slice: 4,
                epoch: 2,
                watermark: [(1, 1200), (2, 900)].into_iter().collect(),
                owed: vec![(1, 1190)],
            },
            HandoffSlice {
                slice: 5,
                epoch: 2,
                watermark: [(1, 1201)].into_iter().collect(),
                owed: vec![],
            },
        ],
    );
    add(
        seeds,
        "slices_control",
        "handoff",
        with(&[2], &encode_control(&handoff)),
    );
}

fn http_seeds(seeds: &mut Seeds) {
    let responses: [(&str, &[u8]); 4] = [
        (
            "content_length",
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nServer-Timing: app;dur=1.5, db;dur=0.5\r\n\r\nhello",
        ),
        (
            "chunked",
            b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n0\r\nX-T: 1\r\n\r\n",
        ),
        (
            "interim",
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n",
        ),
        ("until_close", b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\n\r\nbody"),
    ];
    for (name, bytes) in responses {
        // Mode 0 (GET, 1 KiB head, 4 KiB body), reads of 1, 7 and 64 bytes.
        add(seeds, "http_response", name, with(&[0, 3, 1, 7, 64], bytes));
    }
    add(
        seeds,
        "http_response",
        "head",
        with(&[1, 0], b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n"),
    );
}

fn all_seeds() -> Seeds {
    let mut seeds = Seeds::new();
    wire_seeds(&mut seeds);
    chat_seeds(&mut seeds);
    share_seeds(&mut seeds);
    stream_seeds(&mut seeds);
    slices_seeds(&mut seeds);
    http_seeds(&mut seeds);
    seeds
}

/// Each seed decodes (the targets' own layouts: see `fuzz/fuzz_targets/`).
fn decodes(target: &str, b: &[u8]) -> bool {
    match target {
        "request_header" => RequestHeader::decode(b).is_some(),
        "reply_header" => ReplyHeader::decode(b).is_some(),
        "chat" => Request::decode(u16::from(b[0]), &b[1..]).is_ok(),
        "share" => match b[0] {
            0 => decode_register(&b[1..]).is_ok(),
            1 => decode_unregister(&b[1..]).is_ok(),
            2 => decode_name(&b[1..]).is_ok(),
            3 => decode_search_reply("f", &b[1..]).is_ok(),
            _ => matches!(decode_list(&b[1..]), Ok(Some(_))),
        },
        "stream" => datagram::Request::decode(b).is_ok() || datagram::ReplyHeader::decode(b).is_ok(),
        "slices_item" => {
            let slices = u32::from(u16::from_le_bytes([b[0], b[1]]));
            ItemHeader::decode(&b[2..], slices).is_ok() || Reply::decode(&b[2..]).is_ok()
        }
        "slices_control" => match b[0] {
            0 => decode_control::<ToLb>(&b[1..]).is_ok(),
            1 => decode_control::<ToPn>(&b[1..]).is_ok(),
            _ => decode_control::<Handoff>(&b[1..]).is_ok_and(|h| h.checked().is_ok()),
        },
        // Checked by their targets' own runs (framing and HTTP need the read loop).
        _ => true,
    }
}

#[test]
fn seeds_are_valid_messages_and_committed() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds");
    let write = std::env::var_os("KNEE_WRITE_SEEDS").is_some();
    let ops = [OP_LOGIN, OP_LOGOUT, OP_JOIN, OP_POST, OP_FETCH, OP_AUDIT];
    assert!(ops.iter().all(|&op| op < 8), "the chat target tries codes 0..=7");
    for (target, files) in all_seeds() {
        let target_dir = dir.join(target);
        if write {
            std::fs::create_dir_all(&target_dir).expect("seed folder");
        }
        for (name, bytes) in files {
            assert!(decodes(target, &bytes), "{target}/{name} does not decode");
            let path = target_dir.join(&name);
            if write {
                std::fs::write(&path, &bytes).expect("writing a seed");
            }
            let committed = std::fs::read(&path).unwrap_or_default();
            assert!(
                committed == bytes,
                "{} differs from the message it should be: KNEE_WRITE_SEEDS=1 cargo test --test codec_props seeds",
                path.display()
            );
        }
    }
}
