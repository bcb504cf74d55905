//! The diagnostics the field uses beside the paper's: the logit lens, Block Influence and the
//! largest activation per layer, in `analyze`'s report, and the largest activation in
//! `--track-every`'s records.

mod common;

use burn::data::dataloader::batcher::Batcher;
use burn::tensor::activation::log_softmax;
use common::{assert_png_not_blank, builtin_data, cpu, values};
use layernorm_scaling::analysis::{analyze, block_influence, logit_lens, AnalysisOptions};
use layernorm_scaling::data::LmBatcher;
use layernorm_scaling::measure::max_abs_activations;
use layernorm_scaling::{LlamaConfig, NormScheme};

#[test]
fn the_logit_lens_of_the_last_block_is_the_models_own_loss() {
    let dir = tempfile::tempdir().unwrap();
    let data = builtin_data(dir.path(), 200, 32);
    let model = LlamaConfig::tiny().with_norm_scheme(NormScheme::PreLn).init(&cpu()).unwrap();
    let batch = LmBatcher.batch((0..4).map(|i| data.window(i)).collect(), &cpu());
    let trace = model.forward_trace(batch.inputs.clone());
    let lens = logit_lens(&model, &trace, batch.targets.clone());
    assert_eq!((lens.loss.len(), lens.kl.len()), (5, 5), "the embedding output and 4 blocks");
    let own = values(&model.next_token_loss(batch.inputs.clone(), batch.targets.clone()))[0] as f64;
    assert!((lens.loss[4] - own).abs() < 1e-5, "lens {} vs the model's loss {own}", lens.loss[4]);
    assert!(lens.kl[4].abs() < 1e-6, "the last block's lens is the model: KL {}", lens.kl[4]);
    assert!(lens.kl[..4].iter().all(|&kl| kl > 0.0), "{:?}", lens.kl);

    // Layer 2's lens by hand: its hidden state through the final norm and the head, its loss
    // and the KL from the model's distribution, token by token.
    let logits = model.lm_head.as_ref().unwrap().forward(model.norm.forward(trace.hidden[2].clone()));
    let [b, s, v] = logits.dims();
    let lens_log_probs = values(&log_softmax(logits, 2));
    let model_log_probs = values(&log_softmax(trace.logits.clone(), 2));
    let targets: Vec<i64> = batch.targets.to_data().convert::<i64>().try_to_vec::<i64>().unwrap();
    let (mut loss, mut kl) = (0.0f64, 0.0f64);
    for token in 0..b * s {
        let row = token * v;
        loss -= lens_log_probs[row + targets[token] as usize] as f64;
        for i in 0..v {
            let p = (model_log_probs[row + i] as f64).exp();
            kl += p * (model_log_probs[row + i] as f64 - lens_log_probs[row + i] as f64);
        }
    }
    let tokens = (b * s) as f64;
    assert!((lens.loss[2] - loss / tokens).abs() < 1e-4, "{} vs {}", lens.loss[2], loss / tokens);
    assert!((lens.kl[2] - kl / tokens).abs() < 1e-4, "{} vs {}", lens.kl[2], kl / tokens);
}

#[test]
fn block_influence_and_the_largest_activation_match_a_hand_computation() {
    let dir = tempfile::tempdir().unwrap();
    let data = builtin_data(dir.path(), 200, 32);
    let model = LlamaConfig::tiny().init(&cpu()).unwrap();
    let batch = LmBatcher.batch((0..2).map(|i| data.window(i)).collect(), &cpu());
    let trace = model.forward_trace(batch.inputs);
    let influence = block_influence(&trace);
    let max_abs = max_abs_activations(&trace);
    assert_eq!((influence.len(), max_abs.len()), (4, 5));
    for l in 1..=4 {
        let (x, y) = (values(&trace.hidden[l - 1]), values(&trace.hidden[l]));
        let cosines: Vec<f64> = x
            .chunks(64)
            .zip(y.chunks(64))
            .map(|(a, b)| {
                let dot: f64 = a.iter().zip(b).map(|(p, q)| *p as f64 * *q as f64).sum();
                let norm = |v: &[f32]| v.iter().map(|p| (*p as f64).powi(2)).sum::<f64>().sqrt();
                dot / (norm(a) * norm(b))
            })
            .collect();
        let expected = 1.0 - cosines.iter().sum::<f64>() / cosines.len() as f64;
        assert!((influence[l - 1] - expected).abs() < 1e-5, "layer {l}: {} vs {expected}", influence[l - 1]);
        let largest = y.iter().fold(0.0f64, |m, v| m.max((*v as f64).abs()));
        assert_eq!(max_abs[l], largest, "layer {l}");
    }
}

#[test]
fn a_report_holds_the_lens_diagnostics_with_their_figures() {
    let dir = tempfile::tempdir().unwrap();
    let data = builtin_data(dir.path(), 200, 32);
    let model = LlamaConfig::tiny().init(&cpu()).unwrap();
    let options = AnalysisOptions { batch_size: 4, batches: 2, ..AnalysisOptions::default() };
    let report = analyze(&model, &data, &options, &mut |_, _| {}).unwrap();
    // Both batches have 4 sequences: the model's mean loss is the lens's last value.
    assert!((report.logit_lens_loss[4] - report.perplexity.ln()).abs() < 1e-4);
    assert_eq!(report.block_influence.len(), 4);
    assert_eq!(report.max_abs_activation.len(), 5);
    let out = dir.path().join("report");
    report.write(&out, "tiny").unwrap();
    for figure in ["logit_lens.png", "block_influence.png", "max_abs_activation.png"] {
        assert_png_not_blank(&out.join(figure));
    }
    let csv = std::fs::read_to_string(out.join("layers.csv")).unwrap();
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    for column in ["block_influence", "logit_lens_loss", "logit_lens_kl", "max_abs_activation"] {
        assert!(header.contains(&column), "{column} missing from {header:?}");
    }
    assert!(std::fs::read_to_string(out.join("summary.md")).unwrap().contains("Block Influence"));
}
