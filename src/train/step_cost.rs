//! What a training step costs a GPU beyond its arithmetic, counted rather than timed: kernel
//! launches by op family, blocking reads of device values by the host, bytes cast between float
//! types, and the device memory pool's peak.
//!
//! These are properties of the program, not of the machine: the same step over wgpu on Mesa's
//! CPU Vulkan (lavapipe) launches the same kernels as on an H100, so CI can pin them as upper
//! bounds where it cannot time a GPU. Launches are seen through CubeCL's launch observer, on the
//! thread that issues them; host reads and casts are counted where the crate issues them
//! ([`count_host_read`], [`fused::mixed::cast_counted`](crate::fused::mixed::cast_counted)).

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use burn::tensor::Device;
use serde::{Deserialize, Serialize};

use crate::fused::mixed::{cast_bytes, reset_cast_bytes, CastBytes};

/// The op families launches are counted by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum OpFamily {
    /// Matrix products (the linear layers, the LM head's blocks).
    Matmul,
    /// The attention kernels, forward and backward.
    Attention,
    /// RMSNorm and LayerNorm, forward and backward.
    Norm,
    /// Element-wise kernels: fused element-wise chains, binary and unary ops, SwiGLU, RoPE.
    ElementWise,
    /// Casts between float types.
    Cast,
    /// Reductions (sums, means, maxima) outside the fused ops.
    Reduction,
    /// The cross-entropy loss and its gradient.
    Loss,
    /// Every launch of the optimiser phase: the global gradient norm, clipping, the loss scale's
    /// decision and the parameter update.
    Optimizer,
    /// Copies, gathers, slices, random numbers and anything not named above.
    Other,
}

impl OpFamily {
    /// Every family, in report order.
    pub const ALL: [OpFamily; 9] = [
        OpFamily::Matmul,
        OpFamily::Attention,
        OpFamily::Norm,
        OpFamily::ElementWise,
        OpFamily::Cast,
        OpFamily::Reduction,
        OpFamily::Loss,
        OpFamily::Optimizer,
        OpFamily::Other,
    ];

    /// The family's name in reports and records.
    pub fn name(self) -> &'static str {
        match self {
            OpFamily::Matmul => "matmul",
            OpFamily::Attention => "attention",
            OpFamily::Norm => "norm",
            OpFamily::ElementWise => "element-wise",
            OpFamily::Cast => "cast",
            OpFamily::Reduction => "reduction",
            OpFamily::Loss => "loss",
            OpFamily::Optimizer => "optimizer",
            OpFamily::Other => "other",
        }
    }

    /// The family of a kernel launched in the forward or backward pass, from its name as CubeCL
    /// gives it (a Rust type path, generics included: `cubek_matmul::..::MatmulEntry<..>`). Only
    /// the path before the generics counts, without its crate (this crate's name holds "layernorm"),
    /// so that neither a kernel generic over a norm's type nor any kernel of this crate is taken
    /// for a norm.
    pub fn of_kernel(name: &str) -> OpFamily {
        let base = name.split('<').next().unwrap_or(name);
        let path = base.split_once("::").map_or(base, |(_crate, path)| path).to_ascii_lowercase();
        let kernel = path.rsplit("::").next().unwrap_or(&path).to_string();
        let has = |words: &[&str]| words.iter().any(|word| path.contains(word));
        if has(&["matmul", "gemm"]) {
            OpFamily::Matmul
        } else if has(&["attention", "flash"]) {
            OpFamily::Attention
        } else if has(&["rmsnorm", "rms_norm", "layernorm", "layer_norm", "norm_weight"]) {
            OpFamily::Norm
        } else if has(&["cross_entropy", "crossentropy", "lm_head"]) {
            OpFamily::Loss
        } else if kernel.contains("cast") {
            OpFamily::Cast
        } else if has(&["reduce", "sum", "mean", "argmax", "argmin"]) {
            OpFamily::Reduction
        } else if has(&["elemwise", "binop", "unary", "scalar", "swiglu", "rope", "clamp", "mask", "fuse"]) {
            OpFamily::ElementWise
        } else {
            OpFamily::Other
        }
    }
}

/// What one optimiser step cost, counted over one step after the warm-up.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct StepCost {
    /// Kernel launches by family, where the device runs CubeCL kernels (wgpu, Vulkan, CUDA);
    /// empty on CPU devices, whose ops are calls, not launches.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub launches: Vec<(OpFamily, usize)>,
    /// Each kernel's launches (the name before its generics), the most launched first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kernels: Vec<(String, usize)>,
    /// Blocking reads of device values by the host inside the step (each one drains the device's
    /// queue before the host can issue more work).
    pub host_reads: usize,
    /// Bytes the forward pass's casts between float types wrote: of the weights, of the
    /// activations. The backward casts each gradient back, as many bytes again.
    pub cast_bytes: CastBytes,
    /// The most bytes the device's memory pools held at once, since the process started (the
    /// warm-up included): their pages at their peak, or what they reserve at the step's end where
    /// that is more. `None` where the device has no pool (CPU devices).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool_peak_bytes: Option<u64>,
}

impl StepCost {
    /// All launches of the step.
    pub fn total_launches(&self) -> usize {
        self.launches.iter().map(|(_, n)| n).sum()
    }

    /// The launches of one family.
    pub fn launches_of(&self, family: OpFamily) -> usize {
        self.launches.iter().find(|(f, _)| *f == family).map_or(0, |(_, n)| *n)
    }
}

thread_local! {
    /// Whether a count runs on this thread (the one that runs the step): host reads are counted
    /// only then, so that other threads' steps are not counted.
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static HOST_READS: Cell<usize> = const { Cell::new(0) };
}

/// Whether the launches now issued belong to the optimiser phase. Process-wide, as CubeCL's
/// launch observer is: the fusion backend may issue a step's launches from a thread of its own.
static IN_OPTIMIZER: AtomicBool = AtomicBool::new(false);

/// Records a blocking read of a device value by the host (`into_scalar`, `into_data`) during a
/// step: call it beside every such read on the step's path.
pub fn count_host_read() {
    if COUNTING.get() {
        HOST_READS.set(HOST_READS.get() + 1);
    }
}

/// The step's phases, for attributing launches.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepPhase {
    /// The forward and backward passes.
    ForwardBackward,
    /// From the gradients to the updated parameters.
    Optimizer,
}

/// Counts what `step` costs on `device`: it is given a function that starts a phase (the step
/// calls it with [`StepPhase::Optimizer`] once the gradients are computed). `device` is synced
/// before and after each phase, so that every launch is counted in its phase (a fusion backend
/// launches queued work only when flushed); the count is therefore one step apart from the
/// timed ones.
pub fn count_step<R>(device: &Device, step: impl FnOnce(&mut dyn FnMut(StepPhase)) -> R) -> (R, StepCost) {
    let _ = device.sync();
    let launches = LaunchCounts::start();
    HOST_READS.set(0);
    reset_cast_bytes();
    IN_OPTIMIZER.store(false, Ordering::Relaxed);
    COUNTING.set(true);
    let mut phase = |phase: StepPhase| {
        let _ = device.sync();
        IN_OPTIMIZER.store(phase == StepPhase::Optimizer, Ordering::Relaxed);
    };
    let result = step(&mut phase);
    let _ = device.sync();
    COUNTING.set(false);
    IN_OPTIMIZER.store(false, Ordering::Relaxed);
    let (launches, kernels) = launches.finish();
    // The pools' pages at their peak, or what they reserve now where that is more (pools that
    // report no pages).
    let sliced_peak: Option<u64> =
        device.memory_pool_report().map(|pools| pools.iter().map(|p| p.pages_peak * p.page_size).sum());
    let reserved = device.memory_pool_usage().map(|usage| usage.bytes_reserved);
    let pool_peak_bytes = match (sliced_peak, reserved) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
    .filter(|&bytes| bytes > 0);
    let cost = StepCost { launches, kernels, host_reads: HOST_READS.get(), cast_bytes: cast_bytes(), pool_peak_bytes };
    (result, cost)
}

/// Launch counts by kernel name and phase, filled by CubeCL's launch observer (process-wide, one
/// at a time: CubeCL has one observer slot).
#[derive(Default)]
struct LaunchTally {
    /// (kernel name, launched in the optimiser phase) -> launches.
    counts: Mutex<Vec<(&'static str, bool, usize)>>,
}

impl LaunchTally {
    /// Counts a launch of `kernel` (called by CubeCL's observer, on builds that have CubeCL).
    #[cfg_attr(not(any(feature = "wgpu", feature = "cuda")), allow(dead_code))]
    fn add(&self, kernel: &'static str) {
        let optimizer = IN_OPTIMIZER.load(Ordering::Relaxed);
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        match counts.iter_mut().find(|(name, phase, _)| std::ptr::eq(*name, kernel) && *phase == optimizer) {
            Some((_, _, n)) => *n += 1,
            None => counts.push((kernel, optimizer, 1)),
        }
    }

    /// Launches by family, and by kernel (the name before its generics), the most first.
    fn summary(&self) -> LaunchSummary {
        let counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let mut families: Vec<(OpFamily, usize)> = Vec::new();
        let mut kernels: Vec<(String, usize)> = Vec::new();
        for &(name, optimizer, n) in counts.iter() {
            let family = if optimizer { OpFamily::Optimizer } else { OpFamily::of_kernel(name) };
            match families.iter_mut().find(|(f, _)| *f == family) {
                Some((_, total)) => *total += n,
                None => families.push((family, n)),
            }
            let short = short_kernel_name(name);
            match kernels.iter_mut().find(|(k, _)| *k == short) {
                Some((_, total)) => *total += n,
                None => kernels.push((short, n)),
            }
        }
        families.sort();
        kernels.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        (families, kernels)
    }
}

/// Launches by family and by kernel name.
type LaunchSummary = (Vec<(OpFamily, usize)>, Vec<(String, usize)>);

/// `a::b::Kernel<T, U>` -> `Kernel`.
fn short_kernel_name(name: &str) -> String {
    let base = name.split('<').next().unwrap_or(name);
    base.rsplit("::").next().unwrap_or(base).to_string()
}

/// A launch count in progress: CubeCL's observer installed where the build has a CubeCL backend.
struct LaunchCounts {
    tally: Arc<LaunchTally>,
    #[cfg(any(feature = "wgpu", feature = "cuda"))]
    _observation: burn_cubecl::cubecl::logging::LaunchObservation,
}

#[cfg(any(feature = "wgpu", feature = "cuda"))]
impl burn_cubecl::cubecl::logging::LaunchObserver for LaunchTally {
    fn launched(&self, kernel: &'static str) {
        self.add(kernel);
    }
}

impl LaunchCounts {
    fn start() -> Self {
        let tally = Arc::new(LaunchTally::default());
        Self {
            #[cfg(any(feature = "wgpu", feature = "cuda"))]
            _observation: burn_cubecl::cubecl::logging::LaunchObservation::new(tally.clone()),
            tally,
        }
    }

    fn finish(self) -> LaunchSummary {
        self.tally.summary()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernels_fall_in_their_families_by_name_not_by_generics() {
        let cases = [
            ("cubek_matmul::launch::MatmulEntry<TensorArgs, f16>", OpFamily::Matmul),
            ("layernorm_scaling::fused::cube::attention::AttentionForwardKernel<f32>", OpFamily::Attention),
            ("layernorm_scaling::fused::cube::rms_norm::RmsNormBackwardKernel", OpFamily::Norm),
            ("burn_cubecl::kernel::cast::base::CastElement<f32, f16>", OpFamily::Cast),
            ("burn_cubecl_fusion::engine::ElemwiseFuse", OpFamily::ElementWise),
            ("burn_cubecl::kernel::binary::KernelBinop<MulOp>", OpFamily::ElementWise),
            ("cubek_reduce::SharedSum<f32>", OpFamily::Reduction),
            (
                "layernorm_scaling::fused::cube::cross_entropy::cross_entropy_rows_kernel::CrossEntropyRowsKernel",
                OpFamily::Loss,
            ),
            ("layernorm_scaling::fused::cube::rope::rope_kernel::RopeKernel", OpFamily::ElementWise),
            (
                "layernorm_scaling::fused::cube::swiglu::swiglu_forward_kernel::SwigluForwardKernel",
                OpFamily::ElementWise,
            ),
            (
                "layernorm_scaling::fused::cube::norm_weight_sums::norm_weight_sums_kernel::NormWeightSumsKernel",
                OpFamily::Norm,
            ),
            ("burn_cubecl::kernel::prng::PrngKernel<NormalFamily>", OpFamily::Other),
            // A generic argument names a norm; the kernel is an element-wise one.
            ("burn_cubecl::kernel::unary::UnaryKernel<RmsNormish>", OpFamily::ElementWise),
        ];
        for (name, family) in cases {
            assert_eq!(OpFamily::of_kernel(name), family, "{name}");
        }
    }

    #[test]
    fn host_reads_count_only_inside_a_count() {
        let device = crate::device::parse_device("flex").unwrap();
        count_host_read();
        let ((), cost) = count_step(&device, |phase| {
            count_host_read();
            phase(StepPhase::Optimizer);
            count_host_read();
        });
        count_host_read();
        assert_eq!(cost.host_reads, 2);
        assert!(cost.launches.is_empty(), "flex launches no kernels");
        assert_eq!(cost.pool_peak_bytes, None, "flex has no device pool");
    }
}
