//! Adam and AdamW whose step the device may refuse: the training step leaves the decision to
//! apply an update (finite gradients, a sound run) and the gradients' factor (the global-norm
//! clip) on the device as tensors, so that the host never waits for the gradient norm.
//!
//! Per parameter `p` with gradient `g`, moments `m`, `v`, step `t`, and from the step's
//! [`StepGate`] a factor `f` (`[1]`; -1 where the update is refused, `apply` false):
//!
//! ```text
//! g' = f g
//! m' = b1 m + (1 - b1) g'     v' = b2 v + (1 - b2) g'^2
//! p' = p (1 - lr wd) - lr (m' / (1 - b1^t)) / (sqrt(v' / (1 - b2^t)) + eps)
//! (p, m, v) <- apply ? (p', m', v') : (p, m, v)      (a refused step's NaN is not selected)
//! ```
//!
//! `t` counts every update, refused ones too (a refused update stops the run, so none follows).
//! Without a gate the step is Burn's `AdamW` (Adam is AdamW without decay), op for op, so the
//! results are bit for bit Burn's; the state is Burn's `AdamWState`, so checkpoints are unchanged.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use burn::optim::{AdamWState, AdaptiveMomentumState, LearningRate, Optimizer};
use burn::tensor::kind::BridgeTensor;
use burn::tensor::{Device, Tensor};

use crate::fused::multi_tensor::{any, AnyTensor};

/// What the training step decided on the device for the update about to run: the factor every
/// gradient is multiplied by, and whether the update applies at all. Shared by the step, which
/// sets it, and the optimiser, which reads it. The step decides on the device only when an
/// optimiser reads its gate ([`attach`](Self::attach)); otherwise it reads the norm on the host
/// and clips the gradients itself, so that any optimiser is stepped correctly.
#[derive(Clone, Debug, Default)]
pub struct StepGate {
    values: Arc<Mutex<Option<GateValues>>>,
    attached: Arc<AtomicBool>,
    /// The update of all tensors at once, while the step runs it ([`batched`](super::batched_update)).
    batch: Arc<Mutex<Batch>>,
    /// Steps skipped so far for an f16 overflow, where the host decides them: Adam's time counts
    /// them, its bias corrections do not (the device's verdict hands its own count to the
    /// batched update).
    skipped: Arc<AtomicUsize>,
}

/// Where a [`batched`](super::batched_update) update stands: the optimiser's calls record their
/// tensors in a first pass over the model, and take their results in a second.
#[derive(Debug, Default)]
pub(super) enum Batch {
    /// Each call updates its own tensor.
    #[default]
    Off,
    /// First pass: each call records its tensors and returns its gradient as a placeholder.
    Collecting(Vec<Pending>),
    /// Second pass: each call takes its result, in the order of the first.
    Emitting(VecDeque<Emit>),
}

/// One tensor's update, recorded by the first pass.
#[derive(Debug)]
pub(super) struct Pending {
    pub param: AnyTensor,
    pub grad: AnyTensor,
    /// The moments before the step; `None` before the first.
    pub moments: Option<(AnyTensor, AnyTensor)>,
    /// The step's time `t` (from 1).
    pub time: usize,
    pub lr: LearningRate,
    pub adam: AdamSettings,
}

/// The hyper-parameters of the [`GuardedAdam`] that recorded a [`Pending`] update.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct AdamSettings {
    pub beta_1: f32,
    pub beta_2: f32,
    pub epsilon: f32,
    pub weight_decay: f32,
}

/// One tensor's update, done by the batch.
#[derive(Debug)]
pub(super) struct Updated {
    pub param: AnyTensor,
    pub moments: (AnyTensor, AnyTensor),
    pub time: usize,
}

/// What the second pass hands a call.
#[derive(Debug)]
pub(super) enum Emit {
    /// The updated parameter, moments and time.
    Done(Box<Updated>),
    /// The recorded tensors, for the call to update alone (the backend has no batched kernels).
    Alone(Box<Pending>),
}

/// A gate's tensor on the parameters' device: the gradients' factor, -1 where the update is
/// refused (one input, not two, so that the update stays one fused kernel within the 8 buffers a
/// WebGPU kernel may bind), made once per step in every rank a parameter may have (`[1]`,
/// `[1, 1]`, ...: index `rank - 1`): a reshape inside the update would end the fusion backend's
/// block of element-wise ops there, a tensor made before joins it as an input.
#[derive(Clone, Debug)]
struct GateValues {
    factor: Vec<BridgeTensor>,
}

/// The ranks of parameters the gate is made for.
const MAX_RANK: usize = 4;

/// `x` (`[1]`) as `[1; D]` for every `D` from 1 to [`MAX_RANK`].
fn in_every_rank(x: Tensor<1>) -> Vec<BridgeTensor> {
    vec![
        x.clone().into_bridge(),
        x.clone().reshape([1; 2]).into_bridge(),
        x.clone().reshape([1; 3]).into_bridge(),
        x.reshape([1; MAX_RANK]).into_bridge(),
    ]
}

impl StepGate {
    /// Sets the next updates' gradient factor and verdict: `factor` (`[1]`, in the parameters'
    /// type) multiplies the gradients, and is negative where the update is refused.
    pub fn set(&self, factor: Tensor<1>) {
        let values = GateValues { factor: in_every_rank(factor) };
        *self.values.lock().unwrap_or_else(|e| e.into_inner()) = Some(values);
    }

    /// Says that an optimiser reads this gate (every [`GuardedAdam`] made with it).
    pub fn attach(&self) {
        self.attached.store(true, Ordering::Relaxed);
    }

    /// Whether an optimiser reads this gate.
    pub fn is_attached(&self) -> bool {
        self.attached.load(Ordering::Relaxed)
    }

    /// Sets the steps skipped so far for an f16 overflow (host-decided): the bias corrections of
    /// the next updates are those of Adam's time minus them.
    pub fn set_skipped(&self, skipped: usize) {
        self.skipped.store(skipped, Ordering::Relaxed);
    }

    /// Forgets the decision: the next updates apply as they come.
    pub fn clear(&self) {
        *self.values.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    fn get(&self) -> Option<GateValues> {
        self.values.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The batched update's state.
    pub(super) fn batch(&self) -> std::sync::MutexGuard<'_, Batch> {
        self.batch.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Adam(W) with a [`StepGate`]: `weight_decay` 0 is Adam. Made by
/// [`optimizer`](super::optimizer), which attaches the gate.
#[derive(Clone, Debug)]
pub struct GuardedAdam {
    /// Decay of the first moment.
    pub beta_1: f32,
    /// Decay of the second moment.
    pub beta_2: f32,
    /// Added to the second moment's root.
    pub epsilon: f32,
    /// Decoupled weight decay (AdamW); 0 for Adam.
    pub weight_decay: f32,
    /// The step's decision, read at every update.
    pub gate: StepGate,
}

impl Optimizer for GuardedAdam {
    type State<const D: usize> = AdamWState<D>;

    fn step<const D: usize>(
        &self,
        lr: LearningRate,
        tensor: Tensor<D>,
        grad: Tensor<D>,
        state: Option<Self::State<D>>,
    ) -> (Tensor<D>, Option<Self::State<D>>) {
        self.batch_call(lr, tensor, grad, state)
    }

    fn to_device<const D: usize>(mut state: Self::State<D>, device: &Device) -> Self::State<D> {
        state.momentum = state.momentum.to_device(device);
        state
    }
}

/// Burn's AdamW state of step `time` with the moments `(first, second)`.
fn adam_state<const D: usize>(time: usize, (moment_1, moment_2): (AnyTensor, AnyTensor)) -> AdamWState<D> {
    let momentum = AdaptiveMomentumState {
        time,
        moment_1: Tensor::from_dispatch(moment_1),
        moment_2: Tensor::from_dispatch(moment_2),
        max_moment_2: None,
    };
    AdamWState { momentum }
}

impl GuardedAdam {
    /// The step, as part of a batched update if one runs: in the first pass it records its
    /// tensors and returns the gradient in the parameter's place; in the second it returns the
    /// result (or updates alone what it recorded). Without a batch, the update of this tensor.
    fn batch_call<const D: usize>(
        &self,
        lr: LearningRate,
        tensor: Tensor<D>,
        grad: Tensor<D>,
        state: Option<AdamWState<D>>,
    ) -> (Tensor<D>, Option<AdamWState<D>>) {
        let mut batch = self.gate.batch();
        match &mut *batch {
            Batch::Off => {
                drop(batch);
                self.update(lr, tensor, grad, state)
            }
            Batch::Collecting(pending) => {
                let (moments, time) = match state {
                    Some(AdamWState { momentum }) => {
                        (Some((any(momentum.moment_1), any(momentum.moment_2))), momentum.time + 1)
                    }
                    None => (None, 1),
                };
                let adam = AdamSettings {
                    beta_1: self.beta_1,
                    beta_2: self.beta_2,
                    epsilon: self.epsilon,
                    weight_decay: self.weight_decay,
                };
                pending.push(Pending { param: any(tensor), grad: any(grad.clone()), moments, time, lr, adam });
                (grad, None)
            }
            Batch::Emitting(queue) => {
                let emit = queue.pop_front().expect("the second pass steps the tensors of the first");
                drop(batch);
                match emit {
                    Emit::Done(updated) => {
                        let Updated { param, moments, time } = *updated;
                        let param = Tensor::<D>::from_dispatch(param);
                        assert_eq!(param.dims(), tensor.dims(), "the second pass steps the tensors of the first");
                        (param, Some(adam_state(time, moments)))
                    }
                    Emit::Alone(pending) => {
                        let pending = *pending;
                        let state = pending.moments.map(|moments| adam_state(pending.time - 1, moments));
                        let (param, grad) = (Tensor::from_dispatch(pending.param), Tensor::from_dispatch(pending.grad));
                        self.update(pending.lr, param, grad, state)
                    }
                }
            }
        }
    }

    /// The update of one tensor by the element-wise ops.
    fn update<const D: usize>(
        &self,
        lr: LearningRate,
        tensor: Tensor<D>,
        grad: Tensor<D>,
        state: Option<AdamWState<D>>,
    ) -> (Tensor<D>, Option<AdamWState<D>>) {
        let gate = self.gate.get();
        // Element-wise ops with `[1, ..]` operands only, which the fusion backend fuses with the
        // update into a kernel or two per parameter.
        let factor = gate.map(|gate| Tensor::<D>::from_bridge(gate.factor[D - 1].clone()));
        let grad = match &factor {
            Some(factor) => grad * factor.clone(),
            None => grad,
        };
        let previous = state.clone().map(|state| state.momentum);
        let momentum = self.moments(grad, previous);
        let time = momentum.time.saturating_sub(self.gate.skipped.load(Ordering::Relaxed)).max(1) as i32;
        let moment_1 = momentum.moment_1.clone().div_scalar(1f32 - self.beta_1.powi(time));
        let moment_2 = momentum.moment_2.clone().div_scalar(1f32 - self.beta_2.powi(time));
        let delta = moment_1.div(moment_2.sqrt().add_scalar(self.epsilon));
        let decay_rate = lr * self.weight_decay as f64;
        let decayed = if decay_rate == 0.0 { tensor.clone() } else { tensor.clone().mul_scalar(1.0 - decay_rate) };
        let updated = decayed - delta.mul_scalar(lr);
        let Some(factor) = factor else {
            return (updated, Some(AdamWState { momentum }));
        };
        // A refused step keeps the parameter and its moments (zero moments before the first):
        // whatever its NaN gradients made of the new values is not selected.
        // In the parameter's shape (the parameters of a sound run are finite, so `p 0` is 0: the
        // loaders refuse non-finite weights), so that the comparison joins the fused block
        // without a buffer of its own.
        let refused = (tensor.clone().mul_scalar(0.0) + factor).lower_elem(0.0);
        let keep = |new: Tensor<D>, old: Option<Tensor<D>>| {
            let old = old.unwrap_or_else(|| new.zeros_like());
            new.mask_where(refused.clone(), old)
        };
        let (old_1, old_2) = match state {
            Some(AdamWState { momentum }) => (Some(momentum.moment_1), Some(momentum.moment_2)),
            None => (None, None),
        };
        let momentum = AdaptiveMomentumState {
            time: momentum.time,
            moment_1: keep(momentum.moment_1, old_1),
            moment_2: keep(momentum.moment_2, old_2),
            max_moment_2: None,
        };
        (keep(updated, Some(tensor)), Some(AdamWState { momentum }))
    }

    /// The moments after `grad` (Burn's AdamW's, op for op).
    fn moments<const D: usize>(
        &self,
        grad: Tensor<D>,
        state: Option<AdaptiveMomentumState<D>>,
    ) -> AdaptiveMomentumState<D> {
        let (factor_1, factor_2) = (1.0 - self.beta_1, 1.0 - self.beta_2);
        match state {
            Some(mut state) => {
                state.moment_1 = state.moment_1.mul_scalar(self.beta_1).add(grad.clone().mul_scalar(factor_1));
                state.moment_2 = state.moment_2.mul_scalar(self.beta_2).add(grad.square().mul_scalar(factor_2));
                state.time += 1;
                state
            }
            None => AdaptiveMomentumState {
                time: 1,
                moment_1: grad.clone().mul_scalar(factor_1),
                moment_2: grad.square().mul_scalar(factor_2),
                max_moment_2: None,
            },
        }
    }
}
