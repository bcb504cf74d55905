//! The learning-rate schedule and global-norm gradient clipping, against hand computations.

mod common;
use common::edited;

use burn::lr_scheduler::LrScheduler;
use burn::module::{Module, ModuleVisitor, Param};
use burn::optim::GradientsParams;
use burn::tensor::Tensor;
use common::{cpu, random_tokens, values};
use layernorm_scaling::model::cross_entropy;
use layernorm_scaling::train::{clip_grad_norm, global_grad_norm, WarmupCosineConfig};
use layernorm_scaling::LlamaConfig;

#[test]
fn warmup_then_cosine_to_a_tenth_of_the_peak() {
    let schedule = WarmupCosineConfig::new(1e-3, 110).with_warmup_steps(10).with_min_lr_ratio(0.1).init().unwrap();
    let close = |a: f64, b: f64| (a - b).abs() < 1e-12;
    assert!(close(schedule.lr_at(1), 1e-4));
    assert!(close(schedule.lr_at(5), 5e-4));
    assert!(close(schedule.lr_at(10), 1e-3));
    // Half way through the decay: 0.1 + 0.9 * (1 + cos(pi/2)) / 2 = 0.55 of the peak.
    assert!(close(schedule.lr_at(60), 5.5e-4));
    // A quarter: 0.1 + 0.9 * (1 + cos(pi/4)) / 2.
    assert!(close(schedule.lr_at(35), 1e-3 * (0.1 + 0.45 * (1.0 + std::f64::consts::FRAC_1_SQRT_2))));
    assert!(close(schedule.lr_at(110), 1e-4));
    assert!(close(schedule.lr_at(500), 1e-4));
    // Stepping gives the same numbers, and the state survives a record round trip.
    let mut stepped = schedule.clone();
    let rates: Vec<f64> = (0..35).map(|_| stepped.step()).collect();
    assert!(close(rates[4], 5e-4) && close(rates[34], schedule.lr_at(35)));
    let mut restored = WarmupCosineConfig::new(1e-3, 110).with_warmup_steps(10).with_min_lr_ratio(0.1).init().unwrap();
    restored.load_record(stepped.to_record());
    assert_eq!(restored.steps_taken(), 35);
    assert!(close(restored.step(), stepped.step()));
    // Bad settings.
    assert!(WarmupCosineConfig::new(1e-3, 100)
        .with_warmup_steps(200)
        .with_min_lr_ratio(0.1)
        .init()
        .unwrap_err()
        .to_string()
        .contains("warmup"));
    assert!(WarmupCosineConfig::new(0.0, 100).with_warmup_steps(0).with_min_lr_ratio(0.1).init().is_err());
    assert!(WarmupCosineConfig::new(1e-3, 100)
        .with_warmup_steps(0)
        .with_min_lr_ratio(1.5)
        .init()
        .unwrap_err()
        .to_string()
        .contains("min_lr_ratio"));
}

/// Sum of squares of every gradient, computed on the host in f64.
struct HandNorm<'a>(&'a GradientsParams, f64);
impl ModuleVisitor for HandNorm<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        if let Some(grad) = self.0.get::<D>(param.id) {
            self.1 += values(&grad).iter().map(|&g| (g as f64).powi(2)).sum::<f64>();
        }
    }
}

#[test]
fn global_norm_clipping_matches_a_hand_computed_norm() {
    let device = cpu().autodiff();
    let model = LlamaConfig::tiny().init(&device).unwrap();
    let tokens = random_tokens(2, 9, 256, 1, &device);
    let loss = cross_entropy(model.forward(tokens.clone().narrow(1, 0, 8)), tokens.narrow(1, 1, 8));
    let mut grads = GradientsParams::from_grads(loss.backward(), &model);

    let mut hand = HandNorm(&grads, 0.0);
    model.visit(&mut hand);
    let norm = hand.1.sqrt();
    assert!((global_grad_norm(&grads, &model) - norm).abs() < 1e-5 * norm, "{norm}");

    // A larger limit leaves the gradients alone; a smaller one rescales them all to it.
    assert!((clip_grad_norm(&mut grads, &model, norm * 2.0) - norm).abs() < 1e-5 * norm);
    assert!((global_grad_norm(&grads, &model) - norm).abs() < 1e-5 * norm);
    let before = clip_grad_norm(&mut grads, &model, norm / 4.0);
    assert!((before - norm).abs() < 1e-5 * norm);
    let after = global_grad_norm(&grads, &model);
    assert!((after - norm / 4.0).abs() < 1e-4 * norm, "{after} vs {}", norm / 4.0);
}

#[test]
fn adamw_decays_the_matrices_and_nothing_that_scales_gates_or_embeds_under_every_scheme() {
    use burn::optim::lr_scheduler::module_lr_scheduler::ModuleLearningRate;
    use layernorm_scaling::norm::NormScheme;
    use layernorm_scaling::train::{optimizer, StepSettings, TrainConfig, TrainingModel};

    let device = cpu().autodiff();
    let config = edited(&TrainConfig::default(), |c| c.optim.weight_decay = 0.5);
    // What the names said before the groups came from shapes and types.
    let named_no_decay = |path: &str| {
        ["norm", "embed_tokens", "attn_gate", "ffn_gate", "gpas_gate"].iter().any(|name| path.contains(name))
    };
    for scheme in NormScheme::with_every_position() {
        let llama_config = LlamaConfig { norm_scheme: scheme.clone(), ..LlamaConfig::tiny() };
        let llama = llama_config.init(&device).unwrap();
        let model = TrainingModel::new(llama, StepSettings::default());
        let before = common::ParamValues::of(&model);
        // Zero gradients: Adam moves nothing, so whatever changes was decayed.
        let tokens = random_tokens(2, 9, 256, 3, &device);
        let loss = model.model.next_token_loss(tokens.clone().narrow(1, 0, 8), tokens.narrow(1, 1, 8)) * 0.0;
        let grads = GradientsParams::from_grads(loss.backward(), &model);
        let mut optim = optimizer(&config, &llama_config, &model, model.gate());
        let after = common::ParamValues::of(&optim.step(ModuleLearningRate::from(0.1), model, grads));
        let mut decayed = 0;
        for ((path, old), (_, new)) in before.iter().zip(&after) {
            let changed = old != new;
            assert_eq!(changed, !named_no_decay(path), "{scheme}: {path} decayed: {changed}");
            decayed += usize::from(changed);
        }
        assert!(decayed >= 7 * LlamaConfig::tiny().n_layers, "{scheme}: every block's matrices decay");
    }
}
