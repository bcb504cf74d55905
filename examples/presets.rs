//! Lists the model presets with their sizes, or writes them as JSON config files.
//!
//! ```bash
//! cargo run --example presets                      # the table
//! cargo run --example presets -- --write configs/models
//! ```

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser};
use layernorm_scaling::console::write_result;
use layernorm_scaling::{cli, Error, LlamaConfig};

/// The model presets with their sizes (the table is printed on standard output).
#[derive(Parser, Debug)]
#[command(name = "presets")]
struct Args {
    /// Also write each preset as `<name>.json` into this folder (made if missing).
    #[arg(long, value_name = "DIR")]
    write: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::from_arg_matches(&cli::matches(Args::command())).unwrap_or_else(|e| e.exit());
    layernorm_scaling::console::exit_code(run(args.write.as_deref()))
}

/// Prints the table; with `write_dir`, writes `<name>.json` there (the folder made if missing).
fn run(write_dir: Option<&std::path::Path>) -> Result<(), Error> {
    if let Some(dir) = write_dir {
        if let Some(file) = dir.ancestors().find(|a| a.exists() && !a.is_dir()) {
            return Err(Error::file(
                dir,
                format!("cannot make the folder: {} is a file, not a folder", file.display()),
            ));
        }
        std::fs::create_dir_all(dir).map_err(|e| Error::file(dir, format!("cannot make the folder: {e}")))?;
    }
    write_result(format_args!(
        "{:>6} {:>7} {:>7} {:>7} {:>6} {:>15}",
        "preset", "d_model", "d_ff", "layers", "heads", "parameters"
    ))?;
    for name in LlamaConfig::preset_names() {
        let config = LlamaConfig::preset(name)?;
        write_result(format_args!(
            "{name:>6} {:>7} {:>7} {:>7} {:>6} {:>15}",
            config.d_model,
            config.d_ff,
            config.n_layers,
            config.n_heads,
            config.num_params()
        ))?;
        if let Some(dir) = write_dir {
            config.to_file(dir.join(format!("{name}.json")))?;
        }
    }
    Ok(())
}
