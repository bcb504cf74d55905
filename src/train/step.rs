//! One training step on burn-train: the loss, gradient accumulation scaling, global-norm clipping,
//! and the guard against non-finite values.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use burn::module::Module;
use burn::optim::lr_scheduler::module_lr_scheduler::ModuleLearningRate;
use burn::optim::{GradientsParams, ModuleOptimizer};
use burn::tensor::{ExecutionError, Tensor};
use burn::train::metric::{Adaptor, ItemLazy, LossInput};
use burn::train::{InferenceStep, TrainOutput, TrainStep};

use super::batched_update::{batched_step, batched_update_applies, grads_in_order};
use super::clip::{clip_known_norm, global_grad_norm, grad_sum_of_squares, read_norm, scale_grads, verdict};
use super::guarded_adam::StepGate;
use super::loss_scale::{LossScale, ScaleReport, ScaledStep, LOSS_SCALE_RULE};
use super::monitor::{RunMonitor, SoundFlag};
use super::tracking::Tracker;
use crate::data::LmBatch;
use crate::fused::multi_tensor::{grad_norm_and_verdict, scaled_grad_norm_and_verdict};
use crate::model::Llama;

/// Settings of the step that are not part of the model.
#[derive(Clone)]
pub struct StepSettings {
    /// Micro-batches whose gradients are summed into one optimiser step (accumulation steps times
    /// devices); each micro-batch's loss is divided by it, so the step's gradient is the mean's.
    pub micro_batches: usize,
    /// Clip the accumulated gradients to this global norm.
    pub clip_grad_norm: Option<f64>,
    /// The gradient norm of the optimiser step being accumulated: shared by its micro-batches'
    /// outputs and filled by [`TrainStep::optimize`], so the metric reads the norm of its own step.
    pub grad_norm_slot: Arc<Mutex<GradNormSlot>>,
    /// Micro-batches run so far by this process (tells the last micro-batch of each step).
    pub micro_batch_count: Arc<AtomicUsize>,
    /// Decides whether a step's gradients may be applied (a non-finite norm stops the run).
    pub monitor: Arc<RunMonitor>,
    /// Records variances and per-layer gradient norms at intervals (`track_every`).
    pub tracker: Option<Arc<Tracker>>,
    /// The dynamic loss scale of f16 mixed precision; `None`: the loss is not scaled.
    pub loss_scale: Option<Arc<LossScale>>,
    /// The step's decision for the optimiser ([`GuardedAdam`](super::guarded_adam::GuardedAdam)
    /// reads it): the same gate the optimiser was built with.
    pub gate: StepGate,
    /// Whether every step so far had finite gradients, on the device (`[1]` f32, 1 or 0; `None`
    /// before the first): once one has not, no later update applies, so the weights stay those of the last
    /// good step until the host reads the norm and stops the run.
    pub sound: SoundFlag,
}

impl Default for StepSettings {
    /// One micro-batch per step, no clipping, a monitor of its own: for loading and evaluation.
    fn default() -> Self {
        Self {
            micro_batches: 1,
            clip_grad_norm: None,
            grad_norm_slot: Default::default(),
            micro_batch_count: Default::default(),
            monitor: Default::default(),
            tracker: None,
            loss_scale: None,
            gate: StepGate::default(),
            sound: Default::default(),
        }
    }
}

impl std::fmt::Debug for StepSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StepSettings")
            .field("micro_batches", &self.micro_batches)
            .field("clip_grad_norm", &self.clip_grad_norm)
            .field("loss_scale", &self.loss_scale.as_ref().map(|scale| scale.scale()))
            .finish_non_exhaustive()
    }
}

/// The model as burn-train trains it: the [`Llama`] plus the step's settings (never checkpointed).
#[derive(Module, Debug)]
pub struct TrainingModel {
    /// The model being trained.
    pub model: Llama,
    #[module(skip)]
    settings: StepSettings,
    /// The reliability tests' stand-in for a loss that overflows while its gradient stays finite
    /// (`LAYERNORM_SCALING_FAIL_AT=loss`), read once.
    #[module(skip)]
    infinite_loss: bool,
}

/// The global gradient norm of one optimiser step, once [`TrainStep::optimize`] has computed it.
pub type GradNormSlot = Arc<OnceLock<StepNorm>>;

/// The global gradient norm of one optimiser step: left on the device by the step (so that it
/// never waits for it) and read by whoever asks first, the metrics, on their own thread.
pub struct StepNorm {
    /// The sum of the gradients' squares, `[1]` f32, until read.
    sum_of_squares: Mutex<Option<Tensor<1>>>,
    value: OnceLock<f64>,
    /// Told the norm once it is read, and whether the step was skipped for an f16 overflow (the
    /// run's monitor: a non-finite norm of a step not skipped is a divergence).
    on_read: Option<OnRead>,
    /// Under a loss scale (f16): the scale after this step's decision, and the steps skipped.
    scale: OnceLock<Option<ScaleReport>>,
    /// Where the device decided the loss scale: its state after the step, `[4]` f32 (the scale,
    /// the good steps, the steps skipped, whether this one was), until read with the norm.
    scale_on_device: Mutex<Option<Tensor<1>>>,
}

/// What a [`StepNorm`] tells once read: the norm, and the scale that a step skipped for an f16
/// overflow lowered the loss scale to (`None`: not skipped).
type OnRead = Box<dyn Fn(f64, Option<f64>) + Send + Sync>;

impl StepNorm {
    /// A norm the host knows already.
    pub fn known(norm: f64) -> Self {
        let value = OnceLock::new();
        let _ = value.set(norm);
        Self {
            sum_of_squares: Mutex::new(None),
            value,
            on_read: None,
            scale: OnceLock::new(),
            scale_on_device: Mutex::new(None),
        }
    }

    /// The norm, with the loss scale's state after the step (`None`: no loss scale).
    pub fn with_scale(self, scale: Option<ScaleReport>) -> Self {
        let _ = self.scale.set(scale);
        self
    }

    /// The norm, with the loss scale's state after the step on the device (`[4]` f32, see
    /// [`scaled_grad_norm_and_verdict`](crate::fused::multi_tensor::scaled_grad_norm_and_verdict)),
    /// read with the norm.
    pub fn with_scale_on_device(self, state_after: Tensor<1>) -> Self {
        *self.scale_on_device.lock().unwrap_or_else(|e| e.into_inner()) = Some(state_after);
        self
    }

    /// The loss scale after the step and the steps skipped so far, under a loss scale (f16); known
    /// once the norm is read ([`value`](Self::value)).
    pub fn scale(&self) -> Option<ScaleReport> {
        self.scale.get().copied().flatten()
    }

    /// The norm of `sum_of_squares` (on the device), and who to tell once it is read: the norm,
    /// and for a step skipped for an f16 overflow the scale it lowered the loss scale to.
    pub fn on_device(sum_of_squares: Tensor<1>, on_read: impl Fn(f64, Option<f64>) + Send + Sync + 'static) -> Self {
        Self {
            sum_of_squares: Mutex::new(Some(sum_of_squares)),
            value: OnceLock::new(),
            on_read: Some(Box::new(on_read)),
            scale: OnceLock::new(),
            scale_on_device: Mutex::new(None),
        }
    }

    /// The norm: read from the device the first time (NaN if the device fails), with the loss
    /// scale's state where the device decided it.
    pub fn value(&self) -> f64 {
        *self.value.get_or_init(|| {
            let sum = self.sum_of_squares.lock().unwrap_or_else(|e| e.into_inner()).take();
            let norm = sum.map_or(0.0, |sum| read_norm(sum).unwrap_or(f64::NAN));
            let state = self.scale_on_device.lock().unwrap_or_else(|e| e.into_inner()).take();
            let state = state.and_then(|state| state.into_data().try_to_vec::<f32>().ok()).filter(|s| s.len() == 4);
            let skipped_to = state.as_ref().and_then(|s| (s[3] > 0.5).then_some(f64::from(s[0])));
            if let Some(state) = state {
                let _ = self.scale.set(Some(ScaleReport { scale: state[0].into(), skipped: state[2] as usize }));
            }
            if let Some(on_read) = &self.on_read {
                on_read(norm, skipped_to);
            }
            norm
        })
    }
}

impl std::fmt::Debug for StepNorm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StepNorm").field("value", &self.value.get()).finish_non_exhaustive()
    }
}

/// What a step reports to the metrics.
#[derive(Clone, Debug)]
pub struct LmOutput {
    /// Mean cross-entropy of the batch, `[1]`.
    pub loss: Tensor<1>,
    /// Tokens in the batch that count (padding left out).
    pub tokens: usize,
    /// On the last micro-batch of an optimiser step: that step's gradient norm, filled before the
    /// metrics see this output (burn-train applies the step first). `None` on the others and in
    /// validation.
    pub grad_norm: Option<GradNormSlot>,
    /// The micro-batches of the optimiser step this output belongs to (accumulation steps times
    /// devices): the metrics report a step once all of them are in. 1 in validation.
    pub step_micro_batches: usize,
    /// When its forward pass started: the step's time runs from the earliest of its micro-batches.
    pub started: Instant,
}

/// The metrics' view of a step: its loss, size and gradient norm.
pub type StepInput = LmOutput;

impl TrainingModel {
    /// Wraps `model` for training.
    pub fn new(model: Llama, settings: StepSettings) -> Self {
        Self { model, settings, infinite_loss: crate::io::fault_injected("loss") }
    }

    /// The trained model.
    pub fn into_model(self) -> Llama {
        self.model
    }

    fn loss(&self, batch: LmBatch) -> LmOutput {
        let started = Instant::now();
        let loss = self.model.next_token_loss_counting(batch.inputs, batch.targets, batch.counted);
        LmOutput { loss, tokens: batch.n_targets, grad_norm: None, step_micro_batches: 1, started }
    }

    /// The slot of the optimiser step this micro-batch belongs to, when it is the step's last.
    fn grad_norm_slot(&self) -> Option<GradNormSlot> {
        let index = self.settings.micro_batch_count.fetch_add(1, Ordering::SeqCst);
        let mut slot = self.settings.grad_norm_slot.lock().unwrap_or_else(|e| e.into_inner());
        if slot.get().is_some() {
            // The previous step is applied: this micro-batch starts a new one.
            *slot = GradNormSlot::default();
        }
        (index + 1).is_multiple_of(self.settings.micro_batches.max(1)).then(|| slot.clone())
    }
}

impl TrainStep for TrainingModel {
    type Input = LmBatch;
    type Output = LmOutput;

    fn step(&self, batch: LmBatch) -> TrainOutput<LmOutput> {
        // The backward pass follows at once: the residual norms may keep their sums for it.
        let mut output = crate::fused::with_backward_following(|| self.loss(batch));
        output.grad_norm = self.grad_norm_slot();
        let parts = self.settings.micro_batches;
        output.step_micro_batches = parts.max(1);
        let mut objective = if parts > 1 { output.loss.clone() / parts as f64 } else { output.loss.clone() };
        if let Some(loss_scale) = &self.settings.loss_scale {
            objective = loss_scale.apply(objective);
        }
        if self.infinite_loss {
            output.loss = output.loss.clone().add_scalar(f64::INFINITY);
        }
        TrainOutput::new(self, objective.backward(), output)
    }

    /// Clips the accumulated (and, on several devices, summed) gradients to the global norm and
    /// applies them only while the run is sound, all on the device: the norm, the clip factor and
    /// the verdict are tensors the optimiser reads ([`StepGate`]), so the host issues the update
    /// without waiting for the device. A non-finite norm refuses this update and every later one
    /// on the device; the metrics read the norm on their own thread, and the monitor then stops
    /// the run with the weights of the last good step. Under a loss scale (f16), or with an
    /// optimiser that does not read the step's gate, the norm is read on the host instead.
    fn optimize(self, optim: &mut ModuleOptimizer, lr: ModuleLearningRate, grads: GradientsParams) -> Self {
        if !self.settings.gate.is_attached() {
            return self.optimize_on_host(optim, lr, grads);
        }
        if let Some(loss_scale) = self.settings.loss_scale.clone() {
            return self.optimize_scaled(optim, lr, grads, &loss_scale);
        }
        let monitor = self.settings.monitor.clone();
        let Some(step) = monitor.next_step() else {
            return self;
        };
        let sound_before = self.settings.sound.lock().unwrap_or_else(|e| e.into_inner()).take();
        let device = self.model.embed_tokens.weight.val().device();
        let sound_before = sound_before.unwrap_or_else(|| Tensor::ones([1], &device).without_autodiff());
        let clip = self.settings.clip_grad_norm;
        // All tensors in a few launches where the backend has multi-tensor kernels (the GPUs), or
        // a reduction per tensor and a few element-wise ops.
        let grads_list = grads_in_order(&grads, &self);
        let batched_update = batched_update_applies(&grads_list);
        let batched = grad_norm_and_verdict(grads_list, sound_before.clone(), clip);
        let (sum_of_squares, factor, sound) = match batched {
            Some(decided) => decided,
            None => {
                let Some(sum_of_squares) = grad_sum_of_squares(&grads, &self) else {
                    // No gradient at all: nothing to decide (and no earlier step's decision to reuse).
                    *self.settings.sound.lock().unwrap_or_else(|e| e.into_inner()) = Some(sound_before);
                    self.settings.gate.clear();
                    return optim.step(lr, self, grads);
                };
                let (factor, sound) = verdict(sum_of_squares.clone(), sound_before, clip);
                (sum_of_squares, factor, sound)
            }
        };
        *self.settings.sound.lock().unwrap_or_else(|e| e.into_inner()) = Some(sound);
        // In the parameters' type (pure bf16 trains in bf16), as a clip by a host scalar would be.
        let dtype = self.model.embed_tokens.weight.val().dtype();
        self.settings.gate.set(factor.clone().cast(dtype));
        let norm = StepNorm::on_device(sum_of_squares, move |norm, _| monitor.check_grad_norm(step, norm));
        let _ = self.settings.grad_norm_slot.lock().unwrap_or_else(|e| e.into_inner()).set(norm);
        if let Some(tracker) = &self.settings.tracker {
            tracker.observe(&self.model, &grads);
        }
        if batched_update {
            let gate = self.settings.gate.clone();
            return batched_step(optim, lr, self, grads, &gate, factor);
        }
        optim.step(lr, self, grads)
    }
}

impl TrainingModel {
    /// The optimiser's gate ([`StepGate`]): build the optimiser with it
    /// ([`optimizer`](super::optimizer)) so that the step decides on the device.
    pub fn gate(&self) -> &StepGate {
        &self.settings.gate
    }

    /// [`TrainStep::optimize`] under a loss scale (f16), decided on the device where the backend
    /// has multi-tensor kernels: the verdict kernel unscales, clips and checks the norm, skips an
    /// overflowed step and moves the scale, and the batched update applies the step (Adam's time
    /// not counting the skipped steps), so the host never waits. The metrics read the norm and the
    /// scale on their own thread; the monitor hears of a skipped step (or a divergence) then.
    /// Elsewhere, [`optimize_on_host`](Self::optimize_on_host).
    fn optimize_scaled(
        self,
        optim: &mut ModuleOptimizer,
        lr: ModuleLearningRate,
        grads: GradientsParams,
        loss_scale: &Arc<LossScale>,
    ) -> Self {
        let grads_list = grads_in_order(&grads, &self);
        if !batched_update_applies(&grads_list) {
            return self.optimize_on_host(optim, lr, grads);
        }
        let monitor = self.settings.monitor.clone();
        let Some(step) = monitor.next_step() else {
            return self;
        };
        let device = self.model.embed_tokens.weight.val().device();
        let sound_before = self.settings.sound.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let sound_before = sound_before.unwrap_or_else(|| Tensor::ones([1], &device).without_autodiff());
        let state_before = loss_scale.on_device(&device);
        let clip = self.settings.clip_grad_norm;
        let Some(verdict) =
            scaled_grad_norm_and_verdict(grads_list, sound_before, state_before.clone(), clip, LOSS_SCALE_RULE)
        else {
            unreachable!("the multi-tensor kernels take these gradients (batched_update_applies)")
        };
        *self.settings.sound.lock().unwrap_or_else(|e| e.into_inner()) = Some(verdict.sound);
        loss_scale.set_on_device(verdict.scale_state.clone());
        let dtype = self.model.embed_tokens.weight.val().dtype();
        self.settings.gate.set(verdict.factor.clone().narrow(0, 0, 1).cast(dtype));
        let on_read = move |norm: f64, skipped_to: Option<f64>| match skipped_to {
            Some(lowered_to) => monitor.report_skipped_step(step, lowered_to),
            None => monitor.check_grad_norm(step, norm),
        };
        let norm =
            StepNorm::on_device(verdict.sum_of_squares, on_read).with_scale_on_device(verdict.scale_state.clone());
        let _ = self.settings.grad_norm_slot.lock().unwrap_or_else(|e| e.into_inner()).set(norm);
        if let Some(tracker) = &self.settings.tracker {
            // On the steps it records: the scale before the step unscales (a skipped step has none).
            let unscale = || {
                let skipped = verdict.scale_state.clone().narrow(0, 3, 1).into_scalar::<f32>() > 0.5;
                let scale = state_before.narrow(0, 0, 1).into_scalar::<f64>();
                (!skipped).then(|| 1.0 / scale)
            };
            tracker.observe_scaled(&self.model, &grads, unscale);
        }
        let gate = self.settings.gate.clone();
        batched_step(optim, lr, self, grads, &gate, verdict.factor)
    }

    /// [`TrainStep::optimize`] with the norm read on the host (one wait per step), under a loss
    /// scale (f16) or for an optimiser that does not read the step's gate. Under a loss scale, a
    /// step whose scaled gradients overflowed is skipped and the scale lowered; the others are
    /// unscaled, checked, clipped and applied.
    fn optimize_on_host(self, optim: &mut ModuleOptimizer, lr: ModuleLearningRate, mut grads: GradientsParams) -> Self {
        let mut norm = global_grad_norm(&grads, &self);
        let slot = self.settings.grad_norm_slot.clone();
        let loss_scale = self.settings.loss_scale.clone();
        // Called after the loss scale's decision: the metrics report the scale it left.
        let set_norm = |norm: f64| {
            let norm = StepNorm::known(norm).with_scale(loss_scale.as_ref().map(|scale| scale.report()));
            let _ = slot.lock().unwrap_or_else(|e| e.into_inner()).set(norm);
        };
        if let Some(loss_scale) = &self.settings.loss_scale {
            // The crate's AdamW counts every step in its time and leaves the skipped ones out of
            // its bias corrections, as on the device: a checkpoint resumes on either.
            self.settings.gate.set_skipped(loss_scale.skipped());
            match loss_scale.step(norm) {
                ScaledStep::Skip { lowered_to } => {
                    set_norm(norm);
                    self.settings.monitor.skip_overflowed_step(lowered_to);
                    if let Some(tracker) = &self.settings.tracker {
                        tracker.observe_scaled(&self.model, &grads, || None);
                    }
                    return self.skip_step(optim, lr, grads);
                }
                ScaledStep::Apply { unscale } => {
                    scale_grads(&mut grads, &self, unscale);
                    norm *= unscale;
                }
            }
        }
        set_norm(norm);
        if !self.settings.monitor.may_apply(norm) {
            return self;
        }
        if let Some(tracker) = &self.settings.tracker {
            tracker.observe(&self.model, &grads);
        }
        if let Some(max_norm) = self.settings.clip_grad_norm {
            clip_known_norm(&mut grads, &self, norm, max_norm);
        }
        optim.step(lr, self, grads)
    }

    /// A step skipped for an f16 overflow: nothing changes, but an optimiser that reads the gate
    /// ([`GuardedAdam`](super::guarded_adam::GuardedAdam)) takes it as a refused step, as the
    /// device's verdict makes it, so that its time counts it (its bias corrections do not).
    fn skip_step(self, optim: &mut ModuleOptimizer, lr: ModuleLearningRate, grads: GradientsParams) -> Self {
        if !self.settings.gate.is_attached() {
            return self;
        }
        let weight = self.model.embed_tokens.weight.val();
        let refuse = Tensor::<1>::from_floats([-1.0], &weight.device()).without_autodiff().cast(weight.dtype());
        self.settings.gate.set(refuse);
        let gate = self.settings.gate.clone();
        let model = optim.step(lr, self, grads);
        gate.clear();
        model
    }
}

impl InferenceStep for TrainingModel {
    type Input = LmBatch;
    type Output = LmOutput;

    fn step(&self, batch: LmBatch) -> LmOutput {
        self.loss(batch)
    }
}

impl ItemLazy for LmOutput {
    fn sync(self) -> Result<Self, ExecutionError> {
        self.loss.device().flush()?;
        Ok(Self { loss: self.loss.without_autodiff(), ..self })
    }
}

impl Adaptor<LossInput> for LmOutput {
    fn adapt(&self) -> LossInput {
        LossInput::new(self.loss.clone())
    }
}

impl Adaptor<StepInput> for LmOutput {
    fn adapt(&self) -> StepInput {
        self.clone()
    }
}
