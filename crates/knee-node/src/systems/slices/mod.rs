//! slices (report 003): clients publish colour images over Zenoh, processing nodes (PNs)
//! turn them to grayscale, and a load balancer (LB) moves slices of the items (`id mod S`)
//! to PNs that join, away from PNs that leave, and off PNs that crash, without losing or
//! repeating an item. `docs/slices.md` describes the design and why it holds.
//!
//! `serve slices` runs one of three roles, by `server.role`: "router" (a Zenoh router,
//! for runs across hosts), "lb" (`lb.rs`) or "pn" (`pn/`); `load slices` is the client
//! (`client.rs`).

mod client;
pub mod codec;
mod gray;
mod lb;
mod ledger;
mod pn;
mod pnlog;
mod session;
mod table;

use serde::Deserialize;
use zenoh::Wait;

use crate::clock;
use crate::events::{self, Stats};
use crate::serve::{Lifecycle, ServeOptions, Stop};

pub const SYSTEM: super::System = super::System {
    name: "slices",
    serve,
    client: client::role,
    contract,
};

/// A PN beats this many times per `failure_timeout_ms` when the spec leaves its heartbeat
/// to the rule (`heartbeat_ms = 0` in a spec), so that four beats in a row may be lost or
/// late before the LB calls it crashed.
pub const BEATS_PER_TIMEOUT: u64 = 5;
/// The client's ack interval, when the spec leaves it to the rule, is this fraction of the
/// room between a PN's last heartbeat and its takeover (`failure_timeout_ms -
/// heartbeat_ms`): its acks reach a taker first, with room to ride on the items.
pub const ACKS_PER_ROOM: u64 = 4;
/// The longest failure timeout (10 minutes: beyond, no crash is detected within a point),
/// and so the longest heartbeat (it must be shorter).
const MAX_FAILURE_TIMEOUT_MS: u64 = 600_000;
/// PNs a spec may plan for one point: each is a process with its own Zenoh session. No node
/// reads it (a node knows its own PN only); the contract carries it to the spec's rules.
pub const MAX_PLANNED_PNS: u64 = 64;
/// Times the grayscale is computed per item: the capacity knob, bounded so an item's
/// service time stays within seconds.
const MAX_WORK_REPEAT: u32 = 1_000_000;

/// slices' part of `knee-node describe`. The defaults are the ones serde fills in for a
/// config with only the required keys: written once, in the structs' attributes.
fn contract() -> crate::contract::SystemContract {
    use crate::contract::Key;
    use serde_json::json;
    let lb: Option<lb::LbConfig> = serde_json::from_value(json!({"slices": 1, "prefix": ""})).ok();
    let pn: Option<pn::PnConfig> =
        serde_json::from_value(json!({"pn": 0, "slices": 1, "log_path": "", "prefix": ""})).ok();
    let driver: Option<client::DriverConfig> =
        serde_json::from_value(json!({"prefix": "", "slices": 1})).ok();
    let (lb, pn, driver) = match (lb, pn, driver) {
        (Some(lb), Some(pn), Some(driver)) => (lb, pn, driver),
        // A required key added to a struct: the test every_config_field_is_described fails.
        _ => return crate::contract::SystemContract::new(),
    };
    let slices = || Key::int(1, codec::MAX_SLICES).required();
    let load = crate::load::config::contract();
    crate::contract::SystemContract::new()
        .op("item", client::OP_ITEM)
        .size("item_header_bytes", codec::ITEM_HEADER_BYTES)
        .size("reply_header_bytes", codec::REPLY_HEADER_BYTES)
        .size("pn_log_record_bytes", pnlog::RECORD_BYTES)
        .constant("pn_log_layout", serde_json::json!(pnlog::LAYOUT))
        .constant(
            "pn_log_kinds",
            serde_json::json!({"processed": pnlog::PROCESSED, "held": pnlog::HELD}),
        )
        .constant("max_planned_pns", MAX_PLANNED_PNS)
        .size("max_image_bytes", codec::MAX_IMAGE_BYTES)
        .size("max_control_bytes", codec::MAX_CONTROL_BYTES)
        .constant("beats_per_timeout", BEATS_PER_TIMEOUT)
        .constant("acks_per_room", ACKS_PER_ROOM)
        .column("arg", "slice", "the item's slice (id mod slices)")
        .column(
            "flags",
            "attempts",
            "publications of the item (min(attempts, 65535))",
        )
        .column("detail_ns", "epoch", "the epoch of the item's slice in the reply")
        .column("service", "service", "the PN that answered (at most 255)")
        .reads::<Role>("server")
        .key("server.role", Key::one_of(&["router", "lb", "pn"]).required())
        .reads::<RouterConfig>("server")
        .key("server.connect", Key::list(None).default(Vec::<String>::new()))
        .reads::<lb::LbConfig>("server")
        .key("server.slices", slices().checked())
        .key(
            "server.heartbeat_ms",
            Key::int(1, MAX_FAILURE_TIMEOUT_MS - 1)
                .default(lb.heartbeat_ms)
                .derived("0 in a spec: failure_timeout_ms / beats_per_timeout, at least 1"),
        )
        .key(
            "server.failure_timeout_ms",
            Key::int(2, MAX_FAILURE_TIMEOUT_MS).default(lb.failure_timeout_ms),
        )
        .key("server.balance", Key::bool().default(lb.balance))
        .key("server.prefix", Key::str().required())
        .reads::<pn::PnConfig>("server")
        .key("server.pn", Key::int(0, u32::MAX).required())
        .key(
            "server.threads",
            Key::int(0, pn::MAX_THREADS).default(pn.threads).checked(),
        )
        .key(
            "server.work_repeat",
            Key::int(1, MAX_WORK_REPEAT).default(pn.work_repeat),
        )
        .key(
            "server.queue_max",
            Key::int(1, pn::MAX_QUEUE).default(pn.queue_max).checked(),
        )
        .key("server.log_path", Key::str().required())
        .key(
            "server.static_slices",
            Key::list(Some(codec::MAX_SLICES as usize)),
        )
        .key("server.ring_bytes", Key::int_from(0).default(pn.ring_bytes))
        .key("server.ring_age_ms", Key::int_from(0).default(pn.ring_age_ms))
        .key(
            "server.hello_after_ms",
            Key::int_from(0).default(pn.hello_after_ms),
        )
        .key(
            "server.give_delay_ms",
            Key::int(0, pn::MAX_GIVE_DELAY_MS)
                .default(pn.give_delay_ms)
                .checked(),
        )
        .key("server.gray_dump_path", Key::str())
        .key(
            "server.wrong_reply_every",
            Key::int(0, u64::MAX).default(pn.wrong_reply_every),
        )
        .reads::<client::DriverConfig>("driver")
        .key("driver.prefix", Key::str().required())
        .key("driver.connect", Key::list(None).default(driver.connect))
        .key("driver.listen", Key::str().default(driver.listen))
        .key("driver.slices", slices())
        .key(
            "driver.image_bytes",
            Key::int(3, codec::MAX_IMAGE_BYTES).default(driver.image_bytes),
        )
        .key(
            "driver.retries",
            Key::int(0, client::MAX_RETRIES).default(driver.retries),
        )
        .key("driver.sender", Key::int(0, u32::MAX).default(driver.sender))
        .key(
            "driver.ack_ms",
            Key::int(1, client::MAX_ACK_MS).default(driver.ack_ms).derived(
                "0 in a spec: (failure_timeout_ms - heartbeat_ms) / acks_per_room, \
                     within 1..=max",
            ),
        )
        .key("driver.junk_every", Key::int_from(0).default(driver.junk_every))
        // The client's own bound on the load generator's in-flight table.
        .key(
            "load.max_outstanding",
            Key::int(1, client::MAX_OUTSTANDING).default(load.keys["load.max_outstanding"].default.clone()),
        )
}

/// The tag of a server config: which role it runs.
#[derive(Deserialize)]
#[allow(dead_code)] // read for the contract's field names only
struct Role {
    role: String,
}

#[derive(Deserialize)]
#[serde(tag = "role", rename_all = "lowercase")]
enum ServerConfig {
    Router(RouterConfig),
    Lb(lb::LbConfig),
    Pn(pn::PnConfig),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RouterConfig {
    #[serde(default)]
    connect: Vec<String>,
}

fn serve(opts: &ServeOptions) -> Result<(), String> {
    opts.not_framed()?;
    let cfg: ServerConfig = super::parse(&opts.server, "server")?;
    match cfg {
        ServerConfig::Router(r) => router(opts, r),
        ServerConfig::Lb(c) => lb::run(opts, c),
        ServerConfig::Pn(c) => pn::run(opts, c),
    }
}

/// A Zenoh router inside knee-node: every node of a run across hosts connects to it.
fn router(opts: &ServeOptions, cfg: RouterConfig) -> Result<(), String> {
    let opened = session::open(session::Mode::Router, &opts.listen, &cfg.connect)?;
    let mut life = Lifecycle::ready_at(opened.endpoint, Stop::default());
    loop {
        if let Some(end) = life.tick(clock::now_ns(), Stats::<events::NoExtra>::default) {
            let _ = opened.session.close().wait();
            return end;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

fn check_slices(slices: u32) -> Result<(), String> {
    if !(1..=codec::MAX_SLICES).contains(&slices) {
        return Err(format!("slices must be 1..={}", codec::MAX_SLICES));
    }
    Ok(())
}

/// Bad input, counted and logged with its reason: the first few, then at most one line a
/// second, so a flood of garbage cannot flood the log.
struct Throttled {
    what: &'static str,
    count: u64,
    next_log_ns: u64,
}

const LOG_FIRST: u64 = 10;
const LOG_EVERY_NS: u64 = 1_000_000_000;

impl Throttled {
    fn new(what: &'static str) -> Throttled {
        Throttled {
            what,
            count: 0,
            next_log_ns: 0,
        }
    }

    fn note(&mut self, why: impl std::fmt::Display) {
        self.count += 1;
        let now = clock::now_ns();
        if self.count <= LOG_FIRST || now >= self.next_log_ns {
            crate::stdio::log(&format!(
                "{}: dropped bad input ({} so far): {why}",
                self.what, self.count
            ));
            if self.count > LOG_FIRST {
                self.next_log_ns = now + LOG_EVERY_NS;
            }
        }
    }
}
