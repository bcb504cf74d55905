//! Issue 10: nothing lost, nothing silently wrong. One test per failure found by the hostile
//! review (run directories, checkpoints, resume, defaults, metrics), each asserting the error,
//! and that nothing was lost or left behind; and a crash-safety test that kills trainings with
//! SIGKILL and resumes them.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{
    edited, example, expect_data_error, expect_error, expect_refusal, finished_run, load_problem, quick,
    refused_changes, require_fault_points, snapshot, weights,
};
use layernorm_scaling::data::{CacheProblem, DataError};
use layernorm_scaling::io::{FolderProblem, SumError, FAIL_AT};
use layernorm_scaling::run::load_run_model;
use layernorm_scaling::run::read_metrics;
use layernorm_scaling::run::{CheckpointList, FinishAdvice, LoadProblem, ReplacedRun, ResumeAdvice, RunDirError};
use layernorm_scaling::train::{model_config, train, RunDir, Start, TrainConfig, TrainEvent};
use layernorm_scaling::{ConfigError, Error, MemoryProblem};

#[test]
fn overwrite_checks_everything_before_touching_the_old_run() {
    let dir = tempfile::tempdir().unwrap();
    let config = finished_run(dir.path());
    let before = snapshot(&config.output.out);
    for bad in [
        edited(&config, |c| c.data.files = vec![dir.path().join("typo.txt")]),
        edited(&config, |c| c.device = "flexx".into()),
        edited(&config, |c| c.data.tokenizer = "missing.json".into()),
    ] {
        train(&bad, Start::Overwrite, |_| {}).unwrap_err();
        assert_eq!(snapshot(&config.output.out), before, "the finished run is intact");
    }
}

#[test]
fn an_overwrite_that_fails_before_its_first_checkpoint_puts_the_old_run_back() {
    let dir = tempfile::tempdir().unwrap();
    let config = finished_run(dir.path());
    let before = snapshot(&config.output.out);
    // Diverges at once: no checkpoint is ever written.
    let diverging = edited(&config, |c| {
        c.optim.lr = 1e30;
        c.optim.warmup = Some(0);
    });
    let err = train(&diverging, Start::Overwrite, |_| {}).unwrap_err();
    assert!(matches!(err, Error::Diverged { checkpoint: None, .. }), "{err:?}");
    assert_eq!(snapshot(&config.output.out), before, "the old run is back, byte for byte");
    assert!(!config.output.out.join(".previous-run").exists());
}

#[test]
fn a_crash_during_an_overwrite_restores_the_old_run_at_the_next_start() {
    let dir = tempfile::tempdir().unwrap();
    let config = finished_run(dir.path());
    let before = snapshot(&config.output.out);
    // What a kill leaves when the new run had started but written no checkpoint: the old run
    // set aside, the new run's first files beside it.
    let run = RunDir::open(&config.output.out, TrainConfig::check_run_settings).unwrap();
    run.set_aside().unwrap();
    std::fs::write(config.output.out.join("train.json"), "{}").unwrap();
    drop(run);
    RunDir::open(&config.output.out, TrainConfig::check_run_settings).unwrap();
    assert_eq!(snapshot(&config.output.out), before);

    // A resume after such a crash of a finished run says there is nothing to resume.
    let run = RunDir::open(&config.output.out, TrainConfig::check_run_settings).unwrap();
    run.set_aside().unwrap();
    let replacement = edited(&config, |c| c.seed = 5);
    std::fs::write(config.output.out.join("train.json"), serde_json::to_string(&replacement.resolved()).unwrap())
        .unwrap();
    drop(run);
    expect_refusal(&replacement, Start::Resume, |e| matches!(e, RunDirError::RestoredFinished));
    assert_eq!(snapshot(&config.output.out), before);

    // A resume after such a crash is checked against the restored run, not the interrupted one.
    std::fs::remove_file(config.output.out.join("model.bpk")).unwrap();
    let run = RunDir::open(&config.output.out, TrainConfig::check_run_settings).unwrap();
    run.set_aside().unwrap();
    let other = edited(&config, |c| c.seed = 5);
    std::fs::write(config.output.out.join("train.json"), serde_json::to_string(&other.resolved()).unwrap()).unwrap();
    drop(run);
    // ... and says what resumes the restored run. The settings this command read before the
    // restore are not listed as differences: a kill during the set-aside leaves no train.json,
    // so they were the options' defaults, which the user never asked for.
    let out = &config.output.out;
    expect_refusal(&other, Start::Resume, |e| matches!(e, RunDirError::RestoredUnfinished { out: o } if o == out));
    train(&config, Start::Resume, |_| {}).unwrap();
}

/// A new run that stops after a checkpoint but before its end (a full disk at step 20) does not
/// take the run it replaces with it: the old one waits in `.previous-run/` until the new one
/// finishes (it was deleted at the first checkpoint).
#[test]
fn an_overwrite_that_stops_after_a_checkpoint_keeps_the_old_run() {
    let dir = tempfile::tempdir().unwrap();
    let config = finished_run(dir.path());
    let run = RunDir::open(&config.output.out, TrainConfig::check_run_settings).unwrap();
    run.set_aside().unwrap();
    // The new run's first checkpoint (a copy of the old one's), and no final model.
    let previous = config.output.out.join(".previous-run");
    std::fs::create_dir(config.output.out.join("checkpoint")).unwrap();
    for entry in std::fs::read_dir(previous.join("checkpoint")).unwrap() {
        let entry = entry.unwrap();
        if entry.file_name().to_string_lossy().contains("-step-5.") {
            std::fs::copy(entry.path(), config.output.out.join("checkpoint").join(entry.file_name())).unwrap();
        }
    }
    let replaced = run.end_replacement();
    assert!(matches!(replaced, Some(ReplacedRun::Waiting)), "{replaced:?}");
    assert!(previous.join("model.bpk").is_file(), "the old run is kept");
}

/// A `.previous-run` of the user's (a folder of backups, or a file) is not taken for a run an
/// interrupted `--overwrite` set aside: it was restored over the run, and deleted.
#[test]
fn a_previous_run_folder_of_the_users_is_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let config = finished_run(dir.path());
    let previous = config.output.out.join(".previous-run");
    std::fs::create_dir_all(previous.join("sub")).unwrap();
    std::fs::write(previous.join("backup.txt"), "mine").unwrap();
    let before = snapshot(&config.output.out);
    let set_aside = |e: &RunDirError| match e {
        RunDirError::ForeignSetAside { path, entries } if *path == previous => Some(entries.clone()),
        _ => None,
    };
    let refused = expect_refusal(&config, Start::Overwrite, |e| set_aside(e).is_some());
    assert_eq!(set_aside(&refused), Some(Some(vec!["backup.txt".to_string(), "sub".to_string()])));
    assert_eq!(snapshot(&config.output.out), before, "nothing moved or deleted");
    std::fs::remove_dir_all(&previous).unwrap();
    std::fs::write(&previous, "a file").unwrap();
    expect_refusal(&config, Start::Overwrite, |e| set_aside(e) == Some(None));
    assert_eq!(std::fs::read_to_string(&previous).unwrap(), "a file");
}

/// Files of the user's inside the run's own folders (`checkpoint/`, `analysis/`) are not
/// deleted with the old run: `--overwrite` is refused before any work, naming them.
#[test]
fn overwrite_refuses_to_delete_files_put_inside_the_runs_folders() {
    let dir = tempfile::tempdir().unwrap();
    let config = finished_run(dir.path());
    std::fs::write(config.output.out.join("checkpoint/README"), "which checkpoint is best").unwrap();
    let before = snapshot(&config.output.out);
    let foreign = |e: &RunDirError| match e {
        RunDirError::ForeignFiles { files } => files.clone(),
        _ => Vec::new(),
    };
    let refused = expect_refusal(&config, Start::Overwrite, |e| !foreign(e).is_empty());
    assert_eq!(foreign(&refused), ["checkpoint/README"]);
    assert_eq!(snapshot(&config.output.out), before);
    std::fs::remove_file(config.output.out.join("checkpoint/README")).unwrap();
    std::fs::create_dir(config.output.out.join("analysis")).unwrap();
    std::fs::write(config.output.out.join("analysis/mine.md"), "my notes").unwrap();
    let refused = expect_refusal(&config, Start::Overwrite, |e| !foreign(e).is_empty());
    assert!(foreign(&refused).iter().all(|file| file.starts_with("analysis/ (")), "{refused:?}");
    assert_eq!(std::fs::read_to_string(config.output.out.join("analysis/mine.md")).unwrap(), "my notes");
    std::fs::remove_dir_all(config.output.out.join("analysis")).unwrap();
    train(&config, Start::Overwrite, |_| {}).unwrap();
}

#[test]
fn overwrite_leaves_files_that_are_not_the_runs_alone() {
    let dir = tempfile::tempdir().unwrap();
    let config = finished_run(dir.path());
    std::fs::write(config.output.out.join("notes.txt"), "mine").unwrap();
    train(&config, Start::Overwrite, |_| {}).unwrap();
    assert_eq!(std::fs::read_to_string(config.output.out.join("notes.txt")).unwrap(), "mine");
    assert!(
        !config.output.out.join(".previous-run").exists(),
        "the replaced run is removed once the new one has a checkpoint"
    );
}

#[test]
fn a_directory_that_is_not_a_run_is_refused_and_left_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let user = dir.path().join("mine");
    std::fs::create_dir_all(user.join("train")).unwrap();
    std::fs::write(user.join("train/data.txt"), "my data").unwrap();
    std::fs::write(user.join("report.pdf"), "pdf").unwrap();
    let before = snapshot(&user);
    for start in [Start::New, Start::Overwrite] {
        let config = quick(&user, 10, 5);
        expect_refusal(&config, start, |e| matches!(e, RunDirError::NotARun { .. }));
        assert_eq!(snapshot(&user), before);
        assert!(!user.join(".lock").exists(), "not even a lock file is written");
    }
    let root = {
        let mut config = quick(&dir.path().join("run"), 10, 5);
        config.output.out = PathBuf::from("/");
        config
    };
    expect_refusal(&root, Start::New, |e| matches!(e, RunDirError::NotARun { .. }));
    // A train.json that is not a training run's: the folder is the user's.
    let foreign = dir.path().join("dataset");
    std::fs::create_dir_all(foreign.join("valid")).unwrap();
    std::fs::write(foreign.join("train.json"), r#"{"split": "mine"}"#).unwrap();
    std::fs::write(foreign.join("valid/b.txt"), "mine").unwrap();
    let before = snapshot(&foreign);
    expect_refusal(
        &{
            let mut config = quick(&user, 10, 5);
            config.output.out = foreign.clone();
            config
        },
        Start::Overwrite,
        |e| matches!(e, RunDirError::ForeignSettings { .. }),
    );
    assert_eq!(snapshot(&foreign), before);
    // A file where the run's checkpoint folder belongs.
    let config = finished_run(dir.path());
    std::fs::remove_dir_all(config.output.out.join("checkpoint")).unwrap();
    std::fs::write(config.output.out.join("checkpoint"), "not a folder").unwrap();
    let wrong = expect_refusal(&config, Start::Overwrite, |e| matches!(e, RunDirError::WrongKind { .. }));
    assert!(
        matches!(&wrong, RunDirError::WrongKind { name, should_be_dir: true } if name == "checkpoint"),
        "{wrong:?}"
    );
    assert_eq!(std::fs::read_to_string(config.output.out.join("checkpoint")).unwrap(), "not a folder");

    // The run's own train.json, damaged (its .sum says a run wrote it): --overwrite replaces the
    // run; it said "not a training run's ... no file of yours" and left no way out.
    let damaged = finished_run(&dir.path().join("damaged"));
    std::fs::write(damaged.output.out.join("train.json"), "{ \"steps\": ").unwrap();
    train(&damaged, Start::Overwrite, |_| {}).unwrap();
    assert!(TrainConfig::from_file(damaged.output.out.join("train.json")).is_ok());
}

#[test]
fn a_second_training_into_the_same_directory_is_refused_with_the_first_ones_pid() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let held = RunDir::open(&out, TrainConfig::check_run_settings).unwrap();
    let ours = Some(std::process::id().to_string());
    expect_refusal(&quick(&out, 10, 5), Start::New, |e| matches!(e, RunDirError::Locked { pid } if *pid == ours));
    drop(held);
    train(&quick(&out, 10, 5), Start::New, |_| {}).unwrap();
    // Into a run being trained: the lock is named, not "pass --resume", which it would refuse.
    let held = RunDir::open(&out, TrainConfig::check_run_settings).unwrap();
    expect_refusal(&quick(&out, 10, 5), Start::New, |e| matches!(e, RunDirError::Locked { pid } if *pid == ours));
    drop(held);
    expect_refusal(&quick(&out, 10, 5), Start::New, |e| matches!(e, RunDirError::HoldsARun));
    // A run whose train.json was deleted is named as such, not "holds no training run".
    std::fs::remove_file(out.join("train.json")).unwrap();
    for start in [Start::New, Start::Overwrite] {
        let missing = expect_refusal(&quick(&out, 10, 5), start, |e| matches!(e, RunDirError::SettingsMissing { .. }));
        let RunDirError::SettingsMissing { run_files } = missing else { unreachable!() };
        assert_eq!(run_files, ["checkpoint", "metrics.jsonl", "model.bpk"]);
    }
}

#[test]
fn resume_removes_the_temporary_files_a_crash_left() {
    let dir = tempfile::tempdir().unwrap();
    let config = finished_run(dir.path());
    let stray = [
        config.output.out.join("checkpoint/.model-3.bpk.tmp4242"),
        config.output.out.join("checkpoint/.optim-3.bpk.tmp4242.4242-7.tmp"),
        config.output.out.join(".train.json.tmp99"),
        config.output.out.join(".model.json.tmp99.aB3xYz"),
        // burn-pack's scratch files of a checkpoint and of the final model.
        config.output.out.join("checkpoint/model-1.bpk.21006-2.tmp"),
        config.output.out.join("model.bpk.21006-0.tmp"),
    ];
    for path in &stray {
        std::fs::write(path, vec![0u8; 1000]).unwrap();
    }
    let mine = [config.output.out.join(".my.tmp-notes"), config.output.out.join("notes.bpk.v2-draft.tmp")];
    for path in &mine {
        std::fs::write(path, "mine").unwrap();
    }
    drop(RunDir::open(&config.output.out, TrainConfig::check_run_settings).unwrap());
    assert!(stray.iter().all(|path| !path.exists()));
    assert!(mine.iter().all(|path| path.exists()), "only names of temporary files of the run's writes are removed");
}

/// Cuts the files of the checkpoint at `step` short (`truncate`) or overwrites them with garbage.
fn damage(out: &Path, step: usize, kind: &str, truncate: bool) {
    let path = out.join(format!("checkpoint/{kind}-step-{step}.bpk"));
    let len = std::fs::metadata(&path).unwrap().len() as usize;
    let bytes = if truncate { std::fs::read(&path).unwrap()[..len / 2].to_vec() } else { vec![0x5a; len] };
    std::fs::write(&path, bytes).unwrap();
}

/// A resume whose `metrics.jsonl` lost the history up to its checkpoint (cut short, emptied, or
/// damaged by a bad line) says so: it resumed over the gap without a word.
#[test]
fn a_resume_over_a_cut_short_history_says_which_steps_are_lost() {
    for (cut, expected) in [("cut", "steps 1..=5 have no history"), ("garbage", "line 2 is damaged")] {
        let dir = tempfile::tempdir().unwrap();
        let config = finished_run(dir.path());
        for kind in ["model", "optim", "scheduler"] {
            std::fs::remove_file(config.output.out.join(format!("checkpoint/{kind}-step-10.bpk"))).unwrap();
        }
        std::fs::remove_file(config.output.out.join("model.bpk")).unwrap();
        let metrics = config.output.out.join("metrics.jsonl");
        let text = std::fs::read_to_string(&metrics).unwrap();
        let first = text.lines().next().unwrap();
        // The damage before lines that are sound: they are dropped from the log, but kept aside.
        let rest: String = text.lines().skip(1).map(|line| format!("{line}\n")).collect();
        let damaged = if cut == "cut" { String::new() } else { format!("{first}\ngarbage{{\n{rest}") };
        std::fs::write(&metrics, &damaged).unwrap();
        let mut events = Vec::new();
        train(&config, Start::Resume, |event| events.push(event)).unwrap();
        let warned = events.iter().any(|e| matches!(e, TrainEvent::Warning(w) if w.contains(expected)));
        assert!(warned, "{cut}: {events:?}");
        if cut == "garbage" {
            assert_eq!(std::fs::read_to_string(config.output.out.join("metrics.jsonl.damaged")).unwrap(), damaged);
        }
    }
}

#[test]
fn resume_falls_back_from_a_damaged_latest_checkpoint_to_the_previous_one() {
    for (kind, truncate) in [("model", true), ("optim", false), ("scheduler", true), ("model", false)] {
        let dir = tempfile::tempdir().unwrap();
        let mut config = quick(&dir.path().join("run"), 15, 5);
        config.checkpoints.keep_checkpoints = 3;
        train(&config, Start::New, |_| {}).unwrap();
        // An interruption after the checkpoint of step 10, whose file was then damaged.
        for kind in ["model", "optim", "scheduler"] {
            std::fs::remove_file(config.output.out.join(format!("checkpoint/{kind}-step-15.bpk"))).unwrap();
        }
        std::fs::remove_file(config.output.out.join("model.bpk")).unwrap();
        damage(&config.output.out, 10, kind, truncate);
        let mut events = Vec::new();
        let report = train(&config, Start::Resume, |event| events.push(event)).unwrap();
        assert_eq!(report.train_losses.len(), 10, "{kind}: resumed from step 5, the last complete checkpoint");
        let skipped = events.iter().find(|e| e.is_notice()).map(ToString::to_string).unwrap_or_default();
        assert!(skipped.starts_with("warning: skipping the checkpoint of step 10: "), "{kind}: {events:?}");
        assert!(events.contains(&TrainEvent::Resumed { step: 5 }), "{kind}: {events:?}");
        assert!(report.valid_loss.is_finite());
    }
}

#[test]
fn a_missing_or_cut_short_final_model_says_how_to_finish_and_resume_finishes_it() {
    let dir = tempfile::tempdir().unwrap();
    let config = finished_run(dir.path());
    let model = config.output.out.join("model.bpk");
    let bytes = std::fs::read(&model).unwrap();
    let finished = weights(&config.output.out);
    std::fs::write(&model, &bytes[..bytes.len() / 3]).unwrap();
    // Cut short: incomplete, to be finished by a resume, or read from a checkpoint.
    let out = &config.output.out;
    let both = CheckpointList::Steps(vec![5, 10]);
    let (path, problem) = load_problem(out, None);
    assert_eq!(path, model);
    let LoadProblem::Incomplete { problem: SumError::Mismatch(_), finish: FinishAdvice::Resume { run }, checkpoints } =
        &problem
    else {
        panic!("{problem:?}")
    };
    assert!(run == out && checkpoints == &both, "{problem:?}");
    // Gone: not finished, the same advice.
    std::fs::remove_file(&model).unwrap();
    let resume = FinishAdvice::Resume { run: out.clone() };
    let not_finished = LoadProblem::NotFinished { finish: resume, checkpoints: both.clone() };
    assert_eq!(load_problem(out, None), (model.clone(), not_finished));
    let (_, problem) = load_problem(out, Some(7));
    assert_eq!(problem, LoadProblem::NoCheckpoint { step: 7, checkpoints: both });

    // `steps` lowered by hand below the newest checkpoint: refused, not step 10's weights written
    // as step 5's final model.
    let train_json = config.output.out.join("train.json");
    let original = std::fs::read_to_string(&train_json).unwrap();
    let mut by_hand: serde_json::Value = serde_json::from_str(&original).unwrap();
    by_hand["steps"] = 5.into();
    std::fs::write(&train_json, by_hand.to_string()).unwrap();
    let lowered = edited(&config, |c| c.optim.steps = 5);
    // The edit itself is seen (train.json.sum); without the sum (a run of an earlier version),
    // the checkpoint past `steps` is.
    expect_refusal(&lowered, Start::Resume, |e| matches!(e, RunDirError::SettingsEdited));
    std::fs::remove_file(config.output.out.join("train.json.sum")).unwrap();
    expect_refusal(&lowered, Start::Resume, |e| matches!(e, RunDirError::CheckpointPastEnd { step: 10, steps: 5 }));
    assert!(!model.exists());
    std::fs::write(&train_json, original).unwrap();

    // Killed while writing metrics.csv, after the last step: the finish writes it too.
    let csv = std::fs::read_to_string(config.output.out.join("metrics.csv")).unwrap();
    std::fs::remove_file(config.output.out.join("metrics.csv")).unwrap();
    let mut events = Vec::new();
    let report = train(&config, Start::Resume, |event| events.push(event)).unwrap();
    assert_eq!(events, [TrainEvent::WritingFinalModel { step: 10 }]);
    assert_eq!(std::fs::read_to_string(config.output.out.join("metrics.csv")).unwrap(), csv);
    assert!(report.train_losses.is_empty(), "no step trained again");
    assert!(weights(&config.output.out) == finished, "the final model, written from the last checkpoint");
    expect_refusal(&config, Start::Resume, |e| matches!(e, RunDirError::Finished { steps: 10, .. }));
    // model.json edited by hand: named as such, not listed as a change the resume asked for.
    let model_json = config.output.out.join("model.json");
    let text = std::fs::read_to_string(&model_json).unwrap();
    let by_hand = text.replace("\"rope_theta\": 10000.0", "\"rope_theta\": 10.0");
    assert_ne!(by_hand, text);
    std::fs::write(&model_json, by_hand).unwrap();
    expect_refusal(&config, Start::Resume, |e| matches!(e, RunDirError::ModelInfoEdited { .. }));
}

#[test]
fn a_garbage_checkpoint_is_called_corrupt_not_a_divergence() {
    let dir = tempfile::tempdir().unwrap();
    let config = finished_run(dir.path());
    damage(&config.output.out, 10, "model", false);
    let (_, problem) = load_problem(&config.output.out, Some(10));
    assert!(matches!(problem, LoadProblem::DamagedCheckpoint { problem: SumError::Mismatch(_), .. }), "{problem:?}");
}

#[test]
fn the_depth_trained_is_the_depth_asked_for() {
    let default = model_config(&TrainConfig::default()).unwrap();
    assert_eq!(default.n_layers, 8, "the default model: tiny-8l");
    let preset = edited(&TrainConfig::default(), |c| c.model.preset = "9m".into());
    assert_eq!(model_config(&preset).unwrap().n_layers, 4);
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("my.json");
    let mut custom = layernorm_scaling::LlamaConfig::tiny();
    custom.n_layers = 16;
    std::fs::write(&json, serde_json::to_string(&custom).unwrap()).unwrap();
    let file = edited(&TrainConfig::default(), |c| c.model.preset = json.display().to_string());
    assert_eq!(model_config(&file).unwrap().n_layers, 16);
    assert_eq!(model_config(&edited(&file, |c| c.model.layers = Some(3))).unwrap().n_layers, 3);
    // A training config file that names a preset and no depth trains the preset's depth.
    let toml = dir.path().join("run.toml");
    std::fs::write(&toml, "model = \"130m\"\n").unwrap();
    assert_eq!(model_config(&TrainConfig::from_file(&toml).unwrap()).unwrap().n_layers, 12);
    // --layers with --init-from would be silently ignored: refused.
    let init = edited(&TrainConfig::default(), |c| {
        c.model.init_from = Some(dir.path().to_path_buf());
        c.model.layers = Some(4);
    });
    // The conflict names the option, its value and the model it cannot change.
    let err = model_config(&init).unwrap_err();
    let Error::Config(ConfigError::Conflict(conflict)) = &err else { panic!("{err:?}") };
    assert!(conflict.contains("`layers` (4)") && conflict.contains(&dir.path().display().to_string()), "{err}");
}

#[test]
fn short_runs_adapt_the_intervals_and_long_ones_end_with_a_short_interval() {
    let dir = tempfile::tempdir().unwrap();
    let base = quick(&dir.path().join("short"), 30, 5);
    // Only --steps: validation, checkpoint and warmup follow it.
    let short = edited(&base, |c| {
        c.optim.warmup = None;
        c.eval.eval_every = None;
        c.checkpoints.save_every = None;
    });
    short.validate().unwrap();
    assert_eq!((short.eval_every(), short.save_every(), short.optim.warmup(), short.validations()), (30, 30, 3, 1));
    let report = train(&short, Start::New, |_| {}).unwrap();
    assert_eq!(report.train_losses.len(), 30);
    let saved = TrainConfig::from_file(short.output.out.join("train.json")).unwrap();
    assert_eq!(
        (saved.eval.eval_every, saved.checkpoints.save_every, saved.optim.warmup),
        (Some(30), Some(30), Some(3)),
        "train.json says what ran"
    );

    // 25 steps validated every 10: intervals of 10, 10 and 5 steps, and the end is checkpointed.
    let ragged = edited(&base, |c| {
        c.optim.steps = 25;
        c.eval.eval_every = Some(10);
        c.checkpoints.save_every = None;
        c.output.out = dir.path().join("ragged");
    });
    assert_eq!(ragged.validations(), 3);
    let report = train(&ragged, Start::New, |_| {}).unwrap();
    assert_eq!(report.train_losses.len(), 25);
    assert!(ragged.output.out.join("checkpoint/model-step-25.bpk").is_file(), "the end, named by its step");

    // Only --save-every: validation divides it.
    let save = edited(&base, |c| {
        c.optim.steps = 400;
        c.eval.eval_every = None;
        c.checkpoints.save_every = Some(150);
    });
    assert_eq!(save.eval_every(), 75);
    // Values the user set can still conflict: the error names both.
    let conflict = edited(&base, |c| {
        c.eval.eval_every = Some(5);
        c.checkpoints.save_every = Some(7);
    });
    let err = conflict.validate().unwrap_err().to_string();
    assert!(err.contains("(7)") && err.contains("(5)"), "{err}");
}

#[test]
fn every_numeric_option_refuses_non_finite_values() {
    let base = TrainConfig::default();
    let cases: Vec<(&str, TrainConfig)> = vec![
        ("lr", edited(&base, |c| c.optim.lr = f64::NAN)),
        ("lr", edited(&base, |c| c.optim.lr = f64::INFINITY)),
        ("min_lr_ratio", edited(&base, |c| c.optim.min_lr_ratio = f64::NAN)),
        ("weight_decay", edited(&base, |c| c.optim.weight_decay = f64::INFINITY)),
        ("beta1", edited(&base, |c| c.optim.beta1 = f64::NAN)),
        ("eps", edited(&base, |c| c.optim.eps = f64::NAN)),
        ("clip_grad_norm", edited(&base, |c| c.optim.clip_grad_norm = Some(f64::INFINITY))),
        ("valid_fraction", edited(&base, |c| c.eval.valid_fraction = f64::NAN)),
        ("peak_tflops", edited(&base, |c| c.output.peak_tflops = Some(f64::NAN))),
        ("min_lr_ratio", edited(&base, |c| c.optim.min_lr_ratio = -1.0)),
    ];
    for (field, config) in cases {
        let err = config.validate().unwrap_err();
        assert!(matches!(err, ConfigError::OutOfRange { field: named, .. } if named == field), "{field}: {err:?}");
    }
}

#[test]
fn resuming_with_another_schedule_is_refused_and_a_lower_lr_is_announced() {
    let dir = tempfile::tempdir().unwrap();
    let config = quick(&dir.path().join("run"), 10, 5);
    train(&config, Start::New, |_| {}).unwrap();
    std::fs::remove_file(config.output.out.join("model.bpk")).unwrap();
    for kind in ["model", "optim", "scheduler"] {
        std::fs::remove_file(config.output.out.join(format!("checkpoint/{kind}-step-10.bpk"))).unwrap();
    }
    let longer = edited(&config, |c| c.optim.steps = 20);
    let change = |setting: &str, change: &str| (setting.to_string(), change.to_string());
    // Unfinished (no final model): its weights carry over only once it is finished.
    assert_eq!(refused_changes(&longer), (vec![change("steps", "10 -> 20")], ResumeAdvice::PutItBack));
    // A model change names the fields that differ ("4 layers x d_model 64 (lns)" on both sides).
    let scaled = edited(&config, |c| c.model.init = Some("scaled".parse().unwrap()));
    let model = change("model", "init null -> \"scaled\" (as model.json records it)");
    assert!(refused_changes(&scaled).0.contains(&model));
    // The learning rate may change on resume (the usual answer to a divergence).
    let report = train(&edited(&config, |c| c.optim.lr = 1e-3), Start::Resume, |_| {}).unwrap();
    assert_eq!(report.train_losses.len(), 5);
}

#[test]
fn a_diverged_run_keeps_only_sound_checkpoints_and_names_the_step() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let mut config = quick(&out, 12, 1);
    config.optim.lr = 1e30;
    config.optim.warmup = Some(0);
    let checkpoint = match train(&config, Start::New, |_| {}) {
        Err(Error::Diverged { checkpoint, .. }) => checkpoint,
        other => panic!("the run should diverge: {other:?}"),
    };
    let cpu = layernorm_scaling::parse_device("flex").unwrap();
    let run = RunDir::open(&out, TrainConfig::check_run_settings).unwrap();
    let (complete, broken) = run.checkpoints();
    assert!(broken.is_empty());
    for epoch in &complete {
        let (model, _) = load_run_model(&out, Some(*epoch), &cpu).unwrap();
        assert_eq!(layernorm_scaling::model::first_non_finite_parameter(&model), None, "checkpoint {epoch}");
    }
    assert_eq!(checkpoint, complete.last().map(|&step| (step, out.join("checkpoint"))), "the newest, named");
    // Loading its final model while a training holds the run says so (not "finish the run"), and
    // once it is released, that it diverged (resuming with the same settings diverges again).
    let finish_advice = |out: &Path| match load_problem(out, None).1 {
        LoadProblem::NotFinished { finish, .. } => finish,
        other => panic!("{other:?}"),
    };
    let held = finish_advice(&out);
    assert_eq!(held, FinishAdvice::StillRunning { pid: std::process::id().to_string() });
    drop(run);
    // Diverged (resuming with the same settings would diverge again), after the checkpoints kept,
    // and offering them to resume from at a lower rate when there are some.
    let diverged = finish_advice(&out);
    let FinishAdvice::Diverged { step, has_checkpoints, .. } = diverged else { panic!("{diverged:?}") };
    assert_eq!(has_checkpoints, !complete.is_empty());
    assert!(step > complete.last().copied().unwrap_or_default(), "after the checkpoints kept");
    // Without a checkpoint, resuming is not offered beside "the run has no checkpoints".
    std::fs::remove_dir_all(out.join("checkpoint")).unwrap();
    assert!(matches!(finish_advice(&out), FinishAdvice::Diverged { has_checkpoints: false, .. }));
}

/// Removes the final model and the last checkpoint (step `step`) of a run: as if killed after
/// its checkpoint before.
fn kill_after_checkpoint_before(out: &Path, step: usize) {
    std::fs::remove_file(out.join("model.bpk")).unwrap();
    for kind in ["model", "optim", "scheduler"] {
        std::fs::remove_file(out.join(format!("checkpoint/{kind}-step-{step}.bpk"))).unwrap();
    }
}

/// A run started from `--init-from` resumes from its own checkpoints without reading its source:
/// neither a source deleted since ("initsrc: No such file or directory") nor a source that is the
/// run itself (`--init-from X --out X --overwrite`, killed after its first checkpoint) stops it.
#[test]
fn a_run_started_from_another_resumes_without_its_source() {
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("source");
    train(&quick(&source, 10, 5), Start::New, |_| {}).unwrap();
    let run = {
        let mut config = quick(&dir.path().join("run"), 10, 5);
        config.model.init_from = Some(source.clone());
        config
    };
    train(&run, Start::New, |_| {}).unwrap();
    kill_after_checkpoint_before(&run.output.out, 10);
    let copy = dir.path().join("source-copy");
    std::fs::rename(&source, &copy).unwrap();
    let report = train(&run, Start::Resume, |_| {}).unwrap();
    assert_eq!(report.train_losses.len(), 5, "steps 6..=10 resumed from the run's own checkpoint");

    // Overwriting the source with a run started from it.
    let itself = {
        let mut config = quick(&copy, 10, 5);
        config.model.init_from = Some(copy.clone());
        config.output.out = copy.clone();
        config
    };
    train(&itself, Start::Overwrite, |_| {}).unwrap();
    kill_after_checkpoint_before(&copy, 10);
    let report = train(&itself, Start::Resume, |_| {}).unwrap();
    assert_eq!(report.train_losses.len(), 5);
    // A resume that changes the scheme is still refused, naming it.
    let other = edited(&run, |c| c.model.norm = Some("pre-ln".parse().unwrap()));
    kill_after_checkpoint_before(&run.output.out, 10);
    assert!(refused_changes(&other)
        .0
        .iter()
        .any(|(setting, change)| setting == "model" && change.contains("norm_scheme")));

    // Killed before its first checkpoint, a run started from another starts again from the
    // other's weights, not from scratch: its first loss is the uninterrupted run's.
    let fresh = {
        let mut config = quick(&dir.path().join("fresh"), 10, 5);
        config.model.init_from = Some(copy.clone());
        config
    };
    let uninterrupted = train(&fresh, Start::New, |_| {}).unwrap();
    // What a kill before the first checkpoint leaves: the run's records, no weights, no steps.
    std::fs::remove_dir_all(fresh.output.out.join("checkpoint")).unwrap();
    for file in ["model.bpk", "model.bpk.sum", "metrics.jsonl"] {
        std::fs::remove_file(fresh.output.out.join(file)).unwrap();
    }
    let mut events = Vec::new();
    let again = train(&fresh, Start::Resume, |event| events.push(event)).unwrap();
    assert_eq!(again.train_losses.first(), uninterrupted.train_losses.first(), "started from the same weights");
    // Read again as they are now (a source replaced in between would be taken silently): said so.
    assert!(events.contains(&TrainEvent::Restarted { init_from: Some(copy.clone()) }), "{events:?}");
}

/// A checkpoint whose model file is gone (a training prunes the kinds one by one) is not offered
/// as one to load: "no checkpoint at step 10: the run's checkpoints are --step 5, 10" said both.
#[test]
fn a_checkpoint_without_its_model_file_is_not_listed_as_loadable() {
    let dir = tempfile::tempdir().unwrap();
    let config = finished_run(dir.path());
    std::fs::remove_file(config.output.out.join("checkpoint/model-step-10.bpk")).unwrap();
    let (_, problem) = load_problem(&config.output.out, Some(10));
    assert_eq!(problem, LoadProblem::NoCheckpoint { step: 10, checkpoints: CheckpointList::Steps(vec![5]) });
}

/// A finished run whose checkpoints were deleted and whose final model was damaged since: train
/// sent the user to generate, and generate back to `train --resume`. Both now say to train again.
#[test]
fn a_finished_run_with_a_damaged_model_and_no_checkpoint_says_to_train_again() {
    let dir = tempfile::tempdir().unwrap();
    let config = quick(&dir.path().join("run"), 10, 5);
    train(&config, Start::New, |_| {}).unwrap();
    std::fs::remove_dir_all(config.output.out.join("checkpoint")).unwrap();
    let model = config.output.out.join("model.bpk");
    let mut bytes = std::fs::read(&model).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&model, bytes).unwrap();
    expect_refusal(&config, Start::Resume, |e| matches!(e, RunDirError::NothingCanFinish));
    let (_, problem) = load_problem(&config.output.out, None);
    let LoadProblem::Incomplete { finish: FinishAdvice::NothingCanFinish { .. }, .. } = &problem else {
        panic!("{problem:?}")
    };
}

/// A training loss that is infinite while its gradient stays finite (as when the loss overflows;
/// injected here with `LAYERNORM_SCALING_FAIL_AT=loss`, since both loss paths are log-sum-exps
/// that stay finite): the run stops there instead of training on to the end.
#[test]
fn an_infinite_training_loss_stops_the_run_where_it_happens() {
    require_fault_points();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let output = std::process::Command::new(example("train"))
        .args(["--model", "tiny", "--device", "flex", "--builtin-docs", "2000", "--seq-len", "64"])
        .args(["--batch-size", "8", "--steps", "30", "--warmup", "0", "--lr", "1", "--eval-every", "5"])
        .args(["--eval-batches", "4", "--samples", "0", "--out"])
        .arg(&out)
        .arg("--cache-dir")
        .arg(dir.path().join("cache"))
        .env(FAIL_AT, "loss")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    let rows = read_metrics(&out).unwrap();
    let first = rows.iter().find(|r| r.is_train_loss() && !r.value.is_finite()).expect("a non-finite loss was logged");
    // At step 1 no update was applied: the cause named is the initial weights, not the rate.
    let cause = if first.step == 1 { "before any update" } else { "diverged" };
    assert!(stderr.contains(&format!("at step {}", first.step)) && stderr.contains(cause), "{stderr}");
    let last = rows.iter().filter(|r| r.is_train_loss()).map(|r| r.step).max().unwrap();
    assert!(last <= first.step + 3, "training went on from step {} to {last}: {stderr}", first.step);
}

/// The last value of each epoch's log of `metric` (the epoch's aggregate), and its batch values.
fn epoch_log(out: &Path, split: &str, epoch: usize, metric: &str) -> (Vec<(f64, usize)>, Option<f64>) {
    let rows = read_metrics(out).unwrap();
    let rows = rows.iter().filter(|r| r.split == split && r.epoch == epoch && r.metric == metric);
    let mut batches = Vec::new();
    let mut last = None;
    for row in rows {
        if row.is_final {
            last = Some(row.value);
        } else {
            batches.push((row.value, row.count.unwrap_or(1)));
        }
    }
    (batches, last)
}

#[test]
fn perplexity_is_exp_of_the_token_weighted_mean_loss_and_grad_norms_are_reproducible() {
    let dir = tempfile::tempdir().unwrap();
    write_corpus(dir.path());
    // Two identical runs, each in its own process (as users run them: one training a process).
    let runs = [dir.path().join("a"), dir.path().join("b")];
    for out in &runs {
        let status = train_command(out, &["--grad-accum", "2", "--clip-grad-norm", "0.5"]).status().unwrap();
        assert!(status.success());
    }
    let out = &runs[0];
    let (losses, _) = epoch_log(out, "train", 1, "Loss");
    let (_, perplexity) = epoch_log(out, "train", 1, "Perplexity");
    let mean = losses.iter().map(|(loss, _)| loss).sum::<f64>() / losses.len() as f64;
    let perplexity = perplexity.expect("a final epoch value");
    assert!((perplexity - mean.exp()).abs() < 1e-9 * perplexity, "{perplexity} vs exp({mean})");
    // One gradient norm per optimiser step (the last of its two micro-batches), the same in both runs.
    let norms_of = |out: &Path, epoch: usize| -> Vec<f64> {
        let (norms, _) = epoch_log(out, "train", epoch, "Gradient norm");
        norms.into_iter().filter(|(_, count)| *count > 0).map(|(norm, _)| norm).collect()
    };
    assert_eq!(norms_of(out, 1).len(), 2, "two steps an epoch");
    assert!(norms_of(out, 1).iter().all(|norm| norm.is_finite() && *norm > 0.0));
    for epoch in 1..=6 {
        assert_eq!(norms_of(&runs[0], epoch), norms_of(&runs[1], epoch), "epoch {epoch}");
    }
    let csv = |out: &Path| std::fs::read_to_string(out.join("metrics.csv")).unwrap();
    let without_speed =
        |text: String| -> String { text.lines().filter(|l| !l.contains("Tokens per second")).collect() };
    assert_eq!(without_speed(csv(&runs[0])), without_speed(csv(&runs[1])), "metrics.csv is reproducible");
}

#[test]
fn a_batch_that_cannot_fit_in_memory_is_refused_naming_the_field() {
    if layernorm_scaling::memory::available_memory_bytes().is_none() {
        return; // no way to know the machine's memory here (not Linux)
    }
    let dir = tempfile::tempdir().unwrap();
    let mut config = quick(&dir.path().join("run"), 10, 5);
    config.optim.batch_size = 100_000_000;
    expect_error(&config, Start::New, "`batch_size` (100000000)");
    assert!(!config.output.out.exists(), "nothing written");
}

/// `<dir>/corpus.txt`, the text [`train_command`] trains on.
fn write_corpus(dir: &Path) {
    let text: String = (0..400).map(|i| format!("Paragraph {i}: the quick brown fox {i} jumps.\n\n")).collect();
    std::fs::write(dir.join("corpus.txt"), text).unwrap();
}

/// A training command of the train example into `out` (12 steps, validated every 2).
fn train_command(out: &Path, extra: &[&str]) -> Command {
    let mut command = Command::new(example("train"));
    command.args(["--device", "flex", "--steps", "12", "--eval-every", "2", "--batch-size", "4", "--seq-len", "32"]);
    command.args(["--samples", "0", "--out"]).arg(out).args(extra);
    command.arg("--data").arg(out.parent().unwrap().join("corpus.txt"));
    command.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
    command
}

#[test]
fn killed_trainings_always_resume_to_the_uninterrupted_result_and_leave_no_stray_files() {
    let dir = tempfile::tempdir().unwrap();
    write_corpus(dir.path());
    let whole = dir.path().join("whole");
    assert!(train_command(&whole, &[]).status().unwrap().success());

    let killed = dir.path().join("killed");
    // Kill moments spread over start-up, training, checkpoints and the final save.
    let mut seed = 0x9e3779b97f4a7c15u64;
    for _ in 0..6 {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let delay = std::time::Duration::from_millis(200 + (seed >> 33) % 2500);
        let resume: &[&str] = if killed.join("train.json").is_file() { &["--resume"] } else { &[] };
        let mut child = train_command(&killed, resume).spawn().unwrap();
        std::thread::sleep(delay);
        let _ = child.kill(); // SIGKILL
        let _ = child.wait();
        if killed.join("model.bpk.sum").is_file() {
            break;
        }
    }
    let resume: &[&str] = if killed.join("train.json").is_file() { &["--resume"] } else { &[] };
    let status = train_command(&killed, resume).status().unwrap();
    let finished = status.success() || killed.join("model.bpk.sum").is_file();
    assert!(finished, "the last resume finishes the run");
    assert!(
        weights(&killed) == weights(&whole),
        "the killed and resumed run ends with the uninterrupted run's weights"
    );
    // Every loss of the killed run's metrics.jsonl, each logged once, is the uninterrupted run's.
    let losses = |out: &Path| -> Vec<(String, usize, usize, u64)> {
        let rows = read_metrics(out).unwrap().into_iter().filter(|r| r.metric == "Loss");
        rows.map(|r| (r.split, r.epoch, r.batch, r.value.to_bits())).collect()
    };
    assert_eq!(losses(&killed), losses(&whole));
    assert!(losses(&whole).iter().any(|(split, epoch, _, _)| split == "valid" && *epoch == 6));
    for sub in [killed.clone(), killed.join("checkpoint")] {
        for entry in std::fs::read_dir(&sub).unwrap().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            assert!(!name.contains(".tmp") && name != ".previous-run", "stray {name}");
        }
    }
}

#[test]
fn negative_numbers_reach_the_range_check_and_bad_options_exit_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    write_corpus(dir.path());
    let out = dir.path().join("run");
    for (args, expected) in [
        (vec!["--min-lr-ratio", "-1"], "min_lr_ratio"),
        (vec!["--lr", "nan"], "`lr`"),
        // An exponent: clap took `-1e-3` for a flag `-1` ("unexpected argument '-1' found").
        (vec!["--lr", "-1e-3"], "`lr` = -0.001 is out of range"),
        (vec!["--clip-grad-norm", "-3"], "clip_grad_norm"),
        (vec!["--warmup", "30"], "`warmup` (30)"),
        // Below 1 in f64, 1 in the optimiser's f32: the first update would be NaN.
        (vec!["--beta1", "0.99999999"], "stays below 1 in f32"),
    ] {
        let output = train_command(&out, &args).stderr(std::process::Stdio::piped()).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(expected) && !stderr.contains("panicked"), "{args:?}: {stderr}");
        assert!(!out.exists(), "{args:?}: nothing written");
    }
}

#[test]
fn a_resume_on_other_data_is_refused_and_the_same_data_elsewhere_is_not() {
    let dir = tempfile::tempdir().unwrap();
    write_corpus(dir.path());
    let corpus = dir.path().join("corpus.txt");
    let mut config = quick(&dir.path().join("run"), 10, 5);
    config.data.files = vec![corpus.clone()];
    train(&config, Start::New, |_| {}).unwrap();
    let original = std::fs::read_to_string(&corpus).unwrap();
    std::fs::write(&corpus, original.replace("fox", "cat")).unwrap();
    // A finished run: its model is what a new run on the new data starts from.
    let (changes, advice) = refused_changes(&config);
    assert_eq!(changes.iter().map(|(setting, _)| setting.as_str()).collect::<Vec<_>>(), ["data"]);
    assert_eq!(advice, ResumeAdvice::StartFromIt { out: config.output.out.clone() });
    // An unfinished one has no model for --init-from to read: that advice would be refused (it was).
    std::fs::remove_file(config.output.out.join("model.bpk")).unwrap();
    assert_eq!(refused_changes(&config), (changes, ResumeAdvice::PutItBack));
    // ... and --init-from of it says how to finish it, not which --step to load (train has none).
    let from_unfinished = {
        let mut base = quick(&dir.path().join("next"), 10, 5);
        base.model.init_from = Some(config.output.out.clone());
        base
    };
    let err = expect_refusal(&from_unfinished, Start::New, |e| matches!(e, RunDirError::NoFinalModel { .. }));
    // How to finish it: a resume, not a checkpoint (which --init-from does not read).
    let RunDirError::NoFinalModel { problem } = err else { unreachable!() };
    let LoadProblem::NotFinished { finish: FinishAdvice::Resume { run }, .. } = *problem else { panic!("{problem:?}") };
    assert_eq!(run, config.output.out);
    std::fs::write(&corpus, &original).unwrap();
    // The same content under another spelling of its path, and the scheme named or not: the same run.
    let same = edited(&config, |c| {
        c.model.norm = Some("lns".parse().unwrap());
        c.data.files = vec![dir.path().join(".").join("corpus.txt")];
    });
    let report = train(&same, Start::Resume, |_| {}).unwrap();
    assert_eq!(report.steps_trained, 0, "every step was checkpointed: only the final model is written");

    // A data path not found from here (train.json records it relative to where the run was
    // trained): said so, with the fix, not a bare "no such file".
    let moved = edited(&same, |c| c.data.files = vec![PathBuf::from("elsewhere/corpus.txt")]);
    let not_found = Path::new("elsewhere/corpus.txt");
    expect_refusal(&moved, Start::Resume, |e| matches!(e, RunDirError::DataNotFound { data, .. } if data == not_found));

    // A run on the built-in corpus resumed with --data: refused before the files are tokenised.
    let builtin = quick(&dir.path().join("builtin"), 10, 5);
    train(&builtin, Start::New, |_| {}).unwrap();
    std::fs::remove_file(builtin.output.out.join("model.bpk")).unwrap();
    let cache = builtin.data.cache_dir.clone().unwrap();
    let entries = || std::fs::read_dir(&cache).unwrap().count();
    let before = entries();
    let with_files = edited(&builtin, |c| c.data.files = vec![corpus.clone()]);
    let data = (
        "data".to_string(),
        "the built-in corpus of 2000 documents -> 1 file(s) or folder(s) given with --data".to_string(),
    );
    assert!(refused_changes(&with_files).0.contains(&data));
    assert_eq!(entries(), before, "nothing was tokenised");
    let with_valid = edited(&builtin, |c| c.eval.valid_data = vec![corpus]);
    let valid = ("validation corpus".to_string(), "none -> --valid-data".to_string());
    assert!(refused_changes(&with_valid).0.contains(&valid));
}

#[test]
fn sizes_that_cannot_work_are_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    if layernorm_scaling::memory::available_memory_bytes().is_some() {
        let huge = {
            let mut config = quick(&out, 10, 5);
            config.model.preset = "7b".into();
            config
        };
        let err = train(&huge, Start::New, |_| {}).err();
        let too_large =
            |e: &ConfigError| matches!(e, ConfigError::TooLarge(p) if matches!(**p, MemoryProblem::Training { .. }));
        assert!(matches!(&err, Some(Error::Config(e)) if too_large(e)), "{err:?}");
        assert!(!out.exists());
    }
    let overflow = {
        let mut config = quick(&out, 10, 5);
        config.optim.grad_accum = usize::MAX;
        config
    };
    expect_error(&overflow, Start::New, "`grad_accum` (18446744073709551615)");
    assert!(!out.exists());
    // A folder where a file is, and a symbolic link to nothing.
    std::fs::write(dir.path().join("afile"), "x").unwrap();
    let no_folder = |out: PathBuf| match expect_refusal(&quick(&out, 10, 5), Start::New, |e| {
        matches!(e, RunDirError::NoFolder { .. })
    }) {
        RunDirError::NoFolder { problem } => problem,
        _ => unreachable!(),
    };
    assert_eq!(no_folder(dir.path().join("afile/sub")), FolderProblem::File { file: dir.path().join("afile") });
    let link = dir.path().join("link");
    std::os::unix::fs::symlink(dir.path().join("nowhere"), &link).unwrap();
    let missing = std::fs::metadata(&link).unwrap_err().to_string();
    assert_eq!(no_folder(link.clone()), FolderProblem::DanglingLink { link, error: missing });
    // A loop of links says so (it said "a symbolic link to nothing"), with the system's words.
    let looped = dir.path().join("loop");
    std::os::unix::fs::symlink("loop", &looped).unwrap();
    let round = std::fs::metadata(&looped).unwrap_err().to_string();
    assert_eq!(no_folder(looped.clone()), FolderProblem::DanglingLink { link: looped.clone(), error: round.clone() });
    // So does a loop on the way to --out (it gave the token cache's "Too many levels of symbolic
    // links" after its work began).
    assert_eq!(no_folder(looped.join("run")), FolderProblem::DanglingLink { link: looped, error: round });
}

#[test]
fn a_cache_dir_that_cannot_hold_the_cache_is_refused_before_tokenising() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    std::fs::write(dir.path().join("afile"), "x").unwrap();
    // A file given as the folder: it said "File exists (os error 17)".
    let file = {
        let mut config = quick(&out, 5, 5);
        config.data.cache_dir = Some(dir.path().join("afile"));
        config
    };
    let cache_refusal = |config: &TrainConfig| match expect_data_error(config, Start::New) {
        DataError::Cache { problem, .. } => problem,
        other => panic!("expected the token cache's refusal, got {other:?}"),
    };
    let afile = FolderProblem::File { file: dir.path().join("afile") };
    assert_eq!(cache_refusal(&file), CacheProblem::NoFolder(afile));
    // A link to nothing, or a loop of links (it said "File exists (os error 17)").
    std::os::unix::fs::symlink("nowhere", dir.path().join("dangling")).unwrap();
    std::os::unix::fs::symlink("cycle", dir.path().join("cycle")).unwrap();
    for link in ["dangling", "cycle"] {
        let mut config = quick(&out, 5, 5);
        config.data.cache_dir = Some(dir.path().join(link));
        let refused = cache_refusal(&config);
        assert!(matches!(&refused, CacheProblem::NoFolder(FolderProblem::DanglingLink { .. })), "{refused}");
    }
    // The run directory itself, or a folder in it: it tokenised there, then refused the directory
    // for holding the cache's files.
    for cache in [out.clone(), out.join("cache"), dir.path().join(".").join("run")] {
        let mut config = quick(&out, 5, 5);
        config.data.cache_dir = Some(cache.clone());
        assert_eq!(cache_refusal(&config), CacheProblem::InRunDirectory { run: out.clone() });
        assert!(!out.exists(), "{}: nothing is written", cache.display());
    }
}

#[test]
fn the_token_cache_is_never_written_into_the_run_directory() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("empty");
    std::fs::create_dir(&out).unwrap();
    let mut config = quick(&out, 5, 5);
    config.data.cache_dir = None;
    config.output.out = out.join(".");
    train(&config, Start::New, |_| {}).unwrap();
    assert!(!out.join(".token-cache").exists());
    assert!(dir.path().join(".token-cache").is_dir());
}

#[test]
fn checkpoints_named_by_epoch_are_named_in_the_refusal_never_taken_for_none() {
    let dir = tempfile::tempdir().unwrap();
    let config = finished_run(dir.path());
    std::fs::remove_file(config.output.out.join("model.bpk")).unwrap();
    // As versions before 0.1.0 named them: `<kind>-<epoch>.bpk`, epochs of 5 steps.
    let checkpoints = config.output.out.join("checkpoint");
    for step in layernorm_scaling::run::checkpoint_steps(&checkpoints) {
        for kind in ["model", "optim", "scheduler"] {
            for suffix in ["", ".sum"] {
                let from = checkpoints.join(format!("{kind}-step-{step}.bpk{suffix}"));
                std::fs::rename(from, checkpoints.join(format!("{kind}-{}.bpk{suffix}", step / 5))).unwrap();
            }
        }
    }
    // A resume would start again from step 0 and cut the metrics log back: refused, naming them.
    let before = snapshot(&config.output.out);
    let refused = expect_refusal(&config, Start::Resume, |e| matches!(e, RunDirError::EpochNamedCheckpoints { .. }));
    let RunDirError::EpochNamedCheckpoints { files } = refused else { unreachable!() };
    assert!(files.contains(&"model-2.bpk".to_string()), "{files:?}");
    assert!(snapshot(&config.output.out) == before, "nothing is changed");
    // Loading one says how to rename them, not that there are none.
    let (_, problem) = load_problem(&config.output.out, Some(10));
    let epoch_named = CheckpointList::EpochNamed { first: "model-1.bpk".into() };
    assert_eq!(problem, LoadProblem::NoCheckpoint { step: 10, checkpoints: epoch_named });
    // They are the run's own: --overwrite replaces them with it.
    train(&config, Start::Overwrite, |_| {}).unwrap();
    assert!(layernorm_scaling::run::epoch_named_files(&checkpoints).is_empty());
}

#[test]
fn a_bf16_run_resumes_from_its_checkpoint() {
    // A process of its own: a device's precision is fixed by its first tensor.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let train_bf16 = |extra: &[&str], crash_at: Option<&str>| {
        let mut command = Command::new(example("train"));
        command.args(["--device", "flex", "--model", "tiny", "--steps", "10", "--eval-every", "5", "--bf16"]);
        command.args(["--batch-size", "4", "--seq-len", "32", "--builtin-docs", "300", "--samples", "0", "--out"]);
        command.arg(&out).args(extra).env_remove("LAYERNORM_SCALING_CRASH_AT");
        if let Some(point) = crash_at {
            require_fault_points();
            command.env("LAYERNORM_SCALING_CRASH_AT", point);
        }
        command.output().unwrap()
    };
    // Killed after its first checkpoint: the optimiser's bf16 moments come back from it, on
    // Burn's default device. Where that device has no bf16 (this build's first backend is wgpu,
    // here on a CPU Vulkan without bf16), a clear refusal instead of a panic at the first step.
    assert!(!train_bf16(&[], Some("checkpoint:2")).status.success());
    let resumed = train_bf16(&["--resume"], None);
    let stderr = String::from_utf8_lossy(&resumed.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    let default = format!("{:?}", burn::tensor::Device::default());
    if resumed.status.success() {
        assert!(String::from_utf8_lossy(&resumed.stdout).contains(&TrainEvent::Resumed { step: 5 }.to_string()));
    } else {
        // The library's refusal, naming the default device.
        let refused = Error::run_dir(&out, RunDirError::NoBf16Restore { default_device: default.clone() });
        assert_eq!(resumed.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains(&refused.to_string()), "{stderr}");
        assert!(!default.contains("Flex"), "the flex default device takes bf16: {stderr}");
    }
}

/// Issue 55: each device trains `batch_size` sequences of every step, so a resume on another
/// number of devices would change the batch from the resumed step on. Stopped at step 5 on one
/// device, resumed on two, and the reverse: refused before anything is read or written, naming
/// the number; the run's own number of devices (however spelt) finishes it.
#[test]
fn a_resume_on_another_number_of_devices_is_refused_either_way() {
    let dir = tempfile::tempdir().unwrap();
    for (trained, other, expected) in
        [("flex", "flex,flex", "devices: 1 -> 2"), ("flex,flex", "flex", "devices: 2 -> 1")]
    {
        let mut config = quick(&dir.path().join(trained.replace(',', "-")), 10, 5);
        (config.device, config.optim.batch_size) = (trained.into(), 4);
        train(&config, Start::New, |_| {}).unwrap();
        kill_after_checkpoint_before(&config.output.out, 10);
        let before = snapshot(&config.output.out);
        let err = expect_error(&edited(&config, |c| c.device = other.into()), Start::Resume, expected).to_string();
        let devices = trained.split(',').count();
        assert!(err.contains(&format!("= {} sequences", 4 * devices)) && err.contains("--device"), "{err}");
        assert_eq!(snapshot(&config.output.out), before, "nothing was trained or rewritten");
        let same = edited(&config, |c| c.device = trained.to_uppercase());
        let report = train(&same, Start::Resume, |_| {}).unwrap();
        assert_eq!(report.train_losses.len(), 5 * devices, "steps 6..=10, one loss per device and step");
    }
}

/// Issue 55: an `f16-mixed` run's loss scale is part of its checkpoints. The scale starts at 2^30
/// here (`LAYERNORM_SCALING_FAIL_AT=f16-overflow`), so the first steps overflow and are skipped,
/// each halving it; a run killed after its checkpoint of step 5, whose scale had moved, resumes
/// to the uninterrupted run's losses and weights, bit for bit (restarted at 2^16, as it was, the
/// resumed steps applied what the uninterrupted run skipped).
#[test]
fn an_f16_mixed_run_resumes_with_its_loss_scale_bit_identically() {
    // On flex the host decides from the norm it reads; over wgpu the verdict kernel decides on the
    // device, and the checkpoint reads the scale back.
    an_f16_mixed_run_resumes_bit_identically_on("flex");
    #[cfg(feature = "wgpu")]
    an_f16_mixed_run_resumes_bit_identically_on("wgpu-cpu");
}

fn an_f16_mixed_run_resumes_bit_identically_on(device: &str) {
    let dir = tempfile::tempdir().unwrap();
    let f16_run = |out: &Path, extra: &[&str], crash_at: Option<&str>| {
        let mut command = Command::new(example("train"));
        command.args(["--device", device, "--model", "tiny", "--steps", "20", "--eval-every", "5"]);
        command.args(["--precision", "f16-mixed", "--batch-size", "4", "--seq-len", "32", "--builtin-docs", "300"]);
        command.args(["--samples", "0", "--log-every", "1", "--out"]).arg(out).args(extra);
        require_fault_points();
        command.env(FAIL_AT, "f16-overflow").env_remove("LAYERNORM_SCALING_CRASH_AT");
        if let Some(point) = crash_at {
            require_fault_points();
            command.env("LAYERNORM_SCALING_CRASH_AT", point);
        }
        command.output().unwrap()
    };
    let whole = dir.path().join("whole");
    let output = f16_run(&whole, &[], None);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{device}: {stderr}");
    let skipped = |step: usize| stderr.contains(&format!("step {step}: the scaled f16 gradients overflowed"));
    // The scale had moved by the checkpoint (step 5), was still too high after it, and came down.
    assert!(skipped(1) && skipped(6), "{device}: {stderr}");
    assert!(!skipped(20), "{device}: {stderr}");

    let killed = dir.path().join("killed");
    assert!(!f16_run(&killed, &[], Some("checkpoint:2")).status.success());
    let resumed = f16_run(&killed, &["--resume"], None);
    let stderr = String::from_utf8_lossy(&resumed.stderr);
    assert!(resumed.status.success(), "{stderr}");
    assert!(String::from_utf8_lossy(&resumed.stdout).contains(&TrainEvent::Resumed { step: 5 }.to_string()));
    assert!(!stderr.contains("holds no f16 loss scale"), "{stderr}");
    let losses = |out: &Path| -> Vec<(String, usize, usize, u64)> {
        let rows = read_metrics(out).unwrap().into_iter().filter(|r| r.metric == "Loss");
        rows.map(|r| (r.split, r.epoch, r.batch, r.value.to_bits())).collect()
    };
    assert_eq!(losses(&killed), losses(&whole), "{device}: the same losses, to the last bit");
    assert!(weights(&killed) == weights(&whole), "{device}: the same final weights, bit for bit");
}

/// Ctrl-C (SIGINT) or a scheduler's SIGTERM stops a training with one line on standard error: the
/// checkpoint it kept and the command that resumes from it; the program ends as the signal's own
/// default would (a shell shows 130 or 143), so a shell loop around it stops too.
#[cfg(unix)]
#[test]
fn a_training_stopped_by_a_signal_says_what_it_kept_and_how_to_resume() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().unwrap();
    write_corpus(dir.path());
    for (signal, number) in [("INT", 2), ("TERM", 15)] {
        let out = dir.path().join(format!("run-{signal}"));
        let mut child = Command::new(example("train"))
            .args(["--device", "flex", "--model", "tiny", "--steps", "100000", "--eval-every", "2"])
            .args(["--eval-batches", "1", "--batch-size", "2", "--seq-len", "32", "--samples", "0", "--out"])
            .arg(&out)
            .arg("--data")
            .arg(dir.path().join("corpus.txt"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Once a checkpoint is whole: each of its files has its checksum (written after the file).
        // Not step 2's own: on a fast machine it is pruned within milliseconds, and a poll can miss it.
        let checkpointed = || {
            let names: std::collections::HashSet<String> = std::fs::read_dir(out.join("checkpoint"))
                .into_iter()
                .flatten()
                .flatten()
                .map(|entry| entry.file_name().to_string_lossy().into_owned())
                .collect();
            let whole = |step: &str| {
                ["model", "optim", "scheduler"]
                    .iter()
                    .all(|kind| names.contains(&format!("{kind}-step-{step}.bpk.sum")))
            };
            names.iter().filter_map(|name| name.strip_prefix("model-step-")?.strip_suffix(".bpk.sum")).any(whole)
        };
        let started = std::time::Instant::now();
        while !checkpointed() {
            assert!(child.try_wait().unwrap().is_none(), "the training ended before its first checkpoint");
            assert!(started.elapsed().as_secs() < 300, "no checkpoint after 5 minutes");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let kill = Command::new("kill").arg(format!("-{signal}")).arg(child.id().to_string()).status().unwrap();
        assert!(kill.success());
        let output = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.signal(), Some(number), "{stderr}");
        let line = stderr.lines().find(|line| line.starts_with(&format!("stopped by SIG{signal}"))).expect(&stderr);
        assert!(line.ends_with(&format!("resume with: train --resume --out {}", out.display())), "{line}");
        // The step it names is a complete checkpoint, as the resume will find it.
        let step: usize = line
            .split("checkpoint of step ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .expect(line)
            .parse()
            .unwrap();
        for kind in ["model", "optim", "scheduler"] {
            let file = out.join(format!("checkpoint/{kind}-step-{step}.bpk"));
            assert_eq!(layernorm_scaling::io::verify_sum(&file), Ok(()), "{line}");
        }
    }
}
