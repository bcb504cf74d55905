//! BERT-style encoders: golden logits and pseudo-perplexities from transformers
//! (`scripts/hf_bert_fixture.py`), the checkpoint layouts found on the Hub, a clear error for
//! each bad input, and the layer-removal report of the analyze example.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use burn::tensor::{Int, Tensor, TensorData};
use common::{all_backends, assert_mentions, cpu, example, hf_fixture, max_diff};
use layernorm_scaling::data::Tokenizer;
use layernorm_scaling::hf::{
    bert_layer_removal, is_bert_dir, load_bert_model, load_hf_model, pseudo_perplexity, write_safetensors,
    BertForMaskedLm, Checkpoint, FieldProblem, HfError, ScoringProblem, Unsupported,
};
use layernorm_scaling::ConfigError;
use serde_json::Value;

fn fixture() -> PathBuf {
    hf_fixture("bert-tiny")
}

fn reference() -> Value {
    serde_json::from_str(&std::fs::read_to_string(fixture().join("reference.json")).unwrap()).unwrap()
}

fn ids(value: &Value) -> Vec<u32> {
    value.as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect()
}

fn sequences(reference: &Value) -> Vec<Vec<u32>> {
    reference["sequences"].as_array().unwrap().iter().map(ids).collect()
}

fn mask_token(reference: &Value) -> u32 {
    reference["mask_token_id"].as_u64().unwrap() as u32
}

fn logits(model: &BertForMaskedLm, ids: &[u32]) -> Vec<f32> {
    let device = model.embeddings.word_embeddings.weight.device();
    let ids: Vec<i64> = ids.iter().map(|&id| id as i64).collect();
    let tokens = Tensor::<2, Int>::from_data(TensorData::new(ids.clone(), [1, ids.len()]), &device);
    common::values(&model.forward(tokens).unwrap())
}

fn relative_diff(a: f64, b: f64) -> f64 {
    (a - b).abs() / b.abs()
}

#[test]
fn the_logits_match_transformers_on_every_backend() {
    let reference = reference();
    for (backend, device) in all_backends() {
        let (model, config) = load_bert_model(fixture(), &device).unwrap();
        assert_eq!((config.num_hidden_layers, config.hidden_size, config.vocab_size), (3, 16, 60));
        let mut worst = 0.0f32;
        for (sequence, expected) in sequences(&reference).iter().zip(reference["logits"].as_array().unwrap()) {
            let expected: Vec<f32> = expected
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|row| row.as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32))
                .collect();
            // The logits are far from trivial: a mapping mistake would show.
            assert!(expected.iter().map(|v| v.abs()).fold(0.0, f32::max) > 1.0);
            worst = worst.max(max_diff(&logits(&model, sequence), &expected));
        }
        eprintln!("{backend}: max abs diff of the logits {worst:e}");
        assert!(worst <= 1e-4, "{backend}: max abs diff {worst}");
    }
}

#[test]
fn pseudo_perplexity_matches_transformers_with_and_without_each_layer() {
    let reference = reference();
    let (model, _) = load_bert_model(fixture(), &cpu()).unwrap();
    let (sequences, mask) = (sequences(&reference), mask_token(&reference));
    let mut progress = Vec::new();
    let removal =
        bert_layer_removal(&model, &sequences, mask, &[], &mut |done, total| progress.push((done, total))).unwrap();
    let expected = reference["pseudo_perplexity"].as_f64().unwrap();
    eprintln!("pseudo-perplexity {} (transformers {expected})", removal.pseudo_perplexity);
    assert!(relative_diff(removal.pseudo_perplexity, expected) <= 1e-4, "{}", removal.pseudo_perplexity);
    assert_eq!(removal.scored_tokens as u64, reference["scored_tokens"].as_u64().unwrap());
    assert_eq!(removal.removed_layers, [1, 2, 3]);
    assert_eq!(progress, [(1, 4), (2, 4), (3, 4), (4, 4)]);
    let without = reference["pseudo_perplexity_without_layer"].as_array().unwrap();
    for ((layer, got), expected) in removal.removed_layers.iter().zip(&removal.pseudo_perplexity_without).zip(without) {
        let expected = expected.as_f64().unwrap();
        eprintln!("without layer {layer}: {got} (transformers {expected})");
        assert!(relative_diff(*got, expected) <= 1e-4, "layer {layer}: {got} vs {expected}");
    }
    for (drop, without) in removal.pseudo_perplexity_drop.iter().zip(&removal.pseudo_perplexity_without) {
        assert_eq!(*drop, without - removal.pseudo_perplexity);
    }
    // One sequence at a time (batches of another composition) gives the same sum.
    let one_by_one: f64 = sequences
        .iter()
        .map(|s| (pseudo_perplexity(&model, std::slice::from_ref(s), mask, &[]).unwrap().ln(), s.len() - 2))
        .map(|(log_pppl, n)| log_pppl * n as f64)
        .sum();
    let total: usize = sequences.iter().map(|s| s.len() - 2).sum();
    assert!(relative_diff((one_by_one / total as f64).exp(), removal.pseudo_perplexity) <= 1e-5);
}

#[test]
fn the_fixture_tokenizer_gives_the_reference_ids() {
    let reference = reference();
    let tokenizer = Tokenizer::from_file(fixture().join("tokenizer.json")).unwrap();
    let text_ids = ids(&reference["text_ids"]);
    let encoded = tokenizer.encode(reference["text"].as_str().unwrap()).unwrap();
    assert_eq!(encoded, text_ids[1..text_ids.len() - 1]);
    assert!(is_bert_dir(fixture()));
    assert!(!is_bert_dir(fixture().parent().unwrap().join("llama_mha_untied")));
}

/// A copy of the fixture in `tmp` whose tensors `edit` renames, reshapes or drops (`None`), plus `extra`.
fn rewritten(
    tmp: &Path,
    edit: impl Fn(&str, Vec<usize>, Vec<f32>) -> Option<(String, Vec<usize>, Vec<f32>)>,
    extra: Vec<(String, Vec<usize>, Vec<f32>)>,
) -> PathBuf {
    let dir = tmp.join("bert");
    std::fs::create_dir_all(&dir).unwrap();
    for file in ["config.json", "tokenizer.json"] {
        std::fs::copy(fixture().join(file), dir.join(file)).unwrap();
    }
    let checkpoint = Checkpoint::open(&fixture()).unwrap();
    let mut tensors: Vec<_> = checkpoint
        .keys()
        .into_iter()
        .filter_map(|key| {
            let shape = checkpoint.shape(key).unwrap();
            edit(key, shape.clone(), checkpoint.tensor(key, &shape).unwrap())
        })
        .collect();
    tensors.extend(extra);
    write_safetensors(&dir.join("model.safetensors"), &tensors).unwrap();
    dir
}

fn unchanged(key: &str, shape: Vec<usize>, values: Vec<f32>) -> Option<(String, Vec<usize>, Vec<f32>)> {
    Some((key.to_string(), shape, values))
}

#[test]
fn original_names_without_the_prefix_and_unused_heads_load_the_same_model() {
    let tmp = tempfile::tempdir().unwrap();
    // The names of Google's original checkpoints (`LayerNorm.gamma` / `beta`), no `bert.` prefix,
    // the tied decoder stored, and the pooler and next-sentence head of BertForPreTraining.
    let dir = rewritten(
        tmp.path(),
        |key, shape, values| {
            let key = key.strip_prefix("bert.").unwrap_or(key);
            let key = key.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta");
            Some((key, shape, values))
        },
        vec![
            ("pooler.dense.weight".into(), vec![16, 16], vec![0.5; 256]),
            ("pooler.dense.bias".into(), vec![16], vec![0.5; 16]),
            ("cls.seq_relationship.weight".into(), vec![2, 16], vec![0.5; 32]),
            ("cls.seq_relationship.bias".into(), vec![2], vec![0.5; 2]),
            ("cls.predictions.decoder.weight".into(), vec![60, 16], vec![7.0; 960]),
        ],
    );
    let checkpoint = Checkpoint::open(&dir).unwrap();
    assert!(
        checkpoint.contains("embeddings.LayerNorm.gamma") && !checkpoint.contains("bert.embeddings.LayerNorm.weight")
    );
    let (original, _) = load_bert_model(fixture(), &cpu()).unwrap();
    let (renamed, _) = load_bert_model(&dir, &cpu()).unwrap();
    assert_eq!(common::ParamValues::flat_of(&original), common::ParamValues::flat_of(&renamed));
    let sequence = &sequences(&reference())[1];
    assert_eq!(logits(&original, sequence), logits(&renamed, sequence));
}

/// The error of loading `dir` as a BERT encoder.
fn load_error(dir: &Path) -> HfError {
    load_bert_model(dir, &cpu()).map(drop).unwrap_err()
}

#[test]
fn each_bad_checkpoint_is_an_error_naming_what_is_wrong() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = |name: &str| {
        let dir = tmp.path().join(name);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    };

    // A LLaMA directory given to the BERT loader, and a BERT directory given to the LLaMA loader.
    let llama = fixture().parent().unwrap().join("llama_mha_untied");
    let not_bert = |e: &HfError, kind: &str| matches!(e, HfError::Unsupported(Unsupported::NotBert { model_type: Some(t), .. }) if t == kind);
    assert!(not_bert(&load_error(&llama), "llama"), "{}", load_error(&llama));
    let as_decoder = load_hf_model(fixture(), &cpu()).map(drop).unwrap_err();
    assert!(matches!(as_decoder, HfError::Unsupported(Unsupported::BertAsDecoder)), "{as_decoder}");

    let missing = rewritten(
        &dir("missing"),
        |key, s, v| (key != "bert.encoder.layer.1.output.dense.bias").then(|| unchanged(key, s, v)).flatten(),
        vec![],
    );
    let err = load_error(&missing);
    assert!(
        matches!(&err, HfError::MissingTensor { key, .. } if key == "bert.encoder.layer.1.output.dense.bias"),
        "{err}"
    );

    let misshapen = rewritten(
        &dir("misshapen"),
        |key, shape, values| match key {
            "bert.encoder.layer.2.intermediate.dense.weight" => Some((key.into(), vec![16, 28], values)),
            _ => unchanged(key, shape, values),
        },
        vec![],
    );
    let err = load_error(&misshapen);
    let (key, expected, found) = ("bert.encoder.layer.2.intermediate.dense.weight", [28, 16], [16, 28]);
    assert!(
        matches!(&err, HfError::Shape { key: k, expected: e, found: f } if k == key && *e == expected && *f == found),
        "{err}"
    );

    let unknown = rewritten(
        &dir("unknown"),
        unchanged,
        vec![("bert.encoder.layer.0.extra.weight".into(), vec![2], vec![0.0; 2])],
    );
    let err = load_error(&unknown);
    assert!(
        matches!(&err, HfError::UnusedTensors { count: 1, example, bert: true } if example == "bert.encoder.layer.0.extra.weight"),
        "{err}"
    );

    let no_head = rewritten(
        &dir("no-head"),
        |key, s, v| (!key.starts_with("cls.")).then(|| unchanged(key, s, v)).flatten(),
        vec![],
    );
    let err = load_error(&no_head);
    assert!(matches!(&err, HfError::Unsupported(Unsupported::NoMaskedLmHead { dir }) if *dir == no_head), "{err}");

    let edit_config = |name: &str, edit: &dyn Fn(&mut serde_json::Map<String, Value>)| {
        let dir = rewritten(&dir(name), unchanged, vec![]);
        let mut config: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
        edit(config.as_object_mut().unwrap());
        std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
        load_error(&dir)
    };
    let roberta = edit_config("roberta", &|c| {
        c.insert("model_type".into(), "roberta".into());
    });
    assert!(not_bert(&roberta, "roberta"), "{roberta}");
    let layers = edit_config("layers", &|c| {
        c.insert("num_hidden_layers".into(), 4.into());
    });
    let four = |e: &HfError| matches!(e, HfError::Config { field, problem: FieldProblem::ContradictsCheckpoint { value: 4, .. } } if field == "num_hidden_layers");
    assert!(four(&layers) && layers.to_string().contains("holds 3 layers"), "{layers}");
    let width = edit_config("width", &|c| {
        c.insert("hidden_size".into(), 32.into());
    });
    let (key, expected) = ("bert.embeddings.word_embeddings.weight", [60, 32]);
    assert!(matches!(&width, HfError::Shape { key: k, expected: e, .. } if k == key && *e == expected), "{width}");
    let no_vocab = edit_config("no-vocab", &|c| {
        c.remove("vocab_size");
    });
    let missing =
        |e: &HfError| matches!(e, HfError::Config { field, problem: FieldProblem::Missing } if field == "vocab_size");
    assert!(missing(&no_vocab), "{no_vocab}");
    let nope = tmp.path().join("nope");
    assert!(matches!(load_error(&nope), HfError::NoSuchFolder { dir } if dir == nope));
}

#[test]
fn bad_sequences_and_layers_are_errors() {
    let (model, _) = load_bert_model(fixture(), &cpu()).unwrap();
    let error = |sequences: &[Vec<u32>], mask: u32, skip: &[usize]| {
        pseudo_perplexity(&model, sequences, mask, skip).map(drop).unwrap_err()
    };
    let scoring = |found: HfError| match found {
        HfError::Scoring(problem) => problem,
        other => panic!("expected a scoring problem, got {other:?}"),
    };
    assert_eq!(scoring(error(&[], 4, &[])), ScoringProblem::NoSequences);
    assert_eq!(scoring(error(&[vec![2, 3]], 4, &[])), ScoringProblem::TooShort { index: 0, tokens: 2 });
    let too_long = ScoringProblem::TooLong { index: 0, tokens: 25, positions: 24 };
    assert_eq!(scoring(error(&[vec![2; 25]], 4, &[])), too_long);
    let outside = ScoringProblem::TokenOutsideVocabulary { index: 0, id: 60, vocab: 60 };
    assert_eq!(scoring(error(&[vec![2, 60, 3]], 4, &[])), outside);
    let mask = ScoringProblem::MaskOutsideVocabulary { mask: 99, vocab: 60 };
    assert_eq!(scoring(error(&[vec![2, 7, 3]], 99, &[])), mask);
    let no_layer = error(&[vec![2, 7, 3]], 4, &[4]);
    assert!(matches!(no_layer, HfError::Model(ConfigError::NoSuchLayer { layer: 4, n_layers: 3 })), "{no_layer}");
    let layer_zero = error(&[vec![2, 7, 3]], 4, &[0]);
    assert!(matches!(layer_zero, HfError::Model(ConfigError::LayerZero)), "{layer_zero}");
    let too_long = Tensor::<2, Int>::zeros([1, 25], &cpu());
    assert_mentions(&model.forward(too_long).unwrap_err().to_string(), &["25 tokens", "24 positions"]);
}

#[test]
fn analyze_reports_the_layer_removal_of_an_encoder() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("report");
    let output = Command::new(example("analyze"))
        .arg("--hf-dir")
        .arg(fixture())
        .args(["--device", "flex", "--seq-len", "12", "--sequences", "3", "--out"])
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let report: Value = serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    let removal = &report["layer_removal"];
    assert_eq!(removal["sequences"], 3);
    assert_eq!(removal["scored_tokens"], 30);
    assert_eq!(removal["removed_layers"].as_array().unwrap().len(), 3);
    assert!(removal["pseudo_perplexity"].as_f64().unwrap() > 1.0);
    let summary = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert_mentions(&summary, &["pseudo-perplexity", "SQuAD", "| 3 |"]);
    common::assert_png_not_blank(&out.join("pseudo_perplexity_drop.png"));
}

#[test]
fn analyze_sets_an_encoder_beside_a_decoder_as_the_papers_figure_2() {
    use layernorm_scaling::train::{train, Start};
    let tmp = tempfile::tempdir().unwrap();
    let run_dir = tmp.path().join("lns");
    let mut config = common::quick(&run_dir, 2, 2);
    config.model.layers = Some(2);
    config.optim.warmup = Some(1);
    train(&config, Start::New, |_| {}).unwrap();
    let out = tmp.path().join("figure-2");
    let output = Command::new(example("analyze"))
        .arg("--run")
        .arg(&run_dir)
        .arg("--hf-dir")
        .arg(fixture())
        .args(["--device", "flex", "--seq-len", "12", "--sequences", "2", "--batches", "1", "--label", "llama", "bert"])
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let comparison: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("comparison.json")).unwrap()).unwrap();
    let kinds: Vec<(&str, &str, u64)> = comparison
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["label"].as_str().unwrap(), m["kind"].as_str().unwrap(), m["n_layers"].as_u64().unwrap()))
        .collect();
    assert_eq!(kinds, [("llama", "decoder", 2), ("bert", "Post-LN encoder", 3)]);
    assert_eq!(comparison[1]["relative_change_percent"].as_array().unwrap().len(), 3);
    // Each model's own report sits beside the comparison, and the encoder's numbers are its own.
    let encoder: Value = serde_json::from_str(&std::fs::read_to_string(out.join("bert/report.json")).unwrap()).unwrap();
    assert_eq!(encoder["layer_removal"]["scored_tokens"], 20);
    assert_eq!(encoder["layer_removal"]["pseudo_perplexity"], comparison[1]["full_model"]);
    assert!(out.join("llama/report.json").is_file());
    common::assert_png_not_blank(&out.join("layer_removal.png"));

    // The labels follow the command line's order, whichever option names each model: given
    // --hf-dir first, `bert` went to the run (labels went to every --run first).
    let swapped = tmp.path().join("swapped");
    let output = Command::new(example("analyze"))
        .arg("--hf-dir")
        .arg(fixture())
        .arg("--run")
        .arg(&run_dir)
        .args(["--device", "flex", "--seq-len", "12", "--sequences", "2", "--batches", "1", "--label", "bert", "llama"])
        .arg("--out")
        .arg(&swapped)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let comparison: Value =
        serde_json::from_str(&std::fs::read_to_string(swapped.join("comparison.json")).unwrap()).unwrap();
    let labels: Vec<(&str, &str)> = comparison
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["label"].as_str().unwrap(), m["kind"].as_str().unwrap()))
        .collect();
    assert_eq!(labels, [("llama", "decoder"), ("bert", "Post-LN encoder")]);
}

#[test]
fn options_that_do_not_apply_to_an_encoder_are_refused_before_scoring() {
    let tmp = tempfile::tempdir().unwrap();
    let analyze = |extra: &[&str]| {
        let output = Command::new(example("analyze"))
            .arg("--hf-dir")
            .arg(fixture())
            .args(["--device", "flex", "--out"])
            .arg(tmp.path().join("out"))
            .args(extra)
            .output()
            .unwrap();
        assert!(!output.status.success(), "{extra:?} was accepted");
        String::from_utf8_lossy(&output.stderr).to_string()
    };
    assert_mentions(&analyze(&["--seq-len", "25"]), &["--seq-len 25", "3 to 24 tokens"]);
    assert_mentions(&analyze(&["--seq-len", "12", "--step", "2"]), &["--step", "encoder"]);
    assert_mentions(&analyze(&["--seq-len", "12", "--layers", "4"]), &["--layers", "layer 4"]);
    assert_mentions(&analyze(&["--seq-len", "12", "--sequences", "0"]), &["--sequences", "at least 1"]);
    assert_mentions(&analyze(&["--seq-len", "12", "--layers", "2,2"]), &["layer 2 is listed twice"]);
    let choices = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/choices/piqa_hf.jsonl");
    assert_mentions(&analyze(&["--seq-len", "12", "--choices", choices.to_str().unwrap()]), &["--choices", "encoders"]);
    assert!(!tmp.path().join("out").exists(), "a refused analysis wrote its report");
}

#[test]
fn training_from_an_encoder_is_refused_before_anything_is_written() {
    use layernorm_scaling::train::{train, Start};
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("run");
    let mut config = common::quick(&out, 2, 2);
    config.model.init_from = Some(fixture());
    config.optim.warmup = Some(1);
    let error = train(&config, Start::New, |_| {}).map(drop).unwrap_err().to_string();
    assert_mentions(&error, &["BERT encoder", "cannot be trained", "analyze --hf-dir"]);
    assert!(!out.exists(), "a refused run wrote its directory");
}

#[test]
fn the_special_tokens_come_from_the_tokenizer_and_a_tokenizer_without_them_is_named() {
    use layernorm_scaling::hf::BertTokens;
    let tokenizer = Tokenizer::from_file(fixture().join("tokenizer.json")).unwrap();
    let mask = mask_token(&reference());
    assert_eq!(BertTokens::of(&tokenizer).unwrap(), BertTokens { cls: 2, sep: 3, mask });
    let llama = fixture().parent().unwrap().join("llama_mha_untied/tokenizer.json");
    let error = BertTokens::of(&Tokenizer::from_file(llama).unwrap()).unwrap_err().to_string();
    assert_mentions(&error, &["[CLS]", "[MASK]", "--tokenizer"]);
}
