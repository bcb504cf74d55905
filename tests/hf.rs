//! Hugging Face interop: golden logits from transformers (`scripts/hf_fixtures.py`), retrofit,
//! the export round trip, and a clear error for each bad input.

mod common;
use common::edited;

use std::path::{Path, PathBuf};

use burn::module::Module;
use burn::tensor::{Int, Tensor, TensorData};
use common::{cpu, example, hf_fixture as fixture, max_diff, quick, ParamValues};
use layernorm_scaling::hf::{
    export_hf, load_hf_model, read_hf_config, write_safetensors, BlockPart, CacheMiss, Checkpoint, ExportProblem,
    FieldProblem, HfError, Unsupported,
};
use layernorm_scaling::model::{retrofit, RopeScaling};
use layernorm_scaling::run::TokenizerChoice;
use layernorm_scaling::{ConfigError, Llama, NormScheme};

const FIXTURES: [&str; 5] = ["llama_mha_untied", "llama_gqa_tied", "llama3_rope_scaling", "qwen2_bias", "mistral"];

/// The fixture's input ids and transformers' logits `[tokens, vocab]`.
fn reference(name: &str) -> (Vec<i64>, Vec<Vec<f32>>) {
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture(name).join("reference.json")).unwrap()).unwrap();
    let ids = json["input_ids"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
    let logits = json["logits"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row.as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32).collect())
        .collect();
    (ids, logits)
}

fn logits(model: &Llama, ids: &[i64]) -> Vec<f32> {
    let tokens = Tensor::<2, Int>::from_data(TensorData::new(ids.to_vec(), [1, ids.len()]), &cpu());
    common::values(&model.forward(tokens))
}

#[test]
fn every_fixture_matches_the_transformers_logits() {
    for name in FIXTURES {
        let loaded = load_hf_model(fixture(name), &cpu()).unwrap_or_else(|e| panic!("{name}: {e}"));
        let (ids, expected) = reference(name);
        let expected: Vec<f32> = expected.concat();
        let got = logits(&loaded.model, &ids);
        let diff = max_diff(&got, &expected);
        eprintln!("{name}: max abs diff {diff:e}");
        assert!(diff <= 1e-4, "{name}: max abs diff {diff}");
        // The logits are far from trivial: a wrong mapping would show.
        assert!(expected.iter().map(|v| v.abs()).fold(0.0, f32::max) > 0.5, "{name}");
        assert_eq!(loaded.config.norm_scheme, NormScheme::PreLn, "{name}");
    }
}

#[test]
fn the_configs_map_onto_the_model() {
    let llama3 = read_hf_config(fixture("llama3_rope_scaling")).unwrap();
    assert_eq!((llama3.n_layers, llama3.d_model, llama3.kv_heads(), llama3.rope_theta), (3, 64, 2, 500_000.0));
    assert!(
        matches!(llama3.rope_scaling, Some(RopeScaling::Llama3 { factor, original_max_position_embeddings: 64, .. }) if factor == 8.0)
    );
    let qwen = read_hf_config(fixture("qwen2_bias")).unwrap();
    assert!(qwen.qkv_bias && qwen.tie_embeddings);
    let tied = load_hf_model(fixture("llama_gqa_tied"), &cpu()).unwrap();
    assert!(tied.model.lm_head.is_none() && tied.config.norm_eps == 1e-5);
    // No tokenizer.json and a vocabulary of 112: the byte tokenizer (256) is not advised, and
    // refusing it does not send the user back to "leave --tokenizer unset".
    let loaded = layernorm_scaling::run::load_model_dir(fixture("llama_gqa_tied"), None, &cpu()).unwrap();
    let err = loaded.tokenizer(None).unwrap_err();
    let none = TokenizerChoice::NoneRecorded { vocab_size: Some(112) };
    assert!(matches!(&err, layernorm_scaling::Error::TokenizerChoice(choice) if *choice == none), "{err:?}");
    let err = loaded.tokenizer(Some(Path::new("byte"))).unwrap_err();
    let too_large = TokenizerChoice::TooLarge { spec: "byte".into(), tokens: 256, vocab_size: 112, own: false };
    assert!(matches!(&err, layernorm_scaling::Error::TokenizerChoice(choice) if *choice == too_large), "{err:?}");
    let mistral = read_hf_config(fixture("mistral")).unwrap();
    assert_eq!(mistral.kv_heads(), 1);

    // transformers 5 writes rope_theta and the scaling into `rope_parameters`: same model.
    let tmp = tempfile::tempdir().unwrap();
    let dir = copy_fixture("llama3_rope_scaling", tmp.path());
    edit_config(&dir, |c| {
        let config = c.as_object_mut().unwrap();
        let mut params = config.remove("rope_scaling").unwrap();
        params["rope_theta"] = config.remove("rope_theta").unwrap();
        config.insert("rope_parameters".into(), params);
    });
    assert_eq!(read_hf_config(&dir).unwrap(), llama3);
}

#[test]
fn the_directory_tokenizer_encodes_as_transformers() {
    let loaded = load_hf_model(fixture("llama_mha_untied"), &cpu()).unwrap();
    let tokenizer = loaded.tokenizer().unwrap();
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("llama_mha_untied").join("reference.json")).unwrap())
            .unwrap();
    let ids: Vec<i64> = tokenizer.encode(json["text"].as_str().unwrap()).unwrap().into_iter().map(i64::from).collect();
    let (expected, _) = reference("llama_mha_untied");
    // transformers adds <s> (id 1) in front; our encode leaves special tokens out.
    assert_eq!(expected[0], 1);
    assert_eq!(ids, expected[1..]);
    assert!(matches!(load_hf_model(fixture("qwen2_bias"), &cpu()).unwrap().tokenizer(), Err(HfError::NoTokenizer)));
}

#[test]
fn retrofit_keeps_every_weight_and_changes_only_the_scheme() {
    let loaded = load_hf_model(fixture("llama_mha_untied"), &cpu()).unwrap();
    let before = ParamValues::of(&loaded.model);
    let (ids, _) = reference("llama_mha_untied");
    let pre_ln = logits(&loaded.model, &ids);
    let (lns, config) = retrofit(loaded.model, &loaded.config, NormScheme::default()).unwrap();
    assert_eq!(config.norm_scheme, NormScheme::default());
    assert_eq!(config, loaded.config.clone().with_norm_scheme(NormScheme::default()));
    assert_eq!(ParamValues::of(&lns), before, "every weight is kept");
    // Only layer 1's factor is 1: the model now computes something else.
    assert!(max_diff(&logits(&lns, &ids), &pre_ln) > 1e-2);
    assert_eq!(lns.layers[1].attn_norm.scale(), 1.0 / 2f64.sqrt());
    // The same function as an LNS model built directly and given the same weights.
    let direct = config.init(&cpu()).unwrap().load_record(lns.clone().into_record());
    assert_eq!(max_diff(&logits(&direct, &ids), &logits(&lns, &ids)), 0.0);
    // Back to Pre-LN restores the original function exactly.
    let (back, _) = retrofit(lns, &config, NormScheme::PreLn).unwrap();
    assert_eq!(max_diff(&logits(&back, &ids), &pre_ln), 0.0);
}

#[test]
fn export_round_trips_in_the_crate_with_lns_restored() {
    let dir = tempfile::tempdir().unwrap();
    for name in FIXTURES {
        let loaded = load_hf_model(fixture(name), &cpu()).unwrap();
        let (ids, _) = reference(name);
        let (lns, config) = retrofit(loaded.model, &loaded.config, NormScheme::default()).unwrap();
        let out = dir.path().join(name);
        export_hf(&lns, &config, &out, loaded.tokenizer.as_deref()).unwrap();
        let back = load_hf_model(&out, &cpu()).unwrap();
        assert_eq!(back.config, config, "{name}: the config, LNS included, is restored");
        let diff = max_diff(&logits(&back.model, &ids), &logits(&lns, &ids));
        assert!(diff <= 1e-5, "{name}: {diff}");
        let weights = max_diff(&ParamValues::flat_of(&back.model), &ParamValues::flat_of(&lns));
        assert!(weights <= 1e-6, "{name}: the folded factors divide out ({weights})");
        assert_eq!(back.tokenizer.is_some(), loaded.tokenizer.is_some());
        // The exported weights hold LNS multiplied in: layer 2's norm is gamma / sqrt(2).
        let checkpoint = Checkpoint::open(&out).unwrap();
        let d = config.d_model;
        let stored = checkpoint.tensor("model.layers.1.input_layernorm.weight", &[d]).unwrap();
        let original =
            Checkpoint::open(&fixture(name)).unwrap().tensor("model.layers.1.input_layernorm.weight", &[d]).unwrap();
        let expected: Vec<f32> = original.iter().map(|g| g / 2f32.sqrt()).collect();
        assert!(max_diff(&stored, &expected) < 1e-6, "{name}: layer 2's input norm holds gamma / sqrt(2)");
    }
    // Exporting again replaces an earlier export (docs/hf.md); a file added to it since is named
    // and kept, and a folder that is no export (a downloaded model's) is refused and left alone.
    let loaded = load_hf_model(fixture("mistral"), &cpu()).unwrap();
    let again = dir.path().join("mistral");
    export_hf(&loaded.model, &loaded.config, &again, None).unwrap();
    assert!(!again.join("tokenizer.json").exists(), "the new export, without a tokenizer, replaced the old");
    std::fs::write(again.join("README.md"), "my model card").unwrap();
    let err = export_hf(&loaded.model, &loaded.config, &again, None).unwrap_err();
    assert!(matches!(&err, HfError::NotReplaceable { dir, .. } if *dir == again), "{err}");
    assert!(err.to_string().contains("README.md"), "the file in the way is named: {err}");
    assert_eq!(std::fs::read_to_string(again.join("README.md")).unwrap(), "my model card");
    let downloaded = copy_fixture("mistral", &dir.path().join("downloads"));
    let err = export_hf(&loaded.model, &loaded.config, &downloaded, None).unwrap_err();
    assert!(matches!(&err, HfError::NotReplaceable { dir, .. } if *dir == downloaded), "{err}");
    assert!(err.to_string().contains("model.safetensors"), "the downloaded files are named: {err}");
    assert!(downloaded.join("model.safetensors").is_file());
    // Schemes transformers cannot express are refused before anything is written.
    let (post, config) = retrofit(loaded.model, &loaded.config, NormScheme::PostLn).unwrap();
    let err = export_hf(&post, &config, dir.path().join("post"), None).unwrap_err();
    let post_ln = ExportProblem::Block(BlockPart::PostLn);
    assert!(
        matches!(&err, HfError::NotExportable { scheme: Some(NormScheme::PostLn), problem } if *problem == post_ln),
        "{err}"
    );
    assert!(!dir.path().join("post").exists());
}

/// A copy of fixture `name` in a temporary directory, for breaking.
fn copy_fixture(name: &str, to: &Path) -> PathBuf {
    let dir = to.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    for entry in std::fs::read_dir(fixture(name)).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), dir.join(entry.file_name())).unwrap();
    }
    dir
}

fn load_error(dir: &Path) -> HfError {
    load_hf_model(dir, &cpu()).map(|_| ()).unwrap_err()
}

/// Whether `error` is a `config.json` field problem about `name`.
fn field_error(error: &HfError, name: &str, problem: FieldProblem) -> bool {
    matches!(error, HfError::Config { field, problem: found } if field == name && *found == problem)
}

fn edit_config(dir: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let path = dir.join("config.json");
    let mut json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut json);
    std::fs::write(&path, json.to_string()).unwrap();
}

#[test]
fn each_bad_input_gives_an_error_naming_what_is_wrong() {
    let tmp = tempfile::tempdir().unwrap();

    // A missing tensor.
    let dir = copy_fixture("qwen2_bias", &tmp.path().join("missing"));
    let all = Checkpoint::open(&fixture("qwen2_bias")).unwrap();
    let mut kept = Vec::new();
    for key in all.keys().into_iter().filter(|key| *key != "model.layers.1.self_attn.k_proj.bias") {
        let shape = tensor_shape(&fixture("qwen2_bias"), key);
        kept.push((key.to_string(), shape.clone(), all.tensor(key, &shape).unwrap()));
    }
    write_safetensors(&dir.join("model.safetensors"), &kept).unwrap();
    let err = load_error(&dir);
    assert!(
        matches!(&err, HfError::MissingTensor { key, .. } if key == "model.layers.1.self_attn.k_proj.bias"),
        "{err}"
    );

    // A shape that disagrees with config.json.
    let dir = copy_fixture("mistral", &tmp.path().join("shape"));
    edit_config(&dir, |c| c["intermediate_size"] = 64.into());
    let err = load_error(&dir);
    let not_its_own = |e: &HfError| matches!(e, HfError::Config { field, problem: FieldProblem::ContradictsCheckpoint { value: 64, .. } } if field == "intermediate_size");
    assert!(not_its_own(&err) && err.to_string().contains("[48, 32]"), "{err:?}");

    // An unsupported architecture and an unsupported rope type.
    let dir = copy_fixture("mistral", &tmp.path().join("arch"));
    edit_config(&dir, |c| c["model_type"] = "gpt2".into());
    let err = load_error(&dir);
    assert!(
        matches!(&err, HfError::Unsupported(Unsupported::ModelType { model_type, .. }) if model_type == "gpt2"),
        "{err}"
    );
    let dir = copy_fixture("llama3_rope_scaling", &tmp.path().join("rope"));
    edit_config(&dir, |c| c["rope_scaling"]["rope_type"] = "yarn".into());
    let err = load_error(&dir);
    assert!(
        matches!(&err, HfError::Unsupported(Unsupported::RopeType { field, kind }) if field == "rope_scaling" && kind == "yarn"),
        "{err}"
    );
    let dir = copy_fixture("llama_gqa_tied", &tmp.path().join("field"));
    edit_config(&dir, |c| c.as_object_mut().unwrap().remove("num_hidden_layers").map(drop).unwrap_or(()));
    assert!(field_error(&load_error(&dir), "num_hidden_layers", FieldProblem::Missing));
    // A value the model cannot take is named by config.json's key, not by the model's field.
    let dir = copy_fixture("llama_gqa_tied", &tmp.path().join("eps"));
    edit_config(&dir, |c| c["rms_norm_eps"] = serde_json::json!(1e40));
    let err = load_error(&dir);
    assert!(
        matches!(&err, HfError::ConfigValue(ConfigError::OutOfRange { field: "norm_eps", value, .. }) if *value == 1e40),
        "{err:?}"
    );
    let message = err.to_string();
    assert!(
        message.contains("`rms_norm_eps`") && !message.contains("`norm_eps`"),
        "named by config.json's key: {message}"
    );
    let dir = copy_fixture("llama_gqa_tied", &tmp.path().join("vocab"));
    edit_config(&dir, |c| c["vocab_size"] = 0.into());
    let err = load_error(&dir);
    assert!(matches!(&err, HfError::ConfigValue(ConfigError::Zero { field: "vocab_size" })), "{err:?}");

    // A truncated safetensors file, single and sharded.
    let dir = copy_fixture("llama_mha_untied", &tmp.path().join("truncated"));
    let bytes = std::fs::read(dir.join("model.safetensors")).unwrap();
    std::fs::write(dir.join("model.safetensors"), &bytes[..bytes.len() / 2]).unwrap();
    let err = load_error(&dir);
    assert!(matches!(&err, HfError::NotSafetensors { path, .. } if path.ends_with("model.safetensors")), "{err}");
    let dir = copy_fixture("llama3_rope_scaling", &tmp.path().join("shard"));
    std::fs::remove_file(dir.join("model-00002-of-00003.safetensors")).unwrap();
    let err = load_error(&dir);
    assert!(matches!(&err, HfError::Io { path, .. } if path.ends_with("model-00002-of-00003.safetensors")), "{err}");

    // No weights at all, and a config that is not JSON.
    let dir = tmp.path().join("empty");
    std::fs::create_dir(&dir).unwrap();
    std::fs::copy(fixture("mistral").join("config.json"), dir.join("config.json")).unwrap();
    assert!(matches!(load_error(&dir), HfError::NoWeights { dir: at } if at == dir));
    std::fs::write(dir.join("config.json"), "{").unwrap();
    assert!(matches!(load_error(&dir), HfError::NotJson { path, .. } if path == dir.join("config.json")));
}

/// The shape of `key` as stored, read from the safetensors header.
fn tensor_shape(dir: &Path, key: &str) -> Vec<usize> {
    let bytes = std::fs::read(dir.join("model.safetensors")).unwrap();
    let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + header_len]).unwrap();
    header[key]["shape"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as usize).collect()
}

#[test]
fn the_hf_command_prints_logits_retrofits_and_exports() {
    use std::process::Command;
    let tmp = tempfile::tempdir().unwrap();
    let hf = example("hf");
    let run = |args: &[&std::ffi::OsStr]| Command::new(&hf).args(args).args(["--device", "flex"]).output().unwrap();
    let os = |s: &str| std::ffi::OsString::from(s);

    let (ids, expected) = reference("llama3_rope_scaling");
    let tokens = ids.iter().map(i64::to_string).collect::<Vec<_>>().join(",");
    let dir = fixture("llama3_rope_scaling");
    let output = run(&[&os("logits"), &os("--hf-dir"), dir.as_os_str(), &os("--tokens"), &os(&tokens), &os("--json")]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let rows = json["logits"].as_array().unwrap();
    assert_eq!((rows.len(), rows[0].as_array().unwrap().len()), (ids.len(), 96));
    let got: Vec<f32> =
        rows.iter().flat_map(|r| r.as_array().unwrap().iter().map(|v| v.as_f64().unwrap() as f32)).collect();
    assert!(max_diff(&got, &expected.concat()) <= 1e-4);

    let lns = tmp.path().join("lns");
    let source = fixture("llama_mha_untied");
    let output = run(&[&os("retrofit"), &os("--hf-dir"), source.as_os_str(), &os("--out"), lns.as_os_str()]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let back = load_hf_model(&lns, &cpu()).unwrap();
    assert_eq!(back.config.norm_scheme, NormScheme::default());
    assert!(lns.join("tokenizer.json").is_file());
    // The source's special tokens stay in config.json (transformers' generate stops at eos).
    let written: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(lns.join("config.json")).unwrap()).unwrap();
    assert_eq!((written["bos_token_id"].as_u64(), written["eos_token_id"].as_u64()), (Some(1), Some(2)), "{written}");
    assert_eq!(written["use_cache"], true);
    // Retrofitting again into its own output replaces it (docs/hf.md); a file added there since
    // makes it refuse, naming the file (next).
    let output = run(&[&os("retrofit"), &os("--hf-dir"), source.as_os_str(), &os("--out"), lns.as_os_str()]);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    std::fs::write(lns.join("notes.md"), "mine").unwrap();

    // Bad input: clear errors, exit 1, no panic.
    let run_dir = tmp.path().join("a-run");
    std::fs::create_dir(&run_dir).unwrap();
    std::fs::write(run_dir.join("model.json"), "{}").unwrap();
    let own = copy_fixture("llama_mha_untied", &tmp.path().join("own"));
    let retrofit_to = |norm: &str| -> Vec<std::ffi::OsString> {
        let out = tmp.path().join("x");
        vec![os("retrofit"), os("--hf-dir"), source.clone().into(), os("--out"), out.into(), os("--norm"), os(norm)]
    };
    for (args, expected) in [
        (vec![os("logits"), os("--hf-dir"), tmp.path().join("nope").into(), os("--tokens"), os("1")], "config.json"),
        (vec![os("logits"), os("--hf-dir"), dir.clone().into(), os("--tokens"), os("1,96")], "token id 96 is outside"),
        (vec![os("retrofit"), os("--hf-dir"), source.clone().into(), os("--out"), lns.clone().into()], "notes.md"),
        (retrofit_to("bogus"), "bogus"),
        // A scheme a Hugging Face directory cannot hold: the refusal gives the command that does
        // retrofit onto it, into a run directory, with the model's tokenizer (without it that
        // training is refused).
        (retrofit_to("post-ln"), "--tokenizer"),
        // A run directory given as --hf-dir: named as such, with the command that reads it.
        (
            vec![os("retrofit"), os("--hf-dir"), run_dir.clone().into(), os("--out"), tmp.path().join("x").into()],
            "train --init-from",
        ),
        (vec![os("logits"), os("--hf-dir"), run_dir.clone().into(), os("--tokens"), os("1")], "generate --run"),
        // Into its own input: named as such (it was called "an earlier output").
        (
            vec![os("retrofit"), os("--hf-dir"), own.clone().into(), os("--out"), own.clone().into()],
            "being read (--hf-dir)",
        ),
    ] {
        let refs: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_os_str()).collect();
        let output = run(&refs);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(expected) && !stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(!stderr.contains("save_file"), "a library call is no advice on the command line: {stderr}");
    }
    assert!(!tmp.path().join("x").exists(), "a refused retrofit writes nothing");
}

#[test]
fn a_retrofitted_checkpoint_trains_with_the_pipeline_and_exports() {
    use layernorm_scaling::run::load_run_model;
    use layernorm_scaling::train::{train, Start};
    let tmp = tempfile::tempdir().unwrap();
    let source = fixture("llama_mha_untied");
    let tokenizer = source.join("tokenizer.json");
    let out = tmp.path().join("run");
    let mut config = quick(&out, 4, 2);
    config.model.init_from = Some(source.clone());
    config.model.norm = Some("lns".parse().unwrap());
    config.data.tokenizer = tokenizer.display().to_string();
    config.data.seq_len = 32;
    config.optim.lr = 1e-7;
    config.optim.warmup = Some(1);
    // Without its tokenizer the byte tokenizer (256 tokens) does not fit the 128-token vocabulary:
    // the fix named is the model's tokenizer, not another model config.
    let byte = edited(&config, |c| c.data.tokenizer = "byte".into());
    let err = train(&byte, Start::New, |_| {}).unwrap_err().to_string();
    assert!(err.contains("--tokenizer") && err.contains("tokenizer.json") && !err.contains("model config"), "{err}");
    let report = train(&config, Start::New, |_| {}).unwrap();
    assert_eq!(report.model_config.norm_scheme, NormScheme::default());
    assert_eq!((report.model_config.d_model, report.model_config.vocab_size), (32, 128));
    // It started from the checkpoint's weights: a tiny learning rate leaves them almost unchanged.
    let original = load_hf_model(&source, &cpu()).unwrap();
    let (trained, _) = load_run_model(&out, None, &cpu()).unwrap();
    let drift = max_diff(&ParamValues::flat_of(&trained), &ParamValues::flat_of(&original.model));
    assert!(drift < 1e-4, "{drift}");
    assert!(report.valid_loss.is_finite());

    // The run exports as a Hugging Face directory with LNS recorded, and loads back.
    let output = std::process::Command::new(example("hf"))
        .args(["export", "--device", "flex", "--checkpoint"])
        .arg(&out)
        .arg("--out")
        .arg(tmp.path().join("exported"))
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    // Its tokenizer adds <s>, which the run never saw: the export says how to prompt it.
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("adds special tokens") && stdout.contains("add_special_tokens=False"), "{stdout}");
    let exported = load_hf_model(tmp.path().join("exported"), &cpu()).unwrap();
    assert_eq!(exported.config.norm_scheme, NormScheme::default());
    let (ids, _) = reference("llama_mha_untied");
    assert!(max_diff(&logits(&exported.model, &ids), &logits(&trained, &ids)) <= 1e-5);
    assert!(exported.tokenizer.is_some(), "the run's tokenizer.json travels with the export");
}

#[test]
fn analyze_and_generate_take_a_hugging_face_directory_with_its_tokenizer() {
    use std::process::Command;
    let tmp = tempfile::tempdir().unwrap();
    let source = fixture("llama_mha_untied");
    let text = tmp.path().join("eval.txt");
    let sentence = "the cat sat on the mat and the dog ran to the park.";
    std::fs::write(&text, (0..40).map(|i| format!("{sentence} {i}\n\n")).collect::<String>()).unwrap();
    let arc = tmp.path().join("arc.jsonl");
    std::fs::write(
        &arc,
        "{\"question\": \"where did the cat sit\", \"choices\": [\"on the mat\", \"in the park\"], \"answer\": 0}\n",
    )
    .unwrap();
    let out = tmp.path().join("analysis");
    let output = Command::new(example("analyze"))
        .arg("--hf-dir")
        .arg(&source)
        .arg("--data")
        .arg(&text)
        .arg("--choices")
        .arg(&arc)
        .arg("--out")
        .arg(&out)
        .args(["--seq-len", "16", "--batch-size", "2", "--batches", "1", "--device", "flex"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["n_layers"], 2);
    assert_eq!(report["multiple_choice"]["questions"], 1);
    assert!(report["perplexity"].as_f64().unwrap().is_finite());
    common::assert_png_not_blank(&out.join("multiple_choice_drop.png"));

    // Without --out the model directory would receive the report: refused, whether given as
    // --hf-dir or --run, and the fixture is left as it was.
    for flag in ["--hf-dir", "--run"] {
        let output =
            Command::new(example("analyze")).arg(flag).arg(&source).args(["--device", "flex"]).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(output.status.code() == Some(1) && stderr.contains("needs --out"), "{flag}: {stderr}");
        assert!(!source.join("analysis").exists());
    }

    let output = Command::new(example("generate"))
        .arg("--hf-dir")
        .arg(&source)
        .args(["--prompt", "the cat", "--max-tokens", "8", "--device", "flex"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(String::from_utf8_lossy(&output.stdout).contains("the cat"), "{}", String::from_utf8_lossy(&output.stdout));
}

/// A hub cache as `huggingface-cli download` leaves it: `models--lns--tiny/` with two snapshots,
/// `refs/main` at the first and `refs/v2` at the second (whose config differs in one field).
fn build_hub_cache(hub: &Path) -> (PathBuf, PathBuf) {
    let repo = hub.join("models--lns--tiny");
    let (main, v2) = ("a".repeat(40), "b".repeat(40));
    let snapshot = |commit: &str| {
        let dir = repo.join("snapshots").join(commit);
        std::fs::create_dir_all(&dir).unwrap();
        for entry in std::fs::read_dir(fixture("llama_mha_untied")).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), dir.join(entry.file_name())).unwrap();
        }
        dir
    };
    let (first, second) = (snapshot(&main), snapshot(&v2));
    edit_config(&second, |config| config["rms_norm_eps"] = serde_json::json!(1e-5));
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs/main"), &main).unwrap();
    std::fs::write(repo.join("refs/v2"), &v2).unwrap();
    (first, second)
}

#[test]
fn models_in_the_local_hugging_face_cache_resolve_by_name_offline() {
    use layernorm_scaling::hf::{repo_name, resolve_model_dir_in, HubCache};
    use std::process::Command;
    let dir = tempfile::tempdir().unwrap();
    let hub = dir.path().join("hub");
    let (main, v2) = build_hub_cache(&hub);
    let resolve = |spec: &str| resolve_model_dir_in(Path::new(spec), Some(HubCache::new(hub.clone())));
    assert_eq!(resolve("lns/tiny").unwrap(), main, "refs/main");
    assert_eq!(resolve("lns/tiny@v2").unwrap(), v2, "a branch or tag through refs/");
    assert_eq!(resolve(&format!("lns/tiny@{}", "b".repeat(40))).unwrap(), v2, "a pinned commit");
    assert_eq!(read_hf_config(resolve("lns/tiny@v2").unwrap()).unwrap().norm_eps, 1e-5);

    // No snapshot: the error says where it looked and how to download; nothing is fetched.
    let miss = |spec: &str| match resolve(spec) {
        Err(HfError::NotInCache { miss, .. }) => *miss,
        other => panic!("{spec}: {other:?}"),
    };
    let err = resolve("lns/other").unwrap_err();
    assert!(matches!(&err, HfError::NotInCache { name, revision: None, .. } if name == "lns/other"), "{err}");
    assert_eq!(miss("lns/other"), CacheMiss::NoModelFolder { folder: hub.join("models--lns--other") });
    let repo = hub.join("models--lns--tiny");
    assert!(matches!(resolve("lns/tiny@v3"), Err(HfError::NotInCache { revision: Some(r), .. }) if r == "v3"));
    assert_eq!(miss("lns/tiny@v3"), CacheMiss::NoRef { folder: repo.clone(), ref_file: repo.join("refs/v3") });
    // A ref written by hand with a newline still names its commit.
    let refs = hub.join("models--lns--tiny/refs");
    std::fs::write(refs.join("v2"), format!("{}\n", "b".repeat(40))).unwrap();
    assert_eq!(resolve("lns/tiny@v2").unwrap(), v2);
    std::fs::remove_dir_all(main.parent().unwrap().join("a".repeat(40))).unwrap();
    assert!(matches!(miss("lns/tiny"), CacheMiss::EmptySnapshot { commit, .. } if commit == "a".repeat(40)));
    let no_cache = resolve_model_dir_in(Path::new("lns/tiny"), None);
    assert!(matches!(no_cache, Err(HfError::NotInCache { miss, .. }) if *miss == CacheMiss::NoCache));
    assert!(matches!(resolve("lns/tiny@"), Err(HfError::NoRevision { name }) if name == "lns/tiny"));
    // A revision that would leave `refs/`, and a ref that holds a path rather than a commit,
    // name nothing: they loaded a model from outside the cache.
    assert!(
        matches!(resolve("lns/tiny@../../x"), Err(HfError::NotARevision { revision, .. }) if revision == "../../x")
    );
    std::fs::write(refs.join("elsewhere"), "../../../outside").unwrap();
    let holds = "../../../outside".to_string();
    assert_eq!(miss("lns/tiny@elsewhere"), CacheMiss::RefNotACommit { ref_file: refs.join("elsewhere"), holds });
    let file_cache = resolve_model_dir_in(Path::new("lns/tiny"), Some(HubCache::new(v2.join("config.json"))));
    assert!(
        matches!(file_cache, Err(HfError::NotInCache { miss, .. }) if matches!(*miss, CacheMiss::CacheNotAFolder { .. }))
    );
    // A snapshot whose weights link to a blob that is not there (a download cut short): named as
    // such, not "holds neither model.safetensors nor ...".
    let broken = dir.path().join("broken");
    std::fs::create_dir_all(&broken).unwrap();
    std::fs::copy(v2.join("config.json"), broken.join("config.json")).unwrap();
    std::os::unix::fs::symlink("../../blobs/0123abcd", broken.join("model.safetensors")).unwrap();
    let err = load_hf_model(&broken, &cpu()).unwrap_err();
    assert!(matches!(&err, HfError::BrokenLink { path, .. } if *path == broken.join("model.safetensors")), "{err}");

    // Paths are paths: absolute, `./`, several folders, or an existing folder of that name.
    for spec in ["/abs/path", "./lns/tiny", "a/b/c", "lns", "lns/"] {
        assert_eq!(repo_name(spec), None, "{spec}");
        assert_eq!(resolve(spec).unwrap(), PathBuf::from(spec));
    }
    assert_eq!(repo_name("org/name@rev"), Some(("org/name", Some("rev"))));

    // The programs take the name, with the cache of HF_HUB_CACHE: the same logits as the folder.
    let logits = |hf_dir: &std::ffi::OsStr| {
        let output = Command::new(example("hf"))
            .args(["logits", "--tokens", "1,2,3", "--json", "--device", "flex", "--hf-dir"])
            .arg(hf_dir)
            .env("HF_HUB_CACHE", &hub)
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        output.stdout
    };
    assert_eq!(logits("lns/tiny@v2".as_ref()), logits(v2.as_os_str()));
    let output = Command::new(example("generate"))
        .args(["--hf-dir", "lns/missing", "--prompt", "a", "--device", "flex"])
        .env("HF_HUB_CACHE", &hub)
        .output()
        .unwrap();
    // The program reports the library's own error for that name: not in the cache.
    let missing = resolve("lns/missing").unwrap_err();
    assert!(matches!(&missing, HfError::NotInCache { name, .. } if name == "lns/missing"), "{missing}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&missing.to_string()) && !stderr.contains("panicked"), "{stderr}");

    // A comparison of models given by name labels them by name, not by their snapshots' hashes
    // (main moved to the snapshot that is left).
    std::fs::write(refs.join("main"), "b".repeat(40)).unwrap();
    let text = dir.path().join("eval.txt");
    std::fs::write(&text, (0..40).map(|i| format!("the cat sat on the mat {i}\n\n")).collect::<String>()).unwrap();
    let out = dir.path().join("comparison");
    let output = Command::new(example("analyze"))
        .args(["--hf-dir", "lns/tiny", "--hf-dir", "lns/tiny@v2", "--data"])
        .arg(&text)
        .arg("--out")
        .arg(&out)
        .args(["--seq-len", "16", "--batch-size", "2", "--batches", "1", "--device", "flex"])
        .env("HF_HUB_CACHE", &hub)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let table = std::fs::read_to_string(out.join("comparison.md")).unwrap();
    assert!(table.contains("lns/tiny") && table.contains("lns/tiny-v2"), "{table}");
    // The rows and the links' names; each report still says which snapshot it read.
    let labels: Vec<&str> = table.lines().filter(|l| l.starts_with("| lns") || l.starts_with("- [")).collect();
    assert_eq!(labels.len(), 4, "{table}");
    // A link's label and target come before its report's title, which names the snapshot read.
    let label = |line: &str| line.split("/summary.md)").next().unwrap().to_string();
    assert!(labels.iter().all(|l| !label(l).contains(&"b".repeat(40))), "{table}");
    assert!(out.join("lns/tiny-v2/summary.md").is_file());

    // An empty local folder of the same name hides the cached model: the error says so.
    std::fs::create_dir_all(dir.path().join("lns/tiny")).unwrap();
    let output = Command::new(example("generate"))
        .args(["--hf-dir", "lns/tiny", "--prompt", "a", "--device", "flex"])
        .env("HF_HUB_CACHE", &hub)
        .current_dir(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.code() == Some(1) && stderr.contains("the local folder lns/tiny comes before"), "{stderr}");
}

#[test]
fn training_from_a_model_with_nan_weights_is_refused_before_anything_is_written() {
    let tmp = tempfile::tempdir().unwrap();
    let source = fixture("llama_mha_untied");
    let damaged = tmp.path().join("damaged");
    std::fs::create_dir_all(&damaged).unwrap();
    for file in ["config.json", "tokenizer.json"] {
        std::fs::copy(source.join(file), damaged.join(file)).unwrap();
    }
    let checkpoint = Checkpoint::open(&source).unwrap();
    let tensors: Vec<_> = checkpoint
        .keys()
        .into_iter()
        .map(|key| {
            let shape = checkpoint.shape(key).unwrap();
            let mut values = checkpoint.tensor(key, &shape).unwrap();
            if key.contains("layers.1.mlp.down_proj") {
                values[3] = f32::NAN;
            }
            (key.to_string(), shape, values)
        })
        .collect();
    write_safetensors(&damaged.join("model.safetensors"), &tensors).unwrap();
    let out = tmp.path().join("run");
    let mut config = quick(&out, 2, 2);
    config.model.init_from = Some(damaged.clone());
    config.data.tokenizer = damaged.join("tokenizer.json").display().to_string();
    config.optim.warmup = Some(1);
    let error =
        layernorm_scaling::train::train(&config, layernorm_scaling::train::Start::New, |_| {}).map(drop).unwrap_err();
    // The loader's refusal of the weight, naming the model folder.
    let layernorm_scaling::Error::HfDir { dir, error: HfError::NonFinite { parameter } } = &error else {
        panic!("{error:?}")
    };
    assert!(*dir == damaged && parameter == "model.layers.1.mlp.down_proj.weight", "{error:?}");
    assert!(!out.exists(), "a refused run wrote its directory");
    // Generating from it printed text with exit 0, and a retrofit copied the NaN.
    use std::process::Command;
    let output = Command::new(example("generate"))
        .arg("--hf-dir")
        .arg(&damaged)
        .args(["--prompt", "the", "--device", "flex"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.code() == Some(1) && stderr.contains("down_proj") && stderr.contains("damaged"), "{stderr}");
    let retrofitted = tmp.path().join("retrofitted");
    let output = Command::new(example("hf"))
        .args(["retrofit", "--device", "flex", "--hf-dir"])
        .arg(&damaged)
        .arg("--out")
        .arg(&retrofitted)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.code() == Some(1) && stderr.contains("damaged") && !retrofitted.exists(), "{stderr}");
    // `hf logits` printed NaN logits with exit 0: the loader itself refuses them now.
    let output = Command::new(example("hf"))
        .args(["logits", "--tokens", "1,2,3", "--device", "flex", "--hf-dir"])
        .arg(&damaged)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.code() == Some(1) && stderr.contains("down_proj") && stderr.contains("damaged"), "{stderr}");
    assert!(output.stdout.is_empty(), "{}", String::from_utf8_lossy(&output.stdout));
    let error = layernorm_scaling::hf::load_hf_model(&damaged, &common::cpu()).map(drop).unwrap_err();
    assert!(
        matches!(&error, layernorm_scaling::hf::HfError::NonFinite { parameter } if parameter == "model.layers.1.mlp.down_proj.weight"),
        "{error}"
    );
}

/// One message of each family, whole: the place, the facts and the advice, written once per
/// variant (the tests above match the variants).
#[test]
fn hf_errors_name_the_place_and_the_facts_in_their_messages() {
    let messages = [
        (
            HfError::NoSuchFolder { dir: "models/x".into() },
            "models/x: no such folder: give a Hugging Face model folder (config.json and safetensors), or a model of \
             the local Hugging Face cache by name (org/name, org/name@revision)",
        ),
        (
            HfError::NotInCache {
                spec: "lns/tiny@v3".into(),
                name: "lns/tiny".into(),
                revision: Some("v3".into()),
                miss: Box::new(CacheMiss::NoModelFolder { folder: "hub/models--lns--tiny".into() }),
            },
            "lns/tiny@v3: no such folder, and no snapshot of the model lns/tiny at revision v3 in the local Hugging \
             Face cache (hub/models--lns--tiny does not exist); download it first (`huggingface-cli download lns/tiny \
             --revision v3`), or give the model's folder: nothing is downloaded here",
        ),
        (
            HfError::Config {
                field: "num_attention_heads".into(),
                problem: FieldProblem::HeadsDoNotDivide { heads: 3, hidden: 32 },
            },
            "config.json: field `num_attention_heads` 3 does not divide hidden_size 32",
        ),
        (
            HfError::ConfigValue(ConfigError::Zero { field: "n_layers" }),
            "config.json: `num_hidden_layers` must be at least 1, got 0",
        ),
        (
            HfError::NotExportable {
                scheme: Some(NormScheme::PostLn),
                problem: ExportProblem::Block(BlockPart::PostLn),
            },
            "unsupported: exporting a `post-ln` model: a Post-LN block (post-ln, deepnorm, mix-ln) has no counterpart \
             in the Hugging Face LLaMA architecture, so it cannot be expressed in a LLaMA checkpoint; Pre-LN, LNS in \
             every position but before-norm, CompleteP and the init-only schemes export; the model itself is sound: \
             it stays usable in this crate's own format (a run directory's model.bpk, which train --init-from, \
             generate and analyze read)",
        ),
        (
            HfError::UnusedTensors { count: 2, example: "cls.extra".into(), bert: true },
            "unsupported: the checkpoint has 2 tensor(s) a BERT masked LM does not use, e.g. `cls.extra`; is \
             config.json the checkpoint's own?",
        ),
    ];
    for (error, expected) in messages {
        assert_eq!(error.to_string(), expected);
    }
}
