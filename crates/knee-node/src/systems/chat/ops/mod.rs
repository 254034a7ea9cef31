//! The operations of chat, one file each, run inside one database transaction. `apply`
//! wraps a write in the deduplication step, so a retried request is applied once.

mod audit;
mod fetch;
mod join;
mod login;
mod logout;
mod post;

use super::codec::{Op, Request};
use super::store::{Tx, Value};
use super::{is_write, ACK_DONE, ACK_REFUSED};

/// The reply body before padding: `ack u32` then the operation's data.
pub type Result = std::result::Result<Vec<u8>, String>;

pub fn ack(done: bool) -> Vec<u8> {
    (if done { ACK_DONE } else { ACK_REFUSED }).to_le_bytes().to_vec()
}

/// Runs one request in `tx`; returns its result and whether it was a duplicate (a retry of
/// a request already applied, answered with the stored result).
pub fn apply(
    tx: &mut dyn Tx,
    req: &Request,
    request_id: u64,
    replica: u32,
) -> std::result::Result<(Vec<u8>, bool), String> {
    if !is_write(req.code()) {
        return run(tx, req).map(|r| (r, false));
    }
    let key = [Value::Text(req.client.clone()), Value::Int(request_id as i64)];
    // The key row first: a concurrent duplicate (two replicas that both think they are
    // primary) waits on it and then finds it taken.
    let fresh = tx.exec(
        "INSERT INTO dedup(client, request_id, result) VALUES($1, $2, $3) ON CONFLICT DO NOTHING",
        &[key[0].clone(), key[1].clone(), Value::Bytes(Vec::new())],
    )?;
    if fresh == 0 {
        let mut rows = tx.rows(
            "SELECT result FROM dedup WHERE client = $1 AND request_id = $2",
            &key,
        )?;
        let stored = rows.pop().and_then(|mut r| r.pop()).ok_or("dedup row vanished")?;
        return Ok((stored.into_bytes()?, true));
    }
    let result = run(tx, req)?;
    tx.exec(
        "UPDATE dedup SET result = $3 WHERE client = $1 AND request_id = $2",
        &[key[0].clone(), key[1].clone(), Value::Bytes(result.clone())],
    )?;
    // The audit trail: one row per application, deliberately without a uniqueness rule,
    // so an operation applied twice would show as two rows.
    tx.exec(
        "INSERT INTO oplog(client, request_id, op, replica) VALUES($1, $2, $3, $4)",
        &[
            key[0].clone(),
            key[1].clone(),
            Value::Int(req.code() as i64),
            Value::Int(replica as i64),
        ],
    )?;
    Ok((result, false))
}

fn run(tx: &mut dyn Tx, req: &Request) -> Result {
    match &req.op {
        Op::Login { user, password } => login::login(tx, user, password),
        Op::Logout { user, room } => logout::logout(tx, user, *room),
        Op::Join { user, room } => join::join(tx, user, *room),
        Op::Post { user, room, text } => post::post(tx, user, *room, text),
        Op::Fetch { room, since_id, max } => fetch::fetch(tx, *room, *since_id, *max),
        Op::Audit => audit::audit(tx, &req.client),
    }
}
