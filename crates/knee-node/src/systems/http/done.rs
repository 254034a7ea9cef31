//! The `done` line's own fields of the roles on HTTP (http over HTTP/1.1 or HTTP/2, and
//! gRPC): one struct that the HTTP/2 engine fills and the roles return.

use serde::Serialize;

/// The role's own fields of its `done` line (HTTP/2's counted by `h2::run_h2`).
#[derive(Serialize, Default, Debug, Clone, Copy)]
pub struct HttpDone {
    /// "http/1.1" or "h2".
    pub protocol: &'static str,
    /// Connections made, the first ones included (more than `connections`: some were
    /// closed by the server, a timeout or an error, and made again).
    pub connections_opened: u64,
    /// Connects that failed: refused, timed out, or a TLS handshake that failed.
    pub connect_failures: u64,
    /// HTTP/2: the smallest SETTINGS_MAX_CONCURRENT_STREAMS the server sent (null: none,
    /// or HTTP/1.1).
    pub server_max_streams: Option<u64>,
    /// The most requests on the wire at once (HTTP/2: streams in use over all connections).
    pub max_streams_in_use: u64,
    /// HTTP/2: connections × the streams each may carry (null: no limit, or HTTP/1.1).
    pub streams_limit_total: Option<u64>,
    /// HTTP/2: connections ended by the server's GOAWAY.
    pub goaways: u64,
    /// HTTP/2: RST_STREAM frames received from the server.
    pub resets_received: u64,
    /// HTTP/2: requests refused unprocessed and sent once more (RFC 9113 section 8.7).
    pub refused_resent: u64,
}

impl HttpDone {
    /// With `streams_limit_total`: `connections` × the streams each may carry (`per_conn`:
    /// the server's limit or the client's cap, the smaller; None: neither set one).
    pub(crate) fn with_streams_per_conn(self, per_conn: Option<u64>, connections: u64) -> Self {
        Self {
            streams_limit_total: per_conn.map(|p| p * connections),
            ..self
        }
    }
}
