//! Whether a sweep may start or go on in its directory: what the directory holds (a sweep's
//! `sweep.json`, finished and interrupted pairs), and whether this sweep is that one, with the
//! same settings and axes; checked before the first pair trains.

use std::collections::BTreeMap;

use super::prepare::{check_step_memory, model_config};
use super::resume_changes::setting_changes;
use super::setting_kind::SettingKind;
use super::settings::ModelSettings;
use super::sweep_plan::{PairOutcome, Sweep, SweepPair, SweepRecord, SWEEP_FILE};
use super::TrainConfig;
use crate::data::{corpus_fingerprint, CorpusSource, Tokenizer};
use crate::norm::InitScheme;
use crate::run::{has_settings, LOCK_FILE, TRAIN_CONFIG};
use crate::run_dir_error::{RunDirError, SettingChange};
use crate::sweep_error::SweepError;
use crate::{config_error::ConfigError, error::Error};

impl Sweep {
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
    pub(super) fn checked(&self) -> Result<Checked, Error> {
        if let Some(norm) = &self.config.model.norm {
            return Err(SweepError::NormGiven { norm: norm.clone() }.into());
        }
        self.check_axes()?;
        let mut models = Vec::new();
        for pair in self.pairs() {
            let config = self.pair_config(&pair);
            config.validate()?;
            models.push((model_config(&config)?, config));
        }
        let devices = crate::device::parse_devices(&self.config.device)?;
        // Every pair's memory, the deepest of a depth axis included, before the first trains.
        for (model, config) in &models {
            check_step_memory(config, model, &devices).map_err(|e| {
                if self.depths.is_empty() {
                    e
                } else {
                    ConfigError::AtDepth { depth: model.n_layers, error: Box::new(e) }
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
        let dir = || out.clone();
        let record_path = out.join(SWEEP_FILE);
        if record_path.exists() {
            let damaged = |reason: String| SweepError::RecordDamaged { dir: dir(), reason };
            let text = std::fs::read_to_string(&record_path).map_err(|e| damaged(e.to_string()))?;
            let record: SweepRecord =
                serde_json::from_str(&text).map_err(|e| damaged(format!("not a sweep record: {e}")))?;
            let changes = sweep_changes(&shared(&record.config), &shared(&self.config));
            let recorded = Sweep { config: self.config.clone(), ..record.sweep() };
            let started = !record.outcomes.is_empty() || recorded.pairs().iter().any(|pair| has_settings(&pair.dir));
            if started && record.depths.is_empty() != self.depths.is_empty() {
                let (recorded, given) = (record.depths.clone(), self.depths.clone());
                return Err(SweepError::DepthAxisChanged { dir: dir(), recorded, given }.into());
            }
            if !changes.is_empty() && started {
                return Err(SweepError::OtherSettings { dir: dir(), changes }.into());
            }
            if started && record.data.is_some() && record.data != data {
                return Err(SweepError::OtherData { dir: dir() }.into());
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
            Err(source) => return Err(SweepError::Io { dir: dir(), doing: "list it", source }.into()),
        };
        if !empty {
            return Err(SweepError::NotASweep { dir: dir() }.into());
        }
        Ok(Checked { outcomes: BTreeMap::new(), data, under_way: None })
    }

    /// An error when the run of a pair whose outcome is recorded was trained again by hand since
    /// (its `train.json` holds other settings: another scheme, seed or rate): the recorded loss
    /// would be reported for a model that is not the pair's.
    pub(super) fn check_unchanged(&self, pair: &SweepPair) -> Result<(), Error> {
        let Ok(saved) = TrainConfig::from_run_file(pair.dir.join(TRAIN_CONFIG)) else { return Ok(()) };
        let changed = sweep_changes(&saved, &self.pair_config(pair));
        if changed.is_empty() {
            return Ok(());
        }
        Err(Error::run_dir(&pair.dir, RunDirError::PairRetrained { changes: changed }))
    }

    /// An error when an axis clashes with the shared settings: the config's own `init` or `layers`
    /// beside an init or depth axis, a depth axis on the fixed depth of `init_from`, or an init
    /// axis with a scheme that sets its own init.
    pub(super) fn check_axes(&self) -> Result<(), SweepError> {
        if !self.inits.is_empty() {
            // The model file's own init (a `model` JSON with `init`), unless the config sets one.
            let model_init = || model_config(&self.config).ok().and_then(|model| model.init);
            let set = match self.config.model.init {
                Some(init) => Some((init, false)),
                None => model_init().map(|init| (init, true)),
            };
            if let Some((init, in_model_file)) = set {
                return Err(SweepError::InitTwice { init, in_model_file, inits: self.inits.clone() });
            }
            let other = self.inits.iter().find(|&&init| init != InitScheme::Normal);
            if let (Some(&init), Some(scheme)) = (other, self.schemes.iter().find(|scheme| scheme.sets_init())) {
                return Err(SweepError::SchemeSetsInit { scheme: scheme.clone(), init });
            }
        }
        if self.depths.is_empty() {
            return Ok(());
        }
        let depths = self.depths.clone();
        if let Some(layers) = self.config.model.layers {
            return Err(SweepError::DepthTwice { layers, depths });
        }
        if let Some(init_from) = self.config.model.init_from.clone() {
            return Err(SweepError::DepthOfInitFrom { depths, init_from });
        }
        Ok(())
    }
}

/// What [`Sweep::checked`] found: the outcomes recorded so far whose run directories exist, the
/// data's fingerprint, and the record of the sweep under way, once a pair has started.
pub(super) struct Checked {
    pub(super) outcomes: BTreeMap<String, PairOutcome>,
    pub(super) data: Option<String>,
    pub(super) under_way: Option<SweepRecord>,
}

/// The settings of `now` that differ from `saved` and that a sweep under way may not change.
fn sweep_changes(saved: &TrainConfig, now: &TrainConfig) -> Vec<SettingChange> {
    let changes = setting_changes(saved, now).into_iter();
    changes.filter(|change| !SettingKind::of(&change.setting).sweep_may_change()).collect()
}

/// The settings every pair shares, for comparing a sweep with the one in its directory.
fn shared(config: &TrainConfig) -> TrainConfig {
    TrainConfig { model: ModelSettings { norm: None, ..config.model.clone() }, seed: 0, ..config.clone() }
}
