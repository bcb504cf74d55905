//! Element-wise loops compiled a second time for AVX2, taken when the CPU has it.
//!
//! The crate is built for any x86-64 CPU, so the compiler vectorises loops over `f32` four lanes
//! wide (SSE2). [`wide`] runs a loop inlined into a function compiled with AVX2 instead: eight
//! lanes, the same operations in the same order (no fused multiply-add is formed), so the results
//! are the same bits on either path.

/// Runs `f` as code compiled for AVX2 where the CPU has it (`f` should be `#[inline(always)]`
/// work: a closure over a slice loop is inlined into the AVX2 function).
#[inline(always)]
pub(super) fn wide<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has just been found to have AVX2.
            return unsafe { avx2(f) };
        }
    }
    f()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn avx2<R>(f: impl FnOnce() -> R) -> R {
    f()
}

#[cfg(test)]
mod tests {
    use super::super::exp::sigmoid;

    /// SwiGLU's loop, as [`super::wide`] runs it.
    #[inline(always)]
    fn swiglu(gate: &[f32], up: &[f32]) -> Vec<f32> {
        gate.iter().zip(up).map(|(&g, &u)| g * sigmoid(g) * u).collect()
    }

    #[test]
    fn the_avx2_build_of_a_loop_gives_the_same_bits() {
        let gate: Vec<f32> = (0..4099).map(|i| (i as f32 * 0.37).sin() * 9.0).collect();
        let up: Vec<f32> = (0..4099).map(|i| (i as f32 * 0.11).cos()).collect();
        let plain = swiglu(&gate, &up);
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2.
            let wide = unsafe { super::avx2(|| swiglu(&gate, &up)) };
            assert!(plain.iter().zip(&wide).all(|(a, b)| a.to_bits() == b.to_bits()));
        }
        assert_eq!(super::wide(|| swiglu(&gate, &up)), plain);
    }
}
