//! A sweep: one training config run under several normalisation schemes and seeds, as the
//! paper's Table 1 compares them, into `<out>/<scheme>/seed-<n>/`, resumable. Two more axes are
//! optional: inits (`--inits normal,scaled`: `<out>/<scheme>+<init>/seed-<n>/`, `normal` adding
//! nothing to the name) and depths (`--layers 4,8,16`: `<out>/layers-<L>/<scheme>/seed-<n>/`).
//!
//! Every `(scheme, seed)` pair gets the same data order and initial weights for its seed (the
//! seed drives both). A pair already finished is skipped, an interrupted one resumed, and a
//! diverged one recorded as such while the sweep goes on. `sweep.json` in `<out>` records the
//! settings and every pair's outcome; it is rewritten (atomically) after each pair. Once a pair has
//! started, what it trains is fixed, the number of devices included (each trains a micro-batch of
//! every step); the devices may be others of that number, and a pair trained on others than the
//! sweep began with has them recorded as its own.

use std::collections::BTreeMap;
use std::time::Instant;

use super::events::TrainEvent;
use super::monitor::RunMonitor;
use super::prepare::validation_data;
use super::resume::Start;
use super::run_verdict::RunFailure;
use super::sweep_directory::Checked;
use super::sweep_plan::{PairOutcome, Sweep, SweepPair, SweepRecord, SWEEP_FILE};
use super::training::{train, validation_loss};
use super::TrainConfig;
use crate::error::Error;
use crate::io::write_atomically;
use crate::run::take_lock;
use crate::run::{load_run_model, read_metrics, RunState};
use crate::sweep_error::SweepError;

/// What a sweep does with a pair that has no recorded outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PairAction {
    /// Trains it from the start.
    Train,
    /// Resumes it from its last checkpoint.
    Resume,
    /// Measures it: its final model is written (the sweep was interrupted before recording it).
    Measure,
}

/// What a sweep reports as it goes.
#[derive(Clone, Debug)]
pub enum SweepEvent<'a> {
    /// A pair starts.
    Starting {
        /// The pair.
        pair: &'a SweepPair,
        /// Its place among the pairs, from 1.
        index: usize,
        /// Pairs in the sweep.
        total: usize,
        /// What the sweep does with it.
        action: PairAction,
        /// Estimated seconds left (`None` until a pair has trained in this call).
        eta_seconds: Option<f64>,
    },
    /// A pair is skipped: its outcome is already recorded.
    Skipped {
        /// The pair.
        pair: &'a SweepPair,
        /// Its recorded outcome.
        outcome: &'a PairOutcome,
    },
    /// A pair's training reports something (progress, a note, a warning).
    Training {
        /// The pair.
        pair: &'a SweepPair,
        /// What its training reports.
        event: TrainEvent,
    },
    /// A pair ended.
    Done {
        /// The pair.
        pair: &'a SweepPair,
        /// How it ended.
        outcome: &'a PairOutcome,
    },
}

impl Sweep {
    /// Runs every pair not yet done and returns the record of the whole sweep. An error other
    /// than a divergence (bad data, a full disk, an interruption) stops the sweep; what was
    /// finished stays recorded, and running the sweep again goes on from there.
    pub fn run(&self, mut progress: impl FnMut(SweepEvent) + Send) -> Result<SweepRecord, Error> {
        let out = &self.config.output.out;
        self.check()?;
        let dir = || out.clone();
        std::fs::create_dir_all(out).map_err(|source| SweepError::Io { dir: dir(), doing: "create it", source })?;
        // One sweep at a time in a directory; the outcomes are read again under the lock.
        let _lock = take_lock(out).map_err(|refused| SweepError::Locked { dir: dir(), refused })?;
        let Checked { outcomes, data, under_way } = self.checked()?;
        let mut record = SweepRecord {
            config: self.config.clone(),
            schemes: self.schemes.clone(),
            seeds: self.seeds.clone(),
            inits: self.inits.clone(),
            depths: self.depths.clone(),
            outcomes,
            data,
            devices: BTreeMap::new(),
        };
        if let Some(under_way) = under_way {
            // The devices the pairs done ran on stay recorded (their number cannot change).
            record.config.device = under_way.config.device;
            record.devices = under_way.devices;
            record.devices.retain(|key, _| record.outcomes.contains_key(key));
        }
        self.write_record(&record)?;
        let pairs = self.pairs();
        let (mut trained, mut seconds) = (0usize, 0.0f64);
        for (index, pair) in pairs.iter().enumerate() {
            if let Some(outcome) = record.outcomes.get(&pair.key()) {
                self.check_unchanged(pair)?;
                progress(SweepEvent::Skipped { pair, outcome });
                continue;
            }
            let config = self.pair_config(pair);
            let state = RunState::of(&pair.dir);
            let action = if state.is_finished() {
                PairAction::Measure
            } else if state.has_settings {
                PairAction::Resume
            } else {
                PairAction::Train
            };
            let left = pairs[index..].iter().filter(|p| !record.outcomes.contains_key(&p.key())).count();
            let eta_seconds = (trained > 0).then(|| seconds / trained as f64 * left as f64);
            progress(SweepEvent::Starting { pair, index: index + 1, total: pairs.len(), action, eta_seconds });
            let started = Instant::now();
            let report = |event| progress(SweepEvent::Training { pair, event });
            let measured = match action {
                PairAction::Measure => measure_finished(&config, report),
                PairAction::Resume => train(&config, Start::Resume, report).map(|r| (r.valid_loss, r.verdict)),
                PairAction::Train => train(&config, Start::New, report).map(|r| (r.valid_loss, r.verdict)),
            };
            let outcome = match measured {
                Ok((valid_loss, None)) => PairOutcome::Finished { valid_loss },
                Ok((_, Some(failure))) => PairOutcome::Diverged { reason: failure.to_string() },
                Err(Error::Diverged { reason, checkpoint, lr }) => {
                    PairOutcome::Diverged { reason: crate::error::diverged_message(&reason, &checkpoint, lr) }
                }
                Err(Error::NonFinite { parameter, advice }) => {
                    PairOutcome::Diverged { reason: format!("{parameter} is not finite: {advice}") }
                }
                Err(other) => return Err(other),
            };
            trained += 1;
            seconds += started.elapsed().as_secs_f64();
            progress(SweepEvent::Done { pair, outcome: &outcome });
            if self.config.device == record.config.device {
                record.devices.remove(&pair.key());
            } else {
                record.devices.insert(pair.key(), self.config.device.clone());
            }
            record.outcomes.insert(pair.key(), outcome);
            self.write_record(&record)?;
        }
        // The record keeps every pair ever run here; the caller gets this sweep's.
        let keys: Vec<String> = pairs.iter().map(SweepPair::key).collect();
        record.outcomes.retain(|key, _| keys.contains(key));
        Ok(record)
    }

    fn write_record(&self, record: &SweepRecord) -> Result<(), Error> {
        let out = &self.config.output.out;
        let failed = |source| SweepError::Io { dir: out.clone(), doing: "write sweep.json", source };
        let json = serde_json::to_string_pretty(record).map_err(|e| failed(std::io::Error::other(e)))?;
        Ok(write_atomically(&out.join(SWEEP_FILE), json.as_bytes()).map_err(failed)?)
    }
}

/// The final validation loss of the finished run in `config.output.out`, measured as training measures
/// it, and the run's verdict on it (judged with the training losses of its log).
fn measure_finished(
    config: &TrainConfig,
    mut report: impl FnMut(TrainEvent),
) -> Result<(f64, Option<RunFailure>), Error> {
    let mut devices = crate::device::parse_devices(&config.device)?;
    // In the float type the run trained in (a pure-bf16 run's is bf16), as its training measured it.
    for device in &mut devices {
        crate::device::set_precision(device, config.training_precision())?;
    }
    let (model, _) = load_run_model(&config.output.out, None, &devices[0])?;
    let half = config.training_precision().half_compute();
    let valid_loss = crate::fused::with_half_compute(half, || {
        validation_loss(config, &model, &validation_data(config)?, devices.len())
    })?;
    let monitor = RunMonitor::default();
    match read_metrics(&config.output.out) {
        Ok(rows) => monitor.read_log(&rows),
        Err(e) => report(TrainEvent::Warning(format!(
            "{}: cannot check the training loss for divergence ({e}); the outcome rests on the final validation \
             loss alone",
            config.output.out.display()
        ))),
    }
    if let Some(caution) = monitor.caution(valid_loss) {
        report(TrainEvent::Warning(format!("{}: {caution}", config.output.out.display())));
    }
    Ok((valid_loss, monitor.verdict(valid_loss)))
}

#[cfg(test)]
mod tests {
    use super::super::settings::{EvalSettings, OptimSettings, OutputSettings};
    use super::*;
    use crate::norm::NormScheme;
    use crate::run::tests::random_floats;

    #[test]
    fn a_record_whose_settings_hold_a_data_budget_still_loads() {
        let record = SweepRecord {
            config: TrainConfig::default(),
            schemes: vec![NormScheme::PreLn],
            seeds: vec![1],
            inits: vec![],
            depths: vec![],
            outcomes: Default::default(),
            data: None,
            devices: Default::default(),
        };
        let mut json = serde_json::to_value(&record).unwrap();
        json["config"]["data_budget"] = serde_json::json!({"tokens": 1000});
        let read: SweepRecord = serde_json::from_value(json).unwrap();
        assert_eq!(read, record);
    }

    #[test]
    fn a_sweep_plan_reads_back_bit_identical_and_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        // Values that serde_json without `float_roundtrip` reads back one ulp off.
        let config = TrainConfig {
            optim: OptimSettings { lr: 0.00020412414523193154, ..Default::default() },
            eval: EvalSettings { valid_fraction: 0.09090909090909091, ..Default::default() },
            output: OutputSettings { out: dir.path().to_path_buf(), ..Default::default() },
            device: "flex".into(),
            ..TrainConfig::default()
        };
        let losses = random_floats(400);
        let sweep = Sweep {
            config,
            schemes: vec!["lns".parse().unwrap()],
            seeds: (1..=losses.len() as u64).collect(),
            ..Sweep::default()
        };
        let mut outcomes = BTreeMap::new();
        for (pair, &valid_loss) in sweep.pairs().iter().zip(&losses) {
            std::fs::create_dir_all(&pair.dir).unwrap();
            outcomes.insert(pair.key(), PairOutcome::Finished { valid_loss });
        }
        let record = SweepRecord {
            config: sweep.config.clone(),
            schemes: sweep.schemes.clone(),
            seeds: sweep.seeds.clone(),
            inits: Vec::new(),
            depths: Vec::new(),
            outcomes: outcomes.clone(),
            data: None,
            devices: Default::default(),
        };
        sweep.write_record(&record).unwrap();
        let written = std::fs::read(dir.path().join(SWEEP_FILE)).unwrap();

        // The same settings are not "other training settings", and every loss reads back exactly.
        let read = sweep.check().unwrap();
        assert_eq!(read, outcomes, "every loss to the last bit");
        // Written again from what was read, the record is the same bytes.
        sweep.write_record(&SweepRecord { outcomes: read, ..record }).unwrap();
        assert_eq!(std::fs::read(dir.path().join(SWEEP_FILE)).unwrap(), written);
    }
}
