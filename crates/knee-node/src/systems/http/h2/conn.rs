//! One HTTP/2 connection: made as an HTTP/1.1 one is (a non-blocking TCP connect, then the
//! TLS handshake, `super::super::conn`), then ALPN checked (TLS: the server must choose
//! `h2`), then h2's handshake over it. It takes streams once the server's first SETTINGS
//! has arrived (its SETTINGS_MAX_CONCURRENT_STREAMS known: h2 is built with no streams
//! allowed before it, so none is ever queued inside h2), and none after a GOAWAY or an error.

use std::future::Future;
use std::net::SocketAddr;
use std::os::fd::RawFd;
use std::pin::Pin;
use std::rc::Rc;
use std::task::Poll;

use bytes::Bytes;
use h2::client::{Builder, Connection, SendRequest};

use super::super::conn::{Conn, Failed, Watched};
use super::super::response::{Limits, Reason};
use super::io::{Io, IoState};
use super::wake::Wakeup;
use super::{H2Options, Tls};

type Handshake =
    Pin<Box<dyn Future<Output = Result<(SendRequest<Bytes>, Connection<Io, Bytes>), h2::Error>>>>;

enum Phase {
    Closed,
    /// TCP connect and TLS handshake.
    Opening(Box<Conn>),
    /// h2's handshake (the preface and SETTINGS).
    Handshaking(Handshake),
    Open {
        send: SendRequest<Bytes>,
        conn: Box<Connection<Io, Bytes>>,
    },
}

/// How a connection ended (its connection future returned, or its handshake failed).
pub enum Ended {
    /// Closed in order (after a GOAWAY, or the server closed it with no stream open).
    Clean,
    Error(h2::Error),
}

pub struct H2Conn {
    pub index: u32,
    phase: Phase,
    fd: RawFd,
    io: Option<Rc<IoState>>,
    pub wake: Wakeup,
    /// Streams in use on it (sent, not yet ended): at most its limit.
    pub in_use: usize,
    /// No new streams: a GOAWAY came, or the connection failed; closed once its streams end.
    pub closing: bool,
    /// A GOAWAY from the server was seen on this connection.
    pub goaway: bool,
    /// That GOAWAY is counted in the run's `goaways`.
    pub counted_goaway: bool,
    pub connect_started_ns: u64,
    /// By when it must be made and have the server's SETTINGS.
    pub connect_deadline_ns: u64,
    /// When it became ready for streams (0: not yet).
    pub ready_ns: u64,
    /// Connections made, the first one included.
    pub opened: u64,
}

impl H2Conn {
    pub fn new(index: u32) -> H2Conn {
        H2Conn {
            index,
            phase: Phase::Closed,
            fd: -1,
            io: None,
            wake: Wakeup::new(),
            in_use: 0,
            closing: false,
            goaway: false,
            counted_goaway: false,
            connect_started_ns: 0,
            connect_deadline_ns: 0,
            ready_ns: 0,
            opened: 0,
        }
    }

    pub fn is_closed(&self) -> bool {
        matches!(self.phase, Phase::Closed)
    }

    /// Being made: connect, TLS, h2 handshake, or waiting for the server's SETTINGS.
    pub fn is_opening(&self) -> bool {
        !self.is_closed() && self.ready_ns == 0
    }

    /// Takes new streams: made, SETTINGS received, no GOAWAY.
    pub fn is_ready(&self) -> bool {
        self.ready_ns > 0 && !self.closing && matches!(self.phase, Phase::Open { .. })
    }

    /// The server's SETTINGS_MAX_CONCURRENT_STREAMS (None before its SETTINGS; usize::MAX
    /// when it set none).
    pub fn server_limit(&self) -> Option<usize> {
        match &self.phase {
            Phase::Open { conn, .. } => Some(conn.max_concurrent_send_streams()).filter(|&n| n > 0),
            _ => None,
        }
    }

    /// The descriptor and events to poll (-1 while closed).
    pub fn interest(&self) -> (i32, i16) {
        match &self.phase {
            Phase::Closed => (-1, 0),
            Phase::Opening(c) => c.interest(),
            _ => {
                let out = self.io.as_ref().is_some_and(|s| s.wants_write.get());
                (
                    self.fd,
                    if out {
                        libc::POLLIN | libc::POLLOUT
                    } else {
                        libc::POLLIN
                    },
                )
            }
        }
    }

    /// Starts making the connection (it must be closed).
    pub fn open(
        &mut self,
        addr: &SocketAddr,
        tls: Option<&Tls>,
        now: u64,
        timeout_ns: u64,
    ) -> Result<(), Failed> {
        let limits = Limits {
            max_header_bytes: 1,
            max_body_bytes: 0,
        };
        let mut c = Box::new(Conn::new(self.index, limits));
        self.connect_started_ns = now;
        self.connect_deadline_ns = now.saturating_add(timeout_ns);
        self.ready_ns = 0;
        self.closing = false;
        self.goaway = false;
        self.counted_goaway = false;
        self.in_use = 0;
        c.open(addr, tls, now, timeout_ns)?;
        self.phase = Phase::Opening(c);
        Ok(())
    }

    /// Drives the TCP connect and TLS handshake; once made, checks ALPN and starts h2's
    /// handshake. Ok(Some(protocol)) when the server chose another protocol than h2 by ALPN
    /// (the connection is closed: the caller decides), Ok(None) otherwise.
    pub fn progress(
        &mut self,
        tls: Option<&Tls>,
        builder: &Builder,
        now: u64,
    ) -> Result<Option<Vec<u8>>, Failed> {
        let Phase::Opening(c) = &mut self.phase else {
            return Ok(None);
        };
        if !c.progress(tls, now)? {
            return Ok(None);
        }
        let Some(transport) = c.take_transport() else {
            return Ok(None);
        };
        if tls.is_some() && transport.alpn() != Some(b"h2") {
            let chose = transport.alpn().unwrap_or(b"").to_vec();
            self.close();
            return Ok(Some(chose));
        }
        self.fd = transport.fd();
        let (io, state) = Io::new(transport);
        self.io = Some(state);
        self.phase = Phase::Handshaking(Box::pin(builder.handshake::<Io, Bytes>(io)));
        self.wake.set();
        Ok(None)
    }

    /// Polls the connection itself (its handshake, or its connection future, which reads
    /// and writes every frame); Some once it ended. Marks it ready once the server's
    /// SETTINGS are in, and closing on a GOAWAY.
    pub fn poll_conn(&mut self, now: u64) -> Option<Ended> {
        if let Some(s) = &self.io {
            s.wants_write.set(false);
        }
        let mut cx = self.wake.context();
        if let Phase::Handshaking(f) = &mut self.phase {
            match f.as_mut().poll(&mut cx) {
                Poll::Pending => return None,
                Poll::Ready(Err(e)) => {
                    self.close();
                    return Some(Ended::Error(e));
                }
                Poll::Ready(Ok((send, conn))) => {
                    self.phase = Phase::Open {
                        send,
                        conn: Box::new(conn),
                    }
                }
            }
        }
        let Phase::Open { send, conn } = &mut self.phase else {
            return None;
        };
        let ended = match Pin::new(&mut **conn).poll(&mut cx) {
            Poll::Pending => None,
            Poll::Ready(Ok(())) => Some(Ended::Clean),
            Poll::Ready(Err(e)) => Some(Ended::Error(e)),
        };
        // A GOAWAY (or a connection error) shows here first: no new stream after it.
        if let Poll::Ready(Err(e)) = send.poll_ready(&mut cx) {
            self.closing = true;
            self.goaway |= e.is_go_away() && e.is_remote();
        }
        if let Some(Ended::Error(e)) = &ended {
            self.goaway |= e.is_go_away() && e.is_remote();
        }
        if self.ready_ns == 0 && conn.max_concurrent_send_streams() > 0 {
            self.ready_ns = now.max(1);
            self.opened += 1;
        }
        if ended.is_some() {
            self.closing = true;
        }
        ended
    }

    /// The handle streams are opened with, when the connection takes them.
    pub fn sender(&mut self) -> Option<&mut SendRequest<Bytes>> {
        match &mut self.phase {
            Phase::Open { send, .. } if self.ready_ns > 0 && !self.closing => Some(send),
            _ => None,
        }
    }

    pub fn close(&mut self) {
        self.phase = Phase::Closed;
        self.io = None;
        self.fd = -1;
        self.ready_ns = 0;
        self.closing = false;
        self.in_use = 0;
    }
}

/// Failed: a connect that did not end in a ready connection.
pub fn failed(reason: Reason, error: String) -> Failed {
    Failed {
        reason,
        error,
        refused: false,
    }
}

pub use super::super::conn::watch;

impl Watched for H2Conn {
    fn interest(&self) -> (i32, i16) {
        H2Conn::interest(self)
    }
    fn is_opening(&self) -> bool {
        H2Conn::is_opening(self)
    }
}

/// h2's client builder from the options: no stream before the server's SETTINGS, no push,
/// windows and bounds as asked.
pub fn builder(o: &H2Options) -> Builder {
    let mut b = Builder::new();
    b.initial_max_send_streams(0)
        .enable_push(false)
        .initial_window_size(o.stream_window_bytes)
        .initial_connection_window_size(o.connection_window_bytes)
        .max_frame_size(super::MAX_FRAME_BYTES)
        .max_header_list_size(o.max_header_bytes);
    b
}
