//! One keep-alive connection of the http target: made when first needed and again after it
//! was lost, one request in flight at a time (no pipelining), its response read as bytes
//! arrive without blocking the engine's thread.

use std::io::{self, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::AsRawFd;
use std::time::Duration;

use super::response::{Limits, Reason, Response, ResponseReader};
use super::timing::TimingKeys;

/// The request on a connection: what its sample needs.
#[derive(Clone, Copy, Debug)]
pub struct InFlight {
    pub request_id: u64,
    pub intended_ns: u64,
    pub sent_ns: u64,
    pub deadline_ns: u64,
    pub op: u16,
    pub bytes_out: u64,
}

/// What reading a connection gave.
pub enum Read {
    /// Nothing whole yet (or nothing was expected and nothing came).
    Nothing,
    /// The response to the request in flight, or why there is none; the connection is
    /// closed when the reason is set or the response said so.
    Done(InFlight, Result<Response, Reason>),
}

pub struct Conn {
    pub index: u32,
    stream: Option<TcpStream>,
    reader: ResponseReader,
    pub in_flight: Option<InFlight>,
    /// Times the connection was (re)opened.
    pub opened: u64,
    /// When its last request ended (0: none yet): a request that waited for it was not
    /// late by the sender's fault before then.
    pub free_ns: u64,
}

impl Conn {
    pub fn new(index: u32, limits: Limits) -> Conn {
        Conn {
            index,
            stream: None,
            reader: ResponseReader::new(limits),
            in_flight: None,
            opened: 0,
            free_ns: 0,
        }
    }

    /// The descriptor to poll (-1 while closed: ppoll skips it).
    pub fn fd(&self) -> i32 {
        self.stream.as_ref().map_or(-1, |s| s.as_raw_fd())
    }

    /// Opens the connection if it is closed. Blocking, for at most `timeout`: on loopback
    /// or a LAN it is a round trip; a target that does not answer holds the sender that
    /// long, which shows up as the latency of the requests behind it.
    pub fn open(&mut self, addr: &SocketAddr, timeout: Duration) -> Result<(), String> {
        if self.stream.is_some() {
            return Ok(());
        }
        let s = TcpStream::connect_timeout(addr, timeout).map_err(|e| e.to_string())?;
        s.set_nodelay(true).map_err(|e| e.to_string())?;
        // Writes block (requests are small); this bounds a write to a server that stopped
        // reading.
        s.set_write_timeout(Some(timeout)).map_err(|e| e.to_string())?;
        self.stream = Some(s);
        self.opened += 1;
        Ok(())
    }

    /// Writes a request (the connection must be open and idle).
    pub fn send(&mut self, bytes: &[u8], head: bool, f: InFlight) -> Result<(), String> {
        let stream = self.stream.as_mut().ok_or("not connected")?;
        stream.write_all(bytes).map_err(|e| e.to_string())?;
        self.reader.start(head);
        self.in_flight = Some(f);
        Ok(())
    }

    pub fn close(&mut self) {
        self.stream = None;
    }

    /// Reads what has arrived, without blocking, into `buf`'s space.
    pub fn read(&mut self, buf: &mut [u8], keys: &TimingKeys) -> Read {
        loop {
            let Some(stream) = &self.stream else {
                return Read::Nothing;
            };
            // SAFETY: recv writes at most buf.len() bytes into buf, which we own mutably.
            let n = unsafe {
                libc::recv(
                    stream.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            let outcome = match n {
                0 => Some(self.reader.eof()),
                n if n < 0 => match io::Error::last_os_error().kind() {
                    io::ErrorKind::WouldBlock => return Read::Nothing,
                    io::ErrorKind::Interrupted => continue,
                    // A reset before any byte of the response is a close before it.
                    _ if self.reader.untouched() => Some(Err(Reason::ClosedBeforeReply)),
                    _ => Some(Err(Reason::ClosedMidReply)),
                },
                n => {
                    if self.in_flight.is_none() {
                        // Bytes nobody asked for: the connection's framing is lost.
                        self.close();
                        return Read::Nothing;
                    }
                    self.reader.feed(&buf[..n as usize], keys).transpose()
                }
            };
            let Some(result) = outcome else {
                continue; // more may have arrived since: read until it would block
            };
            let Some(f) = self.in_flight.take() else {
                self.close(); // an idle connection closed by the server: opened again when needed
                return Read::Nothing;
            };
            if result.as_ref().map_or(true, |r| r.close) || n == 0 {
                self.close();
            }
            return Read::Done(f, result);
        }
    }
}
