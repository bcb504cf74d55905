//! How burn-train's epochs (validation intervals) map to the optimiser steps that name a run's
//! checkpoints.

use std::path::Path;

use super::TRAIN_CONFIG;
use crate::error::Error;

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
fn step_of_epoch(run_dir: impl AsRef<Path>, epoch: usize) -> Result<usize, Error> {
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

/// The checkpoint step that `--step` or the deprecated `--epoch` picks for the run in `run_dir`,
/// and, for `--epoch`, the warning of its deprecation (naming the `--step` to give instead).
#[cfg(feature = "cli")]
pub(crate) fn step_of_options(
    run_dir: &Path,
    step: Option<usize>,
    epoch: Option<usize>,
) -> Result<(Option<usize>, Option<String>), Error> {
    let Some(epoch) = epoch else { return Ok((step, None)) };
    let step = step_of_epoch(run_dir, epoch)?;
    Ok((Some(step), Some(format!("--epoch is deprecated and goes in the next release; use --step {step}"))))
}

#[cfg(test)]
mod tests {
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
