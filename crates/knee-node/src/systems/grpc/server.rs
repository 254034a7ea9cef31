//! `knee-node serve grpc` runs the grpc-go test server (`tests/grpc_apps/go_grpc`, built
//! by `scripts/grpc-servers install`) for one point, as `serve http` runs an nginx:
//! knee-node is its supervisor (`ready` once it accepts connections on 127.0.0.1, a node
//! failure if it exits, SIGTERM then SIGKILL with the node). Its capacity is known by
//! construction: `workers` calls at once, each `sleep_ms` long, `workers / sleep_ms` calls
//! a millisecond.

use std::io::BufRead;
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde::Deserialize;

use crate::clock;
use crate::events::{NoExtra, Stats};
use crate::serve::{Lifecycle, ServeOptions, Stop};
use crate::systems::http::TlsFiles;

/// Most calls the server serves at once (a config mistake beyond: one point's server).
pub const MAX_WORKERS: u32 = 4096;
/// Longest sleep of a call.
pub const MAX_SLEEP_MS: u32 = 60_000;
/// How long the server may take to say where it listens and accept a connection.
const START_TIMEOUT_NS: u64 = 10_000_000_000;
/// After SIGTERM (grpc-go's Stop closes every connection), how long before SIGKILL.
const STOP_TIMEOUT_NS: u64 = 5_000_000_000;

pub fn default_workers() -> u32 {
    4
}
pub fn default_sleep_ms() -> u32 {
    10
}
/// Where `scripts/grpc-servers install` puts the server: `$KNEE_CACHE_DIR/grpc-servers`,
/// else `$XDG_CACHE_HOME/knee/grpc-servers`, else `~/.cache/knee/grpc-servers`.
pub fn default_binary() -> String {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let cache = env("KNEE_CACHE_DIR")
        .or_else(|| env("XDG_CACHE_HOME").map(|c| format!("{c}/knee")))
        .or_else(|| env("HOME").map(|h| format!("{h}/.cache/knee")))
        .unwrap_or_else(|| "/tmp/knee-cache".into());
    format!("{cache}/grpc-servers/go_grpc")
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct GoServer {
    /// The server's binary (default: where `scripts/grpc-servers install` builds it).
    #[serde(default)]
    pub binary: Option<String>,
    #[serde(default = "default_workers")]
    pub workers: u32,
    /// A call's sleep when its request's `sleep_ms` is 0.
    #[serde(default = "default_sleep_ms")]
    pub sleep_ms: u32,
    /// A certificate and its key: the server listens with TLS.
    #[serde(default)]
    pub tls: Option<TlsFiles>,
}

#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    pub go_grpc: GoServer,
}

pub fn serve(opts: &ServeOptions) -> Result<(), String> {
    opts.not_framed()?;
    if opts.server.is_null() {
        return Err(
            "grpc has no server of its own: give server.go_grpc, or point load.target at yours".into(),
        );
    }
    let cfg: ServerConfig = super::super::parse(&opts.server, "server")?;
    let g = cfg.go_grpc;
    if !(1..=MAX_WORKERS).contains(&g.workers) {
        return Err(format!("server.go_grpc.workers must be 1..={MAX_WORKERS}"));
    }
    if !(1..=MAX_SLEEP_MS).contains(&g.sleep_ms) {
        return Err(format!("server.go_grpc.sleep_ms must be 1..={MAX_SLEEP_MS}"));
    }
    let binary = g.binary.clone().unwrap_or_else(default_binary);
    let mut cmd = Command::new(&binary);
    cmd.args(["-listen", "127.0.0.1:0"])
        .args(["-workers", &g.workers.to_string()])
        .args(["-sleep-ms", &g.sleep_ms.to_string()]);
    if let Some(tls) = &g.tls {
        cmd.args(["-cert", &tls.cert, "-key", &tls.key]);
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("starting {binary}: {e} (`scripts/grpc-servers install` builds it)"))?;
    match listening(&mut child) {
        Ok(addr) => supervise(child, addr),
        Err(e) => {
            stop(&mut child);
            Err(format!("the grpc-go server did not start: {e}"))
        }
    }
}

/// Reads the server's `listening HOST:PORT` line, then waits for it to accept a connection.
fn listening(child: &mut Child) -> Result<SocketAddr, String> {
    let stdout = child.stdout.take().ok_or("no stdout")?;
    let (tx, rx) = std::sync::mpsc::channel();
    // A thread, so that a server that never prints is timed out instead of waited for.
    std::thread::spawn(move || {
        let mut line = String::new();
        let read = std::io::BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(read.map(|_| line));
    });
    let line = rx
        .recv_timeout(Duration::from_nanos(START_TIMEOUT_NS))
        .map_err(|_| "it did not say where it listens within 10 s".to_string())?
        .map_err(|e| e.to_string())?;
    let addr: SocketAddr = line
        .trim()
        .strip_prefix("listening ")
        .and_then(|a| a.parse().ok())
        .ok_or_else(|| match child.try_wait() {
            Ok(Some(status)) => format!("it exited ({status})"),
            _ => format!("unexpected first line {:?}", line.trim()),
        })?;
    let deadline = clock::now_ns() + START_TIMEOUT_NS;
    while TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_err() {
        if clock::now_ns() >= deadline {
            return Err(format!("it did not accept connections on {addr} within 10 s"));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(addr)
}

fn supervise(mut child: Child, addr: SocketAddr) -> Result<(), String> {
    let mut life = Lifecycle::ready(addr, Stop::default());
    loop {
        if let Some(end) = life.tick(clock::now_ns(), || Stats::<NoExtra> {
            t_ns: clock::now_ns(),
            ..Default::default()
        }) {
            stop(&mut child);
            return end;
        }
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("the grpc-go server exited ({status})"));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// SIGTERM to the server's process group, SIGKILL after `STOP_TIMEOUT_NS`.
fn stop(child: &mut Child) {
    let pid = child.id() as libc::pid_t;
    // SAFETY: signalling our own child's process group (set at spawn); no memory involved.
    unsafe { libc::kill(-pid, libc::SIGTERM) };
    let deadline = clock::now_ns() + STOP_TIMEOUT_NS;
    while clock::now_ns() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    // SAFETY: as above.
    unsafe { libc::kill(-pid, libc::SIGKILL) };
    let _ = child.wait();
}
