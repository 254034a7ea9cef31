//! One request's HTTP/2 stream: its body sent as the flow-control window allows (the time
//! it waits for window is held time), then the response's head, its data (counted, each
//! chunk's window released at once, never kept) and its trailers. Every way it can fail is
//! a [`Reason`]; a refusal the server says it never processed is marked so it can be sent
//! once more (RFC 9113 section 8.7).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use h2::client::ResponseFuture;
use h2::{RecvStream, SendStream};
use http::HeaderMap;

use super::super::response::Reason;

/// DATA frames read from one stream per poll, at most: a fast stream cannot starve the
/// others on its connection (it is polled again at once).
const MAX_CHUNKS_PER_POLL: usize = 64;

/// The body's first bytes kept for the judge (gRPC reads its message prefix there); the
/// rest is counted, never kept.
pub const BODY_HEAD_BYTES: usize = 16;

/// A whole response.
pub struct Reply {
    pub head: http::response::Parts,
    pub body_bytes: u64,
    /// The body's first bytes, at most `BODY_HEAD_BYTES`.
    pub body_head: Vec<u8>,
    pub trailers: Option<HeaderMap>,
    /// Header fields (name and value), body and trailer bytes.
    pub bytes_in: u64,
}

/// Why a stream failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fail {
    pub reason: Reason,
    /// The server says it never processed the request: it may be sent again.
    pub refused: bool,
    /// A RST_STREAM from the server.
    pub reset: bool,
    /// The response's status, if its head arrived.
    pub status: u16,
    pub bytes_in: u64,
}

pub enum Polled {
    Pending,
    Done(Result<Reply, Fail>),
}

pub struct Stream {
    send: Option<SendStream<Bytes>>,
    /// The body not yet handed to h2.
    body: Bytes,
    /// Since when the body has waited for window (None: it is not waiting).
    window_since_ns: Option<u64>,
    /// Time the body waited for window, in all.
    pub window_wait_ns: u64,
    response: Option<ResponseFuture>,
    head: Option<http::response::Parts>,
    recv: Option<RecvStream>,
    data_done: bool,
    body_bytes: u64,
    body_head: Vec<u8>,
    bytes_in: u64,
}

impl Stream {
    pub fn new(response: ResponseFuture, send: SendStream<Bytes>, body: Bytes) -> Stream {
        Stream {
            send: (!body.is_empty()).then_some(send),
            body,
            window_since_ns: None,
            window_wait_ns: 0,
            response: Some(response),
            head: None,
            recv: None,
            data_done: false,
            body_bytes: 0,
            body_head: Vec::new(),
            bytes_in: 0,
        }
    }

    /// Whether the response's head has arrived.
    pub fn head_seen(&self) -> bool {
        self.head.is_some()
    }

    /// Drives the stream as far as it goes now. `goaway`: its connection has had a GOAWAY
    /// (a close after it ends a stream the server may have processed).
    pub fn poll(&mut self, cx: &mut Context<'_>, max_body_bytes: u64, goaway: bool, now: u64) -> Polled {
        if let Err(e) = self.send_body(cx, now) {
            return self.failed(&e, goaway);
        }
        if let Some(r) = &mut self.response {
            match Pin::new(r).poll(cx) {
                Poll::Pending => return Polled::Pending,
                Poll::Ready(Err(e)) => return self.failed(&e, goaway),
                Poll::Ready(Ok(resp)) => {
                    let (head, recv) = resp.into_parts();
                    self.bytes_in += fields_bytes(&head.headers) + 3;
                    self.head = Some(head);
                    self.recv = Some(recv);
                    self.response = None;
                }
            }
        }
        let Some(recv) = &mut self.recv else {
            return Polled::Pending;
        };
        let mut chunks = 0;
        while !self.data_done {
            match recv.poll_data(cx) {
                Poll::Pending => return Polled::Pending,
                Poll::Ready(None) => self.data_done = true,
                Poll::Ready(Some(Ok(chunk))) => {
                    let n = chunk.len();
                    let keep = (BODY_HEAD_BYTES - self.body_head.len()).min(n);
                    self.body_head.extend_from_slice(&chunk[..keep]);
                    self.body_bytes += n as u64;
                    self.bytes_in += n as u64;
                    let _ = recv.flow_control().release_capacity(n);
                    if self.body_bytes > max_body_bytes {
                        return self.fail(Reason::BodyTooLarge);
                    }
                    chunks += 1;
                    if chunks == MAX_CHUNKS_PER_POLL {
                        cx.waker().wake_by_ref();
                        return Polled::Pending;
                    }
                }
                Poll::Ready(Some(Err(e))) => return self.failed(&e, goaway),
            }
        }
        let trailers = match recv.poll_trailers(cx) {
            Poll::Pending => return Polled::Pending,
            Poll::Ready(Ok(t)) => t,
            Poll::Ready(Err(e)) => return self.failed(&e, goaway),
        };
        if let Some(t) = &trailers {
            self.bytes_in += fields_bytes(t);
        }
        let Some(head) = self.head.take() else {
            return self.fail(Reason::H2Protocol);
        };
        Polled::Done(Ok(Reply {
            head,
            body_bytes: self.body_bytes,
            body_head: std::mem::take(&mut self.body_head),
            trailers,
            bytes_in: self.bytes_in,
        }))
    }

    /// Hands the body to h2 as the window opens (reserving it, waiting for capacity).
    fn send_body(&mut self, cx: &mut Context<'_>, now: u64) -> Result<(), h2::Error> {
        let Some(send) = &mut self.send else {
            return Ok(());
        };
        while !self.body.is_empty() {
            send.reserve_capacity(self.body.len());
            let capacity = match send.poll_capacity(cx) {
                Poll::Pending => 0,
                Poll::Ready(None) => {
                    // The stream is closed for sending (the server answered or reset it).
                    self.body.clear();
                    break;
                }
                Poll::Ready(Some(r)) => r?,
            };
            if capacity == 0 {
                self.window_since_ns.get_or_insert(now);
                return Ok(());
            }
            let chunk = self.body.split_to(capacity.min(self.body.len()));
            send.send_data(chunk, self.body.is_empty())?;
        }
        if let Some(since) = self.window_since_ns.take() {
            self.window_wait_ns += now.saturating_sub(since);
        }
        self.send = None;
        Ok(())
    }

    /// The stream's failure from h2's error.
    fn failed(&self, e: &h2::Error, goaway: bool) -> Polled {
        let head_seen = self.head_seen();
        let reason = classify(e, head_seen, goaway);
        Polled::Done(Err(Fail {
            reason,
            refused: reason == Reason::Refused,
            reset: e.is_reset() && e.is_remote(),
            status: self.head.as_ref().map_or(0, |h| h.status.as_u16()),
            bytes_in: self.bytes_in,
        }))
    }

    fn fail(&self, reason: Reason) -> Polled {
        Polled::Done(Err(Fail {
            reason,
            refused: false,
            reset: false,
            status: self.head.as_ref().map_or(0, |h| h.status.as_u16()),
            bytes_in: self.bytes_in,
        }))
    }
}

/// The reason of a stream's error from h2:
/// - REFUSED_STREAM, or a GOAWAY that ended it before any response (its id was above the
///   GOAWAY's last stream id: h2 fails those at once): `refused`, never processed;
/// - a GOAWAY after its response began, or the close that follows a GOAWAY: `goaway`;
/// - another RST_STREAM from the server: `reset`;
/// - the connection closed (no GOAWAY): `closed_before_reply` / `closed_mid_reply`;
/// - a protocol error (h2 found the server's frames wrong, or the server's GOAWAY or
///   RST_STREAM came with no other meaning): `h2_protocol`.
pub fn classify(e: &h2::Error, head_seen: bool, goaway: bool) -> Reason {
    let remote = e.is_remote();
    if e.is_reset() && remote {
        return match e.reason() {
            Some(h2::Reason::REFUSED_STREAM) if !head_seen => Reason::Refused,
            _ => Reason::Reset,
        };
    }
    if e.is_go_away() && remote {
        return if head_seen {
            Reason::GoAway
        } else {
            Reason::Refused
        };
    }
    if e.is_io() {
        return match (goaway, head_seen) {
            (true, _) => Reason::GoAway,
            (false, false) => Reason::ClosedBeforeReply,
            (false, true) => Reason::ClosedMidReply,
        };
    }
    Reason::H2Protocol
}

/// The bytes of header fields, names and values (HPACK's compression is not counted).
pub fn fields_bytes(h: &HeaderMap) -> u64 {
    h.iter().map(|(k, v)| (k.as_str().len() + v.len()) as u64).sum()
}
