//! One client connection: read frames, serve or enqueue them, write replies.

use std::io;
use std::net::{Shutdown, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use super::limits;
use super::pool::{Job, Pool};
use super::reply::{finish, Replier};
use super::{Handler, Outcome, ServerStats, StatsExtra};
use crate::wire::arrival::{self, StampedSocket};
use crate::wire::{frame_bytes, FrameError, FrameReader, RequestHeader, StampedRead, WireStatus};
use crate::{clock, stdio};

pub(super) struct Context<E: StatsExtra> {
    pub handler: Arc<dyn Handler<E>>,
    pub pool: Option<Arc<Pool>>,
    pub stats: Arc<ServerStats>,
    pub max_frame_bytes: usize,
    pub read_timeout: Duration,
    pub write_timeout: Duration,
}

/// The connection's socket as the frame reader's source, with a deadline on each frame: a
/// frame must be whole within the read timeout of its first byte, however its bytes trickle
/// in (a slowloris client sends one a second, each read returns, and a plain socket
/// timeout never fires). Idle connections between frames have no deadline: they cost a
/// slot of `max_connections`, which bounds them.
struct Deadlined<'a> {
    socket: StampedSocket<'a>,
    /// When the first byte of the frame under way was read (None between frames).
    frame_started_ns: Option<u64>,
    timeout_ns: u64,
    expired: bool,
}

impl StampedRead for Deadlined<'_> {
    fn read_stamped(&mut self, buf: &mut [u8]) -> io::Result<(usize, Option<u64>)> {
        if let Some(started_ns) = self.frame_started_ns {
            if clock::now_ns().saturating_sub(started_ns) > self.timeout_ns {
                self.expired = true;
                return Err(io::Error::other(format!(
                    "a request frame took longer than read_timeout_ms = {} to arrive",
                    self.timeout_ns / 1_000_000
                )));
            }
        }
        let read = self.socket.read_stamped(buf)?;
        if read.0 > 0 && self.frame_started_ns.is_none() {
            self.frame_started_ns = Some(clock::now_ns());
        }
        Ok(read)
    }
}

pub(super) fn serve<E: StatsExtra>(stream: TcpStream, ctx: Arc<Context<E>>) {
    let peer = stream
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| "?".into());
    let mut src = Deadlined {
        socket: StampedSocket(&stream),
        frame_started_ns: None,
        timeout_ns: ctx.read_timeout.as_nanos() as u64,
        expired: false,
    };
    let (result, stalled) = match prepare(&stream, &ctx) {
        Ok(replier) => (serve_frames(&mut src, &replier, &ctx), replier.stalled()),
        Err(e) => (Err(FrameError::Io(e)), false),
    };
    match result {
        // A stalled reply shut the connection: its reader's end says nothing more.
        Err(FrameError::Closed) | Ok(()) => {}
        Err(_) if stalled => {}
        Err(e) if src.expired => {
            ctx.stats.timed_out.fetch_add(1, Ordering::Relaxed);
            limits::TIMED_OUT.log(|| format!("closing connection from {peer}: {e}"));
        }
        Err(e) => {
            ctx.stats.bad_frames.fetch_add(1, Ordering::Relaxed);
            stdio::log(&format!("closing connection from {peer}: {e}"));
        }
    }
    let _ = stream.shutdown(Shutdown::Both);
    ctx.stats.connections.fetch_sub(1, Ordering::Relaxed);
}

/// Sets the accepted socket up for this thread, and makes its replier.
fn prepare<E: StatsExtra>(stream: &TcpStream, ctx: &Context<E>) -> io::Result<Arc<Replier>> {
    // The listener is non-blocking; this connection's reads and writes block, each for at
    // most its timeout.
    stream.set_nonblocking(false)?;
    stream.set_nodelay(true)?;
    limits::set_timeouts(stream, ctx.read_timeout, ctx.write_timeout)?;
    arrival::enable_rx_timestamps(stream);
    Ok(Arc::new(Replier::new(stream.try_clone()?)))
}

fn serve_frames<E: StatsExtra>(
    src: &mut Deadlined<'_>,
    replier: &Arc<Replier>,
    ctx: &Context<E>,
) -> Result<(), FrameError> {
    let mut reader = FrameReader::new(ctx.max_frame_bytes);
    let mut reply = Vec::new();
    loop {
        let Some((payload, read_stamp_ns)) = reader.read_frame_stamped(src)? else {
            continue;
        };
        // The next frame's deadline starts with its first byte (bytes of it already read
        // with this one are counted from the next read: a few ms of slack at most).
        src.frame_started_ns = None;
        // A request arrives when the read that completed its frame found its bytes on the
        // host: the kernel's receive stamp of the latest segment that read consumed (the
        // read's own time without one), never later than now, when this thread takes the
        // frame up. Time spent in the socket buffer, or behind earlier frames of the same
        // read, is therefore queue, not network (docs/wire.md, "server_ns").
        let taken_ns = clock::now_ns();
        let arrived_ns = read_stamp_ns.map_or(taken_ns, |t| t.min(taken_ns));
        ctx.stats
            .bytes_rx
            .fetch_add(frame_bytes(payload.len()) as u64, Ordering::Relaxed);
        let Some((header, body)) = RequestHeader::decode(payload) else {
            return Err(FrameError::Malformed(format!(
                "{} bytes is shorter than a request header",
                payload.len()
            )));
        };
        match &ctx.pool {
            None => {
                reply.clear();
                let outcome = ctx.handler.handle_request(&header, body, &mut reply);
                let done_ns = clock::now_ns();
                finish(
                    replier,
                    &ctx.stats,
                    header.request_id,
                    outcome,
                    done_ns - arrived_ns,
                    taken_ns - arrived_ns,
                    done_ns - taken_ns,
                    &reply,
                );
            }
            Some(pool) => {
                let job = Job {
                    replier: replier.clone(),
                    header,
                    body: body.to_vec(),
                    arrived_ns,
                };
                if let Err(job) = pool.push(job) {
                    ctx.stats.overloaded.fetch_add(1, Ordering::Relaxed);
                    let outcome = Outcome::with_status(WireStatus::Overloaded);
                    let server_ns = clock::now_ns() - arrived_ns;
                    finish(
                        replier,
                        &ctx.stats,
                        job.header.request_id,
                        outcome,
                        server_ns,
                        server_ns,
                        0,
                        &[],
                    );
                }
            }
        }
    }
}
