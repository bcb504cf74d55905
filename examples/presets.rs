//! Lists the model presets with their sizes, or writes them as JSON config files.
//!
//! ```bash
//! cargo run --example presets                      # the table
//! cargo run --example presets -- --write configs/models
//! ```

use layernorm_scaling::LlamaConfig;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let write_dir = match args.as_slice() {
        [] => None,
        [flag, dir] if flag == "--write" => Some(std::path::PathBuf::from(dir)),
        _ => {
            eprintln!("usage: presets [--write DIR]");
            std::process::exit(2);
        }
    };
    println!("{:>6} {:>7} {:>7} {:>7} {:>6} {:>15}", "preset", "d_model", "d_ff", "layers", "heads", "parameters");
    for name in LlamaConfig::preset_names() {
        let config = LlamaConfig::preset(name).expect("listed presets exist");
        println!(
            "{name:>6} {:>7} {:>7} {:>7} {:>6} {:>15}",
            config.d_model,
            config.d_ff,
            config.n_layers,
            config.n_heads,
            config.num_params()
        );
        if let Some(dir) = &write_dir {
            if let Err(err) = config.to_file(dir.join(format!("{name}.json"))) {
                eprintln!("error: {err}");
                std::process::exit(1);
            }
        }
    }
}
