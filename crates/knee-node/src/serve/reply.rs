//! The reply side of a request, shared by a connection's reader thread and the pool's
//! workers: its own module so that neither of those depends on the other.

use std::net::{Shutdown, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use super::limits;
use super::sendfile::send_file;
use super::{FileTail, Outcome, ServerStats};
use crate::stdio;
use crate::wire::{write_frame, ReplyHeader, WireStatus};

/// The write half of a connection, shared by its reader thread and the pool's workers.
///
/// Its outgoing buffer is one frame (`scratch`) plus the kernel's socket buffer: a client
/// that does not read its replies blocks the writer, which then stops taking requests (or
/// the pool's queue fills, bounded by `max_queue`), so memory stays bounded; after the
/// write timeout the connection is shut.
pub(super) struct Replier {
    stream: Mutex<(TcpStream, Vec<u8>)>,
    /// Set when a write timed out and the connection was shut for it.
    stalled: AtomicBool,
}

impl Replier {
    pub fn new(stream: TcpStream) -> Self {
        Replier {
            stream: Mutex::new((stream, Vec::new())),
            stalled: AtomicBool::new(false),
        }
    }

    /// Whether the connection was shut because its client stopped taking replies.
    pub fn stalled(&self) -> bool {
        self.stalled.load(Ordering::Relaxed)
    }

    /// A write that made no progress within the write timeout: the client does not read.
    /// Shut the connection, so that its reader ends it and later replies are not tried.
    fn stall(&self, stream: &TcpStream, stats: &ServerStats, e: &std::io::Error) {
        if self.stalled.swap(true, Ordering::Relaxed) {
            return;
        }
        stats.timed_out.fetch_add(1, Ordering::Relaxed);
        let peer = stream.peer_addr().map_or_else(|_| "?".into(), |a| a.to_string());
        limits::TIMED_OUT.log(|| {
            format!("closing connection from {peer}: replies not taken within write_timeout_ms ({e})")
        });
        let _ = stream.shutdown(Shutdown::Both);
    }

    /// Writes one reply frame, then its file tail, under one lock so that no other reply
    /// lands in between. A failed frame write means the client left; its reader sees that.
    /// A failed tail leaves the client short of bytes: the connection is shut, so that its
    /// reader ends it.
    pub fn send(&self, header: &ReplyHeader, body: &[u8], tail: Option<FileTail>, stats: &ServerStats) {
        let Ok(mut guard) = self.stream.lock() else { return };
        let (stream, scratch) = &mut *guard;
        if self.stalled() {
            return;
        }
        if let Err(e) = write_frame(stream, scratch, &[&header.encode(), body]) {
            if limits::is_timeout(&e) {
                self.stall(stream, stats, &e);
            }
            return;
        }
        stats.bytes_tx.fetch_add(scratch.len() as u64, Ordering::Relaxed);
        let Some(FileTail { mut file, size_bytes }) = tail else {
            return;
        };
        match send_file(stream, &mut file, size_bytes) {
            Ok(()) => {
                stats.bytes_tx.fetch_add(size_bytes, Ordering::Relaxed);
            }
            Err(e) if limits::is_timeout(&e) => self.stall(stream, stats, &e),
            Err(e) => {
                let peer = stream.peer_addr().map_or_else(|_| "?".into(), |a| a.to_string());
                stdio::log(&format!("closing connection from {peer}: sending a file: {e}"));
                let _ = stream.shutdown(Shutdown::Both);
            }
        }
    }
}

/// Counts a served request and writes its reply with the residence time and its parts.
#[allow(clippy::too_many_arguments)]
pub(super) fn finish(
    replier: &Replier,
    stats: &ServerStats,
    request_id: u64,
    outcome: Outcome,
    server_ns: u64,
    queue_ns: u64,
    service_ns: u64,
    body: &[u8],
) {
    stats.requests.fetch_add(1, Ordering::Relaxed);
    if outcome.status != WireStatus::Ok {
        stats.errors.fetch_add(1, Ordering::Relaxed);
    }
    let header = ReplyHeader {
        request_id,
        status: outcome.status as u16,
        flags: outcome.flags,
        server_ns,
        queue_ns,
        service_ns,
        detail_ns: outcome.detail_ns,
    };
    replier.send(&header, body, outcome.tail, stats);
}
