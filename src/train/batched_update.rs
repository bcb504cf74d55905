//! The optimiser's update of every parameter at once: a few multi-tensor kernel launches for the
//! whole model ([`adam_step`]) where the backend has them, in place of an update per tensor.
//!
//! Burn's `ModuleOptimizer` steps one tensor per call and keeps the states (which checkpoints
//! save), so the update runs in two passes over it, through the [`StepGate`] its
//! [`GuardedAdam`](super::GuardedAdam)s share: the first records each tensor with its gradient
//! and moments (and leaves the gradient in the parameter's place, so that the old parameters and
//! moments are freed as soon as their group is updated); the update then runs for all;
//! the second pass hands each call its result, which the optimiser keeps as it would its own.
//! Checkpoints are unchanged, and a backend without the kernels updates each tensor as before.

use std::collections::VecDeque;

use burn::backend::TensorMetadata;
use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::lr_scheduler::module_lr_scheduler::ModuleLearningRate;
use burn::optim::{GradientsParams, ModuleOptimizer};
use burn::tensor::Tensor;

use super::guarded_adam::{Batch, Emit, Pending, StepGate, Updated};
use crate::fused::multi_tensor::{adam_step, any, multi_tensor_kernels_take, AdamTensorSettings, AnyTensor};

/// Steps `module` with `optim` (whose Adam(W)s read `gate`) by `grads`, all tensors at once, with
/// the gradients multiplied by `factor` (`[1]` f32; negative: the update is refused; `[2]`: then
/// the steps skipped for an f16 overflow, which Adam's time does not count).
pub fn batched_step<M: Module>(
    optim: &mut ModuleOptimizer,
    lr: ModuleLearningRate,
    module: M,
    grads: GradientsParams,
    gate: &StepGate,
    factor: Tensor<1>,
) -> M {
    let again = copy_of(&grads, &module);
    let _off = BatchOff(gate);
    *gate.batch() = Batch::Collecting(Vec::new());
    let module = optim.step(lr.clone(), module, grads);
    let pending = match std::mem::take(&mut *gate.batch()) {
        Batch::Collecting(pending) => pending,
        _ => unreachable!("the first pass collects"),
    };
    *gate.batch() = Batch::Emitting(update_all(pending, factor));
    optim.step(lr, module, again)
}

/// Turns the batch off when the update ends, however it ends.
struct BatchOff<'a>(&'a StepGate);

impl Drop for BatchOff<'_> {
    fn drop(&mut self) {
        *self.0.batch() = Batch::Off;
    }
}

/// The same gradients again (the tensors are shared, not copied): the second pass steps the
/// parameters that have one.
pub(super) fn copy_of<M: Module>(grads: &GradientsParams, module: &M) -> GradientsParams {
    struct Copy<'a> {
        from: &'a GradientsParams,
        to: GradientsParams,
    }
    impl ModuleVisitor for Copy<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            if let Some(grad) = self.from.get::<D>(param.id) {
                self.to.register(param.id, grad);
            }
        }
    }
    let mut copy = Copy { from: grads, to: GradientsParams::new() };
    module.visit(&mut copy);
    copy.to
}

/// Whether the update by `grads` (a model's, [`grads_in_order`]) runs batched: the backend has
/// multi-tensor kernels for the first gradient's tensors (a model's parameters share a backend
/// and, but for pure bf16 or f16 training, a float type; [`batched_step`] updates a mix in batches
/// of one type each).
pub fn batched_update_applies(grads: &[AnyTensor]) -> bool {
    grads.first().is_some_and(multi_tensor_kernels_take)
}

/// The gradients of `module`'s parameters, in the module's order.
pub fn grads_in_order<M: Module>(grads: &GradientsParams, module: &M) -> Vec<AnyTensor> {
    struct Collect<'a> {
        grads: &'a GradientsParams,
        list: Vec<AnyTensor>,
    }
    impl ModuleVisitor for Collect<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            if let Some(grad) = self.grads.get::<D>(param.id) {
                self.list.push(any(grad));
            }
        }
    }
    let mut collect = Collect { grads, list: Vec::new() };
    module.visit(&mut collect);
    collect.list
}

/// Runs the recorded updates, one batch per kind of tensor (float type, first step or not,
/// Adam's betas and epsilon), and says what each call of the second pass returns, in order.
fn update_all(pending: Vec<Pending>, factor: Tensor<1>) -> VecDeque<Emit> {
    let mut results: Vec<Option<Emit>> = pending.iter().map(|_| None).collect();
    let mut kinds: Vec<(BatchKind, Vec<(usize, Pending)>)> = Vec::new();
    for (index, update) in pending.into_iter().enumerate() {
        let kind = BatchKind::of(&update);
        match kinds.iter_mut().find(|(k, _)| *k == kind) {
            Some((_, members)) => members.push((index, update)),
            None => kinds.push((kind, vec![(index, update)])),
        }
    }
    for (kind, members) in kinds {
        for (index, emit) in update_batch(kind, members, factor.clone()) {
            results[index] = Some(emit);
        }
    }
    results.into_iter().map(|emit| emit.expect("every recorded update has a result")).collect()
}

/// What the tensors of one batch share.
#[derive(Clone, Copy, Debug, PartialEq)]
struct BatchKind {
    dtype: burn::backend::DType,
    first_step: bool,
    betas: (f32, f32),
    epsilon: f32,
}

impl BatchKind {
    fn of(update: &Pending) -> Self {
        Self {
            dtype: update.param.dtype(),
            first_step: update.moments.is_none(),
            betas: (update.adam.beta_1, update.adam.beta_2),
            epsilon: update.adam.epsilon,
        }
    }
}

/// One batch's update, or its tensors back to be updated alone where the backend has no
/// multi-tensor kernels for them.
fn update_batch(kind: BatchKind, members: Vec<(usize, Pending)>, factor: Tensor<1>) -> Vec<(usize, Emit)> {
    if !multi_tensor_kernels_take(&members[0].1.param) {
        return members.into_iter().map(|(index, update)| (index, Emit::Alone(Box::new(update)))).collect();
    }
    let settings: Vec<AdamTensorSettings> = members.iter().map(|(_, update)| settings_of(update)).collect();
    let (mut indices, mut times, mut params, mut grads) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut moments_1, mut moments_2) = (Vec::new(), Vec::new());
    // Moved, not cloned: each group's old tensors are freed once its update ran.
    for (index, update) in members {
        indices.push(index);
        times.push(update.time);
        params.push(update.param);
        grads.push(update.grad);
        if let Some((moment_1, moment_2)) = update.moments {
            moments_1.push(moment_1);
            moments_2.push(moment_2);
        }
    }
    let moments = (!kind.first_step).then_some((moments_1, moments_2));
    let update = adam_step(params, grads, moments, factor, settings, kind.betas, kind.epsilon);
    let moments = update.moments_1.into_iter().zip(update.moments_2);
    indices
        .into_iter()
        .zip(update.params.into_iter().zip(moments).zip(times))
        .map(|(index, ((param, moments), time))| (index, Emit::Done(Box::new(Updated { param, moments, time }))))
        .collect()
}

/// The per-tensor settings of `update` as Burn's AdamW computes them: the decay `1 - lr wd` in
/// f64, the bias corrections in f32.
fn settings_of(update: &Pending) -> AdamTensorSettings {
    let time = update.time as i32;
    AdamTensorSettings {
        lr: update.lr as f32,
        decay: (1.0 - update.lr * f64::from(update.adam.weight_decay)) as f32,
        bias_1: 1f32 - update.adam.beta_1.powi(time),
        bias_2: 1f32 - update.adam.beta_2.powi(time),
        time: update.time as f32,
    }
}
