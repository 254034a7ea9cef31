//! The http target's judgement of an HTTP/2 response (`h2::Judge`): 2xx is ok, 4xx and 5xx
//! (and any other status) an error with its reason, the status in `flags`; the server time
//! from the Server-Timing header, as for HTTP/1.1.

use http::HeaderMap;

use super::h2::{Judge, Verdict};
use super::response::Reason;
use super::timing::{Split, TimingKeys};

pub(crate) struct HttpJudge {
    pub keys: TimingKeys,
}

impl Judge for HttpJudge {
    fn judge(
        &self,
        head: &http::response::Parts,
        _body_bytes: u64,
        _trailers: Option<&HeaderMap>,
    ) -> Verdict {
        let status = head.status.as_u16();
        let mut split = Split::default();
        for v in head.headers.get_all("server-timing") {
            self.keys.add(v.as_bytes(), &mut split);
        }
        let reason = Reason::of_status(status);
        Verdict {
            ok: reason.is_none(),
            flags: status,
            reason: reason.map_or(0, |r| r as u32),
            server: split.present.then_some((split.server_ns, split.detail_ns)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(status: u16, timing: &[&str]) -> http::response::Parts {
        let mut b = http::Response::builder().status(status);
        for t in timing {
            b = b.header("server-timing", *t);
        }
        b.body(()).unwrap().into_parts().0
    }

    #[test]
    fn statuses_and_server_timing() {
        let j = HttpJudge {
            keys: TimingKeys {
                server: vec!["app".into()],
                detail: Some("db".into()),
            },
        };
        let v = j.judge(&head(200, &["app;dur=2", "db;dur=1"]), 0, None);
        assert_eq!(
            v,
            Verdict {
                ok: true,
                flags: 200,
                reason: 0,
                server: Some((2_000_000, 1_000_000))
            }
        );
        let v = j.judge(&head(404, &[]), 0, None);
        assert_eq!(
            (v.ok, v.flags, v.reason, v.server),
            (false, 404, Reason::Status4xx as u32, None)
        );
        assert_eq!(j.judge(&head(503, &[]), 0, None).reason, Reason::Status5xx as u32);
        assert_eq!(
            j.judge(&head(302, &[]), 0, None).reason,
            Reason::StatusOther as u32
        );
    }
}
