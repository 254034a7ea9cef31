//! `knee-node load grpc`: the grpc target's client role on the load harness, on the http
//! system's HTTP/2 engine (`http/h2`): h2c by prior knowledge for `http://` (and a bare
//! `HOST:PORT`), TLS with ALPN `h2` (no fallback: gRPC needs HTTP/2) for `https://`. The
//! config is parsed and the call built (proto compiled, message encoded) before anything
//! else, so a mistake fails the node in one line before the start; then the connections
//! are made. Each reply is judged by [`GrpcJudge`] (`status.rs`); a call that failed
//! without a status gets the code a gRPC client library would give.

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method};

use super::config::{Call, GrpcConfig};
use super::frame::unary_messages;
use super::message::PREFIX_BYTES;
use super::status;
use crate::load::harness::{ClientRole, Plan, Role, RunContext};
use crate::load::recorder::Sample;
use crate::systems::http::done::HttpDone;
use crate::systems::http::h2::{run_h2, H2Options, H2Pool, H2Request, H2Setup, H2Table, Judge, Verdict};
use crate::systems::http::response::Reason as HttpReason;
use crate::systems::http::tls::Tls;

/// A reply's verdict in gRPC's terms.
pub(crate) struct GrpcJudge {
    pub max_reply_bytes: u64,
    /// The calls' deadline from their send.
    pub timeout_ns: u64,
}

impl Judge for GrpcJudge {
    fn judge(&self, head: &http::response::Parts, body_bytes: u64, trailers: Option<&HeaderMap>) -> Verdict {
        self.judge_body(head, &[], body_bytes, trailers)
    }

    fn judge_body(
        &self,
        head: &http::response::Parts,
        body_head: &[u8],
        body_bytes: u64,
        trailers: Option<&HeaderMap>,
    ) -> Verdict {
        let compression = head.headers.contains_key("grpc-encoding");
        let frames = unary_messages(body_head, body_bytes, self.max_reply_bytes, compression);
        let v = status::judge(
            head.status.as_u16(),
            &head.headers,
            frames,
            trailers.map(|t| t as &dyn status::Fields),
        );
        Verdict {
            ok: v.ok(),
            flags: v.code,
            reason: v.reason,
            server: None,
        }
    }

    fn failure_flags(&self, s: &Sample) -> u16 {
        // A RST_STREAM at or after the deadline: the server cancelled the call for it
        // (grpc-go's does), and grpc-go's client says DEADLINE_EXCEEDED, as knee does.
        let reset = s.arg == HttpReason::Reset as u32;
        if reset && s.sent_ns > 0 && s.received_ns >= s.sent_ns.saturating_add(self.timeout_ns) {
            return status::DEADLINE_EXCEEDED;
        }
        status::failure_code(s.arg, s.flags)
    }
}

pub struct GrpcClient {
    cfg: GrpcConfig,
    setup: Option<(H2Table, H2Pool)>,
}

pub fn role(config: &serde_json::Value) -> Result<Box<dyn ClientRole>, String> {
    let cfg = GrpcConfig::parse(config).map_err(|e| format!("load config: {e}"))?;
    let table = table(&cfg.call)?;
    let addr = cfg.target.socket_addr(&cfg.tcp.target)?;
    let tls = match cfg.target.tls {
        true => Some(Tls::with(
            cfg.driver.tls_insecure,
            cfg.driver.tls_ca_file.as_deref(),
            true,
            &cfg.target.host,
            &[b"h2"],
        )?),
        false => None,
    };
    let setup = H2Setup {
        addr,
        authority: cfg.target.authority.clone(),
        tls,
        may_fall_back: false,
        connections: cfg.tcp.connections,
        timeout_ms: cfg.load.timeout_ms,
        options: H2Options {
            // The reply's message and its prefix; a larger body fails the call.
            max_body_bytes: cfg.driver.max_reply_bytes + PREFIX_BYTES as u64,
            ..H2Options::default()
        },
    };
    let pool = H2Pool::open(setup)?.ok_or("the server did not choose h2 by ALPN")?;
    Ok(Box::new(GrpcClient {
        cfg,
        setup: Some((table, pool)),
    }))
}

/// The one call as the engine's table: POST to its path with its headers and body.
fn table(call: &Call) -> Result<H2Table, String> {
    let mut headers = Vec::with_capacity(call.headers.len());
    for (name, value) in &call.headers {
        let n = HeaderName::from_bytes(name.as_bytes()).map_err(|e| format!("metadata {name}: {e}"))?;
        let v = HeaderValue::from_str(value).map_err(|e| format!("metadata {name}: {e}"))?;
        headers.push((n, v));
    }
    let request = H2Request {
        method: Method::POST,
        path: call.path.clone(),
        headers,
        body: Bytes::from(call.body.clone()),
    };
    H2Table::new(vec![(1.0, vec![request])])
}

impl Role for GrpcClient {
    type Progress = crate::events::NoExtra;
    type Done = HttpDone;

    fn plan(&self) -> Plan {
        self.cfg.load.plan_by_schedule()
    }

    fn run(&mut self, ctx: &RunContext) -> Result<HttpDone, String> {
        let (table, pool) = self.setup.take().ok_or("the grpc role runs once")?;
        let judge = GrpcJudge {
            max_reply_bytes: self.cfg.driver.max_reply_bytes,
            timeout_ns: (self.cfg.load.timeout_ms * 1e6) as u64,
        };
        let d = run_h2(pool, &self.cfg.load, table, &judge, ctx);
        let connections = self.cfg.tcp.connections as u64;
        Ok(d.with_streams_per_conn(d.server_max_streams, connections))
    }
}
