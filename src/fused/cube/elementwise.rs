//! How the element-wise kernels (SwiGLU, RoPE) lay elements out on the GPU: one unit per element.

use burn_cubecl::cubecl::calculate_cube_count_elemwise;
use burn_cubecl::cubecl::prelude::{CubeCount, CubeDim};
use burn_cubecl::tensor::CubeTensor;

/// Units per cube in the element-wise kernels.
pub(super) const UNITS: usize = 256;

/// Cubes of [`UNITS`] units for `n` elements (or vectors), spread over the grid's axes where there are many
/// (a kernel reads its element from `ABSOLUTE_POS`, which counts across the axes).
pub(super) fn element_cubes(x: &CubeTensor, n: usize) -> CubeCount {
    calculate_cube_count_elemwise(&x.client, n, CubeDim::new_1d(UNITS as u32))
}

/// Whether the kernels' `u32` indices count `n` elements, with room for the last cube's units
/// past the end: at most `i32::MAX`.
pub(super) fn countable(n: usize) -> bool {
    i32::try_from(n).is_ok()
}
