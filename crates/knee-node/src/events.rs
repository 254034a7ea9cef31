//! Node events: every line a node prints on stdout, as typed structs, written once here
//! (`docs/node-protocol.md` documents them; `knee.runner.node` reads them).
//!
//! A line is `{"event": NAME, ...fields}`. The common fields of an event are its struct's;
//! a system adds its own through the event's `extra`, a typed struct of its own that is
//! flattened into the line (`NoExtra` when it has none).

use serde::Serialize;

use crate::clock;

/// One kind of stdout line: its `event` name and its fields.
pub trait NodeEvent: Serialize {
    const NAME: &'static str;
}

/// No system fields.
#[derive(Serialize, Clone, Copy, Debug, Default)]
pub struct NoExtra {}

#[derive(Serialize)]
struct Line<'a, T: Serialize> {
    event: &'static str,
    #[serde(flatten)]
    body: &'a T,
}

/// Prints one event as one JSON line on stdout.
pub fn emit<T: NodeEvent>(event: &T) {
    crate::stdio::emit_line(&Line {
        event: T::NAME,
        body: event,
    });
}

/// Prints events of one kind as JSON lines, in as few writes as whole lines allow.
pub fn emit_all<'a, T: NodeEvent + 'a>(events: impl IntoIterator<Item = &'a T>) {
    crate::stdio::emit_lines(events.into_iter().map(|body| Line { event: T::NAME, body }));
}

/// A server (or peer, replica, service) listens: printed once, before anything is served.
#[derive(Serialize, Debug)]
pub struct Ready<E: Serialize = NoExtra> {
    pub addr: String,
    pub pid: u32,
    pub t_ns: u64,
    #[serde(flatten)]
    pub extra: E,
}

impl Ready<NoExtra> {
    pub fn now(addr: String) -> Self {
        Ready::with(addr, NoExtra {})
    }
}

impl<E: Serialize> Ready<E> {
    pub fn with(addr: String, extra: E) -> Self {
        Ready {
            addr,
            pid: std::process::id(),
            t_ns: clock::now_ns(),
            extra,
        }
    }
}

impl<E: Serialize> NodeEvent for Ready<E> {
    const NAME: &'static str = "ready";
}

/// A server's cumulative counters, every second. `requests`, `errors`, `bytes_rx`,
/// `bytes_tx`, `connections` and `queue_len` are the runner's time-series columns.
#[derive(Serialize, Debug, Default)]
pub struct Stats<E: Serialize = NoExtra> {
    pub t_ns: u64,
    pub requests: u64,
    pub errors: u64,
    pub overloaded: u64,
    pub bytes_rx: u64,
    pub bytes_tx: u64,
    pub connections: u64,
    pub bad_frames: u64,
    pub queue_len: u64,
    #[serde(flatten)]
    pub extra: E,
}

impl<E: Serialize> NodeEvent for Stats<E> {
    const NAME: &'static str = "stats";
}

/// A chat replica's view of who is primary changed (`systems/chat/replica.rs`).
#[derive(Serialize, Debug)]
pub struct Primary {
    /// This replica's index.
    pub replica: u32,
    /// The primary now (`u32::MAX`: unknown, this replica cannot reach the database).
    pub primary: u32,
    /// The primary before.
    pub was: u32,
    pub t_ns: u64,
}

impl NodeEvent for Primary {
    const NAME: &'static str = "primary";
}

/// A load node's schedule starts: intended send times count from `start_ns`.
#[derive(Serialize, Debug)]
pub struct Start {
    pub start_ns: u64,
}

impl NodeEvent for Start {
    const NAME: &'static str = "start";
}

/// A load node's counts so far (cumulative; warm-up included).
#[derive(Serialize, Clone, Copy, Debug, Default, PartialEq)]
pub struct Counts {
    /// Requests written to the wire (a retried request counts once).
    pub sent: u64,
    /// Requests over: ok + timeouts + drops + errors + late_replies.
    pub completed: u64,
    pub ok: u64,
    pub timeouts: u64,
    pub drops: u64,
    pub errors: u64,
    /// Sends more than `late_ms` behind their intended time.
    pub late_sends: u64,
    /// Replies that came after their request had timed out, recorded apart (stream).
    pub late_replies: u64,
    pub bytes_tx: u64,
    pub bytes_rx: u64,
}

/// Every second while a load node runs; its samples were flushed just before.
#[derive(Serialize, Debug)]
pub struct Progress<E: Serialize = NoExtra> {
    /// Seconds since `start`.
    pub t_s: f64,
    #[serde(flatten)]
    pub counts: Counts,
    /// Completions per second since the previous line.
    pub rate_per_s: f64,
    /// Sends per second since the previous line.
    pub sent_rate_per_s: f64,
    /// The schedule's rate now (None: no schedule, e.g. a closed loop).
    pub target_rate_per_s: Option<f64>,
    /// OK post-warm-up latency so far (0 before the first).
    pub p99_ns: u64,
    #[serde(flatten)]
    pub extra: E,
}

impl<E: Serialize> NodeEvent for Progress<E> {
    const NAME: &'static str = "progress";
}

/// The HDR histogram's summary of OK post-warm-up latencies (0 when there were none).
#[derive(Serialize, Clone, Copy, Debug, Default)]
pub struct LatencySummary {
    pub count: u64,
    pub mean_ns: f64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub max_ns: u64,
}

/// A load node's last line.
#[derive(Serialize, Debug)]
pub struct Done<E: Serialize = NoExtra> {
    #[serde(flatten)]
    pub counts: Counts,
    /// Seconds from `start` to now.
    pub elapsed_s: f64,
    /// Requests sent ÷ the span from `start` to the last send.
    pub achieved_rate_per_s: f64,
    pub target_rate_per_s: Option<f64>,
    pub latency: LatencySummary,
    #[serde(flatten)]
    pub extra: E,
}

impl<E: Serialize> NodeEvent for Done<E> {
    const NAME: &'static str = "done";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Serialize, Default, Debug)]
    struct Mine {
        frames: u64,
    }

    #[test]
    fn a_line_is_the_name_then_the_fields_with_the_extension_flattened() {
        let line = serde_json::to_value(Line {
            event: Stats::<Mine>::NAME,
            body: &Stats {
                requests: 3,
                extra: Mine { frames: 7 },
                ..Default::default()
            },
        })
        .unwrap();
        assert_eq!(line["event"], "stats");
        assert_eq!(line["requests"], 3);
        assert_eq!(line["frames"], 7);
        assert!(line.get("extra").is_none());
    }
}
