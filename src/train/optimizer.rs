//! The optimiser a run trains with: Adam, or AdamW with no weight decay on the parameters that
//! scale or gate rather than map (every one of fewer than two dimensions: norm gains and biases,
//! DyT's alpha, LayerScale and SkipInit gates) and on the embedding table. They are found by shape
//! and type, so a new scheme's gains are never decayed, whatever their names.

use burn::module::{Module, ModuleVisitor, Param, ParamGroup};
use burn::optim::{AdamConfig, AdamWConfig, ModuleOptimizer};
use burn::tensor::Tensor;

use super::config::TrainConfig;
use super::settings::OptimizerKind;
use crate::LlamaConfig;

/// The optimiser `config` asks for, for `module` (the module the optimiser steps: its parameter
/// paths decide the groups), a model of `model`'s config: its scheme may scale Adam's epsilon
/// (CompleteP: `eps L_base / L`, on every parameter as the authors' code does).
pub fn optimizer<M: Module>(config: &TrainConfig, model: &LlamaConfig, module: &M) -> ModuleOptimizer {
    let eps = config.optim.eps * model.norm_scheme.adam_eps_factor(model.n_layers);
    let (beta1, beta2, eps) = (config.optim.beta1 as f32, config.optim.beta2 as f32, eps as f32);
    match config.optim.optimizer {
        OptimizerKind::Adam => AdamConfig::new().with_beta_1(beta1).with_beta_2(beta2).with_epsilon(eps).init(),
        OptimizerKind::Adamw => {
            let adamw = |decay: f64| {
                AdamWConfig::new()
                    .with_beta_1(beta1)
                    .with_beta_2(beta2)
                    .with_epsilon(eps)
                    .with_weight_decay(decay as f32)
            };
            let no_decay = ParamGroup::from_paths(no_decay_paths(module));
            adamw(config.optim.weight_decay).init().with_group(no_decay, adamw(0.0).build(), None)
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
