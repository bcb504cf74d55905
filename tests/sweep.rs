//! The sweep example: every (scheme, seed) pair trained once, the report written whole, a rerun
//! training nothing, a killed sweep resumed to the uninterrupted table, divergence recorded, and
//! bad input refused before any training.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{assert_refused, example};
use layernorm_scaling::analysis::{sweep_loss_curves, LossCurves};
use layernorm_scaling::cli::{parse_baseline, parse_inits, parse_schemes, parse_seeds};
use layernorm_scaling::run::{read_metrics, RunDirError};
use layernorm_scaling::train::{model_config, PairOutcome, Sweep, SweepError, SweepRecord, TrainConfig};
use layernorm_scaling::{ConfigError, Error, InitScheme, NormScheme};

fn sweep_command(out: &Path, extra: &[&str]) -> Command {
    let mut command = Command::new(example("sweep"));
    command.args(["--model", "tiny", "--device", "flex", "--steps", "6", "--eval-every", "3", "--batch-size", "4"]);
    command.args(["--seq-len", "32", "--builtin-docs", "400", "--eval-batches", "2", "--samples", "0", "--out"]);
    command.arg(out).args(extra);
    command
}

fn run(command: &mut Command) -> Output {
    let output = command.output().unwrap();
    assert!(
        output.status.success(),
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn results(out: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(out.join("report/results.json")).unwrap();
    serde_json::from_str::<serde_json::Value>(&text).unwrap()["results"].clone()
}

fn read_record(out: &Path) -> SweepRecord {
    serde_json::from_str(&std::fs::read_to_string(out.join("sweep.json")).unwrap()).unwrap()
}

/// A rerun that trained nothing: no pair started, the record holds `pairs` pairs, and each is
/// named on stdout beside its recorded outcome (its loss, or why it diverged).
fn assert_skipped(stdout: &str, out: &Path, pairs: usize) {
    assert!(!stdout.contains("=== sweep"), "{stdout}");
    let record = read_record(out);
    assert_eq!(record.outcomes.len(), pairs, "{stdout}");
    for (key, outcome) in &record.outcomes {
        let said = match outcome {
            PairOutcome::Finished { valid_loss } => format!("{valid_loss:.4}"),
            PairOutcome::Diverged { reason } => reason.lines().next().unwrap_or_default().to_string(),
        };
        assert!(stdout.lines().any(|line| line.contains(key.as_str()) && line.contains(&said)), "{key}: {stdout}");
    }
}

/// The loss curves of the sweep of `schemes` in `out`, and the library's warnings on them, as its
/// files stand.
fn loss_curves(out: &Path, schemes: &str) -> (Vec<(String, LossCurves)>, Vec<String>) {
    let record = read_record(out);
    let sweep = Sweep { schemes: parse_schemes(schemes).unwrap(), ..record.sweep() };
    sweep_loss_curves(&sweep, &record)
}

/// Whether the curves of `group` were left out (no run of it read).
fn left_out(curves: &[(String, LossCurves)], group: &str) -> bool {
    curves.iter().find(|(name, _)| name == group).unwrap().1.train.is_empty()
}

/// Each of the library's `warnings` is on stderr, and one names `key`.
fn assert_warned(stderr: &str, warnings: &[String], key: &str) {
    assert!(warnings.iter().any(|warning| warning.contains(key)), "{key}: {warnings:?}");
    for warning in warnings {
        assert!(stderr.contains(warning.as_str()), "{warning}: {stderr}");
    }
}

/// A PNG that decodes and has more than one colour.
fn assert_figure(path: &Path) {
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(path).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut pixels = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut pixels).unwrap();
    let first = &pixels[..3];
    let differs = pixels[..info.buffer_size()].chunks(info.color_type.samples()).filter(|p| &p[..3] != first).count();
    assert!(differs > 1000, "{} is (nearly) blank", path.display());
}

#[test]
fn a_sweep_trains_every_pair_once_and_reports_the_runs_own_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sweep");
    // Settings that serde_json without `float_roundtrip` reads back from sweep.json one ulp off.
    let args = [
        "--schemes",
        "pre-ln,lns",
        "--seeds",
        "1,2",
        "--lr",
        "0.0020006666666666758",
        "--valid-fraction",
        "0.09090909090909091",
    ];
    run(&mut sweep_command(&out, &args));
    for file in ["results.md", "results.csv", "results.json", "loss_vs_steps.png", "loss_vs_tokens.png"] {
        assert!(out.join("report").join(file).is_file(), "{file}");
    }
    assert_figure(&out.join("report/loss_vs_steps.png"));
    assert_figure(&out.join("report/loss_vs_tokens.png"));
    assert!(out.join("report/diagnostics/comparison.md").is_file());

    // Each seed's loss in the table is its run's own last validation loss, and the mean is theirs.
    let table = results(&out);
    for (row, scheme) in table.as_array().unwrap().iter().zip(["pre-ln", "lns"]) {
        assert_eq!(row["scheme"], scheme);
        assert_eq!(row["finished"], 2);
        let mut losses = Vec::new();
        for seed in [1, 2] {
            let rows = read_metrics(&out.join(scheme).join(format!("seed-{seed}"))).unwrap();
            let last_valid = rows.iter().rfind(|r| r.split == "valid" && r.metric == "Loss" && r.is_final);
            let logged = last_valid.map(|r| r.value).unwrap_or_else(|| {
                // The epoch's value is the mean of its batches (each the same number of tokens).
                let batches: Vec<f64> = rows
                    .iter()
                    .filter(|r| r.split == "valid" && r.epoch == 2 && r.metric == "Loss")
                    .map(|r| r.value)
                    .collect();
                batches.iter().sum::<f64>() / batches.len() as f64
            });
            let reported = row["losses"][seed.to_string()].as_f64().unwrap();
            assert!((reported - logged).abs() < 1e-4, "{scheme} seed {seed}: {reported} vs {logged}");
            losses.push(reported);
        }
        let mean = row["loss_mean"].as_f64().unwrap();
        assert!((mean - (losses[0] + losses[1]) / 2.0).abs() < 1e-12);
        assert!(row["loss_std"].as_f64().unwrap() > 0.0, "two seeds differ");
    }
    // The paired table: lns minus pre-ln, seed by seed, from the same losses.
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report/results.json")).unwrap()).unwrap();
    let paired = &report["paired"][0];
    assert_eq!((paired["scheme"].as_str(), paired["baseline"].as_str()), (Some("lns"), Some("pre-ln")));
    let rows = table.as_array().unwrap();
    let mut differences = Vec::new();
    for seed in ["1", "2"] {
        let expected = rows[1]["losses"][seed].as_f64().unwrap() - rows[0]["losses"][seed].as_f64().unwrap();
        assert_eq!(paired["differences"][seed].as_f64(), Some(expected), "seed {seed}");
        differences.push(expected);
    }
    let mean = (differences[0] + differences[1]) / 2.0;
    assert!((paired["mean"].as_f64().unwrap() - mean).abs() < 1e-15);
    let half = 12.7062 * (differences[0] - differences[1]).abs() / 2f64.sqrt() / 2f64.sqrt();
    let interval = paired["interval"].as_array().unwrap();
    assert!((interval[0].as_f64().unwrap() - (mean - half)).abs() < 1e-12, "{interval:?}");
    let md = std::fs::read_to_string(out.join("report/results.md")).unwrap();
    assert!(md.contains("## Paired against pre-ln") && md.contains("| lns | 2 | 1: "), "{md}");
    assert!(out.join("report/paired.csv").is_file());

    let best: Vec<bool> = table.as_array().unwrap().iter().map(|r| r["best"].as_bool().unwrap()).collect();
    assert_eq!(best.iter().filter(|b| **b).count(), 1);

    // Two seeds of one scheme start from different weights; one seed is the same across schemes'
    // data order (same first batch: the same first loss for pre-ln and lns, whose init is the same).
    let first_loss = |scheme: &str, seed: u64| {
        let rows = read_metrics(&out.join(scheme).join(format!("seed-{seed}"))).unwrap();
        rows.iter().find(|r| r.split == "train" && r.metric == "Loss").unwrap().value
    };
    assert_ne!(first_loss("pre-ln", 1), first_loss("pre-ln", 2));

    // A rerun trains nothing and rewrites the record and the table byte for byte.
    let files = |out: &Path| ["sweep.json", "report/results.csv"].map(|f| std::fs::read(out.join(f)).unwrap());
    let before = files(&out);
    let output = run(&mut sweep_command(&out, &args));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_skipped(&stdout, &out, 4);
    assert!(!stdout.contains("=== sweep"), "{stdout}");
    assert_eq!(results(&out), table);
    assert!(files(&out) == before, "sweep.json and results.csv are unchanged");

    // Killed mid-sweep and run again, it gives the uninterrupted table.
    let killed = dir.path().join("killed");
    let mut child = sweep_command(&killed, &args).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(300) {
        let record = std::fs::read_to_string(killed.join("sweep.json")).ok();
        let done = record.and_then(|t| serde_json::from_str::<SweepRecord>(&t).ok()).map_or(0, |r| r.outcomes.len());
        if done >= 1 {
            std::thread::sleep(Duration::from_millis(200));
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(!killed.join("report").exists(), "the sweep was killed before its report");
    run(&mut sweep_command(&killed, &args));
    let strip = |mut v: serde_json::Value| {
        for row in v.as_array_mut().unwrap() {
            row.as_object_mut().unwrap().remove("scheme");
        }
        v
    };
    assert_eq!(strip(results(&killed)), strip(table));
}

#[test]
fn a_diverging_scheme_is_recorded_and_the_others_finish() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sweep");
    // SkipInit's learnable branch gain starts at 1e30: RMSNorm's mean square overflows to infinity, the
    // model outputs uniform logits and never learns.
    let output = run(&mut sweep_command(&out, &["--schemes", "skip-init:1e30,pre-ln"]));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let table = results(&out);
    assert_eq!((table[0]["finished"].as_u64(), table[0]["diverged"].as_u64()), (Some(0), Some(1)), "{stdout}");
    assert_eq!((table[1]["finished"].as_u64(), table[1]["best"].as_bool()), (Some(1), Some(true)), "{stdout}");
    let md = std::fs::read_to_string(out.join("report/results.md")).unwrap();
    assert!(md.contains("| 0 of 1 (1 diverged) | diverged | diverged |"), "{md}");
    // Run again, the diverged pair is not retrained.
    let output = run(&mut sweep_command(&out, &["--schemes", "skip-init:1e30,pre-ln"]));
    assert_skipped(&String::from_utf8_lossy(&output.stdout), &out, 2);
    let diverged =
        read_record(&out).outcomes.into_values().filter(|o| matches!(o, PairOutcome::Diverged { .. })).count();
    assert_eq!(diverged, 1, "the diverged pair stays recorded as such");
    // How to try other settings: a new --out, since this one refuses them.
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("1 pair(s) diverged") && stderr.contains("with a new --out"), "{stderr}");
}

#[test]
fn bad_sweeps_are_refused_before_any_training() {
    let dir = tempfile::tempdir().unwrap();
    let occupied = dir.path().join("occupied");
    std::fs::create_dir(&occupied).unwrap();
    std::fs::write(occupied.join("notes.txt"), "mine").unwrap();
    for (out, extra, expected) in [
        (dir.path().join("a"), vec!["--schemes", "pre-ln,lnss"], "unknown normalisation scheme"),
        (dir.path().join("b"), vec!["--schemes", ","], "--schemes is empty"),
        (dir.path().join("c"), vec!["--schemes", "lns,lns"], "listed twice"),
        (dir.path().join("d"), vec!["--seeds", "1,x"], "`x` is not a seed"),
        (dir.path().join("e"), vec!["--seeds", "3-1"], "runs backwards"),
        (dir.path().join("g"), vec!["--data", "/nonexistent/corpus.txt"], "no such file"),
        (dir.path().join("h"), vec!["--tokenizer", "/nonexistent/tokenizer.json"], "no such file"),
        (
            dir.path().join("i"),
            vec!["--schemes", "lns,post-ln", "--baseline", "pre-ln"],
            "--baseline pre-ln is not one",
        ),
        (dir.path().join("j"), vec!["--schemes", "lns,pre-ln", "--baseline", "pre-lm"], "unknown normalisation scheme"),
        (dir.path().join("k"), vec!["--layers", ","], "--layers is empty"),
        (dir.path().join("l"), vec!["--layers", "2,3,2"], "depth 2 is listed twice"),
        (dir.path().join("m"), vec!["--layers", "0,2"], "`0` is not a number of layers"),
        (dir.path().join("n"), vec!["--inits", "normal,scaled,normal"], "`normal` is listed twice"),
        (dir.path().join("o"), vec!["--inits", "scaeld"], "unknown init scheme"),
        (dir.path().join("s"), vec!["--removal-threshold", "5"], "removal_threshold"),
        // --seeds gives each run its seed: a --seed beside it is said to be unused.
        (
            dir.path().join("s2"),
            vec!["--seed", "3", "--seeds", "5", "--removal-threshold", "5"],
            "--seed 3 is not used",
        ),
        (dir.path().join("t"), vec!["--schemes", "lns", "--inits", "scaled", "--baseline", "lns"], "is not one of"),
        // The baseline is one arm, named as such: a list or a set is not one.
        (
            dir.path().join("u"),
            vec!["--schemes", "lns,pre-ln", "--baseline", "lns,pre-ln"],
            "--baseline lns,pre-ln: unknown",
        ),
        (dir.path().join("v"), vec!["--schemes", "lns,pre-ln", "--baseline", "all"], "--baseline all: unknown"),
        (dir.path().join("w"), vec!["--schemes", "lns,pre-ln", "--baseline", "+scaled"], "--baseline +scaled: unknown"),
        (dir.path().join("x"), vec!["--schemes", "lns,pre-ln", "--baseline", "lns+"], "--baseline lns+: unknown init"),
    ] {
        let output = sweep_command(&out, &extra).output().unwrap();
        assert_refused(&output, &[expected], &format!("{extra:?}"));
        assert!(!out.join("sweep.json").exists() && !out.join("lns").exists(), "{extra:?}: nothing is written");
    }
    // The sweep's own refusals: each is the library's variant, which the program prints whole;
    // nothing is trained, and a sweep.json there (or none) stays as it was.
    let refusal = |out: PathBuf, extra: &[&str], advice: &str, edit: fn(&mut Sweep)| {
        let record = || std::fs::read(out.join("sweep.json")).ok();
        let before = record();
        let output = sweep_command(&out, extra).output().unwrap();
        let mut sweep = Sweep { schemes: parse_schemes("lns").unwrap(), seeds: vec![1], ..Sweep::default() };
        (sweep.config.model.preset, sweep.config.device) = ("tiny".into(), "flex".into());
        sweep.config.output.out = out.clone();
        edit(&mut sweep);
        let refused = sweep.check().unwrap_err();
        assert_refused(&output, &[&refused.to_string(), advice], &format!("{extra:?}"));
        assert!(record() == before && !out.join("lns").exists(), "{extra:?}: nothing is written");
        match refused {
            Error::Sweep(error) => error,
            other => panic!("{extra:?}: {other:?}"),
        }
    };
    let lns: NormScheme = "lns".parse().unwrap();
    let norm = refusal(dir.path().join("f"), &["--norm", "lns"], "list the schemes with --schemes", |s| {
        s.config.model.norm = Some("lns".parse().unwrap())
    });
    assert!(matches!(&norm, SweepError::NormGiven { norm } if *norm == lns), "{norm:?}");
    let theirs = refusal(occupied.clone(), &["--schemes", "lns"], "give a new or empty --out", |_| {});
    assert!(matches!(&theirs, SweepError::NotASweep { dir } if *dir == occupied), "{theirs:?}");
    assert_eq!(std::fs::read_to_string(occupied.join("notes.txt")).unwrap(), "mine", "nothing deleted");
    let twice = refusal(dir.path().join("p"), &["--init", "scaled", "--inits", "normal"], "give one of them", |s| {
        (s.config.model.init, s.inits) = (Some(InitScheme::Scaled), vec![InitScheme::Normal]);
    });
    let expected = (InitScheme::Scaled, false, vec![InitScheme::Normal]);
    assert!(
        matches!(&twice, SweepError::InitTwice { init, in_model_file, inits } if (*init, *in_model_file, inits.clone()) == expected),
        "{twice:?}"
    );
    let own = refusal(
        dir.path().join("q"),
        &["--schemes", "deepnorm", "--inits", "scaled"],
        "drop `deepnorm` from --schemes",
        |s| {
            (s.schemes, s.inits) = (parse_schemes("deepnorm").unwrap(), vec![InitScheme::Scaled]);
        },
    );
    let deepnorm: NormScheme = "deepnorm".parse().unwrap();
    assert!(
        matches!(&own, SweepError::SchemeSetsInit { scheme, init: InitScheme::Scaled } if *scheme == deepnorm),
        "{own:?}"
    );
    let fixed = refusal(
        dir.path().join("r"),
        &["--layers", "2,3", "--init-from", "/nonexistent"],
        "drop --layers or --init-from",
        |s| {
            (s.depths, s.config.model.init_from) = (vec![2, 3], Some("/nonexistent".into()));
        },
    );
    assert!(
        matches!(&fixed, SweepError::DepthOfInitFrom { depths, init_from } if *depths == [2, 3] && init_from.as_os_str() == "/nonexistent"),
        "{fixed:?}"
    );
    // A damaged record is named, kept as it is, and nothing is trained.
    let damaged = dir.path().join("damaged");
    std::fs::create_dir(&damaged).unwrap();
    std::fs::write(damaged.join("sweep.json"), "{ cut short").unwrap();
    let cut = refusal(damaged.clone(), &["--schemes", "lns"], "restore it, or move the folder away", |_| {});
    let SweepError::RecordDamaged { dir: at, reason } = &cut else { panic!("{cut:?}") };
    assert!(*at == damaged && reason.starts_with("not a sweep record: "), "{cut}");
    assert_eq!(std::fs::read_to_string(damaged.join("sweep.json")).unwrap(), "{ cut short", "kept as it was");
    // Paths that are not UTF-8 cannot be recorded in sweep.json or train.json: refused up front,
    // naming the option (it panicked while writing sweep.json).
    {
        use std::os::unix::ffi::OsStrExt;
        let bad = |name: &[u8]| dir.path().join(std::ffi::OsStr::from_bytes(name));
        let corpus = bad(b"v\xff.txt");
        std::fs::write(&corpus, "some text\n".repeat(500)).unwrap();
        for (out, extra, expected) in
            [(bad(b"sw\xffbad"), None, "`out`"), (dir.path().join("u"), Some(&corpus), "`data`")]
        {
            let mut command = sweep_command(&out, &["--schemes", "lns"]);
            if let Some(corpus) = extra {
                command.arg("--data").arg(corpus);
            }
            let output = command.output().unwrap();
            // The library's refusal of the same paths, naming the option.
            let mut config = TrainConfig::default();
            config.output.out = out.clone();
            config.data.files = extra.into_iter().cloned().collect();
            let sweep = Sweep { config, schemes: parse_schemes("lns").unwrap(), seeds: vec![1], ..Sweep::default() };
            let refused = sweep.check().unwrap_err();
            let Error::Config(ConfigError::Conflict(message)) = &refused else { panic!("{refused:?}") };
            assert!(message.contains(expected), "{message}");
            assert_refused(&output, &[message], expected);
            assert!(!out.exists(), "{expected}: nothing is written");
        }
    }

    // A run's config file with its `norm` serves a sweep: --schemes replaces it, with a note.
    let config = dir.path().join("run.toml");
    std::fs::write(&config, "norm = \"lns\"\nseed = 3\n").unwrap();
    let from_config = dir.path().join("from-config");
    let output =
        run(sweep_command(&from_config, &["--schemes", "pre-ln", "--no-diagnostics"]).arg("--config").arg(&config));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("`norm = \"lns\"`") && stderr.contains("--schemes"), "{stderr}");
    assert!(from_config.join("pre-ln/seed-3/model.bpk").is_file(), "the config's seed, the sweep's scheme");

    // The same sweep with other settings in the same directory is refused, naming the change;
    // the directory spelled otherwise, or settings that change nothing trained, are not.
    let out = dir.path().join("sweep");
    run(&mut sweep_command(&out, &["--schemes", "lns", "--no-diagnostics"]));
    let output = sweep_command(&out, &["--schemes", "lns", "--lr", "0.01"]).output().unwrap();
    let mut other = read_record(&out).sweep();
    other.config.optim.lr = 0.01;
    let refused = other.check().unwrap_err();
    let Error::Sweep(SweepError::OtherSettings { dir: at, changes }) = &refused else { panic!("{refused:?}") };
    assert!(*at == out && changes.iter().any(|change| change.setting == "lr"), "{refused}");
    assert_refused(&output, &[&refused.to_string()], "a sweep continued with another --lr");
    let respelled = dir.path().join(".").join("sweep/");
    let output = run(&mut sweep_command(&respelled, &["--schemes", "lns", "--log-every", "1", "--no-diagnostics"]));
    assert_skipped(&String::from_utf8_lossy(&output.stdout), &out, 1);

    // A sweep whose first pair never started may change its settings (a typo'd --device is fixed
    // by running again).
    let typo = dir.path().join("typo");
    std::fs::create_dir(&typo).unwrap();
    let record = std::fs::read_to_string(out.join("sweep.json")).unwrap();
    let mut record: serde_json::Value = serde_json::from_str(&record).unwrap();
    record["outcomes"] = serde_json::json!({});
    record["config"]["lr"] = serde_json::json!(0.5);
    std::fs::write(typo.join("sweep.json"), record.to_string()).unwrap();
    run(&mut sweep_command(&typo, &["--schemes", "lns", "--no-diagnostics"]));
}

/// Truncated sequences: the report counts real targets per step, as `train` does, not the
/// padded positions (it said "6 steps of 128 tokens" for about 40 real ones).
#[test]
fn a_truncated_sweep_counts_real_tokens_not_padding() {
    let dir = tempfile::tempdir().unwrap();
    let corpus = dir.path().join("short.txt");
    let docs: Vec<String> = (0..400).map(|i| format!("doc {i} is short")).collect();
    std::fs::write(&corpus, docs.join("\n\n")).unwrap();
    let out = dir.path().join("sweep");
    let mut command = sweep_command(&out, &["--schemes", "lns", "--sequences", "truncate", "--no-diagnostics"]);
    run(command.arg("--data").arg(&corpus));
    let recorded: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("lns/seed-1/train.json")).unwrap()).unwrap();
    let budget = &recorded["data_budget"];
    let per_sequence = budget["tokens"].as_f64().unwrap() / budget["sequences"].as_f64().unwrap();
    let per_step = budget["read"].as_f64().unwrap() / 6.0 * per_sequence;
    assert!(per_step < 4.0 * 32.0 / 2.0, "the documents are short: {per_step} real targets a step");
    let md = std::fs::read_to_string(out.join("report/results.md")).unwrap();
    let expected = format!("6 steps of {per_step:.0} real target tokens on average (padding not counted)");
    assert!(md.contains(&expected) && !md.contains("of 128 tokens"), "{expected} in:\n{md}");
}

#[test]
fn a_deleted_pair_is_trained_again_and_a_narrower_rerun_reports_only_its_pairs() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sweep");
    run(&mut sweep_command(&out, &["--schemes", "pre-ln,lns", "--no-diagnostics"]));
    // A sweep folder given where a run is expected names its runs (it began "No such file").
    let mut train = Command::new(example("train"));
    let output = train.arg("--init-from").arg(&out).arg("--out").arg(dir.path().join("x")).output().unwrap();
    let mut init_from = TrainConfig::default();
    init_from.model.init_from = Some(out.clone());
    let refused = model_config(&init_from).unwrap_err().to_string();
    let runs = [out.join("pre-ln/seed-1"), out.join("lns/seed-1")].map(|run| run.display().to_string());
    assert!(runs.iter().any(|run| refused.contains(run.as_str())), "names one of its runs: {refused}");
    // Not the system's "not found" of its missing model.json.
    let not_found = std::io::Error::from_raw_os_error(2).to_string();
    assert_refused(&output, &[&refused], "--init-from a sweep's folder");
    assert!(!String::from_utf8_lossy(&output.stderr).contains(&not_found), "{refused}");
    std::fs::remove_dir_all(out.join("lns/seed-1")).unwrap();
    // A damaged metrics.jsonl leaves its run out of the curves, with a warning naming it.
    let metrics = out.join("pre-ln/seed-1/metrics.jsonl");
    let text = std::fs::read_to_string(&metrics).unwrap();
    std::fs::write(&metrics, format!("{{\"split\": \"tr\n{text}")).unwrap();
    let pre_ln_model = std::fs::read(out.join("pre-ln/seed-1/model.bpk")).unwrap();
    let output = run(&mut sweep_command(&out, &["--schemes", "pre-ln,lns", "--no-diagnostics"]));
    let stdout = String::from_utf8_lossy(&output.stdout);
    // Only lns seed 1 trains again; pre-ln seed 1 is named with its recorded loss, untouched.
    let started: Vec<&str> = stdout.lines().filter(|line| line.contains("=== sweep")).collect();
    assert!(started.len() == 1 && started[0].contains(" lns ") && started[0].contains(" 1"), "{stdout}");
    assert!(out.join("lns/seed-1/model.bpk").is_file());
    assert!(std::fs::read(out.join("pre-ln/seed-1/model.bpk")).unwrap() == pre_ln_model, "pre-ln was trained again");
    let PairOutcome::Finished { valid_loss } = read_record(&out).outcomes["pre-ln/seed-1"] else { panic!("{stdout}") };
    let skipped = format!("{valid_loss:.4}");
    assert!(stdout.lines().any(|line| line.contains("pre-ln/seed-1") && line.contains(&skipped)), "{stdout}");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let (curves, warnings) = loss_curves(&out, "pre-ln,lns");
    assert_warned(&stderr, &warnings, "pre-ln/seed-1");
    let at = format!("{}: line 1", metrics.display());
    assert!(warnings.iter().any(|w| w.contains("pre-ln/seed-1") && w.contains(&at)), "{warnings:?}");
    assert!(left_out(&curves, "pre-ln"), "the damaged run is left out of the curves");
    // Both pairs shared one token cache.
    assert!(out.join(".token-cache").is_dir() && !out.join("lns/.token-cache").exists());

    // So does a whole line of garbage at the end (a cut write has no line end), and a file of
    // nothing but that line: the run is named, never dropped from the mean without a word.
    for damaged in [format!("{text}garbage{{\n"), "garbage{\n".to_string()] {
        std::fs::write(&metrics, damaged).unwrap();
        let output = run(&mut sweep_command(&out, &["--schemes", "pre-ln,lns", "--no-diagnostics"]));
        let stderr = String::from_utf8_lossy(&output.stderr);
        let (curves, warnings) = loss_curves(&out, "pre-ln,lns");
        assert_warned(&stderr, &warnings, "pre-ln/seed-1");
        assert!(left_out(&curves, "pre-ln"), "{warnings:?}");
    }
    // Whole lines removed from the end: the curve would stop early without a word.
    let first_lines: String = text.lines().take(3).map(|line| format!("{line}\n")).collect();
    std::fs::write(&metrics, first_lines).unwrap();
    let output = run(&mut sweep_command(&out, &["--schemes", "pre-ln,lns", "--no-diagnostics"]));
    let stderr = String::from_utf8_lossy(&output.stderr);
    let (curves, warnings) = loss_curves(&out, "pre-ln,lns");
    assert_warned(&stderr, &warnings, "pre-ln/seed-1");
    // Kept in the curves, and said to stop short of the run's 6 steps.
    assert!(!left_out(&curves, "pre-ln") && warnings.iter().any(|w| w.contains(" of 6")), "{warnings:?}");
    std::fs::write(&metrics, "").unwrap();
    let output = run(&mut sweep_command(&out, &["--schemes", "pre-ln,lns", "--no-diagnostics"]));
    let stderr = String::from_utf8_lossy(&output.stderr);
    let (curves, warnings) = loss_curves(&out, "pre-ln,lns");
    assert_warned(&stderr, &warnings, "pre-ln/seed-1");
    assert!(left_out(&curves, "pre-ln"), "{warnings:?}");

    // So does a missing one.
    std::fs::remove_file(out.join("lns/seed-1/metrics.jsonl")).unwrap();
    let output = run(&mut sweep_command(&out, &["--schemes", "lns", "--no-diagnostics"]));
    let stderr = String::from_utf8_lossy(&output.stderr);
    let (curves, warnings) = loss_curves(&out, "lns");
    assert_warned(&stderr, &warnings, "lns/seed-1");
    let missing = out.join("lns/seed-1/metrics.jsonl").display().to_string();
    assert!(warnings.iter().any(|w| w.contains(missing.as_str())), "names the missing file: {warnings:?}");
    assert!(left_out(&curves, "lns"), "{warnings:?}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report/results.json")).unwrap()).unwrap();
    assert_eq!(report["results"].as_array().unwrap().len(), 1);
    assert_eq!(report["outcomes"].as_object().unwrap().keys().collect::<Vec<_>>(), ["lns/seed-1"]);
    // The record still holds both pairs: the wider sweep trains nothing.
    let record: SweepRecord = serde_json::from_str(&std::fs::read_to_string(out.join("sweep.json")).unwrap()).unwrap();
    assert_eq!(record.outcomes.len(), 2);

    // A pair trained again by hand with other settings: its recorded loss is not its model's, so
    // the sweep refuses to report it (it reported the old loss for the new model).
    let train_json = out.join("lns/seed-1/train.json");
    let mut settings: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&train_json).unwrap()).unwrap();
    settings["lr"] = serde_json::json!(0.5);
    std::fs::write(&train_json, settings.to_string()).unwrap();
    let output = sweep_command(&out, &["--schemes", "pre-ln,lns", "--no-diagnostics"]).output().unwrap();
    // The library refuses the same sweep so, naming the pair's folder and the changed rate.
    let sweep = Sweep { schemes: parse_schemes("pre-ln,lns").unwrap(), ..read_record(&out).sweep() };
    let refused = sweep.run(|_| {}).unwrap_err();
    let Error::RunDir { path, error: RunDirError::PairRetrained { changes } } = &refused else { panic!("{refused:?}") };
    assert_eq!(*path, out.join("lns/seed-1"));
    assert!(changes.iter().any(|change| change.setting == "lr"), "{changes:?}");
    assert_refused(&output, &[&refused.to_string()], "a pair trained again by hand");
}

#[test]
fn a_run_whose_training_loss_is_not_finite_is_diverged_even_with_finite_weights() {
    use layernorm_scaling::run::{first_non_finite_loss, MetricRow};
    let row = |step: usize, value: f64| MetricRow {
        split: "train".into(),
        epoch: 1,
        batch: step,
        step,
        metric: "Loss".into(),
        value,
        count: Some(1),
        is_final: false,
    };
    let rows = [row(1, 5.5), row(2, f64::NAN), row(3, 5.54)];
    assert_eq!(first_non_finite_loss(&rows).map(|r| r.step), Some(2));
    assert!(first_non_finite_loss(&rows[..1]).is_none());
}

#[test]
fn scheme_and_seed_lists_parse() {
    assert_eq!(parse_schemes("table-1").unwrap().len(), 5);
    assert!(parse_schemes("all").unwrap().len() >= 11);
    assert_eq!(parse_seeds("1-3,7").unwrap(), vec![1, 2, 3, 7]);
    assert!(parse_seeds("3-1").is_err());
    // A range holds at most 1000 seeds, and the refusal names the range and that limit.
    assert_eq!(parse_seeds("1-1000").unwrap().len(), 1000);
    assert!(parse_seeds("1-1001").is_err());
    let too_many = parse_seeds("1-5000").unwrap_err();
    let ConfigError::Conflict(message) = &too_many else { panic!("{too_many:?}") };
    assert!(message.starts_with("--seeds") && message.contains("`1-5000`") && message.contains("1000"), "{message}");
}

#[test]
fn a_sweep_refuses_new_seeds_once_its_data_changed_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let (out, data) = (dir.path().join("sweep"), dir.path().join("corpus.txt"));
    let corpus = layernorm_scaling::data::builtin_documents(400, 1).join("\n\n");
    std::fs::write(&data, &corpus).unwrap();
    let with = |seeds: &str| {
        let mut command = sweep_command(&out, &["--schemes", "pre-ln", "--seeds", seeds, "--data"]);
        command.arg(&data);
        command
    };
    run(&mut with("1"));
    // The same name and size, another content: seed 2 must not be trained on it and averaged with seed 1.
    std::fs::write(&data, corpus.replacen('a', "b", 1)).unwrap();
    let output = with("1,2").output().unwrap();
    // The library's refusal of the same sweep on the changed data (the settings are the same).
    let refused = Sweep { seeds: vec![1, 2], ..read_record(&out).sweep() }.check().unwrap_err();
    assert!(matches!(&refused, Error::Sweep(SweepError::OtherData { dir }) if *dir == out), "{refused:?}");
    assert_refused(
        &output,
        &[&refused.to_string(), "restore the data, or give a new --out"],
        "new seeds on changed data",
    );
    assert!(!out.join("pre-ln/seed-2").exists(), "nothing is trained");
    // The data restored, the sweep goes on.
    std::fs::write(&data, &corpus).unwrap();
    run(&mut with("1,2"));
    assert!(out.join("pre-ln/seed-2/model.bpk").is_file());
}

#[test]
fn a_depth_sweep_reports_the_curse_against_depth_with_its_figures() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("depth");
    let output = run(&mut sweep_command(&out, &["--schemes", "pre-ln,lns", "--layers", "2,3", "--seeds", "1"]));
    let stdout = String::from_utf8_lossy(&output.stdout);
    for group in ["layers-2/pre-ln", "layers-2/lns", "layers-3/pre-ln", "layers-3/lns"] {
        assert!(out.join(group).join("seed-1/model.bpk").is_file(), "{group}: {stdout}");
    }
    let model: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("layers-3/lns/seed-1/model.json")).unwrap()).unwrap();
    assert_eq!(model["model"]["n_layers"], 3, "the pair's depth is the run's");

    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report/results.json")).unwrap()).unwrap();
    let points = report["depth"].as_array().unwrap();
    assert_eq!(points.len(), 4, "{points:?}");
    for point in points {
        let layers = point["layers"].as_u64().unwrap();
        assert!(point["loss_mean"].as_f64().unwrap().is_finite(), "{point}");
        assert!(point["variance_growth"].as_f64().unwrap() > 0.0, "{point}");
        assert!(point["effective_depth"].as_u64().unwrap() <= layers, "{point}");
        // The row's loss is the pair's own.
        let group = format!("layers-{layers}/{}", point["scheme"].as_str().unwrap());
        let outcome = &report["outcomes"][format!("{group}/seed-1")];
        assert_eq!(point["loss_mean"], outcome["valid_loss"], "{group}");
    }
    // Paired at each depth with that depth's pre-ln.
    let paired = report["paired"].as_array().unwrap();
    assert_eq!(paired.iter().map(|p| p["layers"].as_u64().unwrap()).collect::<Vec<_>>(), vec![2, 3]);
    let md = std::fs::read_to_string(out.join("report/results.md")).unwrap();
    assert!(md.contains("# Sweep: 2 depths x 2 schemes x 1 seed") && md.contains("The curse against depth"), "{md}");
    for figure in ["loss_vs_depth.png", "variance_growth_vs_depth.png", "effective_depth_vs_depth.png"] {
        assert_figure(&out.join("report").join(figure));
        assert!(md.contains(&format!("![{figure}]({figure})")), "{figure}");
    }
    assert_eq!(std::fs::read_to_string(out.join("report/depth.csv")).unwrap().lines().count(), 5);
    // Run again: nothing trains, the record reads back with its axis.
    let again = run(&mut sweep_command(&out, &["--schemes", "pre-ln,lns", "--layers", "2,3", "--seeds", "1"]));
    assert_skipped(&String::from_utf8_lossy(&again.stdout), &out, 4);
    // Without its axis, or with one depth (a fixed depth, not the axis), it is refused and says how.
    for extra in [&["--layers", "3"][..], &[]] {
        let output =
            sweep_command(&out, &[&["--schemes", "pre-ln,lns", "--seeds", "1"][..], extra].concat()).output().unwrap();
        // The library's refusal of the same sweep: one depth for every run, or the model's own.
        let mut without_axis = Sweep { depths: Vec::new(), ..read_record(&out).sweep() };
        without_axis.config.model.layers = (!extra.is_empty()).then_some(3);
        let refused = without_axis.check().unwrap_err();
        let Error::Sweep(SweepError::DepthAxisChanged { dir: at, recorded, given }) = &refused else {
            panic!("{refused:?}")
        };
        assert!(*at == out && *recorded == [2, 3] && given.is_empty(), "{refused:?}");
        assert_refused(&output, &[&refused.to_string(), "--layers 2,3"], &format!("{extra:?}"));
    }
    assert!(!out.join("lns").exists() && !out.join("pre-ln").exists(), "a refused sweep trained");
}

#[test]
fn an_init_sweep_crosses_every_scheme_with_every_init() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("inits");
    let args =
        ["--schemes", "pre-ln,lns", "--inits", "normal,scaled", "--no-diagnostics", "--baseline", "pre-ln+scaled"];
    run(&mut sweep_command(&out, &args));
    for (group, init) in
        [("pre-ln", "normal"), ("pre-ln+scaled", "scaled"), ("lns", "normal"), ("lns+scaled", "scaled")]
    {
        let train: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out.join(group).join("seed-1/train.json")).unwrap()).unwrap();
        assert_eq!(train["init"], init, "{group}");
    }
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report/results.json")).unwrap()).unwrap();
    let schemes: Vec<&str> =
        report["results"].as_array().unwrap().iter().map(|r| r["scheme"].as_str().unwrap()).collect();
    assert_eq!(schemes, ["pre-ln", "pre-ln+scaled", "lns", "lns+scaled"]);
    let paired = report["paired"].as_array().unwrap();
    assert!(paired.iter().all(|p| p["baseline"] == "pre-ln+scaled") && paired.len() == 3, "{paired:?}");
    // A file put beside the report is kept: the rerun refuses before any work, naming it.
    std::fs::write(out.join("report/notes.md"), "mine").unwrap();
    let output = sweep_command(&out, &args).output().unwrap();
    assert_refused(&output, &["notes.md"], "a file of the user's in the report folder");
    assert!(output.stdout.is_empty(), "refused before any work");
    assert_eq!(std::fs::read_to_string(out.join("report/notes.md")).unwrap(), "mine");
}

#[test]
fn an_init_axis_without_normal_pairs_with_its_first_pre_ln_and_names_arms_as_given() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("inits");
    let args = ["--schemes", "pre-ln,gpas:lns", "--inits", "scaled", "--no-diagnostics"];
    run(&mut sweep_command(&out, &args));
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report/results.json")).unwrap()).unwrap();
    let paired = report["paired"].as_array().unwrap();
    assert!(paired.len() == 1 && paired[0]["baseline"] == "pre-ln+scaled", "{paired:?}");
    // An arm is named as --schemes and --inits write it, and a name it lacks lists them so.
    for name in ["gpas:lns+scaled", "gpas-lns+scaled"] {
        run(&mut sweep_command(&out, &[&args[..], &["--baseline", name]].concat()));
    }
    let output = sweep_command(&out, &[&args[..], &["--baseline", "pre-ln"]].concat()).output().unwrap();
    let sweep = read_record(&out).sweep();
    let refused = parse_baseline(&sweep, Some("pre-ln")).unwrap_err();
    let ConfigError::Conflict(message) = &refused else { panic!("{refused:?}") };
    // It lists the arms as --schemes and --inits write them.
    let arms = sweep.pairs().iter().map(|pair| format!("{}+{}", pair.scheme, pair.init.unwrap())).collect::<Vec<_>>();
    assert!(arms.len() == 2 && arms.iter().all(|arm| message.contains(arm.as_str())), "{arms:?}: {message}");
    assert_refused(&output, &[message], "a baseline that is no arm");
    // A model file's own init and --inits both set the init: refused.
    let model = dir.path().join("model.json");
    let config = layernorm_scaling::LlamaConfig::tiny().with_init(Some("scaled".parse().unwrap()));
    std::fs::write(&model, serde_json::to_string(&config).unwrap()).unwrap();
    let output = Command::new(example("sweep"))
        .args(["--device", "flex", "--out"])
        .arg(dir.path().join("other"))
        .arg("--model")
        .arg(&model)
        .args(args)
        .output()
        .unwrap();
    // The library's refusal of the same sweep, naming the init.
    let mut config = TrainConfig::default();
    config.model.preset = model.display().to_string();
    config.output.out = dir.path().join("other");
    let schemes = parse_schemes("pre-ln,gpas:lns").unwrap();
    let sweep = Sweep { config, schemes, seeds: vec![1], inits: parse_inits("scaled").unwrap(), ..Sweep::default() };
    let refused = sweep.check().unwrap_err();
    let Error::Sweep(SweepError::InitTwice { init: InitScheme::Scaled, in_model_file: true, .. }) = &refused else {
        panic!("{refused:?}")
    };
    assert_refused(
        &output,
        &[&refused.to_string(), "the model file's init `scaled`"],
        "the model file's init beside --inits",
    );
    assert!(!dir.path().join("other").exists(), "nothing is written");
}

/// Issue 55: the number of devices is part of every pair's batch. A sweep continued on two
/// devices is refused and leaves `sweep.json` as it was; continued on another device of the same
/// number, the new pair records it as its own and the finished pair keeps the sweep's.
#[test]
fn a_sweep_on_other_devices_never_rewrites_what_its_finished_pairs_ran_on() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sweep");
    let on = |device: &str, schemes: &str| {
        let mut command = Command::new(example("sweep"));
        command.args(["--model", "tiny", "--device", device, "--steps", "4", "--eval-every", "2", "--batch-size", "4"]);
        command.args(["--seq-len", "32", "--builtin-docs", "400", "--eval-batches", "2", "--samples", "0"]);
        command.args(["--no-diagnostics", "--schemes", schemes, "--out"]).arg(&out);
        command
    };
    let read =
        || -> SweepRecord { serde_json::from_str(&std::fs::read_to_string(out.join("sweep.json")).unwrap()).unwrap() };
    run(&mut on("flex", "pre-ln"));
    let recorded = std::fs::read(out.join("sweep.json")).unwrap();
    let output = on("flex,flex", "pre-ln,lns").output().unwrap();
    assert_refused(&output, &["devices: 1 -> 2"], "a sweep continued on two devices");
    assert!(std::fs::read(out.join("sweep.json")).unwrap() == recorded, "sweep.json is unchanged");
    assert!(!out.join("lns").exists(), "nothing was trained");

    let finished = read().outcomes["pre-ln/seed-1"].clone();
    run(&mut on("FLEX", "pre-ln,lns"));
    let record = read();
    assert_eq!(record.config.device, "flex", "the devices the sweep began on");
    assert_eq!(record.devices.into_iter().collect::<Vec<_>>(), [("lns/seed-1".to_string(), "FLEX".to_string())]);
    assert_eq!(record.outcomes["pre-ln/seed-1"], finished);
}

/// A finished pair its record lacks (a sweep killed between a pair's end and its record) is
/// measured again in the float type it trained in: a pure-bf16 pair's validation loss is the one
/// its training reported, to the bit (its weights were measured on a device in f32).
#[test]
fn a_finished_bf16_pair_is_measured_again_in_bf16() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sweep");
    let args = ["--schemes", "lns", "--precision", "bf16", "--no-diagnostics"];
    run(&mut sweep_command(&out, &args));
    let path = out.join("sweep.json");
    let mut record: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let trained = record["outcomes"]["lns/seed-1"].clone();
    assert!(trained["outcome"] == "finished" && trained["valid_loss"].is_f64(), "{trained}");
    record["outcomes"].as_object_mut().unwrap().remove("lns/seed-1");
    std::fs::write(&path, record.to_string()).unwrap();
    run(&mut sweep_command(&out, &args));
    let measured: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(measured["outcomes"]["lns/seed-1"], trained);
}
