//! audit(client): how many times the database applied each write of this client, from the
//! append-only operation log. The client writes it next to its samples at the end of a
//! run, so "lost" and "applied twice" are counted against the database.

use super::{ack, Result};
use crate::systems::chat::store::{Tx, Value};

/// Rows one audit returns at most (14 bytes each: well inside a frame).
const MAX_AUDIT_ROWS: i64 = 1_000_000;

pub fn audit(tx: &mut dyn Tx, client: &str) -> Result {
    let rows = tx.rows(
        "SELECT request_id, op, COUNT(*) FROM oplog WHERE client = $1 \
         GROUP BY request_id, op ORDER BY request_id LIMIT $2",
        &[Value::Text(client.to_string()), Value::Int(MAX_AUDIT_ROWS)],
    )?;
    let mut out = ack(true);
    out.extend_from_slice(&(rows.len() as u32).to_le_bytes());
    for row in rows {
        let [id, op, n] = row.as_slice() else {
            return Err("audit: short row".into());
        };
        out.extend_from_slice(&(id.int()? as u64).to_le_bytes());
        out.extend_from_slice(&(op.int()? as u16).to_le_bytes());
        out.extend_from_slice(&(n.int()? as u32).to_le_bytes());
    }
    Ok(out)
}
