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
use std::path::PathBuf;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::events::TrainEvent;
use super::monitor::RunMonitor;
use super::prepare::{check_step_memory, model_config, validation_data};
use super::resume::setting_changes;
use super::resume::Start;
use super::run_dir::take_lock;
use super::setting_kind::SettingKind;
use super::settings::{DataSettings, ModelSettings, OutputSettings};
use super::training::{train, validation_loss};
use super::TrainConfig;
use crate::data::{corpus_fingerprint, CorpusSource, Tokenizer};
use crate::io::write_atomically;
use crate::norm::{InitScheme, NormScheme};
use crate::run::{has_settings, load_run_model, read_metrics, RunState, LOCK_FILE, TRAIN_CONFIG};
use crate::{ConfigError, Error};

/// The file that marks a directory as a sweep and records its pairs.
pub const SWEEP_FILE: &str = "sweep.json";

/// Why a sweep with a depth axis (`recorded`, or `given`) cannot go on in the directory of one
/// without (the other, empty), and what to do.
fn depth_axis_change(recorded: &[usize], given: &[usize]) -> String {
    let list = |depths: &[usize]| depths.iter().map(usize::to_string).collect::<Vec<_>>().join(",");
    if given.is_empty() {
        format!(
            "holds a depth sweep (--layers {}): give --layers with a list of two or more depths to go on with it \
             (one depth is every run's fixed depth, not the axis), or a new --out",
            list(recorded)
        )
    } else {
        format!(
            "holds a sweep without a depth axis (every run at one depth): a depth axis (--layers {}) needs a new --out",
            list(given)
        )
    }
}

/// An axis's values for [`Sweep::pairs`]: each of `values`, or `None` alone when the axis is absent.
fn axis<T: Copy>(values: &[T]) -> Vec<Option<T>> {
    if values.is_empty() {
        vec![None]
    } else {
        values.iter().copied().map(Some).collect()
    }
}

/// The items in their first order, each once.
pub(crate) fn distinct<T: PartialEq>(items: impl IntoIterator<Item = T>) -> Vec<T> {
    let mut kept = Vec::new();
    for item in items {
        if !kept.contains(&item) {
            kept.push(item);
        }
    }
    kept
}

/// One training of a sweep.
#[derive(Clone, Debug, PartialEq)]
pub struct SweepPair {
    /// The scheme it trains.
    pub scheme: NormScheme,
    /// Its init, when the sweep has an init axis.
    pub init: Option<InitScheme>,
    /// Its number of layers, when the sweep has a depth axis.
    pub layers: Option<usize>,
    /// Its seed (data order and initial weights).
    pub seed: u64,
    /// Its run directory, `<out>/<group>/seed-<seed>`.
    pub dir: PathBuf,
}

impl SweepPair {
    /// The pair's scheme and init as one name, `lns` or `lns+scaled` ([`arm_name`]).
    pub fn arm(&self) -> String {
        arm_name(&self.scheme, self.init)
    }

    /// The runs this pair is a seed of: `[layers-<L>/]<arm>`, the folder of its seeds.
    pub fn group(&self) -> String {
        group_name(self.layers, &self.arm())
    }

    /// The key of the pair in `sweep.json`: `<group>/seed-<seed>`.
    pub fn key(&self) -> String {
        format!("{}/seed-{}", self.group(), self.seed)
    }
}

/// A scheme with an init as one name: the scheme's directory name, and `+<init>` for an init
/// other than `normal` (`lns`, `pre-ln+scaled`).
pub fn arm_name(scheme: &NormScheme, init: Option<InitScheme>) -> String {
    match init.filter(|&init| init != InitScheme::Normal) {
        Some(init) => format!("{}+{init}", scheme_dir_name(scheme)),
        None => scheme_dir_name(scheme),
    }
}

/// The folder of an arm's seeds: `layers-<L>/<arm>` on a depth axis, `<arm>` otherwise.
pub fn group_name(layers: Option<usize>, arm: &str) -> String {
    match layers {
        Some(layers) => format!("layers-{layers}/{arm}"),
        None => arm.to_string(),
    }
}

/// The directory name of a scheme (`mix-ln:0.25` -> `mix-ln-0.25`).
pub fn scheme_dir_name(scheme: &NormScheme) -> String {
    scheme.to_string().replace(':', "-")
}

/// How a pair ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "kebab-case")]
pub enum PairOutcome {
    /// Trained to the end: its final validation loss.
    Finished {
        /// Mean validation loss of the final model.
        valid_loss: f64,
    },
    /// Stopped for a non-finite value, or ended collapsed (its gradient norm vanished while its
    /// loss did not fall).
    Diverged {
        /// What happened.
        reason: String,
    },
}

/// `sweep.json`: the sweep's settings and the outcome of every pair done so far.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SweepRecord {
    /// The training settings every pair shares (its `norm`, `seed` and `out` are the pair's own).
    /// A record written from a run's `train.json` may hold its data budget: it is skipped.
    #[serde(deserialize_with = "super::config_file::settings_skipping_the_budget")]
    pub config: TrainConfig,
    /// The schemes, as given.
    pub schemes: Vec<NormScheme>,
    /// The seeds, as given.
    pub seeds: Vec<u64>,
    /// The inits, when the sweep has an init axis.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inits: Vec<InitScheme>,
    /// The depths, when the sweep has a depth axis.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depths: Vec<usize>,
    /// The outcome of each pair by its key (`[layers-<L>/]<arm>/seed-<seed>`).
    pub outcomes: BTreeMap<String, PairOutcome>,
    /// The content fingerprint of the `--data` files and tokenizer ([`corpus_fingerprint`]); `None`
    /// for the built-in corpus and in records written before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    /// The device list of each pair (by its key) whose training finished on other devices than
    /// `config.device`, the devices the sweep began on (a rerun may give others of the same
    /// number); empty when every pair ran on those.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub devices: BTreeMap<String, String>,
}

impl SweepRecord {
    /// The sweep this record is of: its settings and axes (its pairs and groups).
    pub fn sweep(&self) -> Sweep {
        Sweep {
            config: self.config.clone(),
            schemes: self.schemes.clone(),
            seeds: self.seeds.clone(),
            inits: self.inits.clone(),
            depths: self.depths.clone(),
        }
    }
}

/// A sweep to run: the shared settings (`config.output.out` is the sweep's directory), schemes and
/// seeds, and optionally inits and depths.
#[derive(Clone, Debug, Default)]
pub struct Sweep {
    /// The shared settings.
    pub config: TrainConfig,
    /// The schemes, in order.
    pub schemes: Vec<NormScheme>,
    /// The seeds, in order.
    pub seeds: Vec<u64>,
    /// The inits, in order; empty: no init axis (every pair takes the config's `init`).
    pub inits: Vec<InitScheme>,
    /// The depths, in order; empty: no depth axis (every pair takes the config's depth).
    pub depths: Vec<usize>,
}

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
    /// Every pair: depth by depth (shallow first), scheme by scheme, init by init, seeds in order.
    pub fn pairs(&self) -> Vec<SweepPair> {
        let depths = axis(&self.depths);
        let inits = axis(&self.inits);
        let mut pairs = Vec::new();
        for &layers in &depths {
            for scheme in &self.schemes {
                for &init in &inits {
                    for &seed in &self.seeds {
                        let mut pair = SweepPair { scheme: scheme.clone(), init, layers, seed, dir: PathBuf::new() };
                        pair.dir = self.config.output.out.join(pair.group()).join(format!("seed-{seed}"));
                        pairs.push(pair);
                    }
                }
            }
        }
        pairs
    }

    /// Every group of seeds (`[layers-<L>/]<arm>`), in the order of [`pairs`](Self::pairs), with its
    /// depth and arm.
    pub fn groups(&self) -> Vec<(Option<usize>, String)> {
        distinct(self.pairs().iter().map(|pair| (pair.layers, pair.arm())))
    }

    /// The training settings of `pair`. Every pair shares one token cache, `<out>/.token-cache`,
    /// unless `cache_dir` is set.
    pub fn pair_config(&self, pair: &SweepPair) -> TrainConfig {
        let cache_dir =
            self.config.data.cache_dir.clone().or_else(|| Some(self.config.output.out.join(".token-cache")));
        TrainConfig {
            model: ModelSettings {
                norm: Some(pair.scheme.clone()),
                init: pair.init.or(self.config.model.init),
                layers: pair.layers.or(self.config.model.layers),
                ..self.config.model.clone()
            },
            data: DataSettings { cache_dir, ..self.config.data.clone() },
            output: OutputSettings { out: pair.dir.clone(), ..self.config.output.clone() },
            seed: pair.seed,
            ..self.config.clone()
        }
    }

    /// Checks every pair's settings, the devices, data and tokenizer, and the sweep directory
    /// before anything is trained or written: the directory must be new, empty, or a sweep of the
    /// same training settings (any settings while nothing is trained yet). Returns the outcomes
    /// recorded so far whose run directories still exist (a deleted one is trained again).
    pub fn check(&self) -> Result<BTreeMap<String, PairOutcome>, Error> {
        self.checked().map(|checked| checked.outcomes)
    }

    /// [`check`](Self::check), the data's content fingerprint (a sweep under way refuses data
    /// whose content changed: a file rewritten in place under the same name), and the record of
    /// the sweep under way in the directory, if one is.
    fn checked(&self) -> Result<Checked, Error> {
        if let Some(norm) = &self.config.model.norm {
            return Err(ConfigError::Conflict(format!(
                "--norm {norm} does not apply to a sweep: list the schemes with --schemes (a config file's `norm` is \
                 replaced by them)"
            ))
            .into());
        }
        self.check_axes()?;
        let mut models = Vec::new();
        for pair in self.pairs() {
            let config = self.pair_config(&pair);
            config.validate()?;
            models.push((model_config(&config)?, config));
        }
        let devices = crate::parse_devices(&self.config.device)?;
        // Every pair's memory, the deepest of a depth axis included, before the first trains.
        for (model, config) in &models {
            check_step_memory(config, model, &devices).map_err(|e| {
                if self.depths.is_empty() {
                    e
                } else {
                    ConfigError::TooLarge(format!("the depth {} of --layers: {e}", model.n_layers))
                }
            })?;
        }
        let tokenizer = Tokenizer::from_spec(&self.config.data.tokenizer)?;
        let data = match &self.config.data.files[..] {
            [] => None,
            paths => {
                let source =
                    CorpusSource::Files { paths: paths.to_vec(), text_field: self.config.data.text_field.clone() };
                Some(corpus_fingerprint(&source, &tokenizer)?)
            }
        };
        let out = &self.config.output.out;
        let record_path = out.join(SWEEP_FILE);
        if record_path.exists() {
            let unreadable = |e: String| {
                Error::file(
                    &record_path,
                    format!(
                        "{e}: the sweep's record is damaged; restore it, or move {} away and start a new sweep \
                         (its runs stay readable by `analyze`)",
                        out.display()
                    ),
                )
            };
            let text = std::fs::read_to_string(&record_path).map_err(|e| unreadable(e.to_string()))?;
            let record: SweepRecord =
                serde_json::from_str(&text).map_err(|e| unreadable(format!("not a sweep record: {e}")))?;
            let changed = sweep_changes(&shared(&record.config), &shared(&self.config));
            let recorded = Sweep { config: self.config.clone(), ..record.sweep() };
            let started = !record.outcomes.is_empty() || recorded.pairs().iter().any(|pair| has_settings(&pair.dir));
            if started && record.depths.is_empty() != self.depths.is_empty() {
                return Err(Error::file(out, depth_axis_change(&record.depths, &self.depths)));
            }
            if !changed.is_empty() && started {
                return Err(Error::file(
                    out,
                    format!(
                        "holds a sweep with other training settings ({}); keep them, or give a new --out for a \
                         new sweep",
                        changed.join("; ")
                    ),
                ));
            }
            if started && record.data.is_some() && record.data != data {
                return Err(Error::file(
                    out,
                    "holds a sweep trained on other data: the content of the --data files (or of the tokenizer) \
                     changed since it began, so new pairs would not be comparable with those done; restore the \
                     data, or give a new --out for a new sweep",
                ));
            }
            let mut outcomes = record.outcomes.clone();
            outcomes.retain(|key, _| out.join(key).is_dir());
            return Ok(Checked { outcomes, data, under_way: started.then_some(record) });
        }
        let empty = match std::fs::read_dir(out) {
            // The sweep's lock, and a record a killed sweep was writing, are the sweep's own.
            Ok(entries) => entries.flatten().all(|entry| {
                let name = entry.file_name().to_string_lossy().into_owned();
                name == LOCK_FILE || name.starts_with(&format!(".{SWEEP_FILE}.tmp"))
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => true,
            Err(e) => return Err(Error::file(out, e)),
        };
        if !empty {
            return Err(Error::file(
                out,
                format!("is not empty and holds no {SWEEP_FILE}: not a sweep directory; give a new or empty --out"),
            ));
        }
        Ok(Checked { outcomes: BTreeMap::new(), data, under_way: None })
    }

    /// Runs every pair not yet done and returns the record of the whole sweep. An error other
    /// than a divergence (bad data, a full disk, an interruption) stops the sweep; what was
    /// finished stays recorded, and running the sweep again goes on from there.
    pub fn run(&self, mut progress: impl FnMut(SweepEvent) + Send) -> Result<SweepRecord, Error> {
        let out = &self.config.output.out;
        self.check()?;
        std::fs::create_dir_all(out).map_err(|e| Error::file(out, e))?;
        // One sweep at a time in a directory; the outcomes are read again under the lock.
        let _lock = take_lock(out).map_err(|e| Error::file(out, e))?;
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
                Ok((_, Some(reason))) => PairOutcome::Diverged { reason },
                Err(Error::Diverged(reason)) => PairOutcome::Diverged { reason },
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

    /// An error when the run of a pair whose outcome is recorded was trained again by hand since
    /// (its `train.json` holds other settings: another scheme, seed or rate): the recorded loss
    /// would be reported for a model that is not the pair's.
    fn check_unchanged(&self, pair: &SweepPair) -> Result<(), Error> {
        let Ok(saved) = TrainConfig::from_run_file(pair.dir.join(TRAIN_CONFIG)) else { return Ok(()) };
        let changed = sweep_changes(&saved, &self.pair_config(pair));
        if changed.is_empty() {
            return Ok(());
        }
        Err(Error::RunDir {
            path: pair.dir.clone(),
            message: format!(
                "this pair's run was trained again since the sweep recorded it ({}): its recorded loss is not this \
                 model's. Remove the folder to train the pair again, or sweep into a new --out",
                changed.join("; ")
            ),
        })
    }

    /// An error when an axis clashes with the shared settings: the config's own `init` or `layers`
    /// beside an init or depth axis, a depth axis on the fixed depth of `init_from`, or an init
    /// axis with a scheme that sets its own init.
    fn check_axes(&self) -> Result<(), ConfigError> {
        let listed = |values: Vec<String>| values.join(",");
        if !self.inits.is_empty() {
            // The model file's own init (a `model` JSON with `init`), unless the config sets one.
            let model_init = || model_config(&self.config).ok().and_then(|model| model.init);
            let set = match self.config.model.init {
                Some(init) => Some(("the config's", init)),
                None => model_init().map(|init| ("the model file's", init)),
            };
            if let Some((whose, init)) = set {
                return Err(ConfigError::Conflict(format!(
                    "{whose} init `{init}` and --inits {} both set the init; give one of them",
                    listed(self.inits.iter().map(|i| i.to_string()).collect())
                )));
            }
            let other = self.inits.iter().find(|&&init| init != InitScheme::Normal);
            if let (Some(init), Some(scheme)) = (other, self.schemes.iter().find(|scheme| scheme.sets_init())) {
                return Err(ConfigError::Conflict(format!(
                    "the scheme `{scheme}` sets its own init and takes no other, but --inits has `{init}`: drop \
                     `{scheme}` from --schemes, or keep --inits to normal"
                )));
            }
        }
        if self.depths.is_empty() {
            return Ok(());
        }
        let depths = listed(self.depths.iter().map(|d| d.to_string()).collect());
        if let Some(layers) = self.config.model.layers {
            return Err(ConfigError::Conflict(format!(
                "the config's `layers = {layers}` and the depth axis --layers {depths} both set the depth; give one"
            )));
        }
        if let Some(source) = &self.config.model.init_from {
            return Err(ConfigError::Conflict(format!(
                "a depth axis (--layers {depths}) cannot apply to `init_from` ({}): its model's depth is fixed; drop \
                 --layers or --init-from",
                source.display()
            )));
        }
        Ok(())
    }

    fn write_record(&self, record: &SweepRecord) -> Result<(), Error> {
        let path = self.config.output.out.join(SWEEP_FILE);
        let json =
            serde_json::to_string_pretty(record).map_err(|e| Error::file(&path, format!("cannot write it: {e}")))?;
        write_atomically(&path, json.as_bytes()).map_err(|e| Error::file(&path, format!("cannot write it: {e}")))
    }
}

/// What [`Sweep::checked`] found: the outcomes recorded so far whose run directories exist, the
/// data's fingerprint, and the record of the sweep under way, once a pair has started.
struct Checked {
    outcomes: BTreeMap<String, PairOutcome>,
    data: Option<String>,
    under_way: Option<SweepRecord>,
}

/// The settings of `now` that differ from `saved` and that a sweep under way may not change, as
/// `field: saved -> now`.
fn sweep_changes(saved: &TrainConfig, now: &TrainConfig) -> Vec<String> {
    setting_changes(saved, now)
        .into_iter()
        .filter(|(field, _)| !SettingKind::of(field).sweep_may_change())
        .map(|(_, change)| change)
        .collect()
}

/// The settings every pair shares, for comparing a sweep with the one in its directory.
fn shared(config: &TrainConfig) -> TrainConfig {
    TrainConfig { model: ModelSettings { norm: None, ..config.model.clone() }, seed: 0, ..config.clone() }
}

/// The final validation loss of the finished run in `config.output.out`, measured as training measures
/// it, and the run's verdict on it (judged with the training losses of its log).
fn measure_finished(config: &TrainConfig, mut report: impl FnMut(TrainEvent)) -> Result<(f64, Option<String>), Error> {
    let mut devices = crate::parse_devices(&config.device)?;
    // In the float type the run trained in (a pure-bf16 run's is bf16), as its training measured it.
    for device in &mut devices {
        crate::set_precision(device, config.training_precision())?;
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
    use super::super::settings::{EvalSettings, OptimSettings};
    use super::*;
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
    fn a_sweep_record_reads_back_bit_identical_and_unchanged() {
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
