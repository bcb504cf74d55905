//! Bad input gives a clear error, never an abort, and nothing is silently wrong: absurd model sizes
//! (Hugging Face `config.json` and our own configs), a corpus changed behind the token cache's
//! back, a corrupt line in `tracking.jsonl`, and a diverged (NaN) model given to `analyze`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use burn::module::Param;
use burn::tensor::{Tensor, TensorData};
use common::{cpu, example, hf_fixture as fixture};
use layernorm_scaling::data::{tokenize_corpus, CorpusSource, Tokenizer};
use layernorm_scaling::hf::{load_hf_model, write_safetensors, Checkpoint, FieldProblem, HfError};
use layernorm_scaling::memory::{available_memory_bytes, format_bytes, mem_available, uses_host_memory};
use layernorm_scaling::model::first_non_finite_parameter;
use layernorm_scaling::run::{read_tracking, read_tracking_skipping_damage, TrackRecord, TRACKING};
use layernorm_scaling::train::Tracker;
use layernorm_scaling::{ConfigError, LlamaConfig, MemoryProblem, ModelSize};

/// A copy of fixture `name` in `dir`, with its `config.json` edited.
fn edited_fixture(name: &str, dir: &Path, edit: impl FnOnce(&mut serde_json::Value)) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    for entry in std::fs::read_dir(fixture(name)).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), dir.join(entry.file_name())).unwrap();
    }
    let path = dir.join("config.json");
    let mut json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut json);
    std::fs::write(&path, json.to_string()).unwrap();
    dir.to_path_buf()
}

#[test]
fn an_absurd_hugging_face_config_is_refused_before_anything_is_allocated() {
    let tmp = tempfile::tempdir().unwrap();
    let cases: [(&str, serde_json::Value, &str); 4] = [
        // 100000000 / 4 heads: head_dim must follow, or the config is refused for that instead.
        (
            "hidden_size",
            serde_json::json!({"hidden_size": 100_000_000, "head_dim": 25_000_000}),
            "[128, 32], not [128, 100000000] (hidden_size 32)",
        ),
        ("num_hidden_layers", serde_json::json!({"num_hidden_layers": 1_000_000}), "the checkpoint holds 2 layers"),
        (
            "intermediate_size",
            serde_json::json!({"intermediate_size": 1_000_000_000}),
            "has shape [48, 32], not [1000000000, 32]",
        ),
        ("vocab_size", serde_json::json!({"vocab_size": 1_000_000_000}), "(vocab_size 128)"),
    ];
    // What the checkpoint holds instead (the problem's `found`).
    for (field, edit, expected) in cases {
        let dir = edited_fixture("llama_mha_untied", &tmp.path().join(field), |config| {
            for (key, value) in edit.as_object().unwrap() {
                config[key] = value.clone();
            }
        });
        let err = load_hf_model(&dir, &cpu()).map(|_| ()).unwrap_err();
        // The field, refused as contradicting the checkpoint's tensors, with its value and theirs.
        let HfError::Config { field: f, problem: FieldProblem::ContradictsCheckpoint { value, found } } = &err else {
            panic!("{field}: {err:?}")
        };
        assert_eq!((f.as_str(), Some(*value as u64)), (field, edit[field].as_u64()), "{err}");
        assert!(found.contains(expected), "{field}: {found}");
    }
    // The fixture itself still loads: the check refuses only configs the checkpoint contradicts.
    let dir = edited_fixture("llama_mha_untied", &tmp.path().join("unchanged"), |_| {});
    assert_eq!(load_hf_model(&dir, &cpu()).unwrap().config.d_model, 32);
}

#[test]
fn a_model_larger_than_memory_is_an_error_naming_its_sizes() {
    // The pure check: the parameters' bytes against the bytes available.
    let tiny = LlamaConfig::tiny();
    let bytes = tiny.num_params() as u64 * 4;
    assert_eq!(tiny.check_fits(4, bytes), Ok(()));
    let err = tiny.check_fits(4, bytes - 1).unwrap_err();
    let model = ModelSize { params: tiny.num_params(), d_model: 64, d_ff: 176, n_layers: 4, vocab_size: 256 };
    let weights = MemoryProblem::Weights { model, float_bytes: 4, needed: bytes, available: bytes - 1 };
    assert_eq!(err, ConfigError::TooLarge(Box::new(weights)));

    // Counting an absurd config saturates rather than overflowing.
    let absurd = LlamaConfig::new(usize::MAX / 2, usize::MAX / 2, usize::MAX / 2, 1);
    assert_eq!(absurd.num_params(), usize::MAX);
    assert!(absurd.check_fits(4, 1 << 50).is_err());

    // /proc/meminfo and the devices whose tensors live in the machine's memory.
    assert_eq!(mem_available("MemTotal: 8000 kB\nMemAvailable:    2048 kB\n"), Some(2048 * 1024));
    assert_eq!(mem_available("MemTotal: 8000 kB\n"), None);
    assert_eq!(format_bytes(3 << 30), "3.0 GiB");
    assert!(uses_host_memory(&cpu()) && uses_host_memory(&cpu().autodiff()));

    // `init` refuses, instead of aborting on a failed allocation, both from a JSON file and a preset.
    let Some(available) = available_memory_bytes() else {
        eprintln!("no /proc/meminfo MemAvailable here: init makes no memory check");
        return;
    };
    assert!(available > 0);
    let dir = tempfile::tempdir().unwrap();
    for (name, json, sizes) in [
        ("layers", r#"{"d_model": 64, "d_ff": 176, "n_layers": 1000000000, "n_heads": 4}"#, (64, 1_000_000_000)),
        ("width", r#"{"d_model": 10000000, "d_ff": 176, "n_layers": 4, "n_heads": 4}"#, (10_000_000, 4)),
    ] {
        let path = dir.path().join(format!("{name}.json"));
        std::fs::write(&path, json).unwrap();
        let config = LlamaConfig::from_file(&path).unwrap();
        match config.init(&cpu()) {
            Err(ConfigError::TooLarge(problem)) => {
                let MemoryProblem::Weights { model, needed, available, .. } = *problem else {
                    panic!("{name}: {problem}")
                };
                assert_eq!((model.d_model, model.n_layers, model.d_ff), (sizes.0, sizes.1, 176), "{name}: its sizes");
                assert!(needed > available, "{name}: {needed} <= {available}");
            }
            other => panic!("{name}: expected a memory error, got {:?}", other.map(|_| ())),
        }
    }
    let huge = LlamaConfig { n_layers: 100_000, ..LlamaConfig::llama_7b() };
    let err = huge.init(&cpu().autodiff()).map(|_| ()).unwrap_err();
    let weights = |e: &ConfigError| matches!(e, ConfigError::TooLarge(p) if matches!(**p, MemoryProblem::Weights { model, .. } if model.n_layers == 100_000));
    assert!(weights(&err), "{err}");
}

/// The byte tokenizer's ids of `text`.
fn bytes(text: &str) -> Vec<u32> {
    text.bytes().map(u32::from).collect()
}

#[test]
fn the_token_cache_sees_a_changed_file_with_the_same_size_and_modification_time() {
    let dir = tempfile::tempdir().unwrap();
    let (corpus, cache_root) = (dir.path().join("corpus.txt"), dir.path().join("cache"));
    let source = CorpusSource::files(vec![corpus.clone()]);
    let tokens = |cache: &layernorm_scaling::data::TokenCache| {
        let mut out = vec![0; cache.n_tokens() as usize];
        cache.read(0, &mut out);
        out
    };
    std::fs::write(&corpus, "first text\n\nsecond one\n").unwrap();
    let modified = std::fs::metadata(&corpus).unwrap().modified().unwrap();
    let before = tokenize_corpus(&source, &Tokenizer::Byte, &cache_root).unwrap();
    assert_eq!(tokens(&before)[..5], bytes("first")[..]);

    // Same length, same modification time, other content (as a restore with `touch -d` leaves it).
    std::fs::write(&corpus, "FIRST TEXT\n\nSECOND ONE\n").unwrap();
    std::fs::File::options().write(true).open(&corpus).unwrap().set_modified(modified).unwrap();
    assert_eq!(std::fs::metadata(&corpus).unwrap().modified().unwrap(), modified);
    let after = tokenize_corpus(&source, &Tokenizer::Byte, &cache_root).unwrap();
    assert_eq!((after.n_docs(), after.n_tokens()), (before.n_docs(), before.n_tokens()));
    assert_eq!(tokens(&after)[..5], bytes("FIRST")[..], "the stale cache was reused");
    assert_ne!(after.dir(), before.dir());

    // Unchanged content reuses the cache.
    let again = tokenize_corpus(&source, &Tokenizer::Byte, &cache_root).unwrap();
    assert_eq!((again.dir(), tokens(&again)), (after.dir(), tokens(&after)));
}

fn record(step: usize) -> TrackRecord {
    TrackRecord {
        step,
        block_output_variance: vec![1.0, 2.0 + step as f64, 3.0],
        after_attention_variance: vec![1.5, 2.5],
        grad_norm: vec![0.1, 0.2],
        max_abs_activation: vec![0.5, 4.0, 9.0 + step as f64],
    }
}

#[test]
fn resuming_keeps_every_valid_tracking_record_around_a_corrupt_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(TRACKING);
    let line = |step| serde_json::to_string(&record(step)).unwrap();
    let mut bytes = format!("{}\n{}\n{{\"step\": 2, \"block_out\n{}\n", line(0), line(1), line(3)).into_bytes();
    bytes.extend_from_slice(b"\xff\xfe not utf-8\n");
    bytes.extend_from_slice(format!("{}\n{}\n", line(4), line(7)).as_bytes());
    std::fs::write(&path, &bytes).unwrap();
    // `read_tracking` stays strict and names the first bad line; analyze's reader leaves the bad
    // lines out, and says which.
    let (read, damaged) = read_tracking_skipping_damage(dir.path(), 2).unwrap();
    assert_eq!((read.len(), damaged.iter().map(|(line, _)| *line).collect::<Vec<_>>()), (5, vec![3, 5]));
    // The strict reader's error is the file's, at the first bad line, with what the lenient one says of it.
    let err = read_tracking(dir.path()).unwrap_err();
    let (line, what) = &damaged[0];
    assert!(
        matches!(&err, layernorm_scaling::Error::File { path: at, message } if *at == path && *message == format!("line {line}: {what}")),
        "{err:?}"
    );

    // Resuming at step 5 keeps the records of steps 0, 1, 3 and 4 (not 7, of the interrupted run).
    let probe = TensorData::new(vec![0i64; 4], [1, 4]);
    Tracker::new(dir.path(), 1, probe, 5, 2, Default::default()).unwrap();
    let kept = read_tracking(dir.path()).unwrap();
    assert_eq!(kept, vec![record(0), record(1), record(3), record(4)]);
}

/// A model whose weights are all finite but one.
fn with_value_at(model: layernorm_scaling::Llama, value: f32) -> layernorm_scaling::Llama {
    let mut model = model;
    let weight = &mut model.layers[1].mlp.down_proj.weight;
    let [rows, cols] = weight.shape().dims();
    let mut values = weight.val().into_data().convert::<f32>().try_into_vec::<f32>().unwrap();
    values[rows * cols / 2] = value;
    *weight = Param::from_tensor(Tensor::from_data(TensorData::new(values, [rows, cols]), &cpu()));
    model
}

#[test]
fn a_non_finite_weight_is_found_and_named() {
    let model = LlamaConfig::tiny().init(&cpu()).unwrap();
    assert_eq!(first_non_finite_parameter(&model), None);
    for value in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
        let broken = with_value_at(model.clone(), value);
        assert_eq!(first_non_finite_parameter(&broken).as_deref(), Some("layers.1.mlp.down_proj.weight"), "{value}");
    }
}

/// A run directory whose final model holds a NaN: the loader refuses it, so every program that
/// reads a run's weights does (`generate` and `hf export` printed or wrote NaN with exit 0 where
/// they missed the check).
#[test]
fn every_reader_of_a_run_refuses_its_non_finite_weights() {
    use layernorm_scaling::run::{load_run_model, save_run_model, RunModelInfo};
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    std::fs::create_dir_all(&run).unwrap();
    let config = LlamaConfig::tiny();
    let model = with_value_at(config.init(&cpu()).unwrap(), f32::NAN);
    let info = RunModelInfo { model: config, tokenizer: "byte".into(), steps: 1, data: None, tokenizer_identity: None };
    save_run_model(&run, &model, &info).unwrap();
    // The loader's refusal, which each program reports as it is.
    let error = load_run_model(&run, None, &cpu()).map(drop).unwrap_err();
    match &error {
        layernorm_scaling::Error::NonFinite { parameter, .. } => assert_eq!(parameter, "layers.1.mlp.down_proj.weight"),
        other => panic!("{other:?}"),
    }
    let expected = error.to_string();
    let refused = |command: &mut Command, what: &str| {
        let output = command.output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{what}: {stderr}");
        assert!(stderr.contains(&expected), "{what}: {stderr}");
        assert!(!stderr.contains("panicked") && output.stdout.is_empty(), "{what}: {stderr}");
    };
    refused(Command::new(example("generate")).arg("--run").arg(&run).args(["--device", "flex"]), "generate");
    let exported = tmp.path().join("exported");
    refused(
        Command::new(example("hf"))
            .args(["export", "--device", "flex", "--checkpoint"])
            .arg(&run)
            .arg("--out")
            .arg(&exported),
        "hf export",
    );
    assert!(!exported.exists(), "a refused export wrote its folder");
}

#[test]
fn analyze_refuses_a_diverged_model_and_writes_no_report() {
    let tmp = tempfile::tempdir().unwrap();
    let good = edited_fixture("llama_mha_untied", &tmp.path().join("good"), |_| {});
    // The same model with one NaN weight.
    let diverged = edited_fixture("llama_mha_untied", &tmp.path().join("diverged"), |_| {});
    let checkpoint = Checkpoint::open(&good).unwrap();
    let tensors: Vec<(String, Vec<usize>, Vec<f32>)> = checkpoint
        .keys()
        .into_iter()
        .map(|key| {
            let shape = checkpoint.shape(key).unwrap();
            let mut values = checkpoint.tensor(key, &shape).unwrap();
            if key == "model.layers.1.mlp.up_proj.weight" {
                values[7] = f32::NAN;
            }
            (key.to_string(), shape, values)
        })
        .collect();
    write_safetensors(&diverged.join("model.safetensors"), &tensors).unwrap();

    let text = tmp.path().join("eval.txt");
    std::fs::write(&text, (0..20).map(|i| format!("the cat sat on the mat {i}\n\n")).collect::<String>()).unwrap();
    let analyze = |dir: &Path, out: &Path| {
        Command::new(example("analyze"))
            .arg("--hf-dir")
            .arg(dir)
            .arg("--data")
            .arg(&text)
            .arg("--out")
            .arg(out)
            .args(["--seq-len", "16", "--batch-size", "2", "--batches", "1", "--layers", "1", "--device", "flex"])
            .output()
            .unwrap()
    };
    let out = tmp.path().join("report-good");
    let output = analyze(&good, &out);
    assert!(
        output.status.success() && out.join("report.json").is_file(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );

    let out = tmp.path().join("report-diverged");
    let output = analyze(&diverged, &out);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    // The loader's refusal of the weight, naming the model folder, as analyze reports it.
    let up_proj = "model.layers.1.mlp.up_proj.weight";
    let refusal = load_hf_model(&diverged, &cpu()).map(drop).unwrap_err();
    assert!(matches!(&refusal, HfError::NonFinite { parameter } if parameter == up_proj), "{refusal}");
    let expected = layernorm_scaling::run::load_model_dir(&diverged, None, &cpu()).map(drop).unwrap_err();
    let layernorm_scaling::Error::HfDir { dir, error: HfError::NonFinite { parameter } } = &expected else {
        panic!("{expected:?}")
    };
    assert!(*dir == diverged && parameter == up_proj, "{expected:?}");
    assert!(stderr.contains(&expected.to_string()), "{stderr}");
    assert!(!stderr.contains("panicked") && !out.exists(), "{stderr}");
}

#[test]
fn a_training_config_of_another_name_is_read_by_its_content() {
    use layernorm_scaling::train::TrainConfig;
    let dir = tempfile::tempdir().unwrap();
    let toml = dir.path().join("run.cfg");
    std::fs::write(&toml, "steps = 7\ntext_field = \"content\"\n").unwrap();
    let config = TrainConfig::from_file(&toml).unwrap();
    assert_eq!((config.optim.steps, config.data.text_field.as_str()), (7, "content"));
    let json = dir.path().join("run.conf");
    std::fs::write(&json, "{\"steps\": 9}").unwrap();
    assert_eq!(TrainConfig::from_file(&json).unwrap().optim.steps, 9);
    // Neither: the error says what each attempt found.
    std::fs::write(&toml, "steps = 7\nsteps: 8\n").unwrap();
    let err = TrainConfig::from_file(&toml).unwrap_err();
    // What reading the same text as each format says: the text in a file of that name refused.
    let attempt = |extension: &str| {
        let named = dir.path().join(format!("attempt.{extension}"));
        std::fs::write(&named, "steps = 7\nsteps: 8\n").unwrap();
        match TrainConfig::from_file(&named).unwrap_err() {
            layernorm_scaling::Error::File { message, .. } => {
                message.split_once(": ").unwrap().1.trim_end().to_string()
            }
            other => panic!("{extension}: {other:?}"),
        }
    };
    let layernorm_scaling::Error::File { path, message } = &err else { panic!("{err:?}") };
    assert_eq!(*path, toml, "{err}");
    for (extension, found) in [("toml", attempt("toml")), ("json", attempt("json"))] {
        assert!(message.contains(&found), "what reading it as {extension} found: {found}; {err}");
        assert!(message.contains(&format!(".{extension}")), "a name to give it: {err}");
    }
    // A .json name is JSON only: TOML in it is refused as JSON.
    let named = dir.path().join("run.json");
    std::fs::write(&named, "steps = 7\n").unwrap();
    let err = TrainConfig::from_file(&named).unwrap_err().to_string();
    assert!(!err.contains("TOML"), "{err}");
}
