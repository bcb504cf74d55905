//! Reductions in a fixed order, which give the same bits on any number of threads: over a row
//! (eight running lanes, then the rest, which the compiler vectorises), and over the per-task
//! partial sums of a parallel loop (in task order).

/// A sum in a fixed order (eight running sums, then the rest), which the compiler vectorises.
pub(super) fn sum(values: &[f32]) -> f32 {
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

/// The element-wise sum of `partials` (each `d` values, one per task), added in task order.
pub(super) fn sum_in_order<'a>(partials: impl IntoIterator<Item = &'a [f32]>, d: usize) -> Vec<f32> {
    let mut total = vec![0.0f32; d];
    for partial in partials {
        total.iter_mut().zip(partial).for_each(|(total, p)| *total += p);
    }
    total
}
