//! One chat replica: the service the generic server runs. A backup answers every request
//! with "not primary" and the primary's index; the primary runs the request in one database
//! transaction and reports the transaction's time as the reply's `detail_ns`.

use std::sync::Arc;

use serde::Deserialize;

use super::codec::Request;
use super::ops::{self, Applied};
use super::replica::{self, View};
use super::store::{DbConfig, StorePool};
use super::{FLAG_DUPLICATE, FLAG_NOT_PRIMARY};
use crate::clock;
use crate::serve::{Handler, Outcome};
use crate::systems::ServerParts;
use crate::wire::{RequestHeader, WireStatus};

pub(crate) fn default_heartbeat_ms() -> u64 {
    100
}
pub(crate) fn default_failure_timeout_ms() -> u64 {
    500
}
pub(crate) fn default_max_queue() -> usize {
    10_000
}
fn default_dedup_window() -> u64 {
    DEDUP_WINDOW
}

/// Request ids per client whose dedup keys are kept (docs/chat.md, "Exactly-once writes").
/// A knee client retries only its current request, so any window >= 1 keeps its retries
/// exactly-once; 1024 also answers a duplicate delayed by up to 1023 newer requests (a
/// frozen replica's backlog) with its stored result rather than a refusal.
pub const DEDUP_WINDOW: u64 = 1024;
/// The largest window accepted: it bounds the table at this many rows per client.
pub const MAX_DEDUP_WINDOW: u64 = 1_000_000;
/// Replicas of one service (each a process, with a heartbeat to every other).
pub const MAX_REPLICAS: usize = 64;
/// Heartbeat and failure-timeout bounds: a beat faster than 5 ms is busy-waiting, a
/// timeout beyond 10 minutes never detects a failure within a point.
pub const MIN_HEARTBEAT_MS: u64 = 5;
pub const MAX_HEARTBEAT_MS: u64 = 60_000;
pub const MIN_FAILURE_TIMEOUT_MS: u64 = 10;
pub const MAX_FAILURE_TIMEOUT_MS: u64 = 600_000;
/// A pool's workers (a thread and a database connection each), and its queue.
pub const MAX_THREADS: usize = 256;
pub const MAX_QUEUE: usize = 10_000_000;

/// A replica's server section: its own keys and its database's, side by side in one
/// table. Flattened parts are not probed by `contract::serde_fields` (serde reads a
/// flattened struct as a map), so the contract reads each part on its own.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatServerConfig {
    #[serde(flatten)]
    pub node: ReplicaConfig,
    #[serde(flatten)]
    pub db: DbConfig,
}

/// The replica's own keys of its server section.
#[derive(Deserialize)]
pub struct ReplicaConfig {
    /// This replica's index; 0 is the first primary.
    #[serde(default)]
    pub replica: u32,
    #[serde(default = "default_heartbeat_ms")]
    pub heartbeat_ms: u64,
    #[serde(default = "default_failure_timeout_ms")]
    pub failure_timeout_ms: u64,
    /// 0: serve on each connection's thread (one database connection each); N: a pool.
    #[serde(default)]
    pub threads: usize,
    #[serde(default = "default_max_queue")]
    pub max_queue: usize,
    /// Dedup keys kept per client (its newest request ids); older requests are refused.
    #[serde(default = "default_dedup_window")]
    pub dedup_window: u64,
}

pub fn build(ChatServerConfig { node: cfg, db }: ChatServerConfig) -> Result<ServerParts, String> {
    if !(1..=MAX_DEDUP_WINDOW).contains(&cfg.dedup_window) {
        return Err(format!("dedup_window must be 1..={MAX_DEDUP_WINDOW}"));
    }
    let view = replica::start(cfg.replica, cfg.heartbeat_ms, cfg.failure_timeout_ms, &db)?;
    Ok(ServerParts {
        handler: Arc::new(Replica {
            view,
            pool: StorePool::new(db),
            dedup_window: cfg.dedup_window,
        }),
        threads: cfg.threads,
        max_queue: cfg.max_queue,
    })
}

struct Replica {
    view: Arc<View>,
    pool: StorePool,
    dedup_window: u64,
}

/// A failed request: the body is the primary's index (not primary) or the reason.
fn server_error(flags: u16, detail_ns: u64) -> Outcome {
    Outcome {
        flags,
        detail_ns,
        ..Outcome::with_status(WireStatus::ServerError)
    }
}

impl Handler for Replica {
    fn handle(&self, op: u16, body: &[u8], reply: &mut Vec<u8>) -> Outcome {
        // Only reached without a header; chat needs the request id.
        self.handle_request(
            &RequestHeader {
                request_id: 0,
                op,
                flags: 0,
            },
            body,
            reply,
        )
    }

    fn handle_request(&self, header: &RequestHeader, body: &[u8], reply: &mut Vec<u8>) -> Outcome {
        let req = match Request::decode(header.op, body) {
            Ok(r) => r,
            Err(reason) if reason.starts_with("chat has no operation") => {
                return Outcome::unknown_op(reply, "chat", header.op)
            }
            Err(reason) => return Outcome::bad_request(reply, &reason),
        };
        if !self.view.is_primary() {
            reply.clear();
            reply.extend_from_slice(&self.view.primary().to_le_bytes());
            return server_error(FLAG_NOT_PRIMARY, 0);
        }
        let start_ns = clock::now_ns();
        let result = self
            .pool
            .transaction(|tx| ops::apply(tx, &req, header.request_id, self.view.me, self.dedup_window));
        let db_ns = clock::now_ns() - start_ns;
        match result {
            Ok(Applied::Stale { newest }) => {
                let reason = format!(
                    "request id {} is outside this client's dedup window (newest {newest}, \
                     window {}): not applied",
                    header.request_id, self.dedup_window
                );
                Outcome {
                    detail_ns: db_ns,
                    ..Outcome::bad_request(reply, &reason)
                }
            }
            Ok(Applied::Fresh(body)) => Replica::answered(reply, &req, body, false, db_ns),
            Ok(Applied::Duplicate(body)) => Replica::answered(reply, &req, body, true, db_ns),
            Err(e) => {
                crate::stdio::log(&format!("request {}: database: {e}", header.request_id));
                reply.clear();
                reply.extend_from_slice(format!("database: {e}").as_bytes());
                server_error(0, db_ns)
            }
        }
    }
}

impl Replica {
    /// The reply of a request applied now or before: its result, padded to `reply_bytes`.
    fn answered(reply: &mut Vec<u8>, req: &Request, body: Vec<u8>, duplicate: bool, db_ns: u64) -> Outcome {
        reply.extend_from_slice(&body);
        if reply.len() < req.reply_bytes as usize {
            reply.resize(req.reply_bytes as usize, 0);
        }
        Outcome {
            flags: if duplicate { FLAG_DUPLICATE } else { 0 },
            detail_ns: db_ns,
            ..Outcome::ok()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_server_section_reads_both_parts_and_refuses_unknown_keys() {
        let read = |v| serde_json::from_value::<ChatServerConfig>(v);
        let cfg = read(serde_json::json!({"replica": 2, "threads": 4, "postgres_url": "postgresql://x/y"}));
        let Ok(cfg) = cfg else {
            panic!("a valid server section")
        };
        assert_eq!((cfg.node.replica, cfg.node.threads), (2, 4));
        assert_eq!(cfg.node.heartbeat_ms, default_heartbeat_ms());
        assert_eq!(cfg.db.postgres_url.as_deref(), Some("postgresql://x/y"));
        assert_eq!(cfg.db.postgres_schema, "knee_chat");
        let typo = read(serde_json::json!({"replica": 0, "sqlite_pth": "a.db"}));
        assert!(typo
            .err()
            .is_some_and(|e| e.to_string().contains("unknown field `sqlite_pth`")));
        assert!(read(serde_json::json!({"replica": "one"})).is_err());
    }
}
