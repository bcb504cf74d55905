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
                        changed.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
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
    pub(super) fn check_axes(&self) -> Result<(), ConfigError> {
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
}

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
