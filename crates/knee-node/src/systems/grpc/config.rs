//! The grpc target's config: the load generator's (`LoadConfig`, `target` an
//! `http://HOST:PORT` (h2c, prior knowledge), `https://HOST:PORT` (TLS, ALPN h2) or a bare
//! `HOST:PORT` (h2c)) and its own `driver` part: the service description, the call, its
//! message as JSON, its metadata, TLS.

use serde::Deserialize;

use super::message::{self, MAX_MESSAGE_BYTES};
use super::proto::{self, Source};
use super::status::grpc_timeout;
use crate::load::config::{LoadConfig, TcpTarget};
use crate::systems::http::config::{target, Target};

/// Metadata entries of a call: each is a header sent with every call.
pub const MAX_METADATA: usize = 64;
/// Largest reply message a config may allow (`max_reply_bytes`): it is counted, not kept.
pub const MAX_REPLY_BYTES: u64 = 1 << 30;

/// gRPC's default bound on a received message (4 MiB): a larger reply is refused, as a
/// gRPC client refuses it.
pub fn default_max_reply_bytes() -> u64 {
    4 << 20
}
fn default_data() -> serde_json::Value {
    serde_json::Value::String("{}".into())
}

#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct DriverConfig {
    /// `.proto` files (their imports found in `import_paths`, then each file's folder).
    #[serde(default)]
    pub proto_files: Vec<String>,
    #[serde(default)]
    pub import_paths: Vec<String>,
    /// A compiled `FileDescriptorSet` instead of `.proto` files.
    #[serde(default)]
    pub protoset: Option<String>,
    /// `package.Service/Method`.
    pub call: String,
    /// The request message as JSON: text, or the object itself.
    #[serde(default = "default_data")]
    pub data: serde_json::Value,
    /// `[name, value]` pairs sent with every call.
    #[serde(default)]
    pub metadata: Vec<(String, String)>,
    /// A reply message longer than this fails the call (`body_too_large`).
    #[serde(default = "default_max_reply_bytes")]
    pub max_reply_bytes: u64,
    /// https: accept any certificate (a self-signed one on a local service).
    #[serde(default)]
    pub tls_insecure: bool,
    /// https: PEM certificates trusted besides the system's roots (a local CA).
    #[serde(default)]
    pub tls_ca_file: Option<String>,
}

impl DriverConfig {
    fn source(&self) -> Result<Source<'_>, String> {
        match (&self.protoset, self.proto_files.is_empty()) {
            (Some(_), false) => Err("give proto_files or protoset, not both".into()),
            (Some(set), true) if self.import_paths.is_empty() => Ok(Source::Protoset(set)),
            (Some(_), true) => Err("import_paths are for proto_files, not a protoset".into()),
            (None, true) => Err("give proto_files (.proto) or protoset (a FileDescriptorSet)".into()),
            (None, false) => Ok(Source::Protos {
                files: &self.proto_files,
                import_paths: &self.import_paths,
            }),
        }
    }

    /// The JSON text of the request message.
    fn data_text(&self) -> Result<String, String> {
        match &self.data {
            serde_json::Value::String(s) => Ok(s.clone()),
            v @ serde_json::Value::Object(_) => Ok(v.to_string()),
            other => Err(format!("data: expected a JSON object, got {other}")),
        }
    }
}

/// A call, built once: everything each request sends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// `/package.Service/Method`.
    pub path: String,
    /// `host:port`.
    pub authority: String,
    /// gRPC's headers then the metadata, in order (lower-case names).
    pub headers: Vec<(String, String)>,
    /// The length-prefixed request message.
    pub body: Vec<u8>,
    /// The request message's type and the reply's (for logs and `grpc-check`).
    pub input: String,
    pub output: String,
}

/// The service description compiled, the method found and its message built: what the
/// node does before the start (and `knee-node grpc-check` alone), every mistake one line.
pub fn build_call(driver: &DriverConfig, authority: &str, timeout_ns: u64) -> Result<Call, String> {
    let pool = proto::pool(&driver.source()?)?;
    let method = proto::method(&pool, &driver.call)?;
    let bytes = message::encode(&method.input(), &driver.data_text()?)?;
    let path = format!("/{}/{}", method.parent_service().full_name(), method.name());
    let mut headers: Vec<(String, String)> = vec![
        ("content-type".into(), "application/grpc".into()),
        ("te".into(), "trailers".into()),
        ("grpc-timeout".into(), grpc_timeout(timeout_ns)),
        ("user-agent".into(), format!("knee/{}", env!("CARGO_PKG_VERSION"))),
    ];
    if driver.metadata.len() > MAX_METADATA {
        return Err(format!("metadata: at most {MAX_METADATA} entries"));
    }
    for (name, value) in &driver.metadata {
        let name = metadata_name(name)?;
        if value.bytes().any(|b| !(b' '..=b'~').contains(&b)) {
            return Err(format!("metadata {name}: the value must be printable ASCII"));
        }
        if name == "user-agent" {
            headers.retain(|(n, _)| n != "user-agent");
        }
        headers.push((name, value.trim().to_string()));
    }
    Ok(Call {
        path,
        authority: authority.to_string(),
        headers,
        body: message::frame(&bytes),
        input: method.input().full_name().to_string(),
        output: method.output().full_name().to_string(),
    })
}

/// A metadata key in lower case, refused when it is not a gRPC header name or is one that
/// gRPC or HTTP/2 sets.
fn metadata_name(name: &str) -> Result<String, String> {
    let lower = name.trim().to_ascii_lowercase();
    let valid = !lower.is_empty()
        && lower
            .bytes()
            .all(|b| b.is_ascii_digit() || b.is_ascii_lowercase() || b"-_.".contains(&b));
    if !valid {
        return Err(format!(
            "metadata {name:?}: a key is letters, digits, '-', '_' and '.'"
        ));
    }
    let reserved = lower.starts_with("grpc-")
        || [
            "content-type",
            "te",
            "host",
            "connection",
            "transfer-encoding",
            "upgrade",
            "keep-alive",
            "proxy-connection",
        ]
        .contains(&lower.as_str());
    if reserved {
        return Err(format!("metadata {lower}: set by gRPC itself"));
    }
    Ok(lower)
}

/// The whole config of `knee-node load grpc`.
pub struct GrpcConfig {
    pub load: LoadConfig,
    pub tcp: TcpTarget,
    pub driver: DriverConfig,
    pub target: Target,
    pub call: Call,
}

impl GrpcConfig {
    pub fn parse(config: &serde_json::Value) -> Result<GrpcConfig, String> {
        let (load, tcp) = LoadConfig::parse_tcp(config).map_err(|e| e.to_string())?;
        let driver = driver(&load.driver)?;
        let target = target(&tcp.target)?;
        if !target.tls && (driver.tls_insecure || driver.tls_ca_file.is_some()) {
            return Err(format!(
                "driver.tls_insecure and driver.tls_ca_file are for https:// targets, not {}",
                tcp.target
            ));
        }
        let call = build_call(&driver, &target.authority, (load.timeout_ms * 1e6) as u64)?;
        Ok(GrpcConfig {
            load,
            tcp,
            driver,
            target,
            call,
        })
    }
}

/// The `driver` part, its bounds checked.
pub fn driver(value: &serde_json::Value) -> Result<DriverConfig, String> {
    let d: DriverConfig = serde_json::from_value(value.clone()).map_err(|e| format!("driver: {e}"))?;
    if d.max_reply_bytes > MAX_REPLY_BYTES {
        return Err(format!("driver.max_reply_bytes must be <= {MAX_REPLY_BYTES}"));
    }
    Ok(d)
}

/// Bounds the built message keeps (for the contract).
pub const MAX_REQUEST_MESSAGE_BYTES: usize = MAX_MESSAGE_BYTES;

#[cfg(test)]
mod tests {
    use super::*;

    /// The test .proto in a folder of its own.
    fn proto() -> String {
        let f = crate::scratch::fresh_dir("grpc-config").join("echo.proto");
        std::fs::write(
            &f,
            "syntax = \"proto3\"; package knee.test;\nmessage Req { string text = 1; int32 sleep_ms = 2; }\nmessage Rep { string text = 1; }\nservice Echo { rpc Call(Req) returns (Rep); }\n",
        )
        .unwrap();
        f.to_string_lossy().into_owned()
    }

    fn driver_of(v: serde_json::Value) -> DriverConfig {
        driver(&v).unwrap()
    }

    #[test]
    fn a_call_is_built_once_with_grpc_headers_and_metadata() {
        let d = driver_of(serde_json::json!({
            "proto_files": [proto()],
            "call": "knee.test.Echo/Call",
            "data": {"text": "hi"},
            "metadata": [["X-Team", " blue "], ["user-agent", "mine"]],
        }));
        let c = build_call(&d, "127.0.0.1:50051", 500_000_000).unwrap();
        assert_eq!(c.path, "/knee.test.Echo/Call");
        assert_eq!(c.body, [0, 0, 0, 0, 4, 0x0a, 2, b'h', b'i']);
        let h: Vec<(&str, &str)> = c.headers.iter().map(|(n, v)| (n.as_str(), v.as_str())).collect();
        assert_eq!(
            h,
            [
                ("content-type", "application/grpc"),
                ("te", "trailers"),
                ("grpc-timeout", "500m"),
                ("x-team", "blue"),
                ("user-agent", "mine"),
            ]
        );
        assert_eq!(
            (c.input.as_str(), c.output.as_str()),
            ("knee.test.Req", "knee.test.Rep")
        );
        // The message as JSON text, as the CLI passes it.
        let d = driver_of(serde_json::json!({
            "proto_files": [proto()], "call": "knee.test.Echo/Call", "data": "{\"sleep_ms\": 3}",
        }));
        let c = build_call(&d, "h:1", 1).unwrap();
        assert_eq!(c.body, [0, 0, 0, 0, 2, 0x10, 3]);
        let agent = format!("knee/{}", env!("CARGO_PKG_VERSION"));
        assert!(c.headers.contains(&("user-agent".to_string(), agent)));
    }

    #[test]
    fn bad_configs_are_one_line_each() {
        let p = proto();
        for (v, words) in [
            (
                serde_json::json!({"call": "knee.test.Echo/Call"}),
                "give proto_files",
            ),
            (
                serde_json::json!({"proto_files": [p], "protoset": "x", "call": "a.B/C"}),
                "not both",
            ),
            (
                serde_json::json!({"proto_files": [p], "call": "knee.test.Echo/Nope"}),
                "has no method Nope",
            ),
            (
                serde_json::json!({"proto_files": [p], "call": "knee.test.Echo/Call", "data": {"txt": 1}}),
                "data does not match knee.test.Req",
            ),
            (
                serde_json::json!({"proto_files": [p], "call": "knee.test.Echo/Call", "data": [1]}),
                "expected a JSON object",
            ),
            (
                serde_json::json!({"proto_files": [p], "call": "knee.test.Echo/Call", "metadata": [["grpc-timeout", "1S"]]}),
                "set by gRPC itself",
            ),
            (
                serde_json::json!({"proto_files": [p], "call": "knee.test.Echo/Call", "metadata": [["a b", "1"]]}),
                "a key is letters",
            ),
            (
                serde_json::json!({"proto_files": [p], "call": "knee.test.Echo/Call", "metadata": [["k", "\u{e9}"]]}),
                "printable ASCII",
            ),
        ] {
            let e = build_call(&driver_of(v), "h:1", 1_000_000).unwrap_err();
            assert!(e.contains(words), "{e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }
}
