//! The systems knee-node can serve and drive. Each lives in its own folder with its server
//! side and its client role; this file only maps names to them.

pub mod chat;
pub mod echo;
pub mod grpc;
pub mod http;
pub mod matrix;
pub mod share;
pub mod slices;
pub mod stream;

use std::net::TcpListener;
use std::sync::Arc;

use serde::de::DeserializeOwned;

use crate::contract::SystemContract;
use crate::events::NoExtra;
use crate::load::config::LoadConfig;
use crate::load::driver::DriverFactory;
use crate::load::harness::ClientRole;
use crate::serve::{self, Handler, ServeOptions, StatsExtra};

/// A framed-TCP system's server: its logic and the pool size / queue bound it asks for.
/// `E` is its fields of the `stats` line.
pub struct ServerParts<E: StatsExtra = NoExtra> {
    pub handler: Arc<dyn Handler<E>>,
    pub threads: usize,
    pub max_queue: usize,
}

/// One system: its name and the three things knee-node does with it.
pub struct System {
    pub name: &'static str,
    /// `knee-node serve <name>`: builds its server from `opts.server` and serves until stopped.
    pub serve: fn(&ServeOptions) -> Result<(), String>,
    /// `knee-node load <name>`: its client role, set up and ready for the harness.
    pub client: fn(&serde_json::Value) -> Result<Box<dyn ClientRole>, String>,
    /// Its part of `knee-node describe`.
    pub contract: fn() -> SystemContract,
}

/// Every system, one registration line each.
pub const SYSTEMS: &[System] = &[
    chat::SYSTEM,
    echo::SYSTEM,
    grpc::SYSTEM,
    http::SYSTEM,
    matrix::SYSTEM,
    share::SYSTEM,
    slices::SYSTEM,
    stream::SYSTEM,
];

pub fn names() -> Vec<&'static str> {
    SYSTEMS.iter().map(|s| s.name).collect()
}

fn find(system: &str) -> Result<&'static System, String> {
    SYSTEMS
        .iter()
        .find(|s| s.name == system)
        .ok_or_else(|| format!("unknown system '{system}'; knee-node has: {}", names().join(", ")))
}

/// `knee-node serve <system>`. Every server runs on `serve`: the framed-TCP ones on
/// `serve::run` (through [`framed`]), stream's UDP service on its lifecycle.
pub fn serve(system: &str, opts: &ServeOptions) -> Result<(), String> {
    (find(system)?.serve)(opts)
}

/// `knee-node load <system>`: the system's client role, for the harness.
pub fn client(system: &str, config: &serde_json::Value) -> Result<Box<dyn ClientRole>, String> {
    (find(system)?.client)(config)
}

/// Serves a framed-TCP system's server parts on `serve::run`.
pub(crate) fn framed<E: StatsExtra>(opts: &ServeOptions, parts: ServerParts<E>) -> Result<(), String> {
    let listener =
        TcpListener::bind(&opts.listen).map_err(|e| format!("listening on {}: {e}", opts.listen))?;
    serve::run(
        listener,
        parts.handler,
        opts.framed(parts.threads, parts.max_queue),
    )
}

/// The open- or closed-loop client of a framed request/reply system, driven by `factory`
/// (built from the config's `driver` parameters).
pub(crate) fn framed_client(
    config: &serde_json::Value,
    factory: fn(&serde_json::Value) -> Result<Arc<dyn DriverFactory>, String>,
) -> Result<Box<dyn ClientRole>, String> {
    let (cfg, tcp) = LoadConfig::parse_tcp(config).map_err(|e| format!("load config: {e}"))?;
    let factory = factory(&cfg.driver)?;
    crate::load::role(cfg, tcp, factory)
}

/// Parses a system's parameters; unknown keys are errors (configs are written by the runner,
/// so an unknown key is a version mismatch worth stopping for).
pub(crate) fn parse<T: DeserializeOwned>(params: &serde_json::Value, what: &str) -> Result<T, String> {
    let v = if params.is_null() {
        serde_json::json!({})
    } else {
        params.clone()
    };
    serde_json::from_value(v).map_err(|e| format!("{what} parameters: {e}"))
}
