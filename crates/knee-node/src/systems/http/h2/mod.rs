//! HTTP/2 for the http target (`driver.protocol` h2, h2c, or auto over TLS) and for any
//! system built on it (gRPC): the `h2` crate (hyperium/h2: framing, HPACK, flow control)
//! driven from knee's own single-threaded ppoll loop, with no async runtime (`docs/http2.md`).
//!
//! - `io.rs`: tokio's AsyncRead/AsyncWrite over a connection's non-blocking `Transport`;
//! - `wake.rs`: one waker per connection, a flag the engine polls the connection again on;
//! - `conn.rs`: one connection (TCP, TLS with ALPN, the h2 handshake, the server's SETTINGS);
//! - `stream.rs`: one request's stream (its body as the window allows, the response's head,
//!   data and trailers; every failure a reason);
//! - `pool.rs`: the connections made before the start, and the ALPN verdict;
//! - `engine.rs`: the open and closed loops, the held FIFO, streams counted per connection.
//!
//! # The API another system uses (gRPC)
//!
//! ```ignore
//! let table = H2Table::new(vec![(1.0, vec![H2Request { method, path, headers, body }])])?;
//! let pool = H2Pool::open(&setup)?.ok_or("the server chose HTTP/1.1")?;   // before the start
//! let done: HttpDone = run_h2(pool, &load, table, &judge, ctx);            // in Role::run
//! ```
//!
//! - [`H2Request`]: method, path (and query), extra headers, body ([`Bytes`]); a table of
//!   entries, each an `op` with a weight and one or more requests sent in turn ([`H2Table`]).
//! - [`Judge`]: the system's verdict on a whole response: its head (status, headers), its
//!   body's byte count (the body is counted, never kept) and its trailers. It returns a
//!   [`Verdict`]: ok or error, the sample's `flags` and `arg` (reason), the server time.
//! - [`H2Setup`]: where to connect, TLS (ALPN offers `h2`, or `h2` and `http/1.1` when the
//!   caller may fall back), how many connections, and [`H2Options`] (windows, a cap on
//!   streams, header and body bounds).
//! - [`run_h2`] records one sample per scheduled request in `ctx.recorder` (`queue_ns` the
//!   wait for its connection to be made, `service_ns` the held wait for a free stream or
//!   window, `client` the connection) and returns the `done` fields (`HttpDone`, protocol "h2";
//!   the caller sets `streams_limit_total`).
//! - The FIFO of held requests (with the streams in flight) is bounded by
//!   `ctx.bounds.max_in_flight`: the role's `plan` sets it to `load.max_outstanding` for an
//!   open loop, as http's does (`client.rs`).
//! - [`Tls`] (`Tls::with(insecure, ca_file, resume, host, alpn)`): TLS for `H2Setup`, ALPN
//!   `[b"h2"]` to require h2.
//! - The engine's own failures (connects, timeouts, GOAWAY, RST_STREAM, refusals, protocol
//!   errors, `stopped`, `max_outstanding`) are recorded with http's [`Reason`] codes in
//!   `arg`: a system on this engine declares those args (1..=22) in its contract, and
//!   numbers its own verdict's reasons after them.

mod conn;
mod engine;
pub mod io;
mod pool;
mod stream;
pub mod wake;

use std::net::SocketAddr;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method};

pub(crate) use super::response::Reason;
pub(crate) use super::tls::Tls;
use crate::rng::Rng;

pub(crate) use engine::run_h2;
pub(crate) use pool::H2Pool;

/// Largest receive windows a config may ask for: HTTP/2's own limit (2^31 - 1).
pub const MAX_WINDOW_BYTES: u32 = (1 << 31) - 1;
/// Default receive windows: large, so a response's body is never held up by knee's own
/// window (the body is counted as it arrives and its capacity released at once).
pub const DEFAULT_STREAM_WINDOW_BYTES: u32 = 16 << 20;
pub const DEFAULT_CONNECTION_WINDOW_BYTES: u32 = 64 << 20;
/// The largest frame knee accepts: HTTP/2's default (a bound on what one frame buffers).
pub const MAX_FRAME_BYTES: u32 = 16 << 10;
/// Largest client cap on streams per connection (`driver.max_streams`).
pub const MAX_STREAMS: u32 = 1 << 16;

/// One request of a table: sent as its HEADERS (pseudo-headers from `method`, `path`, the
/// setup's scheme and authority, then `headers`) and its body in DATA frames.
#[derive(Clone, Debug)]
pub(crate) struct H2Request {
    pub method: Method,
    /// Path and query.
    pub path: String,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub body: Bytes,
}

/// The requests an engine sends: entries by weight (an entry is a sample `op`), each with
/// one request or several sent in turn.
pub(crate) struct H2Table {
    entries: Vec<Vec<H2Request>>,
    cumulative: Vec<f64>,
    cursors: Vec<usize>,
}

impl H2Table {
    /// Entries as (weight > 0, their requests, at least one); at most u16::MAX entries.
    pub fn new(entries: Vec<(f64, Vec<H2Request>)>) -> Result<H2Table, String> {
        if entries.is_empty() || entries.len() > u16::MAX as usize {
            return Err("the request table needs 1..=65535 entries".into());
        }
        let (mut cumulative, mut sum, mut out) = (Vec::new(), 0.0, Vec::new());
        for (i, (weight, requests)) in entries.into_iter().enumerate() {
            if !(weight.is_finite() && weight > 0.0) || requests.is_empty() {
                return Err(format!("request entry {i}: a weight > 0 and a request"));
            }
            sum += weight;
            cumulative.push(sum);
            out.push(requests);
        }
        Ok(H2Table {
            cursors: vec![0; out.len()],
            entries: out,
            cumulative,
        })
    }

    /// The next request by weight: its entry (`op`) and line.
    pub fn pick(&mut self, rng: &mut Rng) -> (u16, u32) {
        let i = if self.entries.len() == 1 {
            0
        } else {
            let x = rng.uniform() * self.cumulative[self.cumulative.len() - 1];
            self.cumulative
                .partition_point(|&c| c <= x)
                .min(self.entries.len() - 1)
        };
        let line = self.cursors[i] % self.entries[i].len();
        self.cursors[i] = line + 1;
        (i as u16, line as u32)
    }
}

/// A system's verdict on one whole response.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Verdict {
    pub ok: bool,
    /// The sample's `flags` (http: the status code; gRPC: its own).
    pub flags: u16,
    /// The sample's `arg`: why it is an error (0: none).
    pub reason: u32,
    /// The server's own time and its detail, when the response said (None: unknown).
    pub server: Option<(u64, u64)>,
}

/// How a system judges a response: its head (status and headers), its body's byte count,
/// and its trailers (None: the response had none).
pub(crate) trait Judge {
    fn judge(&self, head: &http::response::Parts, body_bytes: u64, trailers: Option<&HeaderMap>) -> Verdict;

    /// As `judge`, with the body's first bytes (at most `stream::BODY_HEAD_BYTES`): what
    /// the engine calls; a judge that reads its body's framing (gRPC's message prefix)
    /// overrides it.
    fn judge_body(
        &self,
        head: &http::response::Parts,
        _body_head: &[u8],
        body_bytes: u64,
        trailers: Option<&HeaderMap>,
    ) -> Verdict {
        self.judge(head, body_bytes, trailers)
    }

    /// The `flags` of a sample that failed (its `arg` the reason), where `flags` is what the
    /// engine knows (the HTTP status when a head came, else 0): http keeps it; gRPC gives
    /// the status code a gRPC client library would. Called on every sample with a reason as
    /// it is recorded (the judge's own verdicts included: it keeps its own).
    fn failure_flags(&self, s: &crate::load::recorder::Sample) -> u16 {
        s.flags
    }
}

/// The engine's own bounds and windows.
#[derive(Clone, Copy, Debug)]
pub(crate) struct H2Options {
    /// Receive window per stream and per connection (SETTINGS_INITIAL_WINDOW_SIZE and the
    /// connection's WINDOW_UPDATE), released as the body is read.
    pub stream_window_bytes: u32,
    pub connection_window_bytes: u32,
    /// Streams per connection at most, besides the server's SETTINGS_MAX_CONCURRENT_STREAMS.
    pub max_streams: Option<u32>,
    /// A response's header list (SETTINGS_MAX_HEADER_LIST_SIZE) and body, at most.
    pub max_header_bytes: u32,
    pub max_body_bytes: u64,
}

impl Default for H2Options {
    fn default() -> Self {
        H2Options {
            stream_window_bytes: DEFAULT_STREAM_WINDOW_BYTES,
            connection_window_bytes: DEFAULT_CONNECTION_WINDOW_BYTES,
            max_streams: None,
            max_header_bytes: 64 << 10,
            max_body_bytes: 64 << 20,
        }
    }
}

/// Where and how an engine connects.
pub(crate) struct H2Setup {
    pub addr: SocketAddr,
    /// `host:port`: the requests' `:authority`.
    pub authority: String,
    /// TLS (https: ALPN as its config offers), or None: h2c by prior knowledge.
    pub tls: Option<Tls>,
    /// The server may choose HTTP/1.1 by ALPN: `H2Pool::open` then says so (Ok(None))
    /// instead of failing.
    pub may_fall_back: bool,
    pub connections: usize,
    /// The request timeout (ms): connects wait at most this, and 5 s.
    pub timeout_ms: f64,
    pub options: H2Options,
}
