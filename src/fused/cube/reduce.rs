//! Reductions of one value per unit over a cube: what the row kernels reduce a row with.

use burn_cubecl::cubecl;
use cubecl::prelude::*;

/// The sum of `value` over the cube's `block` units (a power of two, the cube's size); every unit
/// gets it. Every unit of the cube must call it (it synchronises).
#[cube]
pub(super) fn cube_sum(value: f32, #[comptime] block: usize) -> f32 {
    cube_reduce(value, false, block)
}

/// The maximum of `value` over the cube's `block` units, as [`cube_sum`].
#[cube]
pub(super) fn cube_max(value: f32, #[comptime] block: usize) -> f32 {
    cube_reduce(value, true, block)
}

/// The sum (or, with `take_max`, the maximum) of `value` over the cube, by halving in shared
/// memory: a fixed tree, so the result does not depend on the units' timing.
#[cube]
fn cube_reduce(value: f32, #[comptime] take_max: bool, #[comptime] block: usize) -> f32 {
    let mut shared = Shared::<[f32]>::new_slice(block);
    let unit = UNIT_POS as usize;
    shared[unit] = value;
    sync_cube();
    let mut stride = CUBE_DIM as usize / 2;
    while stride > 0 {
        if unit < stride {
            let other = shared[unit + stride];
            if take_max {
                shared[unit] = f32::max(shared[unit], other);
            } else {
                shared[unit] += other;
            }
        }
        sync_cube();
        stride /= 2;
    }
    let total = shared[0];
    sync_cube();
    total
}
