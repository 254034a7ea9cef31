//! The chat client role (`knee-node load chat`, run by the load harness): N closed-loop
//! clients, each with its own session and its own failover (`link.rs`), recording every
//! request with the harness's recorder. A retried request keeps its request id and its
//! intended time, so the failover gap shows in its latency. At the end the node asks the
//! primary how many times the database applied each of its writes and writes that next to
//! its samples.

mod audit;
pub mod config;
mod link;
mod session;

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

use config::ChatLoadConfig;
use link::{Link, Policy};
use session::Session;

use super::{ACK_DONE, FLAG_DUPLICATE};
use crate::events::NoExtra;
use crate::load::harness::{Bounds, ClientRole, Plan, Role, RunContext};
use crate::load::recorder::{Sample, Status};
use crate::wire::{request_frame_bytes, WireStatus};
use crate::{clock, stdio};

/// The chat client role: its config and the replicas' addresses.
pub struct ChatClient {
    cfg: ChatLoadConfig,
    replicas: Vec<SocketAddr>,
}

/// chat's own fields of the `done` line.
#[derive(Serialize, Debug)]
pub struct ChatDone {
    /// Attempts after the first, over all requests (failovers, timeouts, redirects).
    pub retries: u64,
    /// Rows of the audit file, or null when the audit failed...
    pub audit_rows: Option<usize>,
    /// ...and then why (null when it worked).
    pub audit_error: Option<String>,
}

pub fn role(config: &serde_json::Value) -> Result<Box<dyn ClientRole>, String> {
    let cfg: ChatLoadConfig =
        serde_json::from_value(config.clone()).map_err(|e| format!("chat load config: {e}"))?;
    cfg.check()?;
    let replicas = cfg
        .replicas
        .iter()
        .map(|a| {
            a.to_socket_addrs()
                .map_err(|e| format!("replica {a}: {e}"))?
                .next()
                .ok_or_else(|| format!("replica {a}: no address"))
        })
        .collect::<Result<Vec<SocketAddr>, String>>()?;
    Ok(Box::new(ChatClient { cfg, replicas }))
}

impl Role for ChatClient {
    type Progress = NoExtra;
    type Done = ChatDone;

    /// The request count is per client (`requests_per_client`: each client's session runs
    /// its own sequence), so it stays with the clients; one request in flight per client.
    fn plan(&self) -> Plan {
        let cfg = &self.cfg;
        let bounds = Bounds {
            duration_s: cfg.duration_s,
            ..Bounds::default()
        };
        Plan::new(
            &cfg.samples_path,
            &cfg.histogram_path,
            cfg.warmup_s,
            Some(cfg.late_ms),
            bounds,
        )
    }

    fn run(&mut self, ctx: &RunContext) -> Result<ChatDone, String> {
        let (cfg, replicas) = (&self.cfg, &self.replicas);
        let retries = AtomicU64::new(0);
        std::thread::scope(|s| {
            for i in 0..cfg.clients {
                let retries = &retries;
                s.spawn(move || client_loop(i, cfg, link(cfg, replicas.clone()), ctx, retries));
            }
        });
        let audit = audit::write(cfg, link(cfg, replicas.clone()), ctx);
        if let Err(e) = &audit {
            stdio::log(&format!("audit: {e}"));
        }
        Ok(ChatDone {
            retries: retries.load(Ordering::Relaxed),
            audit_rows: audit.as_ref().ok().copied(),
            audit_error: audit.err(),
        })
    }
}

fn link(cfg: &ChatLoadConfig, replicas: Vec<SocketAddr>) -> Link {
    Link::new(
        replicas,
        Policy {
            timeout_ns: (cfg.timeout_ms * 1e6) as u64,
            retries: cfg.retries,
            backoff_ns: (cfg.backoff_ms * 1e6) as u64,
            max_backoff_ns: (cfg.max_backoff_ms * 1e6) as u64,
            max_frame_bytes: cfg.max_frame_bytes,
        },
    )
}

fn client_loop(index: usize, cfg: &ChatLoadConfig, mut link: Link, ctx: &RunContext, retries: &AtomicU64) {
    let mut session = Session::new(&cfg.driver(), index);
    let think_ns = (cfg.think_ms * 1e6) as u64;
    let mut body = Vec::new();
    let mut next_ns = clock::now_ns();
    for seq in 1.. {
        if cfg.requests_per_client.is_some_and(|n| seq > n)
            || ctx.past_end(next_ns)
            || !clock::wait_until_unless_stopped(next_ns)
        {
            return;
        }
        let req = session.next();
        let op = req.code();
        body.clear();
        req.encode(&mut body);
        // Ids are unique per client (the database's dedup key is client name + id).
        let request_id = seq;
        let mut first = true;
        let outcome = link.call(ctx, request_id, op, &body, |sent_ns, bytes| {
            // A retried request is sent once, late or not by its first attempt.
            if first {
                ctx.count_send(next_ns, sent_ns, bytes as u64);
                first = false;
            } else {
                ctx.count_resend(sent_ns, bytes as u64);
            }
        });
        retries.fetch_add(outcome.attempts.saturating_sub(1) as u64, Ordering::Relaxed);
        let mut sample = Sample {
            request_id,
            intended_ns: next_ns,
            sent_ns: outcome.sent_ns,
            received_ns: outcome.received_ns,
            // A request no attempt could write was never sent: no bytes.
            bytes_out: if outcome.sent_ns == 0 {
                0
            } else {
                request_frame_bytes(body.len()) as u64
            },
            client: index as u32,
            arg: outcome.attempts,
            op,
            service: outcome.replica as u8,
            ..Default::default()
        };
        sample.status = match outcome.reply {
            Ok((h, reply, frame_bytes)) => {
                sample.server_ns = h.server_ns;
                sample.queue_ns = h.queue_ns;
                sample.service_ns = h.service_ns;
                sample.detail_ns = h.detail_ns;
                sample.flags = h.flags;
                sample.bytes_in = frame_bytes as u64;
                let acked = reply.get(..4) == Some(&ACK_DONE.to_le_bytes()[..]);
                if h.status == WireStatus::Ok as u16 && acked {
                    session.observe(op, &reply);
                    Status::Ok
                } else {
                    if h.flags & FLAG_DUPLICATE == 0 {
                        let why = String::from_utf8_lossy(&reply[..reply.len().min(200)]).into_owned();
                        stdio::log(&format!(
                            "client {index} request {request_id}: status {} {why}",
                            h.status
                        ));
                    }
                    Status::Error
                }
            }
            Err(status) => status,
        } as u8;
        ctx.recorder.record(&sample);
        if ctx.stopping() {
            return;
        }
        next_ns = clock::now_ns() + think_ns;
    }
}
