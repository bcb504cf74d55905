//! [`TrainConfig::from_file`]: reading a training config file (TOML or JSON, flat:
//! `seq_len = 256`), with errors that name the key and its line, and a run's own `train.json`
//! ([`TrainConfig::from_run_file`], [`TrainConfig::recorded_in`]). serde reads
//! the settings through their groups (`flatten`), where it can no longer say which key held a
//! bad value, so the file is also read as a plain table to point at it.
//!
//! It stands in for Burn's `Config::load`, which reads JSON alone and says only "file not found"
//! or serde's words, and `Config::save`, which writes in place (a crash leaves a torn file): the
//! run writes its `train.json` atomically with a checksum ([`crate::run::record_start`]).

use std::path::Path;

use super::budget::RECORDED_BUDGET;
use super::config::TrainConfig;
use super::setting_kind::setting_names;
use crate::run_dir_error::RunDirError;
use crate::{config_error::ConfigError, error::Error};

impl TrainConfig {
    /// Reads a TOML (`.toml`) or JSON (`.json`) file; a file of another name is read as whichever
    /// of the two its content is (the error names both attempts). Missing fields take their
    /// defaults, unknown ones are errors.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, Error> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| Error::file(path, e))?;
        let extension = path.extension().map(|ext| ext.to_string_lossy().to_lowercase());
        let parsed = parse(&text, extension.as_deref());
        parsed.map_err(|message| Error::file(path, ConfigError::Invalid { what: "training config", message }))
    }

    /// `Ok` when `path` reads as a training's settings, else why not: how the run directory tells
    /// a run's `train.json` that no checksum signs (a start killed between its two writes) from a
    /// user's file ([`crate::run::SettingsCheck`]).
    pub fn check_run_settings(path: &Path) -> Result<(), String> {
        Self::from_file(path).map(drop).map_err(|e| e.to_string())
    }

    /// A run's own `train.json`, as [`from_file`](Self::from_file) reads it, but for the data
    /// seed: a run written before `data_seed` existed (0.1) split its data with `seed`, and
    /// resuming it must keep that split.
    pub fn from_run_file(path: impl AsRef<Path>) -> Result<Self, Error> {
        let mut config = Self::from_file(path)?;
        config.data.data_seed = config.data.data_seed.or(Some(config.seed));
        // A run recorded before `precision` existed says `bf16 = true`: its precision, which the
        // options given on resuming are compared with (not a `--bf16` given beside them).
        (config.precision, config.bf16) = (config.recorded_precision(), None);
        Ok(config)
    }

    /// The settings the run in `dir` recorded (its `train.json`, read by
    /// [`from_run_file`](Self::from_run_file)), or `None` where it recorded none: what a resume
    /// without a config file starts from, before the options given change it. Settings that
    /// cannot be read (damaged, a directory or a dangling link in their place) are an error that
    /// says what to do, not "no settings".
    pub fn recorded_in(dir: impl AsRef<Path>) -> Result<Option<Self>, Error> {
        let dir = dir.as_ref();
        let recorded = dir.join(crate::run::TRAIN_CONFIG);
        match std::fs::symlink_metadata(&recorded) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            _ => Self::read_recorded(&recorded).map(Some).map_err(|e| Error::run_dir(dir, e)),
        }
    }

    /// The run's own `train.json` at `path`, read by [`from_run_file`](Self::from_run_file); one
    /// that cannot be read is [`RunDirError::SettingsUnreadable`], marked edited where its
    /// checksum says it changed since the run wrote it.
    pub(crate) fn read_recorded(path: &Path) -> Result<Self, RunDirError> {
        Self::from_run_file(path).map_err(|e| {
            let edited = matches!(crate::io::verify_sum(path), Err(crate::io::SumError::Mismatch(_)));
            RunDirError::SettingsUnreadable { reason: e.to_string(), edited }
        })
    }
}

/// The config in `text`, read as TOML for `.toml`, JSON for `.json`, and otherwise as whichever
/// of the two it is (the error then names both attempts).
fn parse(text: &str, extension: Option<&str>) -> Result<TrainConfig, String> {
    match extension {
        Some("toml") => parse_toml(text),
        Some("json") => parse_json(text),
        _ => parse_toml(text).or_else(|as_toml| {
            parse_json(text).map_err(|as_json| {
                format!(
                    "neither TOML nor JSON (read as TOML: {}; read as JSON: {as_json}); fix it, and name it .toml or \
                     .json",
                    as_toml.trim_end()
                )
            })
        }),
    }
}

/// A config file as serde reads it: the settings, and the data budget that a run's own
/// `train.json` records beside them ([`RECORDED_BUDGET`]: no setting, so it is skipped).
#[derive(serde::Deserialize)]
struct ConfigFile {
    #[serde(flatten)]
    settings: TrainConfig,
    #[serde(default, rename = "data_budget")]
    _recorded_budget: Option<serde::de::IgnoredAny>,
}

/// The settings of a file that may hold a recorded data budget beside them (a run's
/// `train.json`, or a `sweep.json` whose settings came from one while `TrainConfig` had the field): a
/// serde `deserialize_with` for a `TrainConfig` field.
pub(super) fn settings_skipping_the_budget<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<TrainConfig, D::Error> {
    <ConfigFile as serde::Deserialize>::deserialize(deserializer).map(|file| file.settings)
}

fn parse_toml(text: &str) -> Result<TrainConfig, String> {
    let table: toml::Table = toml::from_str(text).map_err(|e| e.to_string())?;
    check_names(table.iter().map(|(key, value)| (key.as_str(), value.is_table())), text)?;
    toml::from_str(text).map(|file: ConfigFile| file.settings).map_err(|e| {
        let alone = table.iter().filter_map(|(key, value)| {
            let one = toml::Table::from_iter([(key.clone(), value.clone())]);
            let error = toml::Value::Table(one).try_into::<ConfigFile>().err()?;
            Some((key.as_str(), error.to_string(), value.is_table()))
        });
        bad_value(text, alone).unwrap_or(e.to_string())
    })
}

fn parse_json(text: &str) -> Result<TrainConfig, String> {
    let map: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(text).map_err(|e| crate::config_error::json_error_in(text, &e))?;
    check_names(map.iter().map(|(key, value)| (key.as_str(), value.is_object())), text)?;
    // Parsed from the text, not the map: a key given twice is an error, not the last one's value.
    serde_json::from_str(text).map(|file: ConfigFile| file.settings).map_err(|e| {
        let alone = map.iter().filter_map(|(key, value)| {
            let one = serde_json::Map::from_iter([(key.clone(), value.clone())]);
            let error = serde_json::from_value::<ConfigFile>(serde_json::Value::Object(one)).err()?;
            Some((key.as_str(), error.to_string(), value.is_object()))
        });
        bad_value(text, alone).unwrap_or_else(|| crate::config_error::json_error_in(text, &e))
    })
}

/// Settings are flat in a file; a table or object where one is expected is the groups guessed.
const FLAT: &str = "settings are flat in a config file: write them at the top level (`layers = 2`, `lr = 1e-3`), \
                    not in a table or object";

/// An error naming the first of a file's keys, `(key, holds a table)`, that is no setting, in
/// the order of `text`, with its line and the known ones.
fn check_names<'a>(keys: impl Iterator<Item = (&'a str, bool)>, text: &str) -> Result<(), String> {
    // A run's own train.json also records its data budget, which is no setting.
    let unknown = keys.filter(|(key, _)| *key != RECORDED_BUDGET && !setting_names().any(|known| known == *key));
    let Some((key, table)) = unknown.min_by_key(|(key, _)| key_line(text, key).unwrap_or(usize::MAX)) else {
        return Ok(());
    };
    let known: Vec<String> = setting_names().map(|name| format!("`{name}`")).collect();
    let hint = if table { format!("; {FLAT}") } else { String::new() };
    Err(format!("unknown field `{key}`{}, expected one of {}{hint}", at_line(text, key), known.join(", ")))
}

/// The error of the first key, in the order of `text`, whose value does not read even alone:
/// `(key, error, holds a table)`; `None` when there is none.
fn bad_value<'a>(text: &str, failures: impl Iterator<Item = (&'a str, String, bool)>) -> Option<String> {
    let (key, error, table) = failures.min_by_key(|(key, ..)| key_line(text, key).unwrap_or(usize::MAX))?;
    let hint = if table { format!("; {FLAT}") } else { String::new() };
    Some(format!("`{key}`{}: {}{hint}", at_line(text, key), error.trim_end()))
}

/// ` at line N` for the line of `text` that sets `key`, or nothing when none is found.
fn at_line(text: &str, key: &str) -> String {
    key_line(text, key).map(|index| format!(" at line {}", index + 1)).unwrap_or_default()
}

/// The index of the first line of `text` that sets `key`: `key = ...` or `"key" = ...` (TOML),
/// `key.sub = ...` or `[key]` (a TOML table), or `"key": ...` anywhere on the line (JSON).
fn key_line(text: &str, key: &str) -> Option<usize> {
    let sets = |rest: &str, after: &[char]| rest.trim_start().starts_with(after);
    text.lines().position(|line| {
        let trimmed = line.trim_start();
        let toml_key = [key.to_string(), format!("\"{key}\""), format!("'{key}'")].into_iter().any(|spelt| {
            trimmed.strip_prefix(spelt.as_str()).is_some_and(|rest| sets(rest, &['=', '.']))
                || trimmed
                    .trim_start_matches('[')
                    .strip_prefix(spelt.as_str())
                    .is_some_and(|rest| sets(rest, &[']', '.']))
        });
        let quoted = format!("\"{key}\"");
        let json_key = line.match_indices(quoted.as_str()).any(|(at, _)| sets(&line[at + quoted.len()..], &[':']));
        toml_key || json_key
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::DataSettings;

    #[test]
    fn a_runs_recorded_data_budget_reads_back_as_no_setting() {
        let json = r#"{"seq_len": 16, "data_budget": {"sequences": 1, "tokens": 16, "read": 4, "seq_len": 16, "sequences_mode": "pack", "truncated": 0}}"#;
        let config = parse(json, Some("json")).unwrap();
        assert_eq!(
            config,
            TrainConfig { data: DataSettings { seq_len: 16, ..Default::default() }, ..Default::default() }
        );
        let toml = "seq_len = 16\n[data_budget]\nsequences = 1\ntokens = 16\nread = 4\nseq_len = 16\nsequences_mode = \"pack\"\ntruncated = 0\n";
        assert_eq!(parse(toml, Some("toml")).unwrap(), config);
    }

    #[test]
    fn a_key_is_found_on_its_line_in_either_format() {
        let toml = "# a run\nsteps = 4\nseq_len = \"x\"\n[optim]\nlr = 1\noptim.beta1 = 0.9\n";
        assert_eq!(key_line(toml, "seq_len"), Some(2));
        assert_eq!(key_line(toml, "optim"), Some(3));
        assert_eq!(key_line(toml, "seq"), None, "a prefix of another key is not that key");
        let json = "{\"steps\": 4, \"lrr\": 1}";
        assert_eq!((key_line(json, "lrr"), key_line(json, "steps")), (Some(0), Some(0)));
        assert_eq!(key_line("{\n  \"a\": {\"lr\": 1}\n}", "lr"), Some(1));
    }

    #[test]
    fn a_bad_value_is_named_by_its_key_and_line() {
        let error = parse_toml("steps = 4\nseq_len = \"abc\"\n").unwrap_err();
        assert!(error.starts_with("`seq_len` at line 2: invalid type: string \"abc\""), "{error}");
        let error = parse_json("{\n  \"steps\": 4,\n  \"seq_len\": \"abc\"\n}").unwrap_err();
        assert!(error.starts_with("`seq_len` at line 3: invalid type: string \"abc\""), "{error}");
        // A group guessed as a table: `model` is the preset's name, a string.
        let error = parse_toml("# mine\n[model]\nlayers = 2\n").unwrap_err();
        assert!(error.starts_with("`model` at line 2: invalid type: map") && error.contains(FLAT), "{error}");
    }

    #[test]
    fn the_first_unknown_key_in_the_file_is_named_with_its_line() {
        let error = parse_toml("steps = 4\n[optim]\nlr = 1\n[eval]\nx = 1\n").unwrap_err();
        assert!(error.starts_with("unknown field `optim` at line 2, expected one of `model`"), "{error}");
        assert!(error.ends_with(FLAT), "{error}");
        let error = parse_json("{\"steps\": 4, \"lrr\": 1}").unwrap_err();
        assert!(error.starts_with("unknown field `lrr` at line 1"), "{error}");
        // A key given twice is refused, as serde refuses it.
        assert!(parse_json("{\"lr\": 1, \"lr\": 2}").unwrap_err().contains("duplicate field `lr`"));
    }
}
