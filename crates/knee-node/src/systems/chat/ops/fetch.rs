//! fetch(room, since_id, max): the room's messages with an id above `since_id`, oldest
//! first, at most `max` (itself at most `codec::MAX_FETCH`).

use super::{ack, Result};
use crate::systems::chat::store::{Tx, Value};
use crate::wire::body::{put_bytes32, put_str16};

pub fn fetch(tx: &mut dyn Tx, room: u32, since_id: u64, max: u32) -> Result {
    let rows = tx.rows(
        "SELECT id, name, body FROM messages WHERE room = $1 AND id > $2 ORDER BY id LIMIT $3",
        &[
            Value::Int(room as i64),
            Value::Int(since_id.min(i64::MAX as u64) as i64),
            Value::Int(max as i64),
        ],
    )?;
    let mut out = ack(true);
    out.extend_from_slice(&(rows.len() as u32).to_le_bytes());
    for row in rows {
        let mut it = row.into_iter();
        let (Some(id), Some(name), Some(body)) = (it.next(), it.next(), it.next()) else {
            return Err("fetch: short row".into());
        };
        out.extend_from_slice(&(id.int()? as u64).to_le_bytes());
        put_str16(&mut out, &name.into_text()?);
        put_bytes32(&mut out, &body.into_bytes()?);
    }
    Ok(out)
}
