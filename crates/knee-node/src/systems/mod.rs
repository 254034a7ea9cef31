//! The systems knee-node can serve and drive. Each lives in its own folder with its server
//! side and its client role; this file only maps names to them.

pub mod chat;
pub mod echo;
pub mod matrix;
pub mod share;
pub mod stream;

use std::sync::Arc;

use serde::de::DeserializeOwned;

use crate::load::config::LoadConfig;
use crate::load::driver::DriverFactory;
use crate::load::harness::ClientRole;
use crate::serve::Service;

/// A system's server: its logic and the pool size / queue bound it asks for.
pub struct ServerParts {
    pub service: Arc<dyn Service>,
    pub threads: usize,
    pub max_queue: usize,
}

pub const NAMES: &[&str] = &["chat", "echo", "matrix", "share", "stream"];

pub fn server(system: &str, params: &serde_json::Value) -> Result<ServerParts, String> {
    match system {
        "chat" => chat::server::build(parse(params, "server")?),
        "echo" => echo::server(parse(params, "server")?),
        "matrix" => matrix::server::build(parse(params, "server")?),
        _ => Err(unknown(system)),
    }
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
