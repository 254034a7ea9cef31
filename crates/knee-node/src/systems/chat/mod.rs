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
use crate::contract::SystemContract;

pub const SYSTEM: System = System {
    name: "chat",
    serve: |opts| framed(opts, server::build(parse(&opts.server, "server")?)?),
    client: client::role,
    contract: || {
        SystemContract::new()
            .op("login", OP_LOGIN)
            .op("logout", OP_LOGOUT)
            .op("join", OP_JOIN)
            .op("post", OP_POST)
            .op("fetch", OP_FETCH)
            .op("audit", OP_AUDIT)
            .flag("not_primary", FLAG_NOT_PRIMARY)
            .flag("duplicate", FLAG_DUPLICATE)
            .max("driver.reply_bytes", codec::MAX_REPLY_BYTES)
            .max("driver.message_bytes", codec::MAX_TEXT_BYTES as f64)
            .max("driver.retries", client::config::MAX_RETRIES)
            .with_default("driver.retries", client::config::default_retries())
            .with_default("driver.reply_bytes", client::config::default_reply_bytes())
            .with_default("driver.rooms", client::config::default_rooms())
            .with_default("driver.message_bytes", client::config::default_message_bytes())
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
