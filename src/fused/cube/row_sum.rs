//! The sum of one value per unit over a cube: what the row kernels reduce a row with.

use burn_cubecl::cubecl;
use cubecl::prelude::*;

/// The sum of `value` over the cube's `block` units (a power of two, the cube's size), by halving
/// in shared memory; every unit gets it. Every unit of the cube must call it (it synchronises).
#[cube]
pub(super) fn cube_sum(value: f32, #[comptime] block: usize) -> f32 {
    let mut shared = Shared::<[f32]>::new_slice(block);
    let unit = UNIT_POS as usize;
    shared[unit] = value;
    sync_cube();
    let mut stride = CUBE_DIM as usize / 2;
    while stride > 0 {
        if unit < stride {
            shared[unit] += shared[unit + stride];
        }
        sync_cube();
        stride /= 2;
    }
    let total = shared[0];
    sync_cube();
    total
}
