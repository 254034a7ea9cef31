//! post(user, room, text): a member of the room adds a message; the reply carries its id.
//! The text is stored exactly as sent (any bytes, NUL included).

use super::{ack, first_int, Result};
use crate::systems::chat::store::{Tx, Value};

pub fn post(tx: &mut dyn Tx, user: &str, room: u32, text: &[u8]) -> Result {
    let name = Value::Text(user.to_string());
    let room = Value::Int(room as i64);
    let member = first_int(
        tx,
        "SELECT COUNT(*) FROM members WHERE room = $1 AND name = $2",
        &[room.clone(), name.clone()],
    )?;
    if member != Some(1) {
        return Ok(ack(false));
    }
    let id = first_int(
        tx,
        "INSERT INTO messages(room, name, body) VALUES($1, $2, $3) RETURNING id",
        &[room, name, Value::Bytes(text.to_vec())],
    )?
    .ok_or("insert returned no id")?;
    let mut out = ack(true);
    out.extend_from_slice(&(id as u64).to_le_bytes());
    Ok(out)
}
