//! The fault detector and the primary's election, through the shared database.
//!
//! Every `heartbeat_ms` each replica increments its own counter in the `replicas` table and
//! reads everyone's. A replica whose counter has not moved for `failure_timeout_ms` (by this
//! replica's own clock: no clock is shared) is suspected dead. The primary is the
//! lowest-numbered replica not suspected; a replica counts itself alive while its own
//! heartbeats succeed. Heartbeats go through the database rather than replica-to-replica
//! sockets because the database is where the state lives: a replica that cannot reach it
//! cannot serve, so "alive" means "alive and connected to the state".

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
    last_ok_ns: u64,
}

impl Detector {
    fn beat(&mut self, store: &mut Store) -> Result<u32, String> {
        let me = Value::Int(self.me as i64);
        let rows = store.transaction(|tx| {
            tx.exec(
                "INSERT INTO replicas(id, beat) VALUES($1, 1) \
                 ON CONFLICT(id) DO UPDATE SET beat = replicas.beat + 1",
                std::slice::from_ref(&me),
            )?;
            tx.rows("SELECT id, beat FROM replicas", &[])
        })?;
        let now = clock::now_ns();
        self.last_ok_ns = now;
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
        Ok(self.seen.iter().filter_map(live).min().unwrap_or(self.me))
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
    let mut detector = Detector {
        me,
        timeout_ns: failure_timeout_ms * 1_000_000,
        seen: HashMap::new(),
        last_ok_ns: clock::now_ns(),
    };
    let view = Arc::new(View {
        me,
        primary: AtomicU32::new(detector.beat(&mut store)?),
    });
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
                Err(e) => {
                    stdio::log(&format!("heartbeat failed: {e}"));
                    if clock::now_ns() - detector.last_ok_ns > detector.timeout_ns {
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
