//! The request table: every request built once into its wire bytes, so the send path only
//! picks one (by weight) and writes it.

use super::config::{self, DriverConfig, Entry};
use crate::rng::Rng;

/// One request, ready to write.
pub struct Request {
    pub bytes: Vec<u8>,
    /// A HEAD request: its response has no body whatever its headers say.
    pub head: bool,
    /// It sends `Connection: close`: its connection ends with its response (RFC 9112 9.6).
    pub close: bool,
}

/// A request of the table, by place: what a connection keeps while it writes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pick {
    /// Its entry: the sample's `op`.
    pub op: u16,
    line: u32,
}

/// The table: entries (an entry is a sample `op`), each with one request or a file's.
pub struct Table {
    entries: Vec<Vec<Request>>,
    /// Running sum of the weights, for a draw by weight.
    cumulative: Vec<f64>,
    /// Next line of each entry (a file's lines are sent in turn).
    cursors: Vec<usize>,
}

impl Table {
    pub fn build(driver: &DriverConfig, host: &str) -> Result<Table, String> {
        let mut entries = Vec::with_capacity(driver.requests.len());
        let (mut cumulative, mut sum, mut table_bytes) = (Vec::new(), 0.0, 0usize);
        for (i, e) in driver.requests.iter().enumerate() {
            let what = format!("driver.requests[{i}]");
            if !(e.weight.is_finite() && e.weight > 0.0) {
                return Err(format!("{what}.weight must be > 0"));
            }
            let built = entry(e, host).map_err(|m| format!("{what}: {m}"))?;
            table_bytes += built.iter().map(|r| r.bytes.len()).sum::<usize>();
            if table_bytes > config::MAX_TABLE_BYTES {
                return Err(format!(
                    "the requests take more than {} MiB built",
                    config::MAX_TABLE_BYTES >> 20
                ));
            }
            entries.push(built);
            sum += e.weight;
            cumulative.push(sum);
        }
        Ok(Table {
            cursors: vec![0; entries.len()],
            entries,
            cumulative,
        })
    }

    /// The request at `p`.
    pub fn get(&self, p: Pick) -> &Request {
        &self.entries[p.op as usize][p.line as usize]
    }

    /// The next request: its entry (the sample's `op`) and its line.
    pub fn pick(&mut self, rng: &mut Rng) -> Pick {
        let i = if self.entries.len() == 1 {
            0
        } else {
            let total = self.cumulative[self.cumulative.len() - 1];
            let x = rng.uniform() * total;
            self.cumulative
                .partition_point(|&c| c <= x)
                .min(self.entries.len() - 1)
        };
        let line = self.cursors[i] % self.entries[i].len();
        self.cursors[i] = line + 1;
        Pick {
            op: i as u16,
            line: line as u32,
        }
    }
}

fn entry(e: &Entry, host: &str) -> Result<Vec<Request>, String> {
    let (lines, body) = lines(e)?;
    lines
        .iter()
        .map(|(method, path, at)| {
            request(method, path, &e.headers, &body, host).map_err(|m| format!("{at}{m}"))
        })
        .collect()
}

/// One request of an entry: (method, path, where: "" or "file F line N: ").
type Line = (String, String, String);

/// An entry's requests, and its body.
fn lines(e: &Entry) -> Result<(Vec<Line>, Vec<u8>), String> {
    let body = match (&e.body, &e.body_file) {
        (Some(_), Some(_)) => return Err("give body or body_file, not both".into()),
        (Some(b), None) => b.as_bytes().to_vec(),
        (None, Some(path)) => read_bounded(path, config::MAX_REQUEST_BODY_BYTES, "body_file")?,
        (None, None) => Vec::new(),
    };
    if body.len() > config::MAX_REQUEST_BODY_BYTES {
        return Err(format!(
            "body is over {} MiB",
            config::MAX_REQUEST_BODY_BYTES >> 20
        ));
    }
    let Some(file) = &e.file else {
        let path = e.path.as_deref().ok_or("give a path (or a file of requests)")?;
        return Ok((vec![(e.method.clone(), path.to_string(), String::new())], body));
    };
    if e.path.is_some() {
        return Err("give path or file, not both".into());
    }
    let text = read_bounded(file, config::MAX_TABLE_BYTES, "file")?;
    let text = String::from_utf8(text).map_err(|_| format!("file {file}: not UTF-8"))?;
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if out.len() == config::MAX_FILE_LINES {
            return Err(format!(
                "file {file}: more than {} requests",
                config::MAX_FILE_LINES
            ));
        }
        let (method, path) = match line.split_once(char::is_whitespace) {
            Some((m, p)) => (m, p.trim()),
            None => (e.method.as_str(), line),
        };
        out.push((
            method.to_string(),
            path.to_string(),
            format!("file {file} line {}: ", n + 1),
        ));
    }
    if out.is_empty() {
        return Err(format!("file {file} has no requests"));
    }
    Ok((out, body))
}

/// Headers HTTP/2 forbids (RFC 9113 section 8.2.2: connection-specific) or sets itself
/// (`host` is the `:authority` pseudo-header): left out of HTTP/2 requests.
const NOT_IN_H2: [&str; 6] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "transfer-encoding",
    "upgrade",
    "host",
];

/// The table as HTTP/2 requests (the same entries, validated as HTTP/1.1's are); each
/// request's body shared, not copied.
pub fn h2_table(driver: &DriverConfig) -> Result<super::h2::H2Table, String> {
    use super::h2::H2Request;
    let mut entries = Vec::with_capacity(driver.requests.len());
    for (i, e) in driver.requests.iter().enumerate() {
        let what = format!("driver.requests[{i}]");
        if !(e.weight.is_finite() && e.weight > 0.0) {
            return Err(format!("{what}.weight must be > 0"));
        }
        let (lines, body) = lines(e).map_err(|m| format!("{what}: {m}"))?;
        let body = bytes::Bytes::from(body);
        let mut headers = Vec::new();
        for (name, value) in &e.headers {
            if NOT_IN_H2.iter().any(|n| name.eq_ignore_ascii_case(n)) {
                continue;
            }
            let k = http::HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| format!("{what}: header name {name:?} is not an HTTP token"))?;
            let v = http::HeaderValue::from_str(value)
                .map_err(|_| format!("{what}: header {name}: bad value"))?;
            headers.push((k, v));
        }
        let mut requests = Vec::with_capacity(lines.len());
        for (method, path, at) in lines {
            // The same checks as HTTP/1.1's (a token method, a path without controls...).
            request(&method, &path, &e.headers, &[], "h").map_err(|m| format!("{what}: {at}{m}"))?;
            let mut headers = headers.clone();
            if !body.is_empty() || ["POST", "PUT", "PATCH"].contains(&method.as_str()) {
                headers.push((http::header::CONTENT_LENGTH, http::HeaderValue::from(body.len())));
            }
            requests.push(H2Request {
                method: http::Method::from_bytes(method.as_bytes())
                    .map_err(|_| format!("{what}: {at}bad method"))?,
                path,
                headers,
                body: body.clone(),
            });
        }
        entries.push((e.weight, requests));
    }
    super::h2::H2Table::new(entries)
}

fn read_bounded(path: &str, max: usize, what: &str) -> Result<Vec<u8>, String> {
    let len = std::fs::metadata(path)
        .map_err(|e| format!("{what} {path}: {e}"))?
        .len();
    if len > max as u64 {
        return Err(format!("{what} {path} is over {} MiB", max >> 20));
    }
    std::fs::read(path).map_err(|e| format!("{what} {path}: {e}"))
}

fn is_token(s: &str) -> bool {
    !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// One request's wire bytes. Content-Length is ours (from the body), Host ours unless given.
fn request(
    method: &str,
    path: &str,
    headers: &[(String, String)],
    body: &[u8],
    host: &str,
) -> Result<Request, String> {
    if !is_token(method) {
        return Err(format!("method {method:?} is not an HTTP token"));
    }
    if !(path.starts_with('/') || path == "*") || path.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return Err(format!(
            "path {path:?} must start with / and have no spaces or controls"
        ));
    }
    let mut out = format!("{method} {path} HTTP/1.1\r\n").into_bytes();
    let (mut own_host, mut close) = (false, false);
    for (name, value) in headers {
        if !is_token(name) {
            return Err(format!("header name {name:?} is not an HTTP token"));
        }
        if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
            return Err(format!("header {name}: the value has a line break"));
        }
        if name.eq_ignore_ascii_case("content-length") || name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(format!("header {name} is set by knee from the body"));
        }
        own_host |= name.eq_ignore_ascii_case("host");
        close |= name.eq_ignore_ascii_case("connection")
            && value.split(',').any(|t| t.trim().eq_ignore_ascii_case("close"));
        out.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
    }
    if !own_host {
        out.extend_from_slice(format!("Host: {host}\r\n").as_bytes());
    }
    let sends_body = !body.is_empty() || ["POST", "PUT", "PATCH"].contains(&method);
    if sends_body {
        out.extend_from_slice(format!("Content-Length: {}\r\n", body.len()).as_bytes());
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
    Ok(Request {
        bytes: out,
        head: method == "HEAD",
        close,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn driver(entries: serde_json::Value) -> DriverConfig {
        serde_json::from_value(serde_json::json!({ "requests": entries })).unwrap()
    }

    #[test]
    fn requests_are_built_once_with_host_and_length() {
        let d = driver(serde_json::json!([
            {"method": "POST", "path": "/a?x=1", "headers": [["X-K", "v"]], "body": "hi"},
            {"path": "/b", "headers": [["host", "other"]]}
        ]));
        let mut t = Table::build(&d, "h:1").unwrap();
        let mut rng = Rng::new(1);
        let mut seen = [0; 2];
        for _ in 0..1000 {
            let p = t.pick(&mut rng);
            let (op, r) = (p.op, t.get(p));
            let text = String::from_utf8(r.bytes.clone()).unwrap();
            if op == 0 {
                assert_eq!(
                    text,
                    "POST /a?x=1 HTTP/1.1\r\nX-K: v\r\nHost: h:1\r\nContent-Length: 2\r\n\r\nhi"
                );
            } else {
                assert_eq!(text, "GET /b HTTP/1.1\r\nhost: other\r\n\r\n");
            }
            seen[op as usize] += 1;
        }
        assert!(seen[0] > 400 && seen[1] > 400, "{seen:?}");
    }

    #[test]
    fn a_request_that_sends_connection_close_ends_its_connection() {
        let d = driver(serde_json::json!([
            {"path": "/a", "headers": [["Connection", "keep-alive, Close"]]},
            {"path": "/b", "headers": [["Connection", "keep-alive"]]},
            {"path": "/c"}
        ]));
        let t = Table::build(&d, "h").unwrap();
        let close: Vec<bool> = (0..3).map(|op| t.get(Pick { op, line: 0 }).close).collect();
        assert_eq!(close, [true, false, false]);
    }

    #[test]
    fn weights_and_files() {
        let dir = crate::scratch::fresh_dir("http-req");
        let file = dir.join("paths.txt");
        std::fs::write(&file, "# paths\n/one\n\nHEAD /two\n").unwrap();
        let d = driver(serde_json::json!([
            {"file": file.to_str().unwrap(), "weight": 3.0},
            {"path": "/x", "weight": 1.0}
        ]));
        let mut t = Table::build(&d, "h").unwrap();
        let mut rng = Rng::new(2);
        let (mut file_lines, mut heads) = (0, 0);
        for _ in 0..4000 {
            let p = t.pick(&mut rng);
            let (op, r) = (p.op, t.get(p));
            file_lines += (op == 0) as u32;
            heads += r.head as u32;
        }
        assert!((2800..3200).contains(&file_lines), "{file_lines}");
        assert_eq!(heads, file_lines / 2);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn bad_entries_are_refused_with_a_reason() {
        for (e, words) in [
            (serde_json::json!({"path": "no-slash"}), "must start with /"),
            (serde_json::json!({"path": "/a b"}), "no spaces"),
            (serde_json::json!({"method": "G T", "path": "/"}), "token"),
            (
                serde_json::json!({"path": "/", "headers": [["X", "a\r\nb"]]}),
                "line break",
            ),
            (
                serde_json::json!({"path": "/", "headers": [["Content-Length", "1"]]}),
                "set by knee",
            ),
            (
                serde_json::json!({"path": "/", "body": "a", "body_file": "/x"}),
                "not both",
            ),
            (serde_json::json!({"path": "/", "weight": 0.0}), "weight"),
            (serde_json::json!({}), "give a path"),
            (
                serde_json::json!({"file": "/nonexistent/knee"}),
                "file /nonexistent/knee",
            ),
        ] {
            let err = Table::build(&driver(serde_json::json!([e])), "h").err().unwrap();
            assert!(err.contains(words), "{err}");
        }
    }
}
