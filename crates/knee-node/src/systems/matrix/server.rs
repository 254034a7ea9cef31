//! The matrix server: decode, look up the cache, compute, encode.

use std::sync::Arc;

use serde::Deserialize;

use super::cache::FifoCache;
use super::power::{power, Algorithm};
use super::{bytes_to_f64s, decode_request, FLAG_CACHE_HIT, OP_POWER};
use crate::serve::{Handler, Outcome};
use crate::systems::ServerParts;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MatrixServerConfig {
    #[serde(default = "default_algorithm")]
    pub algorithm: String,
    #[serde(default = "default_threads")]
    pub threads: usize,
    #[serde(default)]
    pub cache: usize,
    #[serde(default = "default_max_queue")]
    pub max_queue: usize,
}

pub(crate) fn default_algorithm() -> String {
    "naive".into()
}
pub(crate) fn default_threads() -> usize {
    1
}
pub(crate) fn default_max_queue() -> usize {
    100_000
}
/// Bounds that keep a mistyped config from exhausting the machine: a thread per worker,
/// an entry (a result matrix) per cache slot, a queued request's memory per queue slot.
pub(crate) const MAX_THREADS: usize = 256;
pub(crate) const MAX_CACHE: usize = 1_000_000;
pub(crate) const MAX_QUEUE: usize = 10_000_000;

pub fn build(cfg: MatrixServerConfig) -> Result<ServerParts, String> {
    let algorithm = match cfg.algorithm.as_str() {
        "naive" => Algorithm::Naive,
        "squaring" => Algorithm::Squaring,
        other => return Err(format!("algorithm '{other}': expected naive or squaring")),
    };
    if cfg.threads == 0 {
        return Err("threads must be at least 1 (1 serves one request at a time)".into());
    }
    let service = MatrixHandler {
        algorithm,
        cache: (cfg.cache > 0).then(|| FifoCache::new(cfg.cache)),
    };
    Ok(ServerParts {
        handler: Arc::new(service),
        threads: cfg.threads,
        max_queue: cfg.max_queue.max(1),
    })
}

pub struct MatrixHandler {
    algorithm: Algorithm,
    cache: Option<FifoCache>,
}

impl Handler for MatrixHandler {
    fn handle(&self, op: u16, body: &[u8], reply: &mut Vec<u8>) -> Outcome {
        if op != OP_POWER {
            return Outcome::unknown_op(reply, "matrix", op);
        }
        let req = match decode_request(body) {
            Ok(r) => r,
            Err(reason) => return Outcome::bad_request(reply, &reason),
        };
        if let Some(hit) = self.cache.as_ref().and_then(|c| c.get(req.p, req.matrix_bytes)) {
            reply.extend_from_slice(&hit);
            return Outcome {
                flags: FLAG_CACHE_HIT,
                ..Outcome::ok()
            };
        }
        let m = bytes_to_f64s(req.matrix_bytes);
        let result = power(req.n, &m, req.p, self.algorithm);
        reply.extend_from_slice(&(req.n as u32).to_le_bytes());
        for x in &result {
            reply.extend_from_slice(&x.to_le_bytes());
        }
        if let Some(cache) = &self.cache {
            cache.insert(req.p, req.matrix_bytes, Arc::new(reply.clone()));
        }
        Outcome::ok()
    }
}
