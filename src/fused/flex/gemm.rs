//! Matrix products on strided f32 views, through the gemm crate (which picks its AVX2 or AVX-512
//! kernels at run time). gemm splits a product into tiles of the output and never splits the
//! inner dimension, so a product has the same bits on any number of threads.

use gemm::{gemm, Parallelism};

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
