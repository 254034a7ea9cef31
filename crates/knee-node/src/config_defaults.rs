//! Defaults shared by every node config (serde `default = "..."` paths).

/// Loopback and an ephemeral port: a node listens elsewhere only when asked to.
pub fn listen() -> String {
    "127.0.0.1:0".into()
}

pub fn max_frame_bytes() -> usize {
    crate::wire::DEFAULT_MAX_FRAME_BYTES
}

/// Connections a server accepts at once; more are refused (a bound on threads and memory).
pub fn max_connections() -> usize {
    1024
}
