//! `knee-node serve http` runs an nginx for one point (`experiments/http-nginx.toml`): its
//! config, logs and pid file in the point's scratch folder, listening on a free port of
//! 127.0.0.1, one worker by default, answering from its config (no files). knee-node is its
//! supervisor: `ready` once nginx accepts connections, a node failure if nginx exits, nginx
//! stopped with the node. The tests and `bench/http_vs_wrk.py` start theirs through it too,
//! so there is one config.
//!
//! Every response carries `Server-Timing: app;dur=MS`, MS being nginx's `$request_time`
//! (seconds, ms resolution) as whole ms when the header is written: the split is there, at
//! a resolution of 1 ms.
//!
//! Two options make it another kind of server for the conformance tests: `keepalive = false`
//! (`keepalive_timeout 0`: every response says `Connection: close` and nginx closes), and
//! `tls` (PEM certificate and key: nginx listens with `ssl`, TLSv1.2 and TLSv1.3; Debian's
//! nginx-light has the ssl module). Readiness is still a TCP accept, which TLS answers too.

use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde::Deserialize;

use crate::clock;
use crate::events::{NoExtra, Stats};
use crate::serve::{Lifecycle, ServeOptions, Stop};

/// Most worker processes (a config mistake beyond: this is one point's server).
pub const MAX_WORKERS: u32 = 64;
/// Highest CPU index the workers may be pinned to (Linux's CPU masks go this far on any
/// machine knee runs on; a larger one is a mistake).
pub const MAX_CPU: u32 = 4095;
/// How long nginx may take to accept its first connection.
const START_TIMEOUT_NS: u64 = 10_000_000_000;
/// After SIGQUIT (finish what is in flight), how long before SIGKILL.
const STOP_TIMEOUT_NS: u64 = 5_000_000_000;
/// Tries at a free port: another process may take the one found before nginx binds it.
const PORT_TRIES: usize = 3;
/// Bytes of the error log quoted when nginx fails.
const LOG_TAIL_BYTES: u64 = 2048;

pub(super) fn default_workers() -> u32 {
    1
}
pub(super) fn default_binary() -> String {
    "nginx".into()
}
pub(super) fn default_keepalive() -> bool {
    true
}

/// A certificate and its private key, PEM files (relative paths: to knee-node's folder); the
/// grpc system's Go server takes the same.
#[derive(Deserialize, Debug, Clone, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TlsFiles {
    pub cert: String,
    pub key: String,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct NginxConfig {
    /// Its folder (config, logs, pid, temp files): the point's scratch folder.
    pub dir: String,
    #[serde(default = "default_workers")]
    pub workers: u32,
    /// Pin the workers to this CPU (None: not pinned).
    #[serde(default)]
    pub cpu: Option<u32>,
    #[serde(default = "default_binary")]
    pub binary: String,
    /// Keep connections open between requests (false: close after every response, each
    /// carrying `Connection: close`).
    #[serde(default = "default_keepalive")]
    pub keepalive: bool,
    /// Listen with TLS (TLSv1.2 and TLSv1.3) with these files (None: plain HTTP).
    #[serde(default)]
    pub tls: Option<TlsFiles>,
    /// Speak HTTP/2: over TLS by ALPN (h2, HTTP/1.1 still offered), in cleartext by prior
    /// knowledge (h2c: nginx then speaks only HTTP/2 on the port).
    #[serde(default)]
    pub http2: bool,
}

/// nginx 1.25.1 replaced `listen ... http2` with the `http2 on;` directive.
const HTTP2_DIRECTIVE_SINCE: (u32, u32, u32) = (1, 25, 1);

/// The version `nginx -v` prints ("nginx version: nginx/1.22.1"), as numbers.
fn version(binary: &str) -> Result<(u32, u32, u32), String> {
    let out = Command::new(binary)
        .arg("-v")
        .output()
        .map_err(|e| format!("{binary} -v: {e} (`scripts/nginx install` installs nginx-light)"))?;
    let text = String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    parse_version(&text).ok_or_else(|| format!("{binary} -v: no version in {text:?}"))
}

fn parse_version(text: &str) -> Option<(u32, u32, u32)> {
    let v = text.split("nginx/").nth(1)?;
    let mut parts = v
        .split(|c: char| !c.is_ascii_digit())
        .take(3)
        .map(|p| p.parse::<u32>().ok());
    Some((parts.next()??, parts.next()??, parts.next()??))
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub(super) struct ServerConfig {
    nginx: NginxConfig,
}

pub fn serve(opts: &ServeOptions) -> Result<(), String> {
    opts.not_framed()?;
    if opts.server.is_null() {
        return Err("http has no server of its own: give server.nginx, or point load.target at yours".into());
    }
    let cfg: ServerConfig = super::super::parse(&opts.server, "server")?;
    let mut n = cfg.nginx;
    if !(1..=MAX_WORKERS).contains(&n.workers) {
        return Err(format!("server.nginx.workers must be 1..={MAX_WORKERS}"));
    }
    if let Some(tls) = &mut n.tls {
        resolve(tls)?;
    }
    // How this nginx turns HTTP/2 on (its version decides).
    let directive = n.http2 && version(&n.binary)? >= HTTP2_DIRECTIVE_SINCE;
    let dir = std::path::Path::new(&n.dir);
    std::fs::create_dir_all(dir.join("tmp")).map_err(|e| format!("{}: {e}", dir.display()))?;
    let mut last_err = String::new();
    for _ in 0..PORT_TRIES {
        let port = free_port()?;
        let conf = dir.join("nginx.conf");
        std::fs::write(&conf, config(&n, port, directive)).map_err(|e| format!("{}: {e}", conf.display()))?;
        // What nginx says before its error log is open (a bad config) lands here.
        let stderr = std::fs::File::create(dir.join("error.log")).map_err(|e| e.to_string())?;
        let mut child = Command::new(&n.binary)
            .arg("-p")
            .arg(dir)
            .arg("-c")
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::from(stderr))
            .process_group(0)
            .spawn()
            .map_err(|e| {
                format!(
                    "starting {}: {e} (`scripts/nginx install` installs nginx-light)",
                    n.binary
                )
            })?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        match wait_accepting(&mut child, addr, START_TIMEOUT_NS) {
            Ok(()) => return supervise(child, addr, dir),
            Err(e) => {
                stop(&mut child, STOP_TIMEOUT_NS);
                last_err = format!("{e}: {}", log_tail(dir));
            }
        }
    }
    Err(format!("nginx did not start: {last_err}"))
}

/// The TLS files as absolute paths that can be read. nginx would take a relative path from
/// its own prefix, and a `$` in a path for a variable; a missing file is named before nginx
/// starts.
fn resolve(tls: &mut TlsFiles) -> Result<(), String> {
    for (what, path) in [("cert", &mut tls.cert), ("key", &mut tls.key)] {
        let err = |e: &dyn std::fmt::Display| format!("server.nginx.tls.{what}: {path}: {e}");
        if path.contains('$') {
            return Err(err(&"nginx would read `$` as a variable"));
        }
        let full = std::path::absolute(&*path).map_err(|e| err(&e))?;
        std::fs::File::open(&full).map_err(|e| err(&e))?;
        *path = full.to_string_lossy().into_owned();
    }
    Ok(())
}

/// A string in nginx's config syntax: double-quoted, `"` and `\` escaped.
fn quoted(text: &str) -> String {
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}

/// The config: no files, answers from the config, Server-Timing on every response.
/// `directive`: HTTP/2 is turned on with `http2 on;` (nginx 1.25.1 and later), else with
/// the `listen` parameter.
fn config(n: &NginxConfig, port: u16, directive: bool) -> String {
    let dir = &n.dir;
    let keepalive = if n.keepalive {
        "keepalive_requests 1000000;\n    keepalive_timeout 75s;"
    } else {
        "# No keep-alive: every response carries Connection: close.\n    keepalive_timeout 0;"
    };
    let (ssl, tls) = n.tls.as_ref().map_or((String::new(), String::new()), |t| {
        (
            " ssl".into(),
            format!(
                "\n        ssl_certificate {};\n        ssl_certificate_key {};\n        \
                 ssl_protocols TLSv1.2 TLSv1.3;",
                quoted(&t.cert),
                quoted(&t.key)
            ),
        )
    });
    let (listen_http2, http2) = match (n.http2, directive) {
        (false, _) => ("", ""),
        (true, true) => ("", "\n        http2 on;"),
        (true, false) => (" http2", ""),
    };
    let affinity = n.cpu.map_or(String::new(), |cpu| {
        // One bit mask, the same CPU for every worker.
        let mask = format!("1{}", "0".repeat(cpu as usize));
        format!(
            "worker_cpu_affinity {};\n",
            vec![mask; n.workers as usize].join(" ")
        )
    });
    format!(
        r#"# Written by knee-node serve http (one point's nginx).
worker_processes {workers};
{affinity}daemon off;
pid {dir}/nginx.pid;
error_log {dir}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {dir}/tmp/body;
    proxy_temp_path {dir}/tmp/proxy;
    fastcgi_temp_path {dir}/tmp/fastcgi;
    uwsgi_temp_path {dir}/tmp/uwsgi;
    scgi_temp_path {dir}/tmp/scgi;
    {keepalive}
    # $request_time is seconds with ms resolution ("0.003"): whole ms for Server-Timing.
    map $request_time $knee_request_ms {{
        "~^0\.0{{0,2}}(?<ms>\d+)$" $ms;
        "~^(?<s>\d+)\.(?<ms>\d+)$" $s$ms;
    }}
    server {{
        listen 127.0.0.1:{port}{ssl}{listen_http2};{http2}{tls}
        add_header Server-Timing "app;dur=$knee_request_ms" always;
        location = /status/201 {{ return 201 "created\n"; }}
        location = /status/204 {{ return 204; }}
        location = /status/500 {{ return 500 "failed\n"; }}
        location = /status/503 {{ return 503 "unavailable\n"; }}
        location = /close {{ keepalive_timeout 0; return 200 "closing\n"; }}
        # No files: a worker running as another user needs no access to the folder.
        location = / {{ return 200 "hello from nginx\n"; }}
        location / {{ return 404 "not found\n"; }}
    }}
}}
"#,
        workers = n.workers,
    )
}

fn free_port() -> Result<u16, String> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("finding a free port: {e}"))?;
    Ok(l.local_addr().map_err(|e| e.to_string())?.port())
}

fn wait_accepting(child: &mut Child, addr: SocketAddr, timeout_ns: u64) -> Result<(), String> {
    let deadline = clock::now_ns() + timeout_ns;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("nginx exited ({status})"));
        }
        if TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_ok() {
            return Ok(());
        }
        if clock::now_ns() >= deadline {
            return Err(format!(
                "nginx did not accept connections within {} s",
                timeout_ns as f64 / 1e9
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn supervise(mut child: Child, addr: SocketAddr, dir: &std::path::Path) -> Result<(), String> {
    let mut life = Lifecycle::ready(addr, Stop::default());
    loop {
        if let Some(end) = life.tick(clock::now_ns(), || Stats::<NoExtra> {
            t_ns: clock::now_ns(),
            ..Default::default()
        }) {
            stop(&mut child, STOP_TIMEOUT_NS);
            return end;
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("nginx exited ({status}): {}", log_tail(dir)));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// SIGQUIT (nginx finishes what is in flight), then SIGKILL to its process group once
/// `timeout_ns` has passed (or once the master is gone).
fn stop(child: &mut Child, timeout_ns: u64) {
    let pid = child.id() as libc::pid_t;
    // SAFETY: signalling our own child's process group (set at spawn); no memory involved.
    unsafe { libc::kill(-pid, libc::SIGQUIT) };
    let deadline = clock::now_ns() + timeout_ns;
    while clock::now_ns() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            // Workers may still be finishing: the group goes with the master.
            // SAFETY: as above.
            unsafe { libc::kill(-pid, libc::SIGKILL) };
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    // SAFETY: as above.
    unsafe { libc::kill(-pid, libc::SIGKILL) };
    let _ = child.wait();
}

fn log_tail(dir: &std::path::Path) -> String {
    let Ok(mut f) = std::fs::File::open(dir.join("error.log")) else {
        return "no error log".into();
    };
    let len = f.metadata().map_or(0, |m| m.len());
    let mut text = String::new();
    let _ = std::io::Seek::seek(
        &mut f,
        std::io::SeekFrom::Start(len.saturating_sub(LOG_TAIL_BYTES)),
    );
    let _ = f.take(LOG_TAIL_BYTES).read_to_string(&mut text);
    text.trim().replace('\n', " | ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    /// A child in its own process group, as nginx is started.
    fn child(script: &str) -> Child {
        Command::new("sh")
            .arg("-c")
            .arg(script)
            .stdin(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap()
    }

    fn parsed(json: serde_json::Value) -> Result<NginxConfig, String> {
        serde_json::from_value(json).map_err(|e| e.to_string())
    }

    #[test]
    fn keepalive_is_on_and_tls_off_by_default() {
        let n = parsed(serde_json::json!({"dir": "/x"})).unwrap();
        assert!(n.keepalive && n.tls.is_none());
        let conf = config(&n, 8080, false);
        assert!(conf.contains("keepalive_requests 1000000;\n    keepalive_timeout 75s;"));
        assert!(conf.contains("listen 127.0.0.1:8080;\n"), "{conf}");
        assert!(!conf.contains("ssl"), "{conf}");
    }

    #[test]
    fn without_keepalive_nginx_closes_after_every_response() {
        let n = parsed(serde_json::json!({"dir": "/x", "keepalive": false})).unwrap();
        let conf = config(&n, 8080, false);
        assert!(conf.contains("\n    keepalive_timeout 0;\n"), "{conf}");
        assert!(!conf.contains("keepalive_timeout 75s") && !conf.contains("keepalive_requests"));
    }

    #[test]
    fn tls_listens_with_ssl_and_the_files() {
        let tls = serde_json::json!({"cert": "/c/cert.pem", "key": "/c/my \"key\".pem"});
        let n = parsed(serde_json::json!({"dir": "/x", "tls": tls})).unwrap();
        let conf = config(&n, 8443, false);
        let server = "listen 127.0.0.1:8443 ssl;\n        ssl_certificate \"/c/cert.pem\";\n        \
                      ssl_certificate_key \"/c/my \\\"key\\\".pem\";\n        \
                      ssl_protocols TLSv1.2 TLSv1.3;\n        add_header";
        assert!(conf.contains(server), "{conf}");
        assert!(conf.contains("keepalive_timeout 75s;"), "keep-alive stays on");
    }

    #[test]
    fn http2_by_the_listen_parameter_before_1_25_1_and_the_directive_after() {
        let n = parsed(serde_json::json!({"dir": "/x", "http2": true})).unwrap();
        let old = config(&n, 8080, false);
        assert!(old.contains("listen 127.0.0.1:8080 http2;\n"), "{old}");
        assert!(!old.contains("http2 on;"));
        let new = config(&n, 8080, true);
        assert!(
            new.contains("listen 127.0.0.1:8080;\n        http2 on;\n"),
            "{new}"
        );
        let off = config(&parsed(serde_json::json!({"dir": "/x"})).unwrap(), 8080, true);
        assert!(!off.contains("http2"), "{off}");
        assert_eq!(parse_version("nginx version: nginx/1.22.1\n"), Some((1, 22, 1)));
        assert_eq!(
            parse_version("nginx version: nginx/1.25.10 (Ubuntu)"),
            Some((1, 25, 10))
        );
        assert_eq!(parse_version("nope"), None);
        assert!((1, 22, 1) < HTTP2_DIRECTIVE_SINCE && (1, 26, 0) >= HTTP2_DIRECTIVE_SINCE);
    }

    #[test]
    fn unknown_keys_are_refused_in_tls_too() {
        let err = parsed(serde_json::json!({"dir": "/x", "keepalive": true, "tsl": {}})).unwrap_err();
        assert!(err.contains("unknown field `tsl`"), "{err}");
        let tls = serde_json::json!({"cert": "c", "key": "k", "ca": "a"});
        let err = parsed(serde_json::json!({"dir": "/x", "tls": tls})).unwrap_err();
        assert!(err.contains("unknown field `ca`"), "{err}");
        let err = parsed(serde_json::json!({"dir": "/x", "tls": {"cert": "c"}})).unwrap_err();
        assert!(err.contains("missing field `key`"), "{err}");
    }

    #[test]
    fn tls_files_become_absolute_and_must_exist() {
        let dir = crate::scratch::fresh_dir("nginx-tls");
        let cert = dir.join("cert.pem");
        std::fs::write(&cert, "x").unwrap();
        let cert = cert.to_str().unwrap().to_string();
        let mut ok = TlsFiles {
            cert: cert.clone(),
            key: cert.clone(),
        };
        resolve(&mut ok).unwrap();
        assert_eq!(
            ok,
            TlsFiles {
                cert: cert.clone(),
                key: cert.clone()
            }
        );
        let missing = dir.join("none.pem").to_str().unwrap().to_string();
        let mut bad = TlsFiles {
            cert: cert.clone(),
            key: missing.clone(),
        };
        let err = resolve(&mut bad).unwrap_err();
        assert!(
            err.starts_with(&format!("server.nginx.tls.key: {missing}: ")),
            "{err}"
        );
        let mut dollar = TlsFiles {
            cert: "/a/$host.pem".into(),
            key: cert,
        };
        assert!(resolve(&mut dollar).unwrap_err().contains("variable"));
        // cargo test runs in the crate's folder.
        let mut here = TlsFiles {
            cert: "Cargo.toml".into(),
            key: "Cargo.toml".into(),
        };
        resolve(&mut here).unwrap();
        let want = std::env::current_dir().unwrap().join("Cargo.toml");
        assert_eq!(here.cert, want.to_str().unwrap());
        let mut relative = TlsFiles {
            cert: "no-such-knee-cert.pem".into(),
            key: "k".into(),
        };
        let err = resolve(&mut relative).unwrap_err();
        assert!(
            err.starts_with("server.nginx.tls.cert: no-such-knee-cert.pem: "),
            "{err}"
        );
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn the_start_and_stop_timeouts_are_10_s_and_5_s() {
        assert_eq!(START_TIMEOUT_NS, 10_000 * MS);
        assert_eq!(STOP_TIMEOUT_NS, 5_000 * MS);
    }

    #[test]
    fn a_server_that_never_accepts_fails_the_start_after_its_timeout() {
        let mut c = child("exec sleep 30");
        let addr = {
            // A port nothing listens on: connects are refused at once.
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        let started = clock::now_ns();
        let err = wait_accepting(&mut c, addr, 300 * MS).unwrap_err();
        let took_ns = clock::now_ns() - started;
        assert_eq!(err, "nginx did not accept connections within 0.3 s");
        assert!(took_ns >= 300 * MS, "gave up after {took_ns} ns");
        assert!(c.try_wait().unwrap().is_none(), "the child is left to `stop`");
        stop(&mut c, 300 * MS);
        assert!(c.try_wait().unwrap().is_some());
    }

    #[test]
    fn a_server_that_ignores_sigquit_is_killed_after_the_stop_timeout() {
        // Ignored signals stay ignored across exec: `sleep` ignores SIGQUIT too.
        let mut c = child("trap '' QUIT; exec sleep 30");
        // Once `sleep` runs, the shell has set the trap.
        let comm = format!("/proc/{}/comm", c.id());
        for _ in 0..1000 {
            if std::fs::read_to_string(&comm).is_ok_and(|name| name.trim() == "sleep") {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let started = clock::now_ns();
        stop(&mut c, 300 * MS);
        let took_ns = clock::now_ns() - started;
        let status = c.try_wait().unwrap().expect("reaped by stop");
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(status.signal(), Some(libc::SIGKILL), "{status}");
        assert!(
            took_ns >= 300 * MS,
            "killed after {took_ns} ns, before the timeout"
        );
    }
}
