//! Every knee server runs here. A framed-TCP request/response system is a [`Handler`] run by
//! [`run`]; a server with its own transport (stream's UDP service) uses the same
//! [`lifecycle`]: the `ready` line, a `stats` line every second, and one stop path.
//!
//! In [`run`], one thread per connection reads frames. A request is either served on that
//! thread (`threads = 0`, lowest latency, used by echo and share) or put on one FIFO queue
//! shared by all connections and served by a pool of `threads` workers (`threads = 1` serves
//! strictly one request at a time in arrival order). The server measures each request's
//! residence time and its parts, and returns them in the reply header. A reply may carry a
//! file after its frame ([`FileTail`], share's obtain), sent with `sendfile(2)`.

mod config;
mod connection;
pub mod lifecycle;
mod limits;
mod pool;
mod reply;
mod sendfile;
mod stats;

use std::fs::File;
use std::net::TcpListener;
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use serde::Serialize;

use crate::clock;
use crate::events::NoExtra;
use crate::wire::{arrival, RequestHeader, WireStatus};

pub use config::{ServeConfig, ServeOptions};
pub use lifecycle::{Lifecycle, Stop};
pub use stats::ServerStats;

/// Connections accepted per wake-up of the accept loop at most.
const ACCEPT_BATCH: usize = 1024;

/// Gives an accepted connection its thread, or closes it at once (dropped) when
/// `max_connections` are open or no thread can be had: the client sees its connection end,
/// not a hang, and the server goes on.
fn admit<E: StatsExtra>(stream: std::net::TcpStream, ctx: &Arc<connection::Context<E>>, cfg: &ServeConfig) {
    let stats = &ctx.stats;
    let open = stats.connections.load(Ordering::Relaxed) as usize;
    if open >= cfg.max_connections {
        stats.refused.fetch_add(1, Ordering::Relaxed);
        limits::REFUSED.log(|| {
            format!(
                "refusing a connection: {open} open, the limit is max_connections = {}",
                cfg.max_connections
            )
        });
        return;
    }
    stats.connections.fetch_add(1, Ordering::Relaxed);
    let conn_ctx = ctx.clone();
    let spawned = std::thread::Builder::new()
        .name("conn".into())
        .spawn(move || connection::serve(stream, conn_ctx));
    if let Err(e) = spawned {
        stats.connections.fetch_sub(1, Ordering::Relaxed);
        stats.refused.fetch_add(1, Ordering::Relaxed);
        limits::REFUSED.log(|| format!("refusing a connection: no thread for it: {e}"));
    }
}

/// What a handler tells the server about one request.
pub struct Outcome {
    pub status: WireStatus,
    /// System-specific reply flags (matrix: bit 0 = served from the cache).
    pub flags: u16,
    /// A system-specific part of the service time, e.g. the database's share.
    pub detail_ns: u64,
    /// Bytes that follow the reply frame on the connection, straight from a file.
    pub tail: Option<FileTail>,
}

/// A file's first `size_bytes`, sent right after the reply frame with `sendfile(2)` and
/// counted in `bytes_tx`. The reply body tells the client how many bytes follow; if fewer
/// can be sent, the connection is closed, since the client would misread what comes next.
pub struct FileTail {
    pub file: File,
    pub size_bytes: u64,
}

impl Outcome {
    pub fn ok() -> Self {
        Outcome::with_status(WireStatus::Ok)
    }

    pub fn with_status(status: WireStatus) -> Self {
        Outcome {
            status,
            flags: 0,
            detail_ns: 0,
            tail: None,
        }
    }

    /// An operation this system does not have; `reply` receives the reason.
    pub fn unknown_op(reply: &mut Vec<u8>, system: &str, op: u16) -> Self {
        Outcome::refused(
            reply,
            WireStatus::UnknownOp,
            &format!("{system} has no operation {op}"),
        )
    }

    /// A refused request; `reply` receives the reason for the client.
    pub fn bad_request(reply: &mut Vec<u8>, reason: &str) -> Self {
        Outcome::refused(reply, WireStatus::BadRequest, reason)
    }

    /// A request answered with `status` and, as its body, `reason`.
    pub fn refused(reply: &mut Vec<u8>, status: WireStatus, reason: &str) -> Self {
        reply.clear();
        reply.extend_from_slice(reason.as_bytes());
        Outcome::with_status(status)
    }
}

/// A system's own fields of the `stats` line, flattened into it (`NoExtra`: none).
pub trait StatsExtra: Serialize + Default + 'static {}
impl<T: Serialize + Default + 'static> StatsExtra for T {}

/// One system's server logic. Called concurrently from connection or worker threads.
///
/// `E` is the system's fields of the `stats` line: a type parameter rather than an associated
/// type so that it can default to none.
pub trait Handler<E: StatsExtra = NoExtra>: Send + Sync + 'static {
    /// Serves one request: writes the reply body into `reply` (empty on entry).
    fn handle(&self, op: u16, body: &[u8], reply: &mut Vec<u8>) -> Outcome;

    /// Serves one request knowing its header; systems that need the request id (chat's
    /// deduplication) override this, the others keep `handle`.
    fn handle_request(&self, header: &RequestHeader, body: &[u8], reply: &mut Vec<u8>) -> Outcome {
        self.handle(header.op, body, reply)
    }

    /// The largest request frame this handler takes; the node's `max_frame_bytes` applies
    /// below it (share: its control frames are small, its files are not frames).
    fn max_frame_bytes(&self) -> usize {
        usize::MAX
    }

    /// Called once right after `ready`, for work that must not delay it (share generates
    /// its files). A failure on a thread of its own ends the server through `stop.fail`.
    fn started(&self, _stop: &Stop) {}

    /// This system's fields of the next `stats` line.
    fn stats_extra(&self) -> E {
        E::default()
    }
}

/// Serves `listener` until SIGTERM/SIGINT (then `Ok`) or a failure reported through
/// [`Stop::fail`] (then its reason). Prints `ready`, then a `stats` line every second.
pub fn run<E: StatsExtra>(
    listener: TcpListener,
    handler: Arc<dyn Handler<E>>,
    cfg: ServeConfig,
) -> Result<(), String> {
    // Before `ready`: accepted sockets inherit it, and the kernel is stamping by then.
    arrival::enable_rx_timestamps(&listener);
    // Accepts wait in ppoll, so that the loop also keeps the stats clock and sees a stop.
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    limits::raise_open_files_limit();
    limits::deepen_backlog(&listener);
    let stats = Arc::new(ServerStats::default());
    let pool = (cfg.threads > 0)
        .then(|| pool::Pool::start(cfg.threads, cfg.max_queue, handler.clone(), stats.clone()));
    let ctx = Arc::new(connection::Context {
        handler: handler.clone(),
        pool: pool.clone(),
        stats: stats.clone(),
        max_frame_bytes: cfg.max_frame_bytes.min(handler.max_frame_bytes()),
        read_timeout: cfg.read_timeout,
        write_timeout: cfg.write_timeout,
    });
    let stop = Stop::default();
    let mut life = Lifecycle::ready(addr, stop.clone());
    handler.started(&stop);
    loop {
        let now_ns = clock::now_ns();
        let queue_len = || pool.as_ref().map_or(0, |p| p.len());
        if let Some(end) = life.tick(now_ns, || stats.line(queue_len(), handler.stats_extra())) {
            limits::flush_notices(true);
            return end;
        }
        limits::flush_notices(false);
        if !life.wait_readable(listener.as_raw_fd(), now_ns, u64::MAX) {
            continue;
        }
        // Take every connection waiting (up to a batch, so that ticks still come): a flood
        // is refused at the rate it arrives, not one connection per wake-up.
        for _ in 0..ACCEPT_BATCH {
            match listener.accept() {
                Ok((stream, _)) => admit(stream, &ctx, &cfg),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(e) => {
                    limits::ACCEPT_FAILED.log(|| format!("accept failed: {e}"));
                    break;
                }
            }
        }
    }
}
