//! The http target's config: the load generator's (`LoadConfig`, with `target` an
//! `http://HOST:PORT` origin) and its own `driver` part (the request table, the
//! Server-Timing keys, the response bounds).

use std::net::{SocketAddr, ToSocketAddrs};

use serde::Deserialize;

use super::response::Limits;
use super::timing::TimingKeys;
use crate::load::config::{LoadConfig, TcpTarget};

/// Entries of the request table: each is a sample `op` (u16), and the report breaks down
/// by them, so thousands would be a mistake (a requests file holds many paths in one).
pub const MAX_ENTRIES: usize = 256;
/// Requests (lines) of one requests file: they are built once and kept in memory.
pub const MAX_FILE_LINES: usize = 1_000_000;
/// A request body (inline or a file): the request is kept in memory and written whole.
pub const MAX_REQUEST_BODY_BYTES: usize = 16 << 20;
/// All built requests together: what the table may hold in memory.
pub const MAX_TABLE_BYTES: usize = 256 << 20;
/// Largest `max_header_bytes` / `max_body_bytes` a config may ask for: a response's head
/// is buffered (up to the first), a body only counted, but a bound is still a bound.
pub const MAX_HEADER_BYTES: usize = 1 << 20;
pub const MAX_BODY_BYTES: u64 = 1 << 40;

pub fn default_max_header_bytes() -> usize {
    64 << 10
}
pub fn default_max_body_bytes() -> u64 {
    64 << 20
}
pub fn default_server_timing() -> Vec<String> {
    vec!["app".into()]
}
pub fn default_tls_resume() -> bool {
    true
}
pub fn default_protocol() -> Protocol {
    Protocol::Auto
}
pub fn default_h2_stream_window_bytes() -> u32 {
    super::h2::DEFAULT_STREAM_WINDOW_BYTES
}
pub fn default_h2_connection_window_bytes() -> u32 {
    super::h2::DEFAULT_CONNECTION_WINDOW_BYTES
}
/// Smallest receive window a config may ask for: HTTP/2's default (65,535 bytes).
pub const MIN_WINDOW_BYTES: u32 = 65_535;

/// Which HTTP the node speaks (`driver.protocol`).
#[derive(Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Protocol {
    /// https: h2 when the server chooses it by ALPN, else HTTP/1.1; http: HTTP/1.1.
    Auto,
    /// HTTP/1.1 (ALPN offers only http/1.1).
    Http1,
    /// Cleartext HTTP/2 by prior knowledge (http:// only).
    H2c,
    /// HTTP/2 over TLS, required by ALPN (https:// only).
    H2,
}

impl Protocol {
    pub const NAMES: [&'static str; 4] = ["auto", "http1", "h2c", "h2"];
}

fn default_method() -> String {
    "GET".into()
}
fn default_weight() -> f64 {
    1.0
}

/// One entry of `[[driver.requests]]`: a request, or a file of requests one per line.
#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct Entry {
    #[serde(default = "default_method")]
    pub method: String,
    /// Path and query (`/` when a `file` gives the paths).
    #[serde(default)]
    pub path: Option<String>,
    /// `[name, value]` pairs, sent in order.
    #[serde(default)]
    pub headers: Vec<(String, String)>,
    #[serde(default)]
    pub body: Option<String>,
    #[serde(default)]
    pub body_file: Option<String>,
    /// This entry's share of the requests, relative to the others' weights.
    #[serde(default = "default_weight")]
    pub weight: f64,
    /// A file of requests, one per line: `PATH` or `METHOD PATH` (blank lines and lines
    /// starting with `#` skipped), each with this entry's headers; the entry's requests go
    /// through its lines in turn.
    #[serde(default)]
    pub file: Option<String>,
}

#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct DriverConfig {
    pub requests: Vec<Entry>,
    /// Server-Timing entries summed into the server time.
    #[serde(default = "default_server_timing")]
    pub server_timing: Vec<String>,
    /// The Server-Timing entry recorded as the detail part (e.g. "db").
    #[serde(default)]
    pub server_timing_detail: Option<String>,
    #[serde(default = "default_max_header_bytes")]
    pub max_header_bytes: usize,
    #[serde(default = "default_max_body_bytes")]
    pub max_body_bytes: u64,
    /// https: accept any certificate (a self-signed one on a local service). The handshake
    /// and its signatures are still checked; who signed the certificate is not.
    #[serde(default)]
    pub tls_insecure: bool,
    /// https: PEM certificates trusted besides the system's roots (a local CA).
    #[serde(default)]
    pub tls_ca_file: Option<String>,
    /// https: resume TLS sessions (tickets, as browsers do) on new connections; false: a
    /// full handshake on every connection, the server's most expensive case.
    #[serde(default = "default_tls_resume")]
    pub tls_resume: bool,
    /// HTTP/1.1 or HTTP/2 (`auto`, `http1`, `h2c`, `h2`).
    #[serde(default = "default_protocol")]
    pub protocol: Protocol,
    /// HTTP/2: streams per connection at most, besides the server's own limit.
    #[serde(default)]
    pub max_streams: Option<u32>,
    /// HTTP/2: knee's receive windows, per stream and per connection.
    #[serde(default = "default_h2_stream_window_bytes")]
    pub h2_stream_window_bytes: u32,
    #[serde(default = "default_h2_connection_window_bytes")]
    pub h2_connection_window_bytes: u32,
}

impl DriverConfig {
    pub fn keys(&self) -> TimingKeys {
        TimingKeys {
            server: self.server_timing.clone(),
            detail: self.server_timing_detail.clone(),
        }
    }

    pub fn limits(&self) -> Limits {
        Limits {
            max_header_bytes: self.max_header_bytes,
            max_body_bytes: self.max_body_bytes,
        }
    }

    /// The HTTP/2 engine's options from this driver.
    pub fn h2_options(&self) -> super::h2::H2Options {
        super::h2::H2Options {
            stream_window_bytes: self.h2_stream_window_bytes,
            connection_window_bytes: self.h2_connection_window_bytes,
            max_streams: self.max_streams,
            max_header_bytes: self.max_header_bytes as u32,
            max_body_bytes: self.max_body_bytes,
        }
    }

    /// What the contract cannot say (its bounds are checked before the role parses).
    fn check(&self) -> Result<(), String> {
        if self.requests.is_empty() {
            return Err(format!("driver.requests: give 1..={MAX_ENTRIES} entries"));
        }
        Ok(())
    }
}

/// Where the requests go, from `load.target`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// `host:port` to connect to, and the `Host` header's value.
    pub authority: String,
    /// The host alone (no brackets around an IPv6 address): TLS's server name.
    pub host: String,
    /// `https://`: TLS over the connection.
    pub tls: bool,
}

impl Target {
    /// The first address `authority` resolves to; an error names `url`, the config's
    /// `target`.
    pub fn socket_addr(&self, url: &str) -> Result<SocketAddr, String> {
        self.authority
            .to_socket_addrs()
            .map_err(|e| format!("target {url}: {e}"))?
            .next()
            .ok_or_else(|| format!("target {url}: no address"))
    }
}

/// The whole config of `knee-node load http`.
pub struct HttpConfig {
    pub load: LoadConfig,
    /// `target` (its URL) and `connections`.
    pub tcp: TcpTarget,
    pub driver: DriverConfig,
    pub target: Target,
}

impl HttpConfig {
    pub fn parse(config: &serde_json::Value) -> Result<HttpConfig, String> {
        let (load, tcp) = LoadConfig::parse_tcp(config)?;
        let driver: DriverConfig =
            serde_json::from_value(load.driver.clone()).map_err(|e| format!("driver: {e}"))?;
        driver.check()?;
        let target = target(&tcp.target)?;
        match (driver.protocol, target.tls) {
            (Protocol::H2c, true) => {
                return Err(format!(
                    "driver.protocol h2c is cleartext HTTP/2, for http:// targets, not {} (use h2)",
                    tcp.target
                ))
            }
            (Protocol::H2, false) => {
                return Err(format!(
                    "driver.protocol h2 is HTTP/2 over TLS, for https:// targets, not {} (use h2c)",
                    tcp.target
                ))
            }
            _ => {}
        }
        if !target.tls && (driver.tls_insecure || driver.tls_ca_file.is_some()) {
            return Err(format!(
                "driver.tls_insecure and driver.tls_ca_file are for https:// targets, not {}",
                tcp.target
            ));
        }
        Ok(HttpConfig {
            load,
            tcp,
            driver,
            target,
        })
    }
}

/// `http://HOST:PORT`, `https://HOST:PORT` (or `HOST:PORT`, plain) to its [`Target`];
/// the port defaults to the scheme's (80, 443); paths are refused.
pub fn target(target: &str) -> Result<Target, String> {
    let (rest, tls) = match target.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") => (rest, false),
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("https") => (rest, true),
        Some((scheme, _)) => {
            return Err(format!(
                "target {target}: expected http:// or https://, not {scheme}://"
            ))
        }
        None => (target, false),
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.is_empty() || rest.contains(['/', '?', '#', '@', ' ']) {
        return Err(format!(
            "target {target}: expected http(s)://HOST:PORT (paths go in driver.requests)"
        ));
    }
    let has_port = rest
        .rsplit_once(':')
        .is_some_and(|(_, port)| port.parse::<u16>().is_ok())
        && !rest.ends_with(']');
    let authority = if has_port {
        rest.to_string()
    } else {
        format!("{rest}:{}", if tls { 443 } else { 80 })
    };
    let host = authority.rsplit_once(':').map_or(rest, |(h, _)| h);
    let host = host.trim_start_matches('[').trim_end_matches(']').to_string();
    Ok(Target { authority, host, tls })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets() {
        let t = |s: &str| target(s).map(|t| (t.authority, t.host, t.tls));
        let of = |a: &str, h: &str, tls: bool| Ok((a.to_string(), h.to_string(), tls));
        assert_eq!(
            t("http://127.0.0.1:8080"),
            of("127.0.0.1:8080", "127.0.0.1", false)
        );
        assert_eq!(t("HTTP://localhost/"), of("localhost:80", "localhost", false));
        assert_eq!(t("127.0.0.1:9"), of("127.0.0.1:9", "127.0.0.1", false));
        assert_eq!(t("http://[::1]:81"), of("[::1]:81", "::1", false));
        assert_eq!(
            t("https://example.org"),
            of("example.org:443", "example.org", true)
        );
        assert_eq!(t("https://[::1]"), of("[::1]:443", "::1", true));
        assert!(t("ftp://x:1").is_err());
        assert!(t("http://x:1/api").is_err());
        assert!(t("").is_err());
    }
}
