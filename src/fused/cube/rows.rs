//! How the row kernels (the norms) lay rows out on the GPU.

use burn::backend::TensorMetadata;
use burn_cubecl::cubecl::prelude::CubeCount;
use burn_cubecl::cubecl::server::CubeCountSelection;
use burn_cubecl::tensor::CubeTensor;

/// Units per cube in the row kernels, at most: a power of two, at most what every runtime allows.
pub(super) const BLOCK: usize = 256;

/// Units per cube for rows of `d` values: a value per unit up to [`BLOCK`], and at least a warp
/// (32), so that a narrow row (`d = 64`) does not leave most of a cube idle. A power of two.
pub(super) fn row_block(d: usize) -> usize {
    d.next_power_of_two().clamp(32, BLOCK)
}

/// Blocks of rows a weight-gradient kernel splits the rows into, at most: partial sums per column.
const MAX_PARTIALS: usize = 256;

/// The rows of `x: [..., d]` and `d`.
pub(super) fn rows_and_width(x: &CubeTensor) -> (usize, usize) {
    let shape = x.shape();
    let d = shape[shape.num_dims() - 1];
    (shape.num_elements() / d.max(1), d)
}

/// Cubes for `rows` rows, one each, spread over the grid's axes where there are many.
pub(super) fn row_cubes(x: &CubeTensor, rows: usize) -> CubeCount {
    CubeCountSelection::new(&x.client, rows as u32).cube_count()
}

/// `(partial sums per column, rows per partial)` for a weight gradient over `rows` rows.
pub(super) fn partial_blocks(rows: usize) -> (usize, usize) {
    let partials = rows.clamp(1, MAX_PARTIALS);
    (partials, rows.div_ceil(partials).max(1))
}
