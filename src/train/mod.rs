//! Training on burn-train: config, data order, the step (clipping, accumulation), metrics,
//! checkpoints and the run itself.

mod batched_update;
mod bench;
mod budget;
mod checkpoint;
mod clip;
mod config;
mod config_file;
mod events;
mod fit;
mod guarded_adam;
mod kernel_profile;
mod loader;
mod loss_scale;
mod memory_estimate;
mod metric_logger;
mod metrics;
mod monitor;
mod optimizer;
mod prepare;
mod renderer;
mod resume;
mod resume_changes;
mod run_verdict;
mod schedule;
mod setting_kind;
mod settings;
mod step;
mod step_cost;
mod stopped;
mod strategy;
mod sweep;
mod sweep_directory;
mod sweep_plan;
mod tensorboard_logger;
mod tracking;
mod training;

pub use crate::divergence::{DivergedValue, Divergence};
pub use crate::run::RunDir;
pub use crate::sweep_error::SweepError;
pub use bench::{benchmark_step, compute_threads, cpu_model, StepBenchmark};
pub use budget::DataBudget;
pub use clip::{
    clip_factor, clip_grad_norm, clip_known_norm, global_grad_norm, grad_sum_of_squares, read_norm, scale_grads,
};
pub use config::TrainConfig;
pub use events::{Events, TrainEvent};
pub use guarded_adam::{GuardedAdam, StepGate};
pub use kernel_profile::{
    kernel_times, kernels_since, log_position, profiling_log, runs_cubecl_kernels, KernelTime, PROFILE_LOG,
    PROFILE_OPTION,
};
pub use loader::StepLoader;
pub use loss_scale::{LossScale, ScaledStep, GROWTH_INTERVAL, INITIAL_LOSS_SCALE, MIN_LOSS_SCALE};
pub use memory_estimate::{RunShape, TrainingMemory, RUNTIME_BYTES};
pub use metric_logger::RunMetricLogger;
pub use metrics::{flops_per_token, StepMetric, KNOWN_GPU_PEAK_TFLOPS};
pub use monitor::RunMonitor;
pub use optimizer::{no_decay_paths, optimizer};
pub use prepare::{check_seq_len, model_config, validation_data};
pub use renderer::PlainRenderer;
pub use resume::Start;
pub use run_verdict::{RunCaution, RunFailure, LEARNED_AT_LEAST, VANISHED_GRADIENT};
pub use schedule::{WarmupCosine, WarmupCosineConfig, WarmupCosineState};
pub use settings::{
    CheckpointSettings, DataSettings, EvalSettings, ModelSettings, OptimSettings, OptimizerKind, OutputSettings,
    DEFAULT_DATA_SEED, MAX_BUILTIN_DOCS,
};
pub use step::{GradNormSlot, LmOutput, StepInput, StepNorm, StepSettings, TrainingModel};
pub use step_cost::{count_host_read, count_step, OpFamily, StepCost, StepPhase};
pub use stopped::stopped_note;
pub use sweep::{PairAction, SweepEvent};
#[cfg(feature = "analysis")]
pub(crate) use sweep_plan::distinct;
pub use sweep_plan::{arm_name, group_name, scheme_dir_name, PairOutcome, Sweep, SweepPair, SweepRecord, SWEEP_FILE};
pub use tensorboard_logger::TensorBoardLogger;
pub use tracking::{record, Tracker};
pub use training::{train, TrainReport};
