//! A generic request/response TCP server: every system's server is a [`Service`] run here.
//!
//! One thread per connection reads frames. A request is either served on that thread
//! (`threads = 0`, lowest latency, used by echo) or put on one FIFO queue shared by all
//! connections and served by a pool of `threads` workers (`threads = 1` serves strictly one
//! request at a time in arrival order). The server measures each request's residence time
//! and its parts, and returns them in the reply header.

mod connection;
mod pool;
mod reply;
mod stats;

use std::net::TcpListener;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::stdio;
use crate::wire::{RequestHeader, WireStatus};

pub use stats::ServerStats;

/// What a handler tells the server about one request.
pub struct Outcome {
    pub status: WireStatus,
    /// System-specific reply flags (matrix: bit 0 = served from the cache).
    pub flags: u16,
    /// A system-specific part of the service time, e.g. the database's share.
    pub detail_ns: u64,
}

impl Outcome {
    pub fn ok() -> Self {
        Outcome {
            status: WireStatus::Ok,
            flags: 0,
            detail_ns: 0,
        }
    }

    /// An operation this system does not have; `reply` receives the reason.
    pub fn unknown_op(reply: &mut Vec<u8>, system: &str, op: u16) -> Self {
        reply.clear();
        reply.extend_from_slice(format!("{system} has no operation {op}").as_bytes());
        Outcome {
            status: WireStatus::UnknownOp,
            flags: 0,
            detail_ns: 0,
        }
    }

    /// A refused request; `reply` receives the reason for the client.
    pub fn bad_request(reply: &mut Vec<u8>, reason: &str) -> Self {
        reply.clear();
        reply.extend_from_slice(reason.as_bytes());
        Outcome {
            status: WireStatus::BadRequest,
            flags: 0,
            detail_ns: 0,
        }
    }
}

/// One system's server logic. Called concurrently from connection or worker threads.
pub trait Service: Send + Sync + 'static {
    /// Serves one request: writes the reply body into `reply` (empty on entry).
    fn handle(&self, op: u16, body: &[u8], reply: &mut Vec<u8>) -> Outcome;

    /// Serves one request knowing its header; systems that need the request id (chat's
    /// deduplication) override this, the others keep `handle`.
    fn handle_request(&self, header: &RequestHeader, body: &[u8], reply: &mut Vec<u8>) -> Outcome {
        self.handle(header.op, body, reply)
    }
}

/// Limits and execution mode of a server.
#[derive(Clone, Debug)]
pub struct ServeConfig {
    /// 0: serve on the connection's thread; N: a pool of N workers behind one FIFO queue.
    pub threads: usize,
    /// Requests waiting for a worker beyond this are answered `Overloaded` at once.
    pub max_queue: usize,
    pub max_frame_bytes: usize,
    /// Connections beyond this are closed on accept (each costs a thread).
    pub max_connections: usize,
}

/// Accepts connections until the process is stopped. Prints a `stats` line every second.
pub fn run(listener: TcpListener, service: Arc<dyn Service>, cfg: ServeConfig) -> std::io::Result<()> {
    let stats = Arc::new(ServerStats::default());
    let pool = (cfg.threads > 0)
        .then(|| pool::Pool::start(cfg.threads, cfg.max_queue, service.clone(), stats.clone()));
    stats::spawn_reporter(stats.clone(), pool.clone());
    let ctx = Arc::new(connection::Context {
        service,
        pool,
        stats: stats.clone(),
        max_frame_bytes: cfg.max_frame_bytes,
    });
    for stream in listener.incoming() {
        let stream = match stream {
            Ok(s) => s,
            Err(e) => {
                stdio::log(&format!("accept failed: {e}"));
                continue;
            }
        };
        let open = stats.connections.load(Ordering::Relaxed) as usize;
        if open >= cfg.max_connections {
            stdio::log(&format!(
                "refusing a connection: {open} open, the limit is {}",
                cfg.max_connections
            ));
            continue;
        }
        stats.connections.fetch_add(1, Ordering::Relaxed);
        let ctx = ctx.clone();
        std::thread::Builder::new()
            .name("conn".into())
            .spawn(move || connection::serve(stream, ctx))?;
    }
    Ok(())
}
