//! The systems knee-node can serve and drive. Each lives in its own folder with its server
//! side and its client role; this file only maps names to them.

pub mod chat;
pub mod echo;
pub mod matrix;
pub mod share;
pub mod stream;

use std::net::TcpListener;
use std::sync::Arc;

use serde::de::DeserializeOwned;

use crate::events::NoExtra;
use crate::load::config::LoadConfig;
use crate::load::driver::DriverFactory;
use crate::load::harness::ClientRole;
use crate::serve::{self, ServeOptions, Service, StatsExtra};

/// A framed-TCP system's server: its logic and the pool size / queue bound it asks for.
/// `E` is its fields of the `stats` line.
pub struct ServerParts<E: StatsExtra = NoExtra> {
    pub service: Arc<dyn Service<E>>,
    pub threads: usize,
    pub max_queue: usize,
}

pub const NAMES: &[&str] = &["chat", "echo", "matrix", "share", "stream"];

/// `knee-node serve <system>`: builds the system's server from `opts.server` and serves
/// until stopped. Every server runs on `serve`: the framed-TCP ones on `serve::run`,
/// stream's UDP service on its lifecycle.
pub fn serve(system: &str, opts: &ServeOptions) -> Result<(), String> {
    let params = &opts.server;
    match system {
        "chat" => framed(opts, chat::server::build(parse(params, "server")?)?),
        "echo" => framed(opts, echo::server(parse(params, "server")?)?),
        "matrix" => framed(opts, matrix::server::build(parse(params, "server")?)?),
        "share" => framed(opts, share::server::build(parse(params, "server")?)?),
        "stream" => stream::serve(opts),
        _ => Err(unknown(system)),
    }
}

fn framed<E: StatsExtra>(opts: &ServeOptions, parts: ServerParts<E>) -> Result<(), String> {
    let listener =
        TcpListener::bind(&opts.listen).map_err(|e| format!("listening on {}: {e}", opts.listen))?;
    serve::run(
        listener,
        parts.service,
        opts.framed(parts.threads, parts.max_queue),
    )
}

/// A system's client role (`knee-node load <system>`), set up and ready for the harness.
pub fn client(system: &str, config: &serde_json::Value) -> Result<Box<dyn ClientRole>, String> {
    match system {
        "chat" => chat::client::role(config), // closed-loop clients with failover
        "share" => share::client::role(config), // phases of operations, not a schedule
        "stream" => stream::client(config),   // the FrameAccessor, over UDP
        "echo" | "matrix" => {
            let cfg: LoadConfig =
                serde_json::from_value(config.clone()).map_err(|e| format!("load config: {e}"))?;
            let factory = driver(system, &cfg.driver)?;
            crate::load::role(cfg, factory)
        }
        _ => Err(unknown(system)),
    }
}

pub fn driver(system: &str, params: &serde_json::Value) -> Result<Arc<dyn DriverFactory>, String> {
    match system {
        "echo" => Ok(Arc::new(echo::EchoDriverFactory::new(parse(params, "driver")?)?)),
        "matrix" => Ok(Arc::new(matrix::driver::MatrixDriverFactory::new(parse(
            params, "driver",
        )?)?)),
        _ => Err(unknown(system)),
    }
}

fn unknown(system: &str) -> String {
    format!("unknown system '{system}'; knee-node has: {}", NAMES.join(", "))
}

/// Parses a system's parameters; unknown keys are errors (configs are written by the runner,
/// so an unknown key is a version mismatch worth stopping for).
fn parse<T: DeserializeOwned>(params: &serde_json::Value, what: &str) -> Result<T, String> {
    let v = if params.is_null() {
        serde_json::json!({})
    } else {
        params.clone()
    };
    serde_json::from_value(v).map_err(|e| format!("{what} parameters: {e}"))
}
