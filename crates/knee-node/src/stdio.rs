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

/// Logs one line to stderr, prefixed with the node's name.
pub fn log(msg: &str) {
    let name = NODE_NAME.get().map(String::as_str).unwrap_or("knee-node");
    let _ = writeln!(std::io::stderr().lock(), "[{name}] {msg}");
}
