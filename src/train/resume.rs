//! How a training starts in its run directory ([`Start`]: new, resumed or replacing a run), and
//! the resume policy: what a resumed run may change, the checkpoint it starts from, and where
//! the training starts ([`starting_point`]).

use std::path::Path;

use burn::tensor::Device;

use super::config::TrainConfig;
use super::events::{Events, TrainEvent};
use super::prepare::Prepared;
use super::resume_changes::{check_resume, check_resume_settings};
use crate::error::Error;
use crate::run::{
    has_settings, holds_a_run, is_finished, is_replacing, load_run_model, read_metrics, RunDir, MODEL, TRAIN_CONFIG,
};
use crate::run_dir_error::RunDirError;

/// How a training starts in its run directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Start {
    /// A new run: the directory must be new or empty.
    New,
    /// Continue the run in the directory from its last complete checkpoint (from step 0 when it
    /// has none yet; when every step is done but the final model was cut short, write the final
    /// model). The settings that decide what is trained must be the run's own.
    Resume,
    /// Replace the run in the directory. The old run is set aside, and only removed once the new
    /// one has a checkpoint; a new run that fails before that puts it back.
    Overwrite,
}

/// Where a training starts: the steps of the checkpoints already on disk that the run keeps (the
/// last one its start; none for a new run), and the checkpoint to write the final model from when
/// every step is already done.
pub(super) struct StartingPoint {
    pub existing: Vec<usize>,
    pub finish_at: Option<usize>,
}

/// An error, before anything is prepared or written, when `start` cannot work in `out`: a new run
/// into a run's directory, a resume where there is no run, or one that changes what is trained
/// (its data is compared later, once tokenised). An interrupted --overwrite may have
/// set the run's train.json aside: it is put back under the lock, so a directory holding
/// `.previous-run/` may be resumed.
pub(super) fn check_start(out: &Path, config: &TrainConfig, start: Start) -> Result<(), Error> {
    // Cheap questions only: whether the run is finished (its final model read whole) is asked
    // under the lock, or to word the refusal of a resume.
    let replacing = is_replacing(out);
    // A new run into a run's directory: refused before the data is tokenised into the cache beside
    // it (the same check runs again under the lock).
    if start == Start::New && holds_a_run(out) {
        // While a training holds it, `--resume` would be refused too: say that first.
        let held = crate::run::training_in(out).map(RunDirError::locked);
        return Err(Error::run_dir(out, held.unwrap_or(RunDirError::HoldsARun)));
    }
    if start == Start::Overwrite {
        let foreign = crate::run::foreign_files_in_run_folders(out);
        if !foreign.is_empty() {
            return Err(Error::run_dir(out, RunDirError::ForeignFiles { files: foreign }));
        }
    }
    if start == Start::Resume && !has_settings(out) && !replacing {
        return Err(Error::run_dir(out, RunDirError::NothingToResume));
    }
    // Checkpoints named by epoch are not read: resumed, the run would start again from step 0
    // and its metrics log be cut back to that.
    let epoch_named = crate::run::epoch_named_files(&out.join(crate::run::CHECKPOINTS));
    if start == Start::Resume && !epoch_named.is_empty() && !is_finished(out) {
        return Err(Error::run_dir(out, RunDirError::EpochNamedCheckpoints { files: epoch_named }));
    }
    // train.json edited by hand (steps, seed, batch): the checkpoints were not made with it, and a
    // resume would record a run that never happened.
    if let (Start::Resume, Err(crate::io::SumError::Mismatch(_))) =
        (start, crate::io::verify_sum(&out.join(TRAIN_CONFIG)))
    {
        return Err(Error::run_dir(out, RunDirError::SettingsEdited));
    }
    if start == Start::Resume {
        // The run's train.json records its data paths as given, relative to the folder its
        // training ran in: from another folder they are not found, and the corpus error alone
        // does not say where the path came from.
        if let Some(missing) = config.data.files.iter().chain(&config.eval.valid_data).find(|path| !path.exists()) {
            let here = std::env::current_dir().map(|dir| format!(" ({})", dir.display())).unwrap_or_default();
            return Err(Error::run_dir(out, RunDirError::DataNotFound { data: missing.clone(), here }));
        }
        // The settings are compared before the data is tokenised (and again under the lock),
        // but not while an interrupted --overwrite has the run's files set aside.
        if !replacing {
            check_resume_settings(out, config)?;
        }
    }
    Ok(())
}

/// Decides where a training that starts as `start` begins, in the locked run directory `dir`: a
/// new run needs an empty directory, a resume the run's own settings and data (the settings it
/// may change are reported to `events`), and its last complete, sound checkpoint.
pub(super) fn starting_point(
    dir: &RunDir,
    config: &TrainConfig,
    prepared: &Prepared,
    start: Start,
    events: &Events,
) -> Result<StartingPoint, Error> {
    let refused = |error: RunDirError| Error::run_dir(&config.output.out, error);
    let (existing, finish_at) = match start {
        Start::New if dir.holds_run() => return Err(refused(RunDirError::HoldsARun)),
        Start::New | Start::Overwrite => (Vec::new(), None),
        Start::Resume => {
            // Read under the lock, after an interrupted --overwrite was undone.
            let changes = check_resume(dir, config, prepared).map_err(|error| match dir.restored() {
                // The settings read before the lock were this command's: the stopped replacement's
                // train.json, or the options' defaults if it stopped before writing one. Comparing
                // them with the restored run's would list differences the user never asked for.
                true if is_finished(dir.path()) => refused(RunDirError::RestoredFinished),
                true => refused(RunDirError::RestoredUnfinished { out: config.output.out.clone() }),
                false => refused(error),
            })?;
            // Finished, with or without its checkpoints (deleted to free the disk, say).
            if is_finished(dir.path()) {
                return Err(finished(config));
            }
            for change in changes {
                events.send(TrainEvent::SettingChanged(change.to_string()));
            }
            let kept = resume_checkpoints(dir, &prepared.devices[0], events)?;
            if config.training_precision() == crate::device::Precision::Bf16 && !kept.is_empty() {
                check_bf16_restore().map_err(refused)?;
            }
            let steps = config.optim.steps;
            match kept.last() {
                Some(&step) if step > steps => return Err(refused(RunDirError::CheckpointPastEnd { step, steps })),
                Some(&step) if step == steps => (kept, Some(step)),
                Some(_) => (kept, None),
                None if reached_the_end(dir, config) => return Err(refused(RunDirError::NothingCanFinish)),
                None => {
                    events.send(TrainEvent::Restarted { init_from: config.model.init_from.clone() });
                    (kept, None)
                }
            }
        }
    };
    Ok(StartingPoint { existing, finish_at })
}

/// The checkpoints a resumed run keeps, oldest first, ending with the one it starts from: the
/// newest that is complete (its files match their checksums) and sound (finite weights); empty
/// when there is none. Newer checkpoints that are not are named in warnings; the resumed run
/// writes them again.
fn resume_checkpoints(dir: &RunDir, device: &Device, events: &Events) -> Result<Vec<usize>, Error> {
    let (mut complete, broken) = dir.checkpoints();
    let newest_complete = complete.last().copied().unwrap_or(0);
    let skipping =
        |step: usize, problem: &str| events.warn(format!("skipping the checkpoint of step {step}: {problem}"));
    for (step, problem) in broken.iter().filter(|(step, _)| *step > newest_complete) {
        skipping(*step, problem);
    }
    while let Some(&step) = complete.last() {
        match load_run_model(dir.path(), Some(step), device) {
            Ok(_) => break,
            Err(Error::NonFinite { parameter, .. }) => {
                skipping(step, &format!("its weights are not finite ({parameter})"));
                complete.pop();
            }
            Err(other) => return Err(other),
        }
    }
    Ok(complete)
}

/// An error unless a bf16 run's optimiser state can come back in bf16. Burn 0.22.1 restores it
/// on `Device::default()` (the first backend compiled in) in that device's precision: f32
/// moments beside bf16 gradients would stop the first step with a panic.
fn check_bf16_restore() -> Result<(), RunDirError> {
    let mut default = Device::default();
    // Set here unless the training device is the default one (then it is bf16 already).
    let _ = crate::device::set_precision(&mut default, crate::device::Precision::Bf16);
    if burn::tensor::Tensor::<1>::zeros([1], &default).dtype() == burn::tensor::DType::BF16 {
        return Ok(());
    }
    Err(RunDirError::NoBf16Restore { default_device: format!("{default:?}") })
}

/// Whether the run in `dir` got to its end: its final model or that model's checksum is there
/// (written only when a run finishes), or its metrics record a training loss at its last step.
fn reached_the_end(dir: &RunDir, config: &TrainConfig) -> bool {
    let path = dir.path();
    path.join(MODEL).exists()
        || crate::io::sum_path(&path.join(MODEL)).exists()
        || read_metrics(path).is_ok_and(|rows| rows.iter().any(|r| r.is_train_loss() && r.step >= config.optim.steps))
}

/// The error of resuming a finished run (its final model verifies).
fn finished(config: &TrainConfig) -> Error {
    let run = config.output.out.clone();
    Error::run_dir(&run, RunDirError::Finished { steps: config.optim.steps, run: run.clone() })
}
