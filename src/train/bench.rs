//! The training step timed: forward, loss, backward, clipping and the optimiser update, exactly
//! as a run takes them ([`TrainingModel`]'s `TrainStep`), on random tokens. `examples/bench.rs`
//! prints and compares these figures; `scripts/torch_bench.py` writes the same record for PyTorch.

use std::time::Instant;

use burn::tensor::{Device, Int, Tensor, TensorData};
use burn::train::TrainStep;
use serde::{Deserialize, Serialize};

use super::kernel_profile::{self, KernelTime};
use super::loss_scale::LossScale;
use super::metrics::flops_per_token;
use super::optimizer::optimizer;
use super::prepare::{check_step_memory, model_config};
use super::step::{StepSettings, TrainingModel};
use super::step_cost::{count_step, StepCost, StepPhase};
use super::TrainConfig;
use crate::data::LmBatch;
use crate::fused;
use crate::fused::profile::OpKind;
use crate::fused::OpPath;
use crate::seed::splitmix64;
use crate::{device::set_precision, error::Error};

/// What one benchmark measured: the same record for this crate and for PyTorch
/// (`scripts/torch_bench.py`), so that the two can be compared line by line.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepBenchmark {
    /// `layernorm-scaling` or `pytorch` (with its mode, e.g. `pytorch eager`).
    pub framework: String,
    /// The device (`flex`, `wgpu`, `cuda:0`, `cpu`, ...).
    pub device: String,
    /// The precision: `f32`, `bf16`, `bf16-mixed` or `f16-mixed`.
    pub dtype: String,
    /// Layers, width and parameters of the model.
    pub n_layers: usize,
    /// Model width.
    pub d_model: usize,
    /// Vocabulary size.
    pub vocab_size: usize,
    /// Parameters.
    pub parameters: u64,
    /// Sequences per step.
    pub batch_size: usize,
    /// Tokens per sequence.
    pub seq_len: usize,
    /// Median wall time of a step, in milliseconds.
    pub step_ms: f64,
    /// Tokens per second at the median step.
    pub tokens_per_second: f64,
    /// Peak memory, in bytes: on a GPU the device memory its allocator reserved (the most over
    /// the steps), on a CPU device the process's peak resident memory.
    pub peak_memory_bytes: Option<u64>,
    /// Achieved TFLOP/s, counting `6N + 12 L d T` FLOPs per token.
    pub tflops: f64,
    /// Model FLOPs utilisation: against `--peak-tflops`, or a known GPU's dense bf16 peak
    /// ([`KNOWN_PEAK_TFLOPS`](crate::device::KNOWN_PEAK_TFLOPS)).
    pub mfu: Option<f64>,
    /// The GPU's name, where the driver or wgpu tells it; none on CPU devices.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<String>,
    /// Seconds from building the model to the end of the first step: on a GPU mostly compiling
    /// and autotuning kernels (paid again for each new shape, and by each run unless built with
    /// the `autotune-cache` feature, docs/backends.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_step_seconds: Option<f64>,
    /// Compute threads (CPU).
    pub threads: Option<usize>,
    /// The processor's model name, where the operating system tells it.
    pub cpu: Option<String>,
    /// The path of the transformer ops: `fused` or `reference` (`LAYERNORM_SCALING_OPS`); none
    /// in PyTorch's records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ops: Option<String>,
    /// Where the median step's time went, in milliseconds: each fused op (forward and backward),
    /// the optimiser, and the rest (the LM head and loss, embedding, element-wise ops). Empty on the
    /// reference path, whose ops are Burn's. Wall-clock figures: meaningful on CPU devices only
    /// (a GPU queues work and returns).
    #[serde(default, deserialize_with = "null_as_empty", skip_serializing_if = "Vec::is_empty")]
    pub breakdown: Vec<(String, f64)>,
    /// Each GPU kernel's device time over the timed steps, the longest first, where CubeCL's
    /// profiling log is on ([`profiling_log`](super::profiling_log); `bench --kernel-profile` on a
    /// CubeCL device: wgpu, Vulkan, CUDA); else empty. Step times are then longer than without
    /// (each kernel waits for the one before).
    #[serde(default, deserialize_with = "null_as_empty", skip_serializing_if = "Vec::is_empty")]
    pub kernels: Vec<KernelTime>,
    /// What one optimiser step costs beyond its arithmetic (launches by op family, host reads,
    /// bytes cast, the device pool's peak), counted over one step after the timed ones; none in
    /// PyTorch's records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<StepCost>,
}

/// A missing or `null` list is an empty one.
fn null_as_empty<'de, D: serde::Deserializer<'de>, T: Deserialize<'de>>(deserializer: D) -> Result<Vec<T>, D::Error> {
    Ok(Option::deserialize(deserializer)?.unwrap_or_default())
}

/// Times `iters` training steps of the model `config` describes (`model`, `layers`, `norm`,
/// `batch_size`, `seq_len`, `bf16`, the optimiser settings) on `device`, after `warmup` steps.
///
/// The device's precision is set here: a device can take one precision per process, so each
/// precision is measured in its own process (the bench example does so).
pub fn benchmark_step(
    config: &TrainConfig,
    device: &Device,
    warmup: usize,
    iters: usize,
) -> Result<StepBenchmark, Error> {
    config.validate()?;
    let _restore = fused::RestoreHalfCompute::now();
    let model_config = model_config(config)?;
    let mut device = device.clone();
    set_precision(&mut device, config.training_precision())?;
    device.seed(config.seed);
    check_step_memory(config, &model_config, std::slice::from_ref(&device))?;
    let on_gpu = !crate::memory::uses_host_memory(&device);
    let started = Instant::now();
    let device = device.autodiff();
    let settings = StepSettings {
        clip_grad_norm: config.optim.clip_grad_norm,
        loss_scale: LossScale::for_precision(config.training_precision()),
        ..StepSettings::default()
    };
    let model = TrainingModel::new(model_config.init(&device)?, settings);
    let mut optim = optimizer(config, &model_config, &model, model.gate());
    let mut model = Some(model);
    let (batch, seq) = (config.optim.batch_size, config.data.seq_len);
    // Token ids drawn on the host: a float draw cast to int rounds up to `vocab` in bf16.
    let vocab = model_config.vocab_size as u64;
    let ids: Vec<i64> = (0..batch * (seq + 1)).map(|i| (splitmix64(config.seed ^ i as u64) % vocab) as i64).collect();
    let tokens = Tensor::<2, Int>::from_data(TensorData::new(ids, [batch, seq + 1]), &device);
    let batch_of =
        |tokens: &Tensor<2, Int>| LmBatch::new(tokens.clone().narrow(1, 0, seq), tokens.clone().narrow(1, 1, seq));
    let ops = fused::current_path();
    // Per timed step: its wall time (ms) and, on the fused path, where it went.
    let mut steps: Vec<(f64, Vec<(String, f64)>)> = Vec::with_capacity(iters);
    let (mut first_step_seconds, mut device_memory) = (None, None::<u64>);
    // CubeCL's profiling log, where it is on: the launches of the timed steps start here.
    let (profile_log, mut timed_launches_from) = (kernel_profile::profiling_log(), 0);
    for iteration in 0..warmup + iters {
        crate::io::crash_point("bench:step");
        if iteration == warmup {
            // The warm-up ended with a sync: its kernels (autotune trials included) are logged.
            timed_launches_from = profile_log.as_deref().map_or(0, kernel_profile::log_position);
        }
        fused::profile::start();
        let start = Instant::now();
        let current = model.take().expect("the model is put back after every step");
        let output = current.step(batch_of(&tokens));
        let optimiser_start = Instant::now();
        let next = current.optimize(&mut optim, config.optim.lr.into(), output.grads);
        device.sync().map_err(|e| Error::Training(format!("the device failed: {e:?}")))?;
        model = Some(next);
        first_step_seconds.get_or_insert(started.elapsed().as_secs_f64());
        if let Some(usage) = device.memory_pool_usage().filter(|_| on_gpu) {
            device_memory = Some(device_memory.unwrap_or(0).max(usage.bytes_reserved));
        }
        let optimiser_ms = optimiser_start.elapsed().as_secs_f64() * 1e3;
        let step_ms = start.elapsed().as_secs_f64() * 1e3;
        let fused_seconds = fused::profile::stop();
        if iteration >= warmup {
            let parts = match ops {
                OpPath::Fused => breakdown(step_ms, fused_seconds, optimiser_ms),
                OpPath::Reference => Vec::new(),
            };
            steps.push((step_ms, parts));
        }
    }
    let kernels = match &profile_log {
        Some(log) => kernel_profile::kernels_since(log, timed_launches_from)
            .map_err(|e| Error::file(log, format!("cannot read CubeCL's profiling log: {e}")))?,
        None => Vec::new(),
    };
    // One more step after the timed ones (and after their profile is read), counted: its
    // launches, host reads and casts (the device synced between its phases).
    let current = model.take().expect("the model is put back after every step");
    let ((), cost) = count_step(&device, |phase| {
        let output = current.step(batch_of(&tokens));
        phase(StepPhase::Optimizer);
        drop(current.optimize(&mut optim, config.optim.lr.into(), output.grads));
    });
    // The median step, and where its own time went.
    steps.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (times, breakdown): (Vec<f64>, Vec<_>) = steps.into_iter().unzip();
    let breakdown = breakdown.into_iter().nth(times.len() / 2).unwrap_or_default();
    let step_ms = times.get(times.len() / 2).copied().unwrap_or(f64::NAN);
    let tokens_per_second = (batch * seq) as f64 / (step_ms / 1e3);
    let tflops = flops_per_token(&model_config, seq) * tokens_per_second / 1e12;
    let gpu = on_gpu.then(|| crate::device::gpu_name(&config.device)).flatten();
    let peak_tflops = config.output.peak_tflops.or_else(|| gpu.as_deref().and_then(crate::device::known_peak_tflops));
    Ok(StepBenchmark {
        framework: "layernorm-scaling".into(),
        device: config.device.clone(),
        dtype: config.training_precision().name().into(),
        n_layers: model_config.n_layers,
        d_model: model_config.d_model,
        vocab_size: model_config.vocab_size,
        parameters: model_config.num_params() as u64,
        batch_size: batch,
        seq_len: seq,
        step_ms,
        tokens_per_second,
        peak_memory_bytes: if on_gpu { device_memory } else { crate::memory::peak_resident_bytes() },
        tflops,
        mfu: peak_tflops.map(|peak| tflops / peak),
        gpu,
        first_step_seconds,
        threads: Some(compute_threads()),
        cpu: cpu_model(),
        ops: Some(ops.name().into()),
        breakdown,
        kernels,
        cost: Some(cost),
    })
}

/// Milliseconds of one step spent in each fused op, the optimiser and the rest, from the step's
/// time (ms), the fused ops' times (s) and the optimiser's (ms).
fn breakdown(step_ms: f64, fused_seconds: Vec<(OpKind, f64)>, optimiser_ms: f64) -> Vec<(String, f64)> {
    let mut parts: Vec<(String, f64)> =
        fused_seconds.into_iter().map(|(kind, seconds)| (kind.name().to_string(), seconds * 1e3)).collect();
    parts.push(("optimiser".into(), optimiser_ms));
    let accounted: f64 = parts.iter().map(|(_, ms)| ms).sum();
    parts.push(("the rest (LM head and loss, embedding, element-wise)".into(), (step_ms - accounted).max(0.0)));
    parts
}

/// The threads CPU backends compute with: `RAYON_NUM_THREADS` when set, else one per core.
pub fn compute_threads() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    std::env::var("RAYON_NUM_THREADS").ok().and_then(|n| n.trim().parse().ok()).filter(|&n| n > 0).unwrap_or(cores)
}

/// The processor's model name (`/proc/cpuinfo`), where the system tells it.
pub fn cpu_model() -> Option<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    let line = info.lines().find(|line| line.starts_with("model name"))?;
    Some(line.split_once(':')?.1.trim().to_string())
}
