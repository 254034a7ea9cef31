//! chat (report 001): a replicated login/logout/chat service over a real database.
//!
//! Primary-backup over shared state: every replica (`knee-node serve chat`) opens the same
//! database (an SQLite file in WAL mode, or PostgreSQL), and only the primary serves. The
//! replicas heartbeat through the database (`replica.rs`); the lowest-numbered live replica
//! is the primary, and the others answer "not primary, try N". Each write runs in one
//! transaction with a row in a deduplication table keyed by (client, request id), so a
//! client that retries after a failover gets the stored result instead of a second
//! application. The client role (`knee-node load chat`, `client/`) fails over by itself.
//! Design, guarantees and limits: `docs/chat.md`.

pub mod client;
pub mod codec;
mod ops;
pub mod replica;
pub mod server;
pub mod store;

use super::{framed, parse, System};
use crate::contract::{Key, SystemContract};
use crate::load::config::{MAX_CLIENTS, MAX_DURATION_S, MAX_WAIT_MS};

/// Replicas a spec may plan for one point (each a process with its own database session),
/// below what a node accepts (`server::MAX_REPLICAS`). No node reads it; the contract carries
/// it to the spec's rules.
pub const MAX_PLANNED_REPLICAS: u64 = 16;

pub const SYSTEM: System = System {
    name: "chat",
    serve: |opts| framed(opts, server::build(parse(&opts.server, "server")?)?),
    client: client::role,
    contract: || {
        use client::config as cc;
        let ms = |min: f64| Key::float(min, MAX_WAIT_MS);
        SystemContract::new()
            .op("login", OP_LOGIN)
            .op("logout", OP_LOGOUT)
            .op("join", OP_JOIN)
            .op("post", OP_POST)
            .op("fetch", OP_FETCH)
            .op("audit", OP_AUDIT)
            .flag("not_primary", FLAG_NOT_PRIMARY)
            .flag("duplicate", FLAG_DUPLICATE)
            .constant(
                "write_ops",
                [OP_LOGIN, OP_LOGOUT, OP_JOIN, OP_POST, OP_FETCH, OP_AUDIT]
                    .into_iter()
                    .filter(|&op| is_write(op))
                    .collect::<Vec<u16>>(),
            )
            .constant("max_planned_replicas", MAX_PLANNED_REPLICAS)
            .column("arg", "attempts", "attempts the request took (1: no retry)")
            .column("detail_ns", "detail_ns", "the database transaction's time")
            .column("flags", "flags", "reply flags (not_primary, duplicate)")
            .column("service", "service", "the replica that answered")
            .reads::<server::ReplicaConfig>("server")
            .reads::<store::DbConfig>("server")
            .key("server.replica", Key::int(0, server::MAX_REPLICAS - 1).default(0))
            .key(
                "server.heartbeat_ms",
                Key::int(server::MIN_HEARTBEAT_MS, server::MAX_HEARTBEAT_MS)
                    .default(server::default_heartbeat_ms()),
            )
            .key(
                "server.failure_timeout_ms",
                Key::int(server::MIN_FAILURE_TIMEOUT_MS, server::MAX_FAILURE_TIMEOUT_MS)
                    .default(server::default_failure_timeout_ms()),
            )
            .key("server.threads", Key::int(0, server::MAX_THREADS).default(0))
            .key(
                "server.max_queue",
                Key::int(1, server::MAX_QUEUE).default(server::default_max_queue()),
            )
            .key("server.sqlite_path", Key::str())
            .key("server.postgres_url", Key::str())
            .key(
                "server.postgres_schema",
                Key::str().default(store::default_schema()),
            )
            .key(
                "server.dedup_window",
                Key::int(1, server::MAX_DEDUP_WINDOW)
                    .default(server::DEDUP_WINDOW)
                    .checked(),
            )
            .reads::<cc::ChatLoadConfig>("client")
            .key(
                "client.replicas",
                Key::list(Some(server::MAX_REPLICAS)).required(),
            )
            .key("client.clients", Key::int(1, MAX_CLIENTS).required())
            .key("client.think_ms", ms(0.0).default(0.0))
            .key("client.requests_per_client", Key::int_from(1))
            .key("client.duration_s", Key::float(0, MAX_DURATION_S).above())
            .key(
                "client.timeout_ms",
                ms(0.0).above().default(cc::default_timeout_ms()),
            )
            .key(
                "client.retries",
                Key::int(0, cc::MAX_RETRIES).default(cc::default_retries()),
            )
            .key("client.backoff_ms", ms(0.1).default(cc::default_backoff_ms()))
            .key(
                "client.max_backoff_ms",
                ms(0.0).above().default(cc::default_max_backoff_ms()),
            )
            .key("client.late_ms", ms(0.0).above().default(cc::default_late_ms()))
            .key("client.warmup_s", Key::float(0, MAX_DURATION_S).default(0.0))
            .key("client.seed", Key::int(0, u64::MAX).default(0))
            .key("client.samples_path", Key::str().required())
            .key("client.histogram_path", Key::str().required())
            .key("client.audit_path", Key::str())
            .key(
                "client.max_frame_bytes",
                Key::int_from(1).default(crate::config_defaults::max_frame_bytes()),
            )
            .key("client.driver", Key::object())
            .reads::<cc::ChatDriver>("driver")
            .key(
                "driver.mix",
                Key::one_of(&["login_logout", "session"]).default(cc::Mix::LoginLogout),
            )
            .key(
                "driver.reply_bytes",
                Key::int(4, codec::MAX_REPLY_BYTES).default(cc::default_reply_bytes()),
            )
            .key(
                "driver.rooms",
                Key::int(1, cc::MAX_ROOMS).default(cc::default_rooms()),
            )
            .key(
                "driver.message_bytes",
                Key::int(0, codec::MAX_TEXT_BYTES).default(cc::default_message_bytes()),
            )
            .key("driver.client_prefix", Key::str().default(cc::default_prefix()))
    },
};

/// Operation codes (request header `op`).
pub const OP_LOGIN: u16 = 1;
pub const OP_LOGOUT: u16 = 2;
pub const OP_JOIN: u16 = 3;
pub const OP_POST: u16 = 4;
pub const OP_FETCH: u16 = 5;
/// How many times the database applied each write of one client (for the failover check).
pub const OP_AUDIT: u16 = 6;

/// Reply flag: this replica is not the primary; the body is the primary's index (u32,
/// `u32::MAX` when unknown). Sent with status `ServerError`.
pub const FLAG_NOT_PRIMARY: u16 = 1;
/// Reply flag: a retried request already applied; the reply is the stored result.
pub const FLAG_DUPLICATE: u16 = 2;

/// `ack` of a reply: done, or refused by the service's rules (wrong password, not logged
/// in, not a member of the room).
pub const ACK_DONE: u32 = 1;
pub const ACK_REFUSED: u32 = 0;

/// Writes (deduplicated and audited); fetch and audit only read.
pub fn is_write(op: u16) -> bool {
    matches!(op, OP_LOGIN | OP_LOGOUT | OP_JOIN | OP_POST)
}
