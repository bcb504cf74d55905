//! Trains one config under several normalisation schemes and seeds, then writes a Table-1-style
//! report: `<out>/<scheme>/seed-<n>/` per run, `<out>/report/` for the comparison.
//!
//! ```bash
//! cargo run --release --example sweep -- --out runs/sweep                       # Table 1's schemes, seed 1
//! cargo run --release --example sweep -- --out runs/sweep --schemes pre-ln,lns --seeds 1-3 --steps 400
//! cargo run --release --example sweep -- --out runs/inits --schemes pre-ln,lns --inits normal,scaled
//! cargo run --release --example sweep -- --out runs/depth --schemes pre-ln,lns --layers 4,8,16
//! ```
//!
//! Run it again to go on after an interruption: finished runs are skipped, an interrupted one
//! resumes. Every option of `train` (`--steps`, `--model`, `--config`, ...) applies to every run.

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser};
use layernorm_scaling::analysis::{
    check_removal_threshold, paired_differences, paired_markdown, sweep_diagnostics, sweep_loss_curves,
    sweep_report_dir, write_sweep_report, DiagnosticsProgress, EFFECTIVE_DEPTH_THRESHOLD, SWEEP_RESULTS,
};
use layernorm_scaling::cli::{self, console};
use layernorm_scaling::cli::{parse_baseline, SweepLists};
use layernorm_scaling::io::check_replaceable_dir;
use layernorm_scaling::train::{OutputSettings, PairAction, PairOutcome, SweepEvent, TrainConfig};
use layernorm_scaling::{errln, out, outln, Error};

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
    /// Comma-separated inits (`normal,scaled,depth-scaled`), an axis crossed with every scheme:
    /// `lns+scaled` is LNS with scaled init. Default: the config's init, no axis.
    #[arg(long)]
    inits: Option<String>,
    /// The removal threshold of the effective depth in the report of a depth sweep: a block counts
    /// when removing it alone raises the perplexity by at least this fraction.
    #[arg(long, default_value_t = EFFECTIVE_DEPTH_THRESHOLD)]
    removal_threshold: f64,
    /// Skip the diagnostics of each scheme's final model in the report (they take a few forward
    /// passes per layer).
    #[arg(long)]
    no_diagnostics: bool,
    /// The scheme every other one is compared with, seed by seed, in the report's paired table
    /// (one of `--schemes`, with `+<init>` on an init axis: `pre-ln+scaled`; at each depth on a
    /// depth axis); default: `pre-ln` when the sweep has it.
    #[arg(long)]
    baseline: Option<String>,
}

fn main() -> ExitCode {
    console::reuse_freed_memory();
    let defaults = TrainConfig {
        output: OutputSettings { out: "runs/sweep".into(), ..Default::default() },
        ..TrainConfig::default()
    };
    // A sweep's --layers is a list of depths, an axis (one depth: every run at that depth).
    let command = cli::augment(Args::command(), &defaults).mut_arg("layers", |arg| {
        arg.value_parser(clap::value_parser!(String)).value_name("DEPTHS").help(
            "Number of layers: one depth for every run, or a comma-separated list (`4,8,16`), an axis: every \
             (depth, scheme, seed) trains, and the report adds loss, variance growth and effective depth against depth",
        )
    });
    let mut matches = cli::matches(command);
    let depths = matches.remove_one::<String>("layers");
    console::exit_code(run(&matches, depths.as_deref(), defaults))
}

fn run(matches: &clap::ArgMatches, depths: Option<&str>, defaults: TrainConfig) -> Result<(), Error> {
    let args = Args::from_arg_matches(matches).unwrap_or_else(|e| e.exit());
    let lists =
        SweepLists { schemes: &args.schemes, seeds: args.seeds.as_deref(), inits: args.inits.as_deref(), depths };
    let sweep = cli::sweep_settings(matches, args.config.as_deref(), defaults, lists)?;
    check_removal_threshold(args.removal_threshold)?;
    cli::say_auto_device(&sweep.config.device);
    let baseline = parse_baseline(&sweep, args.baseline.as_deref())?;
    if let Some(note) = cli::shared_init_note(&sweep) {
        outln!("{note}");
    }
    // The report replaces an earlier one at the end: anything else in its folder is found now.
    let report_dir = sweep_report_dir(&sweep.config.output.out);
    check_replaceable_dir(&report_dir, SWEEP_RESULTS).map_err(|e| Error::file(&report_dir, e))?;
    // `run` checks every pair's settings and the directory before the first step.
    let record = sweep.run(|event| match event {
        SweepEvent::Starting { pair, index, total, action, eta_seconds } => {
            let eta = eta_seconds.map(|s| format!(", about {:.0} min left", s / 60.0)).unwrap_or_default();
            let verb = match action {
                PairAction::Train => "training",
                PairAction::Resume => "resuming",
                PairAction::Measure => "measuring the finished",
            };
            outln!("\n=== sweep {index}/{total}: {verb} {} seed {}{eta} ===", pair.group(), pair.seed);
        }
        SweepEvent::Skipped { pair, outcome } => outln!("sweep: {} already {}", pair.key(), describe(outcome)),
        SweepEvent::Training { event, .. } => console::print_event(&event, event.is_notice()),
        SweepEvent::Done { pair, outcome } => outln!("sweep: {} {}", pair.key(), describe(outcome)),
    })?;
    let (curves, left_out) = sweep_loss_curves(&sweep, &record);
    for warning in left_out {
        errln!("warning: {warning}");
    }
    let diagnostics = if args.no_diagnostics {
        Vec::new()
    } else {
        sweep_diagnostics(&sweep, &record, |progress| match progress {
            DiagnosticsProgress::Analysing(pair) => outln!("diagnostics of {pair}"),
            DiagnosticsProgress::Unreadable { pair, error } => errln!("warning: no diagnostics from {pair}: {error}"),
        })?
    };
    let results = write_sweep_report(&report_dir, &record, &curves, &diagnostics, &baseline, args.removal_threshold)
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
    let diverged = record.outcomes.values().filter(|o| matches!(o, PairOutcome::Diverged { .. })).count();
    if diverged > 0 {
        errln!(
            "note: {diverged} pair(s) diverged. A sweep's pairs share one set of settings, so a rerun here with another \
             --lr or --clip-grad-norm is refused: give those with a new --out (a diverged pair is not retrained here; \
             delete its folder to retry it with the same settings)"
        );
    }
    Ok(())
}

fn describe(outcome: &PairOutcome) -> String {
    match outcome {
        PairOutcome::Finished { valid_loss } => format!("finished: validation loss {valid_loss:.4}"),
        PairOutcome::Diverged { reason } => format!("diverged: {reason}"),
    }
}
