//! Open loop: requests leave at their scheduled times whatever the replies do.
//!
//! One thread does everything: it writes each request when it is due (round robin over the
//! connections) and, while it waits for the next send, reads replies from every connection
//! with `ppoll`. A reply therefore wakes the thread that waits for it, with no hand-off
//! between threads, and no lock guards the requests in flight. Latency counts from the
//! intended send time, so a late sender or a blocked connection shows up in the latency,
//! not as missing requests.

use std::io::{self, Read};
use std::net::TcpStream;
use std::os::fd::AsRawFd;

use super::config::{LoadConfig, TcpTarget};
use super::drive::{drive, Sender};
use super::driver::{Driver, DriverFactory};
use super::flights::{self, Flights};
use super::harness::{Plan, Role, RunContext};
use super::recorder::{Sample, Status};
use super::{reply_sample, Connected};
use crate::events::NoExtra;
use crate::wire::{
    frame_bytes, request_frame_bytes, write_frame, FrameError, FrameReader, ReplyHeader, RequestHeader,
};
use crate::{clock, stdio};

/// How often requests past their timeout are looked for.
const EXPIRY_EVERY_NS: u64 = 5_000_000;

struct InFlight {
    /// The connection it was sent on.
    slot: usize,
    intended_ns: u64,
    sent_ns: u64,
    op: u16,
    arg: u32,
    bytes_out: u64,
}

struct Conn {
    index: u32,
    stream: TcpStream,
    reader: FrameReader,
    /// Requests in flight on this connection (in `Engine::flights`).
    pending: usize,
    alive: bool,
}

/// Reads without blocking (`MSG_DONTWAIT`) from a socket that stays blocking for writes.
struct DontWait<'a>(&'a TcpStream);

impl Read for DontWait<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        // SAFETY: recv writes at most buf.len() bytes into buf, which we own mutably.
        let n = unsafe {
            libc::recv(
                self.0.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    }
}

struct Engine<'a> {
    conns: Vec<Conn>,
    pollfds: Vec<libc::pollfd>,
    factory: &'a dyn DriverFactory,
    ctx: &'a RunContext,
    timeout_ns: u64,
    /// Bounded by `max_outstanding` (the harness's `max_in_flight`).
    flights: Flights<InFlight>,
    driver: Box<dyn Driver>,
    /// A request's body and its frame, reused from one request to the next.
    body: Vec<u8>,
    scratch: Vec<u8>,
    last_sent_ns: u64,
}

/// The open-loop role: connected, its schedule still to run.
pub struct OpenLoop(pub Connected);

impl Role for OpenLoop {
    type Progress = NoExtra;
    type Done = NoExtra;

    fn plan(&self) -> Plan {
        self.0.cfg.plan(Some(self.0.cfg.max_outstanding))
    }

    fn run(&mut self, ctx: &RunContext) -> Result<NoExtra, String> {
        let streams = std::mem::take(&mut self.0.streams);
        let mut engine = Engine::new(streams, &self.0.cfg, &self.0.tcp, &*self.0.factory, ctx);
        drive(&mut engine, ctx);
        Ok(NoExtra {})
    }
}

impl Sender for Engine<'_> {
    const EXPIRY_EVERY_NS: u64 = EXPIRY_EVERY_NS;

    fn send(&mut self, id: u64, intended_ns: u64) {
        let sent_ns = self.write(id, intended_ns);
        self.last_sent_ns = self.last_sent_ns.max(sent_ns);
    }

    fn poll(&mut self, wait_ns: u64) {
        self.poll_replies(wait_ns);
    }

    fn expire(&mut self, now_ns: u64) {
        while let Some((id, _, f)) = self.flights.pop_expired(now_ns) {
            self.conns[f.slot].pending -= 1;
            self.record_unanswered(id, &f, Status::Timeout);
        }
    }

    fn in_flight(&self) -> bool {
        !self.flights.is_empty()
    }

    fn last_sent_ns(&self) -> u64 {
        self.last_sent_ns
    }

    /// After a stop request's grace period: every request still in flight is dropped.
    fn close(&mut self, _now_ns: u64) {
        for (id, f) in self.flights.drain() {
            self.record_unanswered(id, &f, Status::Drop);
        }
        for slot in 0..self.conns.len() {
            self.close_conn(slot);
        }
    }
}

impl<'a> Engine<'a> {
    fn new(
        streams: Vec<TcpStream>,
        cfg: &LoadConfig,
        tcp: &TcpTarget,
        factory: &'a dyn DriverFactory,
        ctx: &'a RunContext,
    ) -> Engine<'a> {
        let conns: Vec<Conn> = streams
            .into_iter()
            .enumerate()
            .map(|(i, stream)| Conn {
                index: i as u32,
                stream,
                reader: FrameReader::new(tcp.max_frame_bytes),
                pending: 0,
                alive: true,
            })
            .collect();
        let pollfds = crate::poll::readable_all(conns.iter().map(|c| &c.stream));
        Engine {
            conns,
            pollfds,
            factory,
            ctx,
            timeout_ns: (cfg.timeout_ms * 1e6) as u64,
            flights: Flights::new(ctx.bounds.max_in_flight.unwrap_or(usize::MAX)),
            driver: factory.driver(cfg.seed, 0),
            body: Vec::new(),
            scratch: Vec::new(),
            last_sent_ns: 0,
        }
    }

    /// Writes request `id` (or records it as dropped); returns when it was written (0 if not).
    fn write(&mut self, id: u64, intended_ns: u64) -> u64 {
        self.body.clear();
        let (op, arg) = self.driver.next_request(&mut self.body);
        let slot = (id % self.conns.len() as u64) as usize;
        // Not sent (yet): no send time, no bytes.
        let f = InFlight {
            slot,
            intended_ns,
            sent_ns: 0,
            op,
            arg,
            bytes_out: 0,
        };
        if self.flights.is_full() || !self.conns[slot].alive {
            self.record_unanswered(id, &f, Status::Drop);
            return 0;
        }
        let sent_ns = clock::now_ns();
        let header = RequestHeader {
            request_id: id,
            op,
            flags: 0,
        };
        let conn = &mut self.conns[slot];
        let frame = [&header.encode()[..], &self.body];
        if let Err(e) = write_frame(&mut conn.stream, &mut self.scratch, &frame) {
            stdio::log(&format!("connection {slot}: send failed: {e}"));
            self.record_unanswered(id, &f, Status::Drop);
            self.close_conn(slot);
            return 0;
        }
        let bytes_out = request_frame_bytes(self.body.len()) as u64;
        let sent = InFlight {
            sent_ns,
            bytes_out,
            ..f
        };
        // Not full: looked at before the write.
        if let Err(sent) = self.flights.insert(id, sent_ns + self.timeout_ns, sent) {
            self.record_unanswered(id, &sent, Status::Drop);
            return 0;
        }
        conn.pending += 1;
        self.ctx.count_send(intended_ns, sent_ns, bytes_out);
        sent_ns
    }

    /// Waits up to `wait_ns` for replies on any connection and handles all that arrived.
    fn poll_replies(&mut self, wait_ns: u64) {
        if crate::poll::ppoll_ns(&mut self.pollfds, wait_ns) == 0 {
            return; // timeout, or EINTR (a stop signal): the caller's loop looks again
        }
        for slot in 0..self.conns.len() {
            if self.pollfds[slot].revents != 0 {
                self.read_replies(slot);
            }
        }
    }

    /// Handles every reply that has arrived on a connection; closes it on a read error.
    fn read_replies(&mut self, slot: usize) {
        let failure = loop {
            let received_ns = clock::now_ns();
            let Conn {
                stream,
                reader,
                pending,
                ..
            } = &mut self.conns[slot];
            let payload = match reader.read_frame(&mut DontWait(stream)) {
                Ok(None) => return,
                Ok(Some(payload)) => payload,
                Err(FrameError::Closed) if *pending == 0 => break None,
                Err(e) => break Some(e.to_string()),
            };
            let Some((header, reply_body)) = ReplyHeader::decode(payload) else {
                break Some(format!(
                    "malformed reply: {} bytes is shorter than a reply header",
                    payload.len()
                ));
            };
            // Not pending on this connection: it already timed out; the late reply is not
            // counted again.
            let id = header.request_id;
            if self.flights.get(id).is_none_or(|(_, f)| f.slot != slot) {
                continue;
            }
            let Some((deadline_ns, f)) = self.flights.take(id) else {
                continue;
            };
            *pending -= 1;
            if flights::past(deadline_ns, received_ns) {
                // Read after its deadline: a timeout, as if the expiry had come first.
                self.record_unanswered(id, &f, Status::Timeout);
                continue;
            }
            let mut sample = reply_sample(
                &header,
                reply_body,
                self.factory,
                f.op,
                frame_bytes(payload.len()),
            );
            sample.intended_ns = f.intended_ns;
            sample.sent_ns = f.sent_ns;
            sample.received_ns = received_ns;
            sample.bytes_out = f.bytes_out;
            sample.client = self.conns[slot].index;
            sample.arg = f.arg;
            self.ctx.recorder.record(&sample);
        };
        if let Some(reason) = failure {
            stdio::log(&format!("connection {slot}: {reason}; closing it"));
        }
        self.close_conn(slot);
    }

    /// Records a request that got no reply (it has left the table, or never entered it).
    fn record_unanswered(&self, id: u64, f: &InFlight, status: Status) {
        self.ctx.recorder.record(&Sample {
            client: self.conns[f.slot].index,
            arg: f.arg,
            op: f.op,
            ..Sample::unanswered(id, f.intended_ns, f.sent_ns, f.bytes_out, status)
        });
    }

    /// The connection is gone: what is pending on it will never be answered.
    fn close_conn(&mut self, slot: usize) {
        let conn = &mut self.conns[slot];
        conn.alive = false;
        self.pollfds[slot].fd = -1; // ppoll skips negative descriptors
        if std::mem::take(&mut conn.pending) == 0 {
            return;
        }
        for (id, f) in self.flights.take_if(|f| f.slot == slot) {
            self.record_unanswered(id, &f, Status::Drop);
        }
    }
}
