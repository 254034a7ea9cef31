//! The HTTP/2 load engine: one thread, `load.connections` connections, each carrying up to
//! its limit of streams (the server's SETTINGS_MAX_CONCURRENT_STREAMS, or the client's
//! `max_streams` cap, the smaller), all driven from one `ppoll` and a tiny executor (each
//! connection's waker raises a flag; a flagged connection is polled again, a bounded number
//! of rounds per pass).
//!
//! Open loop: requests fall due at their scheduled times whatever the responses do. A due
//! request that finds no connection with a free stream (every one at its limit, closing
//! after a GOAWAY, or still being made) waits in knee's own FIFO, bounded with the streams
//! in flight by `load.max_outstanding`, and that wait is recorded per request as held time
//! (`service_ns`, declared `held_ns`), as is a body's wait for flow-control window. A
//! stream is never handed to h2 beyond the limit (h2 would queue it silently): knee counts
//! the streams in use on each connection. Latency runs from the intended time. Closed loop:
//! each client has one stream at a time (sends, waits, thinks, sends again).
//!
//! The run ends by itself at the duration and its 1 s grace: what still waits or is in
//! flight is then a drop, `stopped`. A stream the server refused unprocessed
//! (REFUSED_STREAM, or above a GOAWAY's last stream id) goes back to the head of the FIFO
//! once (RFC 9113 section 8.7); a second refusal is recorded as `refused`.

use std::collections::VecDeque;

use bytes::Bytes;
use http::{Request, Uri};

use super::super::conn::Failed;
use super::conn::{self, Ended, H2Conn};
use super::pool::H2Pool;
use super::stream::{Polled, Reply, Stream};
use super::Reason;
use super::{H2Table, Judge};
use crate::clock;
use crate::load::config::LoadConfig;
use crate::load::drive::{drive, Grace, Sender};
use crate::load::flights;
use crate::load::harness::RunContext;
use crate::load::recorder::{Sample, Status, NO_SERVER_TIME};
use crate::load::schedule::IDLE_WAIT_NS;
use crate::rng::Rng;
use crate::stdio::CappedLog;
use crate::systems::http::done::HttpDone;

/// Polls of one flagged connection per pass of the loop, at most: a connection whose
/// futures keep waking each other cannot hold the loop (it is polled again next pass).
const MAX_ROUNDS: usize = 8;

/// A request that is due and not on a stream (or refused once and to be sent again).
struct Waiting {
    id: u64,
    intended_ns: u64,
    enqueued_ns: u64,
    /// It found no free stream once: its wait is held time.
    waited: bool,
    /// Closed loop: its client.
    client: Option<usize>,
    /// Refused once: its request (op, line), first send and deadline.
    again: Option<Again>,
}

#[derive(Clone, Copy)]
struct Again {
    /// The connection that refused it: another is used when one has room.
    refused_on: usize,
    pick: (u16, u32),
    deadline_ns: u64,
    queue_ns: u64,
    held_ns: u64,
}

/// A request on a stream.
struct InFlight {
    id: u64,
    intended_ns: u64,
    pick: (u16, u32),
    client: Option<usize>,
    sent_ns: u64,
    deadline_ns: u64,
    queue_ns: u64,
    held_ns: u64,
    bytes_out: u64,
    resent: bool,
    stream: Stream,
}

/// Open: requests fall due on the drive loop's schedule (nothing kept). Closed: its clients.
type Mode = crate::load::clients::Mode<()>;

/// A request of the table as h2 sends it (its URI, method and headers built once).
struct Prepared {
    method: http::Method,
    uri: Uri,
    headers: http::HeaderMap,
    body: Bytes,
    bytes_out: u64,
}

struct Engine<'a> {
    pool: H2Pool,
    streams: Vec<Vec<InFlight>>,
    prepared: Vec<Vec<Prepared>>,
    table: H2Table,
    judge: &'a dyn Judge,
    ctx: &'a RunContext,
    mode: Mode,
    queue: VecDeque<Waiting>,
    timeout_ns: u64,
    max_outstanding: usize,
    in_flight: usize,
    next_id: u64,
    rng: Rng,
    last_sent_ns: u64,
    cursor: usize,
    done: HttpDone,
    connect_failures: u64,
    log: CappedLog,
}

/// Runs the open or closed loop of `load` over `pool`'s connections, sending `table`'s
/// requests and judging each response with `judge`; every scheduled request is one sample
/// in `ctx.recorder`. Ends by itself at the duration and its grace.
pub(crate) fn run_h2(
    pool: H2Pool,
    load: &LoadConfig,
    table: H2Table,
    judge: &dyn Judge,
    ctx: &RunContext,
) -> HttpDone {
    let mode = Mode::new(&load.schedule, ctx.start_ns, ());
    let scheme = if pool.setup.tls.is_some() { "https" } else { "http" };
    let prepared = prepare(&table, scheme, &pool.setup.authority);
    let n = pool.conns.len();
    let mut e = Engine {
        pool,
        streams: (0..n).map(|_| Vec::new()).collect(),
        prepared,
        table,
        judge,
        ctx,
        mode,
        queue: VecDeque::new(),
        timeout_ns: (load.timeout_ms * 1e6) as u64,
        max_outstanding: ctx.bounds.max_in_flight.unwrap_or(usize::MAX),
        in_flight: 0,
        next_id: 0,
        rng: Rng::new(load.seed ^ 0x4854_5450),
        last_sent_ns: 0,
        cursor: 0,
        done: HttpDone {
            protocol: "h2",
            ..HttpDone::default()
        },
        connect_failures: 0,
        log: super::super::pool::failure_log(),
    };
    drive(&mut e, ctx);
    e.done.connections_opened = e.pool.conns.iter().map(|c| c.opened).sum();
    e.done.connect_failures = e.connect_failures;
    e.done
}

/// Every request of the table with its URI and headers built once.
fn prepare(table: &H2Table, scheme: &str, authority: &str) -> Vec<Vec<Prepared>> {
    table
        .entries
        .iter()
        .map(|lines| {
            lines
                .iter()
                .map(|r| {
                    let uri = Uri::builder()
                        .scheme(scheme)
                        .authority(authority)
                        .path_and_query(r.path.as_str())
                        .build()
                        .unwrap_or_else(|_| Uri::from_static("/"));
                    let mut headers = http::HeaderMap::with_capacity(r.headers.len());
                    for (k, v) in &r.headers {
                        headers.append(k.clone(), v.clone());
                    }
                    let head_bytes = r.method.as_str().len() + r.path.len() + authority.len() + scheme.len();
                    Prepared {
                        method: r.method.clone(),
                        uri,
                        bytes_out: (head_bytes as u64)
                            + super::stream::fields_bytes(&headers)
                            + r.body.len() as u64,
                        headers,
                        body: r.body.clone(),
                    }
                })
                .collect()
        })
        .collect()
}

/// HTTP/2 (and gRPC) on the drive loop: a due request waits in the FIFO for a stream.
impl Sender for Engine<'_> {
    const GRACE: Grace = Grace::AfterStopOrEnd;

    /// Open loop: the request joins the FIFO (dropped beyond `max_outstanding`) and goes
    /// out at once on a stream with room.
    fn send(&mut self, id: u64, intended_ns: u64) {
        let now = clock::now_ns();
        if self.queue.len() + self.in_flight >= self.max_outstanding {
            self.record_unsent(id, intended_ns, 0, Reason::MaxOutstanding);
        } else {
            self.queue.push_back(Waiting {
                id,
                intended_ns,
                enqueued_ns: now,
                waited: false,
                client: None,
                again: None,
            });
        }
        self.dispatch(now);
        self.drive_flagged();
    }

    fn expire(&mut self, now: u64) {
        self.expire_streams(now);
    }

    fn stop(&mut self) {
        self.mode.stop();
    }

    /// The closed-loop clients due, what waits onto streams, the flagged connections polled.
    fn advance(&mut self, now: u64) {
        self.enqueue_clients(now);
        self.dispatch(clock::now_ns());
        self.drive_flagged();
    }

    fn in_flight(&self) -> bool {
        self.in_flight > 0
    }

    fn last_sent_ns(&self) -> u64 {
        self.last_sent_ns
    }

    fn done(&self) -> bool {
        self.in_flight == 0
            && self.queue.is_empty()
            && match &self.mode {
                Mode::Open(()) => true,
                Mode::Closed(clients) => clients.done(),
            }
    }

    /// After the grace: what waits or is in flight is dropped (`stopped`).
    fn close(&mut self, now: u64) {
        let waiting: Vec<Waiting> = self.queue.drain(..).collect();
        for w in waiting {
            let mut s = self.unsent_sample(&w, 0, Reason::Stopped);
            if let Some(a) = w.again {
                s.held_ns_add(a.held_ns + now.saturating_sub(w.enqueued_ns));
            }
            self.record(&s);
        }
        for slot in 0..self.streams.len() {
            let left: Vec<InFlight> = self.streams[slot].drain(..).collect();
            for f in left {
                self.in_flight -= 1;
                let mut s = self.sample(slot, &f);
                s.status = Status::Drop as u8;
                s.arg = Reason::Stopped as u32;
                self.record(&s);
            }
            self.pool.conns[slot].close();
        }
    }

    fn wake_ns(&mut self, now: u64) -> u64 {
        if self.pool.conns.iter().any(|c| c.wake.is_set()) {
            return 0;
        }
        // A stream became free since the dispatch: the next request waiting takes it now.
        if !self.queue.is_empty() && (0..self.pool.conns.len()).any(|s| self.room(s) > 0) {
            return 0;
        }
        let mut wait = IDLE_WAIT_NS;
        for (slot, c) in self.pool.conns.iter().enumerate() {
            if c.is_opening() {
                wait = wait.min(c.connect_deadline_ns.saturating_sub(now));
            }
            for f in &self.streams[slot] {
                wait = wait.min(f.deadline_ns.saturating_sub(now));
            }
        }
        match &self.mode {
            Mode::Open(()) => wait,
            Mode::Closed(clients) => clients
                .pending()
                .fold(wait, |w, (_, t)| w.min(t.saturating_sub(now))),
        }
    }

    fn poll(&mut self, wait_ns: u64) {
        conn::watch(&self.pool.conns, &mut self.pool.pollfds);
        if crate::poll::ppoll_ns(&mut self.pool.pollfds, wait_ns) == 0 {
            return;
        }
        let now = clock::now_ns();
        for slot in 0..self.pool.conns.len() {
            if self.pool.pollfds[slot].revents == 0 {
                continue;
            }
            if matches!(self.pool.conns[slot].interest(), (fd, _) if fd >= 0) {
                self.progress(slot, now);
                self.pool.conns[slot].wake.set();
            }
        }
    }
}

impl Engine<'_> {
    /// The closed-loop clients whose think time is over join the FIFO.
    fn enqueue_clients(&mut self, now: u64) {
        let Mode::Closed(clients) = &mut self.mode else {
            return;
        };
        for client in 0..clients.count() {
            let Some(intended_ns) = clients.take_due(client, now) else {
                continue;
            };
            let id = self.next_id;
            if self.ctx.past_end(intended_ns) || !self.ctx.allows_request(id) {
                continue;
            }
            self.next_id += 1;
            self.queue.push_back(Waiting {
                id,
                intended_ns,
                enqueued_ns: now,
                waited: false,
                client: Some(client),
                again: None,
            });
        }
    }

    /// The streams a connection may carry now: its limit less those in use (0: not ready).
    fn room(&self, slot: usize) -> usize {
        let c = &self.pool.conns[slot];
        streams_room(
            c.is_ready(),
            c.server_limit(),
            self.pool.setup.options.max_streams,
            c.in_use,
        )
    }

    /// Puts waiting requests on streams of connections with room, in FIFO order; what
    /// finds none waits (held), and closed connections are made again for it.
    fn dispatch(&mut self, now: u64) {
        let n = self.pool.conns.len();
        'requests: while let Some(front) = self.queue.front() {
            let avoid = front
                .again
                .map(|a| a.refused_on)
                .filter(|&r| (0..n).any(|s| s != r && self.room(s) > 0));
            for k in 0..n {
                let slot = (self.cursor + k) % n;
                if self.room(slot) == 0 || avoid == Some(slot) {
                    continue;
                }
                let ready = {
                    let c = &mut self.pool.conns[slot];
                    let waker = c.wake.context().waker().clone();
                    let mut cx = std::task::Context::from_waker(&waker);
                    match c.sender() {
                        Some(s) => s.poll_ready(&mut cx),
                        None => continue,
                    }
                };
                match ready {
                    std::task::Poll::Ready(Ok(())) => {}
                    std::task::Poll::Ready(Err(_)) => {
                        self.pool.conns[slot].closing = true;
                        continue;
                    }
                    std::task::Poll::Pending => continue,
                }
                let Some(w) = self.queue.pop_front() else {
                    break 'requests;
                };
                self.cursor = slot + 1;
                if let Err(w) = self.start(slot, w, now) {
                    self.queue.push_front(w);
                }
                continue 'requests;
            }
            break;
        }
        if self.queue.is_empty() {
            return;
        }
        for w in self.queue.iter_mut() {
            w.waited = true;
        }
        // Requests wait: make the connections that are closed (a GOAWAY, an error, a
        // failed connect), unless one being made will do.
        if self.pool.conns.iter().any(H2Conn::is_opening) {
            return;
        }
        for slot in 0..n {
            if !self.pool.conns[slot].is_closed() || !self.streams[slot].is_empty() {
                continue;
            }
            let (addr, timeout_ns) = (self.pool.setup.addr, self.pool.connect_timeout_ns);
            let r = self.pool.conns[slot].open(&addr, self.pool.setup.tls.as_ref(), now, timeout_ns);
            if let Err(f) = r {
                self.connect_failed(slot, f, now);
                return;
            }
            self.progress(slot, now);
        }
    }

    /// Opens request `w`'s stream on connection `slot` (which has room): Err gives it back
    /// when h2 would not take it (the connection is then closing).
    fn start(&mut self, slot: usize, w: Waiting, now: u64) -> Result<(), Waiting> {
        let pick = match w.again {
            Some(a) => a.pick,
            None => self.table.pick(&mut self.rng),
        };
        let p = &self.prepared[pick.0 as usize][pick.1 as usize];
        let mut req = Request::new(());
        *req.method_mut() = p.method.clone();
        *req.uri_mut() = p.uri.clone();
        *req.headers_mut() = p.headers.clone();
        let (body, bytes_out) = (p.body.clone(), p.bytes_out);
        let c = &mut self.pool.conns[slot];
        let Some(sender) = c.sender() else { return Err(w) };
        let (response, send) = match sender.send_request(req, body.is_empty()) {
            Ok(x) => x,
            Err(e) => {
                c.closing = true;
                self.log
                    .log(&format!("connection {slot}: HTTP/2: {e}; no new streams on it"));
                return Err(w);
            }
        };
        c.in_use += 1;
        c.wake.set();
        self.in_flight += 1;
        let in_use: usize = self.pool.conns.iter().map(|c| c.in_use).sum();
        self.done.max_streams_in_use = self.done.max_streams_in_use.max(in_use as u64);
        let sent_ns = clock::now_ns();
        // Its wait, split: for its connection to be made (queue_ns), else held.
        let c = &self.pool.conns[slot];
        let (queue_ns, held_ns) = match w.again {
            Some(a) => (a.queue_ns, a.held_ns + now.saturating_sub(w.enqueued_ns)),
            None if !w.waited => (0, 0),
            None => {
                let wait = now.saturating_sub(w.intended_ns);
                let connect = match c.ready_ns > w.enqueued_ns {
                    true => c.ready_ns - c.connect_started_ns.max(w.enqueued_ns),
                    false => 0,
                };
                let connect = connect.min(wait);
                (connect, wait - connect)
            }
        };
        match w.again {
            Some(_) => self.ctx.count_resend(sent_ns, bytes_out),
            // A late send is the sender's lag: a wait for a stream or a connection is the
            // server's, and shows in the latency instead.
            None => {
                let ready_ns = if w.waited { now } else { w.intended_ns };
                self.ctx.count_send(ready_ns, sent_ns, bytes_out);
            }
        }
        self.last_sent_ns = sent_ns;
        self.streams[slot].push(InFlight {
            id: w.id,
            intended_ns: w.intended_ns,
            pick,
            client: w.client,
            sent_ns,
            deadline_ns: w.again.map_or(sent_ns + self.timeout_ns, |a| a.deadline_ns),
            queue_ns,
            held_ns,
            bytes_out,
            resent: w.again.is_some(),
            stream: Stream::new(response, send, body),
        });
        Ok(())
    }

    /// Drives connection `slot`'s connect and TLS handshake (and starts h2's handshake).
    fn progress(&mut self, slot: usize, now: u64) {
        let p = &mut self.pool;
        match p.conns[slot].progress(p.setup.tls.as_ref(), &p.builder, now) {
            Ok(None) => {}
            Ok(Some(_)) => {
                let f = conn::failed(Reason::H2Protocol, "the server did not choose h2 by ALPN".into());
                self.connect_failed(slot, f, now);
            }
            Err(f) => self.connect_failed(slot, f, now),
        }
    }

    /// A connect failed: when no connection is open or being made, every waiting request
    /// is a drop with its reason (it waited for that connect).
    fn connect_failed(&mut self, slot: usize, failed: Failed, now: u64) {
        self.connect_failures += 1;
        self.log.log(&format!("connection {slot}: {}", failed.words()));
        self.pool.conns[slot].close();
        let usable = self.pool.conns.iter().any(|c| c.is_ready() || c.is_opening());
        if usable {
            return;
        }
        let waiting: Vec<Waiting> = self.queue.drain(..).collect();
        for w in waiting {
            let mut s = self.unsent_sample(&w, slot, failed.reason);
            s.queue_ns = now
                .saturating_sub(w.enqueued_ns.max(self.pool.conns[slot].connect_started_ns))
                .max(1);
            self.record(&s);
            self.client_done(w.client, now);
        }
    }

    /// Polls every flagged connection (a bounded number of rounds each).
    fn drive_flagged(&mut self) {
        for slot in 0..self.pool.conns.len() {
            if self.pool.conns[slot].wake.is_set() {
                self.drive_conn(slot);
            }
        }
    }

    /// Polls connection `slot` and its streams while they keep waking it, up to MAX_ROUNDS.
    fn drive_conn(&mut self, slot: usize) {
        for _ in 0..MAX_ROUNDS {
            if !self.pool.conns[slot].wake.take() {
                return;
            }
            let now = clock::now_ns();
            let ended = self.pool.conns[slot].poll_conn(now);
            if let Some(limit) = self.pool.conns[slot].server_limit() {
                if limit != usize::MAX {
                    let l = limit as u64;
                    self.done.server_max_streams = Some(self.done.server_max_streams.map_or(l, |m| m.min(l)));
                }
            }
            if self.pool.conns[slot].goaway
                && !std::mem::replace(&mut self.pool.conns[slot].counted_goaway, true)
            {
                self.done.goaways += 1;
            }
            self.poll_streams(slot, now);
            if let Some(end) = ended {
                if let Ended::Error(e) = &end {
                    if !(e.is_go_away() && e.is_remote()) {
                        self.log.log(&format!("connection {slot}: HTTP/2: {e}"));
                    }
                }
                self.conn_ended(slot, end, clock::now_ns());
                return;
            }
            let c = &mut self.pool.conns[slot];
            if c.closing && self.streams[slot].is_empty() {
                c.close();
                return;
            }
        }
    }

    /// Polls every stream of connection `slot`; those that ended are recorded.
    fn poll_streams(&mut self, slot: usize, now: u64) {
        let max_body = self.pool.setup.options.max_body_bytes;
        let goaway = self.pool.conns[slot].goaway;
        let mut i = 0;
        while i < self.streams[slot].len() {
            let polled = {
                let mut cx = self.pool.conns[slot].wake.context();
                self.streams[slot][i].stream.poll(&mut cx, max_body, goaway, now)
            };
            match polled {
                Polled::Pending => i += 1,
                Polled::Done(result) => {
                    let f = self.streams[slot].swap_remove(i);
                    self.finish_stream(slot, f, result, clock::now_ns());
                }
            }
        }
    }

    /// The connection ended: its streams that did not end with it fail.
    fn conn_ended(&mut self, slot: usize, end: Ended, now: u64) {
        let goaway = self.pool.conns[slot].goaway;
        let left: Vec<InFlight> = self.streams[slot].drain(..).collect();
        for f in left {
            let reason = match &end {
                Ended::Error(e) => super::stream::classify(e, f.stream.head_seen(), goaway),
                Ended::Clean if goaway => Reason::GoAway,
                Ended::Clean if f.stream.head_seen() => Reason::ClosedMidReply,
                Ended::Clean => Reason::ClosedBeforeReply,
            };
            let fail = super::stream::Fail {
                reason,
                refused: reason == Reason::Refused,
                reset: false,
                status: 0,
                bytes_in: 0,
            };
            self.finish_in(slot, f, Err(fail), now, false);
        }
        self.pool.conns[slot].close();
    }

    fn finish_stream(
        &mut self,
        slot: usize,
        f: InFlight,
        result: Result<Box<Reply>, super::stream::Fail>,
        now: u64,
    ) {
        self.finish_in(slot, f, result, now, true);
    }

    /// Records a stream that ended (or sends a refused one once more).
    fn finish_in(
        &mut self,
        slot: usize,
        f: InFlight,
        result: Result<Box<Reply>, super::stream::Fail>,
        now: u64,
        counted: bool,
    ) {
        if counted {
            let c = &mut self.pool.conns[slot];
            c.in_use = c.in_use.saturating_sub(1);
        }
        self.in_flight -= 1;
        let mut s = self.sample(slot, &f);
        s.held_ns_add(f.stream.window_wait_ns(now));
        match result {
            Ok(_) if flights::past(f.deadline_ns, now) => {
                s.status = Status::Timeout as u8;
                s.arg = Reason::Timeout as u32;
            }
            Ok(reply) => {
                let v = self.judge.judge_body(
                    &reply.head,
                    &reply.body_head,
                    reply.body_bytes,
                    reply.trailers.as_ref(),
                );
                s.received_ns = now;
                s.bytes_in = reply.bytes_in;
                s.flags = v.flags;
                s.arg = v.reason;
                s.status = if v.ok { Status::Ok } else { Status::Error } as u8;
                match v.server {
                    Some((server_ns, detail_ns)) => {
                        s.service = 1;
                        s.server_ns = server_ns;
                        s.detail_ns = detail_ns;
                    }
                    None => s.server_ns = NO_SERVER_TIME,
                }
            }
            Err(fail) => {
                if fail.reset {
                    self.done.resets_received += 1;
                }
                if fail.refused && !f.resent && !self.ctx.past_end(now) {
                    self.done.refused_resent += 1;
                    self.queue.push_front(Waiting {
                        id: f.id,
                        intended_ns: f.intended_ns,
                        enqueued_ns: now,
                        waited: true,
                        client: f.client,
                        again: Some(Again {
                            refused_on: slot,
                            pick: f.pick,
                            deadline_ns: f.deadline_ns,
                            queue_ns: f.queue_ns,
                            held_ns: f.held_ns,
                        }),
                    });
                    return;
                }
                s.received_ns = now;
                s.status = Status::Error as u8;
                s.arg = fail.reason as u32;
                s.flags = fail.status;
                s.bytes_in = fail.bytes_in;
            }
        }
        self.record(&s);
        self.client_done(f.client, now);
    }

    /// Streams past their deadline are timeouts (dropped: h2 resets them, CANCEL); connects
    /// not ready by theirs fail.
    fn expire_streams(&mut self, now: u64) {
        for slot in 0..self.pool.conns.len() {
            let c = &self.pool.conns[slot];
            if c.is_opening() && now >= c.connect_deadline_ns {
                let ms = self.pool.connect_timeout_ns / 1_000_000;
                let f = conn::failed(
                    Reason::ConnectTimeout,
                    format!("connect: not made (with the server's SETTINGS) within {ms} ms"),
                );
                self.connect_failed(slot, f, now);
            }
            let mut i = 0;
            while i < self.streams[slot].len() {
                if !flights::past(self.streams[slot][i].deadline_ns, now) {
                    i += 1;
                    continue;
                }
                let f = self.streams[slot].swap_remove(i);
                let c = &mut self.pool.conns[slot];
                c.in_use = c.in_use.saturating_sub(1);
                c.wake.set(); // the reset goes out on its next poll
                self.in_flight -= 1;
                let mut s = self.sample(slot, &f);
                s.held_ns_add(f.stream.window_wait_ns(now));
                s.status = Status::Timeout as u8;
                s.arg = Reason::Timeout as u32;
                self.record(&s);
                self.client_done(f.client, now);
            }
        }
    }

    fn client_done(&mut self, client: Option<usize>, now: u64) {
        if let Some(client) = client {
            self.mode
                .client_done(client, now, self.ctx.stopping(), &mut self.rng);
        }
    }

    /// The sample of a request on a stream, nothing received yet.
    fn sample(&self, slot: usize, f: &InFlight) -> Sample {
        Sample {
            request_id: f.id,
            intended_ns: f.intended_ns,
            sent_ns: f.sent_ns,
            queue_ns: f.queue_ns,
            service_ns: f.held_ns,
            bytes_out: f.bytes_out,
            client: slot as u32,
            op: f.pick.0,
            status: Status::Drop as u8,
            ..Default::default()
        }
    }

    /// The sample of a request that never went out (its `op` drawn as a sent one's would
    /// be, so the mix of entries stays the same).
    fn unsent_sample(&mut self, w: &Waiting, client: usize, reason: Reason) -> Sample {
        let op = match w.again {
            Some(a) => a.pick.0,
            None => self.table.pick(&mut self.rng).0,
        };
        Sample {
            request_id: w.id,
            intended_ns: w.intended_ns,
            client: client as u32,
            op,
            status: Status::Drop as u8,
            arg: reason as u32,
            ..Default::default()
        }
    }

    fn record_unsent(&mut self, id: u64, intended_ns: u64, client: usize, reason: Reason) {
        let w = Waiting {
            id,
            intended_ns,
            enqueued_ns: intended_ns,
            waited: false,
            client: None,
            again: None,
        };
        let s = self.unsent_sample(&w, client, reason);
        self.record(&s);
    }

    fn record(&self, s: &Sample) {
        if s.arg == 0 {
            self.ctx.recorder.record(s);
            return;
        }
        let mut s = *s;
        s.flags = self.judge.failure_flags(&s);
        self.ctx.recorder.record(&s);
    }
}

/// The streams a connection may still open: none until it is ready (made, the server's
/// SETTINGS in, no GOAWAY), then the server's limit or the client's cap, the smaller, less
/// those in use (a server that lowers its limit below what is in use leaves none).
fn streams_room(ready: bool, server_limit: Option<usize>, cap: Option<u32>, in_use: usize) -> usize {
    if !ready {
        return 0;
    }
    let cap = cap.map_or(usize::MAX, |m| m as usize);
    server_limit.unwrap_or(0).min(cap).saturating_sub(in_use)
}

/// The held time of a sample (`service_ns` for the http target), added to.
trait Held {
    fn held_ns_add(&mut self, ns: u64);
}

impl Held for Sample {
    fn held_ns_add(&mut self, ns: u64) {
        self.service_ns = self.service_ns.saturating_add(ns);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_counted_against_the_smaller_limit() {
        assert_eq!(streams_room(false, Some(100), None, 0), 0, "not ready: no stream");
        assert_eq!(
            streams_room(true, None, Some(5), 0),
            0,
            "no SETTINGS yet: no stream"
        );
        assert_eq!(streams_room(true, Some(128), None, 3), 125);
        assert_eq!(streams_room(true, Some(128), Some(2), 1), 1, "the client's cap");
        assert_eq!(streams_room(true, Some(1), Some(8), 1), 0, "the server's limit");
        assert_eq!(
            streams_room(true, Some(usize::MAX), None, 7),
            usize::MAX - 7,
            "no limit"
        );
        assert_eq!(
            streams_room(true, Some(2), None, 5),
            0,
            "a limit lowered below the use"
        );
    }
}
