//! The http target's load engine: one thread, `load.connections` keep-alive connections
//! (closed loop: one per client), polled with `ppoll`.
//!
//! Open loop (as wrk2): requests are due at their scheduled times whatever the responses do;
//! a due request waits in a FIFO for a free connection, and its latency counts from its
//! intended time, so queueing for a connection shows up in the latency instead of hiding
//! it (no coordinated omission). Closed loop: each connection is a client that sends,
//! waits for the response (or its timeout), thinks, and sends again.
//!
//! Every request is one sample: `op` its entry in the request table, `flags` the HTTP
//! status, `arg` the failure's reason (0 none), `service` 1 when the response carried the
//! Server-Timing entries of the server time.

use std::collections::VecDeque;
use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use super::config::HttpConfig;
use super::conn::{Conn, InFlight, Read};
use super::requests::Table;
use super::response::{Reason, Response};
use super::timing::TimingKeys;
use crate::load::config::{ScheduleConfig, Think};
use crate::load::harness::RunContext;
use crate::load::recorder::NO_SERVER_TIME;
use crate::load::recorder::{Sample, Status};
use crate::load::schedule::Schedule;
use crate::rng::Rng;
use crate::{clock, stdio};

/// Open loop: within this of the next send, poll without sleeping (a sleep can end late).
const SPIN_NS: u64 = 50_000;
/// Open loop: after a send, poll without sleeping this long (on loopback most responses
/// come within it; a woken thread would add its wake-up time to the latency).
const SPIN_AFTER_SEND_NS: u64 = 50_000;
/// Longest wait, so stop requests, timeouts and think times are noticed.
const IDLE_WAIT_NS: u64 = 20_000_000;
/// Bytes read per `recv`: a response's head and body pass through it, never kept whole.
const READ_BUF_BYTES: usize = 64 << 10;
/// Connects wait at most this (or the request timeout, if shorter).
const CONNECT_TIMEOUT_NS: u64 = 5_000_000_000;

/// A request due (open loop) and not yet on a connection.
struct Queued {
    id: u64,
    intended_ns: u64,
}

enum Mode {
    Open {
        schedule: Schedule,
        /// The next request's intended time (None: no more).
        due: Option<u64>,
        /// Due requests waiting for a free connection, at most `max_outstanding` with those
        /// in flight (beyond: recorded as dropped, not queued without end).
        queue: VecDeque<Queued>,
    },
    Closed {
        think_ns: f64,
        think: Think,
        /// When each client sends next (None: it is done).
        next_ns: Vec<Option<u64>>,
    },
}

/// What the run counted besides the samples (the `done` line's own fields).
#[derive(Default, Debug, Clone, Copy)]
pub struct Tally {
    pub connections_opened: u64,
    pub connect_failures: u64,
}

pub struct Engine<'a> {
    conns: Vec<Conn>,
    pollfds: Vec<libc::pollfd>,
    addr: SocketAddr,
    keys: TimingKeys,
    table: Table,
    ctx: &'a RunContext,
    timeout_ns: u64,
    connect_timeout: Duration,
    max_outstanding: usize,
    in_flight: usize,
    next_id: u64,
    rng: Rng,
    /// The schedule's own draws, apart from the request picks.
    schedule_rng: Rng,
    buf: Vec<u8>,
    last_sent_ns: u64,
    /// The next connection to look at for a free one (round robin).
    cursor: usize,
    mode: Mode,
    tally: Tally,
}

impl<'a> Engine<'a> {
    pub fn new(cfg: &HttpConfig, table: Table, ctx: &'a RunContext) -> Result<Engine<'a>, String> {
        let load = &cfg.load;
        let addr = cfg
            .authority
            .to_socket_addrs()
            .map_err(|e| format!("target {}: {e}", cfg.load.target))?
            .next()
            .ok_or_else(|| format!("target {}: no address", cfg.load.target))?;
        let (count, mode) = match &load.schedule {
            ScheduleConfig::Closed {
                clients,
                think_ms,
                think,
            } => (
                *clients,
                Mode::Closed {
                    think_ns: think_ms * 1e6,
                    think: *think,
                    next_ns: vec![Some(ctx.start_ns); *clients],
                },
            ),
            other => {
                let schedule = Schedule::new(other).ok_or("the open loop needs a schedule")?;
                (
                    load.connections,
                    Mode::Open {
                        schedule,
                        due: None,
                        queue: VecDeque::new(),
                    },
                )
            }
        };
        let limits = cfg.driver.limits();
        let timeout_ns = (load.timeout_ms * 1e6) as u64;
        Ok(Engine {
            conns: (0..count).map(|i| Conn::new(i as u32, limits)).collect(),
            pollfds: vec![
                libc::pollfd {
                    fd: -1,
                    events: libc::POLLIN,
                    revents: 0,
                };
                count
            ],
            addr,
            keys: cfg.driver.keys(),
            table,
            ctx,
            timeout_ns,
            connect_timeout: Duration::from_nanos(timeout_ns.clamp(1_000_000, CONNECT_TIMEOUT_NS)),
            max_outstanding: ctx.bounds.max_in_flight.unwrap_or(usize::MAX),
            in_flight: 0,
            next_id: 0,
            rng: Rng::new(load.seed ^ 0x4854_5450),
            schedule_rng: Rng::new(load.seed ^ 0x5EED_5C4E_D01E),
            buf: vec![0; READ_BUF_BYTES],
            last_sent_ns: 0,
            cursor: 0,
            mode,
            tally: Tally::default(),
        })
    }

    /// Opens every connection before the start, so the first requests do not pay for it;
    /// a target that cannot be reached at all fails the node here.
    pub fn connect_all(&mut self) -> Result<(), String> {
        for c in &mut self.conns {
            c.open(&self.addr, self.connect_timeout)
                .map_err(|e| format!("connection {} to {}: {e}", c.index, self.addr))?;
        }
        Ok(())
    }

    pub fn run(mut self) -> Tally {
        self.schedule_next();
        loop {
            let now = clock::now_ns();
            self.expire(now);
            if self.ctx.stopping() {
                self.stop_sending();
            }
            self.enqueue_due(now);
            self.dispatch(now);
            if self.finished() {
                break;
            }
            if self.ctx.grace_over(now) {
                self.abandon_all();
                break;
            }
            let wait_ns = self.wait_ns(clock::now_ns());
            self.poll(wait_ns);
        }
        self.tally.connections_opened = self.conns.iter().map(|c| c.opened).sum();
        self.tally
    }

    /// Open loop: the next intended time, if the bounds allow one.
    fn schedule_next(&mut self) {
        let (ctx, next_id) = (self.ctx, self.next_id);
        if let Mode::Open { schedule, due, .. } = &mut self.mode {
            *due = ctx
                .allows_request(next_id)
                .then(|| schedule.next_offset_ns(&mut self.schedule_rng))
                .flatten()
                .map(|off| ctx.start_ns + off)
                .filter(|&t| !ctx.past_end(t));
        }
    }

    /// Open loop: every request now due joins the queue (or is dropped past the bound).
    fn enqueue_due(&mut self, now: u64) {
        loop {
            let Mode::Open { due, queue, .. } = &mut self.mode else {
                return;
            };
            let Some(intended_ns) = due.filter(|&t| now >= t) else {
                return;
            };
            let id = self.next_id;
            self.next_id += 1;
            if queue.len() + self.in_flight >= self.max_outstanding {
                let (op, _) = self.table.pick(&mut self.rng);
                self.record_unsent(id, intended_ns, op, 0, Status::Drop, 0);
            } else {
                queue.push_back(Queued { id, intended_ns });
            }
            self.schedule_next();
        }
    }

    fn stop_sending(&mut self) {
        match &mut self.mode {
            Mode::Open { due, .. } => *due = None,
            Mode::Closed { next_ns, .. } => next_ns.iter_mut().for_each(|n| *n = None),
        }
    }

    /// Puts waiting requests on free connections.
    fn dispatch(&mut self, now: u64) {
        match &self.mode {
            Mode::Open { queue, .. } => {
                if queue.is_empty() || self.in_flight == self.conns.len() {
                    return;
                }
                let n = self.conns.len();
                for k in 0..n {
                    let slot = (self.cursor + k) % n;
                    if self.conns[slot].in_flight.is_some() {
                        continue;
                    }
                    let Mode::Open { queue, .. } = &mut self.mode else {
                        return;
                    };
                    let Some(q) = queue.pop_front() else {
                        break;
                    };
                    self.cursor = slot + 1;
                    self.send(slot, q.id, q.intended_ns);
                }
            }
            Mode::Closed { .. } => {
                for slot in 0..self.conns.len() {
                    let Mode::Closed { next_ns, .. } = &mut self.mode else {
                        return;
                    };
                    let Some(intended_ns) = next_ns[slot].filter(|&t| t <= now) else {
                        continue;
                    };
                    if self.conns[slot].in_flight.is_some() {
                        continue;
                    }
                    // Set again when its response is in; left unset, the client is done.
                    next_ns[slot] = None;
                    let ticket = self.next_id;
                    if self.ctx.past_end(intended_ns) || !self.ctx.allows_request(ticket) {
                        continue;
                    }
                    self.next_id += 1;
                    self.send(slot, ticket, intended_ns);
                }
            }
        }
    }

    /// Sends request `id` on connection `slot`, opening it if needed; a failure is the
    /// request's sample at once.
    fn send(&mut self, slot: usize, id: u64, intended_ns: u64) {
        let (op, request) = self.table.pick(&mut self.rng);
        let conn = &mut self.conns[slot];
        if let Err(e) = conn.open(&self.addr, self.connect_timeout) {
            self.tally.connect_failures += 1;
            if self.tally.connect_failures <= 10 {
                stdio::log(&format!("connection {slot}: connect failed: {e}"));
            }
            self.not_sent(slot, id, intended_ns, op, Reason::Connect);
            return;
        }
        self.pollfds[slot].fd = conn.fd();
        let sent_ns = clock::now_ns();
        let bytes_out = request.bytes.len() as u64;
        let f = InFlight {
            request_id: id,
            intended_ns,
            sent_ns,
            deadline_ns: sent_ns + self.timeout_ns,
            op,
            bytes_out,
        };
        if let Err(e) = conn.send(&request.bytes, request.head, f) {
            stdio::log(&format!("connection {slot}: send failed: {e}; opening it again"));
            conn.close();
            self.pollfds[slot].fd = -1;
            self.not_sent(slot, id, intended_ns, op, Reason::Send);
            return;
        }
        self.in_flight += 1;
        self.last_sent_ns = sent_ns;
        // A late send is the sender's lag: time waiting for a free connection is the
        // server's, and shows in the latency instead.
        let ready_ns = intended_ns.max(self.conns[slot].free_ns);
        self.ctx.count_send(ready_ns, sent_ns, bytes_out);
    }

    /// A closed-loop client's request is over at `now`: it sends again after its think time.
    fn client_done(&mut self, slot: usize, now: u64) {
        if let Mode::Closed {
            think_ns,
            think,
            next_ns,
        } = &mut self.mode
        {
            let pause = match think {
                Think::Fixed => *think_ns,
                Think::Exponential => self.rng.exponential(*think_ns),
            };
            if !self.ctx.stopping() {
                next_ns[slot] = Some(now + pause as u64);
            }
        }
    }

    fn poll(&mut self, wait_ns: u64) {
        if crate::poll::ppoll_ns(&mut self.pollfds, wait_ns) == 0 {
            return;
        }
        for slot in 0..self.conns.len() {
            if self.pollfds[slot].revents == 0 {
                continue;
            }
            let read = self.conns[slot].read(&mut self.buf, &self.keys);
            let now = clock::now_ns();
            if let Read::Done(f, result) = read {
                self.finish(slot, f, result, now);
            }
            self.pollfds[slot].fd = self.conns[slot].fd();
        }
    }

    /// Records a request that got its response (or failed on the wire).
    fn finish(&mut self, slot: usize, f: InFlight, result: Result<Response, Reason>, now: u64) {
        self.in_flight -= 1;
        self.conns[slot].free_ns = now;
        let mut s = Sample {
            request_id: f.request_id,
            intended_ns: f.intended_ns,
            sent_ns: f.sent_ns,
            bytes_out: f.bytes_out,
            client: slot as u32,
            op: f.op,
            ..Default::default()
        };
        match result {
            // Read after its deadline: a timeout, as if the expiry had come first.
            Ok(_) if now >= f.deadline_ns => {
                s.status = Status::Timeout as u8;
                s.arg = Reason::Timeout as u32;
            }
            Ok(r) => {
                s.received_ns = now;
                s.bytes_in = r.bytes;
                s.flags = r.status;
                s.status = if (200..300).contains(&r.status) {
                    Status::Ok
                } else {
                    Status::Error
                } as u8;
                if r.split.present {
                    s.service = 1;
                    s.server_ns = r.split.server_ns;
                    s.service_ns = r.split.server_ns;
                    s.detail_ns = r.split.detail_ns;
                } else {
                    // No server time: the split is unknown, not zero (docs/samples.md).
                    s.server_ns = NO_SERVER_TIME;
                }
            }
            Err(reason) => {
                s.received_ns = now;
                s.status = Status::Error as u8;
                s.arg = reason as u32;
                self.conns[slot].close();
                self.pollfds[slot].fd = -1;
            }
        }
        self.ctx.recorder.record(&s);
        self.client_done(slot, now);
    }

    /// Requests past their deadline are timeouts; their connection is opened again (a late
    /// response on it would be taken for the next request's).
    fn expire(&mut self, now: u64) {
        for slot in 0..self.conns.len() {
            let Some(f) = self.conns[slot].in_flight.filter(|f| now >= f.deadline_ns) else {
                continue;
            };
            self.conns[slot].in_flight = None;
            self.conns[slot].free_ns = now;
            self.conns[slot].close();
            self.pollfds[slot].fd = -1;
            self.in_flight -= 1;
            self.record_sent_unanswered(slot, f, Status::Timeout, Reason::Timeout);
            self.client_done(slot, now);
        }
    }

    fn finished(&self) -> bool {
        self.in_flight == 0
            && match &self.mode {
                Mode::Open { due, queue, .. } => due.is_none() && queue.is_empty(),
                Mode::Closed { next_ns, .. } => next_ns.iter().all(Option::is_none),
            }
    }

    /// After a stop's grace: what waits and what is in flight are dropped.
    fn abandon_all(&mut self) {
        if let Mode::Open { queue, .. } = &mut self.mode {
            let waiting: Vec<Queued> = queue.drain(..).collect();
            for q in waiting {
                let (op, _) = self.table.pick(&mut self.rng);
                self.record_unsent(q.id, q.intended_ns, op, 0, Status::Drop, 0);
            }
        }
        for slot in 0..self.conns.len() {
            if let Some(f) = self.conns[slot].in_flight.take() {
                self.in_flight -= 1;
                self.record_sent_unanswered(slot, f, Status::Drop, Reason::Timeout);
            }
            self.conns[slot].close();
        }
    }

    fn wait_ns(&self, now: u64) -> u64 {
        let mut wait = IDLE_WAIT_NS;
        for c in &self.conns {
            if let Some(f) = &c.in_flight {
                wait = wait.min(f.deadline_ns.saturating_sub(now));
            }
        }
        match &self.mode {
            Mode::Open { due, queue, .. } => {
                if !queue.is_empty() && self.in_flight < self.conns.len() {
                    return 0;
                }
                if self.in_flight > 0 && now < self.last_sent_ns + SPIN_AFTER_SEND_NS {
                    return 0;
                }
                if let Some(t) = due {
                    wait = wait.min(t.saturating_sub(now).saturating_sub(SPIN_NS));
                }
            }
            // Closed loop: no spinning; a response wakes the thread.
            Mode::Closed { next_ns, .. } => {
                for (slot, t) in next_ns.iter().enumerate() {
                    if let Some(t) = t.filter(|_| self.conns[slot].in_flight.is_none()) {
                        wait = wait.min(t.saturating_sub(now));
                    }
                }
            }
        }
        wait
    }

    /// A request its connection could not send (connect or write failed): a drop with
    /// its reason, and the connection free again.
    fn not_sent(&mut self, slot: usize, id: u64, intended_ns: u64, op: u16, reason: Reason) {
        self.record_unsent(id, intended_ns, op, slot as u32, Status::Drop, reason as u32);
        self.client_done(slot, clock::now_ns());
    }

    fn record_unsent(&self, id: u64, intended_ns: u64, op: u16, client: u32, status: Status, reason: u32) {
        self.ctx.recorder.record(&Sample {
            request_id: id,
            intended_ns,
            client,
            op,
            status: status as u8,
            arg: reason,
            ..Default::default()
        });
    }

    fn record_sent_unanswered(&self, slot: usize, f: InFlight, status: Status, reason: Reason) {
        self.ctx.recorder.record(&Sample {
            request_id: f.request_id,
            intended_ns: f.intended_ns,
            sent_ns: f.sent_ns,
            bytes_out: f.bytes_out,
            client: slot as u32,
            op: f.op,
            status: status as u8,
            arg: reason as u32,
            ..Default::default()
        });
    }
}
