//! Timing helpers shared by the benches: warm up, then report the median of several runs.

use std::time::Instant;

use burn::tensor::Device;
use layernorm_scaling::parse_device;

/// The device named by `LNS_DEVICE` (default `auto`); exits with a message when it is invalid.
pub fn bench_device() -> Device {
    let spec = std::env::var("LNS_DEVICE").unwrap_or_else(|_| "auto".into());
    #[cfg(feature = "cli")]
    layernorm_scaling::cli::say_auto_device(&spec);
    parse_device(&spec).unwrap_or_else(|err| {
        eprintln!("error: LNS_DEVICE={spec}: {err}");
        std::process::exit(2)
    })
}

/// Median wall time in milliseconds of `runs` calls of `f` after `warmup` calls; `f` must finish
/// its device work (e.g. call `device.sync()`) before returning.
pub fn median_ms(warmup: usize, runs: usize, mut f: impl FnMut()) -> f64 {
    for _ in 0..warmup {
        f();
    }
    let mut times: Vec<f64> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed().as_secs_f64() * 1e3
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[times.len() / 2]
}
