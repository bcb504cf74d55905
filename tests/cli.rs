//! The command lines of the examples: a closed standard output, sizes out of range, negative
//! numbers, a bad `BURN_DEVICE` or `LAYERNORM_SCALING_OPS`, output folders, Hugging Face configs that cannot be written, a
//! tokenizer path that is not found, and a Mistral sliding window. Every bad input is an error
//! that says what to do, with exit code 1 and no panic.

mod common;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::{assert_refused, cpu, example, hf_fixture as fixture};
use layernorm_scaling::analysis::{report_labels, ReportModel};
use layernorm_scaling::data::Tokenizer;
use layernorm_scaling::hf::{export_hf, hf_config_json, read_hf_config, HfError};
use layernorm_scaling::run::{check_tokenizer_identity, load_model_dir, require_hf_dir, save_run_model, RunModelInfo};
use layernorm_scaling::run::{
    tokenizer_spec, CheckpointList, LoadProblem, ModelDirProblem, RunDirError, TokenizerChoice,
};
use layernorm_scaling::{ConfigError, Error, LlamaConfig, NormKind, NormScheme};

/// The fixture's tokenizer.json (a BPE of 100 tokens).
fn tokenizer() -> PathBuf {
    fixture("llama_mha_untied").join("tokenizer.json")
}

/// Runs `command` with its standard output a pipe whose reading end is closed at once.
fn with_closed_stdout(command: &mut Command) -> Output {
    let mut child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    drop(child.stdout.take());
    child.wait_with_output().unwrap()
}

/// Asserts that `output` is a success without a panic.
fn assert_succeeded(output: &Output, what: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success() && !stderr.contains("panicked"), "{what}: {:?} {stderr}", output.status);
}

/// A copy of the fixture `llama_mha_untied` (with its tokenizer) in `dir`, made a Mistral model
/// whose attention reaches `window` tokens back.
fn mistral_with_window(dir: &Path, window: usize) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    for entry in std::fs::read_dir(fixture("llama_mha_untied")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), dir.join(entry.file_name())).unwrap();
    }
    let path = dir.join("config.json");
    let mut json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    json["model_type"] = "mistral".into();
    json["architectures"] = serde_json::json!(["MistralForCausalLM"]);
    json["sliding_window"] = window.into();
    std::fs::write(&path, json.to_string()).unwrap();
    dir.to_path_buf()
}

#[test]
fn a_result_that_cannot_be_written_is_an_error_not_a_success() {
    // A full disk under `> file`: the logits or samples would be cut short. The program says why,
    // with the system's own words for it.
    let full = || std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
    let disk_full = std::io::Error::from_raw_os_error(28).to_string();
    let cut_short = Error::Output { error: disk_full.clone() }.to_string();
    let model = fixture("llama_mha_untied");
    let output = Command::new(example("generate"))
        .arg("--hf-dir")
        .arg(&model)
        .args(["--prompt", "the cat", "--max-tokens", "4", "--samples", "1", "--device", "flex"])
        .stdout(full())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&cut_short) && !stderr.contains("panicked"), "{stderr}");
    let output = Command::new(example("hf"))
        .args(["logits", "--json", "--tokens", "1,2,3", "--device", "flex", "--hf-dir"])
        .arg(&model)
        .stdout(full())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains(&cut_short), "{stderr}");
    // The tables of `curse` and `presets` are their results too.
    for (program, args) in [("curse", &["--layers", "2", "--device", "flex"][..]), ("presets", &[][..])] {
        let output = Command::new(example(program)).args(args).stdout(full()).output().unwrap();
        assert_refused(&output, &[&cut_short], program);
    }
    // So is the help that was asked for.
    for program in ["train", "generate", "analyze", "sweep", "curse", "presets", "bench", "hf"] {
        let output = Command::new(example(program)).arg("--help").stdout(full()).output().unwrap();
        assert_refused(&output, &[&disk_full, "help"], &format!("{program} --help > /dev/full"));
    }
}

#[test]
fn presets_has_help_and_refuses_an_unknown_option_with_usage() {
    let output = Command::new(example("presets")).arg("--help").output().unwrap();
    assert_succeeded(&output, "presets --help");
    assert!(String::from_utf8_lossy(&output.stdout).contains("--write"));
    let output = Command::new(example("presets")).arg("--wirte").output().unwrap();
    assert_refused(&output, &["--wirte", "Usage"], "presets --wirte");
}

/// `presets --write` into a folder where a preset's file was edited by hand refuses, naming the
/// file, and leaves it as it was; writing the same presets again, or with `--overwrite`, succeeds.
#[test]
fn presets_write_keeps_a_file_edited_by_hand() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("models");
    let write =
        |extra: &[&str]| Command::new(example("presets")).arg("--write").arg(&dir).args(extra).output().unwrap();
    assert_succeeded(&write(&[]), "presets --write");
    assert_succeeded(&write(&[]), "presets --write again, nothing edited");
    let tiny = dir.join("tiny.json");
    let edited = std::fs::read_to_string(&tiny).unwrap().replace("\"n_layers\": 4", "\"n_layers\": 6");
    assert!(edited.contains("\"n_layers\": 6"), "the edit applies: {edited}");
    std::fs::write(&tiny, &edited).unwrap();
    assert_refused(&write(&[]), &["tiny.json", "--overwrite"], "presets --write over an edit");
    assert_eq!(std::fs::read_to_string(&tiny).unwrap(), edited, "the edit is kept");
    assert_succeeded(&write(&["--overwrite"]), "presets --write --overwrite");
    assert_eq!(LlamaConfig::from_file(&tiny).unwrap(), LlamaConfig::preset("tiny").unwrap());
    // A link to a file elsewhere is never written through, even with --overwrite.
    let victim = tmp.path().join("victim.txt");
    std::fs::write(&victim, "keep me").unwrap();
    std::fs::remove_file(dir.join("7b.json")).unwrap();
    std::os::unix::fs::symlink(&victim, dir.join("7b.json")).unwrap();
    assert_refused(&write(&["--overwrite"]), &["7b.json are symbolic links"], "presets --write over a link");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me");
    std::fs::remove_file(dir.join("7b.json")).unwrap();
    std::fs::remove_file(dir.join("3b.json")).unwrap();
    std::fs::create_dir(dir.join("3b.json")).unwrap();
    assert_refused(&write(&["--overwrite"]), &["3b.json"], "presets --write over a folder");
    assert!(dir.join("3b.json").is_dir(), "the folder is kept");
}

/// `curse --plot` writes a PNG only: a path not named `.png`, or an existing file that is not a PNG
/// (a model, a corpus named by mistake), is refused and kept; its own earlier chart is replaced.
#[test]
fn curse_plot_never_replaces_a_file_that_is_not_its_chart() {
    let tmp = tempfile::tempdir().unwrap();
    let curse = |plot: &Path| {
        Command::new(example("curse")).args(["--layers", "2", "--device", "flex", "--plot"]).arg(plot).output().unwrap()
    };
    let corpus = tmp.path().join("corpus.txt");
    std::fs::write(&corpus, "my corpus").unwrap();
    assert_refused(&curse(&corpus), &["corpus.txt", ".png"], "curse --plot corpus.txt");
    let fake = tmp.path().join("model.png");
    std::fs::write(&fake, "not a picture").unwrap();
    assert_refused(&curse(&fake), &["model.png exists and is not a chart this crate drew"], "curse --plot");
    // Nor over a picture of the user's, PNG though it is.
    let picture = tmp.path().join("picture.png");
    let fixture_png = || Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/curse-of-depth.png");
    std::fs::copy(fixture_png(), &picture).unwrap();
    assert_refused(&curse(&picture), &["picture.png"], "curse --plot over a PNG");
    assert_eq!(std::fs::read(&picture).unwrap(), std::fs::read(fixture_png()).unwrap());
    assert_eq!(std::fs::read_to_string(&corpus).unwrap(), "my corpus");
    assert_eq!(std::fs::read_to_string(&fake).unwrap(), "not a picture");
    let chart = tmp.path().join("chart.png");
    assert_succeeded(&curse(&chart), "curse --plot chart.png");
    assert_succeeded(&curse(&chart), "curse --plot over its own chart");
    common::assert_png_not_blank(&chart);
    // Into a folder that does not exist yet: made, as bench --json does (plotters' error was a dump).
    let nested = tmp.path().join("figures/new/chart.png");
    assert_succeeded(&curse(&nested), "curse --plot figures/new/chart.png");
    common::assert_png_not_blank(&nested);
}

/// `analyze --label` values are used as given or refused, never renamed (`x x` became `x`, `x-2`).
#[test]
fn analyze_refuses_labels_it_would_have_to_rename() {
    let tmp = tempfile::tempdir().unwrap();
    for labels in [["x", "x"], ["", "y"], ["a/b", "../c"], ["a", "a/b"], ["comparison.md", "y"], ["x", ".contents"]] {
        let output = Command::new(example("analyze"))
            .args(["--run", "r1", "--run", "r2", "--device", "flex", "--out"])
            .arg(tmp.path().join("cmp"))
            .arg("--label")
            .args(labels)
            .output()
            .unwrap();
        // The library's refusal of these labels for two runs, whole.
        let runs = [Path::new("r1"), Path::new("r2")].map(|dir| ReportModel { dir, given: dir, is_run: true });
        let given = labels.map(String::from);
        let refusal = report_labels(&given, &runs).expect_err("labels it would rename").to_string();
        assert_refused(&output, &[&refusal], &format!("--label {labels:?}"));
    }
}

/// A model that fits in memory but whose trace does not, and a model that fits only once (its
/// init draws each weight beside the kept ones), are refused before anything is allocated,
/// whatever limits the memory: here the address-space limit (`ulimit -v`) of 3 GiB.
#[test]
fn curse_checks_memory_before_it_builds_a_model() {
    let limited = |args: &str| {
        let script = format!("ulimit -v {}; exec \"$0\" {args} --device flex", 3 << 20);
        Command::new("bash").arg("-c").arg(script).arg(example("curse")).output().unwrap()
    };
    // The tiny preset (d_model 64, d_ff 176) has about 50k parameters a layer: 12,000 layers
    // take 2.4 GB at 4 bytes each, and 4.8 GB with their draws.
    let output = limited("--layers 12000");
    assert_refused(&output, &["does not fit in memory", "n_layers 12000"], "curse --layers 12000 under 3 GiB");
    // 1,024 sequences of 256 tokens after each of 64 layers: 65 x 262,144 x 64 floats, 4.4 GB.
    let output = limited("--layers 64 --batch 1024 --seq-len 256");
    assert_refused(&output, &["hidden state after each of its 64 layers", "fewer sequences"], "a trace too big");
    // A 32,000-token vocabulary: the logits of 96 x 256 tokens alone are 3.1 GB (it passed the
    // check that counted them once, then aborted on their allocation).
    let output = limited("--preset 20m --layers 8 --batch 96 --seq-len 256");
    assert_refused(&output, &["and the logits", "fewer sequences"], "logits too big");
    let output = limited("--layers 2");
    assert_succeeded(&output, "curse within the limit");
}

#[test]
fn a_closed_standard_output_changes_nothing_a_program_does() {
    let tmp = tempfile::tempdir().unwrap();
    let output =
        with_closed_stdout(Command::new(example("generate")).arg("--hf-dir").arg(fixture("llama_mha_untied")).args([
            "--prompt",
            "the cat",
            "--max-tokens",
            "8",
            "--samples",
            "3",
            "--device",
            "flex",
        ]));
    assert_succeeded(&output, "generate");

    // Every preset is still written, though the table before each could not be.
    let presets = tmp.path().join("presets");
    let output = with_closed_stdout(Command::new(example("presets")).arg("--write").arg(&presets));
    assert_succeeded(&output, "presets");
    for name in LlamaConfig::preset_names() {
        assert!(presets.join(format!("{name}.json")).is_file(), "{name}");
    }

    // A training keeps training to its end, and writes its final model.
    let text: String = (0..400).map(|i| format!("Paragraph {i}: the quick brown fox {i} jumps.\n\n")).collect();
    std::fs::write(tmp.path().join("corpus.txt"), text).unwrap();
    let run = tmp.path().join("run");
    let output = with_closed_stdout(
        Command::new(example("train"))
            .args(["--device", "flex", "--model", "tiny", "--steps", "4", "--eval-every", "2", "--batch-size", "2"])
            .args(["--seq-len", "16", "--samples", "1", "--data"])
            .arg(tmp.path().join("corpus.txt"))
            .arg("--out")
            .arg(&run),
    );
    assert_succeeded(&output, "train");
    assert!(run.join("model.bpk").is_file() && run.join("model.json").is_file());

    // analyze writes its report.
    let out = tmp.path().join("analysis");
    let output = with_closed_stdout(
        Command::new(example("analyze"))
            .arg("--run")
            .arg(&run)
            .arg("--data")
            .arg(tmp.path().join("corpus.txt"))
            .arg("--out")
            .arg(&out)
            .args(["--seq-len", "16", "--batch-size", "2", "--batches", "1", "--layers", "1", "--device", "flex"]),
    );
    assert_succeeded(&output, "analyze");
    assert!(out.join("report.json").is_file());
}

#[test]
fn a_size_out_of_range_is_refused_with_the_range_before_anything_is_allocated() {
    let huge = u64::MAX.to_string();
    let hf_dir = fixture("llama_mha_untied");
    let cases: [(&str, Vec<&OsStr>, &[&str]); 6] = [
        (
            "generate",
            vec![OsStr::new("--hf-dir"), hf_dir.as_os_str(), OsStr::new("--max-tokens"), OsStr::new(&huge)],
            &["--max-tokens", "at most 64", "give --max-tokens in 0..="],
        ),
        ("generate", vec![OsStr::new("--samples"), OsStr::new(&huge)], &["--samples", "1..=100000"]),
        ("bench", vec![OsStr::new("--iters"), OsStr::new(&huge)], &["--iters", "1..=100000"]),
        ("bench", vec![OsStr::new("--warmup-iters"), OsStr::new(&huge)], &["--warmup-iters", "0..=100000"]),
        ("curse", vec![OsStr::new("--batch"), OsStr::new(&huge)], &["--batch", "1..=1024"]),
        ("curse", vec![OsStr::new("--seq-len"), OsStr::new(&huge)], &["give --seq-len in 1..=256"]),
    ];
    for (program, args, parts) in cases {
        let output = Command::new(example(program)).args(args).args(["--device", "flex"]).output().unwrap();
        assert_refused(&output, parts, program);
    }

    // A batch size of any size takes what the data holds (the batch size times the batches
    // once overflowed).
    let tmp = tempfile::tempdir().unwrap();
    let text = tmp.path().join("eval.txt");
    std::fs::write(&text, (0..20).map(|i| format!("the cat sat on the mat {i}\n\n")).collect::<String>()).unwrap();
    let output = Command::new(example("analyze"))
        .arg("--hf-dir")
        .arg(&hf_dir)
        .arg("--data")
        .arg(&text)
        .arg("--out")
        .arg(tmp.path().join("report"))
        .args(["--seq-len", "16", "--batch-size", &huge, "--batches", "2", "--layers", "1", "--device", "flex"])
        .output()
        .unwrap();
    assert_succeeded(&output, "analyze --batch-size huge");
}

#[test]
fn negative_numbers_reach_the_checks_and_bad_command_lines_exit_1() {
    let hf_dir = fixture("llama_mha_untied");
    let generate = |extra: &[&str]| {
        Command::new(example("generate")).arg("--hf-dir").arg(&hf_dir).args(extra).args(["--device", "flex"]).output()
    };
    assert_refused(&generate(&["--top-p", "-0.5"]).unwrap(), &["top_p", "-0.5", "[0, 1]"], "generate --top-p");
    assert_refused(&generate(&["--temperature", "-1"]).unwrap(), &["temperature", ">= 0"], "generate --temperature");
    let analyze = Command::new(example("analyze")).arg("--hf-dir").arg(&hf_dir).args(["--batches", "-1"]).output();
    assert_refused(&analyze.unwrap(), &["'-1'", "--batches"], "analyze --batches");
    for args in [&["--layers", "-3"][..], &["--bogus"]] {
        let output = Command::new(example("curse")).args(args).output().unwrap();
        assert_refused(&output, &[args[0]], "curse");
    }
}

#[test]
fn a_bad_burn_device_is_named_as_the_variable() {
    let output = Command::new(example("curse")).args(["--device", "auto"]).env("BURN_DEVICE", "flx").output().unwrap();
    assert_refused(&output, &["BURN_DEVICE=flx", "unset BURN_DEVICE"], "curse");
    // Burn reads it too, whatever --device says, and panicked on a value it does not know
    // (an index, an empty string, a backend not compiled in): refused up front.
    for value in ["wgpu:1", "", "tch-cuda"] {
        for (program, args) in [("train", &["--device", "flex", "--steps", "1"][..]), ("curse", &["--device", "flex"])]
        {
            let output = Command::new(example(program)).args(args).env("BURN_DEVICE", value).output().unwrap();
            assert_refused(&output, &["BURN_DEVICE=", "Burn stops on it"], program);
        }
    }
    // The same string as --device says nothing of the variable.
    let output = Command::new(example("curse")).args(["--device", "flx"]).env_remove("BURN_DEVICE").output().unwrap();
    assert_refused(&output, &["unknown device `flx`"], "curse --device flx");
    assert!(!String::from_utf8_lossy(&output.stderr).contains("BURN_DEVICE"));
}

#[test]
fn a_bad_ops_path_is_named_as_the_variable_and_the_reference_path_runs() {
    let output = Command::new(example("curse"))
        .args(["--layers", "2"])
        .env("LAYERNORM_SCALING_OPS", "refrence")
        .output()
        .unwrap();
    assert_refused(&output, &["LAYERNORM_SCALING_OPS=\"refrence\"", "`reference`"], "curse");
    // A value that is not UTF-8 is refused too, not taken as unset.
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        let not_utf8 = std::ffi::OsStr::from_bytes(b"\xff");
        let output = Command::new(example("curse"))
            .args(["--layers", "2"])
            .env("LAYERNORM_SCALING_OPS", not_utf8)
            .output()
            .unwrap();
        assert_refused(&output, &["LAYERNORM_SCALING_OPS", "`reference`"], "curse with a non-UTF-8 ops path");
    }
    let run = |path: &str| {
        let output =
            Command::new(example("curse")).args(["--layers", "2"]).env("LAYERNORM_SCALING_OPS", path).output().unwrap();
        assert_succeeded(&output, &format!("curse with LAYERNORM_SCALING_OPS={path}"));
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter(|l| l.contains(": x"))
            .map(String::from)
            .collect::<Vec<_>>()
    };
    // Each scheme's progress goes to standard error (a deep model's trace takes minutes), after
    // the device `auto` picked, and why.
    let output = Command::new(example("curse")).args(["--layers", "2", "--device", "auto"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    // (A Vulkan driver probed for a GPU may print its own lines first.)
    assert!(stderr.lines().any(|line| line.starts_with("device auto: flex (the flex CPU backend")), "{stderr}");
    assert!(stderr.contains("[1/2] pre-ln: building") && stderr.contains("[2/2] lns: done in"), "{stderr}");
    let (fused, reference) = (run("fused"), run("reference"));
    assert_eq!(fused.len(), 2, "two growth figures: {fused:?}");
    assert_eq!(fused, reference, "both paths print the same growth figures");
}

/// A text option given bytes that are not UTF-8 is named with its value, and a mistyped negative
/// number reaches its option's own check (not clap's "unexpected argument '-1'").
#[cfg(unix)]
#[test]
fn a_value_that_is_not_utf8_or_not_a_number_is_named_with_its_option() {
    use std::os::unix::ffi::OsStrExt;
    let output =
        Command::new(example("train")).arg("--model").arg(std::ffi::OsStr::from_bytes(b"a\xff")).output().unwrap();
    assert_refused(&output, &["\"a\\xFF\" (given to --model) is not valid UTF-8"], "train --model a\\xff");
    let output = Command::new(example("train")).args(["--lr", "-1e-3x"]).output().unwrap();
    assert_refused(&output, &["'-1e-3x'", "--lr"], "train --lr -1e-3x");
    // A value that would be ignored, or cut down, is refused.
    let output = Command::new(example("train")).args(["--init-from", "src", "--model", "9m"]).output().unwrap();
    assert_refused(&output, &["--model cannot apply beside --init-from"], "train --init-from --model");
    let output = Command::new(example("train")).args(["--samples", "9"]).output().unwrap();
    assert_refused(&output, &["--samples", "0..=3"], "train --samples 9");
    // A learning rate that f32 rounds to 0: a run whose weights never move.
    let tmp = tempfile::tempdir().unwrap();
    let output =
        Command::new(example("train")).args(["--lr", "1e-50", "--out"]).arg(tmp.path().join("run")).output().unwrap();
    assert_refused(&output, &["`lr` = 1e-50", "within f32's range"], "train --lr 1e-50");
}

#[test]
fn presets_makes_a_missing_folder_and_names_one_it_cannot_make() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("new/models");
    let output = Command::new(example("presets")).arg("--write").arg(&dir).output().unwrap();
    assert_succeeded(&output, "presets");
    assert_eq!(LlamaConfig::from_file(dir.join("tiny.json")).unwrap(), LlamaConfig::tiny());

    // A file where the folder should be: the error names the folder, not a temporary file.
    std::fs::write(tmp.path().join("file"), "").unwrap();
    let output = Command::new(example("presets")).arg("--write").arg(tmp.path().join("file/models")).output().unwrap();
    assert_refused(&output, &["file/models", "cannot make the folder", "file is a file, not a folder"], "presets");
    assert!(!String::from_utf8_lossy(&output.stderr).contains(".json.tmp"));

    // The mechanism: a file written into a missing folder is refused naming the folder.
    let missing = tmp.path().join("missing");
    let err = LlamaConfig::tiny().to_file(missing.join("tiny.json")).unwrap_err().to_string();
    assert!(err.contains(&format!("{}: no such folder", missing.display())) && !err.contains(".json.tmp"), "{err}");
}

#[test]
fn a_llama_config_json_is_written_only_for_what_export_can_write() {
    // hf_config_json and export agree on every scheme and norm kind.
    let device = cpu();
    let tmp = tempfile::tempdir().unwrap();
    for (index, scheme) in NormScheme::with_every_position().into_iter().enumerate() {
        for kind in [NormKind::RmsNorm, NormKind::LayerNorm, NormKind::Dyt] {
            let config = LlamaConfig::tiny().with_norm_scheme(scheme.clone()).with_norm_kind(kind);
            let model = config.init(&device).unwrap();
            let exported = export_hf(&model, &config, tmp.path().join(format!("{index}-{kind:?}")), None);
            let json = hf_config_json(&config);
            assert_eq!(json.is_ok(), exported.is_ok(), "{scheme} {kind:?}: {json:?} / {exported:?}");
            if let Err(err) = json {
                let HfError::NotExportable { scheme: Some(named), .. } = &err else { panic!("{scheme}: {err:?}") };
                assert_eq!(named, &scheme, "the refusal names the model's scheme");
            }
        }
    }

    // bench --hf-config refuses them with the library's refusal, and writes nothing.
    for scheme in ["post-ln", "deepnorm", "mix-ln", "sandwich-ln"] {
        let config = LlamaConfig::tiny().with_norm_scheme(scheme.parse().unwrap());
        let refusal = hf_config_json(&config).expect_err(scheme).to_string();
        let path = tmp.path().join(format!("{scheme}.json"));
        let output = Command::new(example("bench"))
            .args(["--model", "tiny", "--norm", scheme, "--device", "flex", "--hf-config"])
            .arg(&path)
            .output()
            .unwrap();
        assert_refused(&output, &[&refusal], scheme);
        assert!(!path.exists(), "{scheme}");
    }
}

#[test]
fn a_tokenizer_path_not_found_from_here_names_the_tokenizer_option() {
    let tmp = tempfile::tempdir().unwrap();
    // A run whose training recorded its tokenizer relative to the folder it ran in, `trained/`.
    let run = tmp.path().join("run");
    std::fs::create_dir_all(&run).unwrap();
    std::fs::create_dir_all(tmp.path().join("trained/tok")).unwrap();
    std::fs::copy(tokenizer(), tmp.path().join("trained/tok/tokenizer.json")).unwrap();
    let config = LlamaConfig::tiny();
    let identity = Tokenizer::from_spec(&tokenizer().display().to_string()).unwrap().identity();
    let info = RunModelInfo {
        model: config.clone(),
        tokenizer: "tok/tokenizer.json".into(),
        steps: 0,
        data: None,
        tokenizer_identity: Some(identity.clone()),
    };
    save_run_model(&run, &config.init(&cpu()).unwrap(), &info).unwrap();
    let text = tmp.path().join("eval.txt");
    std::fs::write(&text, (0..20).map(|i| format!("the cat sat on the mat {i}\n\n")).collect::<String>()).unwrap();

    let generate = |folder: &Path, extra: &[&OsStr]| {
        Command::new(example("generate"))
            .current_dir(folder)
            .arg("--run")
            .arg(&run)
            .args(["--prompt", "the cat", "--max-tokens", "4", "--device", "flex"])
            .args(extra)
            .output()
            .unwrap()
    };
    let analyze = |folder: &Path, extra: &[&OsStr]| {
        Command::new(example("analyze"))
            .current_dir(folder)
            .arg("--run")
            .arg(&run)
            .arg("--data")
            .arg(&text)
            .arg("--out")
            .arg(tmp.path().join("report"))
            .args(["--seq-len", "16", "--batch-size", "2", "--batches", "1", "--layers", "1", "--device", "flex"])
            .args(extra)
            .output()
            .unwrap()
    };
    // Not found from here: the recorded path, relative to the folder the training ran in.
    let not_found = tokenizer_spec(Some("tok/tokenizer.json"), None).expect_err("not found from here");
    let Error::TokenizerChoice(TokenizerChoice::NotFound { spec, relative: true, .. }) = &not_found else {
        panic!("{not_found:?}")
    };
    assert_eq!(spec, "tok/tokenizer.json");
    // The programs name the recorded path, the folder it was looked for from, and the option that
    // gives another.
    let here = tmp.path().canonicalize().unwrap().display().to_string();
    let parts = ["tok/tokenizer.json", &here, "--tokenizer"];
    assert_refused(&generate(tmp.path(), &[]), &parts, "generate");
    assert_refused(&analyze(tmp.path(), &[]), &parts, "analyze");
    assert!(!tmp.path().join("report").exists());
    // From the training's folder the recorded path works; from anywhere, --tokenizer does.
    assert_succeeded(&generate(&tmp.path().join("trained"), &[]), "generate from the training's folder");
    let tokenizer = tokenizer();
    let given = [OsStr::new("--tokenizer"), tokenizer.as_os_str()];
    let output = generate(tmp.path(), &given);
    assert_succeeded(&output, "generate --tokenizer");
    assert!(String::from_utf8_lossy(&output.stdout).contains("the cat"));
    assert_succeeded(&analyze(tmp.path(), &given), "analyze --tokenizer");
    assert!(tmp.path().join("report/report.json").is_file());

    // export refuses too, instead of writing a model without its tokenizer.
    let output = Command::new(example("hf"))
        .current_dir(tmp.path())
        .args(["export", "--device", "flex", "--checkpoint"])
        .arg(&run)
        .arg("--out")
        .arg(tmp.path().join("exported"))
        .output()
        .unwrap();
    assert_refused(&output, &parts, "hf export");
    assert!(!tmp.path().join("exported").exists());

    // Another tokenizer (the same file with one byte more) is refused by every program that loads the run.
    let other = tmp.path().join("other.json");
    let mut bytes = std::fs::read(&tokenizer).unwrap();
    bytes.push(b'\n');
    std::fs::write(&other, bytes).unwrap();
    let wrong = [OsStr::new("--tokenizer"), other.as_os_str()];
    let loaded = Tokenizer::from_spec(&other.display().to_string()).unwrap();
    let refusal = check_tokenizer_identity(&loaded, &other.display().to_string(), Some(&identity))
        .expect_err("another tokenizer")
        .to_string();
    let parts = [refusal.as_str()];
    assert_refused(&generate(tmp.path(), &wrong), &parts, "generate with another tokenizer");
    std::fs::remove_dir_all(tmp.path().join("report")).unwrap();
    assert_refused(&analyze(tmp.path(), &wrong), &parts, "analyze with another tokenizer");
    let output = Command::new(example("hf"))
        .args(["export", "--device", "flex", "--checkpoint"])
        .arg(&run)
        .arg("--out")
        .arg(tmp.path().join("exported"))
        .args(wrong)
        .output()
        .unwrap();
    assert_refused(&output, &parts, "hf export with another tokenizer");
    assert!(!tmp.path().join("exported").exists());
}

/// `hf logits --text` encodes as transformers' `tokenizer(text)` does, with the `<s>` the
/// post-processor adds: the ids and the logits of the committed transformers reference.
#[test]
fn hf_logits_of_a_text_match_transformers_with_its_special_tokens() {
    let dir = fixture("llama_mha_untied");
    let reference: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("reference.json")).unwrap()).unwrap();
    let output = Command::new(example("hf"))
        .args(["logits", "--json", "--device", "flex", "--text", reference["text"].as_str().unwrap(), "--hf-dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert_succeeded(&output, "hf logits --text");
    let ours: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(ours["input_ids"], reference["input_ids"], "the ids of transformers' tokenizer(text)");
    let flat = |v: &serde_json::Value| -> Vec<f64> {
        v.as_array()
            .unwrap()
            .iter()
            .flat_map(|row| row.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()))
            .collect()
    };
    let (ours, theirs) = (flat(&ours["logits"]), flat(&reference["logits"]));
    assert_eq!(ours.len(), theirs.len());
    let diff = ours.iter().zip(&theirs).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    assert!(diff < 1e-4, "largest difference {diff}");
    // A tokenizer larger than the model's vocabulary: the fix named is the model's own.
    let output = Command::new(example("generate"))
        .args(["--tokenizer", "byte", "--prompt", "the", "--device", "flex", "--hf-dir"])
        .arg(&dir)
        .output()
        .unwrap();
    let loaded = load_model_dir(&dir, None, &cpu()).unwrap();
    let refusal = loaded.tokenizer(Some(Path::new("byte"))).expect_err("bytes beyond the vocabulary");
    let Error::TokenizerChoice(TokenizerChoice::TooLarge { vocab_size: 128, own: true, .. }) = &refusal else {
        panic!("{refusal:?}")
    };
    let refusal = refusal.to_string();
    assert_refused(&output, &[&refusal], "generate --tokenizer byte");
}

/// `train --config RUN/train.json --resume` from another folder resumes RUN: the relative `out`
/// it records was taken from the working directory ("nothing to resume ... start a new run").
#[test]
fn a_runs_train_json_resumes_it_from_any_folder() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir(tmp.path().join("elsewhere")).unwrap();
    let output = Command::new(example("train"))
        .current_dir(tmp.path())
        .args(["--device", "flex", "--model", "tiny", "--steps", "2", "--eval-every", "2", "--batch-size", "2"])
        .args(["--seq-len", "16", "--samples", "0", "--builtin-docs", "200", "--out", "run"])
        .output()
        .unwrap();
    assert_succeeded(&output, "train");
    let output = Command::new(example("train"))
        .current_dir(tmp.path().join("elsewhere"))
        .args(["--config", "../run/train.json", "--resume"])
        .output()
        .unwrap();
    // Refused as finished: its 2 steps, and the option that trains on from it.
    assert_refused(&output, &["(2 steps)", "--init-from"], "train --config ../run/train.json --resume");
    assert!(!tmp.path().join("elsewhere/run").exists());
    // Hand-edited settings are seen, and refused: the checkpoints were made with the old ones.
    let train_json = tmp.path().join("run/train.json");
    let edited = std::fs::read_to_string(&train_json).unwrap().replace("\"steps\": 2", "\"steps\": 4");
    assert!(edited.contains("\"steps\": 4"));
    std::fs::write(&train_json, edited).unwrap();
    let output =
        Command::new(example("train")).current_dir(tmp.path()).args(["--resume", "--out", "run"]).output().unwrap();
    let edited_settings = RunDirError::SettingsEdited.to_string();
    assert_refused(&output, &[&edited_settings], "train --resume after an edit of train.json");
    // So is an edited model.json, by every program that loads the weights into the model it
    // describes (they were analysed as another scheme without a word).
    let model_json = tmp.path().join("run/model.json");
    let text = std::fs::read_to_string(&model_json).unwrap();
    let edited = text.replace("\"rope_theta\": 10000.0", "\"rope_theta\": 500000.0");
    assert_ne!(edited, text);
    std::fs::write(&model_json, edited).unwrap();
    let output = Command::new(example("generate"))
        .current_dir(tmp.path())
        .args(["--run", "run", "--prompt", "the", "--device", "flex"])
        .output()
        .unwrap();
    let err = load_model_dir(tmp.path().join("run"), None, &cpu()).expect_err("an edited model.json");
    let Error::RunModel { path, problem } = &err else { panic!("{err:?}") };
    assert_eq!(**problem, LoadProblem::ModelInfoEdited);
    assert_eq!(path, &model_json);
    // The program reports that refusal, of the run it was given (`run`, from its folder).
    let edited = Error::run_model(Path::new("run/model.json"), LoadProblem::ModelInfoEdited).to_string();
    assert_refused(&output, &[&edited], "generate after an edit of model.json");
}

/// A run trained on bytes is not exported with another tokenizer: its weights would be read with
/// other ids (it printed "the the the ..." in transformers).
#[test]
fn a_byte_run_is_not_exported_with_another_tokenizer() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let output = Command::new(example("train"))
        .args(["--device", "flex", "--model", "tiny", "--steps", "2", "--eval-every", "2", "--batch-size", "2"])
        .args(["--seq-len", "16", "--samples", "0", "--builtin-docs", "200", "--out"])
        .arg(&run)
        .output()
        .unwrap();
    assert_succeeded(&output, "train");
    let output = Command::new(example("hf"))
        .args(["export", "--device", "flex", "--checkpoint"])
        .arg(&run)
        .arg("--out")
        .arg(tmp.path().join("exported"))
        .arg("--tokenizer")
        .arg(fixture("llama_mha_untied").join("tokenizer.json"))
        .output()
        .unwrap();
    assert_refused(&output, &["trained on bytes", "leave --tokenizer unset"], "hf export --tokenizer");
    assert!(!tmp.path().join("exported").exists());
    // Compared with a model of another tokenizer, the perplexities are said not to compare.
    let text = tmp.path().join("eval.txt");
    std::fs::write(&text, (0..40).map(|i| format!("the cat sat on the mat {i}\n\n")).collect::<String>()).unwrap();
    let output = Command::new(example("analyze"))
        .arg("--run")
        .arg(&run)
        .arg("--hf-dir")
        .arg(fixture("llama_mha_untied"))
        .arg("--data")
        .arg(&text)
        .arg("--out")
        .arg(tmp.path().join("comparison"))
        .args(["--seq-len", "16", "--batch-size", "2", "--batches", "1", "--device", "flex"])
        .output()
        .unwrap();
    assert_succeeded(&output, "analyze across tokenizers");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("different tokenizers") && stderr.contains("cannot be compared"), "{stderr}");
}

#[test]
fn no_model_runs_past_a_mistral_sliding_window() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = mistral_with_window(&tmp.path().join("mistral"), 8);
    assert_eq!(read_hf_config(&dir).unwrap().max_seq_len, 8);

    let logits = |tokens: &str| {
        Command::new(example("hf"))
            .args(["logits", "--device", "flex", "--hf-dir"])
            .arg(&dir)
            .args(["--tokens", tokens])
            .output()
            .unwrap()
    };
    // The model's own refusal, as the program words its fix: the window, in positions.
    let fix = "give at most 8 tokens";
    let refused = read_hf_config(&dir).unwrap().check_seq_len(9, "9 tokens", fix).unwrap_err();
    assert!(matches!(&refused, ConfigError::TooLong { positions: 9, max_seq_len: 8, .. }), "{refused:?}");
    assert_refused(&logits("1,2,3,4,5,6,7,8,9"), &[&refused.to_string()], "hf logits");
    assert_succeeded(&logits("1,2,3,4,5,6,7,8"), "hf logits within the window");

    let generate = |max_tokens: &str| {
        Command::new(example("generate"))
            .arg("--hf-dir")
            .arg(&dir)
            .args(["--prompt", "the cat", "--device", "flex", "--max-tokens", max_tokens])
            .output()
            .unwrap()
    };
    let output = generate("100");
    assert_refused(&output, &["--max-tokens 100", "at most 8", "give --max-tokens in 0..="], "generate");
    // The range given is the one that works: its upper end runs, one more is refused.
    let stderr = String::from_utf8_lossy(&output.stderr);
    let room: usize = stderr.split("0..=").nth(1).unwrap().split(',').next().unwrap().trim().parse().unwrap();
    assert_succeeded(&generate(&room.to_string()), "generate to the window");
    assert_refused(&generate(&(room + 1).to_string()), &["at most 8"], "generate one past the window");
    // A prompt that alone fills the window: the prompt is named, not "--max-tokens in 0..=0".
    let output = Command::new(example("generate"))
        .arg("--hf-dir")
        .arg(&dir)
        .args(["--prompt", "the cat sat on the mat and the dog ran to the park", "--device", "flex"])
        .output()
        .unwrap();
    assert_refused(&output, &["give a shorter --prompt", "context holds 8"], "generate with a long prompt");

    let output = Command::new(example("analyze"))
        .arg("--hf-dir")
        .arg(&dir)
        .arg("--out")
        .arg(tmp.path().join("report"))
        .args(["--seq-len", "16", "--device", "flex"])
        .output()
        .unwrap();
    assert_refused(&output, &["--seq-len 16", "at most 8", "lower --seq-len"], "analyze");

    // Multiple-choice questions run whole through the model: a longer one is refused too.
    let arc = tmp.path().join("arc.jsonl");
    let question = "where did the cat that the dog chased all day long sit";
    std::fs::write(
        &arc,
        format!("{{\"question\": \"{question}\", \"choices\": [\"mat\", \"park\"], \"answer\": 0}}\n"),
    )
    .unwrap();
    let analyze_choices = || {
        Command::new(example("analyze"))
            .arg("--hf-dir")
            .arg(&dir)
            .arg("--choices")
            .arg(&arc)
            .arg("--out")
            .arg(tmp.path().join("report"))
            .args(["--seq-len", "4", "--device", "flex"])
            .output()
            .unwrap()
    };
    let output = analyze_choices();
    assert_refused(&output, &["--choices", "at most 8", "shorten the questions"], "analyze --choices");
    assert!(!tmp.path().join("report").exists());
    // A set that cannot be read is named as the multiple-choice set, not as a corpus.
    std::fs::write(&arc, "").unwrap();
    let output = analyze_choices();
    assert_refused(&output, &["--choices: "], "analyze --choices with an empty file");
    assert!(!String::from_utf8_lossy(&output.stderr).contains("corpus:"));
}

#[test]
fn an_hf_dir_without_config_json_is_named_as_such_by_every_program() {
    let empty = tempfile::tempdir().unwrap();
    for (program, args) in [("generate", &["--prompt", "hi"][..]), ("analyze", &[][..])] {
        let output = Command::new(example(program)).arg("--hf-dir").arg(empty.path()).args(args).output().unwrap();
        let refusal = require_hf_dir(empty.path()).expect_err("no config.json");
        let Error::ModelDir { problem: ModelDirProblem::NotHfDir { hides: None }, .. } = &refusal else {
            panic!("{refusal:?}")
        };
        let refusal = refusal.to_string();
        assert_refused(&output, &[&refusal], program);
        assert!(!String::from_utf8_lossy(&output.stderr).contains("model.json"), "{program}");
    }
}

/// `train` with the small settings these tests use, into `out`, plus `extra`.
fn small_train(out: &Path, extra: &[&str]) -> Output {
    Command::new(example("train"))
        .args(["--device", "flex", "--model", "tiny", "--batch-size", "4", "--seq-len", "32"])
        .args(["--builtin-docs", "300", "--samples", "0", "--out"])
        .arg(out)
        .args(extra)
        .output()
        .unwrap()
}

#[test]
fn resume_alone_takes_the_runs_own_settings_and_a_run_that_did_not_learn_exits_1() {
    let tmp = tempfile::tempdir().unwrap();
    let (run, cache) = (tmp.path().join("run"), tmp.path().join("cache"));
    let cache = ["--cache-dir", cache.to_str().unwrap()];
    let first = small_train(&run, &[&["--steps", "20", "--eval-every", "10", "--log-every", "5"][..], &cache].concat());
    assert_succeeded(&first, "train");
    std::fs::remove_file(run.join("model.bpk")).unwrap();
    // Every setting comes from train.json: nothing is a "change", the run is finished from step 20.
    let resumed = Command::new(example("train")).args(["--resume", "--out"]).arg(&run).output().unwrap();
    assert_succeeded(&resumed, "train --resume");
    let stderr = String::from_utf8_lossy(&resumed.stderr);
    assert!(!stderr.contains("changed setting") && !stderr.contains("differ"), "{stderr}");
    assert!(String::from_utf8_lossy(&resumed.stdout).contains("the final model of step 20 is written"));

    // Checkpoints are chosen by step; --epoch (validation intervals of 10 steps) still works, warned.
    let generate = |choice: &[&str]| {
        Command::new(example("generate"))
            .args(["--device", "flex", "--prompt", "ab", "--max-tokens", "2", "--run"])
            .arg(&run)
            .args(choice)
            .output()
            .unwrap()
    };
    let by_step = generate(&["--step", "10"]);
    assert_succeeded(&by_step, "generate --step 10");
    assert!(!String::from_utf8_lossy(&by_step.stderr).contains("warning"));
    let by_epoch = generate(&["--epoch", "1"]);
    assert_succeeded(&by_epoch, "generate --epoch 1");
    assert!(String::from_utf8_lossy(&by_epoch.stderr).contains("--epoch is deprecated"));
    assert!(String::from_utf8_lossy(&by_epoch.stderr).contains("use --step 10"));
    assert_eq!(by_epoch.stdout, by_step.stdout, "the same checkpoint");
    // analyze says it too (through the analysis's events), before its report.
    let text = tmp.path().join("eval.txt");
    std::fs::write(&text, "the quick brown fox jumps over the lazy dog. ".repeat(40)).unwrap();
    let analyzed = Command::new(example("analyze"))
        .args(["--device", "flex", "--seq-len", "32", "--epoch", "1", "--run"])
        .arg(&run)
        .arg("--data")
        .arg(&text)
        .arg("--out")
        .arg(tmp.path().join("report"))
        .output()
        .unwrap();
    assert_succeeded(&analyzed, "analyze --epoch 1");
    let stderr = String::from_utf8_lossy(&analyzed.stderr);
    assert!(stderr.contains("warning: --epoch is deprecated") && stderr.contains("use --step 10"), "{stderr}");
    let missing = load_model_dir(&run, Some(15), &cpu()).expect_err("no checkpoint at step 15");
    let Error::RunModel { problem, .. } = &missing else { panic!("{missing:?}") };
    let listed = CheckpointList::Steps(vec![10, 20]);
    assert_eq!(**problem, LoadProblem::NoCheckpoint { step: 15, checkpoints: listed }, "the steps there are named");
    let missing = missing.to_string();
    assert_refused(&generate(&["--step", "15"]), &[&missing], "a missing step");

    // A learning rate that collapses the model to a uniform guess, with finite losses throughout.
    let collapsed = tmp.path().join("collapsed");
    let output =
        small_train(&collapsed, &[&["--steps", "20", "--eval-every", "10", "--lr", "1000"][..], &cache].concat());
    assert_refused(&output, &["the model collapsed", "--lr"], "a collapsed run");
    assert!(collapsed.join("model.bpk").is_file(), "its model is saved all the same");
}

/// A run that is only short, or validated on text unlike its training text, is no failure: it
/// exits 0 and says which it looks like (both exited 1, "the model did not learn").
#[test]
fn a_short_or_out_of_domain_run_is_cautioned_not_failed() {
    let tmp = tempfile::tempdir().unwrap();
    let cache_dir = tmp.path().join("cache");
    let cache = ["--cache-dir", cache_dir.to_str().unwrap()];
    let smoke = small_train(
        &tmp.path().join("smoke"),
        &[&["--steps", "2", "--eval-every", "2", "--lr", "1e-6"][..], &cache].concat(),
    );
    assert_succeeded(&smoke, "a 2-step smoke run");
    assert!(String::from_utf8_lossy(&smoke.stderr).contains("too short to learn"), "{smoke:?}");
    // Text in a script the built-in corpus never uses: the byte model learns those bytes are rare.
    let foreign = tmp.path().join("foreign.txt");
    std::fs::write(&foreign, "\u{4e2d}\u{6587}\u{6587}\u{5b57}\u{3002}".repeat(400)).unwrap();
    let other = small_train(
        &tmp.path().join("other"),
        &[&["--steps", "40", "--eval-every", "20", "--valid-data", foreign.to_str().unwrap()][..], &cache].concat(),
    );
    assert_succeeded(&other, "a run validated on other text");
    assert!(String::from_utf8_lossy(&other.stderr).contains("unlike the training data"), "{other:?}");
}

/// Every precision through every program that reads weights: a pure-bf16 run generates (its
/// weights, widened to the f32 device, met a cache made in f32: a dtype-mismatch panic), and
/// `--init-from` trains in the float type `--precision` asks for, whatever its source holds (it
/// kept the source's: an f32 run "in bf16", and an f32 run whose end-of-run samples panicked on
/// its bf16 weights).
#[test]
fn weights_of_one_precision_are_read_by_every_program_in_the_precision_asked_for() {
    use burn::tensor::DType;
    let tmp = tempfile::tempdir().unwrap();
    let corpus = tmp.path().join("corpus.txt");
    let text: String = (0..300).map(|i| format!("Paragraph {i}: the quick brown fox {i} jumps.\n\n")).collect();
    std::fs::write(&corpus, text).unwrap();
    let train = |out: &Path, args: &[&str]| {
        let output = Command::new(example("train"))
            .args(["--device", "flex", "--steps", "2", "--eval-every", "2", "--batch-size", "2"])
            .args(["--seq-len", "16", "--samples", "1", "--data"])
            .arg(&corpus)
            .arg("--out")
            .arg(out)
            .args(args)
            .output()
            .unwrap();
        assert_succeeded(&output, &format!("train {args:?}"));
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let saved_dtype = |run: &Path| layernorm_scaling::run::load_model_dir(run, None, &cpu()).unwrap().saved_dtype;

    let bf16 = tmp.path().join("bf16");
    train(&bf16, &["--model", "tiny", "--precision", "bf16"]);
    assert_eq!(saved_dtype(&bf16), Some(DType::BF16));
    let output = Command::new(example("generate"))
        .arg("--run")
        .arg(&bf16)
        .args(["--prompt", "the ", "--max-tokens", "8", "--device", "flex"])
        .output()
        .unwrap();
    assert_succeeded(&output, "generate from a bf16 run");
    assert!(String::from_utf8_lossy(&output.stdout).contains("--- sample 1"));
    // Loaded onto an f32 device, its weights are f32 (the bf16 values, exactly).
    let (model, _) = layernorm_scaling::run::load_run_model(&bf16, None, &cpu()).unwrap();
    assert_eq!(model.embed_tokens.weight.val().dtype(), DType::F32);

    let f32_run = tmp.path().join("f32-from-bf16");
    let notes = train(&f32_run, &["--init-from", bf16.to_str().unwrap(), "--precision", "f32"]);
    assert!(notes.contains("stored in bf16; they are cast to f32"), "{notes}");
    assert_eq!(saved_dtype(&f32_run), Some(DType::F32));

    let bf16_run = tmp.path().join("bf16-from-f32");
    let notes = train(&bf16_run, &["--init-from", f32_run.to_str().unwrap(), "--precision", "bf16"]);
    assert!(notes.contains("stored in f32; they are cast to bf16"), "{notes}");
    assert_eq!(saved_dtype(&bf16_run), Some(DType::BF16));
    // The same precision is no news.
    let notes =
        train(&tmp.path().join("bf16-again"), &["--init-from", bf16_run.to_str().unwrap(), "--precision", "bf16"]);
    assert!(!notes.contains("they are cast to"), "{notes}");
}
