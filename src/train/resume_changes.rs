//! What a resumed run may change: the settings that decide what is trained must be the run's own
//! (its `train.json` and `model.json`), while those that decide how the run goes (its length,
//! logging, devices of the same number) may change, each said as it is taken.

use std::path::{Path, PathBuf};

use super::config::TrainConfig;
use super::prepare::{start_model_config, Prepared};
use super::setting_kind::SettingKind;
use crate::run::{
    is_finished, is_replacing, model_info_edited, read_model_info, ModelInfoError, RunDir, RunModelInfo, MODEL_INFO,
    PREVIOUS_RUN, TRAIN_CONFIG,
};
use crate::run_dir_error::{ResumeAdvice, RunDirError, SettingChange};
use crate::{error::Error, model::LlamaConfig};

/// The settings of `now` that differ from the run's `saved` ones, split into those a resume may
/// change and those it may not.
fn resume_changes(saved: &TrainConfig, now: &TrainConfig) -> (Vec<SettingChange>, Vec<SettingChange>) {
    let (mut allowed, mut refused) = (Vec::new(), Vec::new());
    for change in setting_changes(saved, now) {
        let kind = SettingKind::of(&change.setting);
        if kind == SettingKind::TrainedByEffect {
            continue;
        }
        if kind.resume_may_change() {
            allowed.push(change)
        } else {
            refused.push(change)
        }
    }
    (allowed, refused)
}

/// The settings of `now` that differ from `saved` (defaults resolved, the precision by its name,
/// `f32` included), but for the [uncompared](SettingKind::Uncompared) ones; and the number of
/// devices ([`device_count_change`]).
pub(crate) fn setting_changes(saved: &TrainConfig, now: &TrainConfig) -> Vec<SettingChange> {
    let to_map = |config: &TrainConfig| match serde_json::to_value(config.resolved()) {
        Ok(serde_json::Value::Object(mut map)) => {
            // train.json leaves f32 unwritten (`resolved`): compared and named all the same.
            map.insert("precision".into(), config.training_precision().name().into());
            map
        }
        _ => serde_json::Map::new(),
    };
    let count_change = device_count_change(saved, now).map(|change| changed(DEVICES, change));
    let (saved, now) = (to_map(saved), to_map(now));
    // An unset init is the normal one (the schemes that set their own take no other, and accept
    // `normal`): a sweep's `normal` arm is the run trained without an init axis.
    let unset_or_normal = |value: &serde_json::Value| value.is_null() || value == "normal";
    let same = |field: &str, old: &serde_json::Value, new: &serde_json::Value| {
        old == new || (field == "init" && unset_or_normal(old) && unset_or_normal(new))
    };
    now.into_iter()
        .filter(|(field, _)| SettingKind::of(field) != SettingKind::Uncompared)
        .filter_map(|(field, value)| {
            let old = saved.get(&field).cloned().unwrap_or(serde_json::Value::Null);
            (!same(&field, &old, &value)).then(|| changed(&field, format!("{old} -> {value}")))
        })
        .chain(count_change)
        .collect()
}

/// The change of `setting`: `recorded -> now`.
fn changed(setting: &str, change: String) -> SettingChange {
    SettingChange { setting: setting.to_string(), change }
}

/// The derived setting of the number of devices ([`SettingKind::of`] knows it).
const DEVICES: &str = "devices";

/// The devices a device string names: one for `auto` or a single device, one per entry of a list.
fn device_count(config: &TrainConfig) -> usize {
    config.device.split(',').count()
}

/// The change of the number of devices from `saved` to `now`, when there is one: each device
/// trains `batch_size` sequences a micro-batch, so it changes the batch of every step (and of
/// validation) as much as `batch_size` does.
fn device_count_change(saved: &TrainConfig, now: &TrainConfig) -> Option<String> {
    let (before, after) = (device_count(saved), device_count(now));
    if before == after {
        return None;
    }
    let per_step = |config: &TrainConfig, devices: usize| config.optim.batch_size * devices * config.optim.grad_accum;
    let plural = |n: usize| if n == 1 { "device" } else { "devices" };
    Some(format!(
        "{before} -> {after} (a step trains batch_size {} x {before} {} x grad_accum {} = {} sequences, \
         {} on {after} {}: the effective batch is a setting of the run; give --device with {before} {}, as it \
         was trained)",
        saved.optim.batch_size,
        plural(before),
        saved.optim.grad_accum,
        per_step(saved, before),
        per_step(now, after),
        plural(after),
        plural(before),
    ))
}

/// An error unless `config` trains what the run in `dir` trained: the same settings (but those
/// a resume may change, returned), the same model config and the same data content.
pub(super) fn check_resume(
    dir: &RunDir,
    config: &TrainConfig,
    prepared: &Prepared,
) -> Result<Vec<SettingChange>, RunDirError> {
    let (allowed, refused) = setting_refusals(dir.path(), config, &prepared.model, Some(&prepared.data))?;
    refuse(dir.path(), refused)?;
    Ok(allowed)
}

/// The fields in which model config `b` differs from `a`, as `field: a -> b` (the depth, width
/// and scheme alone can read the same on both sides, for an init or an epsilon).
fn model_differences(a: &LlamaConfig, b: &LlamaConfig) -> String {
    let fields = |m: &LlamaConfig| match serde_json::to_value(m) {
        Ok(serde_json::Value::Object(map)) => map,
        _ => serde_json::Map::new(),
    };
    let (a, b) = (fields(a), fields(b));
    let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
    let null = serde_json::Value::Null;
    let changed: Vec<String> = keys
        .into_iter()
        .filter(|key| a.get(*key) != b.get(*key))
        .map(|key| format!("{key} {} -> {}", a.get(key).unwrap_or(&null), b.get(key).unwrap_or(&null)))
        .collect();
    changed.join(", ")
}

/// A resume's refusal of the settings, before anything is prepared (the data is compared once
/// it is tokenised, under the lock). Skipped when the model config is bad (preparing reports it).
pub(super) fn check_resume_settings(out: &Path, config: &TrainConfig) -> Result<(), Error> {
    let Ok(model) = start_model_config(config, true) else { return Ok(()) };
    let (_, refused) = setting_refusals(out, config, &model, None).map_err(|e| Error::run_dir(out, e))?;
    refuse(out, refused).map_err(|e| Error::run_dir(out, e))
}

/// The settings of `config` (and its `model` config, and the fingerprint of its `data` once
/// tokenised) that differ from those of the run in `out`: those a resume may change, and those
/// it may not.
fn setting_refusals(
    out: &Path,
    config: &TrainConfig,
    model: &LlamaConfig,
    data: Option<&String>,
) -> Result<(Vec<SettingChange>, Vec<SettingChange>), RunDirError> {
    let saved = TrainConfig::read_recorded(&out.join(TRAIN_CONFIG))?;
    let info = recorded_model_info(out)?;
    let (allowed, mut refused) = resume_changes(&saved, config);
    if info.model != *model {
        refused.push(changed("model", format!("{} (as model.json records it)", model_differences(&info.model, model))));
    }
    refused.extend(corpus_kind_changes(&saved, config));
    let resolved = |dir: &Path| crate::run::resolve_dir(dir).unwrap_or_else(|_| dir.to_path_buf());
    refused.extend(init_from_change(&saved, config, resolved));
    if data.is_some_and(|data| info.data.as_ref().is_some_and(|recorded| recorded != data)) {
        let change = "the content of the data (--data, --valid-data, or the tokenizer) is not the run's";
        refused.push(changed("data", change.into()));
    }
    Ok((allowed, refused))
}

/// A resume's `init_from` naming other weights than the run started from (`resolved`: a model
/// of the Hugging Face cache by name as its snapshot folder, which the run records): a resume
/// continues from its checkpoint, and the run's record would name weights it never loaded. Its
/// own folder, however spelt, or none given, is no change.
fn init_from_change(
    saved: &TrainConfig,
    now: &TrainConfig,
    resolved: impl Fn(&Path) -> PathBuf,
) -> Option<SettingChange> {
    let given = now.model.init_from.as_deref()?;
    let started = saved.model.init_from.as_deref();
    if started.is_some_and(|dir| crate::io::same_folder(given, dir) || crate::io::same_folder(&resolved(given), dir)) {
        return None;
    }
    let started = started.map_or("a fresh init".into(), |dir| dir.display().to_string());
    Some(changed(
        "init_from",
        format!(
            "{started} -> {} (a resume continues from its checkpoint: leave --init-from out, or start a new run \
         from those weights)",
            given.display()
        ),
    ))
}

/// The changes of the data that show without tokenising it (compared before the data is read):
/// the built-in corpus against files, its size, a validation corpus or none, and the byte
/// tokenizer against a `tokenizer.json`.
fn corpus_kind_changes(saved: &TrainConfig, now: &TrainConfig) -> Vec<SettingChange> {
    let corpus = |c: &TrainConfig| {
        if c.data.files.is_empty() {
            format!("the built-in corpus of {} documents", c.data.builtin_docs)
        } else {
            format!("{} file(s) or folder(s) given with --data", c.data.files.len())
        }
    };
    let mut changes = Vec::new();
    let builtin = |c: &TrainConfig| c.data.files.is_empty();
    if builtin(saved) != builtin(now) || (builtin(saved) && saved.data.builtin_docs != now.data.builtin_docs) {
        changes.push(changed("data", format!("{} -> {}", corpus(saved), corpus(now))));
    }
    if saved.eval.valid_data.is_empty() != now.eval.valid_data.is_empty() {
        let valid = |c: &TrainConfig| if c.eval.valid_data.is_empty() { "none" } else { "--valid-data" };
        changes.push(changed("validation corpus", format!("{} -> {}", valid(saved), valid(now))));
    }
    if (saved.data.tokenizer == "byte") != (now.data.tokenizer == "byte") {
        changes.push(changed("tokenizer", format!("{} -> {}", saved.data.tokenizer, now.data.tokenizer)));
    }
    changes
}

/// The run's `model.json`, unless it was edited by hand (its differences from train.json would
/// read as the resume's changes).
fn recorded_model_info(out: &Path) -> Result<RunModelInfo, RunDirError> {
    let info_path = out.join(MODEL_INFO);
    if model_info_edited(out) {
        return Err(RunDirError::ModelInfoEdited { path: info_path });
    }
    // The run has started (its train.json is there): a model.json it cannot read is damage to
    // repair, not "nothing to resume".
    let reason = match read_model_info(out) {
        Ok(info) => return Ok(info),
        // Not edited: that was refused above.
        Err(ModelInfoError::Invalid(e)) => format!("{} is not a run description ({e})", info_path.display()),
        Err(ModelInfoError::Unreadable(e)) => format!("cannot read {} ({e})", info_path.display()),
    };
    Err(RunDirError::ModelInfoUnusable { reason })
}

/// The refusal of a resume that would change the `refused` settings of the run in `out`.
fn refuse(out: &Path, refused: Vec<SettingChange>) -> Result<(), RunDirError> {
    if refused.is_empty() {
        return Ok(());
    }
    let out = out.to_path_buf();
    let advice = if is_replacing(&out) {
        ResumeAdvice::FinishTheOverwrite { aside: out.join(PREVIOUS_RUN), out }
    } else if is_finished(&out) {
        ResumeAdvice::StartFromIt { out }
    } else {
        // --init-from reads a finished run's model: this run has none yet.
        ResumeAdvice::PutItBack
    };
    Err(RunDirError::SettingsChanged { changes: refused, advice })
}

#[cfg(test)]
mod tests {
    use super::super::settings::{DataSettings, EvalSettings, ModelSettings, OptimSettings, OutputSettings};
    use super::*;

    #[test]
    fn a_started_runs_damaged_model_json_is_damage_to_repair_not_nothing_to_resume() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(MODEL_INFO), r#"{"model": {"init_std": "NaN"}}"#).unwrap();
        let error = recorded_model_info(dir.path()).unwrap_err();
        assert!(
            matches!(&error, RunDirError::ModelInfoUnusable { reason } if reason.contains("not a run description"))
        );
        #[cfg(unix)]
        {
            std::fs::remove_file(dir.path().join(MODEL_INFO)).unwrap();
            std::os::unix::fs::symlink(dir.path().join("gone.json"), dir.path().join(MODEL_INFO)).unwrap();
            let error = recorded_model_info(dir.path()).unwrap_err();
            assert!(matches!(&error, RunDirError::ModelInfoUnusable { reason } if reason.starts_with("cannot read")));
        }
    }

    #[test]
    fn a_resume_may_repeat_its_own_init_from_however_spelt_but_not_name_other_weights() {
        let from = |dir: Option<&str>| TrainConfig {
            model: ModelSettings { init_from: dir.map(PathBuf::from), ..Default::default() },
            ..TrainConfig::default()
        };
        let snapshot = "hub/models--lns--tiny/snapshots/abc";
        // The Hugging Face cache's name resolves to the snapshot that the run records.
        let resolved = |dir: &Path| if dir == Path::new("lns/tiny") { PathBuf::from(snapshot) } else { dir.into() };
        let change = |saved: Option<&str>, now: Option<&str>| init_from_change(&from(saved), &from(now), resolved);
        assert_eq!(change(Some("runs/x"), Some("runs/x")), None);
        assert_eq!(change(Some("runs/x"), Some("./runs/x/")), None);
        assert_eq!(change(Some("runs/x"), None), None, "none given: the run's own");
        assert_eq!(change(Some(snapshot), Some("lns/tiny")), None, "a cached model by name");
        let named = |c: SettingChange| (c.setting, c.change.split(" (").next().unwrap().to_string());
        assert_eq!(
            change(Some("runs/x"), Some("runs/y")).map(named),
            Some(("init_from".into(), "runs/x -> runs/y".into()))
        );
        let fresh = change(None, Some("runs/x")).map(named);
        assert_eq!(fresh, Some(("init_from".into(), "a fresh init -> runs/x".into())));
        let here = std::env::current_dir().unwrap();
        assert!(crate::io::same_folder(&here, Path::new(".")));
    }

    #[test]
    fn an_unset_init_is_the_normal_one() {
        let unset = TrainConfig::default();
        let normal = TrainConfig {
            model: ModelSettings { init: Some(crate::norm::InitScheme::Normal), ..Default::default() },
            ..TrainConfig::default()
        };
        let scaled = TrainConfig {
            model: ModelSettings { init: Some(crate::norm::InitScheme::Scaled), ..Default::default() },
            ..TrainConfig::default()
        };
        assert!(setting_changes(&unset, &normal).is_empty());
        assert!(setting_changes(&normal, &unset).is_empty());
        assert_eq!(setting_changes(&unset, &scaled).len(), 1);
        // The model trained is the same one, as model.json records it.
        let model = |config: &TrainConfig| crate::train::prepare::model_config(config).unwrap();
        assert_eq!(model(&unset), model(&normal));
        assert_ne!(model(&unset), model(&scaled));
    }

    #[test]
    fn settings_read_back_from_train_json_are_unchanged() {
        // Values that serde_json without `float_roundtrip` reads back one ulp off.
        let config = TrainConfig {
            optim: OptimSettings { lr: 0.00020412414523193154, ..Default::default() },
            eval: EvalSettings { valid_fraction: 0.09090909090909091, ..Default::default() },
            ..Default::default()
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(TRAIN_CONFIG);
        std::fs::write(&path, serde_json::to_string_pretty(&config).unwrap()).unwrap();
        let saved = TrainConfig::from_file(&path).unwrap();
        assert_eq!(resume_changes(&saved, &config), (Vec::new(), Vec::new()));
    }

    #[test]
    fn a_resume_may_change_how_a_run_goes_but_not_what_it_trains() {
        let saved = TrainConfig { optim: OptimSettings { steps: 100, ..Default::default() }, ..Default::default() };
        let now = TrainConfig {
            optim: OptimSettings {
                lr: saved.optim.lr / 2.0,
                batch_size: saved.optim.batch_size * 2,
                ..saved.optim.clone()
            },
            output: OutputSettings { log_every: 7, ..saved.output.clone() },
            ..saved.clone()
        };
        let (allowed, refused) = resume_changes(&saved, &now);
        let fields = |changes: &[SettingChange]| changes.iter().map(|c| c.setting.clone()).collect::<Vec<_>>();
        assert_eq!(fields(&allowed), ["log_every", "lr"]);
        assert_eq!(fields(&refused), ["batch_size"]);
        // The model and data settings are compared by what they make (model.json, the data's
        // fingerprint), not as written: a preset spelt another way is no change here.
        let renamed = TrainConfig {
            model: ModelSettings { preset: "its-own-file.json".into(), ..saved.model.clone() },
            data: DataSettings { tokenizer: "other".into(), ..saved.data.clone() },
            ..saved.clone()
        };
        assert_eq!(resume_changes(&saved, &renamed), (Vec::new(), Vec::new()));
    }

    #[test]
    fn the_precision_is_compared_and_named_f32_included() {
        let f32 = TrainConfig::default();
        let bf16 = TrainConfig { precision: Some(crate::device::Precision::Bf16), ..TrainConfig::default() };
        let changes = |saved: &TrainConfig, now: &TrainConfig| -> Vec<String> {
            setting_changes(saved, now).iter().map(ToString::to_string).collect()
        };
        assert_eq!(changes(&f32, &bf16), [r#"precision: "f32" -> "bf16""#]);
        // train.json leaves f32 unwritten, yet a return to it is a change (it went unseen).
        assert_eq!(changes(&bf16, &f32), [r#"precision: "bf16" -> "f32""#]);
        let shorthand = TrainConfig { bf16: Some(true), ..TrainConfig::default() };
        assert!(changes(&shorthand, &bf16).is_empty(), "`bf16 = true` is `precision = \"bf16\"`");
    }

    #[test]
    fn another_device_may_be_given_on_resume_but_not_another_number_of_them() {
        let on = |device: &str, batch_size: usize| TrainConfig {
            device: device.into(),
            optim: OptimSettings { batch_size, grad_accum: 3, ..Default::default() },
            ..TrainConfig::default()
        };
        let fields = |changes: &[SettingChange]| changes.iter().map(|c| c.setting.clone()).collect::<Vec<_>>();
        let (allowed, refused) = resume_changes(&on("auto", 16), &on("flex,flex", 16));
        assert_eq!((fields(&allowed), fields(&refused)), (vec!["device".to_string()], vec!["devices".to_string()]));
        // What a step trained and would train: 16 x 1 x 3 and 16 x 2 x 3 sequences.
        assert!(
            refused[0].change.starts_with("1 -> 2") && refused[0].change.contains("= 48 sequences, 96 on"),
            "{refused:?}"
        );
        let (_, refused) = resume_changes(&on("flex, flex", 8), &on("flex", 8));
        assert!(
            refused[0].change.starts_with("2 -> 1") && refused[0].change.contains("= 48 sequences, 24 on"),
            "{refused:?}"
        );
        // Other devices of the same number are how the run is carried out.
        let (allowed, refused) = resume_changes(&on("cuda:0,cuda:1", 16), &on("cuda:2,cuda:3", 16));
        assert_eq!((fields(&allowed), refused.len()), (vec!["device".to_string()], 0));
    }
}
