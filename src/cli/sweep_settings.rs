//! The sweep a `sweep` command line means: the training settings every run shares (as `train`
//! reads them) and the sweep's own lists.

use std::path::Path;

use clap::ArgMatches;

use super::{on_command_line, parse_depths, parse_inits, parse_schemes, parse_seeds, train_overridden};
use crate::train::{model_config, Sweep, TrainConfig};
use crate::{errln, error::Error, norm::InitScheme};

/// The sweep's own list options as given: `--schemes`, `--seeds`, `--inits` and `--layers` (a
/// list of depths on a sweep's command line).
#[derive(Clone, Copy, Debug)]
pub struct SweepLists<'a> {
    /// Comma-separated schemes, `table-1` or `all`.
    pub schemes: &'a str,
    /// Seeds and ranges of seeds (`None`: the settings' seed).
    pub seeds: Option<&'a str>,
    /// Inits, an axis crossed with every scheme (`None`: no axis).
    pub inits: Option<&'a str>,
    /// Depths (`None`: the model's own; one depth: every run at it, no axis).
    pub depths: Option<&'a str>,
}

/// The sweep of a command line whose options are [`TrainConfig`]'s ([`augment`](super::augment)ed
/// into `matches`) beside the sweep's own `lists`:
/// - the settings are `config_file`'s, or `defaults`, with every option given on top; a config
///   file's `norm` is dropped (with a note), as `--schemes` gives each run its scheme;
/// - one depth in `--layers` sets every run's depth; several make a depth axis;
/// - without `--seeds` the sweep has one seed, the settings' own; beside it, a `--seed` is
///   noted as unused.
pub fn sweep_settings(
    matches: &ArgMatches,
    config_file: Option<&Path>,
    defaults: TrainConfig,
    lists: SweepLists,
) -> Result<Sweep, Error> {
    let base = match config_file {
        Some(path) => {
            let mut base = TrainConfig::from_file(path)?;
            // A run's config (`norm = "lns"`) serves a sweep: --schemes replaces its scheme.
            if let Some(norm) = base.model.norm.take() {
                errln!("note: the config's `norm = \"{norm}\"` is replaced by the sweep's --schemes");
            }
            base
        }
        None => defaults,
    };
    let mut config = train_overridden(base, matches)?;
    let schemes = parse_schemes(lists.schemes)?;
    let inits = lists.inits.map(parse_inits).transpose()?.unwrap_or_default();
    let mut depths = lists.depths.map(parse_depths).transpose()?.unwrap_or_default();
    if let [depth] = depths[..] {
        config.model.layers = Some(depth);
        depths.clear();
    }
    let seeds = match lists.seeds {
        Some(list) => {
            if on_command_line(matches, "seed") {
                errln!("note: --seed {} is not used: --seeds gives each run its seed", config.seed);
            }
            parse_seeds(list)?
        }
        None => vec![config.seed],
    };
    Ok(Sweep { config, schemes, seeds, inits, depths })
}

/// A note for the reader of the sweep's report when every run shares an init other than `normal`
/// (no init axis): the report names the arms by scheme alone.
pub fn shared_init_note(sweep: &Sweep) -> Option<String> {
    let init = model_config(&sweep.config).ok().and_then(|model| model.init)?;
    (sweep.inits.is_empty() && init != InitScheme::Normal).then(|| {
        format!("note: every run uses the init `{init}` (of the config or the model file); the report names the schemes alone")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config_error::ConfigError;
    use crate::norm::NormScheme;

    fn matches(args: &[&str]) -> ArgMatches {
        let command = super::super::augment(clap::Command::new("sweep"), &TrainConfig::default());
        command.try_get_matches_from(std::iter::once("sweep").chain(args.iter().copied())).unwrap()
    }

    fn lists(schemes: &str) -> SweepLists<'_> {
        SweepLists { schemes, seeds: None, inits: None, depths: None }
    }

    #[test]
    fn one_depth_sets_every_run_and_several_make_an_axis() {
        let one = SweepLists { depths: Some("6"), ..lists("pre-ln,lns") };
        let sweep = sweep_settings(&matches(&[]), None, TrainConfig::default(), one).unwrap();
        assert_eq!((sweep.config.model.layers, sweep.depths.len()), (Some(6), 0));
        let axis = SweepLists { depths: Some("2,4"), ..lists("pre-ln,lns") };
        let sweep = sweep_settings(&matches(&[]), None, TrainConfig::default(), axis).unwrap();
        assert_eq!((sweep.config.model.layers, sweep.depths), (None, vec![2, 4]));
    }

    #[test]
    fn seeds_default_to_the_settings_seed_and_options_apply_to_every_run() {
        let sweep =
            sweep_settings(&matches(&["--seed", "7", "--steps", "3"]), None, TrainConfig::default(), lists("lns"))
                .unwrap();
        assert_eq!((sweep.seeds, sweep.config.optim.steps), (vec![7], 3));
        let given = SweepLists { seeds: Some("1-3"), ..lists("lns") };
        let sweep = sweep_settings(&matches(&["--seed", "7"]), None, TrainConfig::default(), given).unwrap();
        assert_eq!(sweep.seeds, vec![1, 2, 3]);
    }

    #[test]
    fn a_config_files_scheme_gives_way_to_the_sweeps_schemes() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("run.toml");
        std::fs::write(&file, "norm = \"post-ln\"\nsteps = 5\n").unwrap();
        let sweep = sweep_settings(&matches(&[]), Some(&file), TrainConfig::default(), lists("pre-ln,lns")).unwrap();
        assert_eq!(sweep.config.model.norm, None);
        assert_eq!(sweep.config.optim.steps, 5);
        assert_eq!(sweep.schemes, vec![NormScheme::PreLn, "lns".parse().unwrap()]);
    }

    #[test]
    fn a_shared_init_other_than_normal_is_noted() {
        let scaled =
            sweep_settings(&matches(&["--init", "scaled"]), None, TrainConfig::default(), lists("lns")).unwrap();
        assert!(shared_init_note(&scaled).is_some_and(|note| note.contains("`scaled`")));
        let plain = sweep_settings(&matches(&[]), None, TrainConfig::default(), lists("lns")).unwrap();
        assert_eq!(shared_init_note(&plain), None);
    }

    #[test]
    fn a_bad_list_is_refused_naming_its_option() {
        let bad = SweepLists { seeds: Some("3-1"), ..lists("lns") };
        let error = sweep_settings(&matches(&[]), None, TrainConfig::default(), bad).unwrap_err();
        assert!(matches!(&error, Error::Config(ConfigError::Conflict(message)) if message.starts_with("--seeds")));
        let error = sweep_settings(&matches(&[]), None, TrainConfig::default(), lists("lns,lns")).unwrap_err();
        assert!(matches!(&error, Error::Config(ConfigError::Conflict(message)) if message.starts_with("--schemes")));
    }
}
