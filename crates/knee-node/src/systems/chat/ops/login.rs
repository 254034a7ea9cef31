//! login(user, password): checks the password and marks the user logged in. A user seen
//! for the first time is registered with that password (the report's users were created
//! beforehand; here the first login does it, so a run needs no setup step).

use super::{ack, Result};
use crate::systems::chat::store::{Tx, Value};

pub fn login(tx: &mut dyn Tx, user: &str, password: &str) -> Result {
    let name = Value::Text(user.to_string());
    let rows = tx.rows(
        "SELECT password FROM users WHERE name = $1",
        std::slice::from_ref(&name),
    )?;
    match rows.into_iter().next().and_then(|r| r.into_iter().next()) {
        None => {
            tx.exec(
                "INSERT INTO users(name, password, logged_in, logins) VALUES($1, $2, 1, 1)",
                &[name, Value::Text(password.to_string())],
            )?;
            Ok(ack(true))
        }
        Some(Value::Text(stored)) if stored == password => {
            tx.exec(
                "UPDATE users SET logged_in = 1, logins = logins + 1 WHERE name = $1",
                &[name],
            )?;
            Ok(ack(true))
        }
        Some(_) => Ok(ack(false)),
    }
}
