//! TensorBoard event files of the train and sweep examples, read back and checked against each
//! run's `metrics.jsonl` and `tracking.jsonl`: by the crate's own record reader always, and by
//! TensorBoard's reader (`scripts/check_tensorboard.py`) where `LNS_TENSORBOARD_PYTHON` names a
//! Python with the `tensorboard` package (CI sets it).

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::{example, require_fault_points};
use layernorm_scaling::io::{CRASH_AT, FAIL_AT};
use layernorm_scaling::tensorboard::proto::{ValueKind, What};
use layernorm_scaling::tensorboard::record::{read_events, read_records};

/// The train example on the tiny model, validated and saved every 5 steps (10 steps unless
/// `extra` says otherwise).
fn train(out: &Path, extra: &[&str], env: &[(&str, &str)]) -> Output {
    let mut command = Command::new(example("train"));
    command.args(["--device", "flex", "--model", "tiny", "--builtin-docs", "600", "--seq-len", "32"]);
    command.args(["--batch-size", "4", "--warmup", "3", "--eval-every", "5", "--eval-batches", "2"]);
    command.args(["--samples", "0", "--out"]).arg(out).args(extra);
    command.arg("--cache-dir").arg(out.parent().unwrap().join("cache"));
    if !extra.contains(&"--steps") {
        command.args(["--steps", "10"]);
    }
    if !env.is_empty() {
        require_fault_points();
    }
    command.env_remove(CRASH_AT).env_remove(FAIL_AT).envs(env.iter().copied());
    command.stdout(Stdio::piped()).stderr(Stdio::piped()).output().unwrap()
}

fn assert_success(output: &Output) {
    assert!(
        output.status.success(),
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The event files in the run's `tensorboard/`.
fn event_files(run: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(run.join("tensorboard")) else { return Vec::new() };
    entries
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_str().unwrap().contains("tfevents"))
        .collect()
}

/// `(tag, step) -> value` of the scalars in `file`, asserting that no tag repeats a step and
/// that the first record is the version.
fn scalars(bytes: &[u8]) -> BTreeMap<(String, u64), f32> {
    let (events, _torn) = read_events(bytes);
    assert_eq!(events[0].what, Some(What::FileVersion("brain.Event:2".into())));
    let mut points = BTreeMap::new();
    for event in &events[1..] {
        let Some(What::Summary(summary)) = &event.what else { panic!("not a summary: {event:?}") };
        for value in &summary.value {
            if let Some(ValueKind::SimpleValue(v)) = value.value {
                let old = points.insert((value.tag.clone(), event.step as u64), v);
                assert!(old.is_none(), "{} at step {} written twice", value.tag, event.step);
            }
        }
    }
    points
}

/// What the run's records say TensorBoard should show: the training values per step (the
/// micro-batches' mean weighted by their counts), each validation's final values, the tracking
/// records' per-layer values.
fn expected(run: &Path) -> BTreeMap<(String, u64), f64> {
    let names = [
        ("Loss", "loss"),
        ("Perplexity", "perplexity"),
        ("Learning Rate", "learning_rate"),
        ("Tokens per second", "tokens_per_second"),
        ("Gradient norm", "gradient_norm"),
        ("Loss scale", "loss_scale"),
        ("Skipped steps", "skipped_steps"),
    ];
    let name = |metric: &str| names.iter().find(|(m, _)| *m == metric).unwrap_or_else(|| panic!("{metric}")).1;
    let mut sums: BTreeMap<(String, u64), (f64, f64)> = BTreeMap::new();
    let mut points = BTreeMap::new();
    for row in layernorm_scaling::run::read_metrics(run).unwrap() {
        let key = (format!("{}/{}", row.split, name(&row.metric)), row.step as u64);
        match (row.split.as_str(), row.is_final, row.count) {
            ("train", false, Some(count)) if count > 0 => {
                let sum = sums.entry(key).or_default();
                sum.0 += row.value * count as f64;
                sum.1 += count as f64;
            }
            ("valid", true, _) => {
                points.insert(key, row.value);
            }
            _ => {}
        }
    }
    points.extend(sums.into_iter().map(|(key, (sum, weight))| (key, sum / weight)));
    if run.join("tracking.jsonl").is_file() {
        for record in layernorm_scaling::run::read_tracking(run).unwrap() {
            for (i, v) in record.block_output_variance.iter().enumerate() {
                points.insert((format!("layers/output_variance/{i:02}"), record.step as u64), *v);
            }
            for (i, v) in record.grad_norm.iter().enumerate() {
                points.insert((format!("layers/grad_norm/{:02}", i + 1), record.step as u64), *v);
            }
        }
    }
    points
}

/// Asserts that the run has one event file whose scalars are its records' (all of them, each
/// step once), and that TensorBoard reads the same where it is installed.
fn assert_events_match_records(run: &Path) {
    let files = event_files(run);
    assert_eq!(files.len(), 1, "{}: {files:?}", run.display());
    let actual = scalars(&std::fs::read(&files[0]).unwrap());
    let expected = expected(run);
    for (key, value) in &expected {
        let read = actual.get(key).unwrap_or_else(|| panic!("{}: {key:?} is not in the events", run.display()));
        // JSON writes any non-finite value as null (NaN here); the event file keeps the value.
        assert!(*read == *value as f32 || (value.is_nan() && !read.is_finite()), "{key:?}: {read} != {value}");
    }
    let train_steps = |points: Vec<&(String, u64)>| points.into_iter().filter(|(t, _)| t == "train/loss").count();
    assert_eq!(train_steps(actual.keys().collect()), train_steps(expected.keys().collect()));
    assert!(actual.keys().any(|(tag, _)| tag == "valid/perplexity"));
    tensorboard_reads(run);
}

/// `scripts/check_tensorboard.py` on `run`, with TensorBoard's own reader, where
/// `LNS_TENSORBOARD_PYTHON` names a Python that has it.
fn tensorboard_reads(run: &Path) {
    let Some(python) = std::env::var_os("LNS_TENSORBOARD_PYTHON") else {
        eprintln!("LNS_TENSORBOARD_PYTHON is not set: {} checked by the crate's reader only", run.display());
        return;
    };
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/check_tensorboard.py");
    let output = Command::new(python).arg(script).args(["--torn", "10"]).arg(run).output().unwrap();
    assert_success(&output);
    eprint!("{}", String::from_utf8_lossy(&output.stdout));
}

#[test]
fn a_fresh_run_charts_every_step_its_validations_and_its_layers() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    assert_success(&train(&run, &[], &[]));
    assert_events_match_records(&run);
    // The curse's picture by default: the layers' variance at every validation (steps 0 and 5).
    let points = scalars(&std::fs::read(&event_files(&run)[0]).unwrap());
    let variance_steps: Vec<u64> =
        points.keys().filter(|(tag, _)| tag == "layers/output_variance/04").map(|(_, step)| *step).collect();
    assert_eq!(variance_steps, [0, 5]);
}

#[test]
fn an_f16_run_charts_its_loss_scale_and_skipped_steps() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    // The scale starts at 2^30, so that the first steps overflow and are skipped.
    let output = train(&run, &["--precision", "f16-mixed"], &[(FAIL_AT, "f16-overflow")]);
    assert_success(&output);
    assert_events_match_records(&run);
    let points = scalars(&std::fs::read(&event_files(&run)[0]).unwrap());
    let series = |name: &str| -> Vec<f32> {
        points.iter().filter(|((tag, _), _)| tag == name).map(|(_, value)| *value).collect()
    };
    let (scale, skipped) = (series("train/loss_scale"), series("train/skipped_steps"));
    assert_eq!((scale.len(), skipped.len()), (10, 10));
    assert!(scale[0] < 2f32.powi(30) && scale.windows(2).all(|w| w[1] <= w[0]), "{scale:?}");
    assert!(skipped[0] >= 1.0 && skipped.windows(2).all(|w| w[1] >= w[0]), "{skipped:?}");
}

#[test]
fn a_run_killed_after_its_checkpoint_and_resumed_charts_each_step_once() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    // Two micro-batches a step; killed as it validates step 15, after logging steps 11 to 15,
    // with the checkpoint of step 10 its last.
    let args = ["--steps", "20", "--grad-accum", "2"];
    let killed = train(&run, &args, &[(CRASH_AT, "checkpoint:3")]);
    assert!(!killed.status.success());
    let before_bytes = std::fs::read(&event_files(&run)[0]).unwrap();
    let before = scalars(&before_bytes);
    assert!(before.contains_key(&("train/loss".into(), 15)), "the killed run logged step 15");
    let resumed = train(&run, &[&args[..], &["--resume"]].concat(), &[]);
    assert_success(&resumed);
    assert_events_match_records(&run);
    let after_bytes = std::fs::read(&event_files(&run)[0]).unwrap();
    let after = scalars(&after_bytes);
    let steps: Vec<u64> = after.keys().filter(|(tag, _)| tag == "train/loss").map(|(_, step)| *step).collect();
    assert_eq!(steps, (1..=20).collect::<Vec<_>>());
    // The history before the checkpoint is the killed run's own, at the times it was measured.
    for step in 1..=10 {
        let key = ("train/loss".to_string(), step);
        assert_eq!(after[&key], before[&key], "step {step}");
    }
    let (before, after) = (wall_times(&before_bytes), wall_times(&after_bytes));
    for step in 1..=10 {
        assert_eq!(after[&step], before[&step], "step {step}");
    }
}

/// When each step was first charted.
fn wall_times(bytes: &[u8]) -> BTreeMap<i64, f64> {
    let mut times = BTreeMap::new();
    for event in read_events(bytes).0.into_iter().filter(|e| matches!(e.what, Some(What::Summary(_)))) {
        times.entry(event.step).or_insert(event.wall_time);
    }
    times
}

#[test]
fn a_full_disk_stops_the_events_and_the_run_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    // The write of step 7 fails: one warning, nothing more written, every metric still logged.
    let run = dir.path().join("mid-run");
    let output = train(&run, &[], &[(FAIL_AT, "tensorboard:7")]);
    assert_success(&output);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(stderr.matches("TensorBoard").count(), 1, "{stderr}");
    common::assert_mentions(&stderr, &["cannot write", "tensorboard", "no space left", "the run goes on"]);
    let points = scalars(&std::fs::read(&event_files(&run)[0]).unwrap());
    let steps: Vec<u64> = points.keys().filter(|(tag, _)| tag == "train/loss").map(|(_, step)| *step).collect();
    assert_eq!(steps, [1, 2, 3, 4, 5, 6]);
    assert_eq!(layernorm_scaling::run::read_metrics(&run).unwrap().iter().filter(|r| r.is_train_loss()).count(), 10);
    // Full from the start: no event file, one warning, a finished run.
    let run = dir.path().join("from-start");
    let output = train(&run, &[], &[(FAIL_AT, "tensorboard")]);
    assert_success(&output);
    common::assert_mentions(&String::from_utf8_lossy(&output.stderr), &["cannot start TensorBoard", "goes on"]);
    assert!(event_files(&run).is_empty());
    assert!(run.join("model.bpk").is_file());
}

#[test]
fn events_turned_off_are_written_later_by_the_tensorboard_example() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    assert_success(&train(&run, &["--tensorboard", "false", "--track-every", "5"], &[]));
    assert!(!run.join("tensorboard").exists());
    let output = Command::new(example("tensorboard")).arg(&run).output().unwrap();
    assert_success(&output);
    assert!(String::from_utf8_lossy(&output.stdout).contains("steps 0 to 10"));
    assert_events_match_records(&run);
    // Not while a training holds the run's lock (it writes its own events).
    let lock = std::fs::File::open(run.join(".lock")).unwrap();
    lock.lock().unwrap();
    let output = Command::new(example("tensorboard")).arg(&run).output().unwrap();
    assert!(!output.status.success());
    common::assert_mentions(&String::from_utf8_lossy(&output.stderr), &["is writing this run", "wait"]);
    drop(lock);
    // Again: the file is replaced, not doubled.
    let output = Command::new(example("tensorboard")).arg(&run).output().unwrap();
    assert!(String::from_utf8_lossy(&output.stdout).contains("replacing 1 older event file"));
    assert_eq!(event_files(&run).len(), 1);
    // What is not a run is refused, with what to give instead, and the runs after it are written.
    let output = Command::new(example("tensorboard")).arg(dir.path()).arg(&run).output().unwrap();
    assert!(!output.status.success());
    common::assert_mentions(&String::from_utf8_lossy(&output.stderr), &["metrics.jsonl", "run directory"]);
    assert!(String::from_utf8_lossy(&output.stdout).contains("steps 0 to 10"));
}

#[test]
fn the_tensorboard_example_never_replaces_a_file_with_less() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    assert_success(&train(&run, &[], &[]));
    let before = std::fs::read(&event_files(&run)[0]).unwrap();
    let convert = || Command::new(example("tensorboard")).arg(&run).output().unwrap();
    let metrics = run.join("metrics.jsonl");
    let text = std::fs::read_to_string(&metrics).unwrap();
    // A damaged line, then a log cut to its first steps, then an empty log: each refused, the
    // event file left as the training wrote it.
    let mut lines: Vec<&str> = text.lines().collect();
    lines[12] = "{\"split\":\"train\", garbage";
    let cases = [
        (lines.join("\n") + "\n", vec!["metrics.jsonl", "line 13"]),
        (text.lines().take(10).collect::<Vec<_>>().join("\n") + "\n", vec!["charts steps up to 10", "kept"]),
        (String::new(), vec!["holds no metrics"]),
    ];
    for (log, words) in cases {
        std::fs::write(&metrics, log).unwrap();
        let output = convert();
        assert!(!output.status.success());
        common::assert_mentions(&String::from_utf8_lossy(&output.stderr), &words);
        assert_eq!(std::fs::read(&event_files(&run)[0]).unwrap(), before);
    }
}

#[test]
fn files_of_others_in_tensorboard_are_neither_deleted_nor_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    let args = ["--steps", "15"];
    assert!(!train(&run, &args, &[(CRASH_AT, "checkpoint:2")]).status.success());
    let events = run.join("tensorboard");
    std::fs::write(events.join("events.out.tfevents.0.backup"), b"a copy of mine").unwrap();
    std::fs::create_dir(events.join("aaa.tfevents.d")).unwrap();
    assert_success(&train(&run, &[&args[..], &["--resume"]].concat(), &[]));
    assert!(events.join("events.out.tfevents.0.backup").is_file());
    assert!(events.join("aaa.tfevents.d").is_dir());
    assert_eq!(event_files(&run).iter().filter(|p| p.is_file()).count(), 2, "the run's and the backup");
    // `--overwrite` would delete them with the run: refused, naming them.
    let output = train(&run, &["--overwrite"], &[]);
    assert!(!output.status.success());
    common::assert_mentions(&String::from_utf8_lossy(&output.stderr), &["tensorboard/events.out.tfevents.0.backup"]);
}

#[test]
fn a_last_validation_interval_shorter_than_the_others_is_charted_at_its_own_step() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    assert_success(&train(&run, &["--steps", "12"], &[]));
    let points = scalars(&std::fs::read(&event_files(&run)[0]).unwrap());
    let valid: Vec<u64> = points.keys().filter(|(tag, _)| tag == "valid/loss").map(|(_, step)| *step).collect();
    assert_eq!(valid, [5, 10, 12]);
    assert_events_match_records(&run);
}

#[test]
fn a_torn_last_record_is_dropped_and_the_rest_reads() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    assert_success(&train(&run, &["--steps", "5"], &[]));
    let bytes = std::fs::read(&event_files(&run)[0]).unwrap();
    let whole = scalars(&bytes);
    let (records, torn) = read_records(&bytes);
    assert!(!torn);
    let last = records.last().unwrap().len() + 16;
    for cut in bytes.len() - last..bytes.len() {
        let (read, torn) = read_records(&bytes[..cut]);
        assert_eq!((read.len(), torn), (records.len() - 1, cut > bytes.len() - last), "cut at {cut}");
        let points = scalars(&bytes[..cut]);
        assert!(points.iter().all(|(key, value)| whole[key] == *value));
    }
}

#[test]
fn a_two_seed_sweep_writes_events_for_each_run() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("sweep");
    let mut command = Command::new(example("sweep"));
    command.args(["--model", "tiny", "--device", "flex", "--steps", "6", "--eval-every", "3", "--batch-size", "4"]);
    command.args(["--seq-len", "32", "--builtin-docs", "400", "--eval-batches", "2", "--samples", "0", "--out"]);
    command.arg(&out).args(["--schemes", "pre-ln,lns", "--seeds", "1,2"]);
    assert_success(&command.output().unwrap());
    let mut runs = Vec::new();
    let mut stack = vec![out.clone()];
    while let Some(dir) = stack.pop() {
        if dir.join("metrics.jsonl").is_file() {
            runs.push(dir);
        } else {
            stack.extend(std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).filter(|p| p.is_dir()));
        }
    }
    assert_eq!(runs.len(), 4, "{runs:?}");
    for run in &runs {
        assert_events_match_records(run);
    }
}
