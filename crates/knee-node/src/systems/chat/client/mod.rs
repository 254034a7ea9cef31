//! The chat client role (`knee-node load chat`): N closed-loop clients, each with its own
//! session and its own failover (`link.rs`), recording every request with the shared
//! recorder. A retried request keeps its request id and its intended time, so the
//! failover gap shows in its latency. At the end the node asks the primary how many times
//! the database applied each of its writes and writes that next to its samples.

mod audit;
pub mod config;
mod link;
mod session;

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use config::ChatLoadConfig;
use link::{Link, Policy};
use session::Session;

use super::{ACK_DONE, FLAG_DUPLICATE};
use crate::load::recorder::{Recorder, Sample, Status};
use crate::load::Progress;
use crate::wire::{request_frame_bytes, WireStatus};
use crate::{clock, signals, stdio};

pub fn run(config: &serde_json::Value) -> Result<(), String> {
    let cfg: ChatLoadConfig =
        serde_json::from_value(config.clone()).map_err(|e| format!("chat load config: {e}"))?;
    cfg.check()?;
    clock::tighten_timer_slack();
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
    let recorder = Arc::new(
        Recorder::create(&cfg.samples_path).map_err(|e| format!("creating {}: {e}", cfg.samples_path))?,
    );
    let progress = Progress::spawn(&recorder, None);
    let start = progress.start(&recorder, cfg.warmup_s);
    let end_ns = cfg.duration_s.map(|d| start + (d * 1e9) as u64);
    let retries = Arc::new(AtomicU64::new(0));
    let last_sent = Arc::new(AtomicU64::new(0));
    let clients: Vec<_> = (0..cfg.clients)
        .map(|i| {
            let (cfg, replicas, recorder) = (cfg.clone(), replicas.clone(), recorder.clone());
            let (retries, last_sent) = (retries.clone(), last_sent.clone());
            std::thread::spawn(move || {
                client_loop(
                    i,
                    &cfg,
                    link(&cfg, replicas),
                    &recorder,
                    end_ns,
                    &retries,
                    &last_sent,
                )
            })
        })
        .collect();
    for c in clients {
        let _ = c.join();
    }
    progress.stop();
    let latency = recorder.finish(&cfg.histogram_path)?;
    let audit = audit::write(&cfg, link(&cfg, replicas));
    if let Err(e) = &audit {
        stdio::log(&format!("audit: {e}"));
    }
    let c = &recorder.counters;
    let get = |x: &AtomicU64| x.load(Ordering::Relaxed);
    let send_s = get(&last_sent).saturating_sub(start) as f64 / 1e9;
    stdio::emit(&serde_json::json!({
        "event": "done",
        "sent": get(&c.sent), "completed": c.completed(), "ok": get(&c.ok),
        "timeouts": get(&c.timeouts), "drops": get(&c.drops), "errors": get(&c.errors),
        "late": 0, "bytes_tx": get(&c.bytes_tx), "bytes_rx": get(&c.bytes_rx),
        "retries": get(&retries),
        "audit_rows": audit.as_ref().ok(), "audit_error": audit.as_ref().err(),
        "elapsed_s": (clock::now_ns() - start) as f64 / 1e9,
        "achieved_rate_per_s": if send_s > 0.0 { get(&c.sent) as f64 / send_s } else { 0.0 },
        "target_rate_per_s": null,
        "latency": latency,
    }));
    Ok(())
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

fn client_loop(
    index: usize,
    cfg: &ChatLoadConfig,
    mut link: Link,
    recorder: &Recorder,
    end_ns: Option<u64>,
    retries: &AtomicU64,
    last_sent: &AtomicU64,
) {
    let mut session = Session::new(&cfg.driver(), index);
    let counters = &recorder.counters;
    let think_ns = (cfg.think_ms * 1e6) as u64;
    let mut body = Vec::new();
    let mut next_ns = clock::now_ns();
    for seq in 1.. {
        if cfg.requests_per_client.is_some_and(|n| seq > n)
            || end_ns.is_some_and(|end| next_ns >= end)
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
        let outcome = link.call(request_id, op, &body, |bytes| {
            if first {
                counters.sent.fetch_add(1, Ordering::Relaxed);
                first = false;
            }
            counters.bytes_tx.fetch_add(bytes as u64, Ordering::Relaxed);
        });
        last_sent.fetch_max(outcome.sent_ns, Ordering::Relaxed);
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
        recorder.record(&sample);
        if signals::stop_requested() {
            return;
        }
        next_ns = clock::now_ns() + think_ns;
    }
}
