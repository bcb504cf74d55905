//! Command lines derived from the crate's config structs ([`TrainConfig`](crate::train::TrainConfig),
//! [`SamplingConfig`](crate::model::SamplingConfig), `AnalysisOptions`): each derives
//! `clap::Args`, so an option exists once, as a field with its doc comment, and its default is the
//! struct's `Default`. What the programs print goes through [`console`]: the library outside this
//! module prints nothing of its own (burn-train's dashboard draws on a terminal during `train`).
//!
//! ```
//! use clap::{CommandFactory, Parser};
//! use layernorm_scaling::{cli, model::SamplingConfig};
//!
//! #[derive(Parser)]
//! struct Args {
//!     /// Text to continue.
//!     #[arg(long, default_value = "the ")]
//!     prompt: String,
//! }
//!
//! let command = cli::augment(Args::command(), &SamplingConfig::default());
//! let matches = command.get_matches_from(["generate", "--top-k", "5"]);
//! let sampling = cli::overridden(SamplingConfig::default(), &matches).unwrap();
//! assert_eq!(sampling.top_k, Some(5));
//! assert_eq!(sampling.temperature, SamplingConfig::default().temperature);
//! ```

pub mod console;
#[cfg(feature = "train")]
mod lists;
#[cfg(feature = "train")]
mod sweep_settings;
#[cfg(feature = "train")]
mod train_settings;

#[cfg(feature = "train")]
pub use lists::{parse_baseline, parse_depths, parse_inits, parse_schemes, parse_seeds, table_1_schemes};
#[cfg(feature = "train")]
pub use sweep_settings::{shared_init_note, sweep_settings, SweepLists};
#[cfg(feature = "train")]
pub use train_settings::train_settings;

use clap::{ArgMatches, Args, Command, FromArgMatches};
use serde::Serialize;

/// Says on standard error which device `auto` stands for on this machine, and why, when `spec`
/// (a `--device` value) is `auto` and `BURN_DEVICE` does not name the device: the library picks
/// without a word ([`auto_choice`](crate::device::auto_choice)).
pub fn say_auto_device(spec: &str) {
    let auto = spec.trim().eq_ignore_ascii_case("auto");
    if !auto || crate::device::burn_device_for_auto().is_some() || crate::device::burn_device_problem().is_some() {
        return;
    }
    if let Some(choice) = crate::device::auto_choice() {
        crate::errln!("device auto: {} ({})", choice.device, choice.reason);
    }
}

/// `command` with the arguments of `T` added (its own description kept), each help ending in the
/// value of `defaults` ([`show_defaults`]).
pub fn augment<T: Args + Serialize>(command: Command, defaults: &T) -> Command {
    let (about, long_about) = (command.get_about().cloned(), command.get_long_about().cloned());
    // `augment_args` sets the description to the struct's doc comment: put the command's back.
    let augmented = T::augment_args(command).about(None::<&str>).long_about(None::<&str>);
    let augmented = match about {
        Some(about) => augmented.about(about),
        None => augmented,
    };
    let augmented = match long_about {
        Some(long_about) => augmented.long_about(long_about),
        None => augmented,
    };
    show_defaults(augmented, defaults)
}

/// `command` with each argument's help ending in `[default: VALUE]`, the value of the field of
/// the same name in `defaults` (fields that are unset or empty show none).
pub fn show_defaults<T: Serialize>(command: Command, defaults: &T) -> Command {
    let Ok(serde_json::Value::Object(fields)) = serde_json::to_value(defaults) else {
        return command;
    };
    command.mut_args(|arg| {
        let shown = match fields.get(arg.get_id().as_str()) {
            Some(serde_json::Value::String(text)) => text.clone(),
            Some(value @ (serde_json::Value::Number(_) | serde_json::Value::Bool(_))) => value.to_string(),
            _ => return arg,
        };
        let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
        arg.help(format!("{help} [default: {shown}]"))
    })
}

/// Prints `--help`'s or `--version`'s text on standard output and exits 0, or exits 1 with a
/// message when it cannot be written (`--help > /dev/full`): clap's own exit reports success.
fn print_help_or_exit(shown: &clap::Error) -> ! {
    use std::io::{IsTerminal, Write};
    let mut stdout = std::io::stdout().lock();
    let rendered = shown.render();
    let text = if stdout.is_terminal() { rendered.ansi().to_string() } else { rendered.to_string() };
    match stdout.write_all(text.as_bytes()).and_then(|()| stdout.flush()) {
        Ok(()) => std::process::exit(0),
        Err(e) => {
            crate::errln!("error: cannot write the help: {e}");
            std::process::exit(1)
        }
    }
}

/// The parsed command line of `command`. `--help` and `--version` print and exit 0; a bad
/// command line prints clap's message and exits 1, as every other bad input of the examples, and
/// so does a bad `LAYERNORM_SCALING_OPS` (the [`fused`](crate::fused) ops' path).
pub fn matches(command: Command) -> ArgMatches {
    let args = negative_numbers_attached(&command, std::env::args_os().collect());
    let matches = command.try_get_matches_from(&args).unwrap_or_else(|error| {
        if error.kind() == clap::error::ErrorKind::InvalidUtf8 {
            crate::errln!("error: {}", not_utf8(&args));
            std::process::exit(1);
        }
        if error.use_stderr() {
            let _ = error.print();
            std::process::exit(1);
        }
        print_help_or_exit(&error)
    });
    if crate::fused::OpPath::from_env().is_err() {
        let value = std::env::var(crate::fused::ENV_VAR).unwrap_or_default();
        crate::errln!(
            "error: {}={value:?} names no path for the fused ops; set it to `fused` (the default) or `reference`, \
             or unset it",
            crate::fused::ENV_VAR
        );
        std::process::exit(1);
    }
    matches
}

/// What clap's "invalid UTF-8 was detected in one or more arguments" was about: each argument of
/// `args` that is not UTF-8, with the option it was given to.
fn not_utf8(args: &[std::ffi::OsString]) -> String {
    let named: Vec<String> = args
        .iter()
        .enumerate()
        .skip(1)
        .filter(|(_, arg)| arg.to_str().is_none())
        .map(|(i, arg)| match args[i - 1].to_str().filter(|option| option.starts_with('-')) {
            Some(option) => format!("{arg:?} (given to {option})"),
            None => format!("{arg:?}"),
        })
        .collect();
    format!(
        "{} not valid UTF-8; this option takes UTF-8 text (for a file's name: rename the file, or make a link \
         with a UTF-8 name to it)",
        if named.len() == 1 { format!("{} is", named[0]) } else { format!("{} are", named.join(", ")) }
    )
}

/// `args` with each negative number that follows a long option of `command` taking a value
/// attached to it (`--lr -1e-3` becomes `--lr=-1e-3`): clap takes `-1e-3` for a short flag `-1`
/// (its test for a negative number knows no exponent), so the value would never reach the
/// option's range check. A mistyped number (`-1e-3x`) is attached too, so that clap names it as
/// the option's invalid value. Nothing after `--` is touched.
pub fn negative_numbers_attached(command: &Command, args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    let takes_value = |option: &str| {
        let mut commands = vec![command];
        while let Some(command) = commands.pop() {
            if command.get_arguments().any(|arg| arg.get_long() == Some(option) && arg.get_action().takes_values()) {
                return true;
            }
            commands.extend(command.get_subcommands());
        }
        false
    };
    let looks_numeric = |arg: &std::ffi::OsString| {
        arg.to_str().and_then(|a| a.strip_prefix('-')).is_some_and(|rest| {
            rest.parse::<f64>().is_ok() || rest.starts_with(|c: char| c.is_ascii_digit() || c == '.')
        })
    };
    let mut attached: Vec<std::ffi::OsString> = Vec::with_capacity(args.len());
    let mut positional_only = false;
    for arg in args {
        let option = attached
            .last()
            .and_then(|last| last.to_str())
            .filter(|last| !positional_only && !last.contains('='))
            .and_then(|last| last.strip_prefix("--"))
            .filter(|name| takes_value(name));
        match option {
            Some(option) if looks_numeric(&arg) => {
                let joined = format!("--{option}={}", arg.to_string_lossy());
                *attached.last_mut().expect("an option precedes it") = joined.into();
            }
            _ => {
                positional_only |= arg == "--";
                attached.push(arg);
            }
        }
    }
    attached
}

/// Whether the option `id` was given on the command line (not a default, nor unset).
#[cfg(feature = "train")]
fn on_command_line(matches: &ArgMatches, id: &str) -> bool {
    matches!(matches.value_source(id), Some(clap::parser::ValueSource::CommandLine))
}

/// `base` with every option of `T` given on the command line applied (an option not given
/// leaves its field as it was): `base` is the defaults, or a config file read first.
pub fn overridden<T: FromArgMatches>(mut base: T, matches: &ArgMatches) -> Result<T, clap::Error> {
    base.update_from_arg_matches(matches)?;
    Ok(base)
}

/// Training settings `base` (a config file's, a run's own, or the defaults) with the options
/// given on the command line applied, as [`overridden`] does, where an option replaces its
/// setting whatever shape `base` gave it: `--precision` or `--bf16` (one setting, the precision)
/// replaces both `precision` and `bf16` of `base`, so that a file's `bf16 = true` yields to
/// `--precision bf16-mixed`, and its `precision = "bf16-mixed"` to `--bf16`. Both options on one
/// command line still contradict each other when they disagree (refused when the run starts).
#[cfg(feature = "train")]
fn train_overridden(
    mut base: crate::train::TrainConfig,
    matches: &ArgMatches,
) -> Result<crate::train::TrainConfig, crate::config_error::ConfigError> {
    if on_command_line(matches, "precision") || on_command_line(matches, "bf16") {
        (base.precision, base.bf16) = (None, None);
    }
    overridden(base, matches)
        .map_err(|e| crate::config_error::ConfigError::Invalid { what: "command line", message: e.to_string() })
}

/// The value parser of a size in `range` (`#[arg(value_parser = cli::size(1..=1024))]`): a value
/// outside it, say `--batch 18446744073709551615`, is refused with the range before any use.
pub fn size(range: std::ops::RangeInclusive<u64>) -> clap::builder::RangedU64ValueParser<usize> {
    clap::builder::RangedU64ValueParser::new().range(range)
}

/// The checkpoint a program loads from the run in `dir`: `--step`'s, or the step at the end of
/// `--epoch`'s validation interval (the deprecated option, read through the run's `train.json`,
/// with a warning naming the `--step` to use instead); `None` for the final model.
pub fn checkpoint_step(
    dir: &std::path::Path,
    step: Option<usize>,
    epoch: Option<usize>,
) -> Result<Option<usize>, crate::error::Error> {
    let (step, deprecated) = crate::run::step_of_options(dir, step, epoch)?;
    if let Some(warning) = deprecated {
        crate::errln!("warning: {warning}");
    }
    Ok(step)
}

#[cfg(test)]
mod tests {
    use super::negative_numbers_attached;
    use clap::{Arg, ArgAction, Command};

    #[test]
    fn a_negative_number_in_any_notation_is_attached_to_its_option() {
        let command = Command::new("train")
            .arg(Arg::new("lr").long("lr"))
            .arg(Arg::new("steps").long("steps"))
            .arg(Arg::new("seed").long("seed"))
            .arg(Arg::new("out").long("out"))
            .arg(Arg::new("overwrite").long("overwrite").action(ArgAction::SetTrue))
            .arg(Arg::new("rest").num_args(0..))
            .subcommand(Command::new("logits").arg(Arg::new("temperature").long("temperature")));
        let args = |list: &[&str]| list.iter().map(std::ffi::OsString::from).collect::<Vec<_>>();
        let given =
            args(&["train", "--lr", "-1e-3", "--steps", "5", "--x=1", "-2", "--seed", "-inf", "--", "--out", "-3"]);
        let expected =
            args(&["train", "--lr=-1e-3", "--steps", "5", "--x=1", "-2", "--seed=-inf", "--", "--out", "-3"]);
        assert_eq!(negative_numbers_attached(&command, given), expected);
        // A mistyped number reaches its option, which names it; a flag takes nothing.
        let given = args(&["train", "--lr", "-1e-3x", "--overwrite", "-1", "--out", "d"]);
        let expected = args(&["train", "--lr=-1e-3x", "--overwrite", "-1", "--out", "d"]);
        assert_eq!(negative_numbers_attached(&command, given), expected);
        // A subcommand's option.
        let given = args(&["train", "logits", "--temperature", "-.5"]);
        assert_eq!(negative_numbers_attached(&command, given), args(&["train", "logits", "--temperature=-.5"]));
    }
}
