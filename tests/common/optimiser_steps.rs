//! A few optimiser steps of the tiny model, for the tests that compare optimisers and where they
//! decide (`device_step`, `multi_tensor`).

use burn::module::ParamGroup;
use burn::optim::{AdamWConfig, ModuleOptimizer};
use burn::tensor::Device;
use burn::train::TrainStep;
use layernorm_scaling::data::LmBatch;
use layernorm_scaling::train::{no_decay_paths, StepSettings, TrainConfig, TrainingModel};
use layernorm_scaling::Llama;

use super::{edited, random_tokens, ParamValues};

/// The tiny model with AdamW (lr 3e-3, decay 0.1) and the clip `clip`.
pub fn config(clip: Option<f64>) -> TrainConfig {
    edited(&TrainConfig::default(), |c| {
        c.model.preset = "tiny".into();
        c.optim.lr = 3e-3;
        c.optim.weight_decay = 0.1;
        c.optim.clip_grad_norm = clip;
    })
}

/// A batch of 2 x 16 random tokens on `device`, reproducible for a seed.
pub fn batch(seed: u64, device: &Device) -> LmBatch {
    let tokens = random_tokens(2, 17, 256, seed, &device.clone().autodiff());
    LmBatch::new(tokens.clone().narrow(1, 0, 16), tokens.narrow(1, 1, 16))
}

/// Burn's own AdamW with the run's groups (no decay on gains and the embedding) for `model`.
pub fn burns_adamw(model: &TrainingModel) -> ModuleOptimizer {
    let adamw =
        |decay: f32| AdamWConfig::new().with_beta_1(0.9).with_beta_2(0.999).with_epsilon(1e-8).with_weight_decay(decay);
    adamw(0.1).init().with_group(ParamGroup::from_paths(no_decay_paths(model)), adamw(0.0).build(), None)
}

/// Three steps of `llama` on `device` with the optimiser `make` builds (for the step's gate or
/// another), the weights after each.
pub fn three_steps(
    llama: &Llama,
    device: &Device,
    settings: StepSettings,
    make: impl Fn(&TrainingModel) -> ModuleOptimizer,
) -> Vec<Vec<f32>> {
    let mut model = TrainingModel::new(llama.clone(), settings);
    let mut optim = make(&model);
    (0..3)
        .map(|step| {
            let output = model.step(batch(step, device));
            model = model.clone().optimize(&mut optim, 3e-3.into(), output.grads);
            ParamValues::flat_of(&model)
        })
        .collect()
}
