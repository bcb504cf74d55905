//! Per-kernel device times from CubeCL's profiling log: where a step's time goes on a GPU.
//!
//! With `CUBECL_DEBUG_OPTION=profile` and `CUBECL_DEBUG_LOG=<file>`, CubeCL waits for each kernel
//! and writes one line per launch, `| 1.488808ms | PrngKernel | NormalFamily_77768d1a`: the
//! device time, the kernel's name, its type arguments, and a hash of its compiled form. The log
//! also holds each kernel's source and summary tables; only the launch lines are read here.

use std::path::{Path, PathBuf};

use burn::tensor::Device;
use serde::{Deserialize, Serialize};

/// The variable that turns CubeCL's profiling on (`profile`, or `profile-full`).
pub const PROFILE_OPTION: &str = "CUBECL_DEBUG_OPTION";
/// The variable that names the file CubeCL logs to.
pub const PROFILE_LOG: &str = "CUBECL_DEBUG_LOG";

/// Whether `device` runs CubeCL kernels (wgpu, Vulkan, CUDA): the devices CubeCL's profiling times.
pub fn runs_cubecl_kernels(device: &Device) -> bool {
    #[cfg(any(feature = "wgpu", feature = "cuda"))]
    return matches!(device.as_dispatch(), burn::backend::DispatchDevice::Cube(_));
    #[cfg(not(any(feature = "wgpu", feature = "cuda")))]
    return {
        let _ = device;
        false
    };
}

/// One kernel's launches over a profiled run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KernelTime {
    /// The kernel (`RmsNormForwardKernel`, `MatmulEntry`, `KernelBinop MulOp`, ...).
    pub name: String,
    /// Device time of all its launches, in milliseconds.
    pub milliseconds: f64,
    /// Launches.
    pub launches: usize,
}

/// The file CubeCL writes its profiling log to, when profiling is on in this process:
/// [`PROFILE_OPTION`] `profile` (or `profile-full`) with [`PROFILE_LOG`] naming a file.
pub fn profiling_log() -> Option<PathBuf> {
    let option = std::env::var(PROFILE_OPTION).ok()?;
    let log = std::env::var(PROFILE_LOG).ok()?;
    // CubeCL's names for the console and for "off".
    let console = ["stdout", "stderr", "0", "1", "true", "false", ""];
    (option.starts_with("profile") && !console.contains(&log.as_str())).then(|| PathBuf::from(log))
}

/// The log's length now: where the lines logged from now on start (CubeCL flushes each line).
pub fn log_position(log: &Path) -> u64 {
    std::fs::metadata(log).map_or(0, |m| m.len())
}

/// The kernels launched since `position` of `log` ([`log_position`]), the longest first.
pub fn kernels_since(log: &Path, position: u64) -> std::io::Result<Vec<KernelTime>> {
    let bytes = std::fs::read(log)?;
    let since = bytes.get(position as usize..).unwrap_or_default();
    Ok(kernel_times(&String::from_utf8_lossy(since)))
}

/// The kernels of a CubeCL profiling log, the longest first. A launch line names the kernel and,
/// when it has one short argument (`KernelBinop | MulOp_...`), that argument too; the long
/// argument lists of generic kernels (the matmul's) are left out, so that their variants add up.
pub fn kernel_times(log: &str) -> Vec<KernelTime> {
    let mut kernels: Vec<KernelTime> = Vec::new();
    for (name, milliseconds) in log.lines().filter_map(launch) {
        match kernels.iter_mut().find(|k| k.name == name) {
            Some(kernel) => {
                kernel.milliseconds += milliseconds;
                kernel.launches += 1;
            }
            None => kernels.push(KernelTime { name, milliseconds, launches: 1 }),
        }
    }
    kernels.sort_by(|a, b| b.milliseconds.total_cmp(&a.milliseconds).then_with(|| a.name.cmp(&b.name)));
    kernels
}

/// `(kernel, milliseconds)` of a launch line; `None` for any other line.
fn launch(line: &str) -> Option<(String, f64)> {
    let fields: Vec<&str> = line.strip_prefix('|')?.split('|').map(str::trim).collect();
    let milliseconds = duration_ms(fields.first()?)?;
    let without_hash = |field: &str| match field.rsplit_once('_') {
        Some((name, hash)) if hash.len() == 8 && hash.bytes().all(|b| b.is_ascii_hexdigit()) => name.to_string(),
        _ => field.to_string(),
    };
    let name = match &fields[1..] {
        [kernel] if !kernel.is_empty() => without_hash(kernel),
        [kernel, argument] if !kernel.is_empty() => format!("{kernel} {}", without_hash(argument)),
        [kernel, ..] if !kernel.is_empty() => kernel.to_string(),
        _ => return None,
    };
    Some((name, milliseconds))
}

/// `1.5ms`, `259.105µs`, `5.1s`, `800ns` in milliseconds.
fn duration_ms(text: &str) -> Option<f64> {
    let split = text.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let value: f64 = text[..split].parse().ok()?;
    let scale = match &text[split..] {
        "s" => 1e3,
        "ms" => 1.0,
        "µs" | "us" => 1e-3,
        "ns" => 1e-6,
        _ => return None,
    };
    Some(value * scale)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lines as CubeCL 0.11 writes them, with a summary row and source lines that must be skipped.
    const LOG: &str = "\
[START_KERNEL_COMPILATION]
name: layernorm_scaling::fused::cube::rms_norm::rms_norm_forward_kernel::RmsNormForwardKernel
let v5 = u32(0);
| 2.5ms      | RmsNormForwardKernel_8dbf1be6
| 500µs      | KernelBinop | MulOp_269b426d
| 1.5ms      | KernelBinop | MulOp_48b3482d
| 250µs      | KernelBinop | AddOp_087b46b7
| 1s         | MatmulEntry | TensorArgs | DynamicScalar | __Lhs | SimpleMatmulFamily_0a1b2c3d
| 3ms        | MatmulEntry | TensorArgs | DynamicScalar | __Rhs | DoubleBufferingMatmulFamily_11112222
| 800ns      | RmsNormForwardKernel_deadbeef
| MatmulEntry | TensorArgs                 | 1.003s      | 2            | 90 % |
| Total                                   | 1.1s        | 7            | 100 % |
";

    #[test]
    fn launch_lines_add_up_per_kernel_and_nothing_else_counts() {
        let kernels = kernel_times(LOG);
        let summary: Vec<(&str, usize)> = kernels.iter().map(|k| (k.name.as_str(), k.launches)).collect();
        assert_eq!(
            summary,
            [("MatmulEntry", 2), ("RmsNormForwardKernel", 2), ("KernelBinop MulOp", 2), ("KernelBinop AddOp", 1)]
        );
        let ms: Vec<f64> = kernels.iter().map(|k| k.milliseconds).collect();
        let expected = [1003.0, 2.5008, 2.0, 0.25];
        assert!(ms.iter().zip(expected).all(|(a, b)| (a - b).abs() < 1e-9), "{ms:?}");
    }

    #[test]
    fn durations_in_every_unit_cubecl_writes() {
        let close = |text: &str, ms: f64| duration_ms(text).is_some_and(|d| (d - ms).abs() <= 1e-12 * ms);
        assert!(close("5.137104488s", 5137.104488));
        assert!(close("1.5ms", 1.5));
        assert!(close("259.105µs", 0.259105));
        assert!(close("12ns", 1.2e-5));
        assert_eq!(duration_ms("Total"), None);
        assert_eq!(duration_ms("3 parsecs"), None);
    }
}
