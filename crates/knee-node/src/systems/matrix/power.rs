//! M^P by naive repeated multiplication (P-1 products: cost linear in P, as in the report)
//! or by repeated squaring (about 2 log2 P products).
//!
//! Products use `matrixmultiply`'s dgemm: packed, cache-blocked, with AVX/FMA kernels chosen
//! at run time, so a wheel built here runs on any x86-64 and still uses the wide units.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algorithm {
    Naive,
    Squaring,
}

/// c = a * b for n x n row-major matrices.
pub fn multiply(n: usize, a: &[f64], b: &[f64], c: &mut [f64]) {
    assert!(
        a.len() == n * n && b.len() == n * n && c.len() == n * n,
        "matrix sizes differ"
    );
    let s = n as isize;
    // SAFETY: the three slices hold n*n elements each (checked above), row stride n and
    // column stride 1 stay inside them, and `c` does not alias `a` or `b` (&mut).
    unsafe {
        matrixmultiply::dgemm(
            n,
            n,
            n,
            1.0,
            a.as_ptr(),
            s,
            1,
            b.as_ptr(),
            s,
            1,
            0.0,
            c.as_mut_ptr(),
            s,
            1,
        );
    }
}

pub fn power(n: usize, m: &[f64], p: u32, algorithm: Algorithm) -> Vec<f64> {
    assert!(p >= 1, "P must be at least 1");
    match algorithm {
        Algorithm::Naive => {
            let mut acc = m.to_vec();
            let mut tmp = vec![0.0; n * n];
            for _ in 1..p {
                multiply(n, &acc, m, &mut tmp);
                std::mem::swap(&mut acc, &mut tmp);
            }
            acc
        }
        Algorithm::Squaring => {
            let mut base = m.to_vec();
            let mut acc: Option<Vec<f64>> = None;
            let mut tmp = vec![0.0; n * n];
            let mut e = p;
            loop {
                if e & 1 == 1 {
                    acc = Some(match acc {
                        None => base.clone(),
                        Some(a) => {
                            multiply(n, &a, &base, &mut tmp);
                            std::mem::replace(&mut tmp, a)
                        }
                    });
                }
                e >>= 1;
                if e == 0 {
                    break;
                }
                multiply(n, &base, &base, &mut tmp);
                std::mem::swap(&mut base, &mut tmp);
            }
            acc.unwrap_or(base)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference_multiply(n: usize, a: &[f64], b: &[f64]) -> Vec<f64> {
        let mut c = vec![0.0; n * n];
        for i in 0..n {
            for j in 0..n {
                c[i * n + j] = (0..n).map(|k| a[i * n + k] * b[k * n + j]).sum();
            }
        }
        c
    }

    fn reference_power(n: usize, m: &[f64], p: u32) -> Vec<f64> {
        (1..p).fold(m.to_vec(), |acc, _| reference_multiply(n, &acc, m))
    }

    fn test_matrix(n: usize) -> Vec<f64> {
        (0..n * n)
            .map(|i| ((i * 7919 % 101) as f64 / 101.0 - 0.5) / n as f64 * 1.5)
            .collect()
    }

    fn close(a: &[f64], b: &[f64]) -> bool {
        a.iter()
            .zip(b)
            .all(|(x, y)| (x - y).abs() <= 1e-9 * (1.0 + y.abs()))
    }

    #[test]
    fn both_algorithms_match_the_definition() {
        for n in [1, 3, 17, 50] {
            let m = test_matrix(n);
            for p in [1, 2, 3, 7, 16, 33] {
                let want = reference_power(n, &m, p);
                assert!(
                    close(&power(n, &m, p, Algorithm::Naive), &want),
                    "naive n={n} p={p}"
                );
                assert!(
                    close(&power(n, &m, p, Algorithm::Squaring), &want),
                    "squaring n={n} p={p}"
                );
            }
        }
    }

    #[test]
    fn multiply_matches_reference_at_an_odd_size() {
        let n = 37;
        let (a, b) = (
            test_matrix(n),
            test_matrix(n).iter().rev().copied().collect::<Vec<_>>(),
        );
        let mut c = vec![0.0; n * n];
        multiply(n, &a, &b, &mut c);
        assert!(close(&c, &reference_multiply(n, &a, &b)));
    }
}
