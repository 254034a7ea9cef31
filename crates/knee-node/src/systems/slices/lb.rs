//! The load balancer (`serve slices`, role "lb"): hears the PNs on `P/ctl/lb`, keeps the
//! slice table (`table.rs`) and sends assignments, gives and revokes on `P/ctl/pn/<pn>`.
//! Clients never talk to it. One thread runs the table; zenoh's callback only queues.

use std::sync::mpsc;
use std::time::Duration;

use zenoh::Wait;

use serde::{Deserialize, Serialize};

use super::codec::{self, ToLb};
use super::session::{self, Keys, Mode};
use super::table::{Out, Table};
use super::Throttled;
use crate::events::{self, Stats};
use crate::serve::{Lifecycle, ServeOptions, Stop};
use crate::{clock, stdio};

/// Control messages waiting for the LB's thread: PNs send a few per heartbeat, so this
/// only fills if the thread stalls; the callback then blocks (zenoh's own back-pressure).
const INBOX: usize = 4096;
/// Longest wait for a message before the table checks for silent PNs.
const TICK: Duration = Duration::from_millis(10);
/// A loop that took longer than this means the LB itself was not running (its tick is
/// 10 ms): the time beyond is not counted against the PNs' silence.
const PAUSE_NS: u64 = 100_000_000;

fn default_heartbeat_ms() -> u64 {
    100
}
fn default_failure_timeout_ms() -> u64 {
    500
}
fn yes() -> bool {
    true
}

#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct LbConfig {
    pub slices: u32,
    #[serde(default = "default_heartbeat_ms")]
    pub heartbeat_ms: u64,
    #[serde(default = "default_failure_timeout_ms")]
    pub failure_timeout_ms: u64,
    /// false: the baseline (static assignment); the LB then only idles.
    #[serde(default = "yes")]
    pub balance: bool,
    pub prefix: String,
    #[serde(default)]
    pub connect: Vec<String>,
}

impl LbConfig {
    pub fn check(&self) -> Result<(), String> {
        super::check_slices(self.slices)?;
        if self.heartbeat_ms == 0 || self.failure_timeout_ms <= self.heartbeat_ms {
            return Err("heartbeat_ms must be > 0 and failure_timeout_ms above it".into());
        }
        Ok(())
    }
}

#[derive(Serialize, Default)]
struct LbStats {
    /// (owner, epoch) per slice (owner null: none).
    table: Vec<(Option<u32>, u64)>,
    pns: Vec<u32>,
    moves: u64,
    /// Gives sent again because their taker had not said `took` (a lost handoff).
    gives_again: u64,
    bad_control: u64,
    #[serde(rename = "final")]
    last: bool,
}

pub fn run(opts: &ServeOptions, cfg: LbConfig) -> Result<(), String> {
    cfg.check()?;
    let keys = Keys::new(&cfg.prefix)?;
    let opened = session::open(Mode::Peer, &opts.listen, &cfg.connect)?;
    let session = opened.session;
    let (tx, rx) = mpsc::sync_channel::<Vec<u8>>(INBOX);
    // Kept alive for the run: dropping it would undeclare the subscription.
    let _sub = if cfg.balance {
        Some(
            session
                .declare_subscriber(keys.lb())
                .callback(move |s| {
                    let _ = tx.send(s.payload().to_bytes().into_owned());
                })
                .wait()
                .map_err(|e| format!("subscribing: {e}"))?,
        )
    } else {
        None
    };
    let mut life = Lifecycle::ready_at(opened.endpoint, Stop::default());
    let mut table = Table::new(cfg.slices);
    // Two heartbeats: PNs stopped together (a run's end) all say `leave` within it.
    table.leave_settle_ns = 2 * cfg.heartbeat_ms * 1_000_000;
    let mut bad = Throttled::new("lb");
    let failure_ns = cfg.failure_timeout_ms * 1_000_000;
    let line = |table: &Table, bad: &Throttled, last| Stats {
        t_ns: clock::now_ns(),
        requests: 0,
        errors: bad.count,
        extra: LbStats {
            table: table.view(),
            pns: table.pns(),
            moves: table.moves,
            gives_again: table.gives_again,
            bad_control: bad.count,
            last,
        },
        ..Stats::default()
    };
    let mut last_loop_ns = clock::now_ns();
    loop {
        let now = clock::now_ns();
        if let Some(end) = life.tick(now, || line(&table, &bad, false)) {
            events::emit(&line(&table, &bad, true));
            let _ = session.close().wait();
            return end;
        }
        // Every message already waiting is heard before the silence check: a heartbeat
        // queued behind another must not leave its PN looking silent. What a message asks
        // for goes out at once (a join's gives do not wait for the tick's scans).
        let mut next = rx.recv_timeout(TICK).ok();
        let mut heard = 0;
        while let Some(bytes) = next {
            match codec::decode_control::<ToLb>(&bytes) {
                Ok(msg) => emit(&session, &keys, table.on_message(msg, clock::now_ns())),
                Err(why) => bad.note(&why),
            }
            heard += 1;
            next = if heard < INBOX { rx.try_recv().ok() } else { None };
        }
        let now = clock::now_ns();
        let gap_ns = now.saturating_sub(last_loop_ns);
        last_loop_ns = now;
        if gap_ns > PAUSE_NS {
            table.paused(gap_ns);
        }
        if cfg.balance {
            emit(&session, &keys, table.on_tick(now, failure_ns));
        }
    }
}

/// Sends the table's messages, then prints its events (a `took` of 500 slices is 500
/// `handoff` lines, printed in a few writes).
fn emit(session: &zenoh::Session, keys: &Keys, out: Vec<Out>) {
    let mut handoffs = Vec::new();
    for o in out {
        match o {
            Out::Send(pn, msg) => {
                if let Err(e) = session::put(session, &keys.pn(pn), codec::encode_control(&msg)) {
                    stdio::log(&e);
                }
            }
            Out::Event(h) => handoffs.push(h),
        }
    }
    if !handoffs.is_empty() {
        events::emit_all(&handoffs);
    }
}
