//! The database behind chat: SQLite (a file, WAL mode) or PostgreSQL (a URL), behind one
//! small interface so each operation's SQL is written once.
//!
//! SQL is written with `$1`-style placeholders (PostgreSQL's); for SQLite they become `?1`.
//! Every value goes in as a bound parameter, never into the SQL text. The only identifier
//! built at run time is the PostgreSQL schema name, checked to be `[a-z0-9_]` first.

use std::collections::HashMap;
use std::time::Duration;

use serde::Deserialize;

/// Where the state lives.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DbConfig {
    /// SQLite database file (used when `postgres_url` is absent).
    #[serde(default)]
    pub sqlite_path: Option<String>,
    /// PostgreSQL connection URL, e.g. `postgresql://user@127.0.0.1:5432/db`.
    #[serde(default)]
    pub postgres_url: Option<String>,
    /// PostgreSQL schema holding this point's tables (a fresh one per point).
    #[serde(default = "default_schema")]
    pub postgres_schema: String,
}

pub(crate) fn default_schema() -> String {
    "knee_chat".into()
}

/// A value bound to or read from a query.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Int(i64),
    Text(String),
    Bytes(Vec<u8>),
    Null,
}

impl Value {
    pub fn int(&self) -> Result<i64, String> {
        match self {
            Value::Int(i) => Ok(*i),
            other => Err(format!("expected an integer column, got {other:?}")),
        }
    }
    pub fn into_text(self) -> Result<String, String> {
        match self {
            Value::Text(s) => Ok(s),
            other => Err(format!("expected a text column, got {other:?}")),
        }
    }
    pub fn into_bytes(self) -> Result<Vec<u8>, String> {
        match self {
            Value::Bytes(b) => Ok(b),
            other => Err(format!("expected a bytes column, got {other:?}")),
        }
    }
}

/// One open transaction; statements are constants (prepared once per connection).
pub trait Tx {
    /// Runs a statement; returns the rows it changed.
    fn exec(&mut self, sql: &'static str, params: &[Value]) -> Result<u64, String>;
    /// Runs a query; returns its rows.
    fn rows(&mut self, sql: &'static str, params: &[Value]) -> Result<Vec<Vec<Value>>, String>;
}

const SCHEMA_SQL: &str = "
CREATE TABLE IF NOT EXISTS users(name TEXT PRIMARY KEY, password TEXT NOT NULL,
    logged_in BIGINT NOT NULL DEFAULT 0, logins BIGINT NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS rooms(id BIGINT PRIMARY KEY);
CREATE TABLE IF NOT EXISTS members(room BIGINT NOT NULL, name TEXT NOT NULL,
    PRIMARY KEY(room, name));
CREATE TABLE IF NOT EXISTS messages(id INTEGER PRIMARY KEY AUTOINCREMENT,
    room BIGINT NOT NULL, name TEXT NOT NULL, body BLOB NOT NULL);
CREATE INDEX IF NOT EXISTS messages_room ON messages(room, id);
CREATE TABLE IF NOT EXISTS dedup(client TEXT NOT NULL, request_id BIGINT NOT NULL,
    result BLOB NOT NULL, PRIMARY KEY(client, request_id));
CREATE TABLE IF NOT EXISTS oplog(client TEXT NOT NULL, request_id BIGINT NOT NULL,
    op BIGINT NOT NULL, replica BIGINT NOT NULL);
CREATE INDEX IF NOT EXISTS oplog_client ON oplog(client, request_id);
CREATE TABLE IF NOT EXISTS replicas(id BIGINT PRIMARY KEY, beat BIGINT NOT NULL);
";

/// How long SQLite waits for another connection's write lock before failing.
const SQLITE_BUSY_TIMEOUT: Duration = Duration::from_secs(10);
/// PostgreSQL transactions aborted by a deadlock or serialization failure are retried.
const PG_RETRIES: usize = 3;

pub enum Store {
    Sqlite(rusqlite::Connection),
    Postgres {
        client: Box<postgres::Client>,
        statements: HashMap<&'static str, postgres::Statement>,
    },
}

impl Store {
    /// Opens a connection; `create` also creates the tables (idempotent).
    pub fn open(cfg: &DbConfig, create: bool) -> Result<Store, String> {
        match (&cfg.postgres_url, &cfg.sqlite_path) {
            (Some(url), _) => {
                let schema = &cfg.postgres_schema;
                if schema.is_empty()
                    || schema.len() > 63
                    || !schema
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
                {
                    return Err(format!("postgres_schema {schema:?}: use 1-63 of [a-z0-9_]"));
                }
                let mut client = postgres::Client::connect(url, postgres::NoTls)
                    .map_err(|e| format!("connecting to PostgreSQL: {e}"))?;
                // Checked above to be a plain identifier: safe to put in the SQL text.
                let mut setup = format!("SET search_path TO {schema};");
                if create {
                    let ddl = SCHEMA_SQL
                        .replace("BLOB", "BYTEA")
                        .replace("INTEGER PRIMARY KEY AUTOINCREMENT", "BIGSERIAL PRIMARY KEY");
                    setup = format!("CREATE SCHEMA IF NOT EXISTS {schema}; {setup} {ddl}");
                }
                client
                    .batch_execute(&setup)
                    .map_err(|e| format!("PostgreSQL setup: {e}"))?;
                Ok(Store::Postgres {
                    client: Box::new(client),
                    statements: HashMap::new(),
                })
            }
            (None, Some(path)) => {
                // The runner names a file in the point's scratch folder, made on demand.
                if let Some(dir) = std::path::Path::new(path).parent() {
                    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
                }
                let conn = rusqlite::Connection::open(path).map_err(|e| format!("opening {path}: {e}"))?;
                conn.busy_timeout(SQLITE_BUSY_TIMEOUT)
                    .map_err(|e| e.to_string())?;
                // WAL: readers do not block the writer; NORMAL sync survives a process crash
                // (the failure knee injects), not a power cut.
                let mode: String = conn
                    .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
                    .map_err(|e| format!("{path}: WAL mode: {e}"))?;
                if mode != "wal" {
                    return Err(format!("{path}: journal mode is {mode}, WAL needed"));
                }
                conn.execute_batch("PRAGMA synchronous=NORMAL;")
                    .map_err(|e| e.to_string())?;
                if create {
                    conn.execute_batch(SCHEMA_SQL)
                        .map_err(|e| format!("{path}: creating tables: {e}"))?;
                }
                Ok(Store::Sqlite(conn))
            }
            (None, None) => Err("give sqlite_path or postgres_url".into()),
        }
    }

    /// Bounds how long one statement on this connection may wait, on SQLite for another
    /// connection's write lock (instead of `SQLITE_BUSY_TIMEOUT`), on PostgreSQL in all
    /// (`statement_timeout`). A statement that would wait longer fails.
    pub fn limit_waits(&mut self, limit: Duration) -> Result<(), String> {
        match self {
            Store::Sqlite(conn) => conn.busy_timeout(limit).map_err(|e| e.to_string()),
            Store::Postgres { client, .. } => {
                let ms = limit.as_millis().max(1);
                // A number, formatted: no text from outside goes into the SQL.
                client
                    .batch_execute(&format!("SET statement_timeout = {ms}"))
                    .map_err(|e| format!("statement_timeout: {e}"))
            }
        }
    }

    /// Runs `f` in a transaction that only reads. On SQLite it takes no write lock (WAL
    /// readers never wait for the writer), so it answers while another connection holds
    /// the lock, even one of a stopped process.
    pub fn read<T>(&mut self, f: impl FnMut(&mut dyn Tx) -> Result<T, String>) -> Result<T, String> {
        match self {
            Store::Sqlite(conn) => sqlite_transaction(conn, rusqlite::TransactionBehavior::Deferred, f),
            Store::Postgres { .. } => self.transaction(f),
        }
    }

    /// Runs `f` in one transaction (a write transaction from its start on SQLite, so two
    /// writers never deadlock upgrading); commits if it returns Ok, rolls back otherwise.
    pub fn transaction<T>(
        &mut self,
        mut f: impl FnMut(&mut dyn Tx) -> Result<T, String>,
    ) -> Result<T, String> {
        match self {
            Store::Sqlite(conn) => sqlite_transaction(conn, rusqlite::TransactionBehavior::Immediate, f),
            Store::Postgres { client, statements } => {
                let mut attempt = 0;
                loop {
                    attempt += 1;
                    let tx = client.transaction().map_err(|e| format!("begin: {e}"))?;
                    let mut wrapped = PgTx {
                        tx,
                        statements,
                        last_error: None,
                    };
                    let result = f(&mut wrapped);
                    let retry = wrapped.last_error.as_ref().is_some_and(retryable);
                    match result {
                        Ok(out) => match wrapped.tx.commit() {
                            Ok(()) => return Ok(out),
                            Err(e) if retryable(&e) && attempt < PG_RETRIES => continue,
                            Err(e) => return Err(format!("commit: {e}")),
                        },
                        Err(_) if retry && attempt < PG_RETRIES => continue,
                        Err(e) => return Err(e),
                    }
                }
            }
        }
    }
}

fn retryable(e: &postgres::Error) -> bool {
    use postgres::error::SqlState;
    matches!(
        e.code(),
        Some(c) if *c == SqlState::T_R_SERIALIZATION_FAILURE || *c == SqlState::T_R_DEADLOCK_DETECTED
    )
}

struct SqliteTx<'c>(rusqlite::Transaction<'c>);

/// Runs `f` in one SQLite transaction begun as `behavior` says; commits if it returns Ok
/// (dropped, the transaction rolls back).
fn sqlite_transaction<T>(
    conn: &mut rusqlite::Connection,
    behavior: rusqlite::TransactionBehavior,
    mut f: impl FnMut(&mut dyn Tx) -> Result<T, String>,
) -> Result<T, String> {
    let tx = conn
        .transaction_with_behavior(behavior)
        .map_err(|e| format!("begin: {e}"))?;
    let mut wrapped = SqliteTx(tx);
    let out = f(&mut wrapped)?;
    wrapped.0.commit().map_err(|e| format!("commit: {e}"))?;
    Ok(out)
}

fn sqlite_sql(sql: &str) -> String {
    sql.replace('$', "?")
}

fn to_sqlite(v: &Value) -> rusqlite::types::Value {
    match v {
        Value::Int(i) => rusqlite::types::Value::Integer(*i),
        Value::Text(s) => rusqlite::types::Value::Text(s.clone()),
        Value::Bytes(b) => rusqlite::types::Value::Blob(b.clone()),
        Value::Null => rusqlite::types::Value::Null,
    }
}

impl Tx for SqliteTx<'_> {
    fn exec(&mut self, sql: &'static str, params: &[Value]) -> Result<u64, String> {
        let mut stmt = self
            .0
            .prepare_cached(&sqlite_sql(sql))
            .map_err(|e| e.to_string())?;
        let n = stmt
            .execute(rusqlite::params_from_iter(params.iter().map(to_sqlite)))
            .map_err(|e| e.to_string())?;
        Ok(n as u64)
    }

    fn rows(&mut self, sql: &'static str, params: &[Value]) -> Result<Vec<Vec<Value>>, String> {
        let mut stmt = self
            .0
            .prepare_cached(&sqlite_sql(sql))
            .map_err(|e| e.to_string())?;
        let columns = stmt.column_count();
        let mut rows = stmt
            .query(rusqlite::params_from_iter(params.iter().map(to_sqlite)))
            .map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        while let Some(row) = rows.next().map_err(|e| e.to_string())? {
            let mut values = Vec::with_capacity(columns);
            for i in 0..columns {
                let v: rusqlite::types::Value = row.get(i).map_err(|e| e.to_string())?;
                values.push(match v {
                    rusqlite::types::Value::Integer(i) => Value::Int(i),
                    rusqlite::types::Value::Text(s) => Value::Text(s),
                    rusqlite::types::Value::Blob(b) => Value::Bytes(b),
                    rusqlite::types::Value::Null => Value::Null,
                    rusqlite::types::Value::Real(r) => Value::Int(r as i64),
                });
            }
            out.push(values);
        }
        Ok(out)
    }
}

struct PgTx<'c, 's> {
    tx: postgres::Transaction<'c>,
    statements: &'s mut HashMap<&'static str, postgres::Statement>,
    /// Kept so the caller can tell a retryable abort from a real error.
    last_error: Option<postgres::Error>,
}

impl PgTx<'_, '_> {
    fn statement(&mut self, sql: &'static str) -> Result<postgres::Statement, String> {
        if let Some(s) = self.statements.get(sql) {
            return Ok(s.clone());
        }
        let s = self.tx.prepare(sql).map_err(|e| e.to_string())?;
        self.statements.insert(sql, s.clone());
        Ok(s)
    }

    fn fail(&mut self, e: postgres::Error) -> String {
        let msg = e.to_string();
        self.last_error = Some(e);
        msg
    }
}

fn pg_params(params: &[Value]) -> Vec<Box<dyn postgres::types::ToSql + Sync>> {
    params
        .iter()
        .map(|v| -> Box<dyn postgres::types::ToSql + Sync> {
            match v {
                Value::Int(i) => Box::new(*i),
                Value::Text(s) => Box::new(s.clone()),
                Value::Bytes(b) => Box::new(b.clone()),
                Value::Null => Box::new(None::<i64>),
            }
        })
        .collect()
}

impl Tx for PgTx<'_, '_> {
    fn exec(&mut self, sql: &'static str, params: &[Value]) -> Result<u64, String> {
        let stmt = self.statement(sql)?;
        let boxed = pg_params(params);
        let refs: Vec<&(dyn postgres::types::ToSql + Sync)> = boxed.iter().map(|b| b.as_ref()).collect();
        self.tx.execute(&stmt, &refs).map_err(|e| self.fail(e))
    }

    fn rows(&mut self, sql: &'static str, params: &[Value]) -> Result<Vec<Vec<Value>>, String> {
        use postgres::types::Type;
        let stmt = self.statement(sql)?;
        let boxed = pg_params(params);
        let refs: Vec<&(dyn postgres::types::ToSql + Sync)> = boxed.iter().map(|b| b.as_ref()).collect();
        let rows = self.tx.query(&stmt, &refs).map_err(|e| self.fail(e))?;
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            let mut values = Vec::with_capacity(row.len());
            for (i, col) in row.columns().iter().enumerate() {
                let t = col.type_();
                let v = if *t == Type::INT8 {
                    row.try_get::<_, Option<i64>>(i)
                        .map(|o| o.map_or(Value::Null, Value::Int))
                } else if *t == Type::INT4 {
                    row.try_get::<_, Option<i32>>(i)
                        .map(|o| o.map_or(Value::Null, |x| Value::Int(x as i64)))
                } else if *t == Type::BYTEA {
                    row.try_get::<_, Option<Vec<u8>>>(i)
                        .map(|o| o.map_or(Value::Null, Value::Bytes))
                } else {
                    row.try_get::<_, Option<String>>(i)
                        .map(|o| o.map_or(Value::Null, Value::Text))
                };
                values.push(v.map_err(|e| e.to_string())?);
            }
            out.push(values);
        }
        Ok(out)
    }
}

/// Idle connections kept for reuse, so a request does not pay for a connect.
pub struct StorePool {
    cfg: DbConfig,
    idle: std::sync::Mutex<Vec<Store>>,
}

/// Idle connections kept at most (more may be open while busy: one per serving thread).
const MAX_IDLE: usize = 64;

impl StorePool {
    pub fn new(cfg: DbConfig) -> Self {
        StorePool {
            cfg,
            idle: std::sync::Mutex::new(Vec::new()),
        }
    }

    /// Runs `f` in a transaction on a pooled connection. A connection whose transaction
    /// failed is dropped, not reused (it may be broken).
    pub fn transaction<T>(&self, f: impl FnMut(&mut dyn Tx) -> Result<T, String>) -> Result<T, String> {
        let taken = self.idle.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let mut store = match taken {
            Some(s) => s,
            None => Store::open(&self.cfg, false)?,
        };
        let out = store.transaction(f)?;
        keep_idle(
            &mut self.idle.lock().unwrap_or_else(|p| p.into_inner()),
            store,
            MAX_IDLE,
        );
        Ok(out)
    }
}

/// Keeps a connection for reuse unless `max_idle` are kept already (it is then closed).
fn keep_idle<S>(idle: &mut Vec<S>, store: S, max_idle: usize) {
    if idle.len() < max_idle {
        idle.push(store);
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A fresh SQLite database in the temp folder, its tables made.
    pub(crate) fn sqlite_pool(tag: &str) -> (StorePool, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("knee-chat-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let cfg = DbConfig {
            sqlite_path: Some(dir.join("chat.db").to_string_lossy().into_owned()),
            postgres_url: None,
            postgres_schema: default_schema(),
        };
        Store::open(&cfg, true).unwrap();
        (StorePool::new(cfg), dir)
    }

    #[test]
    fn at_most_64_idle_connections_are_kept() {
        assert_eq!(MAX_IDLE, 64);
        let mut idle = Vec::new();
        for i in 0..MAX_IDLE + 10 {
            keep_idle(&mut idle, i, MAX_IDLE);
        }
        assert_eq!(idle, (0..64).collect::<Vec<_>>(), "the 65th and later are closed");
    }

    #[test]
    fn a_pooled_connection_is_kept_and_reused() {
        let (pool, dir) = sqlite_pool("reuse");
        for _ in 0..3 {
            pool.transaction(|tx| tx.rows("SELECT 1", &[])).unwrap();
        }
        assert_eq!(pool.idle.lock().unwrap().len(), 1, "one connection, reused");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
