//! The codec's unit tests (the wire properties are in `tests/codec_props`).

use super::*;
use crate::rng::Rng;

fn item(rng: &mut Rng, slices: u32) -> (ItemHeader, Vec<u8>) {
    let id = rng.next_u64() >> 8;
    let (width, height) = (rng.range_u32(1, 40) as u16, rng.range_u32(1, 40) as u16);
    let h = ItemHeader {
        slice: (id % slices as u64) as u32,
        sender: rng.next_u64() as u32,
        id,
        attempt: rng.next_u64() as u16,
        width,
        height,
        timestamp_ns: rng.next_u64(),
    };
    let rgb = (0..h.image_bytes()).map(|_| rng.next_u64() as u8).collect();
    (h, rgb)
}

/// A random item as [`item`] makes it, and its bytes on the wire.
fn encoded_item(rng: &mut Rng, slices: u32) -> (ItemHeader, Vec<u8>, Vec<u8>) {
    let (h, rgb) = item(rng, slices);
    let mut out = Vec::new();
    h.encode(&rgb, &mut out);
    (h, rgb, out)
}

#[test]
fn items_and_replies_round_trip() {
    let mut rng = Rng::new(1);
    for _ in 0..2000 {
        let slices = rng.range_u32(1, 1000);
        let (h, rgb, out) = encoded_item(&mut rng, slices);
        assert_eq!(ItemHeader::decode(&out, slices).unwrap(), h);
        assert_eq!(&out[ITEM_HEADER_BYTES..], &rgb[..]);
        assert_eq!(h.acked(&out).count(), 0);
        let acked: Vec<u64> = (0..rng.range_u32(0, MAX_ITEM_ACKS as u32))
            .map(|_| rng.next_u64())
            .collect();
        let mut with = Vec::new();
        h.encode_acked(&rgb, &acked, &mut with);
        assert_eq!(ItemHeader::decode(&with, slices).unwrap(), h);
        assert_eq!(h.image(&with), &rgb[..]);
        assert_eq!(h.acked(&with).collect::<Vec<_>>(), acked);
        let r = Reply {
            sender: h.sender,
            pn: rng.next_u64() as u32,
            id: h.id,
            slice: h.slice,
            epoch: rng.next_u64(),
            timestamp_ns: h.timestamp_ns,
            queue_ns: rng.next_u64(),
            service_ns: rng.next_u64(),
            gray_checksum: rng.next_u64(),
        };
        let mut out = Vec::new();
        r.encode(&mut out);
        assert_eq!(out.len(), REPLY_HEADER_BYTES + REPLY_MESSAGE.len());
        assert_eq!(Reply::decode(&out).unwrap(), r);
    }
}

#[test]
fn acks_round_trip_and_bad_ones_are_refused() {
    let acks = Acks {
        sender: 7,
        ids: vec![3, 13, u64::MAX],
    };
    let mut b = Vec::new();
    acks.encode(&mut b);
    assert_eq!(b.len(), ACKS_HEADER_BYTES + 24);
    assert_eq!(Acks::decode(&b).unwrap(), acks);
    assert!(matches!(
        Acks::decode(&b[..b.len() - 1]),
        Err(ItemError::AcksLength { .. })
    ));
    let mut many = b.clone();
    many[12..16].copy_from_slice(&(MAX_ACKS as u32 + 1).to_le_bytes());
    assert!(matches!(Acks::decode(&many), Err(ItemError::TooManyAcks { .. })));
    let mut reply = b.clone();
    reply[3] = KIND_REPLY;
    assert!(matches!(Acks::decode(&reply), Err(ItemError::Kind { .. })));
    let empty = Acks {
        sender: 1,
        ids: vec![],
    };
    let mut e = Vec::new();
    empty.encode(&mut e);
    assert_eq!(Acks::decode(&e).unwrap(), empty);
}

#[test]
fn bad_items_are_refused_with_a_reason() {
    let mut rng = Rng::new(2);
    let (h, rgb, good) = encoded_item(&mut rng, 10);
    let reason = |bytes: &[u8], slices| ItemHeader::decode(bytes, slices).unwrap_err();
    assert!(matches!(
        reason(&good[..good.len() - 1], 10),
        ItemError::ItemLength { .. }
    ));
    assert!(matches!(
        reason(&good[..10], 10),
        ItemError::Short { len: 10, .. }
    ));
    assert!(matches!(reason(&good, 7), ItemError::WrongSlice { .. }) || h.id % 7 == h.slice as u64);
    let mut bad = good.clone();
    bad[0] = b'X';
    assert_eq!(reason(&bad, 10), ItemError::Magic([b'X', b'S']));
    let mut bad = good.clone();
    bad[3] = KIND_REPLY;
    assert!(matches!(reason(&bad, 10), ItemError::Kind { .. }));
    let mut big = good.clone();
    big[22..26].copy_from_slice(&[0xff; 4]);
    assert!(matches!(reason(&big, 10), ItemError::ImageTooBig { .. }));
    // An acks count the bytes do not hold, or above the limit.
    let mut acked = Vec::new();
    h.encode_acked(&rgb, &[5, 15], &mut acked);
    assert!(matches!(
        reason(&acked[..acked.len() - 8], 10),
        ItemError::ItemLength { acks: 2, .. }
    ));
    let mut many = acked.clone();
    many[26..28].copy_from_slice(&(MAX_ITEM_ACKS as u16 + 1).to_le_bytes());
    assert!(matches!(reason(&many, 10), ItemError::TooManyItemAcks { .. }));
    // The reason a PN logs is the variant's text.
    assert!(reason(&many, 10).to_string().contains("limit per item"));
    assert!(Reply::decode(&good).is_err());
}

#[test]
fn decoding_random_bytes_never_panics() {
    let mut rng = Rng::new(3);
    let (_, _, good) = encoded_item(&mut rng, 10);
    for n in 0..20_000 {
        let len = rng.range_u32(0, 200) as usize;
        let mut bytes: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
        if n % 2 == 0 && len >= 4 {
            // A valid prefix, so that decoding goes past the magic.
            bytes[..2].copy_from_slice(&MAGIC);
            bytes[2] = VERSION;
            bytes[3] = if n % 4 == 0 { KIND_ITEM } else { KIND_REPLY };
        }
        let _ = ItemHeader::decode(&bytes, rng.range_u32(0, 20));
        let _ = Reply::decode(&bytes);
        let _ = Acks::decode(&bytes);
        let _ = decode_control::<ToLb>(&bytes);
        let _ = decode_control::<ToPn>(&bytes);
        let _ = decode_control::<Handoff>(&bytes);
    }
    // Flipping any one byte of a good item gives a result, never a panic.
    for i in 0..good.len() {
        let mut b = good.clone();
        b[i] ^= 0xA5;
        let _ = ItemHeader::decode(&b, 10);
    }
}

#[test]
fn control_messages_round_trip_and_unknown_ones_are_refused() {
    let msgs = vec![
        ToLb::Hello { pn: 1 },
        ToLb::Heartbeat {
            pn: 2,
            queue_len: 3,
            processed_per_s: 4.5,
            owned: 5,
        },
        ToLb::Leave { pn: 3 },
        ToLb::Took {
            pn: 1,
            t_ns: 9,
            slices: vec![TakenSlice {
                slice: 1,
                epoch: 2,
                giver_last_id: Some(3),
                taker_first_id: None,
            }],
        },
    ];
    for m in msgs {
        assert_eq!(decode_control::<ToLb>(&encode_control(&m)).unwrap(), m);
    }
    let give = ToPn::Give {
        to: 4,
        slices: [(1, 2), (3, 4), (4, 4)].into_iter().collect(),
    };
    assert_eq!(decode_control::<ToPn>(&encode_control(&give)).unwrap(), give);
    let slices = vec![
        HandoffSlice {
            slice: 2,
            epoch: 3,
            watermark: [(7, 100), (8, 40)].into_iter().collect(),
            owed: vec![(7, 90)],
        },
        HandoffSlice {
            slice: 5,
            epoch: 1,
            watermark: [(7, 103)].into_iter().collect(),
            owed: vec![],
        },
        HandoffSlice {
            slice: 6,
            epoch: 1,
            watermark: [(7, 2)].into_iter().collect(),
            owed: vec![],
        },
    ];
    let h = Handoff::new(1, &slices);
    assert_eq!(h.slices.runs(), &[(2, 1, 3), (5, 2, 1)]);
    assert_eq!(h.watermark_senders.0, vec![(7, 1), (8, 1), (7, 2)]);
    let back = decode_control::<Handoff>(&encode_control(&h)).unwrap();
    assert_eq!(back, h);
    let read: Vec<HandoffSlice> = back.checked().unwrap().iter().map(|s| s.to_owned()).collect();
    assert_eq!(read, slices);
    // Columns that disagree are refused with the reason, not read past.
    let mut short = h.clone();
    short.owed_counts.0.pop();
    assert!(matches!(
        short.checked(),
        Err(ControlError::CountsDisagree { owed_slices: 1, .. })
    ));
    let mut over = h.clone();
    over.watermark_counts.0[0].0 = u32::MAX;
    assert!(matches!(
        over.checked(),
        Err(ControlError::EntriesDisagree { .. })
    ));
    let mut empty_run = h.clone();
    empty_run.owed_counts.0.push((0, 0));
    assert!(matches!(
        empty_run.checked(),
        Err(ControlError::EmptyCountRun { what: "owed" })
    ));
    // Slice runs past MAX_SLICES, or holding more than MAX_SLICES in all, are refused
    // as they are decoded.
    let runs = |r: Vec<(u32, u32, u64)>| {
        let body = postcard::to_allocvec(&ToPn::Revoke {
            slices: SliceRuns { runs: r, len: 0 },
        })
        .unwrap();
        decode_control::<ToPn>(&[&CONTROL_MAGIC[..], &[CONTROL_VERSION], &body].concat())
    };
    assert!(matches!(
        runs(vec![(MAX_SLICES - 1, 2, 1)]),
        Err(ControlError::SliceRun { .. })
    ));
    assert!(matches!(
        runs(vec![(0, 0, 1)]),
        Err(ControlError::SliceRun { n: 0, .. })
    ));
    assert!(matches!(
        runs(vec![(0, MAX_SLICES, 1), (0, 1, 1)]),
        Err(ControlError::TooManySlices { .. })
    ));
    assert_eq!(
        runs(vec![(0, MAX_SLICES, 1)]).unwrap(),
        ToPn::Revoke {
            slices: (0..MAX_SLICES).map(|s| (s, 1)).collect()
        }
    );
    // Unknown kinds (a variant index past the last), trailing bytes, a short message,
    // another format or version: each refused with its reason.
    let hello = encode_control(&ToLb::Hello { pn: 1 });
    let mut unknown = hello.clone();
    unknown[3] = 9;
    assert!(decode_control::<ToLb>(&unknown).is_err());
    let mut trailing = hello.clone();
    trailing.push(0);
    assert_eq!(
        decode_control::<ToLb>(&trailing),
        Err(ControlError::Trailing { bytes: 1 })
    );
    assert!(decode_control::<ToLb>(&hello[..3]).is_err());
    assert_eq!(
        decode_control::<ToLb>(br#"{"kind": "hello", "pn": 1}"#),
        Err(ControlError::NoMagic)
    );
    let mut newer = hello.clone();
    newer[2] = CONTROL_VERSION + 1;
    assert_eq!(
        decode_control::<ToLb>(&newer),
        Err(ControlError::Version(CONTROL_VERSION + 1))
    );
    // A `took` (variant 3, pn 1, t_ns 0) whose slice count (a varint of 2^32 - 1) is far
    // beyond the bytes present fails without allocating it.
    let huge = [&hello[..3], &[3, 1, 0, 0xff, 0xff, 0xff, 0xff, 0x0f]].concat();
    assert!(decode_control::<ToLb>(&huge).is_err());
    assert!(matches!(
        decode_control::<ToLb>(&vec![b' '; MAX_CONTROL_BYTES + 1]),
        Err(ControlError::TooLong { .. })
    ));
}

#[test]
fn slices_pushed_in_order_at_one_epoch_make_one_run() {
    let mut r = SliceRuns::new();
    for s in 500..1000 {
        r.push(s, 3);
    }
    assert_eq!((r.runs(), r.len()), (&[(500, 500, 3)][..], 500));
    // A new epoch, a gap, or a step back starts a run; iteration gives every pair.
    let pairs = [(1, 2), (2, 2), (3, 4), (5, 4), (4, 4)];
    let r: SliceRuns = pairs.into_iter().collect();
    assert_eq!(r.runs(), &[(1, 2, 2), (3, 1, 4), (5, 1, 4), (4, 1, 4)]);
    assert_eq!(r.iter().collect::<Vec<_>>(), pairs);
    assert!(r.check().is_ok());
    // The last slice below the bound is fine; one past it is refused.
    assert!([(MAX_SLICES - 1, 1)]
        .into_iter()
        .collect::<SliceRuns>()
        .check()
        .is_ok());
    let over = SliceRuns {
        runs: vec![(MAX_SLICES, 1, 1)],
        len: 1,
    };
    assert!(over.check().is_err());
    // Iterating unchecked runs past u32 never overflows (it stops at u32::MAX).
    let wild = SliceRuns {
        runs: vec![(u32::MAX - 1, 5, 1)],
        len: 5,
    };
    assert_eq!(wild.iter().count(), 1);
}

#[test]
fn image_shapes_multiply_to_the_size() {
    for bytes in [3, 8190, 8193, 7 * 1024 * 3, MAX_IMAGE_BYTES - 1] {
        let (w, h) = image_shape(bytes).unwrap();
        assert_eq!(w as usize * h as usize * 3, bytes, "{bytes}");
    }
    // 65,537 is prime: 1 x 65,537 does not fit a u16 side.
    assert!(image_shape(3 * 65_537).is_err());
    assert!(image_shape(8192).is_err());
    assert!(image_shape(0).is_err());
}
