//! http: any HTTP/1.1 service (http:// or https://) as knee's target (`docs/http.md`). knee-node has no HTTP
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
//! - `client.rs`: the role on the load harness.

mod client;
mod config;
mod conn;
mod engine;
mod nginx;
mod pool;
mod requests;
pub mod response;
pub mod timing;
mod tls;
mod transport;

pub const SYSTEM: super::System = super::System {
    name: "http",
    serve: nginx::serve,
    client: client::role,
    contract: || {
        let mut c = crate::contract::SystemContract::new()
            .size("max_entries", config::MAX_ENTRIES)
            .size("max_file_lines", config::MAX_FILE_LINES)
            .size("max_request_body_bytes", config::MAX_REQUEST_BODY_BYTES)
            .max("driver.max_header_bytes", config::MAX_HEADER_BYTES as f64)
            .max("driver.max_body_bytes", config::MAX_BODY_BYTES as f64)
            .max("server.nginx_workers", nginx::MAX_WORKERS)
            .with_default("driver.max_header_bytes", config::default_max_header_bytes())
            .with_default("driver.max_body_bytes", config::default_max_body_bytes())
            .with_default("driver.server_timing", config::default_server_timing())
            .with_default("driver.tls_insecure", false)
            .with_default("driver.tls_resume", config::default_tls_resume())
            .with_default("server.nginx_workers", 1);
        for (name, reason) in response::Reason::ALL {
            c = c.arg(name, reason as u32);
        }
        c
    },
};
