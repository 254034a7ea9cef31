//! The slices control messages (bounded postcard behind a magic and version, PN <-> LB and
//! giver -> taker): what decodes encodes to bytes that decode to the same message.
#![no_main]

use knee_node::systems::slices::codec::{
    decode_control, encode_control, Check, Handoff, HandoffSlice, ToLb, ToPn,
};
use libfuzzer_sys::fuzz_target;
use serde::{de::DeserializeOwned, Serialize};

/// postcard keeps an f64's bits: a heartbeat's rate (NaN included) is compared by its bits,
/// everything else with `==`.
fn same_lb(a: &ToLb, b: &ToLb) -> bool {
    match (a, b) {
        (
            ToLb::Heartbeat {
                pn,
                queue_len,
                processed_per_s,
                owned,
            },
            ToLb::Heartbeat {
                pn: pn2,
                queue_len: q2,
                processed_per_s: r2,
                owned: o2,
            },
        ) => (pn, queue_len, owned) == (pn2, q2, o2) && processed_per_s.to_bits() == r2.to_bits(),
        _ => a == b,
    }
}

fn round_trip<T: Serialize + DeserializeOwned + Check + std::fmt::Debug>(
    bytes: &[u8],
    same: impl Fn(&T, &T) -> bool,
) {
    if let Ok(m) = decode_control::<T>(bytes) {
        let bytes = encode_control(&m);
        assert!(!bytes.is_empty(), "{m:?} did not encode");
        let back = decode_control::<T>(&bytes).unwrap_or_else(|e| panic!("{m:?}: {e}"));
        assert!(same(&m, &back), "{m:?} came back as {back:?}");
    }
}

fuzz_target!(|input: &[u8]| {
    let [which, bytes @ ..] = input else {
        return;
    };
    match which % 3 {
        0 => round_trip::<ToLb>(bytes, same_lb),
        1 => round_trip::<ToPn>(bytes, |a, b| a == b),
        _ => {
            round_trip::<Handoff>(bytes, |a, b| a == b);
            // A handoff whose columns agree gives back each slice's own entries, which
            // written again read back the same.
            if let Ok(h) = decode_control::<Handoff>(bytes) {
                if let Ok(checked) = h.clone().checked() {
                    let slices: Vec<HandoffSlice> = checked.iter().map(|s| s.to_owned()).collect();
                    let again = Handoff::new(h.from, &slices).checked().expect("written by knee");
                    let back: Vec<HandoffSlice> = again.iter().map(|s| s.to_owned()).collect();
                    assert_eq!(back, slices);
                }
            }
        }
    }
});
