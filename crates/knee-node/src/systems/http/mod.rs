//! http: any HTTP/1.1 or HTTP/2 service (http:// or https://) as knee's target
//! (`docs/http.md`, `docs/http2.md`). knee-node has no HTTP
//! server of its own: `load http` drives the service at `load.target`, and `serve http`
//! runs an nginx for a point (`nginx.rs`), for the experiment and the tests.
//!
//! - `config.rs`: the role's config (the request table, Server-Timing keys, bounds);
//! - `requests.rs`: the table, built into wire bytes once;
//! - `response.rs`: reading a response (framing on `httparse`), every failure a reason;
//! - `timing.rs`: the Server-Timing header, the server time and its detail;
//! - `transport.rs`: a non-blocking socket's byte stream, plain or TLS; `tls.rs`: rustls's
//!   client config (the system's roots, a CA file, or any certificate);
//! - `conn.rs`: one connection (connect, handshake, write, response); `pool.rs`: all of
//!   them, made before the start; `engine.rs`: the open and closed loops over them;
//! - `h2/`: HTTP/2 (the h2 crate on knee's own poll loop), reusable by other systems;
//!   `judge.rs`: the http target's verdict on an HTTP/2 response;
//! - `client.rs`: the role on the load harness (it picks HTTP/1.1 or HTTP/2 at setup);
//!   `done.rs`: its `done` line's fields (gRPC's too).

pub(crate) mod client;
pub(crate) mod config;
mod conn;
pub(crate) mod done;
mod engine;
pub(crate) mod h2;
mod judge;
mod nginx;
pub(crate) use nginx::TlsFiles;
mod pool;
mod requests;
pub mod response;
pub mod timing;
pub(crate) mod tls;
mod transport;

pub const SYSTEM: super::System = super::System {
    name: "http",
    serve: nginx::serve,
    client: client::role,
    contract: || {
        use crate::contract::Key;
        let c = crate::contract::SystemContract::new()
            .size("max_entries", config::MAX_ENTRIES)
            .size("max_file_lines", config::MAX_FILE_LINES)
            .size("max_request_body_bytes", config::MAX_REQUEST_BODY_BYTES)
            .column("op", "op", "the request's entry in [[driver.requests]]")
            .column("flags", "http_status", "the HTTP status code (0: no response)")
            .column(
                "service",
                "service",
                "1: the response carried the Server-Timing entries",
            )
            .column("detail_ns", "detail_ns", "the Server-Timing detail entry")
            .reads::<nginx::ServerConfig>("server")
            .key("server.nginx", Key::object().required())
            .reads::<nginx::NginxConfig>("server.nginx")
            .key("server.nginx.dir", Key::str().required())
            .key(
                "server.nginx.workers",
                Key::int(1, nginx::MAX_WORKERS)
                    .default(nginx::default_workers())
                    .checked(),
            )
            .key("server.nginx.cpu", Key::int(0, nginx::MAX_CPU))
            .key("server.nginx.binary", Key::str().default(nginx::default_binary()))
            .key(
                "server.nginx.keepalive",
                Key::bool().default(nginx::default_keepalive()),
            )
            .key("server.nginx.tls", Key::object())
            .key("server.nginx.http2", Key::bool().default(false))
            .reads::<config::DriverConfig>("driver")
            .key("driver.requests", Key::list(Some(config::MAX_ENTRIES)).required())
            .key(
                "driver.server_timing",
                Key::list(None).default(config::default_server_timing()),
            )
            .key("driver.server_timing_detail", Key::str())
            .key(
                "driver.max_header_bytes",
                Key::int(1, config::MAX_HEADER_BYTES).default(config::default_max_header_bytes()),
            )
            .key(
                "driver.max_body_bytes",
                Key::int(0, config::MAX_BODY_BYTES).default(config::default_max_body_bytes()),
            )
            .key("driver.tls_insecure", Key::bool().default(false))
            .key("driver.tls_ca_file", Key::str())
            .key(
                "driver.tls_resume",
                Key::bool().default(config::default_tls_resume()),
            )
            .key(
                "driver.protocol",
                Key::one_of(&config::Protocol::NAMES).default("auto"),
            )
            .key("driver.max_streams", Key::int(1, h2::MAX_STREAMS))
            .key(
                "driver.h2_stream_window_bytes",
                Key::int(config::MIN_WINDOW_BYTES, h2::MAX_WINDOW_BYTES)
                    .default(config::default_h2_stream_window_bytes()),
            )
            .key(
                "driver.h2_connection_window_bytes",
                Key::int(config::MIN_WINDOW_BYTES, h2::MAX_WINDOW_BYTES)
                    .default(config::default_h2_connection_window_bytes()),
            );
        transport_columns(
            c,
            "why the request failed (0: it did not; args)",
            "the wait for a free stream (HTTP/2) or a free connection (HTTP/1.1), from its intended time",
        )
    },
};

/// What a system whose requests go out on this transport's connections (http, grpc)
/// records in the generic columns, and the transport's reasons a request fails for (its
/// `args`): `fail` and `held` say, in the system's words, why a request failed and what
/// its held time waited for.
pub(crate) fn transport_columns(
    mut c: crate::contract::SystemContract,
    fail: &'static str,
    held: &'static str,
) -> crate::contract::SystemContract {
    c = c
        .column("arg", "fail_reason", fail)
        .column(
            "queue_ns",
            "queue_ns",
            "the wait for its connection to be made (connect_ns)",
        )
        .column("service_ns", "held_ns", held);
    for (name, reason) in response::Reason::ALL {
        c = c.arg(name, reason as u32);
    }
    c
}
