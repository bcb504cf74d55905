//! A run directory's model, saved and loaded without burn-train: what a run records at its start,
//! its final model (`model.bpk` with its checksum, and `model.json`), and loading it or one of its
//! checkpoints with an error that says what to do.

use std::path::Path;

use burn::module::Module;
use burn::tensor::Device;
use serde::Serialize;

use super::checkpoint_files::{checkpoint_file, checkpoint_steps};
use super::load_diagnosis::{checkpoint_list, finish_advice, found_instead};
use super::model_info::{invalid_model_info, model_info_edited, read_model_info, ModelInfoError, RunModelInfo};
use super::{CHECKPOINTS, MODEL, MODEL_INFO, PREVIOUS_RUN, TRAIN_CONFIG};
use crate::error::Error;
use crate::io::SumError;
use crate::load_problem::{CheckpointList, LoadProblem};
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
    let refused = |path: &Path, problem: LoadProblem| Error::run_model(path, problem);
    if let Some(problem) = unfinished_start(dir).filter(|_| step.is_none()) {
        return Err(refused(&dir.join(MODEL), problem));
    }
    let info_path = dir.join(MODEL_INFO);
    let info = read_model_info(dir).map_err(|e| match e {
        ModelInfoError::Unreadable(e) => refused(&info_path, not_a_run(dir, &e)),
        ModelInfoError::Invalid(e) => invalid_model_info(dir, &e),
    })?;
    info.model.validate()?;
    // The weights were trained with the model it described when written: an edit would load them
    // into another model (another scheme, another rope) without a word.
    if model_info_edited(dir) {
        return Err(refused(&info_path, LoadProblem::ModelInfoEdited));
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
    // Listed only for an error (it reads the checkpoint folder again where none is named by step).
    let listed = || checkpoint_list(&checkpoints, &steps);
    let path = match step {
        None => dir.join(MODEL),
        Some(step) => checkpoint_file(&checkpoints, "model", step),
    };
    let finish = || finish_advice(dir, !steps.is_empty());
    let removed = |problem: Option<SumError>, checkpoints: Option<CheckpointList>| {
        let (run, pid) = (dir.to_path_buf(), super::training_in(dir));
        LoadProblem::RemovedWhileRead { run, pid, problem, checkpoints }
    };
    let problem = match (crate::io::verify_sum(&path), step) {
        (Ok(()), _) => None,
        (Err(SumError::Missing), None) => Some(LoadProblem::NotFinished { finish: finish(), checkpoints: listed() }),
        (Err(SumError::Missing), Some(step)) if steps.contains(&step) => Some(removed(None, Some(listed()))),
        (Err(SumError::Missing), Some(step)) => Some(LoadProblem::NoCheckpoint { step, checkpoints: listed() }),
        (Err(problem), None) => Some(LoadProblem::Incomplete { problem, finish: finish(), checkpoints: listed() }),
        // The training holding this run, where a checkpoint has no checksum yet.
        (Err(SumError::NoSum), Some(_)) => match super::training_in(dir) {
            Some(pid) => Some(LoadProblem::BeingWritten { run: dir.to_path_buf(), pid, checkpoints: listed() }),
            None => Some(LoadProblem::DamagedCheckpoint { problem: SumError::NoSum, checkpoints: listed() }),
        },
        (Err(problem), Some(_)) => Some(LoadProblem::DamagedCheckpoint { problem, checkpoints: listed() }),
    };
    if let Some(problem) = problem {
        return Err(refused(&path, problem));
    }
    let model = info.model.init(device)?;
    let mismatch = |e: String| {
        // Burn lists every mismatching tensor: the first ones say enough.
        let short: String = e.chars().take(300).collect();
        let more = if short.len() < e.len() { " ..." } else { "" };
        refused(&path, LoadProblem::DoesNotMatch { detail: format!("{short}{more}") })
    };
    // Read whole and checked in memory: burn-pack reads a file lazily, by its path, so a file
    // removed or replaced after its check above (a training pruning its checkpoints, an
    // --overwrite setting the run aside) stopped the load with a panic, or went unchecked.
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(refused(&path, removed(None, None))),
        Err(e) => return Err(refused(&path, LoadProblem::CannotRead { kind: e.kind(), error: e.to_string() })),
    };
    if let Err(problem) = crate::io::verify_sum_of(&path, &bytes) {
        return Err(refused(&path, removed(Some(problem), None)));
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

/// Why the run in `dir` has no final model to load, if it has none (unfinished, or its model cut
/// short), with how to finish it: for a program that reads only final models (`--init-from`).
#[cfg(feature = "train")]
pub(crate) fn missing_final_model(dir: &Path) -> Option<LoadProblem> {
    if let Some(problem) = unfinished_start(dir) {
        return Some(problem);
    }
    let problem = crate::io::verify_sum(&dir.join(MODEL)).err()?;
    // What to do, read from the run's lock and log: only for a final model that is not sound.
    let checkpoints = dir.join(CHECKPOINTS);
    let steps = checkpoint_steps(&checkpoints);
    let (finish, checkpoints) = (finish_advice(dir, !steps.is_empty()), checkpoint_list(&checkpoints, &steps));
    Some(match problem {
        SumError::Missing => LoadProblem::NotFinished { finish, checkpoints },
        problem => LoadProblem::Incomplete { problem, finish, checkpoints },
    })
}

/// Why a run directory without a final model has none when a training was replacing or starting
/// it: an `--overwrite` under way or killed (the replaced run is in `.previous-run/`), or a start
/// killed before its settings were written.
fn unfinished_start(dir: &Path) -> Option<LoadProblem> {
    if dir.join(MODEL).is_file() {
        return None;
    }
    let aside = dir.join(PREVIOUS_RUN);
    if let Some(pid) = super::training_in(dir).filter(|_| aside.is_dir()) {
        return Some(LoadProblem::BeingReplaced { pid, aside });
    }
    if aside.is_dir() {
        return Some(LoadProblem::Replacing { run: dir.to_path_buf(), aside });
    }
    let started = dir.join(MODEL_INFO).is_file() && !dir.join(TRAIN_CONFIG).exists();
    started.then(|| LoadProblem::StoppedBeforeStart { run: dir.to_path_buf() })
}

/// The problem of a directory whose `model.json` could not be read (`error`): not a run, with
/// what it is instead.
fn not_a_run(dir: &Path, error: &std::io::Error) -> LoadProblem {
    LoadProblem::NotARun { kind: error.kind(), error: error.to_string(), what: found_instead(dir) }
}

/// The record layout of a checkpoint: burn-train saves the training wrapper, whose only
/// parameters are the model's, under `model.`.
#[derive(Module, Debug)]
struct Checkpointed {
    model: Llama,
}
