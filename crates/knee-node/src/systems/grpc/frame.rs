//! The reply's body as gRPC length-prefixed messages, checked from its first bytes and its
//! length: the body is counted, never kept (the reply message is counted, not decoded), so
//! the transport hands over its first `PREFIX_BYTES` and its byte count. A unary reply has
//! one message: its prefix's length must account for the whole body.

use super::message::PREFIX_BYTES;

/// What is wrong with a reply's framing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FrameError {
    /// A compressed flag other than 0 and 1, a compressed message when the reply named no
    /// `grpc-encoding`, or a body that ends inside its message (or inside the prefix).
    Malformed,
    /// A message longer than the bound.
    TooLarge,
}

/// The messages of a unary reply's body from its first bytes (`head`, up to
/// `PREFIX_BYTES` of them) and its length: 0 (an empty body), 1 (one whole message), 2
/// (one message and more bytes after it: at least two messages), or what is wrong.
pub fn unary_messages(
    head: &[u8],
    body_bytes: u64,
    max_message_bytes: u64,
    compression: bool,
) -> Result<u32, FrameError> {
    if body_bytes == 0 {
        return Ok(0);
    }
    let Some(prefix) = head
        .get(..PREFIX_BYTES)
        .filter(|_| body_bytes >= PREFIX_BYTES as u64)
    else {
        return Err(FrameError::Malformed);
    };
    match prefix[0] {
        0 => {}
        1 if compression => {}
        _ => return Err(FrameError::Malformed),
    }
    let len = u64::from(u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]));
    if len > max_message_bytes {
        return Err(FrameError::TooLarge);
    }
    let whole = PREFIX_BYTES as u64 + len;
    match body_bytes.cmp(&whole) {
        std::cmp::Ordering::Equal => Ok(1),
        std::cmp::Ordering::Greater => Ok(2),
        std::cmp::Ordering::Less => Err(FrameError::Malformed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_whole_message_none_or_more() {
        assert_eq!(unary_messages(&[0, 0, 0, 0, 3], 8, 100, false), Ok(1));
        assert_eq!(unary_messages(&[0, 0, 0, 0, 0], 5, 100, false), Ok(1));
        assert_eq!(unary_messages(&[], 0, 100, false), Ok(0));
        assert_eq!(unary_messages(&[0, 0, 0, 0, 3], 13, 100, false), Ok(2));
        assert_eq!(unary_messages(&[1, 0, 0, 0, 3], 8, 100, true), Ok(1));
    }

    #[test]
    fn bad_framing_is_malformed_or_too_large() {
        let m = Err(FrameError::Malformed);
        assert_eq!(unary_messages(&[0, 0, 0, 0, 3], 6, 100, false), m);
        assert_eq!(unary_messages(&[0, 0, 0], 3, 100, false), m);
        assert_eq!(unary_messages(&[0, 0, 0, 0, 0], 3, 100, false), m);
        assert_eq!(unary_messages(&[2, 0, 0, 0, 0], 5, 100, false), m);
        assert_eq!(unary_messages(&[1, 0, 0, 0, 0], 5, 100, false), m);
        assert_eq!(
            unary_messages(&[0, 0, 0, 1, 0], 261, 100, false),
            Err(FrameError::TooLarge)
        );
        assert_eq!(unary_messages(&[0, 255, 255, 255, 255], 9, u64::MAX, false), m);
    }
}
