//! The end-of-run audit: for each client of this node, the database's count of
//! applications of each write, asked of the primary (with failover) and written as CSV
//! `client,request_id,op,applied` (client = the sample's client index).

use std::fmt::Write as _;

use super::config::ChatLoadConfig;
use super::link::Link;
use super::session::Session;
use crate::load::harness::RunContext;
use crate::systems::chat::codec::{Op, Request};
use crate::systems::chat::OP_AUDIT;
use crate::wire::BodyReader;
use crate::wire::WireStatus;

/// Request ids of audits, far from the clients' own (1, 2, ...).
const AUDIT_ID_BASE: u64 = 1 << 62;

/// Returns the number of rows written.
pub fn write(cfg: &ChatLoadConfig, mut link: Link, ctx: &RunContext) -> Result<usize, String> {
    let mut csv = String::from("client,request_id,op,applied\n");
    let mut rows = 0;
    for index in 0..cfg.clients {
        let client = Session::new(&cfg.driver(), index).client().to_string();
        let mut body = Vec::new();
        Request {
            client: client.clone(),
            reply_bytes: 0,
            op: Op::Audit,
        }
        .encode(&mut body);
        let out = link.call(ctx, AUDIT_ID_BASE + index as u64, OP_AUDIT, &body, |_, _| {});
        let (h, reply, _) = out.reply.map_err(|s| format!("{client}: no answer ({s:?})"))?;
        if h.status != WireStatus::Ok as u16 {
            return Err(format!("{client}: status {}", h.status));
        }
        let mut r = BodyReader::new(&reply);
        r.u32("ack")?;
        for _ in 0..r.u32("n")? {
            let (id, op, n) = (r.u64("id")?, r.u16("op")?, r.u32("applied")?);
            let _ = writeln!(csv, "{index},{id},{op},{n}");
            rows += 1;
        }
    }
    let path = cfg.audit_path();
    std::fs::write(&path, csv).map_err(|e| format!("writing {path}: {e}"))?;
    Ok(rows)
}
