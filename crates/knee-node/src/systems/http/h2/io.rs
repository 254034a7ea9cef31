//! tokio's `AsyncRead`/`AsyncWrite` over a connection's non-blocking [`Transport`] (plain
//! TCP or rustls TLS), so h2 reads and writes through knee's sockets. A read or write that
//! would block returns `Poll::Pending` without storing the waker: the engine's ppoll watches
//! the socket and polls the connection again when it is ready. A write that could not go
//! out raises `wants_write`, so the poll also waits for POLLOUT.

use std::cell::Cell;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::super::transport::Transport;

/// What the engine sees of an `Io` that h2 owns.
#[derive(Default)]
pub struct IoState {
    /// Bytes wait for the socket to take them: poll for POLLOUT.
    pub wants_write: Cell<bool>,
    /// Bytes read (TLS: plaintext), for the connection's own count.
    pub bytes_read: Cell<u64>,
}

pub struct Io {
    transport: Transport,
    state: Rc<IoState>,
}

impl Io {
    pub fn new(transport: Transport) -> (Io, Rc<IoState>) {
        let state = Rc::new(IoState::default());
        (
            Io {
                transport,
                state: state.clone(),
            },
            state,
        )
    }
}

impl AsyncRead for Io {
    fn poll_read(self: Pin<&mut Self>, _cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        loop {
            match me.transport.read(buf.initialize_unfilled()) {
                Ok(n) => {
                    buf.advance(n);
                    me.state.bytes_read.set(me.state.bytes_read.get() + n as u64);
                    return Poll::Ready(Ok(()));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Poll::Pending,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncWrite for Io {
    fn poll_write(self: Pin<&mut Self>, _cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let me = self.get_mut();
        if buf.is_empty() {
            return Poll::Ready(Ok(0));
        }
        loop {
            match me.transport.write(buf) {
                Ok(0) => {
                    me.state.wants_write.set(true);
                    return Poll::Pending;
                }
                Ok(n) => return Poll::Ready(Ok(n)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    me.state.wants_write.set(true);
                    return Poll::Pending;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let me = self.get_mut();
        me.transport.flush()?;
        if me.transport.unsent() {
            me.state.wants_write.set(true);
            return Poll::Pending;
        }
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // The socket is closed when the connection is dropped; what is queued goes first.
        self.poll_flush(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    fn pair() -> (Io, Rc<IoState>, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        client.set_nonblocking(true).unwrap();
        let (server, _) = listener.accept().unwrap();
        let (io, state) = Io::new(Transport::Plain(client));
        (io, state, server)
    }

    #[test]
    fn reads_pend_until_bytes_arrive_and_the_end_reads_zero() {
        let (mut io, state, mut server) = pair();
        let w = super::super::wake::Wakeup::new();
        let mut cx = w.context();
        let mut space = [0u8; 16];
        let mut buf = ReadBuf::new(&mut space);
        assert!(Pin::new(&mut io).poll_read(&mut cx, &mut buf).is_pending());
        server.write_all(b"abc").unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(matches!(
            Pin::new(&mut io).poll_read(&mut cx, &mut buf),
            Poll::Ready(Ok(()))
        ));
        assert_eq!(buf.filled(), b"abc");
        assert_eq!(state.bytes_read.get(), 3);
        drop(server);
        std::thread::sleep(std::time::Duration::from_millis(20));
        let mut buf = ReadBuf::new(&mut space);
        assert!(matches!(
            Pin::new(&mut io).poll_read(&mut cx, &mut buf),
            Poll::Ready(Ok(()))
        ));
        assert!(buf.filled().is_empty(), "the end of the stream reads 0 bytes");
    }

    #[test]
    fn a_full_socket_pends_and_asks_for_pollout() {
        let (mut io, state, mut server) = pair();
        let w = super::super::wake::Wakeup::new();
        let mut cx = w.context();
        let chunk = vec![7u8; 1 << 16];
        let mut written = 0usize;
        // Nobody reads: the socket's buffers fill and the write pends.
        loop {
            match Pin::new(&mut io).poll_write(&mut cx, &chunk) {
                Poll::Ready(Ok(n)) => written += n,
                Poll::Pending => break,
                Poll::Ready(Err(e)) => panic!("{e}"),
            }
            assert!(written < 1 << 30, "never blocked");
        }
        assert!(state.wants_write.get());
        server.set_nonblocking(true).unwrap();
        let mut sink = vec![0u8; 1 << 16];
        let mut read = 0usize;
        while read < written {
            match server.read(&mut sink) {
                Ok(n) => read += n,
                Err(_) => std::thread::sleep(std::time::Duration::from_millis(1)),
            }
        }
        assert_eq!(read, written);
        assert!(Pin::new(&mut io).poll_flush(&mut cx).is_ready());
    }
}
