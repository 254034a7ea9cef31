//! The node's connections to the target, made before the start: every connect at once, so
//! the first requests do not pay for them, each waiting at most the connect timeout.

use std::net::SocketAddr;

use super::config::HttpConfig;
use super::conn::{self, Conn, Failed, Watched};
use super::tls::Tls;
use crate::load::config::ScheduleConfig;
use crate::{clock, stdio};

/// Connects (TCP and TLS together) wait at most this, or the request timeout if shorter.
/// Long enough for the kernel's SYN retries at 1 s and 3 s to get through a full accept
/// queue; a connect still not made then is its request's `connect_timeout`.
const CONNECT_TIMEOUT_NS: u64 = 5_000_000_000;
/// Longest single wait while the connects go on.
const WAIT_NS: u64 = 20_000_000;
/// The connects before the start wait at most this: a connection still opening then is
/// handed to the engine, which goes on with it against its own connect deadline. The node's
/// time bound (duration + grace) starts after this wait, so it stays short: a healthy
/// target's connects take well under a millisecond on loopback, a TLS handshake a few.
pub(crate) const PRESTART_WAIT_NS: u64 = 500_000_000;
/// Connection failures an engine logs at most (the samples hold every failure).
const MAX_LOGGED_FAILURES: u64 = 10;

/// An engine's log of connection failures (connects, TLS handshakes, writes): the first
/// `MAX_LOGGED_FAILURES`, then one line saying where the rest are.
pub(crate) fn failure_log() -> stdio::CappedLog {
    stdio::CappedLog::new(
        MAX_LOGGED_FAILURES,
        "(further connection failures are in the samples only)",
    )
}

/// The connect timeout for a request timeout of `timeout_ms`: that, within 1 ms and
/// `CONNECT_TIMEOUT_NS`.
pub(crate) fn connect_timeout_ns(timeout_ms: f64) -> u64 {
    ((timeout_ms * 1e6) as u64).clamp(1_000_000, CONNECT_TIMEOUT_NS)
}

/// Whether the connects before the start go on from `now`: a connection is still being
/// made, no stop (SIGTERM) was asked, and, once `bounded`, less than `PRESTART_WAIT_NS` has
/// passed since `start`. When they go on, it waits for the connections' sockets (at most
/// `WAIT_NS`).
pub(crate) fn connects_go_on<C: Watched>(
    conns: &[C],
    pollfds: &mut [libc::pollfd],
    start: u64,
    now: u64,
    bounded: bool,
) -> bool {
    if !conns.iter().any(C::is_opening) {
        return false;
    }
    if crate::signals::stop_requested() || (bounded && now.saturating_sub(start) >= PRESTART_WAIT_NS) {
        return false;
    }
    conn::watch(conns, pollfds);
    crate::poll::ppoll_ns(pollfds, WAIT_NS);
    true
}

pub struct Pool {
    pub conns: Vec<Conn>,
    pub pollfds: Vec<libc::pollfd>,
    pub addr: SocketAddr,
    pub tls: Option<Tls>,
    pub connect_timeout_ns: u64,
}

impl Pool {
    /// Resolves the target, sets up TLS for https, and makes every connection (one per
    /// closed-loop client, else `load.connections`). A target that refuses them, or whose
    /// certificate is not trusted, is an error: nothing listens there, or nothing could be
    /// measured. Connects that are merely slow are not: the run starts, and a connection not
    /// made yet is made again when a request needs it.
    pub fn open(cfg: &HttpConfig) -> Result<Pool, String> {
        let load = &cfg.load;
        let addr = cfg.target.socket_addr(&cfg.tcp.target)?;
        let tls = match cfg.target.tls {
            true => Some(Tls::new(&cfg.driver, &cfg.target.host, &[b"http/1.1"])?),
            false => None,
        };
        let count = match &load.schedule {
            ScheduleConfig::Closed { clients, .. } => *clients,
            _ => cfg.tcp.connections,
        };
        let limits = cfg.driver.limits();
        let mut pool = Pool {
            conns: (0..count).map(|i| Conn::new(i as u32, limits)).collect(),
            pollfds: vec![crate::poll::UNWATCHED; count],
            addr,
            tls,
            connect_timeout_ns: connect_timeout_ns(load.timeout_ms),
        };
        pool.connect_all()?;
        Ok(pool)
    }

    fn connect_all(&mut self) -> Result<(), String> {
        let (addr, tls) = (self.addr, self.tls.as_ref());
        let start = clock::now_ns();
        let refused = |index: u32, f: Failed| match f.refused {
            true => Err(format!("connection {index} to {addr}: {}", f.words())),
            false => Ok(()), // a reset or a close: the run goes on, and tries again
        };
        for c in &mut self.conns {
            if let Err(f) = c.open(&addr, tls, start, self.connect_timeout_ns) {
                refused(c.index, f)?;
            }
        }
        loop {
            let now = clock::now_ns();
            for c in self.conns.iter_mut().filter(|c| c.is_opening()) {
                if let Err(f) = c.progress(tls, now) {
                    refused(c.index, f)?;
                }
                if c.is_opening() && now >= c.connect_deadline_ns {
                    c.close();
                }
            }
            // A stop or the wait's bound: the run starts with what is made (a stop then
            // ends it within its grace), the rest going on in the engine.
            if !connects_go_on(&self.conns, &mut self.pollfds, start, now, true) {
                break;
            }
        }
        let made = self.conns.iter().filter(|c| c.is_open()).count();
        if made < self.conns.len() {
            stdio::log(&format!(
                "{} of {} connections to {addr} not made before the start (reset, closed, or not \
                 within {} ms: a full accept queue?); the run starts, those still connecting go \
                 on (each within {} ms of its start), and the others are made again when a \
                 request needs them",
                self.conns.len() - made,
                self.conns.len(),
                PRESTART_WAIT_NS / 1_000_000,
                self.connect_timeout_ns / 1_000_000
            ));
        }
        Ok(())
    }
}
