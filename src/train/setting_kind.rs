//! What each training setting means to a resumed run and to a sweep: the rules as data, one
//! entry per field of [`TrainConfig`](super::TrainConfig) (a unit test keeps the table complete).

/// What a setting decides, and so who may change it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SettingKind {
    /// Decides what is trained (the batch, the number of steps, the seed, ...): a resume refuses a
    /// change, and every run of a sweep shares it.
    Trained,
    /// Decides what is trained, but is compared by what it makes, not as written: the model config
    /// (as `model.json` records it) and the data (its content's fingerprint). A preset spelt as a
    /// file, or a corpus moved, is no change to a resume.
    TrainedByEffect,
    /// Steers the rest of the training (the learning rate, clipping): a resume may change it, with
    /// a notice; every run of a sweep shares it, since it changes the models trained.
    Steering,
    /// How the run is carried out, never what it trains (the device, logging, checkpoints kept): a
    /// resume or a sweep may change it.
    Running,
    /// Not compared at all: the run's directory (the same one however it is spelt).
    Uncompared,
}

use SettingKind::*;

/// Every field of `TrainConfig`, as `train.json` names it, and its kind.
const KINDS: [(&str, SettingKind); 42] = [
    ("model", TrainedByEffect),
    ("layers", TrainedByEffect),
    ("norm", TrainedByEffect),
    ("init", Trained),
    ("device", Running),
    ("data", TrainedByEffect),
    ("text_field", Trained),
    ("builtin_docs", TrainedByEffect),
    ("tokenizer", TrainedByEffect),
    ("seq_len", Trained),
    ("batch_size", Trained),
    ("grad_accum", Trained),
    ("steps", Trained),
    ("lr", Steering),
    ("warmup", Trained),
    ("min_lr_ratio", Trained),
    ("optimizer", Trained),
    ("weight_decay", Trained),
    ("beta1", Trained),
    ("beta2", Trained),
    ("eps", Trained),
    ("clip_grad_norm", Steering),
    ("seed", Trained),
    ("data_seed", Trained),
    ("bf16", Trained),
    ("precision", Trained),
    ("out", Uncompared),
    ("eval_every", Trained),
    ("save_every", Running),
    ("keep_checkpoints", Running),
    ("eval_batches", Trained),
    ("valid_fraction", Trained),
    ("valid_data", TrainedByEffect),
    ("valid_tokens", Trained),
    ("sequences", Trained),
    ("cache_dir", Running),
    ("peak_tflops", Running),
    ("samples", Running),
    ("log_every", Running),
    ("track_every", Running),
    ("tensorboard", Running),
    ("init_from", TrainedByEffect),
];

/// Settings no field holds but that the fields imply, compared as fields are: the number of
/// devices (of the `device` list), a factor of the batch every step trains.
const DERIVED: [(&str, SettingKind); 1] = [("devices", Trained)];

/// The name of every setting, as files and `train.json` write it.
pub(crate) fn setting_names() -> impl Iterator<Item = &'static str> {
    KINDS.iter().map(|(name, _)| *name)
}

impl SettingKind {
    /// The kind of the setting named `field` (as `train.json` names it). A name that is no field
    /// counts as [`Trained`](Self::Trained): nothing unknown slips past a check.
    pub(crate) fn of(field: &str) -> SettingKind {
        KINDS.iter().chain(&DERIVED).find(|(name, _)| *name == field).map_or(Trained, |(_, kind)| *kind)
    }

    /// Whether a resumed run may change the setting (with a notice).
    pub(crate) fn resume_may_change(self) -> bool {
        matches!(self, Steering | Running | Uncompared)
    }

    /// Whether a sweep under way may be continued with another value of the setting, and a pair's
    /// run trained again by hand with one still count as the pair's.
    pub(crate) fn sweep_may_change(self) -> bool {
        matches!(self, Running | Uncompared)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::device::Precision;
    use crate::train::TrainConfig;

    #[test]
    fn every_field_of_train_config_has_a_kind() {
        let every_field_set =
            TrainConfig { bf16: Some(false), precision: Some(Precision::F32), ..TrainConfig::default() };
        let serde_json::Value::Object(fields) = serde_json::to_value(&every_field_set).unwrap() else {
            panic!("a TrainConfig is a JSON object")
        };
        let written: Vec<&str> = fields.keys().map(String::as_str).collect();
        let mut listed: Vec<&str> = KINDS.iter().map(|(name, _)| *name).collect();
        listed.sort_unstable();
        let mut written_sorted = written.clone();
        written_sorted.sort_unstable();
        assert_eq!(listed, written_sorted, "KINDS lists every field of TrainConfig, once");
    }

    #[test]
    fn a_resume_may_change_how_a_run_goes_a_sweep_only_how_it_is_carried_out() {
        assert!(SettingKind::of("lr").resume_may_change());
        assert!(!SettingKind::of("lr").sweep_may_change());
        assert!(SettingKind::of("log_every").sweep_may_change());
        assert!(!SettingKind::of("batch_size").resume_may_change());
        assert!(!SettingKind::of("model").resume_may_change());
        // The device may change, but not how many there are: each trains a micro-batch of every step.
        assert!(SettingKind::of("device").sweep_may_change());
        assert!(!SettingKind::of("devices").resume_may_change());
        assert!(!SettingKind::of("devices").sweep_may_change());
        assert_eq!(SettingKind::of("no_such_setting"), Trained);
    }
}
