//! Metrics burn-train does not have: the token-weighted loss, perplexity from it, the learning
//! rate of each micro-batch's step, tokens per second, the global gradient norm, the f16 loss
//! scale and its skipped steps, and model FLOP utilisation.

use std::sync::Arc;
use std::time::Instant;

use burn::tensor::TensorReadError;
use burn::train::metric::state::{FormatOptions, NumericMetricState};
use burn::train::metric::{
    Metric, MetricAttributes, MetricMetadata, MetricName, Numeric, NumericAttributes, NumericEntry, SerializedEntry,
};

use super::loss_scale::ScaleReport;
use super::schedule::WarmupCosine;
use super::step::StepInput;
use crate::model::LlamaConfig;

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
    LossScale,
    SkippedSteps,
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

/// What the micro-batches of the optimiser step being reported gave so far. A step is
/// `grad_accum` micro-batches on every device, each a separate item to burn-train (on several
/// devices in the order the devices finish, so any of them may carry the step's gradient norm).
#[derive(Clone, Debug, Default)]
struct StepSoFar {
    /// Its micro-batches seen, and how many it has.
    seen: usize,
    of: usize,
    /// Their tokens, and their losses summed over their tokens.
    tokens: usize,
    loss_sum: f64,
    /// The step's global gradient norm, once a micro-batch brought it.
    grad_norm: Option<f64>,
    /// Under a loss scale (f16): the scale after the step, and the steps skipped so far.
    scale: Option<ScaleReport>,
}

impl StepSoFar {
    /// Whether every micro-batch of the step is in.
    fn done(&self) -> bool {
        self.seen >= self.of
    }

    /// The token-weighted mean loss of its micro-batches so far.
    fn loss(&self) -> f64 {
        self.loss_sum / self.tokens.max(1) as f64
    }
}

/// A numeric metric computed from each step's [`StepInput`]. The loss, perplexity and learning
/// rate log a value for every micro-batch; the gradient norm, tokens per second and MFU one per
/// optimiser step, once all its micro-batches are in (on every device), so that no row stands for
/// a micro-batch that has no value. The value shown in progress lines ([`Numeric::value`]) is the
/// step's: over all its micro-batches and devices.
#[derive(Clone)]
pub struct StepMetric {
    name: MetricName,
    kind: Kind,
    state: NumericMetricState,
    /// When the epoch's first micro-batch started, and the tokens of its steps done since.
    since: Option<(Instant, usize)>,
    /// The step being reported.
    step: StepSoFar,
    /// What progress lines show after the last update: the step's value, `None` while a metric
    /// reported once a step waits for the step's other micro-batches.
    shown: Option<NumericEntry>,
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
            step: StepSoFar::default(),
            shown: None,
            loss_sum: (0.0, 0),
        }
    }

    /// The mean next-token loss of each batch; over an epoch (a validation), the mean over every
    /// counted target, each batch weighted by its targets (burn-train's `LossMetric` takes the mean
    /// of the batches' means, which moves with the batch size when the last batch is short). Its
    /// name is burn-train's, "Loss". Progress lines show the step's: over its micro-batches.
    pub fn loss() -> Self {
        Self::new("Loss", Kind::Loss)
    }

    /// `exp(loss)` of each batch; over an epoch, `exp` of the token-weighted mean loss (not the
    /// mean of the batches' perplexities).
    pub fn perplexity() -> Self {
        Self::new("Perplexity", Kind::Perplexity)
    }

    /// Tokens per second, logged once per optimiser step: the tokens of the epoch's steps so far
    /// (every micro-batch on every device) over the time since the epoch's first micro-batch
    /// started.
    pub fn tokens_per_second() -> Self {
        Self::new("Tokens per second", Kind::TokensPerSecond)
    }

    /// The global gradient norm of each optimiser step (before clipping), logged once per step
    /// (none for a step skipped for an f16 overflow, whose norm is not finite).
    pub fn grad_norm() -> Self {
        Self::new("Gradient norm", Kind::GradNorm)
    }

    /// Under f16 mixed precision, the loss scale after each optimiser step, logged once per step.
    pub fn loss_scale() -> Self {
        Self::new("Loss scale", Kind::LossScale)
    }

    /// Under f16 mixed precision, the steps skipped for overflow so far in the run (a resumed
    /// run's included), logged once per optimiser step.
    pub fn skipped_steps() -> Self {
        Self::new("Skipped steps", Kind::SkippedSteps)
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

    /// Model FLOP utilisation: achieved model FLOP/s over the device's peak, logged as tokens per
    /// second is.
    pub fn mfu(flops_per_token: f64, peak_tflops: f64) -> Self {
        Self::new("MFU", Kind::Mfu { flops_per_token, peak_flops: peak_tflops * 1e12 })
    }

    /// Adds `item`, a micro-batch with loss `loss` (read for the metrics that need it), to the
    /// step being reported (a new one when the last is done) and to the epoch's clock.
    fn add_to_step(&mut self, item: &StepInput, loss: Option<f64>) {
        if self.step.done() {
            self.step = StepSoFar::default();
        }
        self.step.of = item.step_micro_batches.max(1);
        self.step.seen += 1;
        self.step.tokens += item.tokens;
        self.step.loss_sum += loss.unwrap_or(0.0) * item.tokens as f64;
        if let Some(norm) = item.grad_norm.as_ref().and_then(|slot| slot.get()) {
            self.step.grad_norm = Some(norm.value());
            self.step.scale = norm.scale();
        }
        let (start, mut tokens) = self.since.unwrap_or((item.started, 0));
        if self.step.done() {
            tokens += self.step.tokens;
        }
        self.since = Some((start.min(item.started), tokens));
    }

    /// The value of a metric logged once per step, at the end of its step: the step's gradient
    /// norm (when finite), or the epoch's tokens per second (MFU) so far.
    fn step_value(&self) -> Option<f64> {
        if !self.step.done() {
            return None;
        }
        let rate = || {
            let (start, tokens) = self.since?;
            Some(tokens as f64 / start.elapsed().as_secs_f64().max(1e-9))
        };
        match &self.kind {
            Kind::GradNorm => self.step.grad_norm.filter(|norm| norm.is_finite()),
            Kind::LossScale => self.step.scale.map(|scale| scale.scale),
            Kind::SkippedSteps => self.step.scale.map(|scale| scale.skipped as f64),
            Kind::TokensPerSecond => rate(),
            Kind::Mfu { flops_per_token, peak_flops } => rate().map(|rate| rate * flops_per_token / peak_flops),
            _ => None,
        }
    }

    /// Whether the metric logs once per optimiser step rather than once per micro-batch.
    fn once_per_step(&self) -> bool {
        matches!(
            self.kind,
            Kind::GradNorm | Kind::LossScale | Kind::SkippedSteps | Kind::TokensPerSecond | Kind::Mfu { .. }
        )
    }

    /// The epoch's final value: the epoch's rate for tokens per second and MFU (the last, which
    /// spans the whole epoch), the mean of the logged values otherwise.
    fn epoch_value(&self) -> NumericEntry {
        match self.kind {
            Kind::Perplexity => NumericEntry::Final(self.epoch_perplexity()),
            Kind::TokensPerSecond | Kind::Mfu { .. } => NumericEntry::Final(self.state.current_value().current()),
            _ => self.state.final_value(),
        }
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
        let loss = match self.kind {
            Kind::Loss | Kind::Perplexity => Some(item.loss.clone().try_into_scalar::<f64>()?),
            _ => None,
        };
        self.add_to_step(item, loss);
        let format = FormatOptions::new(self.name()).precision(3);
        if self.once_per_step() {
            let Some(value) = self.step_value() else {
                // The step's other micro-batches are still to come (or its norm is not finite: a
                // step skipped for an f16 overflow; a divergence stops the run on its own): nothing
                // is logged, and the dashboard keeps the text of the last step.
                self.shown = None;
                let formatted = match self.state.running_value() {
                    NumericEntry::Aggregated { count, .. } if count > 0 => self.state.compute_update(format).formatted,
                    _ => SerializedEntry::not_available(None).formatted,
                };
                return Ok(SerializedEntry::new(formatted, SerializedEntry::NOT_AVAILABLE.into()));
            };
            self.state.update(value, 1);
            self.shown = Some(self.state.current_value());
            return Ok(self.state.compute_update(format));
        }
        match &mut self.kind {
            Kind::LearningRate { schedule, start_step, micro_batches, seen } => {
                *seen += 1;
                let lr = schedule.lr_at(*start_step + seen.div_ceil(*micro_batches));
                self.state.update(lr, 1);
                self.shown = Some(self.state.current_value());
            }
            Kind::Loss => {
                let loss = loss.unwrap_or(f64::NAN);
                self.state.update(loss, item.tokens);
                let (aggregated_value, count) = (self.step.loss(), self.step.tokens);
                self.shown = Some(NumericEntry::Aggregated { aggregated_value, count });
            }
            Kind::Perplexity => {
                let loss = loss.unwrap_or(f64::NAN);
                self.loss_sum.0 += loss * item.tokens as f64;
                self.loss_sum.1 += item.tokens;
                self.state.update(loss.exp(), item.tokens);
                let (aggregated_value, count) = (self.step.loss().exp(), self.step.tokens);
                self.shown = Some(NumericEntry::Aggregated { aggregated_value, count });
                return Ok(self.perplexity_entry(false));
            }
            // Logged once per step, above.
            Kind::GradNorm | Kind::LossScale | Kind::SkippedSteps | Kind::TokensPerSecond | Kind::Mfu { .. } => {}
        }
        Ok(self.state.compute_update(format))
    }

    fn compute(&mut self) -> Result<SerializedEntry, TensorReadError> {
        if matches!(self.kind, Kind::Perplexity) {
            return Ok(self.perplexity_entry(true));
        }
        if matches!(self.kind, Kind::TokensPerSecond | Kind::Mfu { .. }) {
            let rate = self.epoch_value().current();
            return Ok(SerializedEntry::new(format!("epoch {rate:.3}"), self.epoch_value().serialize()));
        }
        Ok(self.state.compute_final(FormatOptions::new(self.name()).precision(3)))
    }

    fn clear(&mut self) {
        self.state.reset();
        self.since = None;
        self.step = StepSoFar::default();
        self.shown = None;
        self.loss_sum = (0.0, 0);
    }
}

impl Numeric for StepMetric {
    /// The step's value (over its micro-batches on every device); `None` while a metric logged
    /// once a step waits for the rest of its step.
    fn value(&self) -> Option<NumericEntry> {
        self.shown.clone()
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
        self.epoch_value()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use burn::data::dataloader::Progress;
    use burn::tensor::{Tensor, TensorData};

    use super::*;
    use crate::train::{GradNormSlot, StepNorm};

    fn metadata() -> MetricMetadata {
        let progress = Progress { items_processed: 1, items_total: 1, unit: None };
        MetricMetadata { progress, iteration: None, lr: None }
    }

    /// A micro-batch of a step of `of`, with `loss` over `tokens`, started `ago`, carrying the
    /// step's gradient norm `norm` (the micro-batch that ran the step's last).
    fn micro_batch(loss: f32, tokens: usize, of: usize, ago: Duration, norm: Option<f64>) -> StepInput {
        let device = crate::device::parse_device("flex").unwrap();
        let grad_norm = norm.map(|norm| {
            let slot = GradNormSlot::default();
            slot.set(StepNorm::known(norm)).unwrap();
            slot
        });
        StepInput {
            loss: Tensor::from_data(TensorData::new(vec![loss], [1]), &device),
            tokens,
            grad_norm,
            step_micro_batches: of,
            started: Instant::now() - ago,
        }
    }

    #[test]
    fn a_step_of_two_devices_is_reported_once_whole_whichever_device_finishes_first() {
        let (mut norm, mut rate, mut loss) =
            (StepMetric::grad_norm(), StepMetric::tokens_per_second(), StepMetric::loss());
        // The device that carries the norm is processed first, as it may be when it finishes first.
        let first = micro_batch(2.0, 100, 2, Duration::from_millis(400), Some(1.5));
        let second = micro_batch(4.0, 300, 2, Duration::from_millis(300), None);
        for metric in [&mut norm, &mut rate] {
            assert!(metric.update(&first, &metadata()).unwrap().is_not_available(), "half a step logs nothing");
            assert!(metric.value().is_none(), "and shows nothing");
        }
        let entry = loss.update(&first, &metadata()).unwrap();
        assert!(!entry.is_not_available(), "the loss of every micro-batch is logged");
        let logged = NumericEntry::deserialize(&norm.update(&second, &metadata()).unwrap().serialized).unwrap();
        assert_eq!(logged.current(), 1.5, "the step's norm, though the last micro-batch has none");
        // 400 tokens since the first micro-batch started 400 ms ago: at most 1000 tokens/s (less
        // on a slow machine), not the second's 300 over the moment between the two reports.
        rate.update(&second, &metadata()).unwrap();
        let tokens_per_second = rate.value().unwrap().current();
        assert!((100.0..=1000.0).contains(&tokens_per_second), "{tokens_per_second}");
        // The loss shown is the step's, token-weighted: (2 x 100 + 4 x 300) / 400.
        loss.update(&second, &metadata()).unwrap();
        assert_eq!(loss.value().unwrap().current(), 3.5);
        // A step whose norm is not finite (skipped for an f16 overflow) logs no norm.
        let skipped = micro_batch(2.0, 100, 1, Duration::ZERO, Some(f64::INFINITY));
        assert!(norm.update(&skipped, &metadata()).unwrap().is_not_available());
        assert!(norm.value().is_none());
    }
}
