//! `exp` without branches or library calls, so that loops over slices compile to SIMD code
//! (libm's `expf` is a scalar call per element).
//!
//! `exp(x) = 2^n exp(r)` with `n = round(x / ln 2)` and `|r| <= ln(2) / 2`; `exp(r)` by its Taylor
//! series to `r^7` (relative error below 1e-7, about one unit in the last place of an f32).
//! Inputs are clamped to `[-87, 88]`, where `2^n` stays a normal f32: below, the result is about
//! 1.6e-38 instead of 0, which no softmax or sigmoid here can tell apart. NaN stays NaN.

const LOG2_E: f32 = std::f32::consts::LOG2_E;
/// `ln 2` split in two, so `n * LN_2_HI` is exact for the `n` that occur.
const LN_2_HI: f32 = 0.693_145_75;
const LN_2_LO: f32 = 1.428_606_8e-6;
/// Adding and subtracting `1.5 * 2^23` rounds an f32 of magnitude below `2^22` to an integer.
const ROUND: f32 = 12_582_912.0;

/// `e^x`.
#[inline(always)]
pub(super) fn exp(x: f32) -> f32 {
    let x = x.clamp(-87.0, 88.0);
    let shifted = x * LOG2_E + ROUND;
    let n = shifted - ROUND;
    let r = x - n * LN_2_HI - n * LN_2_LO;
    let p = 1.0
        + r * (1.0
            + r * (1.0 / 2.0
                + r * (1.0 / 6.0 + r * (1.0 / 24.0 + r * (1.0 / 120.0 + r * (1.0 / 720.0 + r * (1.0 / 5040.0)))))));
    p * power_of_two(shifted)
}

/// `2^n` for the integer `n` in `[-126, 127]` that `shifted = n + ROUND` holds in its low
/// mantissa bits: read there (not by `n as i32`, whose saturating conversion is scalar code), so
/// that the whole of [`exp`] stays in SIMD lanes.
#[inline(always)]
fn power_of_two(shifted: f32) -> f32 {
    f32::from_bits(shifted.to_bits().wrapping_sub(ROUND.to_bits()).wrapping_add(127) << 23)
}

/// `1 / (1 + e^-x)`.
#[inline(always)]
pub(super) fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp(-x))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_standard_exp_to_a_few_ulps() {
        let mut worst: f32 = 0.0;
        for i in -87_000..=88_000 {
            let x = i as f32 / 1000.0;
            let (ours, std) = (exp(x), x.exp());
            worst = worst.max(((ours - std) / std).abs());
        }
        assert!(worst < 4e-7, "worst relative error {worst}");
        assert_eq!(exp(0.0), 1.0);
        assert!(exp(f32::NAN).is_nan());
        assert!(exp(f32::NEG_INFINITY) < 1e-37);
    }

    #[test]
    fn the_power_of_two_read_from_the_bits_is_the_one_of_the_conversion() {
        for n in -126..=127 {
            let from_bits = power_of_two(n as f32 + ROUND);
            assert_eq!(from_bits, f32::from_bits(((n + 127) as u32) << 23), "2^{n}");
            assert_eq!(from_bits, 2f32.powi(n), "2^{n}");
        }
    }

    #[test]
    fn sigmoid_matches_its_definition() {
        for x in [-30.0f32, -5.5, -1.0, 0.0, 0.3, 2.0, 17.0] {
            let expected = 1.0 / (1.0 + (-x).exp());
            assert!((sigmoid(x) - expected).abs() <= 1e-6 * expected, "sigmoid({x})");
        }
    }
}
