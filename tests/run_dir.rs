//! Issue 21: the run directory never loses a run. A finished run stays finished without its
//! checkpoints, a failed checkpoint save keeps the one before it, and `--overwrite` can be killed
//! (or fail) at every step of setting the old run aside and putting it back. Kills happen at
//! named crash points (`LAYERNORM_SCALING_CRASH_AT`), where the program aborts as under `kill -9`.

mod common;
use common::edited;

use std::path::Path;
use std::process::{Command, Output, Stdio};

use common::{example, expect_refusal, load_problem, quick, require_fault_points, snapshot, weights};
use layernorm_scaling::io::{verify_sum, CRASH_AT, FAIL_AT};
use layernorm_scaling::run::{FoundInstead, LoadProblem, ModelDirProblem, RunDirError, PREVIOUS_RUN};
use layernorm_scaling::train::{train, RunDir, Start, TrainConfig, TrainEvent};
use layernorm_scaling::Error;

/// Resumes `config`'s run, which must be refused by the run directory with an error that `is`
/// accepts, and leave every file of the run as it was.
fn refused_untouched(config: &TrainConfig, is: impl Fn(&RunDirError) -> bool) {
    let before = snapshot(&config.output.out);
    expect_refusal(config, Start::Resume, is);
    assert_eq!(snapshot(&config.output.out), before, "nothing written");
}

/// Asserts that a run of the train example failed cleanly (exit code 1, no panic) and reported
/// `expected`, the library's own error for the case, as it words it.
fn assert_reports(output: &Output, expected: &Error) {
    common::assert_refused(output, &[&expected.to_string()], &format!("{expected:?}"));
}

/// The library's refusal of a resume of the finished 10-step run in `out`.
fn finished_10_steps(out: &Path) -> Error {
    Error::run_dir(out, RunDirError::Finished { steps: 10, run: out.to_path_buf() })
}

/// A finished 10-step run in `<dir>/run` with a report of its own in `analysis/`.
/// A finished run, as [`common::finished_run`], with its analysis report written.
fn finished_run(dir: &Path) -> TrainConfig {
    let config = common::finished_run(dir);
    write_report(&config.output.out);
    config
}

/// A report in `out/analysis/` as `analyze` writes it (with its `.contents`).
fn write_report(out: &Path) {
    layernorm_scaling::io::write_dir_atomically(&out.join("analysis"), "report.json", |tmp| {
        std::fs::write(tmp.join("report.json"), "{}")
    })
    .unwrap();
}

#[test]
fn a_finished_run_stays_finished_without_its_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let config = finished_run(dir.path());
    let lower_lr = edited(&config, |c| c.optim.lr = 0.01);
    // Checkpoints whose sums are all damaged, then no checkpoints at all (deleted to free the disk).
    for sum in std::fs::read_dir(config.output.out.join("checkpoint")).unwrap().flatten() {
        if sum.file_name().to_string_lossy().ends_with(".sum") {
            std::fs::write(sum.path(), "crc32 00000000 bytes 1\n").unwrap();
        }
    }
    // Refused as finished (its advice: --init-from), naming the run's steps and directory.
    let out = &config.output.out;
    let finished = |e: &RunDirError| matches!(e, RunDirError::Finished { steps: 10, run } if run == out);
    refused_untouched(&lower_lr, finished);
    std::fs::remove_dir_all(config.output.out.join("checkpoint")).unwrap();
    refused_untouched(&lower_lr, finished);
}

#[test]
fn a_set_aside_that_fails_half_way_puts_the_run_back() {
    let dir = tempfile::tempdir().unwrap();
    let config = finished_run(dir.path());
    let before = snapshot(&config.output.out);
    let run = RunDir::open(&config.output.out, TrainConfig::check_run_settings).unwrap();
    // `model.bpk` cannot be moved: something is in its way in `.previous-run/`.
    std::fs::create_dir_all(config.output.out.join(PREVIOUS_RUN).join("model.bpk/in-the-way")).unwrap();
    run.set_aside().unwrap_err();
    drop(run);
    assert_eq!(snapshot(&config.output.out), before, "the run is whole, in its directory");
    assert!(!config.output.out.join(PREVIOUS_RUN).exists());
}

/// The train example as [`quick`] configures it (validated and saved every 5 steps; 10 steps,
/// warmup 5 and lr 0.003 unless `extra` says otherwise) into `out`, with `extra` options,
/// crashing at `crash_at`.
fn train_command(out: &Path, extra: &[&str], crash_at: Option<&str>) -> Command {
    let mut command = Command::new(example("train"));
    command.args(["--device", "flex", "--model", "tiny", "--builtin-docs", "2000", "--seq-len", "64"]);
    command.args(["--batch-size", "8", "--eval-every", "5"]);
    command.args(["--save-every", "5", "--eval-batches", "4", "--samples", "0", "--out"]).arg(out);
    command.arg("--cache-dir").arg(out.parent().unwrap().join("cache")).args(extra);
    // Each given once (the program refuses an option given twice): `extra`'s value, else this one.
    for (option, value) in [("--steps", "10"), ("--warmup", "5"), ("--lr", "0.003")] {
        if !extra.contains(&option) {
            command.args([option, value]);
        }
    }
    command.env_remove(CRASH_AT).env_remove(FAIL_AT);
    if let Some(point) = crash_at {
        require_fault_points();
        command.env(CRASH_AT, point);
    }
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    command
}

fn train_example(out: &Path, extra: &[&str], crash_at: Option<&str>) -> Output {
    train_command(out, extra, crash_at).output().unwrap()
}

/// Runs the train example into `out` with `extra` options, asserting that it was killed at the
/// crash point `point` (it names the point as it aborts there).
fn crash_at(out: &Path, extra: &[&str], point: &str) {
    let crashed = train_example(out, extra, Some(point));
    let stderr = String::from_utf8_lossy(&crashed.stderr);
    assert!(!crashed.status.success(), "{point}: it crashed");
    assert!(stderr.contains(&format!("{CRASH_AT}={point}")), "{point}: {stderr}");
}

#[test]
fn an_overwrite_killed_anywhere_leaves_the_old_run_or_the_new_one_never_a_mix() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    assert!(train_example(&out, &[], None).status.success());
    write_report(&out);
    let old = snapshot(&out);
    let old_weights = weights(&out);
    // The new run differs from the old one (another seed), so their files can be told apart.
    let overwrite = ["--overwrite", "--seed", "7"];
    let points = [
        "set-aside:checkpoint",
        "set-aside:train.json",
        "set-aside:model.bpk",
        "set-aside:metrics.jsonl",
        "set-aside:analysis",
        "record:model.json",
    ];
    for point in points {
        crash_at(&out, &overwrite, point);
        // Whatever reads the directory next (here a training that fails its checks at once,
        // which still opens it) finds the old run whole.
        assert_reports(&train_example(&out, &["--resume"], None), &finished_10_steps(&out));
        assert_eq!(snapshot(&out), old, "{point}: the old run is back, byte for byte");
    }
    // Killed while the old run is put back after a failed new run, then while it is discarded
    // after a successful one.
    let diverging = ["--overwrite", "--lr", "1e30", "--warmup", "0"];
    for point in ["put-back:checkpoint", "put-back:model.bpk", "put-back:analysis"] {
        crash_at(&out, &diverging, point);
        assert_reports(&train_example(&out, &["--resume"], None), &finished_10_steps(&out));
        assert_eq!(snapshot(&out), old, "{point}: the old run is back, byte for byte");
    }
    crash_at(&out, &overwrite, "discard");
    assert_reports(&train_example(&out, &["--resume", "--seed", "7"], None), &finished_10_steps(&out));
    assert!(weights(&out) != old_weights, "the new run is kept");
    assert!(!out.join("analysis").exists(), "the old run's report went with it");
    let names: Vec<String> =
        std::fs::read_dir(&out).unwrap().flatten().map(|e| e.file_name().into_string().unwrap()).collect();
    assert!(names.iter().all(|name| !name.starts_with(".previous-run")), "{names:?}");
}

#[test]
fn a_checkpoint_that_cannot_be_saved_never_costs_the_one_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    // Keeping one checkpoint (0 means 1): the second save fails, as on a full disk.
    let keep_one = ["--keep-checkpoints", "0", "--steps", "15"];
    let mut command = train_command(&out, &keep_one, None);
    require_fault_points();
    let full_disk_at = "save:optim-10";
    let failed = command.env(FAIL_AT, full_disk_at).output().unwrap();
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert_eq!(failed.status.code(), Some(1), "{stderr}");
    // The write error reported is the one injected there (`... ({FAIL_AT}=<point>)`), not a panic.
    assert!(stderr.contains(&format!("{FAIL_AT}={full_disk_at}")) && !stderr.contains("panicked"), "{stderr}");
    for kind in ["model", "optim", "scheduler"] {
        let path = out.join(format!("checkpoint/{kind}-step-5.bpk"));
        assert_eq!(verify_sum(&path), Ok(()), "{kind} of step 5 is kept");
    }
    // With the disk free again, the run resumes from step 5, not from 0, and ends with one checkpoint.
    let resumed = train_command(&out, &[&keep_one[..], &["--resume"]].concat(), None).output().unwrap();
    let stdout = String::from_utf8_lossy(&resumed.stdout);
    assert!(resumed.status.success(), "{}", String::from_utf8_lossy(&resumed.stderr));
    assert!(stdout.contains(&TrainEvent::Resumed { step: 5 }.to_string()), "{stdout}");
    let mut left: Vec<String> = std::fs::read_dir(out.join("checkpoint"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".bpk"))
        .collect();
    left.sort();
    assert_eq!(left, ["model-step-15.bpk", "optim-step-15.bpk", "scheduler-step-15.bpk"]);
}

#[test]
fn a_start_killed_between_the_first_files_starts_again() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    crash_at(&out, &[], "record:model.json");
    // It holds no train.json: nothing to resume (start a new run without --resume).
    assert_reports(&train_example(&out, &["--resume"], None), &Error::run_dir(&out, RunDirError::NothingToResume));
    let again = train_example(&out, &[], None);
    assert!(again.status.success(), "{}", String::from_utf8_lossy(&again.stderr));
    assert!(verify_sum(&out.join("model.bpk")).is_ok());
}

/// The final save writes model.json before the model: a kill between them leaves a run that a
/// resume finishes. The other order left a finished run whose model.json said `"steps": 0`.
#[test]
fn a_kill_in_the_final_save_leaves_a_run_that_a_resume_finishes() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    crash_at(&out, &[], "final-model:after-model-json");
    assert!(verify_sum(&out.join("model.bpk")).is_err(), "not finished yet");
    let resumed = train_example(&out, &["--resume"], None);
    assert!(resumed.status.success(), "{}", String::from_utf8_lossy(&resumed.stderr));
    assert!(verify_sum(&out.join("model.bpk")).is_ok() && verify_sum(&out.join("model.json")).is_ok());
    let read = |name: &str| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(out.join(name)).unwrap()).unwrap()
    };
    assert_eq!(read("model.json")["steps"], read("train.json")["steps"]);
}

#[test]
fn an_overwrite_killed_before_its_first_checkpoint_is_named_by_the_programs_that_load_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    assert!(train_example(&out, &[], None).status.success());
    crash_at(&out, &["--overwrite", "--seed", "7"], "record:model.json");
    // The run set aside is named, with how to get it back or finish the new one.
    let replacing = LoadProblem::Replacing { run: out.clone(), aside: out.join(PREVIOUS_RUN) };
    assert_eq!(load_problem(&out, None), (out.join("model.bpk"), replacing));
}

#[test]
fn a_run_can_replace_the_run_it_starts_from_and_a_sweep_is_not_a_run() {
    let dir = tempfile::tempdir().unwrap();
    let config = finished_run(dir.path());
    let old = weights(&config.output.out);
    let longer = edited(&config, |c| c.model.init_from = Some(config.output.out.clone()));
    let report = train(&longer, Start::Overwrite, |_| {}).unwrap();
    assert_eq!(report.steps_trained, 10);
    assert!(weights(&config.output.out) != old, "trained on from the old weights, in place");
    assert!(!config.output.out.join(PREVIOUS_RUN).exists() && !config.output.out.join("analysis").exists());

    let sweep = dir.path().join("sweep");
    std::fs::create_dir(&sweep).unwrap();
    std::fs::write(sweep.join("sweep.json"), "{}").unwrap();
    // A sweep's runs are two levels down (`<scheme>/seed-<n>`): the error names one of them.
    let run_inside = sweep.join("lns").join("seed-1");
    std::fs::create_dir_all(&run_inside).unwrap();
    std::fs::copy(config.output.out.join("model.json"), run_inside.join("model.json")).unwrap();
    let from_sweep = {
        let mut config = quick(&dir.path().join("new"), 10, 5);
        config.model.init_from = Some(sweep.clone());
        config
    };
    let err = train(&from_sweep, Start::New, |_| {}).unwrap_err();
    // Neither kind of model directory: a folder of runs, one of which is named.
    let Error::ModelDir {
        dir: given,
        problem: ModelDirProblem::NeitherKind { what: FoundInstead::HoldsRuns { run, .. }, .. },
    } = &err
    else {
        panic!("{err:?}")
    };
    assert!(*given == sweep && *run == run_inside, "{err}");
    assert!(!dir.path().join("new").exists());
}

#[test]
fn a_replacement_killed_after_its_first_checkpoint_keeps_the_old_run_until_it_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    assert!(train_example(&out, &[], None).status.success());
    let old_model = std::fs::read(out.join("model.bpk")).unwrap();
    // Killed when the new run checkpoints for the third time: its first checkpoint is complete.
    let new_run = ["--seed", "7", "--steps", "20"];
    crash_at(&out, &[&new_run[..], &["--overwrite"]].concat(), "checkpoint:3");
    let replacing = LoadProblem::Replacing { run: out.clone(), aside: out.join(PREVIOUS_RUN) };
    assert_eq!(load_problem(&out, None), (out.join("model.bpk"), replacing));
    // A resume with the old run's settings is refused, and deletes nothing.
    let refused = train_example(&out, &["--resume", "--seed", "1"], None);
    assert_eq!(refused.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("seed: 7 -> 1") && stderr.contains("train.json --resume"), "{stderr}");
    assert_eq!(std::fs::read(out.join(PREVIOUS_RUN).join("model.bpk")).unwrap(), old_model, "the old run is kept");
    // A resume of the new run finishes it; then the old run goes.
    let resumed = train_example(&out, &[&new_run[..], &["--resume"]].concat(), None);
    assert!(resumed.status.success(), "{}", String::from_utf8_lossy(&resumed.stderr));
    assert!(!out.join(PREVIOUS_RUN).exists());
    assert!(verify_sum(&out.join("model.bpk")).is_ok());
}

#[test]
fn a_final_model_that_fails_its_checksum_is_never_trained_over_from_step_0() {
    let dir = tempfile::tempdir().unwrap();
    let config = finished_run(dir.path());
    std::fs::remove_dir_all(config.output.out.join("checkpoint")).unwrap();
    std::fs::write(config.output.out.join("model.bpk.sum"), "crc32 00000000 bytes 1\n").unwrap();
    // Nothing can finish it (its model does not verify, no checkpoint): train it again with --overwrite.
    let nothing_can_finish = |e: &RunDirError| matches!(e, RunDirError::NothingCanFinish);
    refused_untouched(&edited(&config, |c| c.optim.lr = 0.01), nothing_can_finish);
    // The final model and its checksum deleted: the metrics still say the run reached its end.
    std::fs::remove_file(config.output.out.join("model.bpk")).unwrap();
    std::fs::remove_file(config.output.out.join("model.bpk.sum")).unwrap();
    // Refused as such: resuming would train it again from step 0.
    refused_untouched(&config, nothing_can_finish);
}

#[test]
fn sizes_that_would_overflow_or_exhaust_memory_are_refused_before_the_directory_is_touched() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    for (config, expected) in [
        (
            {
                let mut config = quick(&out, 10, 5);
                config.eval.eval_batches = usize::MAX;
                config
            },
            "eval_batches",
        ),
        (
            {
                let mut config = quick(&out, 10, 5);
                config.data.builtin_docs = usize::MAX;
                config
            },
            "builtin_docs",
        ),
    ] {
        let err = train(&config, Start::New, |_| {}).unwrap_err().to_string();
        assert!(err.contains(expected), "{err}");
        assert!(!out.exists(), "{expected}: nothing written");
    }
}
