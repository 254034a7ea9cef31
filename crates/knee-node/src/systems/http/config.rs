//! The http target's config: the load generator's (`LoadConfig`, with `target` an
//! `http://HOST:PORT` origin) and its own `driver` part (the request table, the
//! Server-Timing keys, the response bounds).

use serde::Deserialize;

use super::response::Limits;
use super::timing::TimingKeys;
use crate::load::config::LoadConfig;

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

    fn check(&self) -> Result<(), String> {
        if self.requests.is_empty() || self.requests.len() > MAX_ENTRIES {
            return Err(format!("driver.requests: give 1..={MAX_ENTRIES} entries"));
        }
        if !(1..=MAX_HEADER_BYTES).contains(&self.max_header_bytes) {
            return Err(format!("driver.max_header_bytes must be 1..={MAX_HEADER_BYTES}"));
        }
        if self.max_body_bytes > MAX_BODY_BYTES {
            return Err(format!("driver.max_body_bytes must be <= {MAX_BODY_BYTES}"));
        }
        Ok(())
    }
}

/// The whole config of `knee-node load http`.
pub struct HttpConfig {
    pub load: LoadConfig,
    pub driver: DriverConfig,
    /// `host:port` to connect to, and the `Host` header's value.
    pub authority: String,
}

impl HttpConfig {
    pub fn parse(config: &serde_json::Value) -> Result<HttpConfig, String> {
        let load: LoadConfig = serde_json::from_value(config.clone()).map_err(|e| e.to_string())?;
        load.check()?;
        let driver: DriverConfig =
            serde_json::from_value(load.driver.clone()).map_err(|e| format!("driver: {e}"))?;
        driver.check()?;
        let authority = authority(&load.target)?;
        Ok(HttpConfig {
            load,
            driver,
            authority,
        })
    }
}

/// `http://HOST:PORT` (or `HOST:PORT`) to `HOST:PORT`; https and paths are refused.
pub fn authority(target: &str) -> Result<String, String> {
    let rest = match target.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") => rest,
        Some((scheme, _)) => {
            return Err(format!(
                "target {target}: only http:// is supported, not {scheme}"
            ))
        }
        None => target,
    };
    let rest = rest.strip_suffix('/').unwrap_or(rest);
    if rest.is_empty() || rest.contains(['/', '?', '#', '@', ' ']) {
        return Err(format!(
            "target {target}: expected http://HOST:PORT (paths go in driver.requests)"
        ));
    }
    if rest
        .rsplit_once(':')
        .is_none_or(|(_, port)| port.parse::<u16>().is_err())
        || rest.ends_with(']')
    {
        return Ok(format!("{rest}:80"));
    }
    Ok(rest.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets() {
        assert_eq!(authority("http://127.0.0.1:8080").unwrap(), "127.0.0.1:8080");
        assert_eq!(authority("HTTP://localhost/").unwrap(), "localhost:80");
        assert_eq!(authority("127.0.0.1:9").unwrap(), "127.0.0.1:9");
        assert_eq!(authority("http://[::1]:81").unwrap(), "[::1]:81");
        assert!(authority("https://x:1").is_err());
        assert!(authority("http://x:1/api").is_err());
        assert!(authority("").is_err());
    }
}
