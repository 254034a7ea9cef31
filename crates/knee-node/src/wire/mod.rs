//! The wire protocol shared by every TCP system of knee.
//!
//! A frame is a little-endian `u32` length followed by that many bytes of payload. A request
//! payload starts with a [`RequestHeader`] (request id, operation, flags), a reply payload with
//! a [`ReplyHeader`] (request id, status, flags, and the server's residence time in ns with its
//! parts). The rest of the payload is the operation's body, defined by each system.
//!
//! Limits: a frame longer than the reader's `max_frame_bytes` is refused before any of it is
//! buffered, and the connection is closed with a logged reason (see `docs/wire.md`).

pub mod arrival;
pub mod body;
mod frame;
mod header;

pub use body::BodyReader;
pub use frame::{write_frame, FrameError, FrameReader, StampedRead, DEFAULT_MAX_FRAME_BYTES, LENGTH_BYTES};
pub use header::{ReplyHeader, RequestHeader, WireStatus, REPLY_HEADER_BYTES, REQUEST_HEADER_BYTES};

/// Bytes on the wire of a frame carrying `payload_bytes`: the length prefix and the payload.
pub fn frame_bytes(payload_bytes: usize) -> usize {
    LENGTH_BYTES + payload_bytes
}

/// Bytes on the wire of a request frame with a body of `body_bytes`.
pub fn request_frame_bytes(body_bytes: usize) -> usize {
    frame_bytes(REQUEST_HEADER_BYTES + body_bytes)
}
