//! Lists the model presets with their sizes, or writes them as JSON config files.
//!
//! ```bash
//! cargo run --example presets                      # the table
//! cargo run --example presets -- --write configs/models
//! ```

use std::process::ExitCode;

use layernorm_scaling::{errln, outln, Error, LlamaConfig};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let write_dir = match args.as_slice() {
        [] => None,
        [flag, dir] if flag == "--write" => Some(std::path::PathBuf::from(dir)),
        _ => {
            errln!("error: usage: presets [--write DIR]");
            return ExitCode::FAILURE;
        }
    };
    layernorm_scaling::console::exit_code(run(write_dir.as_deref()))
}

/// Prints the table; with `write_dir`, writes `<name>.json` there (the folder made if missing).
fn run(write_dir: Option<&std::path::Path>) -> Result<(), Error> {
    if let Some(dir) = write_dir {
        std::fs::create_dir_all(dir).map_err(|e| Error::file(dir, format!("cannot make the folder: {e}")))?;
    }
    outln!("{:>6} {:>7} {:>7} {:>7} {:>6} {:>15}", "preset", "d_model", "d_ff", "layers", "heads", "parameters");
    for name in LlamaConfig::preset_names() {
        let config = LlamaConfig::preset(name)?;
        outln!(
            "{name:>6} {:>7} {:>7} {:>7} {:>6} {:>15}",
            config.d_model,
            config.d_ff,
            config.n_layers,
            config.n_heads,
            config.num_params()
        );
        if let Some(dir) = write_dir {
            config.to_file(dir.join(format!("{name}.json")))?;
        }
    }
    Ok(())
}
