//! Property tests of every decoder knee-node runs on bytes from the network: each codec's
//! encode/decode round trip, and "decoding arbitrary bytes never panics" (it returns a
//! value or a reason). A fixed case budget per property keeps `cargo test` short; the long
//! coverage-guided runs are `fuzz/run` (docs/fuzzing.md).

mod chat;
mod frame;
mod headers;
mod http;
mod seeds;
mod share;
mod slices;
mod stream;

use proptest::prelude::ProptestConfig;

/// Cases per property: enough to meet every branch of these small decoders in CI.
pub const CASES: u32 = 512;

pub fn config() -> ProptestConfig {
    ProptestConfig::with_cases(CASES)
}
