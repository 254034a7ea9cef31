//! The block service role (`knee-node serve stream`): one UDP socket on 127.0.0.1, one
//! thread. It reads block requests, emulates its link (loss decided on arrival, the reply
//! held in a bounded timer queue for the emulated delay) and sends replies when due.
//! Malformed datagrams are counted and ignored; nothing a client sends can stop it.
//! UDP has no frames, so it is not a `serve::Service`; its `ready` and `stats` lines and its
//! stop come from `serve::lifecycle`, as every server's.

use std::io::ErrorKind;
use std::net::UdpSocket;
use std::os::fd::AsRawFd;

use serde::{Deserialize, Serialize};

use super::datagram::{self, BlockId, ReplyHeader, Request, BLOCK_SIDE_PX, REPLY_NO_SUCH_BLOCK, REPLY_OK};
use super::link::{Delay, Loss, LossProcess};
use super::timer::{Pending, TimerQueue};
use crate::events::{self, Stats};
use crate::rng::Rng;
use crate::serve::{Lifecycle, ServeOptions, Stop};
use crate::{clock, stdio};

/// Largest frame side, in pixels; the catalog is checked against it.
pub(crate) const MAX_SIDE_PX: u32 = 4096;
pub(crate) const MAX_STREAMS: usize = 256;
/// Datagrams read per pass before due replies are sent again, so a flood cannot starve them.
const MAX_READS_PER_PASS: usize = 256;
/// Larger than any valid request: a longer datagram arrives truncated to this and is malformed.
const RECV_BUFFER_BYTES: usize = 2048;
/// Malformed datagrams logged with their reason; later ones are only counted.
const MAX_LOGGED_MALFORMED: u64 = 10;

/// Replies waiting in the timer queue (each holds its reply datagram).
pub(crate) const MAX_PENDING: usize = 10_000_000;

pub(crate) fn default_streams() -> Vec<(u32, u32)> {
    vec![(256, 192)]
}
fn default_delay() -> Delay {
    Delay::Fixed { ms: 0.0 }
}
fn default_loss() -> Loss {
    Loss::None
}
pub(crate) fn default_max_pending() -> usize {
    100_000
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServiceConfig {
    /// `[width_px, height_px]` of each stream's frames, multiples of 16.
    #[serde(default = "default_streams")]
    pub streams: Vec<(u32, u32)>,
    #[serde(default = "default_delay")]
    pub delay: Delay,
    #[serde(default = "default_loss")]
    pub loss: Loss,
    #[serde(default)]
    pub seed: u64,
    /// Replies waiting for their delay beyond this are dropped (and counted).
    #[serde(default = "default_max_pending")]
    pub max_pending: usize,
}

impl ServiceConfig {
    pub fn check(&self) -> Result<(), String> {
        if self.streams.is_empty() || self.streams.len() > MAX_STREAMS {
            return Err(format!(
                "streams: give 1..={MAX_STREAMS} [width_px, height_px] pairs"
            ));
        }
        for (i, &(w, h)) in self.streams.iter().enumerate() {
            let ok = |side: u32| {
                (BLOCK_SIDE_PX..=MAX_SIDE_PX).contains(&side) && side.is_multiple_of(BLOCK_SIDE_PX)
            };
            if !ok(w) || !ok(h) {
                return Err(format!(
                    "streams[{i}]: {w} x {h} px; each side must be a multiple of 16 in 16..={MAX_SIDE_PX}"
                ));
            }
        }
        if !(1..=MAX_PENDING).contains(&self.max_pending) {
            return Err(format!("max_pending must be 1..={MAX_PENDING}"));
        }
        self.delay.check()?;
        self.loss.check()
    }

    fn blocks_of(&self, stream: u16) -> Option<u32> {
        let &(w, h) = self.streams.get(stream as usize)?;
        Some((w / BLOCK_SIDE_PX) * (h / BLOCK_SIDE_PX))
    }
}

/// Cumulative counts, printed in each `stats` line (the byte counts as its generic columns).
#[derive(Serialize, Default, Debug, Clone, Copy)]
struct Counts {
    received: u64,
    replied: u64,
    /// Lost by the emulated link (never answered).
    dropped: u64,
    /// Refused by the full timer queue (never answered).
    overflow: u64,
    malformed: u64,
    /// Well formed, but no such stream or block (answered with an error status).
    bad_requests: u64,
    send_errors: u64,
    #[serde(skip)]
    bytes_rx: u64,
    #[serde(skip)]
    bytes_tx: u64,
}

/// The service's fields of its `stats` line, after the generic ones.
#[derive(Serialize, Default, Debug)]
struct StreamStats {
    #[serde(flatten)]
    counts: Counts,
    /// The emulated link's mean loss rate.
    loss_rate: f64,
    /// The last line, printed once stopped.
    #[serde(rename = "final")]
    last: bool,
}

pub fn run(opts: &ServeOptions) -> Result<(), String> {
    opts.datagram()?;
    let server = if opts.server.is_null() {
        serde_json::json!({})
    } else {
        opts.server.clone()
    };
    let cfg: ServiceConfig = serde_json::from_value(server).map_err(|e| format!("server parameters: {e}"))?;
    cfg.check().map_err(|e| format!("server parameters: {e}"))?;
    let socket = UdpSocket::bind(&opts.listen).map_err(|e| format!("binding {}: {e}", opts.listen))?;
    socket.set_nonblocking(true).map_err(|e| e.to_string())?;
    let addr = socket.local_addr().map_err(|e| e.to_string())?;
    clock::tighten_timer_slack();
    let life = Lifecycle::ready(addr, Stop::default());
    Service {
        rng: Rng::new(cfg.seed),
        loss: LossProcess::new(cfg.loss.clone()),
        queue: TimerQueue::new(cfg.max_pending),
        cfg,
        socket,
        counts: Counts::default(),
    }
    .serve(life)
}

struct Service {
    cfg: ServiceConfig,
    socket: UdpSocket,
    rng: Rng,
    loss: LossProcess,
    queue: TimerQueue,
    counts: Counts,
}

impl Service {
    /// Serves until the lifecycle ends it, then prints a last `stats` line.
    fn serve(&mut self, mut life: Lifecycle) -> Result<(), String> {
        let (mut buf, mut out) = (
            vec![0u8; RECV_BUFFER_BYTES],
            Vec::with_capacity(datagram::REPLY_BYTES),
        );
        loop {
            let now = clock::now_ns();
            self.send_due(now, &mut out);
            if let Some(end) = life.tick(now, || self.stats(false)) {
                events::emit(&self.stats(true));
                return end;
            }
            let until_due = self
                .queue
                .next_due_ns()
                .map_or(u64::MAX, |t| t.saturating_sub(now));
            if life.wait_readable(self.socket.as_raw_fd(), now, until_due) {
                self.read_all(&mut buf, &mut out);
            }
        }
    }

    /// Reads and handles at most `MAX_READS_PER_PASS` waiting datagrams; how many it read.
    fn read_all(&mut self, buf: &mut [u8], out: &mut Vec<u8>) -> usize {
        for read in 0..MAX_READS_PER_PASS {
            match self.socket.recv_from(buf) {
                Ok((n, from)) => {
                    self.counts.received += 1;
                    self.counts.bytes_rx += n as u64;
                    self.handle(&buf[..n], from, out);
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => return read,
                // A UDP read error concerns one datagram (e.g. an ICMP report): go on.
                Err(_) => return read,
            }
        }
        MAX_READS_PER_PASS
    }

    fn handle(&mut self, datagram: &[u8], from: std::net::SocketAddr, out: &mut Vec<u8>) {
        let arrived_ns = clock::now_ns();
        let req = match Request::decode(datagram) {
            Ok(r) => r,
            Err(why) => {
                self.counts.malformed += 1;
                if self.counts.malformed <= MAX_LOGGED_MALFORMED {
                    stdio::log(&format!("malformed datagram from {from} ignored: {why}"));
                }
                return;
            }
        };
        let mut header = ReplyHeader {
            status: REPLY_OK,
            id: req.id,
            request_id: req.request_id,
            server_ns: 0,
            delay_ns: 0,
        };
        if !self.exists(&req.id) {
            // An error reply goes back at once: the link emulates data, not refusals.
            self.counts.bad_requests += 1;
            header.status = REPLY_NO_SUCH_BLOCK;
            self.send(header, arrived_ns, from, out);
            return;
        }
        if self.loss.lose(&mut self.rng) {
            self.counts.dropped += 1;
            return;
        }
        header.delay_ns = self.cfg.delay.draw_ns(&mut self.rng);
        let pending = Pending {
            due_ns: arrived_ns + header.delay_ns,
            arrived_ns,
            header,
            to: from,
        };
        if !self.queue.push(pending) {
            self.counts.overflow += 1;
        }
    }

    fn exists(&self, id: &BlockId) -> bool {
        self.cfg
            .blocks_of(id.stream)
            .is_some_and(|blocks| id.block < blocks)
    }

    fn send_due(&mut self, now_ns: u64, out: &mut Vec<u8>) {
        while let Some(p) = self.queue.pop_due(now_ns) {
            self.send(p.header, p.arrived_ns, p.to, out);
        }
    }

    /// Sends a reply; its server_ns is the time here minus the emulated delay.
    fn send(
        &mut self,
        mut header: ReplyHeader,
        arrived_ns: u64,
        to: std::net::SocketAddr,
        out: &mut Vec<u8>,
    ) {
        header.server_ns = (clock::now_ns() - arrived_ns).saturating_sub(header.delay_ns);
        header.encode(out);
        match self.socket.send_to(out, to) {
            Ok(n) => {
                self.counts.replied += 1;
                self.counts.bytes_tx += n as u64;
            }
            // A full socket buffer or an unreachable client loses this reply, like a link.
            Err(_) => self.counts.send_errors += 1,
        }
    }

    /// The `stats` line now. The generic columns: `requests` = datagrams received,
    /// `errors` = malformed + bad requests, `overloaded` = `overflow`, `bad_frames` =
    /// `malformed`; `connections` is 0 (UDP).
    fn stats(&self, last: bool) -> Stats<StreamStats> {
        let c = &self.counts;
        Stats {
            t_ns: clock::now_ns(),
            requests: c.received,
            errors: c.malformed + c.bad_requests,
            overloaded: c.overflow,
            bytes_rx: c.bytes_rx,
            bytes_tx: c.bytes_tx,
            connections: 0,
            bad_frames: c.malformed,
            queue_len: self.queue.len() as u64,
            extra: StreamStats {
                counts: *c,
                loss_rate: self.cfg.loss.mean_rate(),
                last,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_pass_reads_at_most_256_datagrams_and_the_next_pass_the_rest() {
        let cfg: ServiceConfig = serde_json::from_value(serde_json::json!({})).unwrap();
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        socket.set_nonblocking(true).unwrap();
        // The default receive buffer holds about 256 small datagrams: room for 300 and more
        // (SO_RCVBUFFORCE as root, past net.core.rmem_max; SO_RCVBUF, capped by it, else).
        let rcvbuf: libc::c_int = 4 << 20;
        let set = [libc::SO_RCVBUFFORCE, libc::SO_RCVBUF].into_iter().any(|opt| {
            // SAFETY: setsockopt on our own socket with a c_int option value.
            unsafe {
                libc::setsockopt(
                    socket.as_raw_fd(),
                    libc::SOL_SOCKET,
                    opt,
                    (&rcvbuf as *const libc::c_int).cast(),
                    std::mem::size_of::<libc::c_int>() as libc::socklen_t,
                ) == 0
            }
        });
        assert!(set);
        let addr = socket.local_addr().unwrap();
        let mut service = Service {
            rng: Rng::new(1),
            loss: LossProcess::new(cfg.loss.clone()),
            queue: TimerQueue::new(cfg.max_pending),
            cfg,
            socket,
            counts: Counts::default(),
        };
        let sender = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut datagram = Vec::new();
        for request_id in 0..300 {
            let id = BlockId {
                stream: 0,
                frame: 0,
                block: 0,
            };
            Request { id, request_id }.encode(&mut datagram);
            sender.send_to(&datagram, addr).unwrap();
        }
        let (mut buf, mut out) = (vec![0u8; RECV_BUFFER_BYTES], Vec::new());
        assert_eq!(
            service.read_all(&mut buf, &mut out),
            256,
            "one pass, then the timers"
        );
        // The rest (all 44 unless the kernel dropped some for want of buffer).
        let rest = service.read_all(&mut buf, &mut out);
        assert!((1..=44).contains(&rest), "{rest}");
        assert_eq!(service.read_all(&mut buf, &mut out), 0);
        assert_eq!(service.counts.received, 256 + rest as u64);
    }
}
