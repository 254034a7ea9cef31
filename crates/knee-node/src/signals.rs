//! Stop requests: SIGTERM/SIGINT set a flag that long-running loops poll, so a load
//! generator stops early but still flushes its samples and prints its summary.
//!
//! In a container (knee's docker hosts) the runner is not the node's parent: with
//! `KNEE_NODE_STDIN_LIFELINE=1` the node's stdin is its lifeline instead. When it ends (the
//! runner closed it, or died and the engine closed the attached stream) the node stops as
//! on SIGTERM, and exits after a grace period if it has not by then.
//!
//! A Swarm service has no stdin (knee's swarm hosts): its node's stdin is its control
//! connection (`control::take_control`), and the lifeline with it. It also carries the
//! start: with `KNEE_NODE_START_GATE=1` a load generator waits, before its start, for a line
//! `start UNIX_NS` on it and starts at that wall-clock time (`wait_for_start`), so that the
//! replicas of one service start together.

use std::io::{BufRead, Read};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// Installs the handler for SIGTERM and SIGINT, and asks the kernel to send SIGTERM to this
/// process when its parent (the runner) dies, so no node outlives the run that started it.
pub fn install() {
    if std::env::var_os(LIFELINE_ENV).is_some_and(|v| v == "1") {
        std::thread::spawn(|| lifeline(std::io::stdin().lock()));
    }
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        let handler = on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t;
        libc::signal(libc::SIGTERM, handler);
        libc::signal(libc::SIGINT, handler);
        #[cfg(target_os = "linux")]
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM as libc::c_ulong, 0, 0, 0);
    }
}

/// The environment variable that makes stdin the node's lifeline.
pub const LIFELINE_ENV: &str = "KNEE_NODE_STDIN_LIFELINE";
/// The environment variable that makes a load generator wait for its start line.
pub const START_GATE_ENV: &str = "KNEE_NODE_START_GATE";
/// The longest a gated generator waits for its start line, then for its start time: the
/// runner gives it within seconds of the replicas' start; beyond, something is broken.
const START_WAIT_MAX_NS: u64 = 120_000_000_000;
/// A lifeline line longer than this is not a command (the longest is `start` and 20 digits).
const MAX_LIFELINE_LINE_BYTES: u64 = 64;

/// The wall-clock start (CLOCK_REALTIME ns) given on the lifeline; 0: none yet.
static START_AT_UNIX_NS: AtomicU64 = AtomicU64::new(0);
/// How long a node whose lifeline ended may take to stop by itself (a runner's own grace).
const LIFELINE_GRACE: std::time::Duration = std::time::Duration::from_secs(3);

/// Reads the lifeline to its end (a `start UNIX_NS` line is noted, anything else ignored),
/// then stops the node.
fn lifeline(input: impl BufRead) {
    read_lifeline(input);
    STOP.store(true, Ordering::SeqCst);
    std::thread::sleep(LIFELINE_GRACE);
    crate::stdio::log("the lifeline ended and the node did not stop: exiting");
    std::process::exit(143);
}

/// Reads lines until the end of input, noting the first start time.
fn read_lifeline(mut input: impl BufRead) {
    let mut line = Vec::new();
    loop {
        line.clear();
        match input
            .by_ref()
            .take(MAX_LIFELINE_LINE_BYTES)
            .read_until(b'\n', &mut line)
        {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if let Some(at) = parse_start(&line) {
            let _ = START_AT_UNIX_NS.compare_exchange(0, at, Ordering::SeqCst, Ordering::SeqCst);
        }
    }
}

/// The time of a `start UNIX_NS` line.
fn parse_start(line: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(line).ok()?.trim();
    text.strip_prefix("start ")?
        .trim()
        .parse()
        .ok()
        .filter(|&at| at > 0)
}

/// With `KNEE_NODE_START_GATE=1`: waits for the lifeline's start line, then until its
/// wall-clock time. Returns early if a stop was requested; an error if no start came.
pub fn wait_for_start() -> Result<(), String> {
    if std::env::var_os(START_GATE_ENV).is_none_or(|v| v != "1") {
        return Ok(());
    }
    let began = crate::clock::now_ns();
    let at = loop {
        let at = START_AT_UNIX_NS.load(Ordering::SeqCst);
        if at != 0 {
            break at;
        }
        if stop_requested() {
            return Ok(());
        }
        if crate::clock::now_ns() - began > START_WAIT_MAX_NS {
            return Err(format!(
                "no start line on the lifeline within {} s",
                START_WAIT_MAX_NS / 1_000_000_000
            ));
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    };
    let ahead_ns = at.saturating_sub(crate::clock::realtime_ns());
    if ahead_ns > START_WAIT_MAX_NS {
        return Err(format!(
            "start time {at} is more than {} s ahead",
            START_WAIT_MAX_NS / 1_000_000_000
        ));
    }
    crate::clock::wait_until_unless_stopped(crate::clock::now_ns() + ahead_ns);
    Ok(())
}

pub fn stop_requested() -> bool {
    STOP.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_start_line_gives_its_time() {
        assert_eq!(
            parse_start(b"start 1700000000123456789\n"),
            Some(1_700_000_000_123_456_789)
        );
        assert_eq!(parse_start(b"start 0\n"), None);
        assert_eq!(parse_start(b"stop\n"), None);
        assert_eq!(parse_start(b"start soon\n"), None);
    }

    #[test]
    fn the_lifeline_notes_the_first_start_and_reads_to_its_end() {
        read_lifeline(&b"hello\nstart 42\nstart 43\n"[..]);
        assert_eq!(START_AT_UNIX_NS.load(Ordering::SeqCst), 42);
    }

    #[test]
    fn an_overlong_line_is_read_in_pieces_and_ignored() {
        let long = [b'9'; 1000];
        read_lifeline(&long[..]); // ends without a start and without growing a buffer
    }
}
