//! stream (report 000): block services that emulate lossy links, and the FrameAccessor
//! client that fetches frames from one of them (serial) or several (parallel).
//!
//! UDP rather than the framed TCP of the other systems: a lost datagram is the point.
//! `docs/stream.md` describes the design and what it guarantees.

mod accessor;
mod client;
mod config;
pub mod datagram;
mod frames;
mod lines;
mod link;
mod rto;
mod service;
mod timer;

/// `serve`: one block service; `load`: the FrameAccessor client, one sample per request.
pub const SYSTEM: super::System = super::System {
    name: "stream",
    serve: service::run,
    client: client::role,
    contract: || {
        crate::contract::SystemContract::new()
            .op("block", datagram::OP_BLOCK)
            .flag("redundant", accessor::FLAG_REDUNDANT)
            .flag("retransmission", accessor::FLAG_RETRANSMISSION)
            .flag("hedged", accessor::FLAG_HEDGED)
            .size("block_bytes", datagram::BLOCK_BYTES)
            .max("server.services", config::MAX_SERVICES as f64)
            .max("driver.outstanding", config::MAX_OUTSTANDING as f64)
    },
};
