//! Reductions in a fixed order, which give the same bits on any number of threads: over a row
//! (eight running lanes, then the rest, which the compiler vectorises), and over the per-task
//! partial sums of a parallel loop (in task order). The row functions are always inlined, so a
//! caller compiled for AVX2 (`simd::wide`) runs them eight lanes wide.

/// Values per block of [`sum`]: a row this long or shorter is summed in f32 alone.
const SUM_BLOCK: usize = 1024;

/// A sum in a fixed order: eight running sums per block of [`SUM_BLOCK`] values (which the
/// compiler vectorises), the blocks' sums added in f64, so that a long row (a vocabulary's
/// logits) keeps its precision.
#[inline(always)]
pub(super) fn sum(values: &[f32]) -> f32 {
    if values.len() <= SUM_BLOCK {
        return block_sum(values);
    }
    values.chunks(SUM_BLOCK).map(|block| block_sum(block) as f64).sum::<f64>() as f32
}

/// Eight running sums, then the rest.
#[inline(always)]
fn block_sum(values: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 8];
    let chunks = values.chunks_exact(8);
    let rest: f32 = chunks.remainder().iter().sum();
    for chunk in chunks {
        for (lane, &v) in lanes.iter_mut().zip(chunk) {
            *lane += v;
        }
    }
    lanes.iter().sum::<f32>() + rest
}

/// The largest value (NaN if any is NaN, so that a NaN score spreads as in the reference).
#[inline(always)]
pub(super) fn max(values: &[f32]) -> f32 {
    let mut lanes = [f32::NEG_INFINITY; 8];
    let chunks = values.chunks_exact(8);
    let rest = chunks.remainder().iter().fold(f32::NEG_INFINITY, |m, &v| if v > m || v.is_nan() { v } else { m });
    for chunk in chunks {
        for (lane, &v) in lanes.iter_mut().zip(chunk) {
            *lane = if v > *lane || v.is_nan() { v } else { *lane };
        }
    }
    lanes.iter().fold(rest, |m, &v| if v > m || v.is_nan() { v } else { m })
}

/// `sum(a * b)` in a fixed order, as [`sum`].
#[inline(always)]
pub(super) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 8];
    let (a_chunks, b_chunks) = (a.chunks_exact(8), b.chunks_exact(8));
    let rest: f32 = a_chunks.remainder().iter().zip(b_chunks.remainder()).map(|(a, b)| a * b).sum();
    for (a, b) in a_chunks.zip(b_chunks) {
        for ((lane, &a), &b) in lanes.iter_mut().zip(a).zip(b) {
            *lane += a * b;
        }
    }
    lanes.iter().sum::<f32>() + rest
}

/// `sum(a * b * c)` in a fixed order, as [`sum`].
#[inline(always)]
pub(super) fn dot3(a: &[f32], b: &[f32], c: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 8];
    let (a_chunks, b_chunks, c_chunks) = (a.chunks_exact(8), b.chunks_exact(8), c.chunks_exact(8));
    let rest = a_chunks.remainder().iter().zip(b_chunks.remainder()).zip(c_chunks.remainder());
    let rest: f32 = rest.map(|((a, b), c)| a * b * c).sum();
    for ((a, b), c) in a_chunks.zip(b_chunks).zip(c_chunks) {
        for (((lane, &a), &b), &c) in lanes.iter_mut().zip(a).zip(b).zip(c) {
            *lane += a * b * c;
        }
    }
    lanes.iter().sum::<f32>() + rest
}

/// The element-wise sum of `partials` (each `d` values, one per task), added in task order.
pub(super) fn sum_in_order<'a>(partials: impl IntoIterator<Item = &'a [f32]>, d: usize) -> Vec<f32> {
    let mut total = vec![0.0f32; d];
    for partial in partials {
        total.iter_mut().zip(partial).for_each(|(total, p)| *total += p);
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_sum_keeps_f32_precision() {
        // Eight million values near 1.5: eight f32 lanes alone would drift by about 1e-3.
        let values: Vec<f32> = (0..1u32 << 23).map(|i| 1.0 + (i % 1000) as f32 / 1000.0).collect();
        let exact: f64 = values.iter().map(|&v| v as f64).sum();
        let ours = sum(&values) as f64;
        assert!(((ours - exact) / exact).abs() < 1e-6, "{ours} vs {exact}");
        // A short row is summed as before: eight lanes, then the rest.
        let row = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0];
        assert_eq!(sum(&row), 45.0);
    }
}
