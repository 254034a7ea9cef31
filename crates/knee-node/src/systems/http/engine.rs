//! The http target's load engine: one thread, `load.connections` connections (closed loop:
//! one per client), polled with `ppoll`. Connects, TLS handshakes, writes and responses
//! are all driven from that one poll, so a connection that stalls (a SYN dropped by a full
//! accept queue, a server that never answers) holds up only the request on it.
//!
//! Open loop (as wrk2): requests are due at their scheduled times whatever the responses do;
//! a due request waits in a FIFO for a free connection, and its latency counts from its
//! intended time, so queueing for a connection shows up in the latency instead of hiding
//! it (no coordinated omission). Closed loop: each connection is a client that sends,
//! waits for the response (or its timeout), thinks, and sends again.
//!
//! The run ends by itself: nothing new is sent after the duration (or a stop request), and
//! one second later (the harness's grace) what still waits, connects or is in flight is
//! recorded as dropped (`stopped`), whatever the target does.
//!
//! Every scheduled request is one sample: `op` its entry in the request table, `flags` the
//! HTTP status, `arg` the failure's reason (0 none), `service` 1 when the response carried
//! the Server-Timing entries of the server time, `queue_ns` the time it waited for its
//! connection to be made (0: the connection was open), `service_ns` (declared `held_ns`)
//! the time it waited in the FIFO for a free connection, from its intended time (0: one
//! was free when it fell due).

use std::collections::VecDeque;
use std::net::SocketAddr;

use super::config::HttpConfig;
use super::conn::{self, Conn, Failed, Job, Read};
use super::pool::{self, Pool};
use super::requests::Table;
use super::response::{Reason, Response};
use super::timing::TimingKeys;
use super::tls::Tls;
use crate::clock;
use crate::load::drive::{drive, Grace, Sender};
use crate::load::flights;
use crate::load::harness::RunContext;
use crate::load::recorder::NO_SERVER_TIME;
use crate::load::recorder::{Sample, Status};
use crate::load::schedule::IDLE_WAIT_NS;
use crate::rng::Rng;
use crate::stdio::CappedLog;

/// Bytes read per `recv`: a response's head and body pass through it, never kept whole.
const READ_BUF_BYTES: usize = 64 << 10;
/// A connection idle this long is read (without blocking) before a request is written to
/// it, so a close the server sent since the last poll is seen first. Servers close idle
/// connections after seconds (Node: 5 s); a shorter idle time is never checked, which
/// keeps the syscall off the path of a busy connection.
const IDLE_CHECK_NS: u64 = 1_000_000;

/// A request due (open loop) and not yet on a connection.
struct Queued {
    id: u64,
    intended_ns: u64,
    /// It found no free connection once: its wait is held time (`service_ns`).
    waited: bool,
}

/// Open: due requests waiting for a free connection, at most `max_outstanding` with those
/// on connections (beyond: recorded as dropped, not queued without end). Closed: one
/// client per connection.
type Mode = crate::load::clients::Mode<VecDeque<Queued>>;

/// What the run counted besides the samples (the `done` line's own fields).
#[derive(Default, Debug, Clone, Copy)]
pub struct Tally {
    pub connections_opened: u64,
    pub connect_failures: u64,
    /// The most connections with a request at once.
    pub max_busy: u64,
}

pub struct Engine<'a> {
    conns: Vec<Conn>,
    pollfds: Vec<libc::pollfd>,
    addr: SocketAddr,
    tls: Option<Tls>,
    keys: TimingKeys,
    table: Table,
    ctx: &'a RunContext,
    timeout_ns: u64,
    connect_timeout_ns: u64,
    max_outstanding: usize,
    /// Connections with a request (connecting, writing or waiting for its response).
    busy: usize,
    next_id: u64,
    rng: Rng,
    buf: Vec<u8>,
    last_sent_ns: u64,
    /// The next connection to look at for a free one (round robin).
    cursor: usize,
    mode: Mode,
    tally: Tally,
    log: CappedLog,
}

/// HTTP/1.1 on the drive loop: a due request waits in the FIFO for a free connection.
impl Sender for Engine<'_> {
    const GRACE: Grace = Grace::AfterStopOrEnd;

    /// Open loop: the request joins the queue (or is dropped past the bound) and goes out
    /// at once if a connection is free.
    fn send(&mut self, id: u64, intended_ns: u64) {
        let Mode::Open(queue) = &mut self.mode else {
            return;
        };
        if queue.len() + self.busy >= self.max_outstanding {
            self.record_unsent(id, intended_ns, 0, Reason::MaxOutstanding);
        } else {
            queue.push_back(Queued {
                id,
                intended_ns,
                waited: false,
            });
        }
        self.dispatch(clock::now_ns());
    }

    fn poll(&mut self, wait_ns: u64) {
        self.poll_conns(wait_ns);
    }

    fn stop(&mut self) {
        self.mode.stop();
    }

    fn advance(&mut self, now: u64) {
        self.dispatch(now);
    }

    fn in_flight(&self) -> bool {
        self.busy > 0
    }

    fn last_sent_ns(&self) -> u64 {
        self.last_sent_ns
    }

    /// Requests past their deadline are timeouts, their connection closed (a late
    /// response on it would be taken for the next request's); connects past theirs fail.
    fn expire(&mut self, now: u64) {
        for slot in 0..self.conns.len() {
            let conn = &mut self.conns[slot];
            if conn.is_opening() && now >= conn.connect_deadline_ns {
                let ms = self.connect_timeout_ns / 1_000_000;
                if conn.job.is_some() {
                    let failed = Failed {
                        reason: Reason::ConnectTimeout,
                        error: format!("connect: not made within {ms} ms"),
                        refused: false,
                    };
                    self.connect_failed(slot, failed, now);
                } else {
                    conn.close();
                }
                continue;
            }
            let Some(job) = conn
                .job
                .filter(|j| j.sent_ns > 0 && flights::past(j.deadline_ns, now))
            else {
                continue;
            };
            conn.job = None;
            conn.free_ns = now;
            conn.close();
            self.busy -= 1;
            self.record(&Self::sample(slot, &job, Status::Timeout, Reason::Timeout as u32));
            self.client_done(slot, now);
        }
    }

    fn done(&self) -> bool {
        self.busy == 0
            && match &self.mode {
                Mode::Open(queue) => queue.is_empty(),
                Mode::Closed(clients) => clients.done(),
            }
    }

    /// After the grace: what waits, connects or is in flight is dropped (`stopped`).
    fn close(&mut self, now: u64) {
        if let Mode::Open(queue) = &mut self.mode {
            let waiting: Vec<Queued> = queue.drain(..).collect();
            for q in waiting {
                self.record_unsent(q.id, q.intended_ns, 0, Reason::Stopped);
            }
        }
        for slot in 0..self.conns.len() {
            let conn = &mut self.conns[slot];
            conn.close();
            if let Some(mut job) = conn.job.take() {
                self.busy -= 1;
                if job.sent_ns == 0 {
                    job.connect_ns = now.saturating_sub(job.taken_ns).max(1);
                }
                self.record(&Self::sample(slot, &job, Status::Drop, Reason::Stopped as u32));
            }
        }
    }

    fn wake_ns(&mut self, now: u64) -> u64 {
        let mut wait = IDLE_WAIT_NS;
        for c in &self.conns {
            if c.is_opening() {
                wait = wait.min(c.connect_deadline_ns.saturating_sub(now));
            } else if let Some(j) = c.job.filter(|j| j.sent_ns > 0) {
                wait = wait.min(j.deadline_ns.saturating_sub(now));
            }
        }
        match &self.mode {
            // A connection is free for a request that waits: no wait.
            Mode::Open(queue) => {
                if !queue.is_empty() && self.busy < self.conns.len() {
                    return 0;
                }
            }
            // Closed loop: no spinning; a response wakes the thread.
            Mode::Closed(clients) => {
                for (slot, t) in clients.pending() {
                    if self.conns[slot].job.is_none() {
                        wait = wait.min(t.saturating_sub(now));
                    }
                }
            }
        }
        wait
    }
}

impl<'a> Engine<'a> {
    /// The engine over `pool`'s connections (made before the start).
    pub fn new(
        cfg: &HttpConfig,
        table: Table,
        pool: Pool,
        ctx: &'a RunContext,
    ) -> Result<Engine<'a>, String> {
        let load = &cfg.load;
        let mode = Mode::new(&load.schedule, ctx.start_ns, VecDeque::new());
        Ok(Engine {
            conns: pool.conns,
            pollfds: pool.pollfds,
            addr: pool.addr,
            tls: pool.tls,
            keys: cfg.driver.keys(),
            table,
            ctx,
            timeout_ns: (load.timeout_ms * 1e6) as u64,
            connect_timeout_ns: pool.connect_timeout_ns,
            max_outstanding: ctx.bounds.max_in_flight.unwrap_or(usize::MAX),
            busy: 0,
            next_id: 0,
            rng: Rng::new(load.seed ^ 0x4854_5450),
            buf: vec![0; READ_BUF_BYTES],
            last_sent_ns: 0,
            cursor: 0,
            mode,
            tally: Tally::default(),
            log: pool::failure_log(),
        })
    }

    /// Runs the load to its end (the duration and its grace at the latest).
    pub fn run(mut self) -> Tally {
        let ctx = self.ctx;
        drive(&mut self, ctx);
        self.tally.connections_opened = self.conns.iter().map(|c| c.opened).sum();
        self.tally
    }

    /// Puts waiting requests on free connections.
    fn dispatch(&mut self, now: u64) {
        match &self.mode {
            Mode::Open(queue) => {
                if queue.is_empty() || self.busy == self.conns.len() {
                    return;
                }
                let n = self.conns.len();
                for k in 0..n {
                    let slot = (self.cursor + k) % n;
                    if self.conns[slot].job.is_some() {
                        continue;
                    }
                    let Mode::Open(queue) = &mut self.mode else {
                        return;
                    };
                    let Some(q) = queue.pop_front() else {
                        break;
                    };
                    self.cursor = slot + 1;
                    let held_ns = if q.waited {
                        now.saturating_sub(q.intended_ns)
                    } else {
                        0
                    };
                    self.take(slot, q.id, q.intended_ns, now, held_ns);
                }
                if let Mode::Open(queue) = &mut self.mode {
                    queue.iter_mut().for_each(|q| q.waited = true);
                }
            }
            Mode::Closed(_) => {
                for slot in 0..self.conns.len() {
                    if self.conns[slot].job.is_some() {
                        continue;
                    }
                    let Mode::Closed(clients) = &mut self.mode else {
                        return;
                    };
                    let Some(intended_ns) = clients.take_due(slot, now) else {
                        continue;
                    };
                    let ticket = self.next_id;
                    if self.ctx.past_end(intended_ns) || !self.ctx.allows_request(ticket) {
                        continue;
                    }
                    self.next_id += 1;
                    self.take(slot, ticket, intended_ns, now, 0);
                }
            }
        }
    }

    /// Puts request `id` on connection `slot`: written at once if the connection is open,
    /// else once it is made (a connect starts now if it is closed).
    fn take(&mut self, slot: usize, id: u64, intended_ns: u64, now: u64, held_ns: u64) {
        let pick = self.table.pick(&mut self.rng);
        let request = self.table.get(pick);
        let conn = &mut self.conns[slot];
        if conn.is_open() && now.saturating_sub(conn.free_ns) >= IDLE_CHECK_NS {
            let _ = conn.read(&mut self.buf, &self.keys); // closes it if the server did
        }
        conn.take(Job {
            request_id: id,
            intended_ns,
            pick,
            taken_ns: now,
            connect_ns: 0,
            sent_ns: 0,
            deadline_ns: 0,
            bytes_out: request.bytes.len() as u64,
            head: request.head,
            close: request.close,
            held_ns,
        });
        self.busy += 1;
        self.tally.max_busy = self.tally.max_busy.max(self.busy as u64);
        if conn.is_closed() {
            if let Err(failed) = conn.open(&self.addr, self.tls.as_ref(), now, self.connect_timeout_ns) {
                self.connect_failed(slot, failed, clock::now_ns());
                return;
            }
        }
        self.advance_conn(slot);
    }

    /// Drives connection `slot` on its way to a written request: its connect and handshake,
    /// then the write (or the rest of it).
    fn advance_conn(&mut self, slot: usize) {
        let now = clock::now_ns();
        if self.conns[slot].is_opening() {
            match self.conns[slot].progress(self.tls.as_ref(), now) {
                Ok(false) => return,
                Ok(true) => {
                    if let Some(job) = self.conns[slot].job.as_mut() {
                        job.connect_ns = now.saturating_sub(job.taken_ns).max(1);
                    }
                }
                Err(failed) => {
                    self.connect_failed(slot, failed, now);
                    return;
                }
            }
        }
        let conn = &mut self.conns[slot];
        let Some(job) = conn.job.filter(|_| conn.is_open()) else {
            return;
        };
        let first = job.sent_ns == 0;
        if !first && !conn.writing() {
            return;
        }
        let bytes = &self.table.get(job.pick).bytes;
        let sent_ns = if first { clock::now_ns() } else { job.sent_ns };
        if let Err(e) = conn.write(bytes) {
            conn.close();
            let Some(job) = conn.job.take() else { return };
            self.log
                .log(&format!("connection {slot}: write failed: {e}; it is made again"));
            self.busy -= 1;
            // Not sent, or sent in part: the server never had the whole request.
            self.record(&Self::sample(slot, &job, Status::Drop, Reason::Send as u32));
            self.client_done(slot, now);
            return;
        }
        if first {
            let deadline_ns = sent_ns + self.timeout_ns;
            if let Some(j) = conn.job.as_mut() {
                (j.sent_ns, j.deadline_ns) = (sent_ns, deadline_ns);
            }
            self.last_sent_ns = sent_ns;
            // A late send is the sender's lag: time waiting for a free connection, or for
            // the connection to be made, is the server's, and shows in the latency instead.
            let ready_ns = intended_ns_ready(&job, conn.free_ns);
            self.ctx.count_send(ready_ns, sent_ns, job.bytes_out);
        }
    }

    /// A connect (or TLS handshake) failed or timed out: the request on it, if any, is a
    /// drop with its reason; the connection is closed and free.
    fn connect_failed(&mut self, slot: usize, failed: Failed, now: u64) {
        self.tally.connect_failures += 1;
        self.log.log(&format!("connection {slot}: {}", failed.words()));
        let reason = failed.reason;
        let conn = &mut self.conns[slot];
        conn.close();
        if let Some(mut job) = conn.job.take() {
            self.busy -= 1;
            job.connect_ns = now.saturating_sub(job.taken_ns).max(1);
            self.record(&Self::sample(slot, &job, Status::Drop, reason as u32));
            self.client_done(slot, now);
        }
    }

    /// A closed-loop client's request is over at `now`: it sends again after its think time.
    fn client_done(&mut self, slot: usize, now: u64) {
        self.mode
            .client_done(slot, now, self.ctx.stopping(), &mut self.rng);
    }

    fn poll_conns(&mut self, wait_ns: u64) {
        conn::watch(&self.conns, &mut self.pollfds);
        if crate::poll::ppoll_ns(&mut self.pollfds, wait_ns) == 0 {
            return;
        }
        for slot in 0..self.conns.len() {
            let revents = self.pollfds[slot].revents;
            if revents == 0 {
                continue;
            }
            let conn = &self.conns[slot];
            if conn.is_opening() || (revents & libc::POLLOUT != 0 && conn.writing()) {
                self.advance_conn(slot);
            }
            if revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0 && self.conns[slot].is_open() {
                let read = self.conns[slot].read(&mut self.buf, &self.keys);
                if let Read::Done(job, result) = read {
                    self.finish_job(slot, job, result, clock::now_ns());
                }
            }
        }
    }

    /// Records a request that got its response (or failed on the wire).
    fn finish_job(&mut self, slot: usize, job: Job, result: Result<Response, Reason>, now: u64) {
        self.busy -= 1;
        self.conns[slot].free_ns = now;
        let mut s = Self::sample(slot, &job, Status::Ok, 0);
        match result {
            // Read after its deadline: a timeout, as if the expiry had come first.
            Ok(_) if flights::past(job.deadline_ns, now) => {
                s.status = Status::Timeout as u8;
                s.arg = Reason::Timeout as u32;
            }
            Ok(r) => {
                s.received_ns = now;
                s.bytes_in = r.bytes;
                s.flags = r.status;
                match Reason::of_status(r.status) {
                    None => s.status = Status::Ok as u8,
                    Some(reason) => {
                        s.status = Status::Error as u8;
                        s.arg = reason as u32;
                    }
                }
                if r.split.present {
                    s.service = 1;
                    s.server_ns = r.split.server_ns;
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
            }
        }
        self.record(&s);
        self.client_done(slot, now);
    }

    /// The sample of `job` on `slot` with `status` and its reason (`arg`, 0: none),
    /// nothing received yet; `queue_ns` is its connect time.
    fn sample(slot: usize, job: &Job, status: Status, arg: u32) -> Sample {
        Sample {
            request_id: job.request_id,
            intended_ns: job.intended_ns,
            sent_ns: job.sent_ns,
            queue_ns: job.connect_ns,
            service_ns: job.held_ns,
            bytes_out: if job.sent_ns > 0 { job.bytes_out } else { 0 },
            client: slot as u32,
            op: job.pick.op,
            status: status as u8,
            arg,
            ..Default::default()
        }
    }

    /// A request that never reached a connection: dropped, with its reason (its `op` is
    /// drawn as a sent one's would be, so the mix of entries stays the same).
    fn record_unsent(&mut self, id: u64, intended_ns: u64, client: u32, reason: Reason) {
        let op = self.table.pick(&mut self.rng).op;
        self.record(&Sample {
            request_id: id,
            intended_ns,
            client,
            op,
            status: Status::Drop as u8,
            arg: reason as u32,
            ..Default::default()
        });
    }

    fn record(&self, s: &Sample) {
        self.ctx.recorder.record(s);
    }
}

/// When a request's connection was ready for it: its intended time, or later if it had
/// to wait for the connection to be free or to be made.
fn intended_ns_ready(job: &Job, free_ns: u64) -> u64 {
    job.intended_ns
        .max(free_ns)
        .max(job.taken_ns.saturating_add(job.connect_ns))
}
