//! A small, seedable random number generator (xoshiro256**), and the draws knee needs.
//!
//! Own code rather than a crate: a few lines, no build cost, and the stream of numbers for a
//! seed never changes under a dependency upgrade, so a run is reproducible from its spec.

pub struct Rng {
    s: [u64; 4],
}

impl Rng {
    pub fn new(seed: u64) -> Self {
        // SplitMix64 expands the seed so nearby seeds give unrelated streams.
        let mut z = seed;
        let mut next = || {
            z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut x = z;
            x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            x ^ (x >> 31)
        };
        Rng {
            s: [next(), next(), next(), next()],
        }
    }

    pub fn next_u64(&mut self) -> u64 {
        let result = self.s[1].wrapping_mul(5).rotate_left(7).wrapping_mul(9);
        let t = self.s[1] << 17;
        self.s[2] ^= self.s[0];
        self.s[3] ^= self.s[1];
        self.s[1] ^= self.s[2];
        self.s[0] ^= self.s[3];
        self.s[2] ^= t;
        self.s[3] = self.s[3].rotate_left(45);
        result
    }

    /// Uniform in [0, 1).
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Exponential with the given mean.
    pub fn exponential(&mut self, mean: f64) -> f64 {
        // 1 - u is in (0, 1], so the log is finite.
        -mean * (1.0 - self.uniform()).ln()
    }

    /// Uniform integer in [lo, hi] (inclusive).
    pub fn range_u32(&mut self, lo: u32, hi: u32) -> u32 {
        let span = (hi - lo) as u64 + 1;
        lo + (self.next_u64() % span) as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exponential_mean_and_uniform_range() {
        let mut r = Rng::new(7);
        let n = 200_000;
        let mean = (0..n).map(|_| r.exponential(2.0)).sum::<f64>() / n as f64;
        assert!((mean - 2.0).abs() < 0.03, "mean {mean}");
        assert!((0..10_000).all(|_| {
            let x = r.range_u32(5, 9);
            (5..=9).contains(&x)
        }));
    }

    #[test]
    fn same_seed_same_stream() {
        let (mut a, mut b) = (Rng::new(3), Rng::new(3));
        assert!((0..100).all(|_| a.next_u64() == b.next_u64()));
        assert_ne!(Rng::new(3).next_u64(), Rng::new(4).next_u64());
    }
}
