//! Matrix products on strided f32 views, through the gemm crate (which picks its AVX2 or AVX-512
//! kernels at run time). gemm splits a product into tiles of the output and never splits the
//! inner dimension, so a product has the same bits on any number of threads; where this module
//! splits it ([`transposed_product`]), the pieces are fixed by the sizes and summed in order.

use gemm::{gemm, Parallelism};
use rayon::prelude::*;

use super::lanes::sum_in_order;

/// A matrix operand: `(values, row stride, column stride)`.
pub(super) type View<'a> = (&'a [f32], usize, usize);

/// `c[m x n] (row stride ldc) = (c if accumulate) + alpha * a b`, `a: m x k` and `b: k x n` given
/// as [`View`]s, on the calling thread (for products inside parallel tasks).
pub(super) fn matmul(
    dims: (usize, usize, usize),
    c: &mut [f32],
    ldc: usize,
    accumulate: bool,
    a: View,
    b: View,
    alpha: f32,
) {
    run(dims, (c, ldc, accumulate), a, b, alpha, Parallelism::None);
}

/// [`matmul`] of one large product, spread over rayon's threads by gemm.
pub(super) fn matmul_parallel(
    dims: (usize, usize, usize),
    c: &mut [f32],
    ldc: usize,
    accumulate: bool,
    a: View,
    b: View,
) {
    run(dims, (c, ldc, accumulate), a, b, 1.0, Parallelism::Rayon(0));
}

/// Outputs of at most this many values take [`transposed_product`]'s split of the inner
/// dimension; larger ones have enough output tiles for gemm's own split.
const SMALL_OUTPUT: usize = 1 << 18;
/// The fewest rows, and the most pieces, of [`transposed_product`]'s split.
const PIECE_ROWS: usize = 512;
const MAX_PIECES: usize = 8;

/// `a^T b: [m, n]` for row-major `a: [rows, m]` and `b: [rows, n]`: a weight's gradient from a
/// layer's input and its output's gradient, the inner dimension being the batch's rows.
///
/// A small output (a `d_model` of 128 gives 128 x 128) has too few tiles to keep the threads busy
/// over thousands of rows, so the rows are cut into at most 8 pieces (of at least 512 rows), each
/// piece's product is a task of its own, and the partial products are summed in piece order. The
/// pieces depend on the sizes alone, so the result has the same bits on any number of threads.
pub(super) fn transposed_product((rows, m, n): (usize, usize, usize), a: &[f32], b: &[f32]) -> Vec<f32> {
    if m * n > SMALL_OUTPUT || rows <= PIECE_ROWS {
        let mut output = vec![0.0f32; m * n];
        matmul_parallel((m, n, rows), &mut output, n, false, (a, 1, m), (b, n, 1));
        return output;
    }
    let piece_rows = rows.div_ceil(rows.div_ceil(PIECE_ROWS).min(MAX_PIECES));
    let partials: Vec<Vec<f32>> = (0..rows.div_ceil(piece_rows))
        .into_par_iter()
        .map(|piece| {
            let (start, end) = (piece * piece_rows, ((piece + 1) * piece_rows).min(rows));
            let mut partial = vec![0.0f32; m * n];
            let (a, b) = (&a[start * m..end * m], &b[start * n..end * n]);
            matmul((m, n, end - start), &mut partial, n, false, (a, 1, m), (b, n, 1), 1.0);
            partial
        })
        .collect();
    sum_in_order(partials.iter().map(Vec::as_slice), m * n)
}

fn run(
    (m, n, k): (usize, usize, usize),
    (c, ldc, accumulate): (&mut [f32], usize, bool),
    (a, a_rs, a_cs): View,
    (b, b_rs, b_cs): View,
    alpha: f32,
    parallelism: Parallelism,
) {
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        // A sum of nothing: zero, or `c` as it is when accumulating.
        if !accumulate {
            c.chunks_mut(ldc).take(m).for_each(|row| row[..n].fill(0.0));
        }
        return;
    }
    let last = |rows: usize, cols: usize, rs: usize, cs: usize| (rows - 1) * rs + (cols - 1) * cs;
    assert!(last(m, n, ldc, 1) < c.len() && last(m, k, a_rs, a_cs) < a.len() && last(k, n, b_rs, b_cs) < b.len());
    // SAFETY: the asserts above keep every element gemm reads or writes inside its slice, and `c`
    // is borrowed mutably, so it aliases neither input.
    unsafe {
        gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            ldc as isize,
            accumulate,
            a.as_ptr(),
            a_cs as isize,
            a_rs as isize,
            b.as_ptr(),
            b_cs as isize,
            b_rs as isize,
            if accumulate { 1.0 } else { 0.0 },
            alpha,
            false,
            false,
            false,
            parallelism,
        );
    }
}
