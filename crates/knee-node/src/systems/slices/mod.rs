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
    contract: || {
        crate::contract::SystemContract::new()
            .op("item", client::OP_ITEM)
            .size("item_header_bytes", codec::ITEM_HEADER_BYTES)
            .size("reply_header_bytes", codec::REPLY_HEADER_BYTES)
            .size("pn_log_record_bytes", pnlog::RECORD_BYTES)
            .size("max_image_bytes", codec::MAX_IMAGE_BYTES)
            .size("max_control_bytes", codec::MAX_CONTROL_BYTES)
            .max("server.slices", codec::MAX_SLICES as f64)
            .max("driver.image_bytes", codec::MAX_IMAGE_BYTES as f64)
            .max("server.queue_max", pn::MAX_QUEUE as f64)
            .max("server.threads", pn::MAX_THREADS as f64)
            .max("server.give_delay_ms", pn::MAX_GIVE_DELAY_MS as f64)
            .max("driver.ack_ms", client::MAX_ACK_MS as f64)
            .with_default("server.heartbeat_ms", 0)
            .with_default("server.give_delay_ms", 0)
            .with_default("server.failure_timeout_ms", 500)
            .with_default("server.threads", 0)
            .with_default("server.work_repeat", 1)
            .with_default("server.queue_max", 10_000)
            .with_default("driver.image_bytes", 52 * 52 * 3)
            .with_default("driver.retries", 10)
            .with_default("driver.sender", 1)
            .with_default("load.timeout_ms", 5000.0)
    },
};

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
    opts.datagram().map_err(|_| {
        "serve config: max_frame_bytes, max_connections, read_timeout_ms and write_timeout_ms \
         are for knee's framed TCP servers"
            .to_string()
    })?;
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
