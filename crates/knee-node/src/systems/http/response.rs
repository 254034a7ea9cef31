//! Reads one HTTP/1.x response at a time off a connection, as its bytes arrive,
//! with `httparse` doing the parsing (status line, headers, chunk-size lines). This module
//! only frames the body: Content-Length, chunked (trailers skipped), until the connection
//! closes; no body after HEAD, 204 and 304; interim 1xx responses skipped. The body is
//! counted, never kept. Every way a response can be wrong is a [`Reason`], never a panic.

use super::timing::{Split, TimingKeys};

/// Header fields parsed per response; more is a [`Reason::HeaderTooLarge`].
const MAX_HEADERS: usize = 100;

/// Why a request failed, recorded as the sample's `arg` (0: it did not).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Reason {
    /// Not an HTTP/1.x response: bad status line or header field.
    Malformed = 1,
    /// The status line and headers exceed `max_header_bytes` (or `MAX_HEADERS` fields).
    HeaderTooLarge = 2,
    /// The body exceeds `max_body_bytes`.
    BodyTooLarge = 3,
    /// A chunked body whose framing is wrong.
    BadChunk = 4,
    /// The connection closed before any byte of the response.
    ClosedBeforeReply = 5,
    /// The connection closed inside the response (e.g. short of its Content-Length).
    ClosedMidReply = 6,
    /// Bytes beyond the response's end (e.g. a Content-Length shorter than the body).
    ExtraBytes = 7,
    /// No whole response before the request's timeout.
    Timeout = 8,
    /// The connection could not be made: refused, reset or unreachable.
    Connect = 9,
    /// The request could not be written.
    Send = 10,
    /// A `101 Switching Protocols` (or another 1xx that is not interim) the target may not send.
    Upgrade = 11,
    /// The connection was not made within the connect timeout (e.g. a full accept queue
    /// drops the SYN, and the kernel retries it after 1 s, then 3 s).
    ConnectTimeout = 12,
    /// The TLS handshake failed (an untrusted certificate, a protocol error, a close).
    Tls = 13,
    /// Due while `load.max_outstanding` requests already waited or were in flight.
    MaxOutstanding = 14,
    /// Still waiting for a connection, connecting or in flight when the run ended: its
    /// duration (or a stop request) and then the 1 s grace had passed.
    Stopped = 15,
    /// HTTP/2: the server's GOAWAY ended the stream after it was sent (it may have been
    /// processed).
    GoAway = 16,
    /// HTTP/2: a RST_STREAM from the server (other than REFUSED_STREAM).
    Reset = 17,
    /// HTTP/2: the server refused the stream unprocessed (REFUSED_STREAM, or above a
    /// GOAWAY's last stream id) twice: it was sent once more after the first refusal.
    Refused = 18,
    /// HTTP/2: a protocol error by the server (bad frames, a failed h2 handshake, no h2 by
    /// ALPN on a new connection).
    H2Protocol = 19,
    /// A 4xx status (the request's fault, says the server).
    Status4xx = 20,
    /// A 5xx status (the server's fault).
    Status5xx = 21,
    /// Another status that is not 2xx (a 3xx: redirects are not followed).
    StatusOther = 22,
}

impl Reason {
    /// Every reason by name, for `knee-node describe` (0 is "none").
    pub const ALL: [(&'static str, Reason); 22] = [
        ("malformed", Reason::Malformed),
        ("header_too_large", Reason::HeaderTooLarge),
        ("body_too_large", Reason::BodyTooLarge),
        ("bad_chunk", Reason::BadChunk),
        ("closed_before_reply", Reason::ClosedBeforeReply),
        ("closed_mid_reply", Reason::ClosedMidReply),
        ("extra_bytes", Reason::ExtraBytes),
        ("timeout", Reason::Timeout),
        ("connect", Reason::Connect),
        ("send", Reason::Send),
        ("upgrade", Reason::Upgrade),
        ("connect_timeout", Reason::ConnectTimeout),
        ("tls", Reason::Tls),
        ("max_outstanding", Reason::MaxOutstanding),
        ("stopped", Reason::Stopped),
        ("goaway", Reason::GoAway),
        ("reset", Reason::Reset),
        ("refused", Reason::Refused),
        ("h2_protocol", Reason::H2Protocol),
        ("status_4xx", Reason::Status4xx),
        ("status_5xx", Reason::Status5xx),
        ("status_other", Reason::StatusOther),
    ];

    /// The reason of a response's status: None for 2xx (ok).
    pub fn of_status(status: u16) -> Option<Reason> {
        match status {
            200..=299 => None,
            400..=499 => Some(Reason::Status4xx),
            500..=599 => Some(Reason::Status5xx),
            _ => Some(Reason::StatusOther),
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub max_header_bytes: usize,
    pub max_body_bytes: u64,
}

/// A whole response.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Response {
    pub status: u16,
    /// The server will close the connection after it (`Connection: close`, HTTP/1.0, a
    /// body delimited by the close).
    pub close: bool,
    pub split: Split,
    /// Bytes of the response, head and body (interim 1xx responses included).
    pub bytes: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Head,
    Fixed {
        remaining: u64,
    },
    ChunkSize,
    ChunkData {
        remaining: u64,
    },
    /// The CRLF after a chunk's data; `seen` of its 2 bytes read.
    ChunkEnd {
        seen: u8,
    },
    Trailers,
    UntilClose,
    Done,
}

pub struct ResponseReader {
    limits: Limits,
    /// Bytes of a head, chunk-size line or trailer section that spans reads; at most
    /// `max_header_bytes` (beyond: an error), so a server cannot make it grow.
    buf: Vec<u8>,
    state: State,
    head_request: bool,
    response: Response,
    body_bytes: u64,
}

impl ResponseReader {
    pub fn new(limits: Limits) -> ResponseReader {
        ResponseReader {
            limits,
            buf: Vec::new(),
            state: State::Done,
            head_request: false,
            response: Response::default(),
            body_bytes: 0,
        }
    }

    /// Expects the response to a new request (`head`: a HEAD request, so no body).
    pub fn start(&mut self, head: bool) {
        self.buf.clear();
        self.state = State::Head;
        self.head_request = head;
        self.response = Response::default();
        self.body_bytes = 0;
    }

    /// Whether no byte of the current response has arrived.
    pub fn untouched(&self) -> bool {
        self.state == State::Head && self.buf.is_empty() && self.response.bytes == 0
    }

    /// Takes bytes read from the connection; the response once it is whole. Bytes beyond
    /// its end are an error (one request is in flight per connection, so no byte may follow).
    pub fn feed(&mut self, data: &[u8], keys: &TimingKeys) -> Result<Option<Response>, Reason> {
        self.response.bytes += data.len() as u64;
        if self.state == State::Head {
            self.buf.extend_from_slice(data);
            let Some(n) = self.parse_head(keys)? else {
                return Ok(None);
            };
            let head = std::mem::take(&mut self.buf);
            let rest = self.body(&head[n..]);
            if self.buf.is_empty() {
                self.buf = head; // keeps its capacity for the next response
                self.buf.clear();
            }
            rest?;
        } else {
            self.body(data)?;
        }
        Ok((self.state == State::Done).then_some(self.response))
    }

    /// The connection closed: the response, when the close was its end.
    pub fn eof(&mut self) -> Result<Response, Reason> {
        match self.state {
            State::UntilClose | State::Done => {
                self.state = State::Done;
                Ok(self.response)
            }
            State::Head if self.buf.is_empty() && self.response.bytes == 0 => Err(Reason::ClosedBeforeReply),
            _ => Err(Reason::ClosedMidReply),
        }
    }

    /// Parses the head in `buf` (skipping interim 1xx responses); the bytes it took, or
    /// None when it is not whole yet.
    fn parse_head(&mut self, keys: &TimingKeys) -> Result<Option<usize>, Reason> {
        let mut start = 0;
        loop {
            let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
            let mut r = httparse::Response::new(&mut headers);
            let n = match r.parse(&self.buf[start..]) {
                Ok(httparse::Status::Complete(n)) => n,
                Ok(httparse::Status::Partial) => {
                    if self.buf.len() - start > self.limits.max_header_bytes {
                        return Err(Reason::HeaderTooLarge);
                    }
                    self.buf.drain(..start);
                    return Ok(None);
                }
                Err(httparse::Error::TooManyHeaders) => return Err(Reason::HeaderTooLarge),
                Err(_) => return Err(Reason::Malformed),
            };
            if n > self.limits.max_header_bytes {
                return Err(Reason::HeaderTooLarge);
            }
            let code = r.code.unwrap_or(0);
            if (100..200).contains(&code) {
                if code == 101 {
                    return Err(Reason::Upgrade);
                }
                start += n;
                continue;
            }
            let framing = Framing::of(&r, keys)?;
            self.response.status = code;
            self.response.split = framing.split;
            self.response.close = framing.close;
            self.state = if self.head_request || code == 204 || code == 304 {
                State::Done
            } else if framing.chunked {
                State::ChunkSize
            } else if let Some(len) = framing.length {
                if len > self.limits.max_body_bytes {
                    return Err(Reason::BodyTooLarge);
                }
                self.body_bytes = len;
                State::Fixed { remaining: len }
            } else {
                self.response.close = true;
                State::UntilClose
            };
            if self.state == (State::Fixed { remaining: 0 }) {
                self.state = State::Done;
            }
            return Ok(Some(start + n));
        }
    }

    /// Takes body bytes, through every framing state they reach.
    fn body(&mut self, mut data: &[u8]) -> Result<(), Reason> {
        loop {
            if data.is_empty() {
                return Ok(());
            }
            match self.state {
                State::Head => return Err(Reason::Malformed), // not reached: the head comes first
                State::Done => return Err(Reason::ExtraBytes),
                State::Fixed { remaining } => {
                    let k = remaining.min(data.len() as u64);
                    data = &data[k as usize..];
                    self.state = match remaining - k {
                        0 => State::Done,
                        left => State::Fixed { remaining: left },
                    };
                }
                State::UntilClose => {
                    self.body_bytes += data.len() as u64;
                    if self.body_bytes > self.limits.max_body_bytes {
                        return Err(Reason::BodyTooLarge);
                    }
                    return Ok(());
                }
                State::ChunkSize => {
                    let Some((used, size)) = self.element(data, chunk_size)? else {
                        return Ok(());
                    };
                    data = &data[used..];
                    if size == 0 {
                        self.state = State::Trailers;
                        continue;
                    }
                    self.body_bytes = self.body_bytes.saturating_add(size);
                    if self.body_bytes > self.limits.max_body_bytes {
                        return Err(Reason::BodyTooLarge);
                    }
                    self.state = State::ChunkData { remaining: size };
                }
                State::ChunkData { remaining } => {
                    let k = remaining.min(data.len() as u64);
                    data = &data[k as usize..];
                    self.state = match remaining - k {
                        0 => State::ChunkEnd { seen: 0 },
                        left => State::ChunkData { remaining: left },
                    };
                }
                State::ChunkEnd { seen } => {
                    if data[0] != b"\r\n"[seen as usize] {
                        return Err(Reason::BadChunk);
                    }
                    data = &data[1..];
                    self.state = if seen == 1 {
                        State::ChunkSize
                    } else {
                        State::ChunkEnd { seen: 1 }
                    };
                }
                State::Trailers => {
                    let Some((used, _)) = self.element(data, trailers_end)? else {
                        return Ok(());
                    };
                    data = &data[used..];
                    self.state = State::Done;
                }
            }
        }
    }

    /// Parses a framing element (a chunk-size line, the trailer section) that may span
    /// reads: from `data` when nothing is buffered, else from the buffer with `data` added.
    /// Returns the bytes of `data` it took and the element's value, or None (all of `data`
    /// buffered: more is needed).
    /// An element longer than `max_header_bytes` is refused whether it came in one read or
    /// several: the limit must not depend on where reads end.
    fn element(&mut self, data: &[u8], parse: ElementParser) -> Parsed {
        let max = self.limits.max_header_bytes;
        if self.buf.is_empty() {
            if let Some((n, value)) = parse(data)? {
                return if n > max {
                    Err(Reason::HeaderTooLarge)
                } else {
                    Ok(Some((n, value)))
                };
            }
        }
        let before = self.buf.len();
        self.buf.extend_from_slice(data);
        match parse(&self.buf)? {
            Some((n, _)) if n > max => Err(Reason::HeaderTooLarge),
            Some((n, value)) => {
                self.buf.clear();
                Ok(Some((n.saturating_sub(before), value)))
            }
            None if self.buf.len() > max => Err(Reason::HeaderTooLarge),
            None => Ok(None),
        }
    }
}

/// A framing element parsed: (its bytes, its value), None when it is not whole yet.
type Parsed = Result<Option<(usize, u64)>, Reason>;
type ElementParser = fn(&[u8]) -> Parsed;

/// What a head says about its body and its connection.
struct Framing {
    length: Option<u64>,
    chunked: bool,
    close: bool,
    split: Split,
}

impl Framing {
    fn of(r: &httparse::Response, keys: &TimingKeys) -> Result<Framing, Reason> {
        let http10 = r.version == Some(0);
        let mut f = Framing {
            length: None,
            chunked: false,
            close: http10,
            split: Split::default(),
        };
        let mut other_coding = false;
        for h in r.headers.iter() {
            let name = h.name;
            if name.eq_ignore_ascii_case("content-length") {
                let len = content_length(h.value)?;
                if f.length.is_some_and(|l| l != len) {
                    return Err(Reason::Malformed); // two different lengths: which is the body?
                }
                f.length = Some(len);
            } else if name.eq_ignore_ascii_case("transfer-encoding") {
                // The last coding frames the body; anything but chunked runs to the close.
                let last = tokens(h.value).last().unwrap_or_default();
                f.chunked = last.eq_ignore_ascii_case("chunked");
                other_coding = !f.chunked;
            } else if name.eq_ignore_ascii_case("connection") {
                for t in tokens(h.value) {
                    if t.eq_ignore_ascii_case("close") {
                        f.close = true;
                    } else if t.eq_ignore_ascii_case("keep-alive") && http10 {
                        f.close = false;
                    }
                }
            } else if name.eq_ignore_ascii_case("server-timing") {
                keys.add(h.value, &mut f.split);
            }
        }
        if f.chunked || other_coding {
            f.length = None; // Transfer-Encoding overrides Content-Length (RFC 9112 6.3)
        }
        if other_coding {
            f.close = true;
        }
        Ok(f)
    }
}

fn tokens(value: &[u8]) -> impl Iterator<Item = &str> {
    std::str::from_utf8(value)
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
}

fn content_length(value: &[u8]) -> Result<u64, Reason> {
    let text = std::str::from_utf8(value).map_err(|_| Reason::Malformed)?.trim();
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(Reason::Malformed);
    }
    text.parse().map_err(|_| Reason::Malformed)
}

fn chunk_size(buf: &[u8]) -> Parsed {
    match httparse::parse_chunk_size(buf) {
        Ok(httparse::Status::Complete(found)) => Ok(Some(found)),
        Ok(httparse::Status::Partial) => Ok(None),
        Err(_) => Err(Reason::BadChunk),
    }
}

/// The end of the trailer section after the last chunk: an empty line, or fields then one.
fn trailers_end(buf: &[u8]) -> Parsed {
    if buf.starts_with(b"\r\n") {
        return Ok(Some((2, 0)));
    }
    if buf.len() >= 2 && !buf.starts_with(b"\r") && buf[..2].contains(&b'\n') {
        return Err(Reason::BadChunk);
    }
    Ok(buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| (i + 4, 0)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    const LIMITS: Limits = Limits {
        max_header_bytes: 1024,
        max_body_bytes: 4096,
    };

    fn keys() -> TimingKeys {
        TimingKeys {
            server: vec!["app".into()],
            detail: Some("db".into()),
        }
    }

    /// Feeds `parts` in turn; the outcome after the last (None: not whole yet).
    fn read(head: bool, parts: &[&[u8]]) -> Result<Option<Response>, Reason> {
        let mut r = ResponseReader::new(LIMITS);
        r.start(head);
        let mut out = Ok(None);
        for p in parts {
            out = r.feed(p, &keys());
            if !matches!(out, Ok(None)) {
                break;
            }
        }
        out
    }

    /// Feeds `bytes` one byte at a time too: framing must not depend on where reads end.
    fn both(head: bool, bytes: &[u8]) -> Result<Option<Response>, Reason> {
        let whole = read(head, &[bytes]);
        let singles: Vec<&[u8]> = bytes.chunks(1).collect();
        assert_eq!(whole, read(head, &singles), "{}", String::from_utf8_lossy(bytes));
        whole
    }

    #[test]
    fn content_length_body() {
        let bytes =
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nServer-Timing: app;dur=1.5, db;dur=0.5\r\n\r\nhello";
        let r = both(false, bytes).unwrap().unwrap();
        assert_eq!((r.status, r.close, r.bytes), (200, false, bytes.len() as u64));
        assert_eq!(
            r.split,
            Split {
                present: true,
                server_ns: 1_500_000,
                detail_ns: 500_000
            }
        );
    }

    #[test]
    fn chunked_body_with_extensions_and_trailers() {
        let bytes = b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\nA\r\n0123456789\r\n0\r\nX-T: 1\r\n\r\n";
        let r = both(false, bytes).unwrap().unwrap();
        assert_eq!(
            (r.status, r.bytes, r.split.present),
            (404, bytes.len() as u64, false)
        );
        let empty_trailers =
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\nContent-Length: 3\r\n\r\n0\r\n\r\n";
        assert_eq!(both(false, empty_trailers).unwrap().unwrap().status, 200);
    }

    #[test]
    fn head_204_304_and_interim_responses_have_no_body() {
        let head = b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n";
        assert_eq!(both(true, head).unwrap().unwrap().status, 200);
        assert_eq!(both(false, head).unwrap(), None); // a GET waits for the 1000 bytes
        for code in ["204 No Content", "304 Not Modified"] {
            let b = format!("HTTP/1.1 {code}\r\n\r\n");
            assert!(both(false, b.as_bytes()).unwrap().is_some());
        }
        let interim = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n";
        let r = both(false, interim).unwrap().unwrap();
        assert_eq!((r.status, r.bytes), (201, interim.len() as u64));
        assert_eq!(
            both(false, b"HTTP/1.1 101 Switching Protocols\r\n\r\n"),
            Err(Reason::Upgrade)
        );
    }

    #[test]
    fn connection_close_and_http10() {
        let close = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";
        assert!(both(false, close).unwrap().unwrap().close);
        let keep = b"HTTP/1.0 200 OK\r\nConnection: Keep-Alive\r\nContent-Length: 0\r\n\r\n";
        assert!(!both(false, keep).unwrap().unwrap().close);
        let h10 = b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n";
        assert!(both(false, h10).unwrap().unwrap().close);
    }

    #[test]
    fn a_body_delimited_by_the_close() {
        let mut r = ResponseReader::new(LIMITS);
        r.start(false);
        assert_eq!(r.feed(b"HTTP/1.1 200 OK\r\n\r\nsome body", &keys()), Ok(None));
        let resp = r.eof().unwrap();
        assert!(resp.close && resp.status == 200);
    }

    #[test]
    fn every_malformed_case_is_a_reason() {
        let cases: [(&[u8], Reason); 9] = [
            (b"HTTP/1.1 2x0 OK\r\n\r\n", Reason::Malformed),
            (b"SMTP ready\r\n\r\n", Reason::Malformed),
            (b"HTTP/1.1 200 OK\r\nBad Header\r\n\r\n", Reason::Malformed),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
                Reason::Malformed,
            ),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
                Reason::Malformed,
            ),
            (
                b"HTTP/1.1 200 OK\r\nContent-Length: 99999\r\n\r\n",
                Reason::BodyTooLarge,
            ),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                Reason::BadChunk,
            ),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n",
                Reason::BadChunk,
            ),
            (
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nFFFFF\r\n",
                Reason::BodyTooLarge,
            ),
        ];
        for (bytes, reason) in cases {
            assert_eq!(
                both(false, bytes),
                Err(reason),
                "{}",
                String::from_utf8_lossy(bytes)
            );
        }
        // Bytes past a short Content-Length in the same read; in a later read, the
        // connection drops them with itself (`conn.rs`).
        let lying = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nabcd";
        assert_eq!(read(false, &[lying]), Err(Reason::ExtraBytes));
        let long = format!("HTTP/1.1 200 OK\r\nX: {}\r\n\r\n", "a".repeat(2000));
        assert_eq!(both(false, long.as_bytes()), Err(Reason::HeaderTooLarge));
        let many: String = (0..150).map(|i| format!("X{i}: 1\r\n")).collect();
        let many = format!("HTTP/1.1 200 OK\r\n{many}\r\n");
        let r = ResponseReader::new(Limits {
            max_header_bytes: 1 << 20,
            ..LIMITS
        });
        let mut r = r;
        r.start(false);
        assert_eq!(r.feed(many.as_bytes(), &keys()), Err(Reason::HeaderTooLarge));
        let chunked = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
        let (endless_chunk_line, long_chunk_line, long_trailers) = (
            format!("{chunked}1{}", ";x".repeat(1000)),
            // A long chunk-size line or trailer section that does end: refused the same
            // whether it came in one read or byte by byte (in one read it used to pass the
            // limit).
            format!("{chunked}1{}\r\nx\r\n0\r\n\r\n", ";x".repeat(1000)),
            format!("{chunked}0\r\nT: {}\r\n\r\n", "t".repeat(2000)),
        );
        for long in [endless_chunk_line, long_chunk_line, long_trailers] {
            assert_eq!(
                both(false, long.as_bytes()),
                Err(Reason::HeaderTooLarge),
                "{long}"
            );
        }
        let until_close = format!("HTTP/1.1 200 OK\r\n\r\n{}", "b".repeat(5000));
        assert_eq!(both(false, until_close.as_bytes()), Err(Reason::BodyTooLarge));
    }

    #[test]
    fn a_close_inside_a_response_is_closed_mid_reply() {
        let mut r = ResponseReader::new(LIMITS);
        r.start(false);
        assert!(r.untouched());
        assert_eq!(r.eof(), Err(Reason::ClosedBeforeReply));
        r.start(false);
        // A lying Content-Length: 10 promised, 3 sent, then the close.
        assert_eq!(
            r.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", &keys()),
            Ok(None)
        );
        assert_eq!(r.eof(), Err(Reason::ClosedMidReply));
        r.start(false);
        assert_eq!(r.feed(b"HTTP/1.1 200", &keys()), Ok(None));
        assert_eq!(r.eof(), Err(Reason::ClosedMidReply));
    }

    #[test]
    fn the_reader_is_reused_across_responses() {
        let mut r = ResponseReader::new(LIMITS);
        for i in 0..3u16 {
            r.start(false);
            let b = format!("HTTP/1.1 {} OK\r\nContent-Length: 1\r\n\r\nx", 200 + i);
            assert_eq!(r.feed(b.as_bytes(), &keys()).unwrap().unwrap().status, 200 + i);
        }
    }

    /// Random bytes, and valid responses with random bytes changed, split at random places:
    /// the reader returns a response, an error or "more", and never panics.
    #[test]
    fn never_panics_on_random_bytes() {
        let mut rng = Rng::new(14);
        let valid: &[&[u8]] = &[
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nServer-Timing: app;dur=1\r\n\r\nhello",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nT: 1\r\n\r\n",
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.0 200 OK\r\n\r\nbody",
        ];
        for round in 0..20_000 {
            let mut bytes: Vec<u8> = if round % 2 == 0 {
                let n = rng.range_u32(0, 300) as usize;
                (0..n).map(|_| rng.next_u64() as u8).collect()
            } else {
                valid[round % valid.len()].to_vec()
            };
            for _ in 0..rng.range_u32(0, 4) {
                if !bytes.is_empty() {
                    let i = rng.range_u32(0, bytes.len() as u32 - 1) as usize;
                    bytes[i] = rng.next_u64() as u8;
                }
            }
            let mut r = ResponseReader::new(LIMITS);
            r.start(round % 7 == 0);
            let mut rest = &bytes[..];
            while !rest.is_empty() {
                let k = (rng.range_u32(1, 40) as usize).min(rest.len());
                match r.feed(&rest[..k], &keys()) {
                    Ok(None) => rest = &rest[k..],
                    _ => break,
                }
            }
            let _ = r.eof();
        }
    }
}
