//! echo: the calibration system. The reply carries `reply_bytes` bytes and nothing is
//! computed, so what is measured is knee's own overhead plus the loopback.
//!
//! Request body: `reply_bytes u32`, then padding up to the driver's `request_bytes`.
//! Reply body: `reply_bytes` zero bytes.

use serde::Deserialize;

use super::{framed, framed_client, parse, ServerParts, System};
use crate::contract::{Key, SystemContract};
use crate::load::driver::{Driver, DriverFactory};
use crate::serve::{Handler, Outcome};
use crate::wire::{DEFAULT_MAX_FRAME_BYTES, REPLY_HEADER_BYTES, REQUEST_HEADER_BYTES};

pub const OP_ECHO: u16 = 1;

pub const SYSTEM: System = System {
    name: "echo",
    serve: |opts| framed(opts, server(parse(&opts.server, "server")?)?),
    client: |config| {
        framed_client(config, |driver| {
            Ok(std::sync::Arc::new(EchoDriverFactory::new(parse(
                driver, "driver",
            )?)?))
        })
    },
    contract: || {
        SystemContract::new()
            .op("echo", OP_ECHO)
            .column("op", "op", "always echo")
            .reads::<EchoServerConfig>("server")
            .key("server.threads", Key::int(0, MAX_THREADS).default(0))
            .reads::<EchoDriverConfig>("driver")
            .key(
                "driver.request_bytes",
                Key::int(4, MAX_DRIVER_REQUEST_BYTES).default(default_bytes()),
            )
            .key(
                "driver.reply_bytes",
                Key::int(0, MAX_DRIVER_REPLY_BYTES).default(default_bytes()),
            )
    },
};
/// Largest reply the server will build for one request.
const MAX_REPLY_BYTES: usize = 16 << 20;
/// The driver's largest request and reply bodies: with their headers, their frames fit the
/// default frame limit of both ends (a 16 MiB body did not: every request, or every reply,
/// was refused as an oversized frame and the whole load was drops).
const MAX_DRIVER_REQUEST_BYTES: usize = DEFAULT_MAX_FRAME_BYTES - REQUEST_HEADER_BYTES;
const MAX_DRIVER_REPLY_BYTES: usize = DEFAULT_MAX_FRAME_BYTES - REPLY_HEADER_BYTES;
/// A pool's workers (a thread each): more is a configuration mistake on any machine.
const MAX_THREADS: usize = 256;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EchoServerConfig {
    #[serde(default)]
    pub threads: usize,
}

pub fn server(cfg: EchoServerConfig) -> Result<ServerParts, String> {
    Ok(ServerParts {
        handler: std::sync::Arc::new(Echo),
        threads: cfg.threads,
        max_queue: 100_000,
    })
}

struct Echo;

impl Handler for Echo {
    fn handle(&self, op: u16, body: &[u8], reply: &mut Vec<u8>) -> Outcome {
        if op != OP_ECHO {
            return Outcome::unknown_op(reply, "echo", op);
        }
        let Some(len) = body.get(..4) else {
            return Outcome::bad_request(reply, "echo request shorter than 4 bytes");
        };
        let reply_bytes = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
        if reply_bytes > MAX_REPLY_BYTES {
            return Outcome::bad_request(
                reply,
                &format!("reply_bytes {reply_bytes} exceeds {MAX_REPLY_BYTES}"),
            );
        }
        reply.resize(reply_bytes, 0);
        Outcome::ok()
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EchoDriverConfig {
    #[serde(default = "default_bytes")]
    pub request_bytes: usize,
    #[serde(default = "default_bytes")]
    pub reply_bytes: usize,
}

fn default_bytes() -> usize {
    16
}

pub struct EchoDriverFactory {
    body: Vec<u8>,
    reply_bytes: usize,
}

impl EchoDriverFactory {
    /// `cfg` within the contract's bounds (`driver.request_bytes`, `driver.reply_bytes`:
    /// with their headers, frames of at most `DEFAULT_MAX_FRAME_BYTES`), checked before.
    pub fn new(cfg: EchoDriverConfig) -> Result<Self, String> {
        let mut body = (cfg.reply_bytes as u32).to_le_bytes().to_vec();
        body.resize(cfg.request_bytes.max(4), 0);
        Ok(EchoDriverFactory {
            body,
            reply_bytes: cfg.reply_bytes,
        })
    }
}

struct EchoDriver {
    body: Vec<u8>,
}

impl Driver for EchoDriver {
    fn next_request(&mut self, body: &mut Vec<u8>) -> (u16, u32) {
        body.extend_from_slice(&self.body);
        (OP_ECHO, 0)
    }
}

impl DriverFactory for EchoDriverFactory {
    fn driver(&self, _seed: u64, _stream: u64) -> Box<dyn Driver> {
        Box::new(EchoDriver {
            body: self.body.clone(),
        })
    }

    fn check_reply(&self, _op: u16, body: &[u8]) -> Result<(), String> {
        if body.len() == self.reply_bytes {
            Ok(())
        } else {
            Err(format!(
                "expected {} reply bytes, got {}",
                self.reply_bytes,
                body.len()
            ))
        }
    }
}
