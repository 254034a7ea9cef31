//! The PN's work: an RGB image to grayscale with the report's `0.3 R + 0.59 G + 0.11 B`,
//! and an FNV-1a checksum of the result so the client and the tests can check it.
//!
//! Integer arithmetic, `(30 R + 59 G + 11 B + 50) / 100`: the formula rounded to nearest with
//! ties up, exactly (0.3 has no exact binary float, so a float version would disagree on
//! ties). The Python reference computes the same with numpy integers.

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// Writes the grayscale of `rgb` (a multiple of 3 bytes; a trailing partial pixel is
/// ignored) into `out`, replacing its contents.
pub fn grayscale(rgb: &[u8], out: &mut Vec<u8>) {
    out.clear();
    out.extend(rgb.chunks_exact(3).map(|p| {
        let v = 30 * p[0] as u32 + 59 * p[1] as u32 + 11 * p[2] as u32 + 50;
        (v / 100) as u8
    }));
}

pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes
        .iter()
        .fold(FNV_OFFSET, |h, &b| (h ^ b as u64).wrapping_mul(FNV_PRIME))
}

/// The work of one item: the grayscale computed `repeat` times (the capacity knob where no
/// CPU limit can be set), and the checksum of the result.
pub fn work_repeat(rgb: &[u8], repeat: u32, out: &mut Vec<u8>) -> u64 {
    for _ in 0..repeat.max(1) {
        grayscale(std::hint::black_box(rgb), out);
        std::hint::black_box(&*out);
    }
    fnv1a(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    /// The formula in f64 with exact ties (the reference): 0.3 R + 0.59 G + 0.11 B.
    fn reference(r: u8, g: u8, b: u8) -> u8 {
        let hundredths = 30 * r as u32 + 59 * g as u32 + 11 * b as u32;
        let x = hundredths as f64 / 100.0;
        let down = x.floor();
        // Ties (an exact .5 in hundredths) go up.
        (if hundredths % 100 >= 50 { down + 1.0 } else { down }) as u8
    }

    #[test]
    fn every_pixel_matches_the_formula() {
        let mut out = Vec::new();
        for r in (0..=255u8).step_by(5) {
            for g in 0..=255u8 {
                for b in (0..=255u8).step_by(3) {
                    grayscale(&[r, g, b], &mut out);
                    assert_eq!(out[0], reference(r, g, b), "{r} {g} {b}");
                }
            }
        }
        grayscale(&[255, 255, 255, 0, 0, 0, 1], &mut out);
        assert_eq!(out, vec![255, 0]);
    }

    #[test]
    fn the_checksum_is_fnv1a_and_repeats_do_not_change_it() {
        assert_eq!(fnv1a(b""), FNV_OFFSET);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        let mut rng = Rng::new(4);
        let rgb: Vec<u8> = (0..8190).map(|_| rng.next_u64() as u8).collect();
        let mut out = Vec::new();
        let once = work_repeat(&rgb, 1, &mut out);
        assert_eq!(out.len(), 2730);
        assert_eq!(work_repeat(&rgb, 5, &mut out), once);
    }
}
