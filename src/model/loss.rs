//! The language-modelling loss: mean cross-entropy of next-token prediction.

use burn::nn::loss::CrossEntropyLossConfig;
use burn::tensor::{Int, Tensor};

/// Mean cross-entropy of `logits: [batch, seq, vocab]` against `targets: [batch, seq]` -> `[1]`.
///
/// For next-token prediction, `targets` are the inputs shifted left by one position.
pub fn cross_entropy(logits: Tensor<3>, targets: Tensor<2, Int>) -> Tensor<1> {
    let [batch, seq, vocab] = logits.dims();
    let loss = CrossEntropyLossConfig::new().init(&logits.device());
    loss.forward(logits.reshape([batch * seq, vocab]), targets.reshape([batch * seq]))
}
