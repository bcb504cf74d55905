//! Training: the loss falls, a resumed run is bit-identical, bad inputs are clear errors.
//! The tests take turns (`common::one_at_a_time`): many compare runs, whose weights a test
//! drawing beside them would change.

mod common;
use common::edited;

use std::io::IsTerminal;
use std::path::{Path, PathBuf};

use burn::data::dataloader::batcher::Batcher;
use burn::data::dataset::Dataset;
use burn::module::Module;
use common::{cpu, expect_data_error, expect_error, expect_refusal, finished_run, one_at_a_time, quick, ParamValues};
use layernorm_scaling::data::{
    tokenize_corpus, CorpusProblem, CorpusSource, DataError, LmBatcher, SequenceMode, SplitProblem, Tokenizer,
    TokenizerProblem, WholeCorpusProblem,
};
use layernorm_scaling::io::FolderProblem;
use layernorm_scaling::measure::mean_loss;
use layernorm_scaling::model::cross_entropy_counting;
use layernorm_scaling::run::{load_run_model, run_of_config_file, RunDirError, TRAIN_CONFIG};
use layernorm_scaling::run::{read_metrics, read_tracking};
use layernorm_scaling::train::{train, validation_data, DataBudget, Start, TrainConfig, TrainEvent};
use layernorm_scaling::{ConfigError, Error, NormScheme};

fn step_of(event: &TrainEvent) -> usize {
    match event {
        TrainEvent::Progress { step, .. } | TrainEvent::Evaluated { step, .. } => *step,
        other => panic!("{other:?} has no step"),
    }
}

fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len() as f64
}

#[test]
fn the_loss_falls_on_the_builtin_corpus() {
    let _turn = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let mut events = Vec::new();
    let mut config = quick(&dir.path().join("run"), 40, 20);
    config.output.log_every = 10;
    let report = train(&config, Start::New, |event| events.push(event)).unwrap();
    let losses = &report.train_losses;
    assert_eq!(losses.len(), 40);
    assert!(report.verdict.is_none(), "{:?}", report.verdict);

    // The run reports through events, in order, every one handed over before `train` returns.
    assert!(
        matches!(&events[0], TrainEvent::Started { steps: 40, layers, .. } if *layers == report.model_config.n_layers),
        "{events:?}"
    );
    assert!(!events.iter().any(TrainEvent::is_notice), "{events:?}");
    // Before the first step: what the run reads of the training split (here less than one pass).
    let budget = events.iter().find_map(|e| if let TrainEvent::Data(b) = e { Some(*b) } else { None });
    let budget = budget.expect("the data budget");
    assert_eq!((budget.read, budget.seq_len), (40 * config.optim.batch_size as u64, config.data.seq_len), "{budget:?}");
    assert!(budget.sequences > budget.read && budget.repeat_warning().is_none(), "{budget:?}");
    // Progress goes to burn-train's dashboard when standard output is a terminal.
    if !std::io::stdout().is_terminal() {
        let progress: Vec<usize> =
            events.iter().filter(|e| matches!(e, TrainEvent::Progress { .. })).map(step_of).collect();
        assert_eq!(progress, [10, 20, 30, 40], "{events:?}");
        let evaluated: Vec<usize> =
            events.iter().filter(|e| matches!(e, TrainEvent::Evaluated { .. })).map(step_of).collect();
        assert_eq!(evaluated, [20, 40], "{events:?}");
        let line = events.iter().find(|e| matches!(e, TrainEvent::Progress { .. })).unwrap().to_string();
        assert!(line.starts_with("step     10/40 | ") && line.contains("Loss "), "{line}");
    }
    let (first, last) = (mean(&losses[..5]), mean(&losses[35..]));
    assert!(first > 4.5 && last < first - 1.5, "loss {first:.3} -> {last:.3}");
    assert!(report.valid_loss < first - 1.5, "validation loss {}", report.valid_loss);

    // The run directory holds everything a user needs, and the saved model reloads.
    let out = dir.path().join("run");
    for file in
        ["train.json", "model.json", "model.bpk", "metrics.csv", "metrics.jsonl", "checkpoint/model-step-40.bpk"]
    {
        assert!(out.join(file).is_file(), "{file}");
    }
    let csv = std::fs::read_to_string(out.join("metrics.csv")).unwrap();
    assert!(csv.starts_with("split,epoch,batch,step,metric,value\n") && csv.contains("train,1,1,1,Loss,"), "{csv}");
    let (reloaded, info) = load_run_model(&out, None, &cpu()).unwrap();
    assert_eq!(info.steps, 40);
    let tokens = common::random_tokens(1, 16, 256, 1, &cpu());
    assert!(common::max_abs_diff(&reloaded.forward(tokens.clone()), &report.model.forward(tokens.clone())) < 1e-6);
    let (from_checkpoint, _) = load_run_model(&out, Some(40), &cpu()).unwrap();
    assert!(common::max_abs_diff(&from_checkpoint.forward(tokens.clone()), &reloaded.forward(tokens)) < 1e-6);
}

#[test]
fn the_loss_falls_on_tiny_shakespeare() {
    let _turn = one_at_a_time();
    let shakespeare = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/data/tinyshakespeare.txt");
    if !shakespeare.is_file() {
        eprintln!("skipped: {} is not present", shakespeare.display());
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let mut config = quick(&dir.path().join("run"), 40, 20);
    config.data.files = vec![shakespeare];
    let report = train(&config, Start::New, |_| {}).unwrap();
    let losses = &report.train_losses;
    let (first, last) = (mean(&losses[..5]), mean(&losses[35..]));
    assert!(last < first - 1.5, "loss {first:.3} -> {last:.3}");
    assert!(report.valid_loss < 3.5, "validation loss {}", report.valid_loss);
}

fn parameters(dir: &Path) -> Vec<(String, Vec<f32>)> {
    let (model, _) = load_run_model(dir, None, &cpu()).unwrap();
    let mut visitor = ParamValues::default();
    model.visit(&mut visitor);
    visitor.params
}

#[test]
fn a_resumed_run_is_bit_identical_to_an_uninterrupted_one() {
    let _turn = one_at_a_time();
    resumes_bit_identically(SequenceMode::Pack);
}

#[test]
fn a_resumed_run_of_truncated_documents_is_bit_identical_too() {
    let _turn = one_at_a_time();
    resumes_bit_identically(SequenceMode::Truncate);
}

/// With gradient accumulation a step spans micro-batches: the log of a resumed run still holds
/// what an uninterrupted one measured (its learning rates read 0.0 for the first micro-batches
/// after the resume, and their interval's aggregate moved).
#[test]
fn a_resumed_run_with_gradient_accumulation_logs_what_was_measured() {
    let _turn = one_at_a_time();
    resumes_bit_identically_with(SequenceMode::Pack, 3);
}

/// On a GPU backend (wgpu over lavapipe) the optimiser is the multi-tensor update: the checkpoint
/// it leaves is the state the run went on from. (Written in place, its next step's update raced
/// the checkpoint's writer thread, and the resumed run drifted from step 12 on.)
#[cfg(feature = "wgpu")]
#[test]
fn a_resumed_gpu_run_with_the_multi_tensor_optimiser_is_bit_identical() {
    let _turn = one_at_a_time();
    resumes_bit_identically_on("wgpu-cpu", SequenceMode::Pack, 1);
}

fn resumes_bit_identically(sequences: SequenceMode) {
    resumes_bit_identically_with(sequences, 1);
}

fn resumes_bit_identically_with(sequences: SequenceMode, grad_accum: usize) {
    resumes_bit_identically_on("flex", sequences, grad_accum);
}

fn resumes_bit_identically_on(device: &str, sequences: SequenceMode, grad_accum: usize) {
    let dir = tempfile::tempdir().unwrap();
    let (whole, resumed) = (dir.path().join("whole"), dir.path().join("resumed"));
    let mut config = quick(&whole, 20, 10);
    config.device = device.into();
    config.data.sequences = sequences;
    config.optim.grad_accum = grad_accum;
    config.optim.clip_grad_norm = Some(1.0);
    config.output.track_every = Some(3);
    train(&config, Start::New, |_| {}).unwrap();

    // The same run, killed after step 10 (its logs may run past its last checkpoint).
    std::fs::create_dir_all(resumed.join("checkpoint")).unwrap();
    for file in ["train.json", "model.json", "metrics.jsonl", "tracking.jsonl"] {
        std::fs::copy(whole.join(file), resumed.join(file)).unwrap();
    }
    for kind in ["model", "optim", "scheduler"] {
        for name in [format!("{kind}-step-10.bpk"), format!("{kind}-step-10.bpk.sum")] {
            std::fs::copy(whole.join("checkpoint").join(&name), resumed.join("checkpoint").join(&name)).unwrap();
        }
    }
    config.output.out = resumed.clone();
    let report = train(&config, Start::Resume, |_| {}).unwrap();
    assert_eq!(report.train_losses.len(), 10 * grad_accum, "only steps 11..=20 ran");

    let losses = |dir: &Path| -> Vec<(usize, u64)> {
        let rows = read_metrics(dir).unwrap().into_iter();
        rows.filter(|r| r.split == "train" && r.epoch == 2 && r.metric == "Loss" && r.is_batch_value())
            .map(|r| (r.step, r.value.to_bits()))
            .collect()
    };
    assert_eq!(losses(&whole).len(), 10 * grad_accum);
    assert_eq!(losses(&whole), losses(&resumed), "the same losses, to the last digit");
    // Every measured value of the resumed interval, and its aggregates, as the whole run logged them.
    let measured = |dir: &Path| -> Vec<(String, usize, bool, u64)> {
        let rows = read_metrics(dir).unwrap().into_iter().filter(|r| r.epoch == 2);
        rows.filter(|r| ["Loss", "Perplexity", "Learning Rate", "Gradient norm"].contains(&r.metric.as_str()))
            .map(|r| (format!("{} {}", r.split, r.metric), r.step, r.is_final, r.value.to_bits()))
            .collect()
    };
    assert_eq!(measured(&whole), measured(&resumed));
    let rates = read_metrics(&whole).unwrap().into_iter().filter(|r| r.metric == "Learning Rate" && !r.is_final);
    assert!(rates.clone().all(|r| r.value > 0.0), "no micro-batch logs a rate of 0");
    assert_eq!(rates.count(), 20 * grad_accum);
    assert_eq!(parameters(&whole), parameters(&resumed), "the same weights, bit for bit");

    // The resume rewrites the rows before its checkpoint byte for byte.
    let first_lines = |dir: &Path, file: &str, n: usize| -> Vec<String> {
        std::fs::read_to_string(dir.join(file)).unwrap().lines().take(n).map(String::from).collect()
    };
    let kept = read_metrics(&whole).unwrap().iter().filter(|r| r.epoch == 1).count();
    assert_eq!(first_lines(&resumed, "metrics.jsonl", kept), first_lines(&whole, "metrics.jsonl", kept));
    let kept = read_tracking(&whole).unwrap().iter().filter(|r| r.step < 10).count();
    assert_eq!(kept, 4, "steps 0, 3, 6 and 9");
    assert_eq!(first_lines(&resumed, "tracking.jsonl", kept), first_lines(&whole, "tracking.jsonl", kept));
}

#[test]
fn bad_inputs_are_clear_errors_before_any_work() {
    let _turn = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let base = quick(&dir.path().join("run"), 20, 10);

    let data_error = |config: &TrainConfig| expect_data_error(config, Start::New);
    let missing = edited(&base, |c| c.data.files = vec![dir.path().join("nope.txt")]);
    let error = data_error(&missing);
    assert!(
        matches!(&error, DataError::Corpus { place, problem: CorpusProblem::NotFound } if place.path == dir.path().join("nope.txt")),
        "{error}"
    );
    let empty_file = dir.path().join("empty.txt");
    std::fs::write(&empty_file, "\n\n").unwrap();
    let error = data_error(&edited(&base, |c| c.data.files = vec![empty_file]));
    assert_eq!(error, DataError::Whole(WholeCorpusProblem::NoText));

    let long = edited(&base, |c| c.data.seq_len = 512);
    expect_error(&long, Start::New, "max_seq_len");
    let file = dir.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let unwritable = edited(&base, |c| c.output.out = file.join("run"));
    let in_the_way =
        |e: &RunDirError| matches!(e, RunDirError::NoFolder { problem: FolderProblem::File { file: f } } if *f == file);
    expect_refusal(&unwritable, Start::New, in_the_way);
    let error = data_error(&edited(&base, |c| c.data.tokenizer = "missing.json".into()));
    assert!(
        matches!(&error, DataError::Tokenizer(TokenizerProblem::NotFound { path }) if path == "missing.json"),
        "{error}"
    );
    // A scheme is checked where it is read: a config file names the field and the value.
    let bad_scheme = dir.path().join("bad-scheme.toml");
    std::fs::write(&bad_scheme, "norm = \"mix-ln:2\"\n").unwrap();
    let err = TrainConfig::from_file(&bad_scheme).unwrap_err().to_string();
    assert!(err.contains("post_ln_fraction") && err.contains("bad-scheme.toml"), "{err}");
    // Settings that contradict each other: refused with the config's own error, naming both.
    expect_conflict(
        &edited(&base, |c| c.checkpoints.save_every = Some(15)),
        &["`save_every` (15)", "`eval_every` (10)"],
    );
    expect_conflict(&edited(&base, |c| c.optim.warmup = Some(50)), &["`warmup` (50)", "`steps` (20)"]);
    expect_refusal(&base, Start::Resume, |e| matches!(e, RunDirError::NothingToResume));

    // A finished run refuses to be overwritten, and resuming it with another model is refused.
    train(&base, Start::New, |_| {}).unwrap();
    expect_refusal(&base, Start::New, |e| matches!(e, RunDirError::HoldsARun));
    // Refused before the data is tokenised: no token cache is written beside the run either.
    let elsewhere = tempfile::tempdir().unwrap();
    let copy = elsewhere.path().join("run");
    std::fs::create_dir(&copy).unwrap();
    std::fs::copy(base.output.out.join("train.json"), copy.join("train.json")).unwrap();
    expect_refusal(
        &edited(&base, |c| {
            c.data.cache_dir = None;
            c.output.out = copy;
        }),
        Start::New,
        |e| matches!(e, RunDirError::HoldsARun),
    );
    assert_eq!(std::fs::read_dir(elsewhere.path()).unwrap().count(), 1, "only the run's folder is there");
    // A resume that would change what is trained: refused before the data is tokenised.
    let fresh_cache = elsewhere.path().join("cache");
    let changed = edited(&base, |c| {
        c.model.layers = Some(2);
        c.data.seq_len = 32;
        c.data.cache_dir = Some(fresh_cache.clone());
    });
    let err = expect_error(&changed, Start::Resume, "model: n_layers 4 -> 2").to_string();
    assert!(err.contains("seq_len: 64 -> 32") && !err.contains("cache_dir"), "{err}");
    assert!(!fresh_cache.exists(), "no data was tokenised for a refused resume");
    expect_refusal(&base, Start::Resume, |e| matches!(e, RunDirError::Finished { steps: 20, .. }));
    // --overwrite replaces the run, and leaves files that are not the run's alone.
    std::fs::write(base.output.out.join("notes.txt"), "mine").unwrap();
    let again = train(&base, Start::Overwrite, |_| {}).unwrap();
    assert_eq!(again.train_losses.len(), 20);
    assert!(base.output.out.join("notes.txt").is_file());
}

/// `train`'s refusal of `config` for settings that contradict each other: the error its own
/// validation gives, which names each of `settings` (a setting and its value).
fn expect_conflict(config: &TrainConfig, settings: &[&str]) {
    let own = config.validate().unwrap_err();
    let ConfigError::Conflict(message) = &own else { panic!("expected a conflict, got {own:?}") };
    for setting in settings {
        assert!(message.contains(setting), "{setting}: {message}");
    }
    match train(config, Start::New, |_| {}).map(drop) {
        Err(Error::Config(error)) => assert_eq!(error, own),
        other => panic!("expected {own}, got {other:?}"),
    }
}

#[test]
fn a_tokenizer_larger_than_the_vocabulary_is_refused() {
    let _turn = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("tokenizer.json");
    let vocab: serde_json::Map<String, serde_json::Value> = (0..300)
        .map(|i| (format!("t{i}"), serde_json::json!(i)))
        .chain([("</s>".to_string(), serde_json::json!(300))])
        .collect();
    let tokenizer = serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
        "normalizer": null, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": null, "decoder": null,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "t0"}
    });
    std::fs::write(&json, tokenizer.to_string()).unwrap();
    let mut config = quick(&dir.path().join("run"), 20, 10);
    config.data.tokenizer = json.display().to_string();
    let too_small = TokenizerProblem::VocabularyTooSmall { needed: 301, vocab_size: 256 };
    assert_eq!(expect_data_error(&config, Start::New), DataError::Tokenizer(too_small));
}

#[test]
fn a_diverging_run_stops_with_a_message_and_keeps_only_good_checkpoints() {
    let _turn = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    // A run killed after its checkpoint of step 5, resumed at a rate of 1e30 (a resume may change
    // the rate): the first step after the checkpoint blows the weights up.
    let config = quick(&out, 10, 5);
    train(&config, Start::New, |_| {}).unwrap();
    std::fs::remove_file(out.join("model.bpk")).unwrap();
    for kind in ["model", "optim", "scheduler"] {
        std::fs::remove_file(out.join(format!("checkpoint/{kind}-step-10.bpk"))).unwrap();
    }
    let mut config = config;
    config.optim.lr = 1e30;
    let err = expect_error(&config, Start::Resume, "diverged");
    let Error::Diverged { reason, checkpoint, .. } = &err else { panic!("{err:?}") };
    assert!(reason.step > 5 && !reason.before_any_update && !reason.value.get().is_finite(), "{reason:?}");
    assert_eq!(*checkpoint, Some((5, out.join("checkpoint"))), "the checkpoint to resume from, named");
    assert!(!out.join("model.bpk").exists(), "no final model from a diverged run");
    // Every checkpoint left behind holds finite weights: the one of step 5, and none written after.
    let kept = layernorm_scaling::run::checkpoint_steps(&out.join("checkpoint"));
    assert_eq!(kept, [5], "{kept:?}");
    for step in kept {
        let (model, _) = load_run_model(&out, Some(step), &cpu()).unwrap();
        let mut visitor = ParamValues::default();
        model.visit(&mut visitor);
        assert!(visitor.params.iter().all(|(_, v)| v.iter().all(|x| x.is_finite())), "checkpoint {step}");
    }
}

#[test]
fn every_training_config_file_parses_and_validates() {
    let _turn = one_at_a_time();
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("configs/train");
    let mut count = 0;
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let config = TrainConfig::from_file(entry.path()).unwrap();
        config.validate().unwrap_or_else(|e| panic!("{}: {e}", entry.path().display()));
        layernorm_scaling::train::model_config(&config).unwrap();
        count += 1;
    }
    assert!(count >= 6);
    let bad = tempfile::tempdir().unwrap();
    let path = bad.path().join("typo.toml");
    std::fs::write(&path, "stepz = 10\n").unwrap();
    // The unknown key is named, beside the settings there are.
    match TrainConfig::from_file(&path).unwrap_err() {
        Error::File { path: at, message } => {
            assert!(at == path && message.contains("`stepz`") && message.contains("`steps`"), "{message}")
        }
        other => panic!("{other:?}"),
    }
}

/// burn-train would default to `Device::default()` (wgpu when compiled in): the run must use the
/// device it was given.
#[cfg(feature = "ndarray")]
#[test]
fn training_runs_on_the_chosen_device() {
    let _turn = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let mut config = quick(&dir.path().join("run"), 10, 10);
    config.device = "ndarray".into();
    let report = train(&config, Start::New, |_| {}).unwrap();
    let device = report.model.embed_tokens.weight.device();
    assert_eq!(device, layernorm_scaling::parse_device("ndarray").unwrap());
    assert!(report.valid_loss.is_finite());
}

/// Data parallelism (burn-train's multi-device strategy): two devices with batch 4 take the same
/// steps as one device with batch 8 (checked on two CPU devices).
#[test]
fn two_devices_take_the_same_steps_as_one_device_with_twice_the_batch() {
    let _turn = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let one = {
        let mut config = quick(&dir.path().join("one"), 10, 10);
        config.optim.batch_size = 8;
        config
    };
    let two = {
        let mut config = quick(&dir.path().join("two"), 10, 10);
        config.device = "flex,flex".into();
        config.optim.batch_size = 4;
        config
    };
    let (one, two) = (train(&one, Start::New, |_| {}).unwrap(), train(&two, Start::New, |_| {}).unwrap());
    assert_eq!((one.train_losses.len(), two.train_losses.len()), (10, 20), "one loss per device and step");
    // Every step, the mean of the two devices' losses is the single device's loss (the same
    // windows, the same weights), up to float rounding. The devices report their micro-batches as
    // they finish, so under load one's next loss may be logged before the other's: the sums over
    // the run are compared, which that order does not change.
    let (halves, singles) = (two.train_losses.iter().sum::<f64>() / 2.0, one.train_losses.iter().sum::<f64>());
    assert!((halves - singles).abs() < 1e-4, "the sum over 10 steps: {halves} vs {singles}");
    let diff = (one.valid_loss - two.valid_loss).abs();
    assert!(diff < 1e-3 * one.valid_loss, "validation loss {} vs {}", one.valid_loss, two.valid_loss);
}

/// `f16-mixed` on two GPU devices: the loss scale the first device's verdict leaves scales the
/// other device's loss too (moved to it: each device's loss is on its own device), and the run
/// ends with a finite validation loss, its steps applied.
#[cfg(feature = "wgpu")]
#[test]
fn two_gpu_devices_train_in_f16_mixed_under_the_devices_loss_scale() {
    let _turn = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let mut config = quick(&dir.path().join("run"), 6, 6);
    (config.device, config.optim.batch_size, config.data.seq_len) = ("wgpu-cpu,wgpu".into(), 2, 32);
    config.precision = Some(layernorm_scaling::Precision::F16Mixed);
    let report = train(&config, Start::New, |_| {}).unwrap();
    assert!(report.verdict.is_none(), "{:?}", report.verdict);
    assert!(report.valid_loss.is_finite(), "{}", report.valid_loss);
    let rows = read_metrics(&config.output.out).unwrap();
    let scales: Vec<f64> = rows.iter().filter(|r| r.metric == "Loss scale" && !r.is_final).map(|r| r.value).collect();
    assert_eq!(scales, [65536.0; 6], "one loss scale a step, none skipped");
}

/// On several devices each device's micro-batch reaches the metrics on its own, in the order the
/// devices finish, and only one of them carries the step's gradient norm. The metrics that stand
/// for a step (the gradient norm, tokens per second) are logged once per step, when the whole step
/// is in; every progress line shows the step's values over both devices: no NaN on a healthy step,
/// no row that stands for nothing, no rate of one micro-batch timed from the other's end.
#[test]
fn two_devices_report_each_step_whole_with_no_empty_rows() {
    let _turn = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let mut config = quick(&dir.path().join("run"), 8, 4);
    (config.device, config.optim.batch_size, config.output.log_every) = ("flex,flex".into(), 4, 1);
    let mut events = Vec::new();
    let report = train(&config, Start::New, |event| events.push(event)).unwrap();
    let rows = read_metrics(&config.output.out).unwrap();
    let empty: Vec<_> = rows.iter().filter(|r| !r.value.is_finite() || r.count == Some(0)).collect();
    assert!(empty.is_empty(), "rows with no value: {empty:?}");
    let per_step = |metric: &str| -> Vec<(usize, f64)> {
        let rows = rows.iter().filter(|r| r.split == "train" && r.metric == metric && !r.is_final);
        rows.map(|r| (r.step, r.value)).collect()
    };
    for metric in ["Gradient norm", "Tokens per second"] {
        let steps: Vec<usize> = per_step(metric).iter().map(|(step, _)| *step).collect();
        assert_eq!(steps, (1..=8).collect::<Vec<_>>(), "{metric}: one row per step, at its step");
    }
    let losses: Vec<_> = rows.iter().filter(|r| r.split == "train" && r.metric == "Loss" && !r.is_final).collect();
    assert_eq!(losses.len(), 16, "one loss per device and step");
    // Tokens per second counts both devices' tokens over the time the steps took: within a
    // factor of the run's own rate (its tokens over its seconds, validation and saves included).
    // A rate timed from one device's micro-batch to the other's (microseconds) is far above it.
    let run_rate = report.tokens_per_second;
    for (step, rate) in per_step("Tokens per second") {
        assert!(
            rate < 10.0 * run_rate && rate > run_rate / 10.0,
            "step {step}: {rate:.0} tokens/s, the run {run_rate:.0}"
        );
    }
    // Progress lines go to burn-train's dashboard when standard output is a terminal.
    if std::io::stdout().is_terminal() {
        return;
    }
    let lines: Vec<String> =
        events.iter().filter(|e| matches!(e, TrainEvent::Progress { .. })).map(|e| e.to_string()).collect();
    assert_eq!(lines.len(), 8, "{lines:?}");
    let shown = |line: &str, metric: &str| -> f64 {
        let field = line.split(" | ").find_map(|field| field.strip_prefix(&format!("{metric} ")));
        field.unwrap_or_else(|| panic!("no {metric} in {line}")).parse().unwrap()
    };
    let norms = per_step("Gradient norm");
    for (step, line) in (1..=8).zip(&lines) {
        let norm = shown(line, "Gradient norm");
        assert!((norm - norms[step - 1].1).abs() <= 1e-3 * norm.abs().max(0.1), "step {step}: {line}");
        // The step's loss: the token-weighted mean over both devices' micro-batches.
        let (sum, tokens) = losses.iter().filter(|r| r.step == step).fold((0.0, 0), |(sum, tokens), r| {
            let count = r.count.unwrap();
            (sum + r.value * count as f64, tokens + count)
        });
        let loss = shown(line, "Loss");
        assert!((loss - sum / tokens as f64).abs() < 1e-4, "step {step}: {line} vs {}", sum / tokens as f64);
    }
}

/// A tokenizer shaped like t5-base: its own vocabulary fits the model, added sentinel tokens
/// (`<extra_id_N>`) lie above it. It trains; a corpus that spells a sentinel out is refused.
#[test]
fn added_tokens_above_the_vocabulary_are_refused_only_where_the_corpus_holds_them() {
    let _turn = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("tokenizer.json");
    let vocab: serde_json::Map<String, serde_json::Value> = (0..249)
        .map(|i| (format!("t{i}"), serde_json::json!(i)))
        .chain([("</s>".to_string(), serde_json::json!(249))])
        .collect();
    let added: Vec<serde_json::Value> = (0..10)
        .map(|i| {
            serde_json::json!({"id": 250 + i, "content": format!("<extra_id_{i}>"), "single_word": false,
                "lstrip": false, "rstrip": false, "normalized": false, "special": true})
        })
        .collect();
    let tokenizer = serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": added,
        "normalizer": null, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": null, "decoder": null,
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "t0"}
    });
    std::fs::write(&json, tokenizer.to_string()).unwrap();
    let loaded = layernorm_scaling::data::Tokenizer::from_file(&json).unwrap();
    assert_eq!((loaded.base_vocab_size(), loaded.vocab_size()), (250, 260));

    let mut config = quick(&dir.path().join("run"), 6, 3);
    config.data.tokenizer = json.display().to_string();
    train(&config, Start::New, |_| {}).expect("the sentinels above the model's 256 ids are never produced");

    let corpus = dir.path().join("corpus.txt");
    let paragraph = "t1 t2 t3 t4 t5 t6 t7 t8 t9 t10 t11 t12 t13 t14 t15 t16 t17 t18 t19 t20\n\n";
    std::fs::write(&corpus, format!("{}t5 <extra_id_9> t6\n", paragraph.repeat(200))).unwrap();
    (config.data.files, config.output.out) = (vec![corpus], dir.path().join("run2"));
    let outside = WholeCorpusProblem::OutsideModelVocabulary { id: 259, text: "<extra_id_9>".into(), vocab_size: 256 };
    assert_eq!(expect_data_error(&config, Start::New), DataError::Whole(outside));
}

#[test]
fn a_run_that_repeats_its_data_is_warned_before_the_first_step() {
    let _turn = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let mut events = Vec::new();
    let mut config = quick(&dir.path().join("run"), 20, 20);
    config.data.builtin_docs = 60;
    train(&config, Start::New, |event| events.push(event)).unwrap();
    let budget = events.iter().find_map(|e| if let TrainEvent::Data(b) = e { Some(*b) } else { None }).unwrap();
    assert!(budget.read > budget.sequences, "{budget:?}");
    let first_step =
        events.iter().position(|e| matches!(e, TrainEvent::Progress { .. } | TrainEvent::Evaluated { .. }));
    let warning = events.iter().position(|e| matches!(e, TrainEvent::Warning(w) if w.contains("repeats data")));
    assert!(warning.is_some() && warning < first_step.or(Some(usize::MAX)), "{events:?}");
    assert!(events[warning.unwrap()].to_string().contains(&format!("{:.2} times", budget.passes())));
}

/// Writes documents `first..first + n` of the built-in corpus (data seed 7) to `path` as text.
fn write_text_corpus(path: &Path, first: usize, n: usize) {
    let docs = layernorm_scaling::data::builtin_documents(first + n, 7);
    std::fs::write(path, docs[first..].join("\n\n")).unwrap();
}

#[test]
fn a_validation_corpus_of_its_own_gives_every_run_the_same_tokens() {
    let _turn = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let (train_file, valid_file) = (dir.path().join("train.txt"), dir.path().join("valid.txt"));
    write_text_corpus(&train_file, 0, 600);
    write_text_corpus(&valid_file, 600, 100);
    let mut config = quick(&dir.path().join("run"), 6, 6);
    config.data.files = vec![train_file.clone()];
    config.eval.valid_data = vec![valid_file.clone()];
    config.eval.valid_tokens = Some(1000);
    let mut events = Vec::new();
    let report = train(&config, Start::New, |e| events.push(e)).unwrap();

    // Every training document trains; validation reads the first sequences holding 1,000 targets.
    let budget = events.iter().find_map(|e| if let TrainEvent::Data(b) = e { Some(*b) } else { None }).unwrap();
    let source = CorpusSource::files(vec![train_file.clone()]);
    let corpus = tokenize_corpus(&source, &Tokenizer::Byte, &dir.path().join("cache")).unwrap();
    assert_eq!(budget.sequences, (corpus.n_tokens() - 1) / 64, "{budget:?}");
    let valid = validation_data(&config).unwrap();
    assert_eq!((valid.len(), valid.n_targets()), (16, 16 * 64), "1,000 targets take 16 sequences of 64");
    let loss = mean_loss(&report.model, &valid, 8, 2, &[]).unwrap();
    assert_eq!(loss.to_bits(), report.valid_loss.to_bits(), "the run's validation loss is over those sequences");

    // The same tokens whatever the seed, the scheme or the batch size.
    let windows = |config: &TrainConfig| {
        let data = validation_data(config).unwrap();
        (0..data.len()).map(|i| data.window(i)).collect::<Vec<_>>()
    };
    let other = edited(&config, |c| {
        c.model.norm = Some(NormScheme::PreLn);
        c.optim.batch_size = 3;
        c.seed = 5;
    });
    assert_eq!(windows(&config), windows(&other));

    // train.json records the budget, and reads back as the same settings.
    assert_eq!(DataBudget::recorded_in(&dir.path().join("run/train.json")), Some(budget));
    let recorded = TrainConfig::from_file(dir.path().join("run/train.json")).unwrap();
    assert_eq!(recorded.eval.valid_data, vec![valid_file.clone()]);

    // Bad validation data: clear errors before the run directory is made.
    let refused = |changed: TrainConfig| -> DataError {
        let out = dir.path().join("refused");
        let err = train(&edited(&changed, |c| c.output.out = out.clone()), Start::New, |_| {}).unwrap_err();
        assert!(!out.exists(), "nothing is written for `{err}`");
        match err {
            Error::Data(err) => err,
            other => panic!("not a data error: {other}"),
        }
    };
    let overlap = |valid: PathBuf| match refused(edited(&config, |c| c.eval.valid_data = vec![valid.clone()])) {
        DataError::Whole(WholeCorpusProblem::ValidationOverlaps { valid: named, train, copy }) => {
            assert!(named == valid || named.parent() == Some(&*valid), "{}", named.display());
            (train, copy)
        }
        other => panic!("not an overlap: {other}"),
    };
    assert_eq!(overlap(train_file.clone()), (train_file.clone(), false));
    assert_eq!(overlap(dir.path().to_path_buf()), (train_file.clone(), false));
    let copy = dir.path().join("copy.txt");
    std::fs::copy(&train_file, &copy).unwrap();
    assert_eq!(overlap(copy), (train_file.clone(), true));
    let empty = dir.path().join("empty.txt");
    std::fs::write(&empty, "\n\n").unwrap();
    let err = refused(edited(&config, |c| c.eval.valid_data = vec![empty]));
    assert_eq!(err, DataError::Validation(Box::new(DataError::Whole(WholeCorpusProblem::NoText))));
    let short = dir.path().join("short.txt");
    std::fs::write(&short, "too short").unwrap();
    let err = refused(edited(&config, |c| c.eval.valid_data = vec![short]));
    let too_short = SplitProblem::CorpusTooShort {
        what: "the validation corpus (--valid-data)",
        tokens: 10,
        short: "fewer than one sequence of 64 + 1".into(),
    };
    assert_eq!(err, DataError::Split(too_short));
    let err = refused(edited(&config, |c| c.eval.valid_tokens = Some(10_000_000)));
    assert!(matches!(err, DataError::Split(SplitProblem::TooFewValidTokens { asked: 10_000_000, .. })), "{err}");
}

/// One definition of the validation loss: the mean over exactly the chosen targets, each batch
/// weighted by its targets. It does not move with the batch size (a short last batch counted as
/// a whole one made it move), in packed or truncated sequences, and the validation the run logs
/// (its loss and its perplexity) says the same as the final figure.
#[test]
fn the_validation_loss_is_over_the_chosen_tokens_whatever_the_batch_size() {
    let _turn = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let (train_file, valid_file) = (dir.path().join("train.txt"), dir.path().join("valid.txt"));
    write_text_corpus(&train_file, 0, 600);
    write_text_corpus(&valid_file, 600, 100);
    for sequences in [SequenceMode::Pack, SequenceMode::Truncate] {
        let mut config = quick(&dir.path().join(format!("{sequences:?}")), 6, 6);
        config.data.files = vec![train_file.clone()];
        config.eval.valid_data = vec![valid_file.clone()];
        config.eval.valid_tokens = Some(1000);
        config.data.sequences = sequences;
        config.optim.batch_size = 5;
        let report = train(&config, Start::New, |_| {}).unwrap();
        let valid = validation_data(&config).unwrap();
        // Sequence by sequence, each weighted by its targets: the definition.
        let (mut sum, mut targets) = (0.0, 0);
        for i in 0..valid.len() {
            let window = valid.window(i);
            let counted = window.real - 1;
            let batch = LmBatcher.batch(vec![window], &cpu());
            let logits = report.model.forward(batch.inputs);
            let loss = cross_entropy_counting(logits, batch.targets, batch.counted).into_scalar::<f64>();
            sum += loss * counted as f64;
            targets += counted;
        }
        let expected = sum / targets as f64;
        for batch in [1, 3, 5, 7, 16] {
            let loss = mean_loss(&report.model, &valid, batch, usize::MAX, &[]).unwrap();
            assert!((loss - expected).abs() < 1e-5, "{sequences:?}, batch {batch}: {loss} against {expected}");
        }
        assert!((report.valid_loss - expected).abs() < 1e-5, "{sequences:?}: {} against {expected}", report.valid_loss);
        let rows = read_metrics(&config.output.out).unwrap();
        let logged = |metric: &str| {
            rows.iter().rev().find(|r| r.split == "valid" && r.metric == metric && r.is_final).unwrap().value
        };
        let (loss, perplexity) = (logged("Loss"), logged("Perplexity"));
        assert!((loss - report.valid_loss).abs() < 1e-5, "{sequences:?}: logged {loss}, final {}", report.valid_loss);
        assert!((perplexity.ln() - loss).abs() < 1e-5, "{sequences:?}: perplexity {perplexity} beside loss {loss}");
    }
}

#[test]
fn truncated_documents_train_and_the_budget_counts_their_real_tokens() {
    let _turn = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let mut config = quick(&dir.path().join("run"), 4, 4);
    config.data.sequences = SequenceMode::Truncate;
    config.optim.warmup = Some(1);
    let mut events = Vec::new();
    let report = train(&config, Start::New, |e| events.push(e)).unwrap();
    assert!(report.valid_loss.is_finite());
    let budget = events.iter().find_map(|e| if let TrainEvent::Data(b) = e { Some(*b) } else { None }).unwrap();
    assert_eq!(budget.sequences_mode, SequenceMode::Truncate);
    // One sequence per training document, each predicting fewer than 64 real tokens on average.
    assert!(budget.tokens < budget.sequences * 64 && budget.tokens > budget.sequences, "{budget:?}");
    assert_eq!(budget.seq_len, 64);
    // The line said before the first step is the budget's note, which tells truncated documents
    // from packed sequences.
    let note = TrainEvent::Data(budget).to_string();
    assert_eq!(note, budget.note());
    // It names the documents and the length they are cut at.
    assert!(note.contains(&budget.sequences.to_string()) && note.contains("64"), "{note}");
    let packed = DataBudget { sequences_mode: SequenceMode::Pack, ..budget };
    assert_ne!(note, packed.note(), "{note}");
}

/// What `--resume` without a config file starts from: the run's own recorded settings, found from
/// its directory, or from its `train.json` wherever the command runs.
#[test]
fn a_runs_recorded_settings_are_found_from_its_directory_or_its_train_json() {
    let dir = tempfile::tempdir().unwrap();
    let config = finished_run(dir.path());
    let recorded = TrainConfig::recorded_in(&config.output.out).unwrap().expect("a finished run records its settings");
    assert_eq!(
        (recorded.optim.steps, recorded.seed, recorded.optim.lr),
        (config.optim.steps, config.seed, config.optim.lr)
    );
    assert_eq!(recorded.data.data_seed, Some(config.data.data_seed()));
    assert!(TrainConfig::recorded_in(dir.path()).unwrap().is_none(), "a directory without a run records nothing");
    assert_eq!(run_of_config_file(&config.output.out.join(TRAIN_CONFIG)), Some(config.output.out.clone()));
    // A train.json with nothing of a run beside it is a config file, not a run's.
    let lone = dir.path().join(TRAIN_CONFIG);
    std::fs::copy(config.output.out.join(TRAIN_CONFIG), &lone).unwrap();
    assert_eq!(run_of_config_file(&lone), None);
    // A run that lost its model.json is still that run (its resume then names the damage), never
    // the run its recorded `out` names.
    std::fs::remove_file(config.output.out.join("model.json")).unwrap();
    assert_eq!(run_of_config_file(&config.output.out.join(TRAIN_CONFIG)), Some(config.output.out.clone()));
    // A directory where the settings should be is an error, not "nothing recorded".
    let odd = dir.path().join("odd");
    std::fs::create_dir_all(odd.join(TRAIN_CONFIG)).unwrap();
    let err = TrainConfig::recorded_in(&odd).unwrap_err();
    assert!(
        matches!(&err, Error::RunDir { error: RunDirError::SettingsUnreadable { edited: false, .. }, .. }),
        "{err:?}"
    );
    // So is a link to settings that are gone.
    let dangling = dir.path().join("dangling");
    std::fs::create_dir_all(&dangling).unwrap();
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(dir.path().join("gone.json"), dangling.join(TRAIN_CONFIG)).unwrap();
        assert!(TrainConfig::recorded_in(&dangling).is_err());
    }
    // Settings cut short say that the run did not write them so.
    let cut = dir.path().join("cut");
    std::fs::create_dir_all(&cut).unwrap();
    std::fs::copy(config.output.out.join("train.json.sum"), cut.join("train.json.sum")).unwrap();
    std::fs::write(cut.join(TRAIN_CONFIG), "{\"seq_len\": 6").unwrap();
    let err = TrainConfig::recorded_in(&cut).unwrap_err();
    assert!(
        matches!(&err, Error::RunDir { path, error: RunDirError::SettingsUnreadable { edited: true, .. } } if *path == cut),
        "{err:?}"
    );
    // A copy of a run's train.json with its checksum is a config file too.
    std::fs::copy(config.output.out.join("train.json.sum"), dir.path().join("train.json.sum")).unwrap();
    assert_eq!(run_of_config_file(&lone), None);
}
