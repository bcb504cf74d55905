//! The optimiser a run trains with: Adam, or AdamW with no weight decay on the parameters that
//! scale or gate rather than map (every one of fewer than two dimensions: norm gains and biases,
//! DyT's alpha, LayerScale and SkipInit gates) and on the embedding table. They are found by shape
//! and type, so a new scheme's gains are never decayed, whatever their names.

use burn::module::{Module, ModuleVisitor, Param, ParamGroup};
use burn::optim::ModuleOptimizer;
use burn::tensor::Tensor;

use super::config::TrainConfig;
use super::guarded_adam::{GuardedAdam, StepGate};
use super::settings::OptimizerKind;
use crate::model::LlamaConfig;

/// The optimiser `config` asks for, for `module` (the module the optimiser steps: its parameter
/// paths decide the groups), a model of `model`'s config: its scheme may scale Adam's epsilon
/// (CompleteP: `eps L_base / L`, on every parameter as the authors' code does). Its updates
/// follow `gate`, which the training step sets ([`GuardedAdam`]): give the step's own,
/// [`TrainingModel::gate`](super::TrainingModel::gate).
pub fn optimizer<M: Module>(config: &TrainConfig, model: &LlamaConfig, module: &M, gate: &StepGate) -> ModuleOptimizer {
    let eps = config.optim.eps * model.norm_scheme.adam_eps_factor(model.n_layers);
    gate.attach();
    let adam = |weight_decay: f64| GuardedAdam {
        beta_1: config.optim.beta1 as f32,
        beta_2: config.optim.beta2 as f32,
        epsilon: eps as f32,
        weight_decay: weight_decay as f32,
        gate: gate.clone(),
    };
    match config.optim.optimizer {
        OptimizerKind::Adam => ModuleOptimizer::from(adam(0.0)),
        OptimizerKind::Adamw => {
            let no_decay = ParamGroup::from_paths(no_decay_paths(module));
            ModuleOptimizer::from(adam(config.optim.weight_decay)).with_group(no_decay, adam(0.0), None)
        }
    }
}

/// The paths (as the optimiser writes them, `model.layers.0.attn_norm.Rms.gamma`) of `module`'s
/// parameters that AdamW does not decay: those of fewer than two dimensions, and embedding tables.
pub fn no_decay_paths<M: Module>(module: &M) -> Vec<String> {
    let mut visitor = NoDecay::default();
    module.visit(&mut visitor);
    visitor.paths
}

#[derive(Default)]
struct NoDecay {
    /// The names of the modules entered, and whether each is an embedding.
    path: Vec<(String, bool)>,
    paths: Vec<String>,
}

impl ModuleVisitor for NoDecay {
    fn enter_module(&mut self, name: &str, container_type: &str) {
        self.path.push((name.to_string(), container_type == "Struct:Embedding"));
    }

    fn exit_module(&mut self, _name: &str, _container_type: &str) {
        self.path.pop();
    }

    fn visit_float<const D: usize>(&mut self, _param: &Param<Tensor<D>>) {
        if D < 2 || self.path.iter().any(|(_, embedding)| *embedding) {
            self.paths.push(self.path.iter().map(|(name, _)| name.as_str()).collect::<Vec<_>>().join("."));
        }
    }
}
