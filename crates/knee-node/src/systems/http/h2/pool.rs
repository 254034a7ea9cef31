//! The HTTP/2 connections of a node, made before the start: every connect at once (TCP,
//! TLS, h2's handshake, and the server's first SETTINGS), each waiting at most the connect
//! timeout, as the HTTP/1.1 pool does. Over TLS the first connection made tells what the
//! server chose by ALPN: h2, or (when the caller may fall back) HTTP/1.1.

use h2::client::Builder;

use super::super::conn::Failed;
use super::super::pool::{connect_timeout_ns, connects_go_on};
use super::conn::{self, Ended, H2Conn};
use super::H2Setup;
use crate::{clock, stdio};

pub(crate) struct H2Pool {
    pub(super) conns: Vec<H2Conn>,
    pub(super) pollfds: Vec<libc::pollfd>,
    pub(super) setup: H2Setup,
    pub(super) builder: Builder,
    pub(super) connect_timeout_ns: u64,
}

/// The setup's error when TLS did not give h2 and the caller required it.
fn not_h2(addr: &std::net::SocketAddr, chose: &str) -> String {
    format!(
        "{addr}: the server does not speak HTTP/2 over TLS (ALPN offered h2; it chose {chose}): \
         use driver.protocol = \"auto\" or \"http1\""
    )
}

impl H2Pool {
    /// Makes every connection. Err: the target refused (nothing listens, an untrusted
    /// certificate, or TLS without h2 when the caller may not fall back). Ok(None): the
    /// server chose HTTP/1.1 (or nothing) by ALPN and the caller may fall back.
    pub fn open(setup: H2Setup) -> Result<Option<H2Pool>, String> {
        let count = setup.connections;
        let mut pool = H2Pool {
            conns: (0..count).map(|i| H2Conn::new(i as u32)).collect(),
            pollfds: vec![crate::poll::UNWATCHED; count],
            builder: conn::builder(&setup.options),
            connect_timeout_ns: connect_timeout_ns(setup.timeout_ms),
            setup,
        };
        if pool.connect_all()? {
            Ok(Some(pool))
        } else {
            Ok(None)
        }
    }

    /// false: the server chose another protocol than h2 and the caller may fall back.
    fn connect_all(&mut self) -> Result<bool, String> {
        let addr = self.setup.addr;
        let start = clock::now_ns();
        let refused = |index: u32, f: Failed| match f.refused {
            // A TLS server without h2 may refuse the handshake rather than choose HTTP/1.1.
            true if f.error.contains("NoApplicationProtocol") => {
                Err(not_h2(&addr, "none (it refused the handshake)"))
            }
            true => Err(format!("connection {index} to {addr}: {}", f.words())),
            false => Ok(()),
        };
        for c in &mut self.conns {
            if let Err(f) = c.open(&addr, self.setup.tls.as_ref(), start, self.connect_timeout_ns) {
                refused(c.index, f)?;
            }
        }
        loop {
            let now = clock::now_ns();
            for c in self.conns.iter_mut() {
                match c.progress(self.setup.tls.as_ref(), &self.builder, now) {
                    Ok(None) => {}
                    Ok(Some(chose)) if self.setup.may_fall_back => {
                        let _ = chose;
                        return Ok(false);
                    }
                    Ok(Some(chose)) => {
                        let chose = match chose.is_empty() {
                            true => "no protocol".to_string(),
                            false => String::from_utf8_lossy(&chose).into_owned(),
                        };
                        return Err(not_h2(&addr, &chose));
                    }
                    Err(f) => refused(c.index, f)?,
                }
                if !c.is_closed() && !c.is_opening() {
                    // Ready: keep its connection future polled (SETTINGS acks).
                    let _ = c.poll_conn(now);
                    continue;
                }
                if c.wake.take() || !c.is_closed() {
                    if let Some(Ended::Error(e)) = c.poll_conn(now) {
                        stdio::log(&format!("connection {}: HTTP/2: {e}", c.index));
                        c.close();
                    }
                }
                if c.is_opening() && now >= c.connect_deadline_ns {
                    c.close();
                }
            }
            // A stop, or the wait's bound once the protocol is known (cleartext, or a
            // connection ready): the run starts, those still opening going on in the engine.
            let known = self.setup.tls.is_none() || self.conns.iter().any(H2Conn::is_ready);
            if !connects_go_on(&self.conns, &mut self.pollfds, start, now, known) {
                break;
            }
        }
        let made = self.conns.iter().filter(|c| c.is_ready()).count();
        if made < self.conns.len() {
            stdio::log(&format!(
                "{} of {} HTTP/2 connections to {addr} not made before the start (reset, closed, \
                 or no SETTINGS within {} ms); the run starts, and each is made again when \
                 requests wait",
                self.conns.len() - made,
                self.conns.len(),
                self.connect_timeout_ns / 1_000_000
            ));
        }
        Ok(true)
    }
}
