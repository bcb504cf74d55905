//! Trains one config under several normalisation schemes and seeds, then writes a Table-1-style
//! report: `<out>/<scheme>/seed-<n>/` per run, `<out>/report/` for the comparison.
//!
//! ```bash
//! cargo run --release --example sweep -- --out runs/sweep                       # Table 1's schemes, seed 1
//! cargo run --release --example sweep -- --out runs/sweep --schemes pre-ln,lns --seeds 1-3 --steps 400
//! ```
//!
//! Run it again to go on after an interruption: finished runs are skipped, an interrupted one
//! resumes. Every option of `train` (`--steps`, `--model`, `--config`, ...) applies to every run.

use std::path::Path;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser};
use layernorm_scaling::analysis::{
    analyze, paired_differences, paired_markdown, sweep_loss_curves, write_sweep_report, AnalysisOptions, ComparedRun,
};
use layernorm_scaling::data::SequenceMode;
use layernorm_scaling::run::load_run_model;
use layernorm_scaling::train::{
    parse_schemes, parse_seeds, validation_data, PairAction, PairOutcome, Sweep, SweepEvent, SweepRecord, TrainConfig,
};
use layernorm_scaling::{cli, console, errln, out, outln, parse_devices, ConfigError, Error, NormScheme};

/// The options of the sweep itself; the training settings are `train`'s.
#[derive(Parser, Debug)]
#[command(about = "Train every (scheme, seed) pair of a sweep and write a Table-1-style report")]
#[command(allow_negative_numbers = true)]
struct Args {
    /// Training config file (TOML or JSON) every run starts from.
    #[arg(long)]
    config: Option<std::path::PathBuf>,
    /// Comma-separated schemes (`pre-ln,lns,mix-ln:0.25`), `table-1` (the paper's Table 1:
    /// post-ln, deepnorm, mix-ln, pre-ln, lns) or `all`.
    #[arg(long, default_value = "table-1")]
    schemes: String,
    /// Comma-separated seeds or ranges (`1,2,3`, `1-3`); default: the config's seed.
    #[arg(long)]
    seeds: Option<String>,
    /// Skip the diagnostics of each scheme's final model in the report (they take a few forward
    /// passes per layer).
    #[arg(long)]
    no_diagnostics: bool,
    /// The scheme every other one is compared with, seed by seed, in the report's paired table
    /// (one of `--schemes`); default: `pre-ln` when the sweep has it.
    #[arg(long)]
    baseline: Option<String>,
}

fn main() -> ExitCode {
    layernorm_scaling::console::reuse_freed_memory();
    let defaults = TrainConfig { out: "runs/sweep".into(), ..TrainConfig::default() };
    let matches = cli::matches(cli::augment(Args::command(), &defaults));
    layernorm_scaling::console::exit_code(run(&matches, defaults))
}

fn run(matches: &clap::ArgMatches, defaults: TrainConfig) -> Result<(), Error> {
    let args = Args::from_arg_matches(matches).unwrap_or_else(|e| e.exit());
    let base = match &args.config {
        Some(path) => {
            let mut base = TrainConfig::from_file(path)?;
            // A run's config (`norm = "lns"`) serves a sweep: --schemes replaces its scheme.
            if let Some(norm) = base.norm.take() {
                errln!("note: the config's `norm = \"{norm}\"` is replaced by the sweep's --schemes");
            }
            base
        }
        None => defaults,
    };
    let config = cli::overridden(base, matches).unwrap_or_else(|e| e.exit());
    let schemes = parse_schemes(&args.schemes)?;
    let seeds = match &args.seeds {
        Some(list) => parse_seeds(list)?,
        None => vec![config.seed],
    };
    let baseline = match &args.baseline {
        Some(name) if name.trim().is_empty() => {
            return Err(ConfigError::Conflict("--baseline is empty: name one of the sweep's schemes".into()).into())
        }
        Some(name) => {
            let scheme = parse_schemes(name)?.remove(0);
            if !schemes.contains(&scheme) {
                return Err(ConfigError::Conflict(format!(
                    "--baseline {name} is not one of the sweep's schemes ({}); add it to --schemes or choose one of them",
                    schemes.iter().map(|s| s.to_string()).collect::<Vec<_>>().join(", ")
                ))
                .into());
            }
            scheme.to_string()
        }
        None => NormScheme::PreLn.to_string(),
    };
    let sweep = Sweep { config, schemes, seeds };
    // `run` checks every pair's settings and the directory before the first step.
    let record = sweep.run(|event| match event {
        SweepEvent::Starting { pair, index, total, action, eta_seconds } => {
            let eta = eta_seconds.map(|s| format!(", about {:.0} min left", s / 60.0)).unwrap_or_default();
            let verb = match action {
                PairAction::Train => "training",
                PairAction::Resume => "resuming",
                PairAction::Measure => "measuring the finished",
            };
            outln!("\n=== sweep {index}/{total}: {verb} {} seed {}{eta} ===", pair.scheme, pair.seed);
        }
        SweepEvent::Skipped { pair, outcome } => outln!("sweep: {} already {}", pair.key(), describe(outcome)),
        SweepEvent::Training { event, .. } => console::print_event(&event, event.is_notice()),
        SweepEvent::Done { pair, outcome } => outln!("sweep: {} {}", pair.key(), describe(outcome)),
    })?;
    let report_dir = sweep.config.out.join("report");
    let (curves, left_out) = sweep_loss_curves(&sweep, &record);
    for warning in left_out {
        errln!("warning: {warning}");
    }
    let diagnostics = if args.no_diagnostics { Vec::new() } else { diagnostics(&sweep, &record)? };
    let results = write_sweep_report(&report_dir, &record, &curves, &diagnostics, &baseline)
        .map_err(|e| Error::file(&report_dir, format!("cannot write the report: {e}")))?;
    outln!();
    out!("{}", layernorm_scaling::analysis::results_markdown(&results, record.seeds.len()));
    match paired_differences(&results, &baseline).filter(|p| !p.is_empty()) {
        Some(paired) => {
            outln!("\npaired against {baseline} (loss difference, seed by seed):");
            out!("{}", paired_markdown(&paired));
        }
        None if results.len() > 1 => {
            errln!("note: no paired comparison: the sweep has no {baseline}; choose its baseline with --baseline")
        }
        None => {}
    }
    outln!("\nreport: {}", report_dir.join("results.md").display());
    Ok(())
}

fn describe(outcome: &PairOutcome) -> String {
    match outcome {
        PairOutcome::Finished { valid_loss } => format!("finished: validation loss {valid_loss:.4}"),
        PairOutcome::Diverged { reason } => format!("diverged: {reason}"),
    }
}

/// The diagnostics of each scheme's first finished seed whose model loads, on that run's
/// validation data. A model that cannot be read (say, damaged since) is named and skipped.
fn diagnostics(sweep: &Sweep, record: &SweepRecord) -> Result<Vec<ComparedRun>, Error> {
    let device = parse_devices(&sweep.config.device)?.remove(0);
    let options = AnalysisOptions { batches: 4, ..AnalysisOptions::default() };
    let mut compared = Vec::new();
    for scheme in &sweep.schemes {
        let finished = sweep.pairs().into_iter().filter(|p| {
            &p.scheme == scheme && matches!(record.outcomes.get(&p.key()), Some(PairOutcome::Finished { .. }))
        });
        for pair in finished {
            outln!("diagnostics of {}", pair.key());
            let (model, _) = match load_run_model(&pair.dir, None, &device) {
                Ok(loaded) => loaded,
                Err(e) => {
                    errln!("warning: no diagnostics from {}: {e}", pair.key());
                    continue;
                }
            };
            // Packed: the diagnostics average over positions, which padding must not dilute.
            let data = validation_data(&TrainConfig { sequences: SequenceMode::Pack, ..sweep.pair_config(&pair) })?;
            let report = analyze(&model, &data, &options, &mut |_, _| {})?;
            let title = format!("{} ({})", pair.key(), path_name(&pair.dir));
            compared.push(ComparedRun { label: layernorm_scaling::train::scheme_dir_name(scheme), title, report });
            break;
        }
    }
    Ok(compared)
}

fn path_name(dir: &Path) -> String {
    dir.display().to_string()
}
