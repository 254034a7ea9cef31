//! audit(client): how many times the database applied each write of this client, from the
//! append-only operation log. The client writes it next to its samples at the end of a
//! run, so "lost" and "applied twice" are counted against the database.

use super::{ack, Result};
use crate::systems::chat::store::{Tx, Value};

/// Rows one audit returns at most (14 bytes each: well inside a frame).
const MAX_AUDIT_ROWS: i64 = 1_000_000;

pub fn audit(tx: &mut dyn Tx, client: &str) -> Result {
    audit_at_most(tx, client, MAX_AUDIT_ROWS)
}

/// `audit` returning at most `max_rows` rows (the lowest request ids).
fn audit_at_most(tx: &mut dyn Tx, client: &str, max_rows: i64) -> Result {
    let rows = tx.rows(
        "SELECT request_id, op, COUNT(*) FROM oplog WHERE client = $1 \
         GROUP BY request_id, op ORDER BY request_id LIMIT $2",
        &[Value::Text(client.to_string()), Value::Int(max_rows)],
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::systems::chat::store::tests::sqlite_pool;
    use crate::wire::{DEFAULT_MAX_FRAME_BYTES, REPLY_HEADER_BYTES};

    /// Rows in an audit reply: ack u32, count u32, then 14 bytes a row.
    fn rows_in(reply: &[u8]) -> u32 {
        u32::from_le_bytes(reply[4..8].try_into().unwrap())
    }

    #[test]
    fn an_audit_returns_at_most_its_bound_of_rows() {
        let (pool, dir) = sqlite_pool("audit");
        pool.transaction(|tx| {
            for id in 1..=5 {
                tx.exec(
                    "INSERT INTO oplog(client, request_id, op, replica) VALUES($1, $2, 1, 0)",
                    &[Value::Text("c".into()), Value::Int(id)],
                )?;
            }
            Ok(())
        })
        .unwrap();
        let capped = pool.transaction(|tx| audit_at_most(tx, "c", 3)).unwrap();
        assert_eq!((rows_in(&capped), capped.len()), (3, 8 + 3 * 14));
        let all = pool.transaction(|tx| audit(tx, "c")).unwrap();
        assert_eq!(rows_in(&all), 5);
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn the_largest_audit_reply_fits_in_a_frame() {
        assert_eq!(MAX_AUDIT_ROWS, 1_000_000);
        let largest = REPLY_HEADER_BYTES + 8 + 14 * MAX_AUDIT_ROWS as usize;
        assert!(largest <= DEFAULT_MAX_FRAME_BYTES, "{largest} bytes");
    }
}
