//! The training step decides on the device: the gradient norm, the clip factor and whether an
//! update applies stay tensors that the optimiser ([`GuardedAdam`]) reads, so the host never waits
//! for the device inside a step. Checked against Burn's own AdamW and the host-side path.

mod common;

use burn::module::Module;
use burn::optim::{GradientsParams, ModuleOptimizer};
use burn::train::TrainStep;
use common::optimiser_steps::{self, burns_adamw, config};
use common::{cpu, ParamValues};
use layernorm_scaling::data::LmBatch;
use layernorm_scaling::train::{optimizer, DivergedValue, StepGate, StepSettings, TrainingModel};
use layernorm_scaling::{Llama, LlamaConfig};

/// The tiny model's initial weights, the same for every variant of a test and every run (the
/// clip comparison's rounding, magnified by Adam near zero gradients, depends on the weights).
fn initial() -> Llama {
    LlamaConfig::tiny().init(&cpu().autodiff()).unwrap().map(&mut common::Redraw::new(2, 0.02))
}

/// Three steps of `llama` on the CPU with the optimiser `make` builds, the weights after each.
fn three_steps(
    llama: &Llama,
    settings: StepSettings,
    make: impl Fn(&TrainingModel) -> ModuleOptimizer,
) -> Vec<Vec<f32>> {
    optimiser_steps::three_steps(llama, &cpu(), settings, make)
}

/// A batch of random tokens on the CPU.
fn batch(seed: u64) -> LmBatch {
    optimiser_steps::batch(seed, &cpu())
}

#[test]
fn the_guarded_adamw_is_burns_adamw_bit_for_bit() {
    let (config, llama) = (config(None), initial());
    // Burn's AdamW with the run's groups (no decay on gains and the embedding), and ours with no
    // gate attached to the step: the host path, the optimiser's own arithmetic.
    let burns = three_steps(&llama, StepSettings::default(), burns_adamw);
    let ours = three_steps(&llama, StepSettings::default(), |model| {
        optimizer(&config, &LlamaConfig::tiny(), model, &StepGate::default())
    });
    assert_eq!(config.optim.beta1, 0.9);
    assert_eq!(config.optim.beta2, 0.999);
    assert_eq!(config.optim.eps, 1e-8);
    assert_eq!(ours, burns, "the same weights after every step");
    // The step deciding on the device (factor 1, every update applied): the same bits again.
    let on_device = three_steps(&llama, StepSettings::default(), |model| {
        optimizer(&config, &LlamaConfig::tiny(), model, model.gate())
    });
    assert_eq!(on_device, burns);
}

#[test]
fn clipping_on_the_device_matches_clipping_on_the_host() {
    // A clip well below the tiny model's gradient norm (about 1 to 5), so every step is clipped.
    let (config, llama) = (config(Some(0.05)), initial());
    let settings = || StepSettings { clip_grad_norm: Some(0.05), ..StepSettings::default() };
    let host =
        three_steps(&llama, settings(), |model| optimizer(&config, &LlamaConfig::tiny(), model, &StepGate::default()));
    let device = three_steps(&llama, settings(), |model| optimizer(&config, &LlamaConfig::tiny(), model, model.gate()));
    let unclipped = three_steps(&llama, StepSettings::default(), |model| {
        optimizer(&config, &LlamaConfig::tiny(), model, model.gate())
    });
    // The host clips by an f64 factor of the f32 norm, the device by an f32 one: a relative
    // difference of 1e-7, which Adam's division by the root of the second moment can magnify
    // where a gradient is near epsilon (4.7e-6 seen once in ten runs), against steps of 3e-3.
    for step in 0..3 {
        let worst = host[step].iter().zip(&device[step]).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(worst <= 2e-5, "step {step}: the two paths differ by {worst}");
        assert_ne!(device[step], unclipped[step], "step {step}: clipping changed the update");
    }
}

#[test]
fn a_non_finite_gradient_refuses_this_update_and_every_later_one_until_the_host_reads_it() {
    let settings = StepSettings::default();
    let monitor = settings.monitor.clone();
    let mut model = TrainingModel::new(initial(), settings);
    let mut optim = optimizer(&config(None), &LlamaConfig::tiny(), &model, model.gate());
    let good = model.step(batch(1));
    model = model.clone().optimize(&mut optim, 3e-3.into(), good.grads);
    let after_good = ParamValues::flat_of(&model);
    // A step whose gradients are NaN: nothing moves, and nothing has been read yet. (Its output
    // carries the slot the metrics read its norm from.)
    let nan_step = model.step(batch(2));
    let loss = model.model.next_token_loss(batch(2).inputs, batch(2).targets) * f64::NAN;
    let grads = GradientsParams::from_grads(loss.backward(), &model);
    model = model.clone().optimize(&mut optim, 3e-3.into(), grads);
    assert_eq!(ParamValues::flat_of(&model), after_good, "the NaN step is refused");
    assert!(ParamValues::flat_of(&model).iter().all(|v| v.is_finite()));
    assert!(!monitor.has_diverged(), "the host has not read the norm yet");
    let slot = nan_step.item.grad_norm.expect("the step's last micro-batch carries its norm");
    let norm = slot.get().expect("the step left its norm").value();
    assert!(norm.is_nan(), "{norm}");
    // A later step with finite gradients, before the host has read the norm: refused too, so the
    // weights stay those of the last good step.
    let later = model.step(batch(3));
    model = model.clone().optimize(&mut optim, 3e-3.into(), later.grads);
    assert_eq!(ParamValues::flat_of(&model), after_good, "no update after a refused one");
    // Reading the norm told the monitor: the run has diverged at step 2 and stops.
    assert!(monitor.has_diverged());
    let divergence = monitor.divergence().expect("diverged");
    let nan_norm = matches!(divergence.value, DivergedValue::GradNorm(norm) if norm.is_nan());
    assert!(divergence.step == 2 && nan_norm, "{divergence:?}");
}
