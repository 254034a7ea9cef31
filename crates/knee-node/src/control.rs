//! The node protocol over a network, for knee's swarm hosts: a task has no stdin and no
//! attached stdout, and may run on another machine than the runner's.
//!
//! - A node started with `KNEE_NODE_CONTROL_LISTEN=ADDR` accepts ONE connection there
//!   (`take_control`) and makes it its stdin and stdout: its first line is the node's config
//!   (JSON), the rest of its input the lifeline (`KNEE_NODE_STDIN_LIFELINE=1`, with the
//!   generators' `start UNIX_NS` line), and the node's stdout lines go back on it.
//! - At its end, the node pushes each file of `KNEE_NODE_PUSH_DIR` (its samples, histogram,
//!   outputs) on that stdout (`push_files`): a line `{"event":"file","name":N,"bytes":B}`,
//!   then B bytes. The task's agent (python/knee/hosts/swarm_task.py) writes them into the
//!   run's folders and passes the other lines on.
//! - `knee-node relay --dial ADDR`, in a container on the same network, pumps its stdin to
//!   ADDR and ADDR's bytes to its stdout (`relay`): the agent's pipe to the node. The end of
//!   its stdin half-closes the connection (the node's lifeline ends; its files still come).

use std::io::{BufRead, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::{Duration, Instant};

/// The environment variable naming the address a node takes its control connection on.
pub const LISTEN_ENV: &str = "KNEE_NODE_CONTROL_LISTEN";
/// The environment variable naming the folder whose files a node pushes at its end.
pub const PUSH_DIR_ENV: &str = "KNEE_NODE_PUSH_DIR";
/// How long a node waits for its control connection, and a relay for the node to listen:
/// the agent dials as soon as the task has an address; beyond, something is broken.
const CONNECT_WAIT: Duration = Duration::from_secs(60);
/// The longest config line: configs are a few kB (a runner passes them as one argument).
const MAX_CONFIG_BYTES: u64 = 1 << 20;
/// Files pushed at most (a node writes a samples file, a histogram and a few outputs).
const MAX_PUSHED_FILES: usize = 64;
/// Retry interval of the waits above.
const POLL: Duration = Duration::from_millis(20);

/// With `KNEE_NODE_CONTROL_LISTEN` set: accepts one connection, makes it stdin and stdout,
/// and returns the config read as its first line. None without the variable.
pub fn take_control() -> Result<Option<serde_json::Value>, String> {
    let Some(addr) = std::env::var_os(LISTEN_ENV) else {
        return Ok(None);
    };
    let addr = addr.to_string_lossy().into_owned();
    let listener = TcpListener::bind(&addr).map_err(|e| format!("{LISTEN_ENV}={addr}: {e}"))?;
    let stream =
        accept_within(&listener, CONNECT_WAIT).map_err(|e| format!("control connection on {addr}: {e}"))?;
    let _ = stream.set_nodelay(true); // event lines go at once
    let fd = stream.as_raw_fd();
    // SAFETY: dup2 onto the standard descriptors; `stream` stays open until they are set.
    let ok = unsafe { libc::dup2(fd, 0) == 0 && libc::dup2(fd, 1) == 1 };
    if !ok {
        return Err(format!(
            "control connection: dup2: {}",
            std::io::Error::last_os_error()
        ));
    }
    drop(stream);
    let config = read_config(std::io::stdin().lock())?;
    Ok(Some(config))
}

fn accept_within(listener: &TcpListener, wait: Duration) -> std::io::Result<TcpStream> {
    listener.set_nonblocking(true)?;
    let deadline = Instant::now() + wait;
    loop {
        match listener.accept() {
            Ok((stream, _)) => {
                stream.set_nonblocking(false)?;
                return Ok(stream);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                std::thread::sleep(POLL);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                return Err(std::io::Error::new(e.kind(), "no connection in time"));
            }
            Err(e) => return Err(e),
        }
    }
}

/// The first line of `input`, as JSON.
fn read_config(input: impl BufRead) -> Result<serde_json::Value, String> {
    let mut line = Vec::new();
    input
        .take(MAX_CONFIG_BYTES)
        .read_until(b'\n', &mut line)
        .map_err(|e| format!("control connection: reading the config: {e}"))?;
    if line.last() != Some(&b'\n') {
        return Err(format!(
            "control connection: no config line (ended, or over {MAX_CONFIG_BYTES} bytes)"
        ));
    }
    serde_json::from_slice(&line).map_err(|e| format!("control connection: config: {e}"))
}

/// With `KNEE_NODE_PUSH_DIR` set: pushes its files (`push_files`) on stdout.
pub fn push_from_env() {
    let Some(dir) = std::env::var_os(PUSH_DIR_ENV) else {
        return;
    };
    let mut out = std::io::stdout().lock();
    if let Err(e) = push_files(Path::new(&dir), &mut out) {
        crate::stdio::log(&format!("pushing {}: {e}", Path::new(&dir).display()));
    }
}

/// Writes each regular file of `dir` (at most `MAX_PUSHED_FILES`, by name) to `out`: a
/// header line, then its bytes.
pub fn push_files(dir: &Path, out: &mut impl Write) -> std::io::Result<()> {
    let mut files: Vec<_> = std::fs::read_dir(dir)?
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .map(|e| e.path())
        .collect();
    files.sort();
    for path in files.into_iter().take(MAX_PUSHED_FILES) {
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let file = std::fs::File::open(&path)?;
        let bytes = file.metadata()?.len();
        let name_json = serde_json::Value::from(name);
        writeln!(
            out,
            "{{\"event\":\"file\",\"name\":{name_json},\"bytes\":{bytes}}}"
        )?;
        // Exactly the bytes announced, even if the file grew meanwhile.
        let copied = std::io::copy(&mut (&file).take(bytes), out)?;
        if copied != bytes {
            return Err(std::io::Error::other(format!("{name} shrank while pushed")));
        }
    }
    out.flush()
}

/// `knee-node relay --dial ADDR`: stdin to ADDR, ADDR to stdout, until ADDR ends.
pub fn relay(addr: &str) -> Result<(), String> {
    let stream = dial_within(addr, CONNECT_WAIT)?;
    let _ = stream.set_nodelay(true);
    let mut to_node = stream.try_clone().map_err(|e| format!("relay: {addr}: {e}"))?;
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut std::io::stdin().lock(), &mut to_node);
        // The end of the agent's pipe: the node's lifeline ends, its replies still come.
        let _ = to_node.shutdown(Shutdown::Write);
    });
    let mut from_node = &stream;
    let mut out = std::io::stdout().lock();
    let mut buf = [0u8; 64 * 1024];
    loop {
        let n = from_node
            .read(&mut buf)
            .map_err(|e| format!("relay: reading {addr}: {e}"))?;
        if n == 0 {
            return Ok(());
        }
        out.write_all(&buf[..n])
            .and_then(|()| out.flush())
            .map_err(|e| format!("relay: writing stdout: {e}"))?;
    }
}

/// Connects to `addr`, trying again until `wait` has passed (the node may not listen yet).
fn dial_within(addr: &str, wait: Duration) -> Result<TcpStream, String> {
    let deadline = Instant::now() + wait;
    loop {
        let target = addr
            .to_socket_addrs()
            .map_err(|e| format!("relay: {addr}: {e}"))?
            .next()
            .ok_or_else(|| format!("relay: {addr}: no address"))?;
        match TcpStream::connect_timeout(&target, POLL.max(Duration::from_millis(500))) {
            Ok(stream) => return Ok(stream),
            Err(e) if Instant::now() >= deadline => {
                return Err(format!("relay: connecting to {addr}: {e}"));
            }
            Err(_) => std::thread::sleep(POLL),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_is_the_first_line() {
        let input = &b"{\"a\": 1}\nstart 5\n"[..];
        assert_eq!(read_config(input).expect("a config"), serde_json::json!({"a": 1}));
        let err = read_config(&b"{\"a\": 1}"[..]).expect_err("no newline");
        assert!(err.contains("no config line"), "{err}");
        let err = read_config(&b"not json\n"[..]).expect_err("not JSON");
        assert!(err.starts_with("control connection: config:"), "{err}");
    }

    #[test]
    fn files_are_pushed_as_a_header_and_their_bytes() {
        let dir = std::env::temp_dir().join(format!("knee-push-test-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("sub")).expect("dir");
        std::fs::write(dir.join("b.bin"), [0u8, 1, 2]).expect("b");
        std::fs::write(dir.join("a.txt"), b"hello\n").expect("a");
        let mut out = Vec::new();
        push_files(&dir, &mut out).expect("pushed");
        std::fs::remove_dir_all(&dir).expect("cleanup");
        let mut expected = Vec::new();
        expected.extend_from_slice(b"{\"event\":\"file\",\"name\":\"a.txt\",\"bytes\":6}\nhello\n");
        expected.extend_from_slice(b"{\"event\":\"file\",\"name\":\"b.bin\",\"bytes\":3}\n");
        expected.extend_from_slice(&[0, 1, 2]);
        assert_eq!(out, expected); // the folder "sub" is not a file: not pushed
    }

    #[test]
    fn a_connection_is_accepted_within_the_wait_or_refused() {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let err = accept_within(&listener, Duration::from_millis(50)).expect_err("nobody");
        assert!(err.to_string().contains("no connection in time"), "{err}");
        let addr = listener.local_addr().expect("addr").to_string();
        let dialer = std::thread::spawn(move || dial_within(&addr, Duration::from_secs(5)));
        accept_within(&listener, Duration::from_secs(5)).expect("the dial");
        dialer.join().expect("thread").expect("dialed");
    }
}
