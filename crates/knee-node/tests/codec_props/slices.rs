//! slices' item and reply (binary) and control messages (bounded postcard).

use knee_node::systems::slices::codec::{
    decode_control, encode_control, Handoff, HandoffSlice, ItemHeader, Reply, SliceRuns, TakenSlice, ToLb,
    ToPn, CONTROL_MAGIC, CONTROL_VERSION, ITEM_HEADER_BYTES, KIND_ITEM, KIND_REPLY, MAGIC, MAX_ITEM_ACKS,
    MAX_SLICES, VERSION,
};
use proptest::prelude::*;

fn item() -> impl Strategy<Value = (u32, ItemHeader, Vec<u8>)> {
    (
        1u32..=65_536,
        any::<u64>(),
        any::<u32>(),
        any::<u16>(),
        1u16..20,
        1u16..20,
        any::<u64>(),
    )
        .prop_flat_map(|(slices, id, sender, attempt, width, height, timestamp_ns)| {
            let h = ItemHeader {
                slice: (id % slices as u64) as u32,
                sender,
                id,
                attempt,
                width,
                height,
                timestamp_ns,
            };
            let n = h.image_bytes();
            (Just(slices), Just(h), prop::collection::vec(any::<u8>(), n..=n))
        })
}

fn reply() -> impl Strategy<Value = Reply> {
    (any::<[u32; 3]>(), any::<[u64; 6]>()).prop_map(|(s, w)| Reply {
        sender: s[0],
        pn: s[1],
        id: w[0],
        slice: s[2],
        epoch: w[1],
        timestamp_ns: w[2],
        queue_ns: w[3],
        service_ns: w[4],
        gray_checksum: w[5],
    })
}

fn to_lb() -> impl Strategy<Value = ToLb> {
    let took = (
        any::<u32>(),
        any::<u64>(),
        any::<Option<u64>>(),
        any::<Option<u64>>(),
    )
        .prop_map(|(slice, epoch, giver_last_id, taker_first_id)| TakenSlice {
            slice,
            epoch,
            giver_last_id,
            taker_first_id,
        });
    prop_oneof![
        any::<u32>().prop_map(|pn| ToLb::Hello { pn }),
        // Rates as a node writes them: finite, and exact in JSON (integers and halves).
        (any::<u32>(), any::<u64>(), 0u32..1 << 30, any::<u32>()).prop_map(|(pn, queue_len, r, owned)| {
            ToLb::Heartbeat {
                pn,
                queue_len,
                processed_per_s: f64::from(r) / 2.0,
                owned,
            }
        }),
        any::<u32>().prop_map(|pn| ToLb::Leave { pn }),
        (any::<u32>(), any::<u64>(), prop::collection::vec(took, 0..8))
            .prop_map(|(pn, t_ns, slices)| ToLb::Took { pn, t_ns, slices }),
    ]
}

/// Slices below MAX_SLICES (beyond, a message is refused), in runs or not.
fn slice_runs() -> impl Strategy<Value = SliceRuns> {
    prop::collection::vec((0..MAX_SLICES, any::<u64>(), any::<bool>()), 0..8).prop_map(|v| {
        let mut runs = SliceRuns::new();
        for (slice, epoch, next) in v {
            // Half the time the next slice at the same epoch: a run grows.
            let last = runs.runs().last().copied();
            match last {
                Some((first, n, e)) if next && first + n < MAX_SLICES => runs.push(first + n, e),
                _ => runs.push(slice, epoch),
            }
        }
        runs
    })
}

fn to_pn() -> impl Strategy<Value = ToPn> {
    let slices = slice_runs;
    prop_oneof![
        (slices(), any::<bool>()).prop_map(|(slices, crash)| ToPn::Assign { slices, crash }),
        (any::<u32>(), slices()).prop_map(|(to, slices)| ToPn::Give { to, slices }),
        slices().prop_map(|slices| ToPn::Revoke { slices }),
    ]
}

/// A handoff's slices (the taker reads them back from the columns).
fn handoff() -> impl Strategy<Value = (u32, Vec<HandoffSlice>)> {
    let pairs = || prop::collection::vec(any::<(u32, u64)>(), 0..6);
    let slice =
        (0..MAX_SLICES, any::<u64>(), pairs(), pairs()).prop_map(|(slice, epoch, watermark, owed)| {
            HandoffSlice {
                slice,
                epoch,
                watermark: watermark.into(),
                owed,
            }
        });
    (any::<u32>(), prop::collection::vec(slice, 0..6))
}

proptest! {
    #![proptest_config(crate::config())]

    #[test]
    fn items_and_replies_round_trip(
        (slices, h, rgb) in item(),
        acked in prop::collection::vec(any::<u64>(), 0..=MAX_ITEM_ACKS),
        r in reply(),
    ) {
        let mut b = Vec::new();
        h.encode(&rgb, &mut b);
        prop_assert_eq!(ItemHeader::decode(&b, slices), Ok(h.clone()));
        prop_assert_eq!(&b[ITEM_HEADER_BYTES..], &rgb[..]);
        b.clear();
        h.encode_acked(&rgb, &acked, &mut b);
        prop_assert_eq!(ItemHeader::decode(&b, slices), Ok(h.clone()));
        prop_assert_eq!(h.image(&b), &rgb[..]);
        prop_assert_eq!(h.acked(&b).collect::<Vec<_>>(), acked);
        b.clear();
        r.encode(&mut b);
        prop_assert_eq!(Reply::decode(&b), Ok(r));
    }

    #[test]
    fn control_messages_round_trip(lb in to_lb(), pn in to_pn(), (from, slices) in handoff()) {
        prop_assert_eq!(decode_control::<ToLb>(&encode_control(&lb)), Ok(lb));
        prop_assert_eq!(decode_control::<ToPn>(&encode_control(&pn)), Ok(pn));
        let h = decode_control::<Handoff>(&encode_control(&Handoff::new(from, &slices)));
        let h = h.map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(h.from, from);
        let h = h.checked().map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(h.iter().map(|s| s.to_owned()).collect::<Vec<_>>(), slices);
    }

    #[test]
    fn any_bytes_decode_or_are_refused(mut b in prop::collection::vec(any::<u8>(), 0..200), kind in 0u8..3, slices in 0u32..70_000) {
        if kind > 0 && b.len() >= 4 {
            b[..2].copy_from_slice(&MAGIC);
            b[2] = VERSION;
            b[3] = if kind == 1 { KIND_ITEM } else { KIND_REPLY };
        }
        if let Ok(h) = ItemHeader::decode(&b, slices) {
            prop_assert_eq!(h.id % slices as u64, h.slice as u64);
            prop_assert_eq!(b.len(), ITEM_HEADER_BYTES + h.image_bytes() + 8 * h.acked(&b).count());
        }
        let _ = Reply::decode(&b);
        let _ = decode_control::<ToLb>(&b);
        let _ = decode_control::<ToPn>(&b);
        let _ = decode_control::<Handoff>(&b);
    }

    #[test]
    fn any_body_behind_the_magic_decodes_or_is_refused(body in prop::collection::vec(any::<u8>(), 0..200)) {
        // Past the magic and version, so that postcard's decoding itself is exercised: what
        // decodes re-encodes to a message that decodes the same (Debug compares a NaN rate).
        let b = [&CONTROL_MAGIC[..], &[CONTROL_VERSION], &body].concat();
        if let Ok(m) = decode_control::<ToLb>(&b) {
            let back = decode_control::<ToLb>(&encode_control(&m));
            prop_assert_eq!(format!("{back:?}"), format!("{:?}", Ok::<_, String>(m)));
        }
        if let Ok(m) = decode_control::<ToPn>(&b) {
            prop_assert_eq!(decode_control::<ToPn>(&encode_control(&m)), Ok(m));
        }
        if let Ok(m) = decode_control::<Handoff>(&b) {
            prop_assert_eq!(decode_control::<Handoff>(&encode_control(&m)), Ok(m.clone()));
            // Columns that agree give each slice its own entries, which written again
            // read back the same (the columns may differ: runs a writer would have joined).
            if let Ok(checked) = m.clone().checked() {
                let slices: Vec<HandoffSlice> = checked.iter().map(|s| s.to_owned()).collect();
                let again = Handoff::new(m.from, &slices).checked().map_err(|e| TestCaseError::fail(e.to_string()))?;
                prop_assert_eq!(again.iter().map(|s| s.to_owned()).collect::<Vec<_>>(), slices);
            }
        }
    }
}
