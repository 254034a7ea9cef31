//! A connection's byte stream over a non-blocking socket: plain TCP, or TLS (rustls) on
//! top of it. Nothing here blocks: a step that cannot go on says which poll event it waits
//! for, and the engine's one `ppoll` waits for every connection at once.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, RawFd};

use rustls::ClientConnection;
use socket2::{Domain, Protocol, Socket, Type};

/// Starts a TCP connect without waiting for it: the socket, and whether it is made already
/// (it may be, on loopback). An error is a connect that failed at once.
pub fn connect(addr: &SocketAddr) -> io::Result<(TcpStream, bool)> {
    let sock = Socket::new(Domain::for_address(*addr), Type::STREAM, Some(Protocol::TCP))?;
    sock.set_nonblocking(true)?;
    sock.set_tcp_nodelay(true)?;
    let made = match sock.connect(&(*addr).into()) {
        Ok(()) => true,
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => false,
        Err(e) => return Err(e),
    };
    Ok((sock.into(), made))
}

/// A connect in progress, once poll says the socket is writable (or in error): Ok when
/// it is made, else why not (refused, reset, unreachable).
pub fn connect_outcome(s: &TcpStream) -> io::Result<()> {
    match s.take_error()? {
        Some(e) => Err(e),
        None => s.peer_addr().map(|_| ()),
    }
}

pub enum Transport {
    Plain(TcpStream),
    Tls {
        tcp: TcpStream,
        tls: Box<ClientConnection>,
    },
}

impl Transport {
    pub fn fd(&self) -> RawFd {
        match self {
            Transport::Plain(s) | Transport::Tls { tcp: s, .. } => s.as_raw_fd(),
        }
    }

    /// The poll events the stream waits for besides a response's bytes: POLLOUT while
    /// bytes taken for sending are not all out (or, during a TLS handshake, what it needs).
    pub fn interest(&self) -> i16 {
        match self {
            Transport::Plain(_) => libc::POLLIN,
            Transport::Tls { tls, .. } => {
                let mut events = libc::POLLIN;
                if tls.wants_write() {
                    events |= libc::POLLOUT;
                }
                events
            }
        }
    }

    /// Drives a TLS handshake as far as it goes without waiting: Ok(true) once done (at
    /// once for plain TCP), Ok(false) while it waits for `interest`.
    pub fn handshake(&mut self) -> io::Result<bool> {
        let Transport::Tls { tcp, tls } = self else {
            return Ok(true);
        };
        loop {
            flush_tls(tcp, tls)?;
            if !tls.is_handshaking() {
                return Ok(true);
            }
            if tls.wants_write() || !tls.wants_read() {
                return Ok(false); // waits for POLLOUT (or for rustls: not reached)
            }
            match tls.read_tls(tcp) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "the server closed the connection during the TLS handshake",
                    ))
                }
                Ok(_) => process(tcp, tls)?,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(e),
            }
        }
    }

    /// Reads what has arrived (TLS: its plaintext): Ok(0) at the end of the stream,
    /// WouldBlock when nothing has.
    pub fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let (tcp, tls) = match self {
            Transport::Plain(s) => return s.read(buf),
            Transport::Tls { tcp, tls } => (tcp, tls),
        };
        let mut eof = false;
        loop {
            match tls.reader().read(buf) {
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock && !eof => {}
                // A close without TLS's close_notify: many servers end so, and an HTTP
                // response's own framing says whether it was whole.
                Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::UnexpectedEof) => {
                    return Ok(0)
                }
                Err(e) => return Err(e),
            }
            if tls.read_tls(tcp)? == 0 {
                eof = true;
            }
            process(tcp, tls)?;
        }
    }

    /// Takes `bytes` for sending and writes what the socket takes now. Plain TCP returns
    /// how many were written (the rest is the caller's to write on POLLOUT); TLS takes them
    /// all (its records wait in rustls, flushed by `flush`).
    pub fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        match self {
            Transport::Plain(s) => match s.write(bytes) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(0),
                other => other,
            },
            Transport::Tls { tcp, tls } => {
                tls.writer().write_all(bytes)?;
                flush_tls(tcp, tls)?;
                Ok(bytes.len())
            }
        }
    }

    /// Writes what TLS holds for sending, as far as the socket takes it now.
    pub fn flush(&mut self) -> io::Result<()> {
        match self {
            Transport::Plain(_) => Ok(()),
            Transport::Tls { tcp, tls } => flush_tls(tcp, tls),
        }
    }

    /// The protocol the server chose by ALPN (TLS only; None: it chose none).
    pub fn alpn(&self) -> Option<&[u8]> {
        match self {
            Transport::Plain(_) => None,
            Transport::Tls { tls, .. } => tls.alpn_protocol(),
        }
    }

    /// Whether TLS holds bytes not yet written to the socket.
    pub fn unsent(&self) -> bool {
        matches!(self, Transport::Tls { tls, .. } if tls.wants_write())
    }
}

/// Writes TLS records until none is left or the socket would block.
fn flush_tls(tcp: &mut TcpStream, tls: &mut ClientConnection) -> io::Result<()> {
    while tls.wants_write() {
        match tls.write_tls(tcp) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Processes the TLS records read; an error (a bad certificate, a protocol error, an alert
/// from the server) is sent to the server as an alert when the socket takes it, and
/// returned with rustls's words.
fn process(tcp: &mut TcpStream, tls: &mut ClientConnection) -> io::Result<()> {
    if let Err(e) = tls.process_new_packets() {
        let _ = flush_tls(tcp, tls);
        return Err(io::Error::new(io::ErrorKind::InvalidData, e));
    }
    Ok(())
}
