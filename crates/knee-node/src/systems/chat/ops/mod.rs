//! The operations of chat, one file each, run inside one database transaction. `apply`
//! wraps a write in the deduplication step, so a retried request is applied once.
//!
//! The `dedup` table keeps, per client, the keys of its last `window` request ids (those
//! above its newest id minus `window`); older keys are pruned in the transaction that adds a
//! newer one. A request whose id is below that window is refused, never applied: its key
//! may have been pruned, so the table can no longer tell whether it was applied already.
//! Exactly-once therefore holds for every request id, pruned or not; a retry inside the
//! window gets its stored result, one outside it a refusal.

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

/// The integer in the first column of the first row `sql` gives (None: no row).
pub fn first_int(
    tx: &mut dyn Tx,
    sql: &'static str,
    params: &[Value],
) -> std::result::Result<Option<i64>, String> {
    let rows = tx.rows(sql, params)?;
    rows.first().and_then(|r| r.first()).map(Value::int).transpose()
}

/// What `apply` did with a request.
#[derive(Debug, PartialEq)]
pub enum Applied {
    /// Run now; the reply body before padding.
    Fresh(Vec<u8>),
    /// A retry of a request already applied: its stored result.
    Duplicate(Vec<u8>),
    /// Not applied: the id is `window` or more below the client's newest (`newest`).
    Stale { newest: u64 },
}

/// Runs one request in `tx`, deduplicated (writes) within the client's last `window` ids.
pub fn apply(
    tx: &mut dyn Tx,
    req: &Request,
    request_id: u64,
    replica: u32,
    window: u64,
) -> std::result::Result<Applied, String> {
    if !is_write(req.code()) {
        return run(tx, req).map(Applied::Fresh);
    }
    let id = request_id as i64; // as stored (BIGINT)
    let key = [Value::Text(req.client.clone()), Value::Int(id)];
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
        return Ok(Applied::Duplicate(stored.into_bytes()?));
    }
    // Checked after our key is in: a transaction that pruned this id committed a newer one
    // with it, so this read sees that newer id (PostgreSQL reads committed rows per statement).
    let window_i = i64::try_from(window).unwrap_or(i64::MAX);
    let newest = tx
        .rows("SELECT MAX(request_id) FROM dedup WHERE client = $1", &key[..1])?
        .pop()
        .and_then(|mut r| r.pop())
        .map(|v| v.int())
        .transpose()?
        .unwrap_or(id);
    if newest.saturating_sub(id) >= window_i {
        tx.exec("DELETE FROM dedup WHERE client = $1 AND request_id = $2", &key)?;
        return Ok(Applied::Stale {
            newest: newest as u64,
        });
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
    // The bound: this client's keys older than the window go (the primary key's index
    // makes this a range delete).
    tx.exec(
        "DELETE FROM dedup WHERE client = $1 AND request_id <= $2",
        &[key[0].clone(), Value::Int(id.saturating_sub(window_i))],
    )?;
    Ok(Applied::Fresh(result))
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
