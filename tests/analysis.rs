//! The diagnostics against hand computations and constructed models.

mod common;

use std::sync::Arc;

use burn::module::Param;
use burn::tensor::{Tensor, TensorData};
use common::cpu;
use layernorm_scaling::analysis::{
    angular_distance, angular_distance_matrix, identity_ratios, normalize_per_n, pruning_drops, update_ratio,
};
use layernorm_scaling::data::{tokenize_corpus, train_valid_datasets, CorpusSource, SequenceMode, Tokenizer};
use layernorm_scaling::measure::{layer_variances, mean_loss, token_variance};
use layernorm_scaling::{ConfigError, Error, LlamaConfig, NormScheme};

fn tensor(values: &[f32], d: usize) -> Tensor<3> {
    Tensor::from_data(TensorData::new(values.to_vec(), [1, values.len() / d, d]), &cpu())
}

#[test]
fn angular_distance_is_0_for_parallel_half_for_orthogonal_1_for_opposite() {
    let x = tensor(&[1.0, 0.0, 2.0, 2.0], 2);
    assert!(angular_distance(&x, &(x.clone() * 3.0)).abs() < 1e-6);
    assert!((angular_distance(&x, &x.clone().neg()) - 1.0).abs() < 1e-6);
    let orthogonal = tensor(&[0.0, 5.0, -1.0, 1.0], 2);
    assert!((angular_distance(&x, &orthogonal) - 0.5).abs() < 1e-6);
    // Averaged over tokens: 0 and 0.25 (45 degrees) give 0.125.
    let mixed = tensor(&[2.0, 0.0, 1.0, 0.0], 2);
    assert!((angular_distance(&x, &mixed) - 0.125).abs() < 1e-6);
}

#[test]
fn the_heatmap_matrix_has_a_row_per_layer_and_is_normalised_per_n() {
    let hidden: Vec<Tensor<3>> = (0..5).map(|i| tensor(&[1.0, i as f32], 2)).collect();
    let matrix = angular_distance_matrix(&hidden);
    assert_eq!(matrix.iter().map(Vec::len).collect::<Vec<_>>(), vec![4, 3, 2, 1]);
    // Row 0: hidden[0] = (1, 0) against (1, n): atan(n) / pi.
    for (n, d) in matrix[0].iter().enumerate() {
        assert!((d - ((n + 1) as f64).atan() / std::f64::consts::PI).abs() < 1e-6);
    }
    let normalized = normalize_per_n(&matrix);
    assert_eq!(normalized.iter().map(Vec::len).collect::<Vec<_>>(), vec![4, 3, 2, 1], "the triangle's shape is kept");
    // Each n (a row of the heatmap) is normalised over the starting layers l = 0 ..= 4 - n.
    for k in 0..3 {
        let column: Vec<f64> = normalized.iter().filter_map(|row| row.get(k).copied()).collect();
        assert_eq!(column.iter().copied().fold(f64::INFINITY, f64::min), 0.0, "n = {}", k + 1);
        assert!((column.iter().copied().fold(0.0, f64::max) - 1.0).abs() < 1e-12, "n = {}", k + 1);
    }
    assert_eq!(normalized[0][3], 0.0, "n = 4 has a single value, which normalises to 0");
    // Hand-computed, n = 1: d(l, l+1) = (atan(l+1) - atan(l)) / pi shrinks with l, so layer 0 is
    // the largest (1) and layer 3 the smallest (0); layer 1 lies in between.
    let d1: Vec<f64> = (0..4).map(|l| (((l + 1) as f64).atan() - (l as f64).atan()) / std::f64::consts::PI).collect();
    let expected = (d1[1] - d1[3]) / (d1[0] - d1[3]);
    assert!((normalized[0][0] - 1.0).abs() < 1e-9 && normalized[3][0].abs() < 1e-9);
    assert!((normalized[1][0] - expected).abs() < 1e-6, "{} vs {expected}", normalized[1][0]);
}

#[test]
fn variance_and_identity_ratio_equal_hand_computations() {
    // Token (1, 2, 3, 4): mean 2.5, unbiased variance 5/3; token (2, 2, 2, 2): 0. Mean 5/6.
    let x = tensor(&[1.0, 2.0, 3.0, 4.0, 2.0, 2.0, 2.0, 2.0], 4);
    assert!((token_variance(&x) - 5.0 / 6.0).abs() < 1e-6);
    // x = (3, 4), update (0, 5): ratio 1; x = (6, 8) unchanged: ratio 0. Mean 0.5.
    let input = tensor(&[3.0, 4.0, 6.0, 8.0], 2);
    let output = tensor(&[3.0, 9.0, 6.0, 8.0], 2);
    assert!((update_ratio(&input, &output) - 0.5).abs() < 1e-6);

    let model = LlamaConfig::tiny().init(&cpu()).unwrap();
    let trace = model.forward_trace(common::random_tokens(2, 8, 256, 1, &cpu()));
    let variances = layer_variances(&trace);
    assert_eq!((variances.block_output.len(), variances.after_attention.len()), (5, 4));
    assert!((variances.block_output[2] - token_variance(&trace.hidden[2])).abs() < 1e-12);
    let ratios = identity_ratios(&trace);
    assert_eq!(ratios.len(), 4);
    assert!((ratios[1] - update_ratio(&trace.hidden[1], &trace.hidden[2])).abs() < 1e-12);
}

#[test]
fn pruning_an_identity_block_costs_nothing_and_other_drops_skip_exactly_that_layer() {
    let device = cpu();
    let dir = tempfile::tempdir().unwrap();
    let cache = tokenize_corpus(&CorpusSource::Builtin { n_docs: 300, seed: 1 }, &Tokenizer::Byte, dir.path()).unwrap();
    let (_, valid) = train_valid_datasets(Arc::new(cache), 32, 0.3, 0, SequenceMode::Pack).unwrap();

    let mut model = LlamaConfig::tiny().with_norm_scheme(NormScheme::PreLn).init(&device).unwrap();
    // Block 3 with zeroed output projections adds nothing: it is the identity map.
    let block = &mut model.layers[2];
    block.self_attn.o_proj.weight = Param::from_tensor(block.self_attn.o_proj.weight.val().zeros_like());
    block.mlp.down_proj.weight = Param::from_tensor(block.mlp.down_proj.weight.val().zeros_like());
    let tokens = common::random_tokens(2, 16, 256, 3, &device);
    let full = model.forward(tokens.clone());
    assert!(common::max_abs_diff(&full, &model.forward_skipping(tokens, &[3]).unwrap()) < 1e-6);

    let mut calls = 0;
    let (original, drops) = pruning_drops(&model, &valid, 4, 3, &[], &mut |_, _| calls += 1).unwrap();
    assert_eq!((drops.len(), calls), (4, 5));
    // The identity block costs nothing to the last bit; any other block costs something (how much
    // depends on the unseeded init, which tests running beside this one draw from too).
    assert!(drops[2].abs() < 1e-9 * original, "dP(3) = {}", drops[2]);
    for layer in [1, 2, 4] {
        let expected = mean_loss(&model, &valid, 4, 3, &[layer]).unwrap().exp() - original;
        assert!((drops[layer - 1] - expected).abs() < 1e-9);
        assert!(drops[layer - 1].abs() > 1e-6 * original, "removing layer {layer} changes the model");
    }
    // A chosen subset is measured in the order given; a layer the model lacks is an error.
    let (_, some) = pruning_drops(&model, &valid, 4, 3, &[4, 1], &mut |_, _| {}).unwrap();
    assert_eq!(some, vec![drops[3], drops[0]]);
    let err = pruning_drops(&model, &valid, 4, 3, &[5], &mut |_, _| {}).unwrap_err();
    assert!(matches!(err, Error::Config(ConfigError::NoSuchLayer { layer: 5, n_layers: 4 })), "{err}");
}

#[test]
fn multiple_choice_files_parse_in_the_arc_layouts_and_bad_lines_are_named() {
    use layernorm_scaling::analysis::{read_choice_items, ChoiceProblem};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("arc.jsonl");
    std::fs::write(
        &path,
        concat!(
            r#"{"question": "2+2?", "choices": ["3", "4"], "answer": 1}"#, "\n",
            r#"{"question": "Sky?", "choices": {"text": ["green", "blue", "red"], "label": ["A", "B", "C"]}, "answerKey": "B"}"#, "\n",
            r#"{"question": {"stem": "Which?", "choices": [{"text": "x", "label": "1"}, {"text": "y", "label": "2"}]}, "answerKey": "2"}"#, "\n",
        ),
    )
    .unwrap();
    let items = read_choice_items(&path).unwrap();
    assert_eq!(items.iter().map(|i| i.answer).collect::<Vec<_>>(), vec![1, 1, 1]);
    assert_eq!(items[1].choices, vec!["green", "blue", "red"]);
    assert_eq!(items[2].question, "Which?");

    std::fs::write(&path, "{\"question\": \"q\", \"choices\": [\"a\", \"b\"], \"answer\": 0}\n{\"question\": \"q\", \"choices\": [\"a\", \"b\"], \"answer\": \"Z\"}\n").unwrap();
    let err = read_choice_items(&path).unwrap_err().to_string();
    assert!(err.contains("arc.jsonl:2") && err.contains("answer"), "{err}");
    std::fs::write(&path, "\n").unwrap();
    assert_eq!(read_choice_items(&path).unwrap_err().problem, ChoiceProblem::NoQuestion);
}

#[test]
fn the_scorer_picks_the_choice_with_the_highest_log_likelihood() {
    use burn::tensor::activation::log_softmax;
    use layernorm_scaling::analysis::{score_choices, ChoiceItem};
    let device = cpu();
    let model = LlamaConfig::tiny().init(&device).unwrap();
    let tokenizer = Tokenizer::Byte;
    // Log-likelihoods computed independently: one full forward, log-softmax on the host.
    let independent = |question: &str, choice: &str| -> f64 {
        let context = format!("Question: {question}\nAnswer:");
        let text = format!("{context} {choice}");
        let ids: Vec<i64> = text.bytes().map(i64::from).collect();
        let n = ids.len();
        let input = Tensor::<2, burn::tensor::Int>::from_data(TensorData::new(ids.clone(), [1, n]), &device);
        let log_probs = common::values(&log_softmax(model.forward(input), 2));
        (context.len()..n).map(|pos| log_probs[(pos - 1) * 256 + ids[pos] as usize] as f64).sum()
    };
    let questions = [("alpha", vec!["one", "two", "three"]), ("beta", vec!["x", "yy"]), ("gamma", vec!["up", "down"])];
    let argmax = |scores: &[f64]| (0..scores.len()).fold(0, |b, i| if scores[i] > scores[b] { i } else { b });
    let mut items = Vec::new();
    let (mut expected, mut expected_norm) = (Vec::new(), Vec::new());
    for (question, choices) in &questions {
        let scores: Vec<f64> = choices.iter().map(|c| independent(question, c)).collect();
        // acc_norm as lm-evaluation-harness: the log-likelihood per character of the choice.
        let per_char: Vec<f64> = choices.iter().zip(&scores).map(|(c, s)| s / c.chars().count() as f64).collect();
        expected_norm.push(argmax(&per_char));
        let best = argmax(&scores);
        expected.push(best);
        items.push(ChoiceItem::with_question_prompt(
            question.to_string(),
            choices.iter().map(|c| c.to_string()).collect(),
            best,
        ));
    }
    // The last item's key is set to a wrong choice: accuracy 2/3.
    items[2].answer = 1 - expected[2];
    let (accuracy, picks) = score_choices(&model, &tokenizer, &items, &[]).unwrap();
    assert_eq!(picks.iter().map(|p| p.0).collect::<Vec<_>>(), expected);
    assert_eq!(picks.iter().map(|p| p.1).collect::<Vec<_>>(), expected_norm);
    assert!((accuracy.acc - 2.0 / 3.0).abs() < 1e-12, "{accuracy:?}");
    let right_norm = items.iter().zip(&expected_norm).filter(|(item, &pick)| item.answer == pick).count();
    assert!((accuracy.acc_norm - right_norm as f64 / 3.0).abs() < 1e-12, "{accuracy:?}");

    // The per-layer report: dP(l) is the accuracy with exactly layer l skipped, minus the full one.
    let report = layernorm_scaling::analysis::choice_report(&model, &tokenizer, &items, &[], &mut |_, _| {}).unwrap();
    assert_eq!((report.questions, report.acc_drop.len()), (3, 4));
    let (pruned, _) = score_choices(&model, &tokenizer, &items, &[2]).unwrap();
    assert!((report.acc_drop[1] - (pruned.acc - accuracy.acc)).abs() < 1e-12);
}
