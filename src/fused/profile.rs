//! Time spent in each fused op, forward and backward, for `bench --breakdown`.
//!
//! Off unless [`start`]ed: then each fused op's kernel call under autodiff is timed with the wall
//! clock. That is the op's time on the CPU backends, which compute when called; a GPU backend
//! only queues the work, so its figures say little.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

/// The op kinds timed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    /// [`causal_attention`](super::causal_attention), [`causal_attention_packed`](super::causal_attention_packed)
    /// (which applies the model's RoPE as it loads) and [`rope`](super::rope) on its own.
    Attention,
    /// [`rms_norm`](super::rms_norm) and [`layer_norm`](super::layer_norm).
    Norm,
    /// [`swiglu`](super::swiglu) and [`swiglu_packed`](super::swiglu_packed).
    Swiglu,
    /// [`linear`](super::linear) and [`linear_packed`](super::linear_packed): the linear layers'
    /// matrix products, and the packing of their weights.
    Linear,
}

impl OpKind {
    /// Every kind, in report order.
    pub const ALL: [OpKind; 4] = [OpKind::Attention, OpKind::Norm, OpKind::Swiglu, OpKind::Linear];

    /// The kind's name in reports.
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Attention => "attention with RoPE",
            OpKind::Norm => "norms (RMSNorm, LayerNorm)",
            OpKind::Swiglu => "SwiGLU",
            OpKind::Linear => "linear layers (matmuls)",
        }
    }
}

static ENABLED: AtomicBool = AtomicBool::new(false);
static NANOS: [AtomicU64; OpKind::ALL.len()] = [const { AtomicU64::new(0) }; OpKind::ALL.len()];

/// Starts timing (from zero).
pub fn start() {
    for total in &NANOS {
        total.store(0, Ordering::Relaxed);
    }
    ENABLED.store(true, Ordering::Relaxed);
}

/// Stops timing and returns the seconds spent in each kind since [`start`].
pub fn stop() -> Vec<(OpKind, f64)> {
    ENABLED.store(false, Ordering::Relaxed);
    OpKind::ALL.iter().map(|&kind| (kind, NANOS[kind as usize].swap(0, Ordering::Relaxed) as f64 * 1e-9)).collect()
}

/// Runs `f`, adding its wall time to `kind` while timing is on (the ops are timed under autodiff).
#[cfg_attr(not(feature = "autodiff"), allow(dead_code))]
pub(super) fn timed<R>(kind: OpKind, f: impl FnOnce() -> R) -> R {
    if !ENABLED.load(Ordering::Relaxed) {
        return f();
    }
    let start = Instant::now();
    let result = f();
    NANOS[kind as usize].fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
    result
}
