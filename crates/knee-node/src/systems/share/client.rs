//! `knee-node load share`: the client of one peer. Phases, in order (each of `ops`
//! operations, closed loop, no think time, one sample each):
//!
//! 1. register: its peer's files, round robin (a file registered again replaces its entry);
//! 2. search: names drawn from every peer's registered files;
//! 3. obtain: a search (flagged `FOR_OBTAIN`), then a download from a holder other than
//!    itself, verified against the index's size and checksum;
//! 4. unregister: its peer's files.
//!
//! Before the first search, the client waits until every peer's files are findable; before
//! unregistering, until every client has posted a `done-K` marker in the index. These waits
//! are not measured. The whole run is bounded by `duration_s` from the process start.

use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::Xxh3;

use super::codec::{self, Entry};
use super::conn::{Conns, OpError};
use super::files::{file_name, SharedFile, CHUNK_BYTES};
use super::route::{owner, replica};
use super::*;
use crate::events::NoExtra;
use crate::load::harness::{Bounds, ClientRole, Plan, Role, RunContext};
use crate::load::recorder::{Sample, Status};
use crate::rng::Rng;
use crate::stdio::CappedLog;
use crate::wire::BodyReader;
use crate::wire::{ReplyHeader, WireStatus};
use crate::{clock, signals};

#[derive(Deserialize, serde::Serialize, Clone, Copy, PartialEq, Debug)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    Register,
    Search,
    Obtain,
    Unregister,
}

pub(crate) fn default_phases() -> Vec<Phase> {
    vec![Phase::Register, Phase::Search, Phase::Obtain, Phase::Unregister]
}
pub(crate) fn default_timeout_ms() -> f64 {
    5000.0
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientConfig {
    /// Which peer this client belongs to (its files, its address in `peers`).
    pub peer_index: usize,
    /// Every peer's address, in order (the distributed index's partitions).
    pub peers: Vec<String>,
    /// The central index's address; absent: the distributed design.
    #[serde(default)]
    pub index: Option<String>,
    /// Operations per phase.
    pub ops: u64,
    #[serde(default = "default_phases")]
    pub phases: Vec<Phase>,
    /// Peers whose files are searched and obtained (default: every peer).
    #[serde(default)]
    pub search_peers: Option<Vec<usize>>,
    #[serde(default)]
    pub seed: u64,
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: f64,
    /// Bound of the whole run, from the process start (setup and waits included).
    pub duration_s: f64,
    #[serde(default)]
    pub warmup_s: f64,
    /// Downloads are written here (one file per name, overwritten); absent: discarded
    /// after the checksum.
    #[serde(default)]
    pub download_dir: Option<String>,
    pub samples_path: String,
    pub histogram_path: String,
}

pub(crate) const MAX_PEERS: usize = 250;
/// Operations per phase (each a sample).
pub(crate) const MAX_OPS: u64 = 10_000_000;
const POLL: Duration = Duration::from_millis(20);
/// Error lines logged per run; the rest are counted in the `done` line.
const MAX_LOGGED_ERRORS: u64 = 20;

pub fn role(config: &serde_json::Value) -> Result<Box<dyn ClientRole>, String> {
    let cfg: ClientConfig =
        serde_json::from_value(config.clone()).map_err(|e| format!("load config: {e}"))?;
    // At most MAX_PEERS: the contract's bound, checked before.
    if cfg.peers.is_empty() || cfg.peer_index >= cfg.peers.len() {
        return Err(format!(
            "peers must list 1..={MAX_PEERS} addresses and include peer_index"
        ));
    }
    if !(cfg.duration_s > 0.0 && cfg.timeout_ms > 0.0) {
        return Err("duration_s and timeout_ms must be > 0".into());
    }
    if let Some(bad) = cfg.search_peers.iter().flatten().find(|&&p| p >= cfg.peers.len()) {
        return Err(format!("search_peers: no peer {bad}"));
    }
    if let Some(dir) = &cfg.download_dir {
        std::fs::create_dir_all(dir).map_err(|e| format!("creating {dir}: {e}"))?;
    }
    let begin_ns = clock::now_ns();
    let mut c = Client {
        end_ns: begin_ns + (cfg.duration_s * 1e9) as u64,
        conns: Conns::new(Duration::from_secs_f64(cfg.timeout_ms / 1e3)),
        data: Conns::new(Duration::from_secs_f64(cfg.timeout_ms / 1e3)),
        rng: Rng::new(cfg.seed ^ (0x5A4E + cfg.peer_index as u64)),
        next_id: 0,
        own: Vec::new(),
        mismatches: 0,
        fallbacks: 0,
        errors: CappedLog::new(MAX_LOGGED_ERRORS, "further errors are counted, not logged"),
        buf: vec![0u8; CHUNK_BYTES],
        cfg,
    };
    // Setup, before the start: the peer may still be generating its files.
    c.own = c.own_files()?;
    Ok(Box::new(c))
}

/// share's own fields of the `done` line.
#[derive(Serialize, Debug)]
pub struct ShareDone {
    /// Downloads whose size or checksum did not match the index entry.
    pub checksum_mismatches: u64,
    /// Index operations the replica answered because the owner was down.
    pub replica_fallbacks: u64,
}

impl Role for Client {
    type Progress = NoExtra;
    type Done = ShareDone;

    /// The bound counts from the process start (setup included); operations are closed
    /// loop, one at a time, so there is no in-flight bound.
    fn plan(&self) -> Plan {
        let cfg = &self.cfg;
        let bounds = Bounds {
            deadline_ns: Some(self.end_ns),
            ..Bounds::default()
        };
        // An operation's intended time is its send: no late sends by construction.
        Plan::new(&cfg.samples_path, &cfg.histogram_path, cfg.warmup_s, None, bounds)
    }

    fn run(&mut self, ctx: &RunContext) -> Result<ShareDone, String> {
        let own = std::mem::take(&mut self.own);
        self.phases(ctx, &own)?;
        Ok(ShareDone {
            checksum_mismatches: self.mismatches,
            replica_fallbacks: self.fallbacks,
        })
    }
}

struct Client {
    cfg: ClientConfig,
    end_ns: u64,
    /// Index operations; `data` carries obtains, so a download never blocks a control
    /// connection (and a broken download never desynchronizes one).
    conns: Conns,
    data: Conns,
    rng: Rng,
    next_id: u64,
    /// Its peer's files, listed during setup.
    own: Vec<SharedFile>,
    mismatches: u64,
    fallbacks: u64,
    errors: CappedLog,
    buf: Vec<u8>,
}

/// What one index operation got back.
struct Answer {
    header: ReplyHeader,
    body: Vec<u8>,
    bytes_in: usize,
    service: u8,
    flags: u16,
}

impl Client {
    /// During setup, before the harness's bounds apply.
    fn over(&self) -> bool {
        signals::stop_requested() || clock::now_ns() >= self.end_ns
    }

    fn own_addr(&self) -> &str {
        &self.cfg.peers[self.cfg.peer_index]
    }

    /// Asks the own peer for its files until it has generated them.
    fn own_files(&mut self) -> Result<Vec<SharedFile>, String> {
        let addr = self.own_addr().to_string();
        loop {
            self.next_id += 1;
            match self.conns.request(&addr, self.next_id, OP_LIST, &[]) {
                Ok((h, body, _)) if h.status == WireStatus::Ok as u16 => {
                    if let Some(files) = codec::decode_list(&body)? {
                        return Ok(files);
                    }
                }
                Ok((h, body, _)) => {
                    return Err(format!(
                        "list at {addr}: status {}: {}",
                        h.status,
                        String::from_utf8_lossy(&body)
                    ))
                }
                Err(OpError::Bad(e)) => return Err(format!("list at {addr}: {e}")),
                Err(_) => {}
            }
            if self.over() {
                return Err(format!("peer {addr} did not list its files within duration_s"));
            }
            std::thread::sleep(POLL);
        }
    }

    fn phases(&mut self, ctx: &RunContext, own: &[SharedFile]) -> Result<(), String> {
        let registered = (self.cfg.ops as usize).min(own.len());
        let universe: Vec<usize> = match &self.cfg.search_peers {
            Some(p) => p.clone(),
            None => (0..self.cfg.peers.len()).collect(),
        };
        // Names others hold, for obtains (every name when this peer is alone).
        let others: Vec<usize> = universe
            .iter()
            .copied()
            .filter(|&p| p != self.cfg.peer_index)
            .collect();
        let obtain_from = if others.is_empty() {
            universe.clone()
        } else {
            others
        };
        let mut found = false;
        for phase in self.cfg.phases.clone() {
            if matches!(phase, Phase::Search | Phase::Obtain) && !found && registered > 0 {
                self.wait_findable(ctx, &universe, registered)?;
                found = true;
            }
            if phase == Phase::Unregister && universe.len() > 1 {
                self.wait_markers(ctx, &universe)?;
            }
            for k in 0..self.cfg.ops {
                if ctx.over() {
                    return Ok(());
                }
                match phase {
                    Phase::Register => {
                        let f = &own[k as usize % own.len().max(1)];
                        let e = Entry {
                            peer: self.own_addr().to_string(),
                            name: f.name.clone(),
                            size_bytes: f.size_bytes,
                            checksum: f.checksum,
                        };
                        self.register(ctx, &e);
                    }
                    Phase::Search => {
                        let name = self.pick(&universe, registered);
                        self.search(ctx, &name, 0);
                    }
                    Phase::Obtain => {
                        let name = self.pick(&obtain_from, registered);
                        if let Some(holders) = self.search(ctx, &name, FLAG_FOR_OBTAIN) {
                            self.obtain(ctx, &name, &holders);
                        }
                    }
                    Phase::Unregister => {
                        if k as usize >= registered {
                            break;
                        }
                        let name = own[k as usize].name.clone();
                        self.unregister(ctx, &name);
                    }
                }
            }
        }
        Ok(())
    }

    fn pick(&mut self, peers: &[usize], per_peer: usize) -> String {
        let p = peers[self.rng.range_u32(0, peers.len() as u32 - 1) as usize];
        let i = self.rng.range_u32(0, per_peer.max(1) as u32 - 1) as usize;
        file_name(p, i)
    }

    /// Unmeasured: polls until the last registered file of every peer is findable.
    fn wait_findable(&mut self, ctx: &RunContext, peers: &[usize], per_peer: usize) -> Result<(), String> {
        for &p in peers {
            let name = file_name(p, per_peer - 1);
            self.wait_for(ctx, &name, &format!("peer {p}'s files"))?;
        }
        Ok(())
    }

    /// Posts this client's marker, then waits for every peer's: all phases before are over.
    fn wait_markers(&mut self, ctx: &RunContext, peers: &[usize]) -> Result<(), String> {
        let mine = Entry {
            peer: self.own_addr().to_string(),
            name: format!("done-{}", self.cfg.peer_index),
            size_bytes: 0,
            checksum: 0,
        };
        let mut body = Vec::new();
        codec::register_body(&mut body, &mine);
        self.index_write(OP_REGISTER, &mine.name, &body)
            .map_err(|e| format!("posting {}: {e}", mine.name))?;
        for &p in peers {
            self.wait_for(ctx, &format!("done-{p}"), &format!("client {p} to finish"))?;
        }
        Ok(())
    }

    fn wait_for(&mut self, ctx: &RunContext, name: &str, what: &str) -> Result<(), String> {
        loop {
            let mut body = Vec::new();
            codec::put_str16(&mut body, name);
            if let Ok(a) = self.index_read(name, &body) {
                if a.header.status == WireStatus::Ok as u16 && a.body.get(..2) != Some(&[0, 0]) {
                    return Ok(());
                }
            }
            if ctx.over() {
                return Err(format!("waited for {what} until the end of duration_s"));
            }
            std::thread::sleep(POLL);
        }
    }

    fn register(&mut self, ctx: &RunContext, e: &Entry) {
        let mut body = Vec::new();
        codec::register_body(&mut body, e);
        self.measured(ctx, OP_REGISTER, &body, 0, |c| {
            c.index_write(OP_REGISTER, &e.name, &body)
        });
    }

    fn unregister(&mut self, ctx: &RunContext, name: &str) {
        let mut body = Vec::new();
        codec::unregister_body(&mut body, self.own_addr(), name);
        self.measured(ctx, OP_UNREGISTER, &body, 0, |c| {
            c.index_write(OP_UNREGISTER, name, &body)
        });
    }

    /// A measured search; the holders when it found some.
    fn search(&mut self, ctx: &RunContext, name: &str, flags: u16) -> Option<Vec<Entry>> {
        let mut body = Vec::new();
        codec::put_str16(&mut body, name);
        let mut holders = None;
        self.measured(ctx, OP_SEARCH, &body, 0, |c| {
            let mut a = c.index_read(name, &body)?;
            a.flags |= flags;
            if a.header.status == WireStatus::Ok as u16 {
                let list = codec::decode_search_reply(name, &a.body).map_err(OpError::Bad)?;
                if list.is_empty() {
                    a.flags |= FLAG_NOT_FOUND;
                    a.header.status = WireStatus::BadRequest as u16;
                    a.body = format!("{name:?} not found").into_bytes();
                } else {
                    holders = Some(list);
                }
            }
            Ok(a)
        });
        holders
    }

    /// Runs one operation and records its sample.
    fn measured(
        &mut self,
        ctx: &RunContext,
        op: u16,
        body: &[u8],
        arg: u32,
        f: impl FnOnce(&mut Self) -> Result<Answer, OpError>,
    ) {
        self.next_id += 1;
        let written_before = self.conns.written + self.data.written;
        let sent_ns = clock::now_ns();
        let result = f(self);
        let received_ns = clock::now_ns();
        // An operation none of whose requests could be written (every node it tried was
        // unreachable) was never sent: it carries no send time and no bytes.
        let sent = self.conns.written + self.data.written > written_before;
        let mut s = Sample {
            request_id: self.next_id,
            intended_ns: sent_ns,
            sent_ns: if sent { sent_ns } else { 0 },
            bytes_out: if sent {
                (4 + crate::wire::REQUEST_HEADER_BYTES + body.len()) as u64
            } else {
                0
            },
            client: self.cfg.peer_index as u32,
            arg,
            op,
            ..Default::default()
        };
        match result {
            Ok(a) => {
                s.received_ns = received_ns;
                s.server_ns = a.header.server_ns;
                s.queue_ns = a.header.queue_ns;
                s.service_ns = a.header.service_ns;
                s.bytes_in = a.bytes_in as u64;
                s.flags = a.flags;
                s.service = a.service;
                s.status = if a.header.status == WireStatus::Ok as u16 {
                    Status::Ok as u8
                } else {
                    self.errors
                        .log(&format!("op {op}: {}", String::from_utf8_lossy(&a.body)));
                    Status::Error as u8
                };
                if a.flags & FLAG_REPLICA != 0 {
                    self.fallbacks += 1;
                }
            }
            Err(e) => {
                self.errors.log(&format!("op {op}: {e}"));
                s.status = match e {
                    OpError::Timeout => Status::Timeout,
                    OpError::Down(_) => Status::Drop,
                    OpError::Bad(_) => Status::Error,
                } as u8;
            }
        }
        if sent {
            ctx.count_send(s.intended_ns, s.sent_ns, s.bytes_out);
        }
        ctx.recorder.record(&s);
    }

    fn central_or(&self, name: &str) -> Result<String, (usize, usize)> {
        match &self.cfg.index {
            Some(addr) => Ok(addr.clone()),
            None => {
                let n = self.cfg.peers.len();
                let o = owner(name, n);
                Err((o, replica(o, n)))
            }
        }
    }

    fn ask(&mut self, addr: &str, op: u16, body: &[u8], service: u8, flags: u16) -> Result<Answer, OpError> {
        self.next_id += 1;
        let (header, body, bytes_in) = self.conns.request(addr, self.next_id, op, body)?;
        Ok(Answer {
            header,
            body,
            bytes_in,
            service,
            flags,
        })
    }

    /// A register or unregister: the central index, or the owner and its replica (the
    /// answer is the owner's, or the replica's when the owner is down).
    fn index_write(&mut self, op: u16, name: &str, body: &[u8]) -> Result<Answer, OpError> {
        match self.central_or(name) {
            Ok(addr) => self.ask(&addr, op, body, SERVICE_CENTRAL, 0),
            Err((o, r)) => {
                let (oa, ra) = (self.cfg.peers[o].clone(), self.cfg.peers[r].clone());
                let first = self.ask(&oa, op, body, o as u8, 0);
                if r == o {
                    return first;
                }
                let second = self.ask(&ra, op, body, r as u8, FLAG_REPLICA);
                match first {
                    Ok(a) => Ok(a),
                    Err(OpError::Down(_)) => second,
                    Err(e) => Err(e),
                }
            }
        }
    }

    /// A search: the central index, or the owner, falling back to its replica when down.
    fn index_read(&mut self, name: &str, body: &[u8]) -> Result<Answer, OpError> {
        match self.central_or(name) {
            Ok(addr) => self.ask(&addr, OP_SEARCH, body, SERVICE_CENTRAL, 0),
            Err((o, r)) => {
                let oa = self.cfg.peers[o].clone();
                match self.ask(&oa, OP_SEARCH, body, o as u8, 0) {
                    Err(OpError::Down(_)) if r != o => {
                        let ra = self.cfg.peers[r].clone();
                        self.ask(&ra, OP_SEARCH, body, r as u8, FLAG_REPLICA)
                    }
                    other => other,
                }
            }
        }
    }

    /// Downloads `name` from a holder (another peer when there is one), streaming it through
    /// the checksum (and to `download_dir` if set), and records the sample.
    fn obtain(&mut self, ctx: &RunContext, name: &str, holders: &[Entry]) {
        let own = self.own_addr().to_string();
        let others: Vec<&Entry> = holders.iter().filter(|h| h.peer != own).collect();
        let pool: Vec<&Entry> = if others.is_empty() {
            holders.iter().collect()
        } else {
            others
        };
        let holder = pool[self.rng.range_u32(0, pool.len() as u32 - 1) as usize].clone();
        let service = self
            .cfg
            .peers
            .iter()
            .position(|p| *p == holder.peer)
            .unwrap_or(254) as u8;
        let mut body = Vec::new();
        codec::put_str16(&mut body, name);
        let body_for_sample = body.clone();
        // arg: the file's size in KiB (saturating at u32), for grouping obtains by size.
        let size_kib = (holder.size_bytes / 1024).min(u32::MAX as u64) as u32;
        self.measured(ctx, OP_OBTAIN, &body_for_sample, size_kib, |c| {
            c.next_id += 1;
            let id = c.next_id;
            let (header, reply, frame_bytes) = c.data.request(&holder.peer, id, OP_OBTAIN, &body)?;
            let mut a = Answer {
                header,
                body: reply,
                bytes_in: frame_bytes,
                service,
                flags: 0,
            };
            if header.status != WireStatus::Ok as u16 {
                return Ok(a);
            }
            let size_bytes = BodyReader::new(&a.body).u64("size").map_err(OpError::Bad)?;
            if size_bytes > holder.size_bytes {
                // Not drained: the connection is dropped instead of reading an unknown amount.
                c.data.drop_conn(&holder.peer);
                return Ok(c.mismatch(a, name, &holder, &format!("size {size_bytes}")));
            }
            let checksum = c.download(&holder.peer, name, size_bytes)?;
            a.bytes_in = frame_bytes.saturating_add(size_bytes as usize);
            if size_bytes != holder.size_bytes || checksum != holder.checksum {
                let got = format!("size {size_bytes}, checksum {checksum:016x}");
                return Ok(c.mismatch(a, name, &holder, &got));
            }
            Ok(a)
        });
    }

    fn download(&mut self, peer: &str, name: &str, size_bytes: u64) -> Result<u64, OpError> {
        let mut out = match &self.cfg.download_dir {
            Some(dir) => {
                let path = PathBuf::from(dir).join(name);
                Some(File::create(&path).map_err(|e| OpError::Bad(format!("{}: {e}", path.display())))?)
            }
            None => None,
        };
        let mut hasher = Xxh3::new();
        let mut buf = std::mem::take(&mut self.buf);
        let result = self.data.get(peer).and_then(|conn| {
            conn.read_stream(size_bytes, &mut buf, |chunk| {
                hasher.update(chunk);
                match out.as_mut() {
                    Some(f) => f.write_all(chunk).map_err(|e| format!("writing {name}: {e}")),
                    None => Ok(()),
                }
            })
        });
        self.buf = buf;
        if result.is_err() {
            self.data.drop_conn(peer);
        }
        result.map(|()| hasher.digest())
    }

    fn mismatch(&mut self, mut a: Answer, name: &str, holder: &Entry, got: &str) -> Answer {
        self.mismatches += 1;
        a.flags |= FLAG_CHECKSUM_MISMATCH;
        a.header.status = WireStatus::BadRequest as u16;
        a.body = format!(
            "checksum mismatch: {name:?} from {}: the index has size {}, checksum {:016x}; got {got}",
            holder.peer, holder.size_bytes, holder.checksum
        )
        .into_bytes();
        a
    }
}
