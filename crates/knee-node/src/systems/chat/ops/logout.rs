//! logout(user, room): marks the user logged out and takes it out of the room; when the
//! room's last user leaves, its messages are cleared (as in the report).

use super::{ack, first_int, Result};
use crate::systems::chat::store::{Tx, Value};

pub fn logout(tx: &mut dyn Tx, user: &str, room: u32) -> Result {
    let name = Value::Text(user.to_string());
    let room = Value::Int(room as i64);
    let changed = tx.exec(
        "UPDATE users SET logged_in = 0 WHERE name = $1 AND logged_in = 1",
        std::slice::from_ref(&name),
    )?;
    if changed == 0 {
        return Ok(ack(false)); // unknown or not logged in
    }
    tx.exec(
        "DELETE FROM members WHERE room = $1 AND name = $2",
        &[room.clone(), name],
    )?;
    let left = first_int(
        tx,
        "SELECT COUNT(*) FROM members WHERE room = $1",
        std::slice::from_ref(&room),
    )?;
    if left == Some(0) {
        tx.exec("DELETE FROM messages WHERE room = $1", &[room])?;
    }
    Ok(ack(true))
}
