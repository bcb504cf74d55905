//! The closed-form loss: its value and every parameter's gradient against Burn's own
//! `CrossEntropyLoss` (log-softmax traced by autodiff), and its value against a hand computation.

mod common;

use burn::module::{Module, ModuleVisitor, Param};
use burn::nn::loss::CrossEntropyLossConfig;
use burn::optim::GradientsParams;
use burn::tensor::{Int, Tensor, TensorData};
use common::{cpu, random_tokens, values};
use layernorm_scaling::model::cross_entropy;
use layernorm_scaling::LlamaConfig;

/// Every gradient of `grads`, parameter by parameter, in visiting order.
struct Grads<'a>(&'a GradientsParams, Vec<Vec<f32>>);
impl ModuleVisitor for Grads<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        self.1.push(self.0.get::<D>(param.id).map(|g| values(&g)).unwrap_or_default());
    }
}

fn grads_of<M: Module>(model: &M, grads: &GradientsParams) -> Vec<Vec<f32>> {
    let mut visitor = Grads(grads, Vec::new());
    model.visit(&mut visitor);
    visitor.1
}

#[test]
fn the_fused_loss_has_burns_value_and_gradients_with_tied_and_untied_heads() {
    let device = cpu().autodiff();
    for tie_embeddings in [false, true] {
        let config = LlamaConfig { tie_embeddings, ..LlamaConfig::tiny() };
        let model = config.init(&device).unwrap();
        let tokens = random_tokens(3, 17, config.vocab_size, 5, &device);
        let (inputs, targets) = (tokens.clone().narrow(1, 0, 16), tokens.narrow(1, 1, 16));

        let logits = model.forward(inputs.clone());
        let [batch, seq, vocab] = logits.dims();
        let reference = CrossEntropyLossConfig::new()
            .init(&device)
            .forward(logits.reshape([batch * seq, vocab]), targets.clone().reshape([batch * seq]));
        let reference_grads = grads_of(&model, &GradientsParams::from_grads(reference.backward(), &model));

        for (name, loss) in [
            ("next_token_loss", model.next_token_loss(inputs.clone(), targets.clone())),
            ("cross_entropy", cross_entropy(model.forward(inputs.clone()), targets.clone())),
        ] {
            let (a, b) = (loss.clone().into_scalar::<f64>(), reference.clone().into_scalar::<f64>());
            assert!((a - b).abs() < 1e-5, "{name} (tied {tie_embeddings}): {a} vs {b}");
            let grads = grads_of(&model, &GradientsParams::from_grads(loss.backward(), &model));
            assert_eq!(grads.len(), reference_grads.len());
            for (index, (g, r)) in grads.iter().zip(&reference_grads).enumerate() {
                assert_eq!(g.len(), r.len(), "{name}: parameter {index} has a gradient in one and not the other");
                let scale = r.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-6);
                let diff = g.iter().zip(r).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
                assert!(
                    diff <= 1e-4 * scale + 1e-7,
                    "{name} (tied {tie_embeddings}) parameter {index}: {diff} of {scale}"
                );
            }
        }
    }
}

#[test]
fn the_loss_value_matches_a_hand_computation_without_autodiff() {
    // Two positions over a vocabulary of 3: -(log softmax([1,2,3])[2] + log softmax([0,0,0])[0]) / 2.
    let device = cpu();
    let logits = Tensor::<3>::from_data(TensorData::new(vec![1.0f32, 2.0, 3.0, 0.0, 0.0, 0.0], [1, 2, 3]), &device);
    let targets = Tensor::<2, Int>::from_data(TensorData::new(vec![2i64, 0], [1, 2]), &device);
    let lse = (1f64.exp() + 2f64.exp() + 3f64.exp()).ln();
    let expected = ((lse - 3.0) + 3f64.ln()) / 2.0;
    let loss = cross_entropy(logits, targets).into_scalar::<f64>();
    assert!((loss - expected).abs() < 1e-6, "{loss} vs {expected}");
}

/// `-log softmax(row)[target]` in f64.
fn token_loss(row: &[f32], target: usize) -> f64 {
    let max = row.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64));
    let lse = max + row.iter().map(|&v| (v as f64 - max).exp()).sum::<f64>().ln();
    lse - row[target] as f64
}

#[test]
fn padding_is_masked_from_the_loss_and_its_gradient() {
    use burn::data::dataloader::batcher::Batcher;
    use layernorm_scaling::data::{LmBatcher, TokenWindow};
    let device = cpu().autodiff();
    let config = LlamaConfig::tiny();
    let model = config.init(&device).unwrap();
    // Three documents cut or padded to 6 + 1 tokens: 7, 3 and 5 real tokens (padding 0, then 9).
    let windows = |pad: u32| {
        vec![
            TokenWindow { tokens: vec![5, 17, 3, 99, 42, 8, 1], real: 7 },
            TokenWindow { tokens: vec![12, 7, 0, pad, pad, pad, pad], real: 3 },
            TokenWindow { tokens: vec![61, 2, 33, 90, 0, pad, pad], real: 5 },
        ]
    };
    let batch = LmBatcher.batch(windows(0), &device);
    assert_eq!(batch.n_targets, 6 + 2 + 4);
    let loss = model.next_token_loss_counting(batch.inputs.clone(), batch.targets.clone(), batch.counted.clone());

    // By hand from the model's own logits: the mean over the 12 real targets, none of the padding.
    let logits = values(&model.forward(batch.inputs.clone()));
    let vocab = config.vocab_size;
    let mut expected = 0.0;
    for (row, window) in windows(0).iter().enumerate() {
        for column in 0..window.real - 1 {
            let at = (row * 6 + column) * vocab;
            expected += token_loss(&logits[at..at + vocab], window.tokens[column + 1] as usize);
        }
    }
    expected /= 12.0;
    let value = loss.clone().into_scalar::<f64>();
    assert!((value - expected).abs() < 1e-5, "{value} vs {expected}");

    // Other padding tokens change nothing: attention is causal and the padded targets are not counted.
    let other = LmBatcher.batch(windows(9), &device);
    let repadded = model.next_token_loss_counting(other.inputs, other.targets, other.counted).into_scalar::<f64>();
    assert_eq!(repadded.to_bits(), value.to_bits());

    // The gradient is that of Burn's own cross-entropy over the real targets alone.
    let rows = batch.counted.clone().unwrap();
    let reference = CrossEntropyLossConfig::new().init(&device).forward(
        model.forward(batch.inputs).reshape([3 * 6, vocab]).select(0, rows.clone()),
        batch.targets.reshape([3 * 6]).select(0, rows),
    );
    let reference_grads = grads_of(&model, &GradientsParams::from_grads(reference.backward(), &model));
    let grads = grads_of(&model, &GradientsParams::from_grads(loss.backward(), &model));
    for (index, (g, r)) in grads.iter().zip(&reference_grads).enumerate() {
        let scale = r.iter().fold(0f32, |m, v| m.max(v.abs())).max(1e-6);
        let diff = g.iter().zip(r).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
        assert!(diff <= 1e-4 * scale + 1e-7, "parameter {index}: {diff} of {scale}");
    }
}
