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

/// Longest a request frame may take to arrive once its first byte has: a slow client (one
/// byte a second) cannot hold a connection's thread for ever. Generous enough for a 16 MiB
/// frame over a 10 Mbit/s emulated link.
pub fn read_timeout_ms() -> u64 {
    30_000
}

/// Longest a reply write may make no progress (the client does not read): the connection is
/// then closed, so that its thread and buffers are freed.
pub fn write_timeout_ms() -> u64 {
    30_000
}
