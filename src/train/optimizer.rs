//! The optimiser a run trains with: Adam, or AdamW with no weight decay on the norms, the
//! embeddings and the branch gates.

use burn::module::ParamGroup;
use burn::optim::{AdamConfig, AdamWConfig, ModuleOptimizer};

use super::config::{OptimizerKind, TrainConfig};

/// The optimiser `config` asks for.
pub fn optimizer(config: &TrainConfig) -> ModuleOptimizer {
    let (beta1, beta2, eps) = (config.beta1 as f32, config.beta2 as f32, config.eps as f32);
    match config.optimizer {
        OptimizerKind::Adam => AdamConfig::new().with_beta_1(beta1).with_beta_2(beta2).with_epsilon(eps).init(),
        OptimizerKind::Adamw => {
            let adamw = |decay: f64| {
                AdamWConfig::new()
                    .with_beta_1(beta1)
                    .with_beta_2(beta2)
                    .with_epsilon(eps)
                    .with_weight_decay(decay as f32)
            };
            // Norms, embeddings and branch gates are never decayed.
            let no_decay = ParamGroup::from_any_predicates(vec!["norm", "embed_tokens", "attn_gate", "ffn_gate"]);
            adamw(config.weight_decay).init().with_group(no_decay, adamw(0.0).build(), None)
        }
    }
}
