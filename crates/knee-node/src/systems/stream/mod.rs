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
        use crate::contract::Key;
        use crate::load::config::MAX_DURATION_S;
        let ms = || Key::float(0, config::MAX_TIMEOUT_MS);
        crate::contract::SystemContract::new()
            .op("block", datagram::OP_BLOCK)
            .flag("redundant", accessor::FLAG_REDUNDANT)
            .flag("retransmission", accessor::FLAG_RETRANSMISSION)
            .flag("hedged", accessor::FLAG_HEDGED)
            .size("block_bytes", datagram::BLOCK_BYTES)
            // A service's emulated link and its streams' frames (the spec's service tables).
            .constant("max_delay_ms", link::MAX_DELAY_MS)
            .constant("max_spread", link::MAX_SPREAD)
            .constant("max_side_px", service::MAX_SIDE_PX)
            .column("client", "client", "the frame")
            .column("arg", "arg", "the block within its frame")
            .column(
                "detail_ns",
                "detail_ns",
                "ok: the emulated delay; timeout, late: the timeout given",
            )
            .column("flags", "flags", "redundant, retransmission, hedged")
            .column("service", "service", "the block service asked")
            .reads::<service::ServiceConfig>("server")
            .key(
                "server.streams",
                Key::list(Some(service::MAX_STREAMS))
                    .default(service::default_streams())
                    .checked(),
            )
            .key("server.delay", Key::object())
            .key("server.loss", Key::object())
            // The variants' tables (`kind` picks one).
            .key("server.delay.kind", Key::one_of(&link::Delay::KINDS))
            .key("server.loss.kind", Key::one_of(&link::Loss::KINDS))
            .key("server.seed", Key::int(0, u64::MAX).default(0))
            .key(
                "server.max_pending",
                Key::int(1, service::MAX_PENDING)
                    .default(service::default_max_pending())
                    .checked(),
            )
            .reads::<config::ClientConfig>("client")
            .key(
                "client.services",
                Key::list(Some(config::MAX_SERVICES)).required(),
            )
            .key("client.service_ids", Key::list(Some(config::MAX_SERVICES)))
            .key("client.stream", Key::int(0, u16::MAX).required())
            .key(
                "client.blocks_per_frame",
                Key::int(1, config::MAX_BLOCKS_PER_FRAME).required(),
            )
            .key("client.frames", Key::int(1, u32::MAX).required())
            .key("client.first_frame", Key::int(0, u32::MAX).default(0))
            .key(
                "client.outstanding",
                Key::int(1, config::MAX_OUTSTANDING).default(1),
            )
            .key("client.timeout_ms", ms().above().required())
            .key(
                "client.retransmit",
                Key::int(0, config::MAX_RETRANSMISSIONS).default(0),
            )
            .key("client.adaptive_timeout", Key::bool().default(false))
            .key(
                "client.min_rto_ms",
                ms().above().default(config::default_min_rto_ms()),
            )
            .key("client.hedge", Key::bool().default(false))
            .key("client.late_window_ms", ms())
            .key(
                "client.duration_s",
                Key::float(0, MAX_DURATION_S).above().required(),
            )
            .key("client.warmup_s", Key::float(0, MAX_DURATION_S).default(0.0))
            .key("client.samples_path", Key::str().required())
            .key("client.histogram_path", Key::str().required())
    },
};
