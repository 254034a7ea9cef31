//! The slices client (`knee-node load slices`): publishes RGB images at an open-loop rate
//! on `P/items/<id mod S>`, hears replies on `P/replies/<sender>`, and records each item
//! once, with its first reply. An item not acknowledged within `timeout_ms` is published
//! again with the same id (attempt + 1), at most `retries` times; then it is a timeout.
//! It tells the PNs which ids it was answered for within `ack_ms`, on its next items
//! (every PN hears them) or, when no item goes out in time, in a `codec::Acks` on
//! `P/acks/<sender>`: a PN taking over a crashed one's slices does none of those again.
//!
//! One thread sends, expires and records; zenoh's callback only queues replies.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use zenoh::Wait;

use super::codec::{self, Acks, ItemHeader, Reply};
use super::gray;
use super::session::{self, Keys, Mode, Opened};
use crate::clock;
use crate::load::config::{LoadConfig, ScheduleConfig};
use crate::load::drive::{drive, Sender};
use crate::load::flights::Flights;
use crate::load::harness::{ClientRole, Plan, Role, RunContext};
use crate::load::recorder::{Sample, Status};
use crate::rng::Rng;

/// Distinct images a client publishes (chosen by id): generated once from the seed, so
/// the send path copies rather than draws, and each reply's checksum can be checked.
const IMAGES: usize = 64;
pub(super) const MAX_OUTSTANDING: usize = 1_000_000;
pub(super) const MAX_RETRIES: u32 = 100;
/// Longest wait for a reply before the loop looks at its schedule and timeouts again.
const MAX_WAIT: Duration = Duration::from_millis(2);

/// 52 x 52 RGB pixels: the report's images were about 7-9 KB.
fn default_image_bytes() -> usize {
    52 * 52 * 3
}
fn default_retries() -> u32 {
    10
}
fn default_sender() -> u32 {
    1
}
fn default_ack_ms() -> u64 {
    50
}
/// The longest ack interval: a crash takeover (`failure_timeout_ms` after a PN's last
/// heartbeat) must come after the acks of what the dead PN answered.
pub const MAX_ACK_MS: u64 = 10_000;
fn default_listen() -> String {
    crate::config_defaults::listen()
}

/// The generic load config (no TCP target: the client reaches the PNs through Zenoh), with
/// slices' own driver.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    pub load: LoadConfig,
    pub driver: DriverConfig,
}

#[derive(Deserialize, Debug, Clone)]
#[serde(deny_unknown_fields)]
pub struct DriverConfig {
    pub prefix: String,
    #[serde(default)]
    pub connect: Vec<String>,
    /// Where this client listens for the peers that connect to it (gossip).
    #[serde(default = "default_listen")]
    pub listen: String,
    pub slices: u32,
    #[serde(default = "default_image_bytes")]
    pub image_bytes: usize,
    #[serde(default = "default_retries")]
    pub retries: u32,
    #[serde(default = "default_sender")]
    pub sender: u32,
    /// How soon the client tells the PNs which ids it was answered for (ms); the spec
    /// keeps `2 x ack_ms <= failure_timeout_ms - heartbeat_ms` (the acks come before a
    /// crash takeover).
    #[serde(default = "default_ack_ms")]
    pub ack_ms: u64,
    /// Fault injection (0: none): after every Nth item, one malformed message on a topic
    /// the PNs or the LB read (`Junk`), which they must count and drop, never crash on.
    #[serde(default)]
    pub junk_every: u64,
}

impl ClientConfig {
    fn parse(config: &serde_json::Value) -> Result<Self, String> {
        let load = LoadConfig::parse(config)?;
        let driver: DriverConfig =
            serde_json::from_value(load.driver.clone()).map_err(|e| format!("driver: {e}"))?;
        let cfg = ClientConfig { load, driver };
        cfg.check()?;
        Ok(cfg)
    }

    fn check(&self) -> Result<(), String> {
        // Its shape, which the contract cannot say (a multiple of 3); the other bounds are
        // the contract's, checked before the parse.
        codec::image_shape(self.driver.image_bytes)?;
        if matches!(self.load.schedule, ScheduleConfig::Closed { .. }) {
            return Err("slices' client is open loop: poisson, constant or steps".into());
        }
        Ok(())
    }
}

/// The client's own fields of its `progress` and `done` lines.
#[derive(Serialize, Default, Debug, Clone, Copy)]
pub struct SlicesFields {
    /// Items published again after a timeout.
    pub republished: u64,
    /// Replies for ids already acknowledged.
    pub duplicates_received: u64,
    /// Replies whose epoch is below one already seen for their slice.
    pub stale_epoch_replies: u64,
    /// Replies that came after their item was given up (not recorded again).
    pub replies_after_timeout: u64,
    /// Malformed replies, or replies for another sender.
    pub bad_replies: u64,
    /// Replies whose grayscale checksum is not the image's.
    pub bad_checksums: u64,
    /// Malformed messages published on purpose (`driver.junk_every`).
    pub junk_sent: u64,
    /// Answered ids the PNs were told of on items, and in `Acks` messages (which go out
    /// only when no item took them within `ack_ms`).
    pub acked_ids_on_items: u64,
    pub acked_ids_in_messages: u64,
}

#[derive(Default)]
struct Live {
    republished: AtomicU64,
    duplicates: AtomicU64,
    stale: AtomicU64,
    after_timeout: AtomicU64,
    bad: AtomicU64,
    bad_checksums: AtomicU64,
    junk_sent: AtomicU64,
    acked_on_items: AtomicU64,
    acked_in_messages: AtomicU64,
}

impl Live {
    fn fields(&self) -> SlicesFields {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        SlicesFields {
            republished: g(&self.republished),
            duplicates_received: g(&self.duplicates),
            stale_epoch_replies: g(&self.stale),
            replies_after_timeout: g(&self.after_timeout),
            bad_replies: g(&self.bad),
            bad_checksums: g(&self.bad_checksums),
            junk_sent: g(&self.junk_sent),
            acked_ids_on_items: g(&self.acked_on_items),
            acked_ids_in_messages: g(&self.acked_in_messages),
        }
    }
}

pub struct SlicesClient {
    cfg: ClientConfig,
    keys: Keys,
    opened: Option<Opened>,
    live: Arc<Live>,
}

pub fn role(config: &serde_json::Value) -> Result<Box<dyn ClientRole>, String> {
    let cfg = ClientConfig::parse(config).map_err(|e| format!("load config: {e}"))?;
    let keys = Keys::new(&cfg.driver.prefix)?;
    let opened = session::open(Mode::Peer, &cfg.driver.listen, &cfg.driver.connect)?;
    Ok(Box::new(SlicesClient {
        cfg,
        keys,
        opened: Some(opened),
        live: Arc::default(),
    }))
}

impl Role for SlicesClient {
    type Progress = SlicesFields;
    type Done = SlicesFields;

    fn plan(&self) -> Plan<SlicesFields> {
        let cfg = &self.cfg;
        let live = self.live.clone();
        Plan {
            progress: Some(Box::new(move |_, _| live.fields())),
            ..cfg.load.plan(Some(cfg.load.max_outstanding))
        }
    }

    fn run(&mut self, ctx: &RunContext) -> Result<SlicesFields, String> {
        let opened = self.opened.take().ok_or("the client runs once")?;
        let session = opened.session;
        // Replies in flight are bounded by the items outstanding (and their re-publishes);
        // a full channel blocks zenoh's receive thread: back-pressure, never a loss.
        let (tx, rx) = mpsc::sync_channel::<Vec<u8>>(self.cfg.load.max_outstanding.min(65_536));
        let sub = session
            .declare_subscriber(self.keys.replies(self.cfg.driver.sender))
            .callback(move |s| {
                let _ = tx.send(s.payload().to_bytes().into_owned());
            })
            .wait()
            .map_err(|e| format!("subscribing to replies: {e}"))?;
        let mut engine = Engine::new(&self.cfg, &self.keys, &session, ctx, &self.live, &rx)?;
        drive(&mut engine, ctx);
        drop(sub);
        let _ = session.close().wait();
        Ok(self.live.fields())
    }
}

struct InFlight {
    intended_ns: u64,
    sent_ns: u64,
    attempts: u16,
    bytes_out: u64,
}

struct Engine<'a> {
    cfg: &'a ClientConfig,
    ctx: &'a RunContext,
    session: &'a zenoh::Session,
    live: &'a Live,
    item_keys: Vec<String>,
    /// Where junk goes besides the items (`driver.junk_every`): the LB, PN 0, a handoff.
    ctl_keys: [String; 3],
    junk_rng: Rng,
    images: Vec<Vec<u8>>,
    checksums: Vec<u64>,
    shape: (u16, u16),
    /// Items published and not yet answered or given up, with their attempt's deadline;
    /// at most `max_outstanding`.
    in_flight: Flights<InFlight>,
    /// The highest epoch seen per slice.
    epochs: Vec<u64>,
    /// Ids acknowledged or given up, below `next_id`: anything else is not ours.
    next_id: u64,
    timeout_ns: u64,
    acks_key: String,
    /// Ids answered and not yet told, oldest first, and when they are due out (the
    /// oldest's arrival plus `ack_ms`, for an `Acks` if no item takes them by then).
    acks: Vec<u64>,
    acks_due_ns: Option<u64>,
    ack_ns: u64,
    /// The replies zenoh's callback queued.
    replies: &'a mpsc::Receiver<Vec<u8>>,
    last_sent_ns: u64,
}

impl<'a> Engine<'a> {
    fn new(
        cfg: &'a ClientConfig,
        keys: &Keys,
        session: &'a zenoh::Session,
        ctx: &'a RunContext,
        live: &'a Live,
        replies: &'a mpsc::Receiver<Vec<u8>>,
    ) -> Result<Self, String> {
        let d = &cfg.driver;
        let shape = codec::image_shape(d.image_bytes)?;
        let mut rng = Rng::new(cfg.load.seed ^ 0x51_1CE5);
        let images: Vec<Vec<u8>> = (0..IMAGES)
            .map(|_| (0..d.image_bytes).map(|_| rng.next_u64() as u8).collect())
            .collect();
        let mut out = Vec::new();
        let checksums = images.iter().map(|i| gray::work_repeat(i, 1, &mut out)).collect();
        Ok(Engine {
            cfg,
            ctx,
            session,
            live,
            item_keys: (0..d.slices).map(|s| keys.item(s)).collect(),
            ctl_keys: [keys.lb(), keys.pn(0), keys.handoff(0)],
            junk_rng: Rng::new(cfg.load.seed ^ 0x0BAD_F00D),
            images,
            checksums,
            shape,
            in_flight: Flights::new(cfg.load.max_outstanding),
            epochs: vec![0; d.slices as usize],
            next_id: 0,
            timeout_ns: (cfg.load.timeout_ms * 1e6) as u64,
            acks_key: keys.acks(d.sender),
            acks: Vec::new(),
            acks_due_ns: None,
            ack_ns: d.ack_ms * 1_000_000,
            replies,
            last_sent_ns: 0,
        })
    }

    fn slice_of(&self, id: u64) -> u32 {
        (id % self.cfg.driver.slices as u64) as u32
    }

    /// Publishes item `id`'s attempt with the oldest acks not yet told; its size in bytes.
    fn publish(&mut self, id: u64, attempt: u16) -> u64 {
        let h = ItemHeader {
            slice: self.slice_of(id),
            sender: self.cfg.driver.sender,
            id,
            attempt,
            width: self.shape.0,
            height: self.shape.1,
            timestamp_ns: clock::now_ns(),
        };
        let image = &self.images[id as usize % IMAGES];
        let told = self.acks.len().min(codec::MAX_ITEM_ACKS);
        let acked = &self.acks[..told];
        let mut bytes = Vec::with_capacity(codec::ITEM_HEADER_BYTES + image.len() + 8 * told);
        h.encode_acked(image, acked, &mut bytes);
        self.acks.drain(..told);
        self.live.acked_on_items.fetch_add(told as u64, Ordering::Relaxed);
        if self.acks.is_empty() {
            self.acks_due_ns = None;
        }
        let n = bytes.len() as u64;
        if let Err(e) = session::put(self.session, &self.item_keys[h.slice as usize], bytes) {
            crate::stdio::log(&e);
        }
        n
    }

    /// Tells the PNs the ids answered since the last time (in parts of `MAX_ACKS`).
    fn send_acks(&mut self) {
        self.acks_due_ns = None;
        for ids in self.acks.chunks(codec::MAX_ACKS) {
            let mut bytes = Vec::with_capacity(codec::ACKS_HEADER_BYTES + 8 * ids.len());
            Acks {
                sender: self.cfg.driver.sender,
                ids: ids.to_vec(),
            }
            .encode(&mut bytes);
            if let Err(e) = session::put(self.session, &self.acks_key, bytes) {
                crate::stdio::log(&e);
            }
        }
        self.live
            .acked_in_messages
            .fetch_add(self.acks.len() as u64, Ordering::Relaxed);
        self.acks.clear();
    }

    /// An id some PN answered: the PNs hear of it within `ack_ms` (on an item, or in an
    /// `Acks` at the latest).
    fn ack(&mut self, id: u64, now_ns: u64) {
        if self.acks.is_empty() {
            self.acks_due_ns = Some(now_ns + self.ack_ns);
        }
        self.acks.push(id);
        if self.acks.len() >= codec::MAX_ACKS {
            self.send_acks();
        }
    }

    /// One malformed message (`driver.junk_every`), the kinds in turn: random bytes as an
    /// item, an item whose slice is not id mod S, a truncated item, random bytes and an
    /// unknown control message to the LB, to PN 0 and as a handoff to PN 0.
    fn publish_junk(&mut self, n: u64) {
        let d = &self.cfg.driver;
        let mut noise = vec![0u8; 1 + (self.junk_rng.next_u64() % 512) as usize];
        noise.iter_mut().for_each(|b| *b = self.junk_rng.next_u64() as u8);
        let mut item = Vec::new();
        let h = ItemHeader {
            slice: 0,
            sender: d.sender,
            id: u64::MAX - n, // never an id the client publishes for real
            attempt: 1,
            width: self.shape.0,
            height: self.shape.1,
            timestamp_ns: clock::now_ns(),
        };
        let (key, bytes) = match n % 6 {
            0 => (self.item_keys[0].clone(), noise),
            1 => {
                // id mod S + 1: another slice, or S itself (out of range): wrong either way.
                let slice = (h.id % d.slices as u64) as u32 + 1;
                ItemHeader { slice, ..h }.encode(&self.images[0], &mut item);
                (self.item_keys[slice.min(d.slices - 1) as usize].clone(), item)
            }
            2 => {
                h.encode(&self.images[0], &mut item);
                item.truncate(codec::ITEM_HEADER_BYTES + 1);
                (self.item_keys[0].clone(), item)
            }
            3 => (
                self.ctl_keys[0].clone(),
                br#"{"kind":"no-such-kind","pn":0}"#.to_vec(),
            ),
            4 => (self.ctl_keys[1].clone(), noise),
            _ => (self.ctl_keys[2].clone(), noise),
        };
        if let Err(e) = session::put(self.session, &key, bytes) {
            crate::stdio::log(&e);
        }
        self.live.junk_sent.fetch_add(1, Ordering::Relaxed);
    }

    fn send_new(&mut self, id: u64, intended_ns: u64) {
        self.next_id = id + 1;
        let every = self.cfg.driver.junk_every;
        if every > 0 && id % every == every - 1 {
            self.publish_junk(id / every);
        }
        if self.in_flight.is_full() {
            self.ctx.recorder.record(&Sample {
                request_id: id,
                intended_ns,
                client: self.cfg.driver.sender,
                arg: self.slice_of(id),
                status: Status::Drop as u8,
                ..Sample::default()
            });
            return;
        }
        let bytes = self.publish(id, 1);
        let sent_ns = clock::now_ns();
        self.last_sent_ns = sent_ns;
        self.ctx.count_send(intended_ns, sent_ns, bytes);
        let f = InFlight {
            intended_ns,
            sent_ns,
            attempts: 1,
            bytes_out: bytes,
        };
        // Not full: looked at before the publish.
        if let Err(f) = self.in_flight.insert(id, sent_ns + self.timeout_ns, f) {
            self.record_unanswered(id, &f, Status::Drop);
        }
    }

    /// Re-publishes what timed out, or gives it up after `retries`.
    fn expire_items(&mut self, now: u64) {
        while let Some((id, _, mut f)) = self.in_flight.pop_expired(now) {
            if (f.attempts as u32) <= self.cfg.driver.retries && !self.ctx.stopping() {
                f.attempts += 1;
                let bytes = self.publish(id, f.attempts);
                self.ctx.count_resend(clock::now_ns(), bytes);
                self.live.republished.fetch_add(1, Ordering::Relaxed);
                // Just taken out: there is room for it again.
                if let Err(f) = self.in_flight.insert(id, now + self.timeout_ns, f) {
                    self.record_unanswered(id, &f, Status::Drop);
                }
            } else {
                self.record_unanswered(id, &f, Status::Timeout);
            }
        }
    }

    fn record_unanswered(&self, id: u64, f: &InFlight, status: Status) {
        self.ctx.recorder.record(&Sample {
            client: self.cfg.driver.sender,
            arg: self.slice_of(id),
            flags: f.attempts,
            ..Sample::unanswered(id, f.intended_ns, f.sent_ns, f.bytes_out, status)
        });
    }

    fn abandon_all(&mut self) {
        for (id, f) in self.in_flight.drain() {
            self.record_unanswered(id, &f, Status::Drop);
        }
    }

    fn on_reply(&mut self, bytes: &[u8]) {
        let received_ns = clock::now_ns();
        let r = match Reply::decode(bytes) {
            Ok(r) if r.sender == self.cfg.driver.sender && r.slice == self.slice_of(r.id) => r,
            _ => {
                self.live.bad.fetch_add(1, Ordering::Relaxed);
                self.ctx.count_unrecorded_rx(bytes.len() as u64);
                return;
            }
        };
        // Every answer, also a late or repeated one: a PN processed the item.
        self.ack(r.id, received_ns);
        // Every answer's grayscale is checked, also a late or repeated one's (those are
        // not recorded as samples): the checker fails a run with any wrong one.
        let good = r.gray_checksum == self.checksums[r.id as usize % IMAGES];
        if !good {
            self.live.bad_checksums.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(top) = self.epochs.get_mut(r.slice as usize) {
            if r.epoch < *top {
                self.live.stale.fetch_add(1, Ordering::Relaxed);
            }
            *top = (*top).max(r.epoch);
        }
        let Some(f) = self.in_flight.remove(&r.id) else {
            let counter = if r.id < self.next_id {
                &self.live.duplicates
            } else {
                &self.live.bad
            };
            counter.fetch_add(1, Ordering::Relaxed);
            self.ctx.count_unrecorded_rx(bytes.len() as u64);
            return;
        };
        self.ctx.recorder.record(&Sample {
            request_id: r.id,
            intended_ns: f.intended_ns,
            sent_ns: f.sent_ns,
            received_ns,
            server_ns: r.queue_ns + r.service_ns,
            queue_ns: r.queue_ns,
            service_ns: r.service_ns,
            detail_ns: r.epoch,
            bytes_out: f.bytes_out,
            bytes_in: bytes.len() as u64,
            client: r.sender,
            arg: r.slice,
            op: OP_ITEM,
            flags: f.attempts,
            status: if good { Status::Ok } else { Status::Error } as u8,
            service: r.pn.min(u8::MAX as u32) as u8,
        });
    }
}

/// Slices on the drive loop: items published on their schedule, replies from zenoh's queue.
impl Sender for Engine<'_> {
    fn send(&mut self, id: u64, intended_ns: u64) {
        self.send_new(id, intended_ns);
    }

    fn poll(&mut self, wait_ns: u64) {
        if wait_ns > 0 {
            match self.replies.recv_timeout(Duration::from_nanos(wait_ns)) {
                Ok(r) => self.on_reply(&r),
                Err(_) => return,
            }
        }
        while let Ok(r) = self.replies.try_recv() {
            self.on_reply(&r);
        }
    }

    fn expire(&mut self, now_ns: u64) {
        self.expire_items(now_ns);
    }

    /// The acks no item took within `ack_ms` go out on their own.
    fn advance(&mut self, now_ns: u64) {
        if self.acks_due_ns.is_some_and(|t| now_ns >= t) {
            self.send_acks();
        }
    }

    fn in_flight(&self) -> bool {
        !self.in_flight.is_empty()
    }

    fn last_sent_ns(&self) -> u64 {
        self.last_sent_ns
    }

    /// Until the acks are due, and never beyond `MAX_WAIT`.
    fn wake_ns(&mut self, now_ns: u64) -> u64 {
        let max_ns = MAX_WAIT.as_nanos() as u64;
        self.acks_due_ns
            .map_or(max_ns, |t| t.saturating_sub(now_ns).min(max_ns))
    }

    fn finish(&mut self) {
        self.send_acks();
    }

    fn close(&mut self, _now_ns: u64) {
        self.abandon_all();
        self.send_acks();
    }
}

/// The sample `op` of an item.
pub const OP_ITEM: u16 = 0;
