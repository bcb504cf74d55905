//! The logit lens (nostalgebraist 2020): each block's output read through the model's final norm
//! and LM head, as if the blocks above it were removed. Its next-token loss falls with depth as
//! the blocks add what they know; where it stops falling, the blocks above add little. The KL
//! divergence from the model's own prediction says how far each layer's reading is from the end.

use burn::tensor::activation::log_softmax;
use burn::tensor::{Int, Tensor};

use crate::model::{ForwardTrace, Llama};

/// Per layer (`n_layers + 1`: the embedding output, then each block's output), each a mean over
/// the tokens of one batch.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LogitLens {
    /// Next-token cross-entropy of the lens's logits.
    pub loss: Vec<f64>,
    /// `KL(p_model || p_lens)`, nats: the model's own next-token distribution against the lens's.
    pub kl: Vec<f64>,
}

/// The logit lens of every hidden state of `trace` (a trace of `model`), against `targets: [batch, seq]`.
pub fn logit_lens(model: &Llama, trace: &ForwardTrace, targets: Tensor<2, Int>) -> LogitLens {
    let model_log_probs = log_softmax(trace.logits.clone(), 2); // [batch, seq, vocab]
    let model_probs = model_log_probs.clone().exp();
    let targets = targets.unsqueeze_dim::<3>(2); // [batch, seq, 1]
    let mut lens = LogitLens::default();
    for hidden in &trace.hidden {
        let log_probs = log_softmax(model.logit_lens(hidden.clone()), 2); // [batch, seq, vocab]
        let target_log_probs = log_probs.clone().gather(2, targets.clone()); // [batch, seq, 1]
        lens.loss.push(-scalar(target_log_probs.mean()));
        let kl = (model_probs.clone() * (model_log_probs.clone() - log_probs)).sum_dim(2); // [batch, seq, 1]
        lens.kl.push(scalar(kl.mean()));
    }
    lens
}

fn scalar(value: Tensor<1>) -> f64 {
    value.into_scalar::<f32>() as f64
}
