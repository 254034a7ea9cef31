//! What a node tells the runner: JSON lines on stdout, reasons on stderr.
//!
//! Every stdout line is one JSON object with an `event` field; the events are typed in
//! `events.rs` and documented in `docs/node-protocol.md`.

use std::io::Write;
use std::sync::OnceLock;

static NODE_NAME: OnceLock<String> = OnceLock::new();

/// Sets the name that prefixes this node's log lines (the runner's node name).
pub fn set_node_name(name: &str) {
    let _ = NODE_NAME.set(name.to_string());
}

/// Prints one JSON line to stdout, whole (stdout is locked for the line). Events go through
/// `events::emit`, which gives each line its name.
pub fn emit_line<T: serde::Serialize>(value: &T) {
    // One write(2) per line: a line is never split around another writer's on the same
    // pipe (an ssh host's lifeline prints its own `usage` lines beside the node's).
    let Ok(mut line) = serde_json::to_vec(value) else {
        return;
    };
    line.push(b'\n');
    let mut out = std::io::stdout().lock();
    // A closed stdout (the runner went away) must not crash the node mid-measurement.
    let _ = out.write_all(&line);
    let _ = out.flush();
}

/// Writes of several lines stay at or below this: a pipe writes that much at once, so no
/// other writer's line (an ssh host's lifeline) lands inside one of ours.
const PIPE_BUF_BYTES: usize = 4096;

/// Prints JSON lines to stdout, each whole, packed into as few writes as PIPE_BUF_BYTES
/// allows: the LB prints a line per slice moved, and a write per line made a
/// 1,000-slice balancing pay hundreds of system calls while other handoffs were in flight.
pub fn emit_lines<T: serde::Serialize>(values: impl IntoIterator<Item = T>) {
    let mut out = std::io::stdout().lock();
    for chunk in line_chunks(values, PIPE_BUF_BYTES) {
        // A closed stdout (the runner went away) must not crash the node.
        let _ = out.write_all(&chunk);
    }
    let _ = out.flush();
}

/// The values as JSON lines, packed whole into chunks of at most `max_bytes` (a longer
/// line is a chunk of its own).
fn line_chunks<T: serde::Serialize>(values: impl IntoIterator<Item = T>, max_bytes: usize) -> Vec<Vec<u8>> {
    let mut chunks = vec![Vec::new()];
    for value in values {
        let Ok(mut line) = serde_json::to_vec(&value) else {
            continue;
        };
        line.push(b'\n');
        let last = chunks
            .last_mut()
            .filter(|c| c.is_empty() || c.len() + line.len() <= max_bytes);
        match last {
            Some(chunk) => chunk.extend_from_slice(&line),
            None => chunks.push(line),
        }
    }
    chunks.retain(|c| !c.is_empty());
    chunks
}

/// Logs one line to stderr, prefixed with the node's name.
pub fn log(msg: &str) {
    let name = NODE_NAME.get().map(String::as_str).unwrap_or("knee-node");
    let _ = writeln!(std::io::stderr().lock(), "[{name}] {msg}");
}

/// Log lines of one kind that a run may produce by the thousand (a failure per request):
/// the first `max` go to stderr, then one line saying where the rest are, then none (the
/// samples hold every failure; stderr must not flood).
pub struct CappedLog {
    max: u64,
    /// The line said once the first `max` are out.
    after: &'static str,
    logged: u64,
}

impl CappedLog {
    pub const fn new(max: u64, after: &'static str) -> CappedLog {
        CappedLog {
            max,
            after,
            logged: 0,
        }
    }

    pub fn log(&mut self, line: &str) {
        self.logged += 1;
        if self.logged <= self.max {
            log(line);
        } else if self.logged == self.max + 1 {
            log(self.after);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_packed_whole_into_bounded_chunks() {
        let values: Vec<u32> = (0..100).collect();
        // "0\n" .. "99\n": 10 lines of 2 bytes, 90 of 3 = 290 bytes.
        let chunks = line_chunks(&values, 16);
        assert!(chunks.iter().all(|c| c.len() <= 16 && c.ends_with(b"\n")));
        let all: Vec<u8> = chunks.concat();
        let expected: String = values.iter().map(|v| format!("{v}\n")).collect();
        assert_eq!(all, expected.into_bytes());
        // A line longer than the bound goes alone; nothing is split or lost.
        let long = ["x".repeat(40), "y".into(), "z".repeat(40)];
        let chunks = line_chunks(&long, 16);
        assert_eq!(chunks.len(), 3);
        assert_eq!(chunks[1], b"\"y\"\n");
        assert!(line_chunks(Vec::<u32>::new(), 16).is_empty());
    }
}
