//! Batching windows into input and target tensors, with the targets that count.

use burn::data::dataloader::batcher::Batcher;
use burn::tensor::{Device, Int, Tensor, TensorData};

use super::sequences::TokenWindow;

/// A batch for next-token prediction.
#[derive(Clone, Debug)]
pub struct LmBatch {
    /// `[batch, seq_len]` token ids.
    pub inputs: Tensor<2, Int>,
    /// `[batch, seq_len]` the next token of each input position.
    pub targets: Tensor<2, Int>,
    /// `[counted]` the positions (`row * seq_len + column`, ascending) whose targets count when
    /// some are padding; `None` when every target counts.
    pub counted: Option<Tensor<1, Int>>,
    /// The targets that count: `batch * seq_len` unless some are padding.
    pub n_targets: usize,
}

impl LmBatch {
    /// A batch whose every target counts. Shapes: `inputs, targets: [batch, seq_len]`.
    pub fn new(inputs: Tensor<2, Int>, targets: Tensor<2, Int>) -> Self {
        let [batch, seq_len] = targets.dims();
        Self { inputs, targets, counted: None, n_targets: batch * seq_len }
    }
}

/// Stacks [`TokenWindow`]s of `seq_len + 1` tokens into an [`LmBatch`]; the targets of padding
/// positions are left out of [`LmBatch::counted`].
#[derive(Clone, Debug, Default)]
pub struct LmBatcher;

impl Batcher<TokenWindow, LmBatch> for LmBatcher {
    fn batch(&self, items: Vec<TokenWindow>, device: &Device) -> LmBatch {
        let batch = items.len();
        let seq_len = items.first().map_or(0, |w| w.tokens.len() - 1);
        let mut inputs = Vec::with_capacity(batch * seq_len);
        let mut targets = Vec::with_capacity(batch * seq_len);
        let mut counted = Vec::new();
        let padded = items.iter().any(|window| window.targets() < seq_len);
        for (row, window) in items.iter().enumerate() {
            inputs.extend(window.tokens[..seq_len].iter().map(|&t| t as i64));
            targets.extend(window.tokens[1..].iter().map(|&t| t as i64));
            if padded {
                counted.extend((0..window.targets().min(seq_len)).map(|column| (row * seq_len + column) as i64));
            }
        }
        let n_targets = if padded { counted.len() } else { batch * seq_len };
        LmBatch {
            inputs: Tensor::from_data(TensorData::new(inputs, [batch, seq_len]), device),
            targets: Tensor::from_data(TensorData::new(targets, [batch, seq_len]), device),
            counted: padded.then(|| Tensor::from_data(TensorData::new(counted, [n_targets]), device)),
            n_targets,
        }
    }
}
