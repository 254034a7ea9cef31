//! Open loop: requests leave at their scheduled times whatever the replies do.
//!
//! One sender thread follows the schedule and writes each request to the next connection
//! (round robin); one reader thread per connection matches replies to requests by id and
//! expires the ones past their timeout. Latency counts from the intended send time, so a
//! late sender or a blocked connection shows up in the latency, not as missing requests.

use std::collections::{HashMap, VecDeque};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::driver::DriverFactory;
use super::recorder::{Recorder, Sample, Status};
use super::schedule::Schedule;
use super::{reply_sample, Limits, SendWindow};
use crate::rng::Rng;
use crate::wire::{write_frame, FrameError, FrameReader, ReplyHeader, RequestHeader};
use crate::{clock, report, signals};

/// How often readers wake up without replies, to expire requests and notice the end.
const READ_TICK: Duration = Duration::from_millis(20);
/// After a stop request, how long readers still wait for replies already in flight.
const STOP_GRACE_NS: u64 = 1_000_000_000;

struct InFlight {
    intended_ns: u64,
    sent_ns: u64,
    op: u16,
    arg: u32,
    bytes_out: u32,
}

#[derive(Default)]
struct Pending {
    map: HashMap<u64, InFlight>,
    /// (deadline, id) in send order; deadlines grow with it, so expiry pops from the front.
    deadlines: VecDeque<(u64, u64)>,
}

struct Conn {
    index: u32,
    pending: Mutex<Pending>,
    alive: AtomicBool,
}

struct Shared {
    recorder: Arc<Recorder>,
    factory: Arc<dyn DriverFactory>,
    outstanding: AtomicU64,
    sending_done: AtomicBool,
    max_frame_bytes: usize,
}

impl Shared {
    fn record_unanswered(&self, conn: &Conn, id: u64, f: &InFlight, status: Status) {
        self.outstanding.fetch_sub(1, Ordering::Relaxed);
        self.recorder.record(&Sample {
            request_id: id,
            intended_ns: f.intended_ns,
            sent_ns: f.sent_ns,
            bytes_out: f.bytes_out,
            client: conn.index,
            arg: f.arg,
            op: f.op,
            status: status as u8,
            ..Default::default()
        });
    }
}

pub fn run(
    streams: Vec<TcpStream>,
    mut schedule: Schedule,
    factory: Arc<dyn DriverFactory>,
    recorder: Arc<Recorder>,
    limits: &Limits,
) -> Result<SendWindow, String> {
    let shared = Arc::new(Shared {
        recorder: recorder.clone(),
        factory: factory.clone(),
        outstanding: AtomicU64::new(0),
        sending_done: AtomicBool::new(false),
        max_frame_bytes: limits.max_frame_bytes,
    });
    let mut writers = Vec::with_capacity(streams.len());
    let mut conns = Vec::with_capacity(streams.len());
    let mut readers = Vec::with_capacity(streams.len());
    for (i, stream) in streams.into_iter().enumerate() {
        let conn = Arc::new(Conn {
            index: i as u32,
            pending: Mutex::default(),
            alive: AtomicBool::new(true),
        });
        let read_half = stream.try_clone().map_err(|e| format!("cloning a socket: {e}"))?;
        let (c, s) = (conn.clone(), shared.clone());
        readers.push(std::thread::spawn(move || read_replies(c, read_half, s)));
        writers.push(stream);
        conns.push(conn);
    }

    let mut driver = factory.driver(limits.seed, 0);
    let mut rng = Rng::new(limits.seed ^ 0x5EED_5C4E_D01E);
    let mut body = Vec::new();
    let mut scratch = Vec::new();
    let counters = &recorder.counters;
    let mut window = SendWindow::default();
    let mut next_id: u64 = 0;
    loop {
        if limits.requests.is_some_and(|max| next_id >= max) {
            break;
        }
        let Some(offset_ns) = schedule.next_offset_ns(&mut rng) else {
            break;
        };
        let intended_ns = limits.start_ns + offset_ns;
        if limits.end_ns.is_some_and(|end| intended_ns >= end) {
            break;
        }
        if !clock::wait_until_unless_stopped(intended_ns) {
            break;
        }
        body.clear();
        let (op, arg) = driver.next_request(&mut body);
        let id = next_id;
        next_id += 1;
        let slot = (id % writers.len() as u64) as usize;
        let conn = &conns[slot];
        let bytes_out = (4 + 12 + body.len()) as u32;
        let in_flight = InFlight {
            intended_ns,
            sent_ns: 0,
            op,
            arg,
            bytes_out,
        };
        if shared.outstanding.load(Ordering::Relaxed) >= limits.max_outstanding as u64
            || !conn.alive.load(Ordering::Relaxed)
        {
            shared.outstanding.fetch_add(1, Ordering::Relaxed);
            shared.record_unanswered(conn, id, &in_flight, Status::Drop);
            continue;
        }
        let sent_ns = clock::now_ns();
        if sent_ns.saturating_sub(intended_ns) > limits.late_ns {
            counters.late.fetch_add(1, Ordering::Relaxed);
        }
        {
            let mut p = conn.pending.lock().unwrap_or_else(|p| p.into_inner());
            p.map.insert(id, InFlight { sent_ns, ..in_flight });
            p.deadlines.push_back((sent_ns + limits.timeout_ns, id));
        }
        shared.outstanding.fetch_add(1, Ordering::Relaxed);
        let header = RequestHeader {
            request_id: id,
            op,
            flags: 0,
        };
        if let Err(e) = write_frame(&mut writers[slot], &mut scratch, &[&header.encode(), &body]) {
            report::log(&format!("connection {slot}: send failed: {e}"));
            conn.alive.store(false, Ordering::Relaxed);
            let taken = conn
                .pending
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .map
                .remove(&id);
            if let Some(f) = taken {
                shared.record_unanswered(conn, id, &f, Status::Drop);
            }
            continue;
        }
        counters.sent.fetch_add(1, Ordering::Relaxed);
        counters.bytes_tx.fetch_add(bytes_out as u64, Ordering::Relaxed);
        window.last_sent_ns = sent_ns;
    }
    shared.sending_done.store(true, Ordering::SeqCst);
    for r in readers {
        let _ = r.join();
    }
    Ok(window)
}

fn read_replies(conn: Arc<Conn>, stream: TcpStream, shared: Arc<Shared>) {
    if let Err(e) = stream.set_read_timeout(Some(READ_TICK)) {
        report::log(&format!("connection {}: {e}", conn.index));
    }
    let mut reader = FrameReader::new(shared.max_frame_bytes);
    let mut src = &stream;
    let mut next_expiry_ns = 0;
    let mut stop_deadline_ns: Option<u64> = None;
    loop {
        match reader.read_frame(&mut src) {
            Ok(Some(payload)) => {
                if let Err(reason) = handle_reply(&conn, &shared, payload, clock::now_ns()) {
                    report::log(&format!("connection {}: {reason}; closing it", conn.index));
                    break;
                }
            }
            Ok(None) => {}
            Err(e) => {
                let quiet = matches!(e, FrameError::Closed) && shared.sending_done.load(Ordering::Relaxed);
                if !quiet {
                    report::log(&format!("connection {}: {e}", conn.index));
                }
                break;
            }
        }
        let now = clock::now_ns();
        if now >= next_expiry_ns {
            expire(&conn, &shared, now);
            next_expiry_ns = now + 5_000_000;
        }
        let empty = conn.pending.lock().map(|p| p.map.is_empty()).unwrap_or(true);
        if shared.sending_done.load(Ordering::SeqCst) && empty {
            return;
        }
        if signals::stop_requested() {
            let deadline = *stop_deadline_ns.get_or_insert(now + STOP_GRACE_NS);
            if now >= deadline {
                break;
            }
        }
    }
    // The connection is gone (or we gave up on it): what is still pending will never be answered.
    conn.alive.store(false, Ordering::Relaxed);
    let mut p = conn.pending.lock().unwrap_or_else(|p| p.into_inner());
    p.deadlines.clear();
    for (id, f) in p.map.drain() {
        shared.record_unanswered(&conn, id, &f, Status::Drop);
    }
}

fn handle_reply(conn: &Conn, shared: &Shared, payload: &[u8], received_ns: u64) -> Result<(), String> {
    let (header, body) = ReplyHeader::decode(payload).ok_or_else(|| {
        format!(
            "malformed reply: {} bytes is shorter than a reply header",
            payload.len()
        )
    })?;
    let taken = conn
        .pending
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .map
        .remove(&header.request_id);
    // Not pending: it already timed out; the reply came late and is not counted twice.
    let Some(f) = taken else { return Ok(()) };
    shared.outstanding.fetch_sub(1, Ordering::Relaxed);
    let mut sample = reply_sample(&header, body, &*shared.factory, f.op, payload.len() + 4);
    sample.intended_ns = f.intended_ns;
    sample.sent_ns = f.sent_ns;
    sample.received_ns = received_ns;
    sample.bytes_out = f.bytes_out;
    sample.client = conn.index;
    sample.arg = f.arg;
    shared.recorder.record(&sample);
    Ok(())
}

fn expire(conn: &Conn, shared: &Shared, now_ns: u64) {
    let mut expired = Vec::new();
    {
        let mut p = conn.pending.lock().unwrap_or_else(|p| p.into_inner());
        while let Some(&(deadline_ns, id)) = p.deadlines.front() {
            if deadline_ns > now_ns {
                break;
            }
            p.deadlines.pop_front();
            if let Some(f) = p.map.remove(&id) {
                expired.push((id, f));
            }
        }
    }
    for (id, f) in expired {
        shared.record_unanswered(conn, id, &f, Status::Timeout);
    }
}
