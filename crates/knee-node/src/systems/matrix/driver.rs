//! The matrix client driver: n x n matrices, P fixed or uniform in [p_min, p_max].
//!
//! Matrices are random row-stochastic (positive entries, each row sums to 1): every power of
//! such a matrix is stochastic too, so M^P neither overflows nor decays into subnormal
//! numbers, which would change the cost of the arithmetic with P.

use serde::Deserialize;

use super::{encode_request, OP_POWER};
use crate::load::driver::{Driver, DriverFactory};
use crate::rng::Rng;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MatrixDriverConfig {
    #[serde(default = "default_n")]
    pub n: usize,
    #[serde(default = "default_same")]
    pub same_matrix: bool,
    #[serde(default)]
    pub p: Option<u32>,
    #[serde(default)]
    pub p_min: Option<u32>,
    #[serde(default)]
    pub p_max: Option<u32>,
}

pub(crate) fn default_n() -> usize {
    50
}
pub(crate) fn default_same() -> bool {
    true
}

pub struct MatrixDriverFactory {
    n: usize,
    same_matrix: bool,
    p_min: u32,
    p_max: u32,
}

impl MatrixDriverFactory {
    pub fn new(cfg: MatrixDriverConfig) -> Result<Self, String> {
        let (p_min, p_max) = match (cfg.p, cfg.p_min, cfg.p_max) {
            (Some(p), None, None) => (p, p),
            (None, Some(lo), Some(hi)) if lo <= hi => (lo, hi),
            _ => return Err("give either p, or p_min <= p_max".into()),
        };
        // P and n within 1..=MAX_P and 1..=MAX_N (`super`): the contract's bounds, checked before.
        Ok(MatrixDriverFactory {
            n: cfg.n,
            same_matrix: cfg.same_matrix,
            p_min,
            p_max,
        })
    }
}

/// A random row-stochastic n x n matrix.
pub fn stochastic_matrix(n: usize, rng: &mut Rng) -> Vec<f64> {
    let mut m: Vec<f64> = (0..n * n).map(|_| 0.05 + rng.uniform()).collect();
    for row in m.chunks_exact_mut(n) {
        let sum: f64 = row.iter().sum();
        row.iter_mut().for_each(|x| *x /= sum);
    }
    m
}

struct MatrixDriver {
    n: usize,
    p_min: u32,
    p_max: u32,
    rng: Rng,
    /// The one matrix every request carries, when `same_matrix`.
    fixed: Option<Vec<f64>>,
}

impl Driver for MatrixDriver {
    fn next_request(&mut self, body: &mut Vec<u8>) -> (u16, u32) {
        let p = self.rng.range_u32(self.p_min, self.p_max);
        match &self.fixed {
            Some(m) => encode_request(self.n, p, m, body),
            None => encode_request(self.n, p, &stochastic_matrix(self.n, &mut self.rng), body),
        }
        (OP_POWER, p)
    }
}

impl DriverFactory for MatrixDriverFactory {
    fn driver(&self, seed: u64, stream: u64) -> Box<dyn Driver> {
        // The same matrix for every sender of a run: derived from the seed alone.
        let fixed = self
            .same_matrix
            .then(|| stochastic_matrix(self.n, &mut Rng::new(seed)));
        Box::new(MatrixDriver {
            n: self.n,
            p_min: self.p_min,
            p_max: self.p_max,
            rng: Rng::new(seed.wrapping_add(stream.wrapping_mul(0x9E37_79B9))),
            fixed,
        })
    }

    fn check_reply(&self, _op: u16, body: &[u8]) -> Result<(), String> {
        let want = 4 + self.n * self.n * 8;
        if body.len() != want {
            return Err(format!("expected a {want}-byte result, got {}", body.len()));
        }
        let n = u32::from_le_bytes([body[0], body[1], body[2], body[3]]) as usize;
        if n != self.n {
            return Err(format!("result is {n} x {n}, expected {0} x {0}", self.n));
        }
        Ok(())
    }
}
