//! knee-node: the data plane of knee. Servers, peers and load generators of the reference
//! systems, with the wire protocol and the probes they share. The `knee` Python package
//! starts this binary as one process per node; see `docs/` for the formats between them.

pub mod clock;
pub mod clock_probe;
pub mod config_defaults;
pub mod contract;
pub mod control;
pub mod describe;
pub mod events;
pub mod load;
pub mod poll;
pub mod rng;
#[cfg(test)]
pub(crate) mod scratch;
pub mod serve;
pub mod signals;
pub mod stdio;
pub mod systems;
pub mod wire;
