//! One client connection: read frames, serve or enqueue them, write replies.

use std::net::{Shutdown, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::pool::{Job, Pool};
use super::reply::{finish, Replier};
use super::{Handler, Outcome, ServerStats, StatsExtra};
use crate::wire::arrival::{self, StampedSocket};
use crate::wire::{frame_bytes, FrameError, FrameReader, RequestHeader, WireStatus};
use crate::{clock, stdio};

pub(super) struct Context<E: StatsExtra> {
    pub handler: Arc<dyn Handler<E>>,
    pub pool: Option<Arc<Pool>>,
    pub stats: Arc<ServerStats>,
    pub max_frame_bytes: usize,
}

pub(super) fn serve<E: StatsExtra>(stream: TcpStream, ctx: Arc<Context<E>>) {
    let peer = stream
        .peer_addr()
        .map(|a| a.to_string())
        .unwrap_or_else(|_| "?".into());
    if let Err(e) = serve_frames(&stream, &ctx) {
        if !matches!(e, FrameError::Closed) {
            ctx.stats.bad_frames.fetch_add(1, Ordering::Relaxed);
            stdio::log(&format!("closing connection from {peer}: {e}"));
        }
    }
    let _ = stream.shutdown(Shutdown::Both);
    ctx.stats.connections.fetch_sub(1, Ordering::Relaxed);
}

fn serve_frames<E: StatsExtra>(stream: &TcpStream, ctx: &Context<E>) -> Result<(), FrameError> {
    // The listener is non-blocking; this connection's reads and writes block.
    stream.set_nonblocking(false).map_err(FrameError::Io)?;
    stream.set_nodelay(true).map_err(FrameError::Io)?;
    arrival::enable_rx_timestamps(stream);
    let replier = Arc::new(Replier::new(stream.try_clone().map_err(FrameError::Io)?));
    let mut reader = FrameReader::new(ctx.max_frame_bytes);
    let mut src = StampedSocket(stream);
    let mut reply = Vec::new();
    loop {
        let Some((payload, read_stamp_ns)) = reader.read_frame_stamped(&mut src)? else {
            continue;
        };
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
                    &replier,
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
                        &replier,
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
