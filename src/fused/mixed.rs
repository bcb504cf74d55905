//! Mixed precision, as PyTorch's autocast: the half type (bf16 or f16) that the matrix products,
//! attention and the LM head compute in while weights, the residual stream, the norms, the loss
//! and the optimiser stay in f32.
//!
//! Under mixed precision [`linear`](super::linear), [`causal_attention`](super::causal_attention)
//! and the LM head's loss ([`lm_head_cross_entropy`](crate::model::lm_head_cross_entropy)) cast
//! their f32 inputs to the half type, compute (accumulating in f32 where the backend's kernels do:
//! GPU matrix products, the attention kernels, softmax and the loss always), and hand back f32.
//! Under autodiff the casts are nodes of the graph, so each gradient comes back in f32 too.
//! Tensors already in a half type (a whole-bf16 device), and tensors on a device that lacks the
//! half type (ndarray, say, beside a GPU), are left as they are.
//!
//! The setting is the process's ([`set_half_compute`], which
//! [`set_precision`](crate::device::set_precision) calls, and which [`train`](crate::train::train) puts
//! back as it was when it returns), or one thread's ([`with_half_compute`]).

use std::cell::Cell;
use std::sync::atomic::{AtomicU8, Ordering};

use burn::tensor::{DType, Device, FloatDType, Tensor};
use serde::{Deserialize, Serialize};

const NONE: u8 = 0;
const BF16: u8 = 1;
const F16: u8 = 2;

static PROCESS: AtomicU8 = AtomicU8::new(NONE);

thread_local! {
    /// This thread's choice: `None` follows the process's.
    static THREAD: Cell<Option<Option<FloatDType>>> = const { Cell::new(None) };
}

fn encode(half: Option<FloatDType>) -> u8 {
    match half {
        None | Some(FloatDType::F32) | Some(FloatDType::F64) | Some(FloatDType::Flex32) => NONE,
        Some(FloatDType::BF16) => BF16,
        Some(FloatDType::F16) => F16,
    }
}

fn decode(code: u8) -> Option<FloatDType> {
    match code {
        BF16 => Some(FloatDType::BF16),
        F16 => Some(FloatDType::F16),
        _ => None,
    }
}

/// Sets the half type of the whole process (every thread without a [`with_half_compute`] of its
/// own): `Some(BF16)` or `Some(F16)` for mixed precision, `None` (or a full-width type) for none.
pub fn set_half_compute(half: Option<FloatDType>) {
    PROCESS.store(encode(half), Ordering::Relaxed);
}

/// Runs `f` with `half` as this thread's half type, then restores the thread's previous choice.
pub fn with_half_compute<R>(half: Option<FloatDType>, f: impl FnOnce() -> R) -> R {
    super::with_thread_value(&THREAD, Some(decode(encode(half))), f)
}

/// The half type in effect on this thread: [`with_half_compute`]'s, else the process's.
pub fn half_compute() -> Option<FloatDType> {
    THREAD.with(Cell::get).unwrap_or_else(|| decode(PROCESS.load(Ordering::Relaxed)))
}

/// The type an op computes in for inputs of `dtype` on `device`: the half type under mixed
/// precision when the inputs are f32 and the device has it, else `dtype` itself.
pub fn compute_dtype(dtype: DType, device: &Device) -> DType {
    match (dtype, half_compute()) {
        (DType::F32, Some(half)) if device.supports_dtype(half) => half.into(),
        _ => dtype,
    }
}

/// Puts the process's half type back, when dropped, to what it was when this was made: for a
/// call that sets it (a training run) and must not leave it set for the caller.
pub struct RestoreHalfCompute(u8);

impl RestoreHalfCompute {
    /// Remembers the process's half type now.
    pub fn now() -> Self {
        Self(PROCESS.load(Ordering::Relaxed))
    }
}

impl Drop for RestoreHalfCompute {
    fn drop(&mut self) {
        PROCESS.store(self.0, Ordering::Relaxed);
    }
}

/// What a cast converts: a weight (the same values every micro-batch of an optimiser step) or an
/// activation (new values every pass).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CastOf {
    /// A parameter.
    Weight,
    /// An activation or an op's output.
    Activation,
}

/// Bytes written by casts between float types on one thread since [`reset_cast_bytes`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CastBytes {
    /// Bytes of cast weights.
    pub weights: u64,
    /// Bytes of cast activations.
    pub activations: u64,
}

thread_local! {
    static CAST_BYTES: Cell<CastBytes> = const { Cell::new(CastBytes { weights: 0, activations: 0 }) };
}

/// `x` cast to `dtype`, its written bytes counted as a cast of `of` (see [`cast_bytes`]); no cast
/// and nothing counted when `x` is in `dtype` already.
pub fn cast_counted<const D: usize>(x: Tensor<D>, dtype: DType, of: CastOf) -> Tensor<D> {
    if x.dtype() == dtype {
        return x;
    }
    count_cast(x.shape().num_elements() * dtype.size(), of);
    x.cast(dtype)
}

/// Counts `bytes` written by a cast of `of` that an op makes on its own (see [`cast_bytes`]).
pub fn count_cast(bytes: usize, of: CastOf) {
    CAST_BYTES.with(|counted| {
        let mut sum = counted.get();
        match of {
            CastOf::Weight => sum.weights += bytes as u64,
            CastOf::Activation => sum.activations += bytes as u64,
        }
        counted.set(sum);
    });
}

/// `f` applied to `x` cast to `dtype`, its result cast back to `x`'s type (both counted as
/// activations; neither cast is made where the types agree).
pub fn cast_around<const D: usize, const E: usize>(
    x: Tensor<D>,
    dtype: DType,
    f: impl FnOnce(Tensor<D>) -> Tensor<E>,
) -> Tensor<E> {
    let original = x.dtype();
    cast_counted(f(cast_counted(x, dtype, CastOf::Activation)), original, CastOf::Activation)
}

/// `f` applied to `x` in the type its ops compute in ([`compute_dtype`]: under mixed precision the
/// half type), its result back in `x`'s type. A sub-block (attention, the feed-forward network)
/// runs in this, so that its projections, RoPE, attention and SwiGLU pass half-precision tensors
/// between them and the backward saves the half copies, as PyTorch's autocast does; the residual
/// stream and the norms' statistics stay f32. An input already in the half type (an RMSNorm's
/// output, made in it) is not cast, nor is the result cast back.
pub fn in_compute_dtype<const D: usize, const E: usize>(
    x: Tensor<D>,
    f: impl FnOnce(Tensor<D>) -> Tensor<E>,
) -> Tensor<E> {
    let dtype = compute_dtype(x.dtype(), &x.device());
    cast_around(x, dtype, f)
}

/// The bytes this thread's counted casts wrote since [`reset_cast_bytes`].
pub fn cast_bytes() -> CastBytes {
    CAST_BYTES.with(Cell::get)
}

/// Starts this thread's cast count from zero.
pub fn reset_cast_bytes() {
    CAST_BYTES.with(|counted| counted.set(CastBytes::default()));
}
