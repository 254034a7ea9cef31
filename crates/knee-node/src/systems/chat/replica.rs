//! The fault detector and the primary's election, through the shared database.
//!
//! Every `heartbeat_ms` each replica increments its own counter in the `replicas` table and
//! reads everyone's. A replica whose counter has not moved for `failure_timeout_ms` (by this
//! replica's own clock: no clock is shared) is suspected dead. The primary is the
//! lowest-numbered replica not suspected; a replica counts itself alive while its own
//! heartbeats succeed. Heartbeats go through the database rather than replica-to-replica
//! sockets because the database is where the state lives: a replica that cannot reach it
//! cannot serve, so "alive" means "alive and connected to the state".
//!
//! A heartbeat waits at most one period for the database: on SQLite a replica frozen
//! mid-transaction holds the one write lock and stops every heartbeat, and a detector
//! waiting behind it would keep its last view, blind, for the whole freeze. A failed
//! heartbeat is followed by a read (no write lock needed): others' counters that moved
//! show a contended but live database; none moving is a stall, no evidence against
//! anyone, and a stall of `failure_timeout_ms` cuts the replica off (view UNKNOWN).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::store::{DbConfig, Store, Value};
use crate::events::{self, Primary};
use crate::{clock, stdio};

/// No primary is known (this replica cannot reach the database).
pub const UNKNOWN: u32 = u32::MAX;

/// What this replica believes about who is primary; read on every request.
pub struct View {
    pub me: u32,
    primary: AtomicU32,
}

impl View {
    pub fn primary(&self) -> u32 {
        self.primary.load(Ordering::Relaxed)
    }
    pub fn is_primary(&self) -> bool {
        self.primary() == self.me
    }
}

struct Detector {
    me: u32,
    timeout_ns: u64,
    /// Per replica: its last counter and when (our clock) we saw it change.
    seen: HashMap<u32, (i64, u64)>,
    /// When we last saw the database make progress: our heartbeat went in, or another
    /// replica's counter had moved.
    last_progress_ns: u64,
    /// Rounds in a row in which we saw no progress (nothing seen meanwhile is evidence).
    stalled: u64,
    /// Our own heartbeats failed in a row (for the log).
    failed: u64,
}

impl Detector {
    fn new(me: u32, timeout_ns: u64) -> Self {
        Detector {
            me,
            timeout_ns,
            seen: HashMap::new(),
            last_progress_ns: clock::now_ns(),
            stalled: 0,
            failed: 0,
        }
    }

    /// One round: increments our counter, reads everyone's and returns who is primary.
    ///
    /// If our heartbeat fails (the write lock held longer than the connection may wait, or
    /// the database unreachable), the counters are read anyway (a read needs no write lock):
    /// another replica's counter that moved shows the database alive and only the lock
    /// contended, and the round counts as usual. A round that sees no counter move is no
    /// evidence at all (what stopped us may have stopped the others: on SQLite, a replica
    /// frozen while holding the one write lock stops every heartbeat): it changes nothing
    /// and returns an error, and the stretch of such rounds is not counted against anyone.
    fn beat(&mut self, store: &mut Store) -> Result<u32, String> {
        let me = Value::Int(self.me as i64);
        const READ: &str = "SELECT id, beat FROM replicas";
        let beat = store.transaction(|tx| {
            tx.exec(
                "INSERT INTO replicas(id, beat) VALUES($1, 1) \
                 ON CONFLICT(id) DO UPDATE SET beat = replicas.beat + 1",
                std::slice::from_ref(&me),
            )?;
            tx.rows(READ, &[])
        });
        let rows = match beat {
            Ok(rows) => {
                if self.failed > 0 {
                    stdio::log(&format!("heartbeat ok again, after {} failed", self.failed));
                    self.failed = 0;
                }
                rows
            }
            Err(e) => {
                if self.failed == 0 {
                    stdio::log(&format!("heartbeat failed: {e}"));
                }
                self.failed += 1;
                let moved = |rows: &Vec<Vec<Value>>| {
                    rows.iter().any(|row| match row.as_slice() {
                        [Value::Int(id), Value::Int(beat)] => {
                            self.seen.get(&(*id as u32)).is_none_or(|(b, _)| b != beat)
                        }
                        _ => false,
                    })
                };
                match store.read(|tx| tx.rows(READ, &[])) {
                    Ok(rows) if moved(&rows) => rows,
                    Ok(_) => {
                        self.stalled += 1;
                        return Err(format!("{e}; no replica's heartbeat went in either"));
                    }
                    Err(read) => {
                        self.stalled += 1;
                        return Err(format!("{e}; reading: {read}"));
                    }
                }
            }
        };
        let now = clock::now_ns();
        if self.stalled > 0 {
            // Nothing moved since `last_progress_ns`, ours included: the silence of that
            // stretch is no evidence. The silence seen before it still counts.
            let gap = now - self.last_progress_ns;
            for (_, changed_ns) in self.seen.values_mut() {
                *changed_ns += gap;
            }
            self.stalled = 0;
        }
        self.last_progress_ns = now;
        for row in rows {
            let [id, beat] = row.as_slice() else {
                return Err("replicas: short row".into());
            };
            let (id, beat) = (id.int()? as u32, beat.int()?);
            let entry = self.seen.entry(id).or_insert((beat, now));
            if entry.0 != beat {
                *entry = (beat, now);
            }
        }
        let live = |(id, (_, changed_ns)): (&u32, &(i64, u64))| {
            (*id == self.me || now - changed_ns < self.timeout_ns).then_some(*id)
        };
        Ok(self.seen.iter().filter_map(live).fold(self.me, u32::min))
    }

    /// Cut off from the state: the database made no progress we could see (no heartbeat
    /// of ours or anyone's went in) for the failure timeout.
    fn cut_off(&self) -> bool {
        clock::now_ns() - self.last_progress_ns > self.timeout_ns
    }
}

/// Bounds on the detector's timing, so a typo cannot make it spin or never notice.
const MIN_PERIOD_MS: u64 = 5;
const MAX_PERIOD_MS: u64 = 60_000;

/// Beats once (so the view is set before the replica reports ready), then keeps beating on
/// its own thread and connection for the life of the process.
pub fn start(
    me: u32,
    heartbeat_ms: u64,
    failure_timeout_ms: u64,
    db: &DbConfig,
) -> Result<Arc<View>, String> {
    if !(MIN_PERIOD_MS..=MAX_PERIOD_MS).contains(&heartbeat_ms) || failure_timeout_ms <= heartbeat_ms {
        return Err(format!(
            "heartbeat_ms must be {MIN_PERIOD_MS}..={MAX_PERIOD_MS} and failure_timeout_ms above it"
        ));
    }
    let mut store = Store::open(db, true)?;
    let mut detector = Detector::new(me, failure_timeout_ms * 1_000_000);
    let view = Arc::new(View {
        me,
        primary: AtomicU32::new(detector.beat(&mut store)?),
    });
    // From now on a heartbeat waits at most one period for the database (SQLite's write
    // lock, say, held by a replica frozen mid-transaction), then counts as failed, so the
    // detector keeps running and a replica cut off for `failure_timeout_ms` says so, rather
    // than waiting out SQLite's busy timeout (10 s) with its last view.
    store.limit_waits(Duration::from_millis(heartbeat_ms))?;
    stdio::log(&format!("replica {me}: primary is {}", view.primary()));
    // The first view too, so a runner resolving "the current primary" knows every replica's.
    events::emit(&Primary {
        replica: me,
        primary: view.primary(),
        was: UNKNOWN,
        t_ns: clock::now_ns(),
    });
    let shared = view.clone();
    std::thread::Builder::new()
        .name("heartbeat".into())
        .spawn(move || loop {
            std::thread::sleep(Duration::from_millis(heartbeat_ms));
            let before = shared.primary();
            let now_primary = match detector.beat(&mut store) {
                Ok(p) => p,
                Err(_) => {
                    if detector.cut_off() {
                        UNKNOWN // cut off from the state: stop serving
                    } else {
                        before
                    }
                }
            };
            if now_primary != before {
                shared.primary.store(now_primary, Ordering::Relaxed);
                stdio::log(&format!(
                    "replica {me}: primary is now {now_primary} (was {before})"
                ));
                events::emit(&Primary {
                    replica: me,
                    primary: now_primary,
                    was: before,
                    t_ns: clock::now_ns(),
                });
            }
        })
        .map_err(|e| e.to_string())?;
    Ok(view)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh SQLite database in the temp folder, its tables made.
    fn sqlite(tag: &str) -> (DbConfig, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("knee-replica-{}-{tag}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let cfg = DbConfig {
            sqlite_path: Some(dir.join("chat.db").to_string_lossy().into_owned()),
            postgres_url: None,
            postgres_schema: "knee_chat".into(),
        };
        Store::open(&cfg, true).unwrap();
        (cfg, dir)
    }

    /// Beats every 5 ms until `d` has passed; returns the last beat's answer.
    fn beat_for(detector: &mut Detector, store: &mut Store, d: Duration) -> Result<u32, String> {
        let end = std::time::Instant::now() + d;
        loop {
            let out = detector.beat(store);
            if std::time::Instant::now() >= end {
                return out;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn a_stretch_when_nobody_could_beat_is_no_evidence_against_the_others() {
        let timeout = Duration::from_millis(100);
        let (cfg, dir) = sqlite("blind");
        let (mut s0, mut s1) = (
            Store::open(&cfg, false).unwrap(),
            Store::open(&cfg, false).unwrap(),
        );
        s1.limit_waits(Duration::from_millis(5)).unwrap();
        let mut d0 = Detector::new(0, timeout.as_nanos() as u64);
        let mut d1 = Detector::new(1, timeout.as_nanos() as u64);
        assert_eq!(d0.beat(&mut s0), Ok(0));
        assert_eq!(d1.beat(&mut s1), Ok(0));
        // Replica 0 frozen while holding SQLite's write lock: nobody can beat.
        let holder = rusqlite::Connection::open(cfg.sqlite_path.as_ref().unwrap()).unwrap();
        holder.execute_batch("BEGIN IMMEDIATE").unwrap();
        let blocked = beat_for(&mut d1, &mut s1, timeout * 3);
        assert!(
            blocked
                .unwrap_err()
                .contains("locked; no replica's heartbeat went in"),
            "a beat waits, then fails; a read, not blocked, shows nothing moved"
        );
        assert!(
            d1.cut_off(),
            "no beat for the failure timeout: cut off from the state"
        );
        holder.execute_batch("COMMIT").unwrap();
        // Replica 1 looks first: 0's counter has not moved, but it could not have.
        assert_eq!(d1.beat(&mut s1), Ok(0), "no false suspicion after the gap");
        assert!(!d1.cut_off());
        // A counter that stays still while replica 1 watches is suspected as before.
        assert_eq!(beat_for(&mut d1, &mut s1, timeout * 2), Ok(1));
        assert_eq!(d0.beat(&mut s0), Ok(0), "replica 0 beats again: primary again");
        assert_eq!(d1.beat(&mut s1), Ok(0));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_replica_locked_out_while_others_beat_still_watches_them() {
        let timeout = Duration::from_millis(100);
        let (cfg, dir) = sqlite("contended");
        let mut s1 = Store::open(&cfg, false).unwrap();
        s1.limit_waits(Duration::from_millis(5)).unwrap();
        let mut d1 = Detector::new(1, timeout.as_nanos() as u64);
        assert_eq!(d1.beat(&mut s1), Ok(1), "alone");
        // The lock is always taken when replica 1 tries, but between its tries replica 0
        // (then replica 2) gets a heartbeat in: the database is alive, only contended.
        let holder = rusqlite::Connection::open(cfg.sqlite_path.as_ref().unwrap()).unwrap();
        let others_beat = |id: i64| {
            holder
                .execute(
                    "INSERT INTO replicas(id, beat) VALUES(?1, 1) \
                     ON CONFLICT(id) DO UPDATE SET beat = replicas.beat + 1",
                    [id],
                )
                .unwrap();
            holder.execute_batch("COMMIT; BEGIN IMMEDIATE").unwrap();
        };
        holder.execute_batch("BEGIN IMMEDIATE").unwrap();
        others_beat(0);
        let end = std::time::Instant::now() + timeout * 3;
        while std::time::Instant::now() < end {
            assert_eq!(d1.beat(&mut s1), Ok(0), "replica 0 beats: it is primary");
            assert!(!d1.cut_off(), "the database moves: not cut off");
            assert!(d1.failed > 0, "replica 1's own heartbeats did not go in");
            others_beat(0);
            std::thread::sleep(Duration::from_millis(5));
        }
        // Replica 0 stops, replica 2 goes on: 0 is suspected, and 1 is the lowest left.
        let end = std::time::Instant::now() + timeout * 2;
        let mut last = d1.beat(&mut s1);
        while std::time::Instant::now() < end {
            others_beat(2);
            std::thread::sleep(Duration::from_millis(5));
            last = d1.beat(&mut s1);
        }
        assert_eq!(last, Ok(1));
        holder.execute_batch("ROLLBACK").unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }
}
