//! The report's baseline index: SQLite behind one global lock (one connection in a Mutex,
//! so every operation, read or write, waits for the one before it).

use std::sync::Mutex;

use rusqlite::{params, Connection};

use super::codec::{Entry, MAX_HOLDERS};
use super::index::{Index, MAX_ENTRIES};

pub struct SqliteIndex {
    db: Mutex<Db>,
}

struct Db {
    conn: Connection,
    /// Rows, kept here rather than counted per register.
    rows: usize,
    max_rows: usize,
}

impl SqliteIndex {
    /// Opens (creating) the database at `path`, or in memory for ":memory:". SQLite's
    /// defaults are kept (rollback journal, synchronous = FULL): the baseline as the report
    /// ran it, where every update is a durable transaction.
    pub fn open(path: &str, max_entries: usize) -> Result<Self, String> {
        if let Some(dir) = std::path::Path::new(path)
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
        {
            std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        }
        let conn = if path == ":memory:" {
            Connection::open_in_memory()
        } else {
            Connection::open(path)
        }
        .map_err(|e| format!("opening the index database {path}: {e}"))?;
        conn.execute_batch(
            "DROP TABLE IF EXISTS files;
             CREATE TABLE files (name TEXT NOT NULL, peer TEXT NOT NULL, size INTEGER NOT NULL,
                                 checksum INTEGER NOT NULL, PRIMARY KEY (name, peer));",
        )
        .map_err(|e| format!("creating the index table: {e}"))?;
        Ok(SqliteIndex {
            db: Mutex::new(Db {
                conn,
                rows: 0,
                max_rows: max_entries.min(MAX_ENTRIES),
            }),
        })
    }
}

fn sql(e: rusqlite::Error) -> String {
    format!("database: {e}")
}

impl Index for SqliteIndex {
    fn register(&self, e: Entry) -> Result<(), String> {
        let mut db = self.db.lock().unwrap_or_else(|p| p.into_inner());
        // Names and peers go in as bound parameters, never into the SQL text. An update
        // first, an insert if there was nothing to update: the row count stays exact.
        let (size, checksum) = (e.size_bytes as i64, e.checksum as i64);
        let updated = db
            .conn
            .prepare_cached("UPDATE files SET size = ?3, checksum = ?4 WHERE name = ?1 AND peer = ?2")
            .and_then(|mut s| s.execute(params![e.name, e.peer, size, checksum]))
            .map_err(sql)?;
        if updated > 0 {
            return Ok(());
        }
        if db.rows >= db.max_rows {
            return Err(format!("index full ({} entries)", db.max_rows));
        }
        db.conn
            .prepare_cached("INSERT INTO files (name, peer, size, checksum) VALUES (?1, ?2, ?3, ?4)")
            .and_then(|mut s| s.execute(params![e.name, e.peer, size, checksum]))
            .map_err(sql)?;
        db.rows += 1;
        Ok(())
    }

    fn unregister(&self, peer: &str, name: &str) -> Result<bool, String> {
        let mut db = self.db.lock().unwrap_or_else(|p| p.into_inner());
        let removed = db
            .conn
            .prepare_cached("DELETE FROM files WHERE name = ?1 AND peer = ?2")
            .and_then(|mut s| s.execute(params![name, peer]))
            .map_err(sql)?;
        db.rows = db.rows.saturating_sub(removed);
        Ok(removed > 0)
    }

    fn search(&self, name: &str) -> Result<Vec<Entry>, String> {
        let db = self.db.lock().unwrap_or_else(|p| p.into_inner());
        let mut stmt = db
            .conn
            .prepare_cached("SELECT peer, size, checksum FROM files WHERE name = ?1 LIMIT ?2")
            .map_err(sql)?;
        let rows = stmt
            .query_map(params![name, MAX_HOLDERS as i64], |r| {
                Ok(Entry {
                    peer: r.get(0)?,
                    name: name.to_string(),
                    size_bytes: r.get::<_, i64>(1)? as u64,
                    checksum: r.get::<_, i64>(2)? as u64,
                })
            })
            .map_err(sql)?;
        rows.collect::<Result<Vec<_>, _>>().map_err(sql)
    }

    fn entry_count(&self) -> usize {
        self.db.lock().unwrap_or_else(|p| p.into_inner()).rows
    }
}

#[cfg(test)]
mod tests {
    use super::super::index::tests::{bounded, contract};
    use super::*;

    #[test]
    fn sqlite_index_keeps_the_contract_and_treats_quotes_as_data() {
        let index = SqliteIndex::open(":memory:", MAX_ENTRIES).unwrap();
        contract(&index);
        let mut e = super::super::index::tests::entry("a:1", "x'); DROP TABLE files; --");
        index.register(e.clone()).unwrap();
        e.checksum = 7;
        index.register(e.clone()).unwrap();
        assert_eq!(index.search(&e.name).unwrap(), vec![e]);
    }

    #[test]
    fn sqlite_index_refuses_past_its_bound_and_replaces_within_it() {
        bounded(&SqliteIndex::open(":memory:", 3).unwrap());
    }
}
