//! The FrameAccessor: fetches frames in order, each as its blocks, from one service
//! (serial) or several (parallel), on one thread.
//!
//! Each service has a bounded number of requests in flight; a free slot takes the frame's
//! next block (so faster services take more). A request that gets no reply within its
//! timeout is given up (or retransmitted, if asked); a reply that comes after that is
//! recorded as *late*, once, and does not fill the block. One sample per request:
//! op 0, client = frame, arg = block, service = the service's index. It runs inside the load
//! harness (`load/harness.rs`): bounds, stop and the common counts are the harness's.

use std::collections::{HashMap, VecDeque};
use std::io::ErrorKind;
use std::net::UdpSocket;
use std::sync::atomic::AtomicU64;

use super::config::ClientConfig;
use super::datagram::{self, BlockId, ReplyHeader, Request, REPLY_OK, REQUEST_BYTES};
use super::frames::Frame;
use super::lines::{add, Live};
use super::rto::Rto;
use crate::clock;
use crate::load::drive::{drive, Sender};
use crate::load::flights::{self, Flights};
use crate::load::harness::RunContext;
use crate::load::recorder::{Sample, Status};

/// Sample flags.
pub const FLAG_REDUNDANT: u16 = 1; // the block was already done (the losing hedge copy)
pub const FLAG_RETRANSMISSION: u16 = 2;
pub const FLAG_HEDGED: u16 = 4;
/// Timed-out requests remembered to recognize their late replies; beyond, the oldest is
/// recorded as a timeout at once.
const MAX_EXPIRED: usize = 100_000;
/// Longest wait in one poll, so the clock-driven work is never far behind.
const MAX_WAIT_NS: u64 = 20_000_000;
const RECV_BUFFER_BYTES: usize = 2048;

struct Flight {
    slot: usize,
    block: BlockId,
    sent_ns: u64,
    timeout_ns: u64,
    attempt: u8,
    hedged: bool,
}

struct Service {
    socket: UdpSocket,
    id: u8,
    in_flight: usize,
    rto: Rto,
}

pub struct Accessor<'a> {
    cfg: &'a ClientConfig,
    services: Vec<Service>,
    pollfds: Vec<libc::pollfd>,
    ctx: &'a RunContext,
    live: &'a Live,
    frame: Option<Frame>,
    next_frame: u32,
    /// Requests sent and not yet answered or timed out, by request id; at most
    /// `outstanding` per service, so never more than services x `outstanding`.
    in_flight: Flights<Flight>,
    /// Timed-out requests whose late replies are still recognized, by request id...
    expired: HashMap<u64, Flight>,
    /// ...and (until when, request id) in timeout order: after it, a timeout is recorded.
    late_windows: VecDeque<(u64, u64)>,
    next_request_id: u64,
    next_slot: usize,
    buf: Vec<u8>,
    /// A request's datagram, reused.
    out: Vec<u8>,
    /// No new requests (a stop, or the time is up).
    ending: bool,
}

impl<'a> Accessor<'a> {
    pub fn new(cfg: &'a ClientConfig, sockets: Vec<UdpSocket>, ctx: &'a RunContext, live: &'a Live) -> Self {
        let timeout_ns = cfg.timeout_ms * 1e6;
        let services_count = sockets.len();
        let services: Vec<Service> = sockets
            .into_iter()
            .enumerate()
            .map(|(i, socket)| Service {
                socket,
                id: cfg.service_ids.get(i).copied().unwrap_or(i as u8),
                in_flight: 0,
                rto: Rto::new(timeout_ns, cfg.min_rto_ms * 1e6, timeout_ns),
            })
            .collect();
        let pollfds = crate::poll::readable_all(services.iter().map(|s| &s.socket));
        Accessor {
            cfg,
            services,
            pollfds,
            ctx,
            live,
            frame: Some(Frame::new(cfg.first_frame, cfg.blocks_per_frame)),
            next_frame: cfg.first_frame + 1,
            in_flight: Flights::new(cfg.outstanding * services_count),
            expired: HashMap::new(),
            late_windows: VecDeque::new(),
            next_request_id: 0,
            next_slot: 0,
            buf: vec![0; RECV_BUFFER_BYTES],
            out: Vec::with_capacity(REQUEST_BYTES),
            ending: false,
        }
    }

    /// Fetches every frame (or until the time is up or a stop is asked), then waits for the
    /// requests in flight and the late-reply window of those that timed out. After a stop,
    /// the harness's grace cuts both waits short. It runs on the drive loop without a
    /// schedule: a block's request leaves when a service's slot frees (`advance`).
    pub fn run(&mut self) {
        let ctx = self.ctx;
        drive(self, ctx);
    }

    /// No new requests: the frame under way is abandoned (its missing blocks counted).
    fn end_sending(&mut self) {
        if self.ending {
            return;
        }
        self.ending = true;
        if let Some(mut frame) = self.frame.take() {
            frame.abandon();
            self.count_frame(&frame);
        }
    }

    fn count_frame(&mut self, frame: &Frame) {
        add(&self.live.frames, 1);
        add(&self.live.blocks_missing, frame.missing as u64);
        if frame.missing == 0 {
            add(&self.live.complete_frames, 1);
        }
    }

    /// Moves on to the next frame once the current one is resolved.
    fn advance_frame(&mut self) {
        if !self.frame.as_ref().is_some_and(Frame::is_resolved) {
            return;
        }
        if let Some(frame) = self.frame.take() {
            self.count_frame(&frame);
        }
        if self.next_frame < self.cfg.first_frame + self.cfg.frames {
            self.frame = Some(Frame::new(self.next_frame, self.cfg.blocks_per_frame));
            self.next_frame += 1;
        }
    }

    /// Fills every free slot with the frame's next blocks, starting at a rotating service so
    /// the blocks spread evenly.
    fn send_requests(&mut self, out: &mut Vec<u8>) {
        let n = self.services.len();
        for k in 0..n {
            let slot = (self.next_slot + k) % n;
            while self.services[slot].in_flight < self.cfg.outstanding {
                let Some(frame) = self.frame.as_mut() else {
                    return;
                };
                let Some((block, attempt)) = frame.next_block() else {
                    return;
                };
                let id = BlockId {
                    stream: self.cfg.stream,
                    frame: frame.number,
                    block,
                };
                let partner = if self.cfg.hedge {
                    (1..n)
                        .map(|d| (slot + d) % n)
                        .find(|&s| self.services[s].in_flight < self.cfg.outstanding)
                } else {
                    None
                };
                if let Some(other) = partner {
                    frame.add_copy(block);
                    add(&self.live.hedged, 1);
                    self.send(other, id, attempt, true, out);
                }
                self.send(slot, id, attempt, partner.is_some(), out);
            }
        }
        self.next_slot = (self.next_slot + 1) % n;
    }

    fn send(&mut self, slot: usize, block: BlockId, attempt: u8, hedged: bool, out: &mut Vec<u8>) {
        let request_id = self.next_request_id;
        self.next_request_id += 1;
        Request {
            id: block,
            request_id,
        }
        .encode(out);
        let service = &mut self.services[slot];
        let timeout_ns = if self.cfg.adaptive_timeout {
            service.rto.rto_ns()
        } else {
            (self.cfg.timeout_ms * 1e6) as u64
        };
        let sent_ns = clock::now_ns();
        // A failed send (the service is gone) is a request lost on the way: it times out.
        if service.socket.send(out).is_err() {
            add(&self.live.send_errors, 1);
        }
        service.in_flight += 1;
        // Intended = sent (see `sample`): never a late send.
        self.ctx.count_send(sent_ns, sent_ns, out.len() as u64);
        if attempt > 1 {
            add(&self.live.retransmissions, 1);
        }
        let flight = Flight {
            slot,
            block,
            sent_ns,
            timeout_ns,
            attempt,
            hedged,
        };
        // Never full: each service stays within its own `outstanding`.
        if let Err(flight) = self.in_flight.insert(request_id, sent_ns + timeout_ns, flight) {
            self.services[slot].in_flight -= 1;
            let s = self.sample(request_id, &flight, Status::Drop as u8);
            self.ctx.recorder.record(&s);
        }
    }

    fn next_wake_ns(&mut self) -> u64 {
        let deadline = self.in_flight.next_deadline_ns();
        let late = self.late_windows.front().map(|&(until, _)| until);
        deadline.into_iter().chain(late).min().unwrap_or(u64::MAX)
    }

    /// Requests past their deadline: given up (or queued again), remembered for late replies.
    fn expire_requests(&mut self, now_ns: u64) {
        while let Some((request_id, deadline_ns, flight)) = self.in_flight.pop_expired(now_ns) {
            let service = &mut self.services[flight.slot];
            service.in_flight -= 1;
            if self.cfg.adaptive_timeout {
                service.rto.back_off();
            }
            self.block_failed(&flight);
            if self.late_windows.len() >= MAX_EXPIRED {
                self.finalize_oldest();
            }
            let late_until_ns = deadline_ns + self.cfg.late_window_ns();
            self.late_windows.push_back((late_until_ns, request_id));
            self.expired.insert(request_id, flight);
        }
    }

    fn block_failed(&mut self, flight: &Flight) {
        if let Some(frame) = self.frame.as_mut().filter(|f| f.number == flight.block.frame) {
            frame.on_failed(flight.block.block, self.cfg.retransmit);
        }
    }

    /// Records as timeouts the expired requests whose late window has passed (all if `all`).
    fn finalize_expired(&mut self, now_ns: u64, all: bool) {
        while self
            .late_windows
            .front()
            .is_some_and(|&(until, _)| all || until <= now_ns)
        {
            self.finalize_oldest();
        }
    }

    fn finalize_oldest(&mut self) {
        let Some((_, request_id)) = self.late_windows.pop_front() else {
            return;
        };
        // Absent when its late reply was recorded already.
        if let Some(flight) = self.expired.remove(&request_id) {
            self.record_timeout(request_id, &flight);
        }
    }

    /// After a stop's grace: what is still in flight is a drop (its timeout did not pass, so
    /// it is no loss of the link), and what timed out is recorded as such at once.
    fn abandon_in_flight(&mut self) {
        for (request_id, f) in self.in_flight.drain() {
            let s = self.sample(request_id, &f, Status::Drop as u8);
            self.ctx.recorder.record(&s);
        }
        self.finalize_expired(u64::MAX, true);
    }

    /// A request without a reply; its detail_ns is the timeout it was given.
    fn record_timeout(&mut self, request_id: u64, f: &Flight) {
        let mut s = self.sample(request_id, f, Status::Timeout as u8);
        s.detail_ns = f.timeout_ns;
        self.ctx.recorder.record(&s);
    }

    fn poll_services(&mut self, wait_ns: u64) {
        if crate::poll::ppoll_ns(&mut self.pollfds, wait_ns) == 0 {
            return;
        }
        for slot in 0..self.services.len() {
            if self.pollfds[slot].revents != 0 {
                self.read_replies(slot);
            }
        }
    }

    fn read_replies(&mut self, slot: usize) {
        loop {
            let n = match self.services[slot].socket.recv(&mut self.buf) {
                Ok(n) => n,
                Err(e) if e.kind() == ErrorKind::WouldBlock => return,
                // e.g. ECONNREFUSED reported for an earlier send: that request times out.
                Err(_) => continue,
            };
            let received_ns = clock::now_ns();
            let buf = std::mem::take(&mut self.buf);
            self.on_reply(slot, &buf[..n], received_ns);
            self.buf = buf;
        }
    }

    fn on_reply(&mut self, slot: usize, datagram: &[u8], received_ns: u64) {
        let Ok((h, pixels)) = ReplyHeader::decode(datagram) else {
            self.unrecorded(&self.live.bad_replies, datagram);
            return;
        };
        if self
            .in_flight
            .get(h.request_id)
            .is_some_and(|(deadline_ns, _)| flights::past(deadline_ns, received_ns))
        {
            // Read after its deadline: the request timed out first (as if the expiry had run
            // before this read), so this reply is late.
            self.expire(received_ns);
        }
        if let Some((_, f)) = self.in_flight.get(h.request_id) {
            if f.slot != slot || f.block != h.id {
                // Not the reply to this request: it stays in flight, the datagram is ignored.
                self.unrecorded(&self.live.bad_replies, datagram);
                return;
            }
        }
        if let Some((_, flight)) = self.in_flight.take(h.request_id) {
            self.services[slot].in_flight -= 1;
            let good = h.status == REPLY_OK && datagram::block_matches(&h.id, pixels);
            let mut s = self.reply_sample(h.request_id, &flight, &h, received_ns, datagram.len());
            if good {
                if flight.attempt == 1 && self.cfg.adaptive_timeout {
                    // Karn: only requests sent once give RTT samples.
                    self.services[slot]
                        .rto
                        .sample((received_ns - flight.sent_ns) as f64);
                }
                let useful = self
                    .frame
                    .as_mut()
                    .filter(|f| f.number == h.id.frame)
                    .is_some_and(|f| f.on_ok(h.id.block));
                if useful {
                    add(&self.live.useful_blocks, 1);
                } else {
                    add(&self.live.redundant, 1);
                    s.flags |= FLAG_REDUNDANT;
                }
            } else {
                s.status = Status::Error as u8;
                self.block_failed(&flight);
            }
            self.ctx.recorder.record(&s);
            return;
        }
        let Some(flight) = self.expired.remove(&h.request_id) else {
            // A reply after its late window, or never asked for.
            self.unrecorded(&self.live.stray, datagram);
            return;
        };
        // Late: recorded once, with the timeout it missed as detail_ns; the block stays
        // given up (or retransmitted).
        let mut s = self.reply_sample(h.request_id, &flight, &h, received_ns, datagram.len());
        s.status = Status::Late as u8;
        s.detail_ns = flight.timeout_ns;
        self.ctx.recorder.record(&s);
    }

    /// A datagram no sample records: counted in `counter`, its bytes in `bytes_rx`.
    fn unrecorded(&self, counter: &AtomicU64, datagram: &[u8]) {
        add(counter, 1);
        self.ctx.count_unrecorded_rx(datagram.len() as u64);
    }

    fn sample(&self, request_id: u64, f: &Flight, status: u8) -> Sample {
        let mut flags = 0;
        if f.attempt > 1 {
            flags |= FLAG_RETRANSMISSION;
        }
        if f.hedged {
            flags |= FLAG_HEDGED;
        }
        Sample {
            request_id,
            // A block request leaves as soon as a slot is free: intended is the send.
            intended_ns: f.sent_ns,
            sent_ns: f.sent_ns,
            bytes_out: REQUEST_BYTES as u64,
            client: f.block.frame,
            arg: f.block.block,
            op: datagram::OP_BLOCK,
            flags,
            status,
            service: self.services[f.slot].id,
            ..Default::default()
        }
    }

    fn reply_sample(&self, id: u64, f: &Flight, h: &ReplyHeader, received_ns: u64, bytes: usize) -> Sample {
        Sample {
            received_ns,
            server_ns: h.server_ns,
            service_ns: h.server_ns,
            detail_ns: h.delay_ns,
            bytes_in: bytes as u64,
            ..self.sample(id, f, Status::Ok as u8)
        }
    }
}

/// Stream on the drive loop, without a schedule: its requests go out as slots free.
impl Sender for Accessor<'_> {
    /// Never called: stream has no schedule (a block's request is sent in `advance`).
    fn send(&mut self, _id: u64, _intended_ns: u64) {}

    fn poll(&mut self, wait_ns: u64) {
        self.poll_services(wait_ns);
    }

    /// Timeouts, and the late-reply windows that closed.
    fn expire(&mut self, now_ns: u64) {
        self.expire_requests(now_ns);
        self.finalize_expired(now_ns, false);
    }

    fn stop(&mut self) {
        self.end_sending();
    }

    /// At the time bound sending ends; else the next frame, and a request on each free slot.
    fn advance(&mut self, now_ns: u64) {
        if self.ctx.past_end(now_ns) {
            self.end_sending();
        }
        self.advance_frame();
        let mut out = std::mem::take(&mut self.out);
        self.send_requests(&mut out);
        self.out = out;
    }

    fn in_flight(&self) -> bool {
        !self.in_flight.is_empty()
    }

    fn done(&self) -> bool {
        self.frame.is_none() && self.in_flight.is_empty() && self.expired.is_empty()
    }

    /// Not paced: its intended time is its send time.
    fn last_sent_ns(&self) -> u64 {
        0
    }

    fn wake_ns(&mut self, now_ns: u64) -> u64 {
        self.next_wake_ns().saturating_sub(now_ns).min(MAX_WAIT_NS)
    }

    /// After a stop's grace: the late windows close and what is in flight is dropped.
    fn close(&mut self, now_ns: u64) {
        self.finalize_expired(now_ns, true);
        self.abandon_in_flight();
    }
}
