//! One chat replica: the service the generic server runs. A backup answers every request
//! with "not primary" and the primary's index; the primary runs the request in one database
//! transaction and reports the transaction's time as the reply's `detail_ns`.

use std::sync::Arc;

use serde::Deserialize;

use super::codec::Request;
use super::replica::{self, View};
use super::store::{DbConfig, StorePool};
use super::{ops, FLAG_DUPLICATE, FLAG_NOT_PRIMARY};
use crate::clock;
use crate::serve::{Handler, Outcome};
use crate::systems::ServerParts;
use crate::wire::{RequestHeader, WireStatus};

fn default_heartbeat_ms() -> u64 {
    100
}
fn default_failure_timeout_ms() -> u64 {
    500
}
fn default_max_queue() -> usize {
    10_000
}
fn default_schema() -> String {
    "knee_chat".into()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatServerConfig {
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
    #[serde(default)]
    pub sqlite_path: Option<String>,
    #[serde(default)]
    pub postgres_url: Option<String>,
    #[serde(default = "default_schema")]
    pub postgres_schema: String,
}

pub fn build(cfg: ChatServerConfig) -> Result<ServerParts, String> {
    let db = DbConfig {
        sqlite_path: cfg.sqlite_path,
        postgres_url: cfg.postgres_url,
        postgres_schema: cfg.postgres_schema,
    };
    let view = replica::start(cfg.replica, cfg.heartbeat_ms, cfg.failure_timeout_ms, &db)?;
    Ok(ServerParts {
        handler: Arc::new(Replica {
            view,
            pool: StorePool::new(db),
        }),
        threads: cfg.threads,
        max_queue: cfg.max_queue,
    })
}

struct Replica {
    view: Arc<View>,
    pool: StorePool,
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
            .transaction(|tx| ops::apply(tx, &req, header.request_id, self.view.me));
        let db_ns = clock::now_ns() - start_ns;
        match result {
            Ok((body, duplicate)) => {
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
            Err(e) => {
                crate::stdio::log(&format!("request {}: database: {e}", header.request_id));
                reply.clear();
                reply.extend_from_slice(format!("database: {e}").as_bytes());
                server_error(0, db_ns)
            }
        }
    }
}
