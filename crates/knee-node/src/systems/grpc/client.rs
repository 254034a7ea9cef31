//! `knee-node load grpc`: the grpc target's client role on the load harness. The config is
//! parsed and the call built (proto compiled, message encoded) before anything else, so a
//! mistake fails the node in one line before the start.

use super::config::GrpcConfig;
use crate::load::harness::ClientRole;

pub fn role(config: &serde_json::Value) -> Result<Box<dyn ClientRole>, String> {
    let cfg = GrpcConfig::parse(config).map_err(|e| format!("load config: {e}"))?;
    Err(format!(
        "load grpc: {} is built ({} bytes), but the HTTP/2 transport is not in this build yet",
        cfg.call.path,
        cfg.call.body.len()
    ))
}
