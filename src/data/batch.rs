//! Batching windows into input and target tensors.

use burn::data::dataloader::batcher::Batcher;
use burn::tensor::{Device, Int, Tensor, TensorData};

use super::packed::TokenWindow;

/// A batch for next-token prediction.
#[derive(Clone, Debug)]
pub struct LmBatch {
    /// `[batch, seq_len]` token ids.
    pub inputs: Tensor<2, Int>,
    /// `[batch, seq_len]` the next token of each input position.
    pub targets: Tensor<2, Int>,
}

/// Stacks [`TokenWindow`]s of `seq_len + 1` tokens into an [`LmBatch`].
#[derive(Clone, Debug, Default)]
pub struct LmBatcher;

impl Batcher<TokenWindow, LmBatch> for LmBatcher {
    fn batch(&self, items: Vec<TokenWindow>, device: &Device) -> LmBatch {
        let batch = items.len();
        let seq_len = items.first().map_or(0, |w| w.tokens.len() - 1);
        let mut inputs = Vec::with_capacity(batch * seq_len);
        let mut targets = Vec::with_capacity(batch * seq_len);
        for window in &items {
            inputs.extend(window.tokens[..seq_len].iter().map(|&t| t as i64));
            targets.extend(window.tokens[1..].iter().map(|&t| t as i64));
        }
        LmBatch {
            inputs: Tensor::from_data(TensorData::new(inputs, [batch, seq_len]), device),
            targets: Tensor::from_data(TensorData::new(targets, [batch, seq_len]), device),
        }
    }
}
