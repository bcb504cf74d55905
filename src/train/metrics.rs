//! Metrics burn-train does not have: the token-weighted loss, perplexity from it, the learning
//! rate of each micro-batch's step, tokens per second, the global gradient norm and model FLOP
//! utilisation.

use std::sync::Arc;
use std::time::Instant;

use burn::tensor::TensorReadError;
use burn::train::metric::state::{FormatOptions, NumericMetricState};
use burn::train::metric::{
    Metric, MetricAttributes, MetricMetadata, MetricName, Numeric, NumericAttributes, NumericEntry, SerializedEntry,
};

use super::schedule::WarmupCosine;
use super::step::StepInput;
use crate::LlamaConfig;

/// Model FLOPs per trained token: `6 N + 12 L d T` (forward and backward; N parameters, L layers,
/// d width, T sequence length), as in the PaLM paper and nanoGPT.
pub fn flops_per_token(config: &LlamaConfig, seq_len: usize) -> f64 {
    6.0 * config.num_params() as f64 + 12.0 * (config.n_layers * config.d_model * seq_len) as f64
}

/// Dense bf16 peak TFLOP/s of known GPUs, for `--peak-tflops`.
pub const KNOWN_GPU_PEAK_TFLOPS: [(&str, f64); 6] =
    [("H100 SXM", 989.0), ("H200", 989.0), ("A100", 312.0), ("L40S", 362.0), ("RTX 4090", 165.2), ("L4", 121.0)];

#[derive(Clone, Debug)]
enum Kind {
    Loss,
    Perplexity,
    TokensPerSecond,
    GradNorm,
    Mfu {
        flops_per_token: f64,
        peak_flops: f64,
    },
    /// The schedule, the step the run started after, the micro-batches of a step and those seen.
    LearningRate {
        schedule: WarmupCosine,
        start_step: usize,
        micro_batches: usize,
        seen: usize,
    },
}

/// A numeric metric computed from each step's [`StepInput`].
#[derive(Clone)]
pub struct StepMetric {
    name: MetricName,
    kind: Kind,
    state: NumericMetricState,
    /// When the first step of the epoch was reported, and the tokens reported since.
    since: Option<(Instant, usize)>,
    /// Perplexity: the epoch's loss summed over its tokens, and its tokens.
    loss_sum: (f64, usize),
}

impl StepMetric {
    fn new(name: &str, kind: Kind) -> Self {
        Self {
            name: Arc::new(name.to_string()),
            kind,
            state: NumericMetricState::new(),
            since: None,
            loss_sum: (0.0, 0),
        }
    }

    /// The mean next-token loss of each batch; over an epoch (a validation), the mean over every
    /// counted target, each batch weighted by its targets (burn-train's `LossMetric` takes the mean
    /// of the batches' means, which moves with the batch size when the last batch is short). Its
    /// name is burn-train's, "Loss".
    pub fn loss() -> Self {
        Self::new("Loss", Kind::Loss)
    }

    /// `exp(loss)` of each batch; over an epoch, `exp` of the token-weighted mean loss (not the
    /// mean of the batches' perplexities).
    pub fn perplexity() -> Self {
        Self::new("Perplexity", Kind::Perplexity)
    }

    /// Tokens per second since the first step of the epoch (robust when several devices report at once).
    pub fn tokens_per_second() -> Self {
        Self::new("Tokens per second", Kind::TokensPerSecond)
    }

    /// The global gradient norm of each optimiser step (before clipping), reported with the
    /// step's last micro-batch.
    pub fn grad_norm() -> Self {
        Self::new("Gradient norm", Kind::GradNorm)
    }

    /// `exp` of the token-weighted mean loss of the epoch so far.
    fn epoch_perplexity(&self) -> f64 {
        let (sum, tokens) = self.loss_sum;
        (sum / tokens as f64).exp()
    }

    /// The entry of a perplexity update: the batch's value, and the epoch's from the summed loss.
    fn perplexity_entry(&self, final_entry: bool) -> SerializedEntry {
        let (current, running) = (self.state.current_value().current(), self.epoch_perplexity());
        let serialized = if final_entry { NumericEntry::Final(running) } else { self.state.current_value() };
        SerializedEntry::new(format!("epoch {running:.3} - batch {current:.3}"), serialized.serialize())
    }

    /// The learning rate of the optimiser step each micro-batch belongs to, in a run that starts
    /// after `start_step` steps of `micro_batches` micro-batches (a resumed run's checkpoint).
    /// burn-train's `LearningRateMetric` logs the rate of the last step applied, so the first
    /// micro-batches of a step got the step before's, and after a start or a resume 0.0: the same
    /// run logged other rates when resumed.
    pub fn learning_rate(schedule: WarmupCosine, start_step: usize, micro_batches: usize) -> Self {
        let micro_batches = micro_batches.max(1);
        Self::new("Learning Rate", Kind::LearningRate { schedule, start_step, micro_batches, seen: 0 })
    }

    /// Model FLOP utilisation: achieved model FLOP/s over the device's peak.
    pub fn mfu(flops_per_token: f64, peak_tflops: f64) -> Self {
        Self::new("MFU", Kind::Mfu { flops_per_token, peak_flops: peak_tflops * 1e12 })
    }
}

impl Metric for StepMetric {
    type Input = StepInput;

    fn name(&self) -> MetricName {
        self.name.clone()
    }

    fn attributes(&self) -> MetricAttributes {
        let higher_is_better = matches!(self.kind, Kind::TokensPerSecond | Kind::Mfu { .. });
        NumericAttributes { unit: None, higher_is_better }.into()
    }

    fn update(&mut self, item: &StepInput, _metadata: &MetricMetadata) -> Result<SerializedEntry, TensorReadError> {
        let now = Instant::now();
        let rate = match &mut self.since {
            None => {
                self.since = Some((now, 0));
                None
            }
            Some((start, tokens)) => {
                *tokens += item.tokens;
                Some(*tokens as f64 / now.duration_since(*start).as_secs_f64().max(1e-9))
            }
        };
        if let Kind::LearningRate { schedule, start_step, micro_batches, seen } = &mut self.kind {
            *seen += 1;
            let lr = schedule.lr_at(*start_step + seen.div_ceil(*micro_batches));
            self.state.update(lr, 1);
        }
        match &self.kind {
            Kind::Loss => self.state.update(item.loss.clone().try_into_scalar::<f64>()?, item.tokens),
            Kind::LearningRate { .. } => {}
            Kind::Perplexity => {
                let loss = item.loss.clone().try_into_scalar::<f64>()?;
                self.loss_sum.0 += loss * item.tokens as f64;
                self.loss_sum.1 += item.tokens;
                self.state.update(loss.exp(), item.tokens);
                return Ok(self.perplexity_entry(false));
            }
            Kind::GradNorm => match item.grad_norm.as_ref().and_then(|slot| slot.get()) {
                Some(&norm) if norm.is_finite() => self.state.update(norm, 1),
                // Not the last micro-batch of its step, or a step skipped for an f16 overflow (whose
                // norm is not finite; a divergence stops the run on its own): weight 0.
                _ => self.state.update(f64::NAN, 0),
            },
            Kind::TokensPerSecond | Kind::Mfu { .. } => {
                let value = match (&self.kind, rate) {
                    (Kind::Mfu { flops_per_token, peak_flops }, Some(rate)) => rate * flops_per_token / peak_flops,
                    (_, Some(rate)) => rate,
                    (_, None) => 0.0,
                };
                // The first step starts the clock: recorded with weight 0.
                self.state.update(value, usize::from(rate.is_some()));
            }
        }
        Ok(self.state.compute_update(FormatOptions::new(self.name()).precision(3)))
    }

    fn compute(&mut self) -> Result<SerializedEntry, TensorReadError> {
        if matches!(self.kind, Kind::Perplexity) {
            return Ok(self.perplexity_entry(true));
        }
        Ok(self.state.compute_final(FormatOptions::new(self.name()).precision(3)))
    }

    fn clear(&mut self) {
        self.state.reset();
        self.since = None;
        self.loss_sum = (0.0, 0);
    }
}

impl Numeric for StepMetric {
    fn value(&self) -> Option<NumericEntry> {
        Some(self.state.current_value())
    }

    fn running_value(&self) -> Option<NumericEntry> {
        if matches!(self.kind, Kind::Perplexity) {
            return Some(NumericEntry::Aggregated {
                aggregated_value: self.epoch_perplexity(),
                count: self.loss_sum.1,
            });
        }
        Some(self.state.running_value())
    }

    fn final_value(&self) -> NumericEntry {
        if matches!(self.kind, Kind::Perplexity) {
            return NumericEntry::Final(self.epoch_perplexity());
        }
        self.state.final_value()
    }
}
