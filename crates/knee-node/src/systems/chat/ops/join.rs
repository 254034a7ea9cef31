//! join(user, room): a logged-in user enters a room (created on first use).

use super::{ack, first_int, Result};
use crate::systems::chat::store::{Tx, Value};

pub fn join(tx: &mut dyn Tx, user: &str, room: u32) -> Result {
    let name = Value::Text(user.to_string());
    let room = Value::Int(room as i64);
    let logged_in = first_int(
        tx,
        "SELECT logged_in FROM users WHERE name = $1",
        std::slice::from_ref(&name),
    )? == Some(1);
    if !logged_in {
        return Ok(ack(false));
    }
    tx.exec(
        "INSERT INTO rooms(id) VALUES($1) ON CONFLICT DO NOTHING",
        std::slice::from_ref(&room),
    )?;
    tx.exec(
        "INSERT INTO members(room, name) VALUES($1, $2) ON CONFLICT DO NOTHING",
        &[room, name],
    )?;
    Ok(ack(true))
}
