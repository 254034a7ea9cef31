//! Every request's sample, appended to disk as it completes, plus an HDR histogram.
//!
//! A sample is one fixed 96-byte little-endian record (documented in `docs/samples.md` and
//! read by `knee.results`), every field at an offset that is a multiple of its size:
//!
//! ```text
//!  0 request_id u64   8 intended_ns u64  16 sent_ns u64     24 received_ns u64
//! 32 server_ns u64   40 queue_ns u64     48 service_ns u64  56 detail_ns u64
//! 64 bytes_out u64   72 bytes_in u64     80 client u32      84 arg u32
//! 88 op u16          90 flags u16        92 status u8       93 service u8   94 (pad) u16
//! ```
//! Times are `CLOCK_MONOTONIC` ns; `sent_ns`/`received_ns` are 0 when the request was never
//! sent / never answered, and a request never sent has `bytes_out` 0. Records are buffered and written at least every 100 ms, so a node
//! that is killed loses at most that last flush.

use std::fs::File;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use hdrhistogram::Histogram;

use crate::clock;
use crate::events::{Counts, LatencySummary};

pub const SAMPLE_BYTES: usize = 96;
/// A sample record's fields in file order, each with its numpy type (little-endian): what
/// `Sample::encode_into` writes, and what `knee-node describe` gives the Python side to read
/// the records with.
pub const SAMPLE_LAYOUT: [(&str, &str); 17] = [
    ("request_id", "<u8"),
    ("intended_ns", "<u8"),
    ("sent_ns", "<u8"),
    ("received_ns", "<u8"),
    ("server_ns", "<u8"),
    ("queue_ns", "<u8"),
    ("service_ns", "<u8"),
    ("detail_ns", "<u8"),
    ("bytes_out", "<u8"),
    ("bytes_in", "<u8"),
    ("client", "<u4"),
    ("arg", "<u4"),
    ("op", "<u2"),
    ("flags", "<u2"),
    ("status", "u1"),
    ("service", "u1"),
    ("pad", "<u2"),
];
const FLUSH_EVERY_NS: u64 = 100_000_000;
const FLUSH_AT_BYTES: usize = 1 << 20;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Status {
    Ok = 0,
    /// No reply within the timeout.
    Timeout = 1,
    /// Not sent (too many outstanding, connection down), lost with its connection, shed by
    /// the server's full queue, or still in flight when the run was stopped.
    Drop = 2,
    /// The server answered with an error, or the reply failed the driver's check.
    Error = 3,
    /// A reply that came after its request had timed out (stream), recorded apart from the
    /// request's own outcome: neither a success nor an error.
    Late = 4,
}

impl Status {
    /// Every status in code order: the names `knee.results.STATUS_NAMES` reads the codes as
    /// (`knee-node describe` prints them; a test holds the two sides together).
    pub const NAMES: [&'static str; 5] = ["ok", "timeout", "drop", "error", "late"];
}

/// `server_ns` of a reply that carried no server time (an HTTP service without
/// Server-Timing): -1 in samples.parquet, and its network time unknown too.
pub const NO_SERVER_TIME: u64 = u64::MAX;

#[derive(Clone, Copy, Debug, Default)]
pub struct Sample {
    pub request_id: u64,
    pub intended_ns: u64,
    pub sent_ns: u64,
    pub received_ns: u64,
    /// [`NO_SERVER_TIME`] when the reply carried none (the split is unknown, not zero).
    pub server_ns: u64,
    pub queue_ns: u64,
    pub service_ns: u64,
    pub detail_ns: u64,
    pub bytes_out: u64,
    pub bytes_in: u64,
    pub client: u32,
    pub arg: u32,
    pub op: u16,
    pub flags: u16,
    pub status: u8,
    pub service: u8,
}

impl Sample {
    /// A request that got no reply, `status` saying why: when it was due and sent, and its
    /// bytes out (the role sets its own fields on top).
    pub fn unanswered(
        request_id: u64,
        intended_ns: u64,
        sent_ns: u64,
        bytes_out: u64,
        status: Status,
    ) -> Sample {
        Sample {
            request_id,
            intended_ns,
            sent_ns,
            bytes_out,
            status: status as u8,
            ..Sample::default()
        }
    }

    fn encode_into(&self, out: &mut Vec<u8>) {
        for v in [
            self.request_id,
            self.intended_ns,
            self.sent_ns,
            self.received_ns,
            self.server_ns,
            self.queue_ns,
            self.service_ns,
            self.detail_ns,
            self.bytes_out,
            self.bytes_in,
        ] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        for v in [self.client, self.arg] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&self.op.to_le_bytes());
        out.extend_from_slice(&self.flags.to_le_bytes());
        out.extend_from_slice(&[self.status, self.service, 0, 0]);
    }
}

/// Counts shown in progress and done lines; updated without taking the recorder's lock.
/// `record` counts the outcomes and `bytes_rx`; the sender counts `sent`, `late_sends` and
/// `bytes_tx` (`load::harness::RunContext::count_send`).
#[derive(Default)]
pub struct Counters {
    pub sent: AtomicU64,
    /// Sends more than `late_ms` behind their intended time.
    pub late_sends: AtomicU64,
    pub ok: AtomicU64,
    pub timeouts: AtomicU64,
    pub drops: AtomicU64,
    pub errors: AtomicU64,
    /// Replies recorded after their request's timeout (status `late`, stream only).
    pub late_replies: AtomicU64,
    pub bytes_tx: AtomicU64,
    pub bytes_rx: AtomicU64,
}

impl Counters {
    pub fn completed(&self) -> u64 {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        get(&self.ok) + get(&self.timeouts) + get(&self.drops) + get(&self.errors) + get(&self.late_replies)
    }

    /// The counts now, as the progress and done lines carry them.
    pub fn snapshot(&self) -> Counts {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Counts {
            sent: get(&self.sent),
            completed: self.completed(),
            ok: get(&self.ok),
            timeouts: get(&self.timeouts),
            drops: get(&self.drops),
            errors: get(&self.errors),
            late_sends: get(&self.late_sends),
            late_replies: get(&self.late_replies),
            bytes_tx: get(&self.bytes_tx),
            bytes_rx: get(&self.bytes_rx),
        }
    }
}

struct Inner {
    file: File,
    buf: Vec<u8>,
    last_flush_ns: u64,
    /// Post-warm-up latencies of successful requests, 3 significant digits.
    histogram: Histogram<u64>,
    write_error: Option<String>,
}

pub struct Recorder {
    inner: Mutex<Inner>,
    pub counters: Counters,
    /// Set when the run starts (u64::MAX until then: nothing is recorded before it).
    warmup_end_ns: AtomicU64,
}

/// Whether buffered samples are written now: 1 MiB of them, or 100 ms since the last write
/// (a node killed with SIGKILL loses at most that).
fn flush_due(buffered_bytes: usize, since_flush_ns: u64) -> bool {
    buffered_bytes >= FLUSH_AT_BYTES || since_flush_ns >= FLUSH_EVERY_NS
}

/// Latencies above an hour are clamped: no request in a bounded run lasts longer.
const MAX_TRACKED_NS: u64 = 3_600_000_000_000;

impl Recorder {
    pub fn create(path: &str) -> std::io::Result<Recorder> {
        let file = File::create(path)?;
        let histogram = Histogram::new_with_bounds(1, MAX_TRACKED_NS, 3)
            .map_err(|e| std::io::Error::other(e.to_string()))?;
        Ok(Recorder {
            inner: Mutex::new(Inner {
                file,
                buf: Vec::with_capacity(FLUSH_AT_BYTES + SAMPLE_BYTES),
                last_flush_ns: clock::now_ns(),
                histogram,
                write_error: None,
            }),
            counters: Counters::default(),
            warmup_end_ns: AtomicU64::new(u64::MAX),
        })
    }

    /// Requests intended before `warmup_end_ns` stay out of the histogram.
    pub fn set_warmup_end(&self, warmup_end_ns: u64) {
        self.warmup_end_ns.store(warmup_end_ns, Ordering::Relaxed);
    }

    pub fn record(&self, s: &Sample) {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        s.encode_into(&mut inner.buf);
        // Counted only once buffered, under the lock: whoever reads the counters and then
        // flushes finds at least that many records on disk.
        let counter = match s.status {
            0 => &self.counters.ok,
            1 => &self.counters.timeouts,
            2 => &self.counters.drops,
            4 => &self.counters.late_replies,
            _ => &self.counters.errors,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        self.counters.bytes_rx.fetch_add(s.bytes_in, Ordering::Relaxed);
        if s.status == Status::Ok as u8 && s.intended_ns >= self.warmup_end_ns.load(Ordering::Relaxed) {
            let latency_ns = s
                .received_ns
                .saturating_sub(s.intended_ns)
                .clamp(1, MAX_TRACKED_NS);
            inner.histogram.saturating_record(latency_ns);
        }
        let now = clock::now_ns();
        if flush_due(inner.buf.len(), now.saturating_sub(inner.last_flush_ns)) {
            inner.flush(now);
        }
    }

    /// Writes buffered samples to the file (called every second by the progress thread too).
    pub fn flush(&self) {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .flush(clock::now_ns());
    }

    /// A latency quantile of post-warm-up successful requests so far (0 if none).
    pub fn quantile_ns(&self, q: f64) -> u64 {
        let inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if inner.histogram.is_empty() {
            0
        } else {
            inner.histogram.value_at_quantile(q)
        }
    }

    /// Flushes, writes the histogram as `value_ns,count` lines, and returns the quantiles
    /// for the summary, or the first write error.
    pub fn finish(&self, histogram_path: &str) -> Result<LatencySummary, String> {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.flush(clock::now_ns());
        if let Some(e) = inner.write_error.take() {
            return Err(e);
        }
        let h = &inner.histogram;
        let mut text = String::from("value_ns,count\n");
        for v in h.iter_recorded() {
            text.push_str(&format!(
                "{},{}\n",
                h.highest_equivalent(v.value_iterated_to()),
                v.count_at_value()
            ));
        }
        std::fs::write(histogram_path, text).map_err(|e| format!("writing {histogram_path}: {e}"))?;
        let q = |x: f64| if h.is_empty() { 0 } else { h.value_at_quantile(x) };
        Ok(LatencySummary {
            count: h.len(),
            mean_ns: if h.is_empty() { 0.0 } else { h.mean() },
            p50_ns: q(0.5),
            p90_ns: q(0.9),
            p99_ns: q(0.99),
            p999_ns: q(0.999),
            max_ns: if h.is_empty() { 0 } else { h.max() },
        })
    }
}

impl Inner {
    fn flush(&mut self, now_ns: u64) {
        if !self.buf.is_empty() && self.write_error.is_none() {
            if let Err(e) = self.file.write_all(&self.buf) {
                self.write_error = Some(format!("writing samples: {e}"));
            }
        }
        self.buf.clear();
        self.last_flush_ns = now_ns;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bytes of a numpy type of a layout ("<u8": 8).
    fn type_bytes(t: &str) -> usize {
        t.trim_start_matches(['<', 'u']).parse().unwrap()
    }

    #[test]
    fn the_described_layout_is_what_a_record_holds() {
        let sizes: Vec<usize> = SAMPLE_LAYOUT.iter().map(|(_, t)| type_bytes(t)).collect();
        assert_eq!(sizes.iter().sum::<usize>(), SAMPLE_BYTES);
        // Each field a distinct value: read back at its described offset, it is that field.
        let s = Sample {
            request_id: 1,
            intended_ns: 2,
            sent_ns: 3,
            received_ns: 4,
            server_ns: 5,
            queue_ns: 6,
            service_ns: 7,
            detail_ns: 8,
            bytes_out: 9,
            bytes_in: 10,
            client: 11,
            arg: 12,
            op: 13,
            flags: 14,
            status: 15,
            service: 16,
        };
        let mut out = Vec::new();
        s.encode_into(&mut out);
        let mut at = 0;
        for (i, size) in sizes.iter().enumerate() {
            let mut v = [0u8; 8];
            v[..*size].copy_from_slice(&out[at..at + size]);
            let want = if i == 16 { 0 } else { i as u64 + 1 }; // the padding is 0
            assert_eq!(u64::from_le_bytes(v), want, "{}", SAMPLE_LAYOUT[i].0);
            at += size;
        }
    }

    /// A folder of the test's own: tests run in parallel, and one removing a shared folder
    /// made another's `Recorder::create` fail (CI).
    fn test_dir(test: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("knee-recorder-{}-{test}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn samples_are_written_at_1_mib_or_after_100_ms() {
        let ms = 1_000_000;
        assert!(!flush_due(FLUSH_AT_BYTES - 1, 100 * ms - 1));
        assert!(flush_due(1 << 20, 0), "1 MiB buffered");
        assert!(flush_due(SAMPLE_BYTES, 100 * ms), "100 ms since the last write");
        assert!(!flush_due((1 << 20) - SAMPLE_BYTES, 99 * ms));
    }

    #[test]
    fn latencies_are_tracked_up_to_an_hour_and_clamped_beyond() {
        let dir = test_dir("hour");
        let path = dir.join("samples.bin");
        let r = Recorder::create(path.to_str().unwrap()).unwrap();
        r.set_warmup_end(0);
        let hour_ns = 3_600_000_000_000u64;
        let ok = |latency_ns: u64| Sample {
            intended_ns: 1,
            received_ns: 1 + latency_ns,
            status: Status::Ok as u8,
            ..Sample::default()
        };
        r.record(&ok(hour_ns / 2));
        let half = r.quantile_ns(1.0);
        assert!(
            half.abs_diff(hour_ns / 2) <= hour_ns / 2 / 1000,
            "30 min tracked as {half}"
        );
        r.record(&ok(2 * hour_ns));
        let top = r.quantile_ns(1.0);
        assert!(
            top.abs_diff(hour_ns) <= hour_ns / 1000,
            "2 h recorded as {top} ns, not 1 h"
        );
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn status_names_follow_the_codes() {
        for (status, name) in [
            (Status::Ok, "ok"),
            (Status::Timeout, "timeout"),
            (Status::Drop, "drop"),
            (Status::Error, "error"),
            (Status::Late, "late"),
        ] {
            assert_eq!(Status::NAMES[status as usize], name);
        }
    }

    #[test]
    fn record_is_96_bytes_in_the_documented_layout() {
        let s = Sample {
            request_id: 1,
            intended_ns: 2,
            received_ns: 4,
            bytes_out: 0x0102_0304_0506,
            bytes_in: 5 << 32, // beyond 4 GiB: not saturated
            client: 7,
            arg: 9,
            op: 3,
            flags: 6,
            status: 2,
            service: 5,
            ..Default::default()
        };
        let mut out = Vec::new();
        s.encode_into(&mut out);
        assert_eq!(out.len(), SAMPLE_BYTES);
        let u64_at = |at: usize| u64::from_le_bytes(out[at..at + 8].try_into().unwrap());
        assert_eq!(u64_at(0), 1);
        assert_eq!(u64_at(8), 2);
        assert_eq!(u64_at(24), 4);
        assert_eq!(u64_at(64), 0x0102_0304_0506);
        assert_eq!(u64_at(72), 5 << 32);
        assert_eq!(&out[80..84], &7u32.to_le_bytes());
        assert_eq!(&out[84..88], &9u32.to_le_bytes());
        assert_eq!(&out[88..90], &3u16.to_le_bytes());
        assert_eq!(&out[90..92], &6u16.to_le_bytes());
        assert_eq!(out[92], 2);
        assert_eq!(out[93], 5);
        assert_eq!(&out[94..96], &[0, 0]);
    }

    #[test]
    fn a_late_reply_is_counted_apart_from_errors() {
        let dir = test_dir("late");
        let path = dir.join("late.samples.bin");
        let r = Recorder::create(path.to_str().unwrap()).unwrap();
        for status in [Status::Ok, Status::Late, Status::Late, Status::Error] {
            r.record(&Sample {
                status: status as u8,
                ..Default::default()
            });
        }
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        assert_eq!(get(&r.counters.late_replies), 2);
        assert_eq!(get(&r.counters.errors), 1);
        assert_eq!(r.counters.completed(), 4);
        r.flush();
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 4 * SAMPLE_BYTES as u64);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
