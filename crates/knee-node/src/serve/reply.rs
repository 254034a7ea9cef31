//! The reply side of a request, shared by a connection's reader thread and the pool's
//! workers: its own module so that neither of those depends on the other.

use std::net::TcpStream;
use std::sync::atomic::Ordering;
use std::sync::Mutex;

use super::{Outcome, ServerStats};
use crate::wire::{write_frame, ReplyHeader, WireStatus};

/// The write half of a connection, shared by its reader thread and the pool's workers.
pub(super) struct Replier {
    stream: Mutex<(TcpStream, Vec<u8>)>,
}

impl Replier {
    pub fn new(stream: TcpStream) -> Self {
        Replier {
            stream: Mutex::new((stream, Vec::new())),
        }
    }

    /// Writes one reply frame. A failed write means the client left; its reader sees that.
    pub fn send(&self, header: &ReplyHeader, body: &[u8], stats: &ServerStats) {
        let Ok(mut guard) = self.stream.lock() else { return };
        let (stream, scratch) = &mut *guard;
        if write_frame(stream, scratch, &[&header.encode(), body]).is_ok() {
            stats.bytes_tx.fetch_add(scratch.len() as u64, Ordering::Relaxed);
        }
    }
}

/// Counts a served request and writes its reply with the residence time and its parts.
#[allow(clippy::too_many_arguments)]
pub(super) fn finish(
    replier: &Replier,
    stats: &ServerStats,
    request_id: u64,
    outcome: &Outcome,
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
    replier.send(&header, body, stats);
}
