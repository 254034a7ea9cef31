//! `knee-node clock`: answers each line read on stdin with this host's `CLOCK_MONOTONIC` in
//! ns, so the runner can estimate the offset of a remote host's clock from round trips
//! (`knee.hosts.ssh`, `docs/node-protocol.md`).
//!
//! Over a network (knee's swarm hosts): a node started with `KNEE_NODE_CLOCK_LISTEN=ADDR`
//! answers the same protocol on TCP (`serve_tcp`), and `knee-node clock --dial ADDR`, run
//! on that network, relays its stdin's lines there and the replies to its stdout (`dial`),
//! so that the round trips cross the network.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::time::Duration;

use crate::clock;

/// Longest request line: the runner sends empty lines; anything longer is not a request.
pub const MAX_LINE_BYTES: usize = 64;
/// The environment variable naming the TCP address a node answers the clock protocol on.
pub const LISTEN_ENV: &str = "KNEE_NODE_CLOCK_LISTEN";
/// Connections `serve_tcp` answers, one after the other, before it stops: one clock check
/// per node, and a few retries.
pub const MAX_TCP_CHECKS: usize = 4;
/// How long a dialed clock may take to connect, and to answer a line: it is on the same
/// network; beyond, the check fails rather than waiting.
const DIAL_TIMEOUT: Duration = Duration::from_secs(10);

/// Answers the clock protocol on `ADDR` of `KNEE_NODE_CLOCK_LISTEN`, if set, in a thread of
/// its own (`MAX_TCP_CHECKS` connections). A bad address ends the node (exit 2).
pub fn listen_from_env() {
    let Some(addr) = std::env::var_os(LISTEN_ENV) else {
        return;
    };
    let addr = addr.to_string_lossy().into_owned();
    match TcpListener::bind(&addr) {
        Ok(listener) => {
            std::thread::spawn(move || serve_tcp(&listener, MAX_TCP_CHECKS));
        }
        Err(e) => {
            crate::stdio::log(&format!("{LISTEN_ENV}={addr}: {e}: exiting"));
            std::process::exit(2);
        }
    }
}

/// Answers `max` connections of `listener`, one at a time, each until its end.
pub fn serve_tcp(listener: &TcpListener, max: usize) {
    for stream in listener.incoming().take(max) {
        let Ok(stream) = stream else { continue };
        // Replies are one short line each: sent at once, not held back by Nagle.
        let _ = stream.set_nodelay(true);
        let Ok(reader) = stream.try_clone() else { continue };
        if let Err(e) = run(BufReader::new(reader), &stream) {
            crate::stdio::log(&e);
        }
    }
}

/// Relays each line of `input` to the clock answering at `addr` and each reply to
/// `output`, until the end of `input`.
pub fn dial(addr: &str, mut input: impl BufRead, mut output: impl Write) -> Result<(), String> {
    let target = addr
        .to_socket_addrs()
        .map_err(|e| format!("clock: {addr}: {e}"))?
        .next()
        .ok_or_else(|| format!("clock: {addr}: no address"))?;
    let stream = TcpStream::connect_timeout(&target, DIAL_TIMEOUT)
        .map_err(|e| format!("clock: connecting to {addr}: {e}"))?;
    let _ = stream.set_nodelay(true);
    stream
        .set_read_timeout(Some(DIAL_TIMEOUT))
        .map_err(|e| format!("clock: {addr}: {e}"))?;
    let mut replies = BufReader::new(stream.try_clone().map_err(|e| format!("clock: {addr}: {e}"))?);
    let mut writer = &stream;
    let (mut line, mut reply) = (Vec::with_capacity(MAX_LINE_BYTES), Vec::new());
    loop {
        line.clear();
        let n = read_line(&mut input, &mut line, "stdin")?;
        if n == 0 {
            return Ok(());
        }
        if line.last() != Some(&b'\n') {
            line.push(b'\n');
        }
        writer
            .write_all(&line)
            .map_err(|e| format!("clock: writing to {addr}: {e}"))?;
        reply.clear();
        read_line(&mut replies, &mut reply, addr)?;
        if reply.last() != Some(&b'\n') {
            return Err(format!("clock: {addr} ended or sent no line"));
        }
        output
            .write_all(&reply)
            .and_then(|()| output.flush())
            .map_err(|e| format!("clock: writing stdout: {e}"))?;
    }
}

/// One line of `input` into `line` (its newline kept), MAX_LINE_BYTES at most; 0 at the end.
fn read_line(input: &mut impl BufRead, line: &mut Vec<u8>, from: &str) -> Result<usize, String> {
    input
        .by_ref()
        .take(MAX_LINE_BYTES as u64)
        .read_until(b'\n', line)
        .map_err(|e| format!("clock: reading {from}: {e}"))
}

/// Replies to every line of `input` with the time it was read, until end of input.
pub fn run(mut input: impl BufRead, mut output: impl Write) -> Result<(), String> {
    let mut line = Vec::with_capacity(MAX_LINE_BYTES);
    loop {
        line.clear();
        let n = read_line(&mut input, &mut line, "stdin")?;
        // Read the clock first: the reply's time is when the request arrived.
        let now_ns = clock::now_ns();
        if n == 0 {
            return Ok(());
        }
        if line.last() != Some(&b'\n') && n == MAX_LINE_BYTES {
            return Err(format!("clock: a line longer than {MAX_LINE_BYTES} bytes"));
        }
        writeln!(output, "{now_ns}")
            .and_then(|()| output.flush())
            .map_err(|e| format!("clock: writing stdout: {e}"))?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `out` is `n` lines, each a time in ns, none before the one above it.
    fn assert_increasing_times(out: &[u8], n: usize) {
        let times: Vec<u64> = std::str::from_utf8(out)
            .expect("utf-8")
            .lines()
            .map(|l| l.parse().expect("a number"))
            .collect();
        assert_eq!(times.len(), n);
        assert!(times.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn one_increasing_time_per_line() {
        let mut out = Vec::new();
        run(&b"\n\nx\n"[..], &mut out).expect("three lines");
        assert_increasing_times(&out, 3);
    }

    #[test]
    fn a_last_line_without_newline_is_answered() {
        let mut out = Vec::new();
        run(&b"\nend"[..], &mut out).expect("two lines");
        assert_eq!(out.iter().filter(|&&b| b == b'\n').count(), 2);
    }

    #[test]
    fn a_dial_relays_each_line_to_a_tcp_clock_and_its_reply() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let server = std::thread::spawn(move || serve_tcp(&listener, 1));
        let mut out = Vec::new();
        dial(&addr, &b"\n\n\n"[..], &mut out).expect("three round trips");
        assert_increasing_times(&out, 3);
        server.join().expect("the server's one connection ends");
    }

    #[test]
    fn a_dial_to_no_clock_fails_in_one_line() {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let err = dial(&format!("127.0.0.1:{port}"), &b"\n"[..], Vec::new()).expect_err("none");
        assert!(
            err.starts_with("clock: connecting to") && !err.contains('\n'),
            "{err}"
        );
    }

    #[test]
    fn an_overlong_line_is_refused() {
        let long = [b'a'; MAX_LINE_BYTES + 10];
        let err = run(&long[..], Vec::new()).expect_err("too long");
        assert!(err.contains("longer than"), "{err}");
    }
}
