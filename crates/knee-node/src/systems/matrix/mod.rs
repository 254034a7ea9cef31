//! matrix (report 004): a server computes M^P for an n x n f64 matrix.
//!
//! Request body: `n u32 | p u32 | n*n f64` (row-major). Reply body: `n u32 | n*n f64`.
//! Reply flag bit 0: the result came from the cache.

pub mod cache;
pub mod driver;
pub mod power;
pub mod server;

use super::{framed, framed_client, parse, System};
use crate::contract::{Key, SystemContract};

pub const SYSTEM: System = System {
    name: "matrix",
    serve: |opts| framed(opts, server::build(parse(&opts.server, "server")?)?),
    client: |config| {
        framed_client(config, |driver| {
            Ok(std::sync::Arc::new(driver::MatrixDriverFactory::new(parse(
                driver, "driver",
            )?)?))
        })
    },
    contract: || {
        SystemContract::new()
            .op("power", OP_POWER)
            .flag("cache_hit", FLAG_CACHE_HIT)
            .column("op", "op", "always power")
            .column("arg", "arg", "the exponent P")
            .column("flags", "flags", "bit 0: served from the result cache")
            .reads::<server::MatrixServerConfig>("server")
            .key(
                "server.algorithm",
                Key::one_of(&["naive", "squaring"]).default(server::default_algorithm()),
            )
            .key(
                "server.threads",
                Key::int(1, server::MAX_THREADS).default(server::default_threads()),
            )
            .key("server.cache", Key::int(0, server::MAX_CACHE).default(0))
            .key(
                "server.max_queue",
                Key::int(1, server::MAX_QUEUE).default(server::default_max_queue()),
            )
            .reads::<driver::MatrixDriverConfig>("driver")
            .key("driver.n", Key::int(1, MAX_N).default(driver::default_n()))
            .key("driver.same_matrix", Key::bool().default(driver::default_same()))
            .key("driver.p", Key::int(1, MAX_P))
            .key("driver.p_min", Key::int(1, MAX_P))
            .key("driver.p_max", Key::int(1, MAX_P))
    },
};

pub const OP_POWER: u16 = 1;
pub const FLAG_CACHE_HIT: u16 = 1;
/// Largest n the server accepts: a 1024 x 1024 matrix is 8 MiB, within the frame limit.
pub const MAX_N: usize = 1024;
/// Largest P: naive M^P with n = 50 and P = 10^6 already takes tens of seconds.
pub const MAX_P: u32 = 1_000_000;

/// A parsed request: the matrix stays as bytes until a cache miss needs it as numbers.
pub struct PowerRequest<'a> {
    pub n: usize,
    pub p: u32,
    pub matrix_bytes: &'a [u8],
}

pub fn decode_request(body: &[u8]) -> Result<PowerRequest<'_>, String> {
    if body.len() < 8 {
        return Err(format!(
            "matrix request of {} bytes is shorter than its 8-byte header",
            body.len()
        ));
    }
    let n = u32::from_le_bytes([body[0], body[1], body[2], body[3]]) as usize;
    let p = u32::from_le_bytes([body[4], body[5], body[6], body[7]]);
    if n == 0 || n > MAX_N {
        return Err(format!("n = {n} is outside 1..={MAX_N}"));
    }
    if p == 0 || p > MAX_P {
        return Err(format!("P = {p} is outside 1..={MAX_P}"));
    }
    let matrix_bytes = &body[8..];
    if matrix_bytes.len() != n * n * 8 {
        return Err(format!(
            "a {n} x {n} matrix is {} bytes, the request carries {}",
            n * n * 8,
            matrix_bytes.len()
        ));
    }
    Ok(PowerRequest { n, p, matrix_bytes })
}

pub fn encode_request(n: usize, p: u32, matrix: &[f64], out: &mut Vec<u8>) {
    out.extend_from_slice(&(n as u32).to_le_bytes());
    out.extend_from_slice(&p.to_le_bytes());
    for x in matrix {
        out.extend_from_slice(&x.to_le_bytes());
    }
}

pub fn bytes_to_f64s(bytes: &[u8]) -> Vec<f64> {
    bytes
        .chunks_exact(8)
        .map(|c| f64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
        .collect()
}
