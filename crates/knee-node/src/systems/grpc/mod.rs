//! grpc: unary calls to any gRPC service (`docs/grpc.md`) over HTTP/2, h2c or TLS with ALPN
//! h2, on the http system's HTTP/2 engine.
//!
//! - `proto.rs`: the .proto files compiled at run time (protox), or a descriptor set; the
//!   method looked up (unary only);
//! - `message.rs`: the request message from JSON (prost-reflect), encoded and framed once;
//! - `config.rs`: the role's config and the call it builds (path, headers, body);
//! - `frame.rs`: the reply's length-prefixed messages, checked and counted;
//! - `status.rs`: status codes, `grpc-timeout`, the verdict on a reply;
//! - `server.rs`: `serve grpc`, the grpc-go test server supervised for a point;
//! - `client.rs`: the role on the load harness.

mod client;
pub mod config;
mod frame;
mod message;
mod proto;
mod server;
pub mod status;

pub const SYSTEM: super::System = super::System {
    name: "grpc",
    serve: server::serve,
    client: client::role,
    contract: || {
        use crate::contract::Key;
        let mut c = crate::contract::SystemContract::new()
            .size("max_metadata", config::MAX_METADATA)
            .size("max_request_message_bytes", config::MAX_REQUEST_MESSAGE_BYTES)
            .size("max_proto_files", proto::MAX_PROTO_FILES)
            .constant("codes", serde_json::json!(status::CODES))
            .column("op", "op", "0: the one call")
            .column(
                "flags",
                "grpc_status",
                "the call's gRPC status code (the server's, else the client library's: codes)",
            )
            .reads::<server::ServerConfig>("server")
            .key("server.go_grpc", Key::object().required())
            .reads::<server::GoServer>("server.go_grpc")
            .key("server.go_grpc.binary", Key::str())
            .key(
                "server.go_grpc.workers",
                Key::int(1, server::MAX_WORKERS)
                    .default(server::default_workers())
                    .checked(),
            )
            .key(
                "server.go_grpc.sleep_ms",
                Key::int(1, server::MAX_SLEEP_MS)
                    .default(server::default_sleep_ms())
                    .checked(),
            )
            .key("server.go_grpc.tls", Key::object())
            .reads::<config::DriverConfig>("driver")
            .key(
                "driver.proto_files",
                Key::list(Some(proto::MAX_PROTO_FILES)).default(Vec::<String>::new()),
            )
            .key(
                "driver.import_paths",
                Key::list(Some(proto::MAX_PROTO_FILES)).default(Vec::<String>::new()),
            )
            .key("driver.protoset", Key::str())
            .key("driver.call", Key::str().required())
            .key("driver.data", Key::str().default("{}"))
            .key(
                "driver.metadata",
                Key::list(Some(config::MAX_METADATA)).default(Vec::<String>::new()),
            )
            .key(
                "driver.max_reply_bytes",
                Key::int(0, config::MAX_REPLY_BYTES).default(config::default_max_reply_bytes()),
            )
            .key("driver.tls_insecure", Key::bool().default(false))
            .key("driver.tls_ca_file", Key::str());
        c = crate::systems::http::transport_columns(
            c,
            "why the call failed (0: it did not; args)",
            "the wait for a free stream (the server's SETTINGS_MAX_CONCURRENT_STREAMS) or flow-control window, from its intended time",
        );
        for (name, reason) in status::Reason::ALL {
            c = c.arg(name, reason as u32);
        }
        c
    },
};

/// `knee-node grpc-check --config JSON`: the driver's service description compiled, its
/// method found and its message built, as the node does before the start, without a
/// target; one JSON line on success (the path, the types, the message's size).
pub fn check(driver: &serde_json::Value) -> Result<String, String> {
    let d = config::driver(driver)?;
    let call = config::build_call(&d, "check", 1_000_000_000)?;
    Ok(serde_json::json!({
        "path": call.path,
        "input": call.input,
        "output": call.output,
        "message_bytes": call.body.len() - message::PREFIX_BYTES,
    })
    .to_string())
}
