//! A run directory's model, saved and loaded without burn-train: what a run records at its start,
//! its final model (`model.bpk` with its checksum, and `model.json`), and loading it or one of its
//! checkpoints with an error that says what to do.

use std::path::{Path, PathBuf};

use burn::module::Module;
use burn::tensor::Device;
use serde::Serialize;

use super::checkpoint_files::{checkpoint_file, checkpoint_steps, epoch_named_files};
use super::model_info::{invalid_model_info, model_info_edited, read_model_info, ModelInfoError, RunModelInfo};
use super::{CHECKPOINTS, MODEL, MODEL_INFO, PREVIOUS_RUN, TRAIN_CONFIG};
use crate::error::Error;
use crate::io::SumError;
use crate::model::{cast_weights_to_device, check_finite, Llama};
use crate::run_dir_error::RunDirError;

/// Writes what a run records at its start, each file atomically with its checksum (`.sum`):
/// `model.json` (`info`: the model, before its weights, so that the checkpoints of an interrupted
/// run can be loaded), then `train.json` (`settings`: every setting, resolved, and the data
/// budget). The checksums tell what the run wrote from an edit by hand since: a resume refuses an
/// edited `train.json`, every loader an edited `model.json`. A directory holding only
/// `model.json` is a start cut short, which a new run may use.
pub fn record_start(dir: &Path, info: &RunModelInfo, settings: &impl Serialize) -> Result<(), Error> {
    let error = |name: &str, e| Error::run_dir(dir, RunDirError::io(format!("write {name}"), e));
    write_json_with_sum(&dir.join(MODEL_INFO), info).map_err(|e| error(MODEL_INFO, e))?;
    crate::io::crash_point("record:model.json");
    write_json_with_sum(&dir.join(TRAIN_CONFIG), settings).map_err(|e| error(TRAIN_CONFIG, e))
}

/// Writes `value` as pretty JSON to `path` with its checksum beside it, atomically: how a run
/// writes its `model.json` and `train.json`.
fn write_json_with_sum(path: &Path, value: &impl Serialize) -> std::io::Result<()> {
    let json = serde_json::to_string_pretty(value).map_err(std::io::Error::other)?;
    crate::io::write_atomically_with_sum(path, json.as_bytes())
}

/// Writes `<dir>/model.json` then `<dir>/model.bpk` (each with its checksum, `.sum`), each
/// atomically. The model and its checksum come last, as they mark the run finished: a kill
/// before them leaves a run that a resume finishes, never a finished one described by the
/// `model.json` of its start.
pub fn save_run_model(dir: impl AsRef<Path>, model: &Llama, info: &RunModelInfo) -> Result<(), Error> {
    let dir = dir.as_ref();
    let path = dir.join(MODEL);
    let error = |e: String| Error::file(&path, format!("cannot write it: {e}"));
    write_json_with_sum(&dir.join(MODEL_INFO), info).map_err(|e| error(e.to_string()))?;
    crate::io::crash_point("final-model:after-model-json");
    // burn-pack writes through a scratch file, synced and renamed into place; the sum follows.
    model.clone().save_file(&path).map_err(|e| error(e.to_string()))?;
    crate::io::write_sum(&path).map_err(|e| error(e.to_string()))
}

/// Loads the model of a run directory (`model.json` + `model.bpk`), or of its checkpoint at
/// optimiser step `step` (`checkpoint/model-step-<step>.bpk`), onto `device`, its weights in the
/// device's float type (a pure-bf16 run's weights are widened on an f32 device, as PyTorch's
/// `load_state_dict` copies into the model's dtype). A file that is missing, cut short or corrupt
/// (checked against its `.sum`) is an error that says what to do; weights holding NaN or infinity
/// are [`Error::NonFinite`].
pub fn load_run_model(
    dir: impl AsRef<Path>,
    step: Option<usize>,
    device: &Device,
) -> Result<(Llama, RunModelInfo), Error> {
    let (model, info) = load_run_model_as_saved(dir, step, device)?;
    Ok((cast_weights_to_device(model, device), info))
}

/// [`load_run_model`], its weights in the float type the file holds them in.
pub(crate) fn load_run_model_as_saved(
    dir: impl AsRef<Path>,
    step: Option<usize>,
    device: &Device,
) -> Result<(Llama, RunModelInfo), Error> {
    let dir = dir.as_ref();
    let file_error = |path: &Path, message: String| Error::file(path, message);
    if let Some(state) = unfinished_start(dir).filter(|_| step.is_none()) {
        return Err(file_error(&dir.join(MODEL), state));
    }
    let info_path = dir.join(MODEL_INFO);
    let info = read_model_info(dir).map_err(|e| match e {
        ModelInfoError::Unreadable(e) => file_error(&info_path, format!("{e}; {}", not_a_run(dir))),
        ModelInfoError::Invalid(e) => invalid_model_info(dir, &e),
    })?;
    info.model.validate()?;
    // The weights were trained with the model it described when written: an edit would load them
    // into another model (another scheme, another rope) without a word.
    if model_info_edited(dir) {
        return Err(file_error(
            &info_path,
            "differs from the one the run wrote (edited by hand?): its weights were trained with the model it \
             described then; put it back (a retrofit onto another scheme is `train --init-from` with --norm)"
                .to_string(),
        ));
    }
    let checkpoints = dir.join(CHECKPOINTS);
    // The checkpoints that can be loaded: those with a model file and its checksum (a training
    // prunes the kinds one by one, and writes the checksum once the file is complete).
    let steps: Vec<usize> = checkpoint_steps(&checkpoints)
        .into_iter()
        .filter(|&step| {
            let model = checkpoint_file(&checkpoints, "model", step);
            model.is_file() && crate::io::sum_path(&model).is_file()
        })
        .collect();
    let listed = || {
        if !steps.is_empty() {
            format!(
                "the run's checkpoints are --step {}",
                steps.iter().map(|e| e.to_string()).collect::<Vec<_>>().join(", ")
            )
        } else {
            match epoch_named_files(&checkpoints).first() {
                Some(old) => format!(
                    "the run has no checkpoints named by step; its checkpoint/ holds ones named by epoch ({old}, ...), \
                     as versions before 0.1.0 named them: rename each <kind>-<epoch>.bpk (and its .sum) to \
                     <kind>-step-<step>.bpk, the step being the epoch times the run's eval_every"
                ),
                None => "the run has no checkpoints".to_string(),
            }
        }
    };
    let path = match step {
        None => dir.join(MODEL),
        Some(step) => checkpoint_file(&checkpoints, "model", step),
    };
    let finish = how_to_finish(dir, !steps.is_empty());
    // What else to load: a checkpoint, when the run has one.
    let or_checkpoint = || {
        if steps.is_empty() {
            format!(" ({})", listed())
        } else {
            format!(", or load a checkpoint ({})", listed())
        }
    };
    // The training holding this run, looked up once, where a checkpoint has no checksum yet.
    let verified = crate::io::verify_sum(&path);
    let holder = matches!(verified, Err(SumError::NoSum)).then(|| super::training_in(dir)).flatten();
    match (verified, step) {
        (Ok(()), _) => {}
        (Err(SumError::Missing), None) => {
            return Err(file_error(
                &path,
                format!("missing: the training has not finished; {finish}{}", or_checkpoint()),
            ))
        }
        (Err(SumError::Missing), Some(step)) if steps.contains(&step) => {
            return Err(file_error(&path, format!("{}; {}", removed_while_read(dir), listed())))
        }
        (Err(SumError::Missing), Some(step)) => {
            return Err(file_error(&path, format!("no checkpoint at step {step}: {}", listed())))
        }
        (Err(problem), None) => {
            return Err(file_error(&path, format!("incomplete: {problem}; {finish}{}", or_checkpoint())))
        }
        (Err(SumError::NoSum), Some(_)) if holder.is_some() => {
            let pid = holder.unwrap_or_default();
            return Err(file_error(
                &path,
                format!(
                    "being written by the training running in {} (PID {pid}); load a finished checkpoint ({})",
                    dir.display(),
                    listed()
                ),
            ));
        }
        (Err(problem), Some(_)) => {
            return Err(file_error(&path, format!("{problem}; load another checkpoint ({})", listed())))
        }
    }
    let model = info.model.init(device)?;
    let mismatch = |e: String| {
        // Burn lists every mismatching tensor: the first ones say enough.
        let short: String = e.chars().take(300).collect();
        let more = if short.len() < e.len() { " ..." } else { "" };
        file_error(&path, format!("does not match model.json ({short}{more}); was model.json replaced?"))
    };
    // Read whole and checked in memory: burn-pack reads a file lazily, by its path, so a file
    // removed or replaced after its check above (a training pruning its checkpoints, an
    // --overwrite setting the run aside) stopped the load with a panic, or went unchecked.
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(file_error(&path, removed_while_read(dir))),
        Err(e) => return Err(file_error(&path, format!("cannot read it: {e}"))),
    };
    if let Err(problem) = crate::io::verify_sum_of(&path, &bytes) {
        return Err(file_error(&path, format!("{} ({problem})", removed_while_read(dir))));
    }
    let record = burn::store::ModuleRecord::from_bytes(burn::tensor::Bytes::from_bytes_vec(bytes))
        .map_err(|e| mismatch(e.to_string()))?;
    let model = if step.is_some() {
        // Checkpoints hold burn-train's training wrapper, whose parameters live under `model.`.
        Checkpointed { model }.try_load_record(record).map_err(|e| mismatch(e.to_string()))?.model
    } else {
        model.try_load_record(record).map_err(|e| mismatch(e.to_string()))?
    };
    check_finite(&model, || {
        format!(
            "the run in {} diverged; load an earlier checkpoint with --step N, or train again with a lower learning \
             rate",
            dir.display()
        )
    })?;
    Ok((model, info))
}

/// The error of a model file that was there when the listing was made and gone when it was read:
/// a training into `dir` (pruning its checkpoints, or an `--overwrite` setting the run aside).
fn removed_while_read(dir: &Path) -> String {
    let who = match super::training_in(dir) {
        Some(pid) => format!("the training running in {} (PID {pid})", dir.display()),
        None => format!("a training into {}", dir.display()),
    };
    format!(
        "removed or replaced while it was being read, by {who}, which deletes older checkpoints as it writes new \
         ones (an --overwrite sets the whole run aside); load a newer checkpoint, or wait for that training to end"
    )
}

/// What to do about a run in `dir` that has no (sound) final model, by what it shows: a training
/// still running (its lock is held), a run that diverged (its log holds a non-finite loss or
/// gradient norm: resuming with the same settings would diverge again), a run that reached its
/// last step (its final model was damaged since: nothing can finish it), or one stopped early.
fn how_to_finish(dir: &Path, has_checkpoints: bool) -> String {
    let shown = dir.display();
    if let Some(pid) = super::training_in(dir) {
        return format!("the training is still running (PID {pid}); wait for it to end");
    }
    let rows = super::read_metrics(dir).unwrap_or_default();
    let diverged = rows.iter().find(|row| {
        let watched = ["Loss", "Gradient norm"].contains(&row.metric.as_str());
        row.split == "train" && row.is_batch_value() && watched && !row.value.is_finite()
    });
    if let Some(row) = diverged.filter(|row| row.step == 1) {
        return format!(
            "the run diverged at its first step (its {} is {}), before any update: the learning rate is not the \
             cause but the initial weights; train it again with other init settings (the model's init_std, \
             embed_init_std, norm_eps)",
            row.metric.to_lowercase(),
            row.value
        );
    }
    if let Some(row) = diverged {
        let what =
            format!("the run diverged (its {} is {} at step {})", row.metric.to_lowercase(), row.value, row.step);
        return match has_checkpoints {
            true => format!(
                "{what}; resume it from a checkpoint with a lower learning rate (`train --resume --lr ... --out \
                 {shown}`), or train again"
            ),
            false => format!("{what} before its first checkpoint; train it again with a lower --lr"),
        };
    }
    let steps = std::fs::read_to_string(dir.join(TRAIN_CONFIG))
        .ok()
        .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
        .and_then(|config| config["steps"].as_u64());
    let last = rows.iter().filter(|row| row.is_train_loss()).map(|row| row.step as u64).max();
    if let (Some(steps), Some(last)) = (steps, last) {
        if last >= steps && checkpoint_steps(&dir.join(CHECKPOINTS)).is_empty() {
            return format!(
                "the run reached its last step, but its final model is damaged and no checkpoint is left to finish it \
                 from; train it again (`train --overwrite --out {shown}`, or a new --out)"
            );
        }
    }
    format!("finish the run with `train --resume --out {shown}` (same settings)")
}

/// The first run (a folder with `model.json`) inside `dir`, one or two levels down, by name: a
/// folder of runs, or of groups of runs (a sweep's `<scheme>/seed-<n>`).
fn first_run_inside(dir: &Path) -> Option<PathBuf> {
    let folders = |dir: &Path| -> Vec<PathBuf> {
        let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
            .map(|entries| entries.flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect())
            .unwrap_or_default();
        found.sort();
        found
    };
    let is_run = |p: &Path| p.join(MODEL_INFO).is_file();
    let inside = folders(dir);
    inside.iter().find(|p| is_run(p)).cloned().or_else(|| inside.iter().flat_map(|p| folders(p)).find(|p| is_run(p)))
}

/// Why the run in `dir` has no final model to load, if it has none (unfinished, or its model cut
/// short), with how to finish it: for a program that reads only final models (`--init-from`).
#[cfg(feature = "train")]
pub(crate) fn missing_final_model(dir: &Path) -> Option<String> {
    if let Some(state) = unfinished_start(dir) {
        return Some(format!("its final model is {state}"));
    }
    let has_checkpoints = !checkpoint_steps(&dir.join(CHECKPOINTS)).is_empty();
    match crate::io::verify_sum(&dir.join(MODEL)) {
        Ok(()) => None,
        Err(SumError::Missing) => Some(format!(
            "it has no final model: the training has not finished; {}",
            how_to_finish(dir, has_checkpoints)
        )),
        Err(problem) => {
            Some(format!("its final model is incomplete ({problem}); {}", how_to_finish(dir, has_checkpoints)))
        }
    }
}

/// Why a run directory without a final model has none when a training was replacing or starting
/// it: an `--overwrite` under way or killed (the replaced run is in `.previous-run/`), or a start
/// killed before its settings were written.
fn unfinished_start(dir: &Path) -> Option<String> {
    if dir.join(MODEL).is_file() {
        return None;
    }
    let (aside, d) = (dir.join(PREVIOUS_RUN), dir.display());
    if let Some(pid) = super::training_in(dir).filter(|_| aside.is_dir()) {
        return Some(format!(
            "missing: an --overwrite is replacing this run now (PID {pid}); the run it replaces is in {}. Wait \
             for it to end, or read the old run from there",
            aside.display()
        ));
    }
    if aside.is_dir() {
        return Some(format!(
            "missing: an --overwrite is replacing this run (or was killed); the run it replaces is in {}. If the new \
             run has no checkpoint yet, the next training into {d} puts the old run back; if it has one, \
             `train --config {d}/train.json --resume` finishes the new run and then deletes the old one",
            aside.display()
        ));
    }
    let started = dir.join(MODEL_INFO).is_file() && !dir.join(TRAIN_CONFIG).exists();
    started.then(|| {
        format!("missing: the training into {d} was stopped before it started; train into it again, without --resume")
    })
}

/// What a directory without `model.json` is, for an error: not a folder, a folder of runs, or
/// something else.
pub(super) fn not_a_run(dir: &Path) -> String {
    if !dir.is_dir() {
        format!("{} is not a folder", dir.display())
    } else if let Some(run) = first_run_inside(dir) {
        format!("{} holds runs: give one of them, e.g. {}", dir.display(), run.display())
    } else {
        format!("is {} a run directory of the train example?", dir.display())
    }
}

/// The record layout of a checkpoint: burn-train saves the training wrapper, whose only
/// parameters are the model's, under `model.`.
#[derive(Module, Debug)]
struct Checkpointed {
    model: Llama,
}
