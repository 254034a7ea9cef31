//! One connection of the http target: closed, connecting (TCP, then TLS for https) or
//! open; one request at a time (no pipelining). Nothing blocks: a connect, a handshake, a
//! write the socket does not take whole and a response are each driven as poll says the
//! socket is ready, so one connection's trouble never holds up the others.
//!
//! Persistence (RFC 9112 section 9): a connection ends after a response that says so
//! (`Connection: close`, HTTP/1.0 without `keep-alive`, a body delimited by the close),
//! after a request that says so, after any failed response, and as soon as the server is
//! seen to have closed it; it is never used again after any of these.

use std::io;
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;

use super::requests::Pick;
use super::response::{Limits, Reason, Response, ResponseReader};
use super::timing::TimingKeys;
use super::tls::Tls;
use super::transport::{self, Transport};

/// The request a connection has taken: what its sample needs.
#[derive(Clone, Copy, Debug)]
pub struct Job {
    pub request_id: u64,
    pub intended_ns: u64,
    pub pick: Pick,
    /// When the connection took it.
    pub taken_ns: u64,
    /// How long it waited for its connection to be made (TCP connect, TLS handshake),
    /// success or not; 0 when the connection was open already.
    pub connect_ns: u64,
    /// When it was written (0: not yet).
    pub sent_ns: u64,
    /// Once sent: its response is due by then.
    pub deadline_ns: u64,
    pub bytes_out: u64,
    /// A HEAD request: no body in its response.
    pub head: bool,
    /// It sends `Connection: close`.
    pub close: bool,
    /// How long it waited in the FIFO for a free connection (0: one was free when it fell
    /// due): the sample's `service_ns`, declared `held_ns`.
    pub held_ns: u64,
}

/// What reading a connection gave.
pub enum Read {
    /// Nothing whole yet (or nothing was expected: an idle connection, closed if the server
    /// closed it or sent bytes nobody asked for).
    Nothing,
    /// The response to the job, or why there is none; the connection is closed when the
    /// reason is set or either side said so.
    Done(Job, Result<Response, Reason>),
}

/// Why a connect (or TLS handshake) failed.
#[derive(Debug)]
pub struct Failed {
    /// What its request records: connect, tls (connect_timeout is the engine's).
    pub reason: Reason,
    pub error: String,
    /// The target said no: the connect was refused (nothing listens there) or TLS was
    /// (an untrusted certificate, not TLS at all). A reset or a close is not a refusal.
    pub refused: bool,
}

impl Failed {
    fn of(reason: Reason, e: &io::Error) -> Failed {
        Failed {
            reason,
            error: e.to_string(),
            refused: matches!(
                e.kind(),
                io::ErrorKind::ConnectionRefused | io::ErrorKind::InvalidData
            ),
        }
    }

    /// In words, with what to do about an untrusted certificate.
    pub fn words(&self) -> String {
        let e = &self.error;
        match self.reason {
            Reason::Tls if e.contains("certificate") => format!(
                "TLS: {e} (a self-signed certificate? --insecure / driver.tls_insecure accepts \
                 it; --cacert / driver.tls_ca_file trusts the CA that signed it)"
            ),
            Reason::Tls => format!("TLS: {e}"),
            _ => e.clone(),
        }
    }
}

enum Phase {
    Closed,
    Connecting(TcpStream),
    Handshaking(Transport),
    Open(Transport),
}

pub struct Conn {
    pub index: u32,
    phase: Phase,
    /// When the connect under way began, and by when it must be made.
    connect_started_ns: u64,
    pub connect_deadline_ns: u64,
    reader: ResponseReader,
    pub job: Option<Job>,
    /// Bytes of the job's request written so far (plain TCP: the socket may take a large
    /// request in parts; TLS holds the rest itself).
    written: usize,
    /// Connections made, the first one included.
    pub opened: u64,
    /// When it last became free: its last request ended, or it was made.
    pub free_ns: u64,
}

impl Conn {
    pub fn new(index: u32, limits: Limits) -> Conn {
        Conn {
            index,
            phase: Phase::Closed,
            connect_started_ns: 0,
            connect_deadline_ns: 0,
            reader: ResponseReader::new(limits),
            job: None,
            written: 0,
            opened: 0,
            free_ns: 0,
        }
    }

    pub fn is_open(&self) -> bool {
        matches!(self.phase, Phase::Open(_))
    }

    pub fn is_closed(&self) -> bool {
        matches!(self.phase, Phase::Closed)
    }

    /// Connecting or in its TLS handshake.
    pub fn is_opening(&self) -> bool {
        matches!(self.phase, Phase::Connecting(_) | Phase::Handshaking(_))
    }

    /// The descriptor and events to poll (-1 while closed: ppoll skips it).
    pub fn interest(&self) -> (i32, i16) {
        match &self.phase {
            Phase::Closed => (-1, 0),
            Phase::Connecting(s) => (s.as_raw_fd(), libc::POLLOUT),
            Phase::Handshaking(t) => (t.fd(), t.interest()),
            // POLLOUT only while a request is going out: TLS bytes queued on an idle
            // connection wait for its next write rather than wake the poll for nothing.
            Phase::Open(t) if self.writing() => (t.fd(), libc::POLLIN | libc::POLLOUT),
            Phase::Open(t) => (t.fd(), libc::POLLIN),
        }
    }

    /// Starts making the connection (it must be closed), to be made by `now + timeout_ns`.
    pub fn open(
        &mut self,
        addr: &SocketAddr,
        tls: Option<&Tls>,
        now: u64,
        timeout_ns: u64,
    ) -> Result<(), Failed> {
        self.connect_started_ns = now;
        self.connect_deadline_ns = now.saturating_add(timeout_ns);
        let (stream, made) = transport::connect(addr).map_err(|e| Failed::of(Reason::Connect, &e))?;
        self.phase = Phase::Connecting(stream);
        if made {
            self.progress(tls, now)?;
        }
        Ok(())
    }

    /// Drives a connect and then a TLS handshake as far as they go now: Ok(true) once the
    /// connection is open, Ok(false) while they wait; on a failure the connection is closed.
    pub fn progress(&mut self, tls: Option<&Tls>, now: u64) -> Result<bool, Failed> {
        let result = self.step(tls);
        match result {
            Ok(true) => {
                self.opened += 1;
                self.free_ns = now;
            }
            Ok(false) => {}
            Err(_) => self.close(),
        }
        result
    }

    fn step(&mut self, tls: Option<&Tls>) -> Result<bool, Failed> {
        loop {
            match std::mem::replace(&mut self.phase, Phase::Closed) {
                Phase::Closed => {
                    let e = io::Error::new(io::ErrorKind::NotConnected, "not connecting");
                    return Err(Failed::of(Reason::Connect, &e));
                }
                Phase::Open(t) => {
                    self.phase = Phase::Open(t);
                    return Ok(true);
                }
                Phase::Connecting(stream) => match transport::connect_outcome(&stream) {
                    Ok(()) => {
                        self.phase = Phase::Handshaking(match tls {
                            None => Transport::Plain(stream),
                            Some(tls) => Transport::Tls {
                                tcp: stream,
                                tls: Box::new(tls.session().map_err(|e| Failed {
                                    reason: Reason::Tls,
                                    error: e,
                                    refused: true,
                                })?),
                            },
                        });
                    }
                    // Not made yet (poll woke for another reason).
                    Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => {
                        self.phase = Phase::Connecting(stream);
                        return Ok(false);
                    }
                    Err(e) => return Err(Failed::of(Reason::Connect, &e)),
                },
                Phase::Handshaking(mut t) => match t.handshake() {
                    Ok(true) => {
                        self.phase = Phase::Open(t);
                        return Ok(true);
                    }
                    Ok(false) => {
                        self.phase = Phase::Handshaking(t);
                        return Ok(false);
                    }
                    Err(e) => return Err(Failed::of(Reason::Tls, &e)),
                },
            }
        }
    }

    /// Takes a request (the connection must be free); it is written by `write`.
    pub fn take(&mut self, job: Job) {
        self.reader.start(job.head);
        self.written = 0;
        self.job = Some(job);
    }

    /// Writes the job's request, or what the socket did not take of it before (`bytes`:
    /// the whole request). Ok(true) once all of it is out.
    pub fn write(&mut self, bytes: &[u8]) -> io::Result<bool> {
        let Phase::Open(t) = &mut self.phase else {
            return Err(io::Error::new(io::ErrorKind::NotConnected, "not connected"));
        };
        while self.written < bytes.len() {
            match t.write(&bytes[self.written..])? {
                0 => return Ok(false),
                n => self.written += n,
            }
        }
        t.flush()?;
        Ok(!t.unsent())
    }

    /// Whether the job's request is not all out yet (a write to finish on POLLOUT).
    pub fn writing(&self) -> bool {
        match (&self.phase, self.job) {
            (Phase::Open(t), Some(j)) => j.sent_ns > 0 && (self.written < j.bytes_out as usize || t.unsent()),
            _ => false,
        }
    }

    pub fn close(&mut self) {
        self.phase = Phase::Closed;
        self.written = 0;
    }

    /// The byte stream of an open connection, taken out (the connection is closed after):
    /// for HTTP/2, which reads and writes it through h2.
    pub fn take_transport(&mut self) -> Option<Transport> {
        match std::mem::replace(&mut self.phase, Phase::Closed) {
            Phase::Open(t) => Some(t),
            other => {
                self.phase = other;
                None
            }
        }
    }

    /// Reads what has arrived, without blocking, into `buf`'s space.
    pub fn read(&mut self, buf: &mut [u8], keys: &TimingKeys) -> Read {
        loop {
            let Phase::Open(t) = &mut self.phase else {
                return Read::Nothing;
            };
            let n = t.read(buf);
            if self.job.is_none() {
                // An idle connection: the server closed it (or reset it, or sent bytes
                // nobody asked for, which lose the framing): closed now, never reused.
                match n {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Read::Nothing,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    _ => {
                        self.close();
                        return Read::Nothing;
                    }
                }
            }
            let outcome = match &n {
                Ok(0) => Some(self.reader.eof()),
                Ok(k) => self.reader.feed(&buf[..*k], keys).transpose(),
                Err(e) => match e.kind() {
                    io::ErrorKind::WouldBlock => return Read::Nothing,
                    io::ErrorKind::Interrupted => continue,
                    // TLS: a bad record or an alert from the server.
                    io::ErrorKind::InvalidData => Some(Err(Reason::Tls)),
                    // A reset before any byte of the response is a close before it.
                    _ if self.reader.untouched() => Some(Err(Reason::ClosedBeforeReply)),
                    _ => Some(Err(Reason::ClosedMidReply)),
                },
            };
            let Some(result) = outcome else {
                continue; // more may have arrived since: read until it would block
            };
            let Some(job) = self.job.take() else {
                return Read::Nothing; // not reached: an idle connection returned above
            };
            // A response before the whole request was out (e.g. an early 413): the rest of
            // the request would be read as the next one, so the connection ends too.
            let cut_short = self.written < job.bytes_out as usize;
            let ends = matches!(n, Ok(0)) || result.as_ref().map_or(true, |r| r.close) || job.close;
            if ends || cut_short {
                self.close();
            }
            return Read::Done(job, result);
        }
    }
}

/// A connection as `ppoll` and the connects before the start see it: HTTP/1.1's and
/// HTTP/2's alike.
pub trait Watched {
    /// The descriptor and events to poll (-1 while closed).
    fn interest(&self) -> (i32, i16);
    /// Still being made.
    fn is_opening(&self) -> bool;
}

impl Watched for Conn {
    fn interest(&self) -> (i32, i16) {
        Conn::interest(self)
    }
    fn is_opening(&self) -> bool {
        Conn::is_opening(self)
    }
}

/// Sets each connection's descriptor and events for the next `ppoll`.
pub fn watch<C: Watched>(conns: &[C], pollfds: &mut [libc::pollfd]) {
    for (c, p) in conns.iter().zip(pollfds) {
        (p.fd, p.events) = c.interest();
    }
}
