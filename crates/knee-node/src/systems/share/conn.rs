//! The client's connections: one per address, opened on first use and dropped on any
//! error (the next operation reconnects). Frames are read exactly (no read-ahead), because
//! an obtain's file bytes follow its reply frame on the same connection.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use crate::wire::{ReplyHeader, RequestHeader, LENGTH_BYTES};

/// Replies to control operations are small; a search reply is at most 64 holders.
const MAX_REPLY_FRAME_BYTES: usize = 64 << 20;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Why an operation got no usable reply.
#[derive(Debug)]
pub enum OpError {
    /// Connection refused, reset or closed: the node is down (the distributed client then
    /// asks the replica).
    Down(String),
    /// No reply within the timeout.
    Timeout,
    /// A reply that breaks the protocol.
    Bad(String),
}

impl std::fmt::Display for OpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpError::Down(e) => write!(f, "down: {e}"),
            OpError::Timeout => write!(f, "timeout"),
            OpError::Bad(e) => write!(f, "bad reply: {e}"),
        }
    }
}

fn io_error(e: io::Error) -> OpError {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => OpError::Timeout,
        _ => OpError::Down(e.to_string()),
    }
}

pub struct Conn {
    stream: TcpStream,
    scratch: Vec<u8>,
}

impl Conn {
    fn open(addr: &str, timeout: Duration) -> Result<Conn, OpError> {
        let sa: SocketAddr = addr
            .parse()
            .map_err(|e| OpError::Bad(format!("address {addr}: {e}")))?;
        let stream = TcpStream::connect_timeout(&sa, CONNECT_TIMEOUT).map_err(io_error)?;
        stream.set_nodelay(true).map_err(io_error)?;
        stream.set_read_timeout(Some(timeout)).map_err(io_error)?;
        stream.set_write_timeout(Some(timeout)).map_err(io_error)?;
        Ok(Conn {
            stream,
            scratch: Vec::new(),
        })
    }

    /// Sends one request and reads its reply frame: the header, the body, the frame's bytes.
    /// `on_written` is called once the request is written whole.
    pub fn request(
        &mut self,
        request_id: u64,
        op: u16,
        body: &[u8],
        on_written: impl FnOnce(),
    ) -> Result<(ReplyHeader, Vec<u8>, usize), OpError> {
        let header = RequestHeader {
            request_id,
            op,
            flags: 0,
        };
        self.scratch.clear();
        let length = (crate::wire::REQUEST_HEADER_BYTES + body.len()) as u32;
        self.scratch.extend_from_slice(&length.to_le_bytes());
        self.scratch.extend_from_slice(&header.encode());
        self.scratch.extend_from_slice(body);
        self.stream.write_all(&self.scratch).map_err(io_error)?;
        on_written();
        spin_until_readable(&self.stream);
        let mut len = [0u8; LENGTH_BYTES];
        self.stream.read_exact(&mut len).map_err(io_error)?;
        let length = u32::from_le_bytes(len) as usize;
        if length > MAX_REPLY_FRAME_BYTES {
            return Err(OpError::Bad(format!("reply frame of {length} bytes")));
        }
        let mut payload = vec![0u8; length];
        self.stream.read_exact(&mut payload).map_err(io_error)?;
        let (h, rest) =
            ReplyHeader::decode(&payload).ok_or_else(|| OpError::Bad(format!("reply of {length} bytes")))?;
        if h.request_id != request_id {
            return Err(OpError::Bad(format!(
                "reply to {}, expected {request_id}",
                h.request_id
            )));
        }
        let body = rest.to_vec();
        Ok((h, body, length + LENGTH_BYTES))
    }

    /// Reads exactly `size_bytes` that follow a reply, chunk by chunk into `buf`.
    pub fn read_stream(
        &mut self,
        size_bytes: u64,
        buf: &mut [u8],
        mut sink: impl FnMut(&[u8]) -> Result<(), String>,
    ) -> Result<(), OpError> {
        let mut left = size_bytes;
        while left > 0 {
            let want = left.min(buf.len() as u64) as usize;
            let n = self.stream.read(&mut buf[..want]).map_err(io_error)?;
            if n == 0 {
                return Err(OpError::Down(format!(
                    "connection closed after {} of {size_bytes} bytes",
                    size_bytes - left
                )));
            }
            sink(&buf[..n]).map_err(OpError::Bad)?;
            left -= n as u64;
        }
        Ok(())
    }
}

/// Polls the socket without sleeping for up to `SPIN_NS` before the blocking read: on
/// loopback most replies come within that time, and a blocked read's wake-up costs more
/// than the reply itself (the generic load generator does the same).
const SPIN_NS: u64 = 50_000;

fn spin_until_readable(stream: &TcpStream) {
    use std::os::fd::AsRawFd;
    let until = crate::clock::now_ns() + SPIN_NS;
    let mut byte = [0u8; 1];
    while crate::clock::now_ns() < until {
        // SAFETY: a 1-byte peek into our own buffer on an open socket.
        let n = unsafe {
            libc::recv(
                stream.as_raw_fd(),
                byte.as_mut_ptr().cast(),
                1,
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        if n != -1 {
            return; // data, or the peer closed: the blocking read sees which
        }
        std::hint::spin_loop();
    }
}

/// Connections by address.
pub struct Conns {
    timeout: Duration,
    open: HashMap<String, Conn>,
    /// Requests written whole so far (an operation that wrote none was never sent).
    pub written: u64,
}

/// Most connections one client keeps (one per peer, plus the index).
const MAX_CONNS: usize = 256;

impl Conns {
    pub fn new(timeout: Duration) -> Self {
        Conns {
            timeout,
            open: HashMap::new(),
            written: 0,
        }
    }

    pub fn get(&mut self, addr: &str) -> Result<&mut Conn, OpError> {
        Self::get_in(&mut self.open, self.timeout, addr)
    }

    fn get_in<'a>(
        open: &'a mut HashMap<String, Conn>,
        timeout: Duration,
        addr: &str,
    ) -> Result<&'a mut Conn, OpError> {
        if !open.contains_key(addr) {
            if open.len() >= MAX_CONNS {
                open.clear();
            }
            let conn = Conn::open(addr, timeout)?;
            open.insert(addr.to_string(), conn);
        }
        open.get_mut(addr)
            .ok_or_else(|| OpError::Down(format!("{addr}: not connected")))
    }

    /// Forgets a connection after an error: its stream may be mid-frame.
    pub fn drop_conn(&mut self, addr: &str) {
        self.open.remove(addr);
    }

    /// One request on `addr`'s connection; the connection is dropped on any error.
    pub fn request(
        &mut self,
        addr: &str,
        request_id: u64,
        op: u16,
        body: &[u8],
    ) -> Result<(ReplyHeader, Vec<u8>, usize), OpError> {
        let written = &mut self.written;
        let result = Self::get_in(&mut self.open, self.timeout, addr)
            .and_then(|c| c.request(request_id, op, body, || *written += 1));
        if result.is_err() {
            self.drop_conn(addr);
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use std::net::TcpListener;
    use std::os::fd::AsRawFd;
    use std::time::Instant;

    use super::*;
    use crate::wire::{REPLY_HEADER_BYTES, REQUEST_HEADER_BYTES};

    const TIMEOUT: Duration = Duration::from_secs(10);

    /// A one-connection server: reads one empty-bodied request, then writes a reply frame
    /// whose length prefix says `length` bytes and whose payload is `payload_bytes` long (a
    /// valid header, then zeros), and holds the connection until the client closes it.
    fn replying_with(length: u32, payload_bytes: usize) -> (String, std::thread::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut request = [0u8; LENGTH_BYTES + REQUEST_HEADER_BYTES];
            s.read_exact(&mut request).unwrap();
            let mut frame = length.to_le_bytes().to_vec();
            if payload_bytes > 0 {
                let header = ReplyHeader {
                    request_id: 7,
                    status: 0,
                    flags: 0,
                    server_ns: 0,
                    queue_ns: 0,
                    service_ns: 0,
                    detail_ns: 0,
                };
                frame.extend_from_slice(&header.encode());
                frame.resize(LENGTH_BYTES + payload_bytes, 0);
            }
            // The client may close first (a refused length): a failed write is fine then.
            let _ = s.write_all(&frame);
            let _ = s.read(&mut [0u8; 1]);
        });
        (addr, server)
    }

    #[test]
    fn a_reply_frame_over_64_mib_is_refused_before_it_is_allocated() {
        let over = (MAX_REPLY_FRAME_BYTES + 1) as u32;
        let (addr, server) = replying_with(over, 0);
        let mut conns = Conns::new(TIMEOUT);
        match conns.request(&addr, 7, 1, &[]) {
            Err(OpError::Bad(why)) => assert_eq!(why, format!("reply frame of {over} bytes")),
            other => panic!("expected a refusal, got {:?}", other.map(|r| r.2)),
        }
        drop(conns);
        server.join().unwrap();
    }

    #[test]
    fn a_reply_frame_of_exactly_64_mib_is_read() {
        assert_eq!(MAX_REPLY_FRAME_BYTES, 64 << 20);
        let (addr, server) = replying_with(MAX_REPLY_FRAME_BYTES as u32, MAX_REPLY_FRAME_BYTES);
        let mut conns = Conns::new(TIMEOUT);
        let (header, body, bytes) = conns
            .request(&addr, 7, 1, &[])
            .map_err(|e| e.to_string())
            .unwrap();
        assert_eq!(header.request_id, 7);
        assert_eq!(body.len(), MAX_REPLY_FRAME_BYTES - REPLY_HEADER_BYTES);
        assert_eq!(bytes, MAX_REPLY_FRAME_BYTES + LENGTH_BYTES);
        drop(conns);
        server.join().unwrap();
    }

    #[test]
    fn a_client_keeps_at_most_256_connections() {
        // 257 listeners that never accept: each connection waits in its listener's queue.
        let listeners: Vec<TcpListener> = (0..=MAX_CONNS)
            .map(|_| TcpListener::bind("127.0.0.1:0").unwrap())
            .collect();
        let addrs: Vec<String> = listeners
            .iter()
            .map(|l| l.local_addr().unwrap().to_string())
            .collect();
        let mut conns = Conns::new(TIMEOUT);
        for addr in &addrs[..MAX_CONNS] {
            conns.get(addr).map_err(|e| e.to_string()).unwrap();
        }
        assert_eq!(conns.open.len(), 256);
        conns.get(&addrs[MAX_CONNS]).map_err(|e| e.to_string()).unwrap();
        assert!(conns.open.len() <= 256, "{} connections kept", conns.open.len());
        assert!(conns.open.contains_key(&addrs[MAX_CONNS]));
    }

    #[test]
    fn a_connect_that_gets_no_answer_fails_after_2_s() {
        // A listener whose accept queue (backlog 0: one connection) is full drops further
        // SYNs, as a dead or overloaded host does: connect() waits until the timeout.
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        // SAFETY: listen(2) again on a descriptor the listener owns, to shrink its queue.
        assert_eq!(unsafe { libc::listen(listener.as_raw_fd(), 0) }, 0);
        let addr = listener.local_addr().unwrap();
        let _queued = TcpStream::connect(addr).unwrap();
        let started = Instant::now();
        let result = Conn::open(&addr.to_string(), TIMEOUT);
        let took = started.elapsed();
        assert!(matches!(result, Err(OpError::Timeout)), "{:?}", result.err());
        assert!(
            took >= Duration::from_secs(2),
            "gave up after {took:?}, before 2 s"
        );
        assert!(took < Duration::from_secs(2 + 10), "still waiting after {took:?}");
    }
}
