//! The node protocol over a network, for knee's swarm hosts: a task has no stdin and no
//! attached stdout, and may run on another machine than the runner's.
//!
//! - A node started with `KNEE_NODE_CONTROL_LISTEN=ADDR` accepts ONE connection there
//!   (`take_control`) and makes it its stdin and stdout: its first line is the node's config
//!   (JSON), the rest of its input the lifeline (`KNEE_NODE_STDIN_LIFELINE=1`, with the
//!   generators' `start UNIX_NS` line), and the node's stdout lines go back on it.
//! - The node pushes the new bytes of each file of `KNEE_NODE_PUSH_DIR` (its samples,
//!   histogram, outputs) on that stdout (`push_new`): before each `progress` line (its samples
//!   were just flushed) and at its end, so a task killed mid-point loses at most what a
//!   progress line would have pushed. Each frame is a line
//!   `{"event":"file","name":N,"offset":O,"bytes":B}`, then B bytes: the file's bytes from O.
//!   The task's agent (python/knee/hosts/swarm_task.py) appends them to its copy of the file
//!   in the run's folders and passes the other lines on.
//! - `knee-node relay --dial ADDR`, in a container on the same network, pumps its stdin to
//!   ADDR and ADDR's bytes to its stdout (`relay`): the agent's pipe to the node. The end of
//!   its stdin half-closes the connection (the node's lifeline ends; its files still come).

use std::collections::BTreeMap;
use std::io::{BufRead, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream, ToSocketAddrs};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The environment variable naming the address a node takes its control connection on.
pub const LISTEN_ENV: &str = "KNEE_NODE_CONTROL_LISTEN";
/// The environment variable naming the folder whose files a node pushes as they grow.
pub const PUSH_DIR_ENV: &str = "KNEE_NODE_PUSH_DIR";
/// How long a node waits for its control connection, and a relay for the node to listen:
/// the agent dials as soon as the task has an address; beyond, something is broken.
const CONNECT_WAIT: Duration = Duration::from_secs(60);
/// The longest config line: configs are a few kB (a runner passes them as one argument).
const MAX_CONFIG_BYTES: u64 = 1 << 20;
/// Files pushed at most (a node writes a samples file, a histogram and a few outputs); it
/// also bounds the table of offsets already sent.
const MAX_PUSHED_FILES: usize = 64;
/// A frame's bytes at most: the node's stdout is locked while a frame is written, so an event
/// line waits one frame at most (1 MiB: milliseconds over the overlay), and a file that grew
/// by more goes in several frames.
const MAX_FRAME_BYTES: u64 = 1 << 20;
/// What a file's offset is set to once it shrank: not pushed again (its copy would be wrong).
const SHRUNK: u64 = u64::MAX;
/// Each pushed file's bytes already sent, by name.
static SENT: Mutex<BTreeMap<String, u64>> = Mutex::new(BTreeMap::new());
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

/// With `KNEE_NODE_PUSH_DIR` set: pushes what its files gained since the last push
/// (`push_frames`) on stdout, each frame written whole under stdout's lock (the one event
/// lines take), so no line lands inside a frame. Called before each `progress` line and at
/// the node's end; without the variable it does nothing.
pub fn push_new() {
    let Some(dir) = std::env::var_os(PUSH_DIR_ENV) else {
        return;
    };
    let mut sent = SENT.lock().unwrap_or_else(|p| p.into_inner());
    let write = |frame: &[u8]| {
        let mut out = std::io::stdout().lock();
        out.write_all(frame).and_then(|()| out.flush())
    };
    if let Err(e) = push_frames(Path::new(&dir), &mut sent, write) {
        crate::stdio::log(&format!("pushing {}: {e}", Path::new(&dir).display()));
    }
}

/// For each regular file of `dir` (at most `MAX_PUSHED_FILES`, by name), the bytes past
/// `sent[name]` as frames of `MAX_FRAME_BYTES` at most, each a header line and its bytes,
/// given to `write`; `sent` follows. A file that shrank is logged once and left.
pub fn push_frames(
    dir: &Path,
    sent: &mut BTreeMap<String, u64>,
    mut write: impl FnMut(&[u8]) -> std::io::Result<()>,
) -> std::io::Result<()> {
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
        let len = file.metadata()?.len();
        let offset = sent.entry(name.to_string()).or_insert(0);
        if *offset == SHRUNK {
            continue;
        }
        if len < *offset {
            crate::stdio::log(&format!(
                "{name} shrank from {} to {len} bytes after it was pushed: not pushed further",
                *offset
            ));
            *offset = SHRUNK;
            continue;
        }
        let name_json = serde_json::Value::from(name);
        while *offset < len {
            let bytes = (len - *offset).min(MAX_FRAME_BYTES);
            let mut frame = format!(
                "{{\"event\":\"file\",\"name\":{name_json},\"offset\":{},\"bytes\":{bytes}}}\n",
                *offset
            )
            .into_bytes();
            let head = frame.len();
            frame.resize(head + bytes as usize, 0);
            // Exactly the bytes announced: a file that shrank meanwhile is an error.
            file.read_exact_at(&mut frame[head..], *offset)?;
            write(&frame)?;
            *offset += bytes;
        }
    }
    Ok(())
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

    fn frames_of(dir: &Path, sent: &mut BTreeMap<String, u64>) -> Vec<u8> {
        let mut out = Vec::new();
        push_frames(dir, sent, |frame| {
            out.extend_from_slice(frame);
            Ok(())
        })
        .expect("pushed");
        out
    }

    #[test]
    fn files_are_pushed_as_frames_of_their_new_bytes() {
        let dir = std::env::temp_dir().join(format!("knee-push-test-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("sub")).expect("dir");
        std::fs::write(dir.join("b.bin"), [0u8, 1, 2]).expect("b");
        std::fs::write(dir.join("a.txt"), b"hello\n").expect("a");
        let mut sent = BTreeMap::new();
        let first = frames_of(&dir, &mut sent);
        let mut expected = Vec::new();
        expected
            .extend_from_slice(b"{\"event\":\"file\",\"name\":\"a.txt\",\"offset\":0,\"bytes\":6}\nhello\n");
        expected.extend_from_slice(b"{\"event\":\"file\",\"name\":\"b.bin\",\"offset\":0,\"bytes\":3}\n");
        expected.extend_from_slice(&[0, 1, 2]);
        assert_eq!(first, expected); // the folder "sub" is not a file: not pushed
                                     // Nothing new: nothing sent. Then a file grows: only its new bytes, from its offset.
        assert!(frames_of(&dir, &mut sent).is_empty());
        std::fs::OpenOptions::new()
            .append(true)
            .open(dir.join("b.bin"))
            .and_then(|mut f| f.write_all(&[3, 4]))
            .expect("grown");
        let grown = frames_of(&dir, &mut sent);
        let mut expected = b"{\"event\":\"file\",\"name\":\"b.bin\",\"offset\":3,\"bytes\":2}\n".to_vec();
        expected.extend_from_slice(&[3, 4]);
        assert_eq!(grown, expected);
        assert_eq!(sent.get("b.bin"), Some(&5));
        // A file that shrank is left (its copy cannot follow), the others still pushed.
        std::fs::write(dir.join("a.txt"), b"hi").expect("rewritten");
        std::fs::write(dir.join("c.txt"), b"c").expect("c");
        let after = frames_of(&dir, &mut sent);
        assert_eq!(
            after,
            b"{\"event\":\"file\",\"name\":\"c.txt\",\"offset\":0,\"bytes\":1}\nc"
        );
        assert_eq!(sent.get("a.txt"), Some(&SHRUNK));
        std::fs::write(dir.join("a.txt"), b"hello again\n").expect("grown past");
        assert!(frames_of(&dir, &mut sent).is_empty());
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    #[test]
    fn a_large_file_goes_in_bounded_frames() {
        let dir = std::env::temp_dir().join(format!("knee-push-large-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let size = 2 * MAX_FRAME_BYTES as usize + 5;
        let bytes: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
        std::fs::write(dir.join("s.bin"), &bytes).expect("s");
        let mut frames = Vec::new();
        push_frames(&dir, &mut BTreeMap::new(), |frame| {
            frames.push(frame.to_vec());
            Ok(())
        })
        .expect("pushed");
        std::fs::remove_dir_all(&dir).expect("cleanup");
        assert_eq!(frames.len(), 3);
        let mut copy = Vec::new();
        for (i, frame) in frames.iter().enumerate() {
            let head = frame.iter().position(|&b| b == b'\n').expect("a header") + 1;
            let header: serde_json::Value = serde_json::from_slice(&frame[..head]).expect("JSON");
            assert_eq!(header["offset"], copy.len() as u64);
            let n = header["bytes"].as_u64().expect("bytes");
            assert!(
                n <= MAX_FRAME_BYTES && n == (frame.len() - head) as u64,
                "frame {i}"
            );
            copy.extend_from_slice(&frame[head..]);
        }
        assert_eq!(copy, bytes);
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
