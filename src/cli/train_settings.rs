//! The settings a `train` command line means: the config file or the run's own settings, then the
//! options given on top. The decisions a program built on the crate would otherwise repeat.

use std::path::Path;

use clap::ArgMatches;

use super::{on_command_line, train_overridden};
use crate::train::{Start, TrainConfig};
use crate::{config_error::ConfigError, error::Error};

/// The training settings of a command line whose options are [`TrainConfig`]'s
/// ([`augment`](super::augment)ed into `matches`), with its own `--config FILE` (`config_file`)
/// and the way it starts (`start`):
/// - the base is `config_file`'s settings, or the defaults, and every option given replaces its
///   setting, whatever shape the file gave it (`--precision` replaces a file's `bf16 = true`);
/// - `--resume` without a config file continues the run in `--out` with the settings it recorded
///   (its `train.json`), the options given changing them;
/// - `--config RUN/train.json --resume` without `--out` resumes `RUN` wherever it is run from (the
///   `out` a run records is relative to where it started);
/// - `--init-from` on a resume may repeat the run's own (a resume that names other weights is
///   refused by the training, as every change of what is trained);
/// - `--model` beside `--init-from` is refused: the loaded model keeps its own shape; a config
///   file's `model` beside it is noted as unused.
///
/// A command line that `matches` was not made from is an error ([`ConfigError::Invalid`]), not
/// clap's exit.
pub fn train_settings(matches: &ArgMatches, config_file: Option<&Path>, start: Start) -> Result<TrainConfig, Error> {
    let given = |base: TrainConfig| train_overridden(base, matches);
    let resume = start == Start::Resume;
    let base = match config_file {
        Some(path) => TrainConfig::from_file(path)?,
        None => TrainConfig::default(),
    };
    let mut config = given(base)?;
    if let Some(run) =
        config_file.filter(|_| resume && !on_command_line(matches, "out")).and_then(crate::run::run_of_config_file)
    {
        if config.data.files.iter().any(|path| path.is_relative()) {
            crate::errln!(
                "note: resuming {}; the relative --data paths its train.json records are read from this folder, \
                 not from the one the training ran in",
                run.display()
            );
        }
        config.output.out = run;
    }
    if resume && config_file.is_none() {
        if let Some(recorded) = TrainConfig::recorded_in(&config.output.out)? {
            config = given(recorded)?;
        }
    }
    refuse_model_beside_init_from(matches, &config)?;
    if let Some(note) = config_file.filter(|_| !resume).and_then(|_| unused_model_note(&config)) {
        crate::errln!("{note}");
    }
    Ok(config)
}

/// A note when settings that start from `--init-from` also name a model (a config file's
/// `model`): the loaded model keeps its own shape, so it is not used. (`layers` beside
/// `--init-from` is refused when the training starts.)
fn unused_model_note(config: &TrainConfig) -> Option<String> {
    let init_from = config.model.init_from.as_ref()?;
    (config.model.preset != crate::train::ModelSettings::default().preset).then(|| {
        format!(
            "note: the config's `model = \"{}\"` is not used: the model comes from --init-from {} with its own shape",
            config.model.preset,
            init_from.display()
        )
    })
}

/// An error when the command line gives `--model` and the settings start from `--init-from`,
/// whose model is loaded with its own shape.
fn refuse_model_beside_init_from(matches: &ArgMatches, config: &TrainConfig) -> Result<(), ConfigError> {
    if config.model.init_from.is_some() && on_command_line(matches, "model") {
        return Err(ConfigError::Conflict(
            "--model cannot apply beside --init-from, whose model is loaded with its own shape; leave --model unset \
             (--norm retrofits another scheme onto it)"
                .into(),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::norm::NormScheme;

    fn matches(args: &[&str]) -> ArgMatches {
        let command = super::super::augment(clap::Command::new("train"), &TrainConfig::default());
        command.try_get_matches_from(std::iter::once("train").chain(args.iter().copied())).unwrap()
    }

    /// A run directory in `root` whose `train.json` records `config` (out `elsewhere/run`).
    fn recorded_run(root: &Path, config: &TrainConfig) -> std::path::PathBuf {
        let run = root.join("run");
        std::fs::create_dir(&run).unwrap();
        let mut recorded = config.resolved();
        recorded.output.out = "elsewhere/run".into();
        let json = serde_json::to_string_pretty(&recorded).unwrap();
        crate::io::write_atomically_with_sum(&run.join(crate::run::TRAIN_CONFIG), json.as_bytes()).unwrap();
        std::fs::write(run.join(crate::run::MODEL_INFO), "{}").unwrap();
        run
    }

    #[test]
    fn options_replace_the_fields_of_the_config_file_or_the_defaults() {
        let config = train_settings(&matches(&["--steps", "7"]), None, Start::New).unwrap();
        assert_eq!(config.optim.steps, 7);
        assert_eq!(config.model.norm, TrainConfig::default().model.norm);

        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.toml");
        std::fs::write(&file, "steps = 9\nlr = 0.002\n").unwrap();
        let config = train_settings(&matches(&["--lr", "0.001"]), Some(&file), Start::New).unwrap();
        assert_eq!((config.optim.steps, config.optim.lr), (9, 0.001));
    }

    #[test]
    fn a_precision_option_replaces_the_config_files_precision_in_either_shape() {
        use crate::device::Precision;
        let dir = tempfile::tempdir().unwrap();
        let (bf16_file, precision_file) = (dir.path().join("bf16.toml"), dir.path().join("precision.toml"));
        std::fs::write(&bf16_file, "bf16 = true\n").unwrap();
        std::fs::write(&precision_file, "precision = \"bf16-mixed\"\n").unwrap();
        let resolved = |args: &[&str], file: &Path| {
            let config = train_settings(&matches(args), Some(file), Start::New).unwrap();
            config.validate().map(|()| config.training_precision())
        };
        // The files alone, then each overridden by the option in the other shape.
        assert_eq!(resolved(&[], &bf16_file), Ok(Precision::Bf16));
        assert_eq!(resolved(&[], &precision_file), Ok(Precision::Bf16Mixed));
        assert_eq!(resolved(&["--precision", "bf16-mixed"], &bf16_file), Ok(Precision::Bf16Mixed));
        assert_eq!(resolved(&["--precision", "f32"], &bf16_file), Ok(Precision::F32));
        assert_eq!(resolved(&["--bf16"], &precision_file), Ok(Precision::Bf16));
        assert_eq!(resolved(&["--bf16", "false"], &precision_file), Ok(Precision::F32));
        // Both options on one command line that disagree are still a contradiction.
        let both = resolved(&["--bf16", "--precision", "bf16-mixed"], &bf16_file);
        assert!(matches!(&both, Err(ConfigError::Conflict(m)) if m.contains("contradict")), "{both:?}");
        assert_eq!(resolved(&["--bf16", "--precision", "bf16"], &precision_file), Ok(Precision::Bf16));
        // An unrelated option leaves the file's precision as it was.
        assert_eq!(resolved(&["--steps", "3"], &bf16_file), Ok(Precision::Bf16));
    }

    #[test]
    fn a_resume_without_a_config_file_starts_from_the_runs_own_settings() {
        let dir = tempfile::tempdir().unwrap();
        let mut recorded = TrainConfig::default();
        recorded.optim.steps = 11;
        recorded.model.norm = Some(NormScheme::PreLn);
        let run = recorded_run(dir.path(), &recorded);
        let out = run.to_str().unwrap();
        let config = train_settings(&matches(&["--out", out, "--steps", "20"]), None, Start::Resume).unwrap();
        assert_eq!((config.optim.steps, config.model.norm), (20, Some(NormScheme::PreLn)));
        assert_eq!(config.output.out, run, "--out given stays");
        // A new run in the same place does not read it.
        let config = train_settings(&matches(&["--out", out]), None, Start::New).unwrap();
        assert_eq!(config.model.norm, TrainConfig::default().model.norm);
    }

    #[test]
    fn a_runs_settings_file_given_to_a_resume_names_the_run_wherever_it_is_run_from() {
        let dir = tempfile::tempdir().unwrap();
        let run = recorded_run(dir.path(), &TrainConfig::default());
        let file = run.join(crate::run::TRAIN_CONFIG);
        let config = train_settings(&matches(&[]), Some(&file), Start::Resume).unwrap();
        assert_eq!(config.output.out, run);
        // Not without --resume, and not where --out says otherwise.
        let config = train_settings(&matches(&[]), Some(&file), Start::New).unwrap();
        assert_eq!(config.output.out, Path::new("elsewhere/run"));
        let config = train_settings(&matches(&["--out", "mine"]), Some(&file), Start::Resume).unwrap();
        assert_eq!(config.output.out, Path::new("mine"));
    }

    #[test]
    fn a_model_beside_init_from_is_refused() {
        let error = train_settings(&matches(&["--init-from", "runs/x", "--model", "9m"]), None, Start::New);
        assert!(matches!(error, Err(Error::Config(ConfigError::Conflict(_)))), "{error:?}");
        assert!(train_settings(&matches(&["--init-from", "runs/x"]), None, Start::New).is_ok());
    }

    #[test]
    fn a_config_files_model_beside_init_from_is_noted_as_unused() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("run.toml");
        std::fs::write(&file, "model = \"9m\"\n").unwrap();
        let config = train_settings(&matches(&["--init-from", "runs/x"]), Some(&file), Start::New).unwrap();
        let note = unused_model_note(&config).unwrap();
        assert!(note.contains("`model = \"9m\"` is not used"), "{note}");
        let config = train_settings(&matches(&[]), Some(&file), Start::New).unwrap();
        assert_eq!(unused_model_note(&config), None);
    }
}
