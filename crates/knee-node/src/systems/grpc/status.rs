//! A call's outcome in gRPC's terms: the status codes, the `grpc-timeout` header, and the
//! verdict on a reply from its HTTP status, headers, body framing and trailers.
//!
//! A reply is OK when its HTTP status is 200, its content-type is `application/grpc`
//! (or `application/grpc+...`), its body is one whole message and its `grpc-status` (in
//! the trailers, or in the headers of a trailers-only reply) is 0. Anything else is an error
//! sample with its code (the `grpc_status` column) and its reason (`fail_reason`). A code
//! the server did not send is knee's, as gRPC's client libraries make them ("Status codes
//! and their use in gRPC", grpc/doc/statuscodes.md): a deadline is DEADLINE_EXCEEDED, a
//! connection that failed UNAVAILABLE, a reply that breaks the protocol INTERNAL, an HTTP
//! status other than 200 the code of gRPC's HTTP mapping (grpc/doc/http-grpc-status-mapping.md).

use super::frame::FrameError;
use crate::systems::http::response::Reason as HttpReason;

/// gRPC's status codes by name, in code order (0..=16).
pub const CODES: [&str; 17] = [
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
];
pub const OK: u16 = 0;
pub const CANCELLED: u16 = 1;
pub const UNKNOWN: u16 = 2;
pub const DEADLINE_EXCEEDED: u16 = 4;
pub const RESOURCE_EXHAUSTED: u16 = 8;
pub const UNIMPLEMENTED: u16 = 12;
pub const INTERNAL: u16 = 13;
pub const UNAVAILABLE: u16 = 14;
pub const PERMISSION_DENIED: u16 = 7;
pub const UNAUTHENTICATED: u16 = 16;

/// gRPC's own reasons for a failed call (the sample's `arg`), beside http's (1..=15, which
/// keep their meaning: a timeout, a refused connect, ...). Numbered apart, so that the
/// transport's reasons can grow without meeting them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum Reason {
    /// The server's `grpc-status` was not 0 (the code is in `grpc_status`).
    GrpcStatus = 32,
    /// The reply ended without a `grpc-status` (INTERNAL).
    GrpcNoStatus = 33,
    /// The HTTP status was not 200 (`grpc_status`: its code in gRPC's HTTP mapping).
    HttpStatus = 34,
    /// The reply's content-type is not `application/grpc` (UNKNOWN).
    NotGrpc = 35,
}

impl Reason {
    pub const ALL: [(&'static str, Reason); 4] = [
        ("grpc_status", Reason::GrpcStatus),
        ("grpc_no_status", Reason::GrpcNoStatus),
        ("http_status", Reason::HttpStatus),
        ("not_grpc", Reason::NotGrpc),
    ];
}

/// A call's verdict: its code (`grpc_status`) and, when it failed, why (`fail_reason`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub code: u16,
    /// 0: the call succeeded.
    pub reason: u32,
}

impl Verdict {
    pub fn ok(&self) -> bool {
        self.reason == 0
    }
    fn fail(code: u16, reason: u32) -> Verdict {
        Verdict { code, reason }
    }
}

/// The code a gRPC client library reports for a call that failed with http's (or
/// HTTP/2's) `reason`, no status having come from the server: a deadline is
/// DEADLINE_EXCEEDED, a connection that failed or went away UNAVAILABLE, a message over
/// the bound RESOURCE_EXHAUSTED, a call knee stopped CANCELLED, a reply that broke the
/// protocol INTERNAL.
pub fn code_of_transport(reason: u32) -> u16 {
    use HttpReason as R;
    let unavailable = [
        R::Connect,
        R::ConnectTimeout,
        R::Tls,
        R::Send,
        R::ClosedBeforeReply,
        R::ClosedMidReply,
        R::GoAway,
        R::Refused,
    ];
    match reason {
        0 => OK,
        r if r == R::Timeout as u32 => DEADLINE_EXCEEDED,
        r if r == R::Stopped as u32 => CANCELLED,
        r if r == R::MaxOutstanding as u32 || r == R::BodyTooLarge as u32 => RESOURCE_EXHAUSTED,
        r if unavailable.iter().any(|u| *u as u32 == r) => UNAVAILABLE,
        _ => INTERNAL,
    }
}

/// A failed call's code (`grpc_status`): the one its verdict gave (the server's status,
/// or the mapped HTTP status) for gRPC's own reasons, else the client library's code for
/// the reason (`code_of_transport`).
pub fn failure_code(reason: u32, code: u16) -> u16 {
    if Reason::ALL.iter().any(|(_, r)| *r as u32 == reason) {
        code
    } else {
        code_of_transport(reason)
    }
}

/// gRPC's code for an HTTP status other than 200 (http-grpc-status-mapping.md).
pub fn code_of_http(status: u16) -> u16 {
    match status {
        400 => INTERNAL,
        401 => UNAUTHENTICATED,
        403 => PERMISSION_DENIED,
        404 => UNIMPLEMENTED,
        429 | 502 | 503 | 504 => UNAVAILABLE,
        _ => UNKNOWN,
    }
}

/// The `grpc-timeout` header's value for a deadline `ns` from the send, in gRPC's 8 digits
/// (`TimeoutValue = 1*8DIGIT`) and a unit (n, u, m, S, M, H: nanoseconds to hours): the
/// coarsest unit that holds it exactly (`500m` for 500 ms), else the finest whose value,
/// rounded up, fits (as grpc-go writes it).
pub fn grpc_timeout(ns: u64) -> String {
    const MAX: u64 = 99_999_999;
    const UNITS: [(u64, char); 6] = [
        (1, 'n'),
        (1_000, 'u'),
        (1_000_000, 'm'),
        (1_000_000_000, 'S'),
        (60_000_000_000, 'M'),
        (3_600_000_000_000, 'H'),
    ];
    if ns == 0 {
        return "0n".into();
    }
    for (per, unit) in UNITS.iter().rev() {
        if ns.is_multiple_of(*per) && ns / per <= MAX {
            return format!("{}{unit}", ns / per);
        }
    }
    for (per, unit) in UNITS {
        let v = ns.div_ceil(per);
        if v <= MAX {
            return format!("{v}{unit}");
        }
    }
    format!("{MAX}H")
}

/// A reply's head and trailers, as the transport hands them over: `get(name)` is a field's
/// value (names in lower case, as HTTP/2 sends them).
pub trait Fields {
    fn get(&self, name: &str) -> Option<&[u8]>;
}

impl Fields for http::HeaderMap {
    fn get(&self, name: &str) -> Option<&[u8]> {
        http::HeaderMap::get(self, name).map(|v| v.as_bytes())
    }
}

/// The reply's content-type says gRPC; a reply without `grpc-encoding` sent no compressed
/// messages (checked in `frame.rs`).
pub fn is_grpc(headers: &dyn Fields) -> bool {
    headers.get("content-type").is_some_and(|v| {
        let v = std::str::from_utf8(v).unwrap_or("").trim().to_ascii_lowercase();
        v == "application/grpc" || v.starts_with("application/grpc+") || v.starts_with("application/grpc;")
    })
}

/// The verdict on a whole reply: its HTTP status and headers, its body's framing (the count
/// of whole messages, or what is wrong with it) and its trailers (None: a trailers-only
/// reply, whose status is in its headers).
pub fn judge(
    http_status: u16,
    headers: &dyn Fields,
    frames: Result<u32, FrameError>,
    trailers: Option<&dyn Fields>,
) -> Verdict {
    let status = trailers
        .and_then(|t| t.get("grpc-status"))
        .or_else(|| headers.get("grpc-status"));
    let code = status.map(parse_code);
    if http_status != 200 {
        // A proxy's answer, most likely: the status maps to a code unless the reply has one.
        return Verdict::fail(
            code.flatten().unwrap_or(code_of_http(http_status)),
            Reason::HttpStatus as u32,
        );
    }
    if !is_grpc(headers) {
        return Verdict::fail(UNKNOWN, Reason::NotGrpc as u32);
    }
    let code = match code {
        None => return Verdict::fail(INTERNAL, Reason::GrpcNoStatus as u32),
        // A status that is not a number 0..=16: the reply breaks the protocol.
        Some(None) => return Verdict::fail(INTERNAL, HttpReason::Malformed as u32),
        Some(Some(c)) => c,
    };
    if code != OK {
        return Verdict::fail(code, Reason::GrpcStatus as u32);
    }
    match frames {
        // A unary call's OK reply carries exactly one message.
        Ok(1) => Verdict { code: OK, reason: 0 },
        Ok(_) | Err(FrameError::Malformed) => Verdict::fail(INTERNAL, HttpReason::Malformed as u32),
        Err(FrameError::TooLarge) => Verdict::fail(RESOURCE_EXHAUSTED, HttpReason::BodyTooLarge as u32),
    }
}

/// `grpc-status`'s value as a code (None: not a known code).
fn parse_code(v: &[u8]) -> Option<u16> {
    let text = std::str::from_utf8(v).ok()?.trim();
    let code: u16 = text.parse().ok()?;
    (usize::from(code) < CODES.len() && text.bytes().all(|b| b.is_ascii_digit())).then_some(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Header fields as pairs.
    struct F(&'static [(&'static str, &'static str)]);

    impl Fields for F {
        fn get(&self, name: &str) -> Option<&[u8]> {
            self.0.iter().find(|(n, _)| *n == name).map(|(_, v)| v.as_bytes())
        }
    }

    const GRPC: &F = &F(&[("content-type", "application/grpc")]);

    #[test]
    fn grpc_timeout_fits_eight_digits() {
        assert_eq!(grpc_timeout(500_000_000), "500m");
        assert_eq!(grpc_timeout(5_000_000_000), "5S");
        assert_eq!(grpc_timeout(1_500_000), "1500u");
        assert_eq!(grpc_timeout(99_999_999), "99999999n");
        assert_eq!(grpc_timeout(100_000_001), "100001u");
        assert_eq!(grpc_timeout(3_600_000_000_000), "1H");
        assert_eq!(grpc_timeout(u64::MAX), "5124096H");
        for ns in [1u64, 999, 1_000_000, 123_456_789_012, 10u64.pow(17)] {
            let t = grpc_timeout(ns);
            let (digits, unit) = t.split_at(t.len() - 1);
            assert!(digits.len() <= 8 && "nuMSmH".contains(unit), "{t}");
        }
    }

    #[test]
    fn an_ok_reply_has_status_0_and_one_message() {
        let ok = &F(&[("grpc-status", "0")]);
        assert_eq!(judge(200, GRPC, Ok(1), Some(ok)), Verdict { code: 0, reason: 0 });
        assert!(judge(200, GRPC, Ok(1), Some(ok)).ok());
        let plus = &F(&[("content-type", "application/grpc+proto")]);
        assert!(judge(200, plus, Ok(1), Some(ok)).ok());
        // No message, or two, for a unary call: INTERNAL, malformed.
        for n in [0, 2] {
            assert_eq!(judge(200, GRPC, Ok(n), Some(ok)), Verdict { code: 13, reason: 1 });
        }
        assert_eq!(
            judge(200, GRPC, Err(FrameError::Malformed), Some(ok)),
            Verdict { code: 13, reason: 1 }
        );
        assert_eq!(
            judge(200, GRPC, Err(FrameError::TooLarge), Some(ok)),
            Verdict { code: 8, reason: 3 }
        );
    }

    #[test]
    fn a_server_status_is_the_code_with_its_reason() {
        let unavailable = &F(&[("grpc-status", "14"), ("grpc-message", "asked%20to%20fail")]);
        assert_eq!(
            judge(200, GRPC, Ok(0), Some(unavailable)),
            Verdict { code: 14, reason: 32 }
        );
        // Trailers-only: the status in the headers.
        let only = &F(&[("content-type", "application/grpc"), ("grpc-status", "4")]);
        assert_eq!(judge(200, only, Ok(0), None), Verdict { code: 4, reason: 32 });
        assert_eq!(judge(200, GRPC, Ok(1), None), Verdict { code: 13, reason: 33 });
        assert_eq!(
            judge(200, GRPC, Ok(1), Some(&F(&[]))),
            Verdict { code: 13, reason: 33 }
        );
        let junk = &F(&[("grpc-status", "99")]);
        assert_eq!(
            judge(200, GRPC, Ok(1), Some(junk)),
            Verdict { code: 13, reason: 1 }
        );
    }

    #[test]
    fn http_statuses_and_content_types() {
        let html = &F(&[("content-type", "text/html")]);
        assert_eq!(judge(503, html, Ok(0), None), Verdict { code: 14, reason: 34 });
        assert_eq!(judge(404, html, Ok(0), None), Verdict { code: 12, reason: 34 });
        assert_eq!(judge(500, html, Ok(0), None), Verdict { code: 2, reason: 34 });
        assert_eq!(judge(200, html, Ok(0), None), Verdict { code: 2, reason: 35 });
        assert_eq!(judge(200, &F(&[]), Ok(0), None), Verdict { code: 2, reason: 35 });
    }

    #[test]
    fn transport_failures_get_the_client_library_codes() {
        for (reason, code) in [
            (HttpReason::Timeout, DEADLINE_EXCEEDED),
            (HttpReason::Connect, UNAVAILABLE),
            (HttpReason::Stopped, CANCELLED),
            (HttpReason::Malformed, INTERNAL),
            (HttpReason::GoAway, UNAVAILABLE),
            (HttpReason::BodyTooLarge, RESOURCE_EXHAUSTED),
            (HttpReason::Reset, INTERNAL),
            (HttpReason::H2Protocol, INTERNAL),
            (HttpReason::Refused, UNAVAILABLE),
            (HttpReason::MaxOutstanding, RESOURCE_EXHAUSTED),
        ] {
            assert_eq!(code_of_transport(reason as u32), code, "{reason:?}");
        }
        assert_eq!(code_of_transport(0), OK);
        // The server's own status stays; a transport reason gets the library's code.
        assert_eq!(failure_code(Reason::GrpcStatus as u32, 5), 5);
        assert_eq!(failure_code(HttpReason::Timeout as u32, 0), DEADLINE_EXCEEDED);
    }
}
