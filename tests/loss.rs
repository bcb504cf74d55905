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
