//! A run directory's model: its final model (`model.bpk` with its checksum, and `model.json`)
//! and its checkpoints (`checkpoint/model-step-<step>.bpk`), saved and loaded without burn-train.

use std::path::{Path, PathBuf};

use burn::module::Module;
use burn::tensor::Device;
use serde::{Deserialize, Serialize};

use super::{CHECKPOINTS, MODEL, MODEL_INFO, PREVIOUS_RUN, TRAIN_CONFIG};
use crate::io::SumError;
use crate::model::{cast_weights_to_device, check_finite, Llama};
use crate::{Error, LlamaConfig};

/// Why a run's `model.json` could not be read ([`read_model_info`]).
#[derive(Debug)]
pub(crate) enum ModelInfoError {
    /// The file cannot be read (missing, say).
    Unreadable(std::io::Error),
    /// It is not a [`RunModelInfo`].
    Invalid(serde_json::Error),
}

impl std::fmt::Display for ModelInfoError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ModelInfoError::Unreadable(e) => e.fmt(f),
            ModelInfoError::Invalid(e) => e.fmt(f),
        }
    }
}

/// The run's `model.json` in `dir`, as written: the one reader of the file.
pub(crate) fn read_model_info(dir: &Path) -> Result<RunModelInfo, ModelInfoError> {
    let text = std::fs::read_to_string(dir.join(MODEL_INFO)).map_err(ModelInfoError::Unreadable)?;
    serde_json::from_str(&text).map_err(ModelInfoError::Invalid)
}

/// The error for a `model.json` in `dir` that is no run description (`e`, the parser's words):
/// what to do, and whether its checksum shows it changed since the run wrote it.
pub(crate) fn invalid_model_info(dir: &Path, e: &serde_json::Error) -> Error {
    let changed = match model_info_edited(dir) {
        true => "it differs from the one the run wrote (cut short or edited); ",
        false => "",
    };
    Error::file(
        dir.join(MODEL_INFO),
        format!(
            "not a run description ({e}); {changed}put back the run's own model.json (from a backup), or train the \
             run again"
        ),
    )
}

/// Whether the run's `model.json` in `dir` differs from the one the run wrote (its checksum says
/// so; edited by hand): its weights were trained with the model it described then.
pub(crate) fn model_info_edited(dir: &Path) -> bool {
    matches!(crate::io::verify_sum(&dir.join(MODEL_INFO)), Err(SumError::Mismatch(_)))
}

/// The checkpoint kinds burn-train saves at each checkpoint.
pub const CHECKPOINT_KINDS: [&str; 3] = ["model", "optim", "scheduler"];

/// The optimiser steps that have a checkpoint file of any kind in the checkpoint directory
/// `dir` (`<kind>-step-<step>.bpk`), oldest first.
pub fn checkpoint_steps(dir: &Path) -> Vec<usize> {
    let mut steps: Vec<usize> = std::fs::read_dir(dir)
        .map(|entries| entries.flatten().filter_map(|e| checkpoint_step(&e.file_name().to_string_lossy())).collect())
        .unwrap_or_default();
    steps.sort_unstable();
    steps.dedup();
    steps
}

/// `<dir>/<kind>-step-<step>.bpk`.
pub fn checkpoint_file(dir: &Path, kind: &str, step: usize) -> PathBuf {
    dir.join(format!("{kind}-step-{step}.bpk"))
}

/// The step in a checkpoint file's name `<kind>-step-<step>.bpk`, if it is one.
fn checkpoint_step(name: &str) -> Option<usize> {
    let stem = name.strip_suffix(".bpk")?;
    CHECKPOINT_KINDS.iter().find_map(|kind| stem.strip_prefix(&format!("{kind}-step-"))?.parse().ok())
}

/// Whether `name` is a checkpoint file's or its checksum's (`model-step-5.bpk`, with or without
/// `.sum`).
#[cfg(feature = "train")]
pub(crate) fn is_checkpoint_file_name(name: &str) -> bool {
    checkpoint_step(name.strip_suffix(".sum").unwrap_or(name)).is_some()
}

/// How a run's validation intervals (burn-train's epochs, of `steps_per_epoch` optimiser steps)
/// map to the steps that name its checkpoints: epoch `e` ends at step `min(e * steps_per_epoch,
/// steps)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct EpochSteps {
    /// Optimiser steps in a validation interval (`eval_every`).
    pub(crate) steps_per_epoch: usize,
    /// Optimiser steps of the whole run (the last interval may be short).
    pub(crate) steps: usize,
}

impl EpochSteps {
    /// The mapping of the run in `run_dir`, from its `train.json` (`eval_every` and `steps`).
    pub fn of_run(run_dir: impl AsRef<Path>) -> Result<Self, Error> {
        let path = run_dir.as_ref().join(TRAIN_CONFIG);
        let text = std::fs::read_to_string(&path)
            .map_err(|e| Error::file(&path, format!("{e}: an epoch's step is read from the run's train.json")))?;
        let json: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| Error::file(&path, format!("not valid JSON: {e}")))?;
        let field = |name: &str| json.get(name).and_then(serde_json::Value::as_u64).map(|n| n as usize);
        match (field("eval_every").filter(|&n| n > 0), field("steps")) {
            (Some(steps_per_epoch), Some(steps)) => Ok(Self { steps_per_epoch, steps }),
            _ => Err(Error::file(&path, "needs a positive `eval_every` and `steps` to tell the step of an epoch")),
        }
    }

    /// The step at which `epoch` (from 1) ends.
    pub fn step(self, epoch: usize) -> usize {
        epoch.saturating_mul(self.steps_per_epoch).min(self.steps)
    }

    /// The step at which `epoch` ends, when the run has that epoch (`1..=epochs`).
    pub fn checked_step(self, epoch: usize) -> Option<usize> {
        (1..=self.epochs()).contains(&epoch).then(|| self.step(epoch))
    }

    /// The epoch that ends at `step` (a checkpoint's step).
    pub fn epoch(self, step: usize) -> usize {
        step.div_ceil(self.steps_per_epoch.max(1))
    }

    /// The run's epochs (the last may be short).
    pub fn epochs(self) -> usize {
        self.epoch(self.steps)
    }
}

/// The optimiser step at which validation interval `epoch` (from 1) of the run in `run_dir` ends,
/// from its `train.json`: what `--epoch` (deprecated) means.
#[cfg(feature = "cli")]
pub(crate) fn step_of_epoch(run_dir: impl AsRef<Path>, epoch: usize) -> Result<usize, Error> {
    let steps = EpochSteps::of_run(&run_dir)?;
    steps.checked_step(epoch).ok_or_else(|| {
        Error::file(
            run_dir.as_ref().join(TRAIN_CONFIG),
            format!(
                "the run has epochs (validation intervals) 1..={}, not {epoch}; give --step instead",
                steps.epochs()
            ),
        )
    })
}

/// What a run directory records about its model: enough to rebuild it and its tokenizer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunModelInfo {
    /// The model's config.
    pub model: LlamaConfig,
    /// The tokenizer spec (`byte` or a `tokenizer.json` path).
    pub tokenizer: String,
    /// Optimiser steps taken.
    pub steps: usize,
    /// What the model trains on: the [content fingerprint](crate::data::TokenCache::content_fingerprint)
    /// of its token cache (a resume must train on the same data).
    #[serde(default)]
    pub data: Option<String>,
    /// What decides the tokens ([`Tokenizer::identity`](crate::data::Tokenizer::identity): `byte`,
    /// or a `tokenizer.json`'s size and CRC-32): a program that loads the model with another
    /// tokenizer is refused. `None` in runs of earlier versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenizer_identity: Option<String>,
}

/// Writes what a run records at its start, each file atomically with its checksum (`.sum`):
/// `model.json` (`info`: the model, before its weights, so that the checkpoints of an interrupted
/// run can be loaded), then `train.json` (`settings`: every setting, resolved, and the data
/// budget). The checksums tell what the run wrote from an edit by hand since: a resume refuses an
/// edited `train.json`, every loader an edited `model.json`. A directory holding only
/// `model.json` is a start cut short, which a new run may use.
pub fn record_start(dir: &Path, info: &RunModelInfo, settings: &impl Serialize) -> Result<(), Error> {
    let error = |name: &str, e| Error::RunDir { path: dir.to_path_buf(), message: format!("cannot write {name}: {e}") };
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
            "the run has no checkpoints".to_string()
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

#[cfg(test)]
mod epoch_step_tests {
    use super::EpochSteps;

    #[test]
    fn a_ragged_run_maps_its_epochs_to_steps_and_back() {
        // 25 steps validated every 10: epochs end at steps 10, 20 and 25.
        let steps = EpochSteps { steps_per_epoch: 10, steps: 25 };
        assert_eq!(steps.epochs(), 3);
        assert_eq!([1, 2, 3].map(|e| steps.step(e)), [10, 20, 25]);
        assert_eq!([10, 20, 25].map(|s| steps.epoch(s)), [1, 2, 3]);
        assert_eq!((steps.checked_step(0), steps.checked_step(3), steps.checked_step(4)), (None, Some(25), None));
    }
}

#[cfg(test)]
mod model_info_tests {
    use super::*;

    #[test]
    fn a_damaged_model_json_says_what_to_do_and_whether_the_run_wrote_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(MODEL_INFO);
        crate::io::write_atomically_with_sum(&path, br#"{"model": {"d_model": 64"#).unwrap();
        let Err(ModelInfoError::Invalid(e)) = read_model_info(dir.path()) else {
            panic!("a cut-short file is invalid")
        };
        let message = invalid_model_info(dir.path(), &e).to_string();
        assert!(message.contains("not a run description") && message.contains("put back"), "{message}");
        assert!(!message.contains("differs from the one the run wrote"), "the checksum matches: {message}");

        std::fs::write(&path, "{}").unwrap();
        let Err(ModelInfoError::Invalid(e)) = read_model_info(dir.path()) else { panic!("`{{}}` is no run") };
        let message = invalid_model_info(dir.path(), &e).to_string();
        assert!(message.contains("differs from the one the run wrote"), "{message}");
    }
}
