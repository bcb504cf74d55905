//! Choosing the backend at run time: a device string becomes a Burn [`Device`].
//!
//! The model code never names a backend; cargo features decide which backends are compiled in
//! and [`parse_device`] picks one of them.
//!
//! | string | backend | cargo feature |
//! |---|---|---|
//! | `auto` | a real GPU where one is compiled in and present, else the CPU backend ([`choose_auto`]; `BURN_DEVICE` overrides) | any |
//! | `flex` | pure-Rust CPU | `flex` (default) |
//! | `ndarray` | ndarray CPU (deprecated in Burn) | `ndarray` |
//! | `wgpu`, `wgpu:N` | wgpu's default adapter, or discrete GPU N | `wgpu` |
//! | `wgpu-cpu` | wgpu on a software Vulkan adapter (Mesa lavapipe) | `wgpu` |
//! | `vulkan` | wgpu pinned to Vulkan (SPIR-V) | `vulkan` |
//! | `metal` | wgpu pinned to Metal | `metal` |
//! | `cuda`, `cuda:N` | CUDA GPU N (default 0) | `cuda` |
//! | `tch`, `tch-cuda:N` | LibTorch CPU, or LibTorch CUDA GPU N | `tch` |

mod adapters;
mod auto;
mod gpu;

use burn::tensor::{Device, FloatDType};

pub use auto::{auto_choice, burn_device_for_auto, choose_auto, AdapterKind, AutoChoice};
pub use gpu::{gpu_name, known_peak_tflops, nvidia_gpu_names, KNOWN_PEAK_TFLOPS};

use crate::config_error::ConfigError;

/// Every device string, with the cargo feature it needs.
pub const DEVICE_NAMES: [(&str, &str); 10] = [
    ("auto", "any backend"),
    ("flex", "flex"),
    ("ndarray", "ndarray"),
    ("wgpu", "wgpu"),
    ("wgpu-cpu", "wgpu"),
    ("vulkan", "vulkan"),
    ("metal", "metal"),
    ("cuda", "cuda"),
    ("tch", "tch"),
    ("tch-cuda", "tch"),
];

/// The backend features this build was compiled with.
pub fn compiled_backends() -> Vec<&'static str> {
    [
        ("flex", cfg!(feature = "flex")),
        ("ndarray", cfg!(feature = "ndarray")),
        ("wgpu", cfg!(feature = "wgpu")),
        ("vulkan", cfg!(feature = "vulkan")),
        ("metal", cfg!(feature = "metal")),
        ("cuda", cfg!(feature = "cuda")),
        ("tch", cfg!(feature = "tch")),
    ]
    .into_iter()
    .filter_map(|(name, on)| on.then_some(name))
    .collect()
}

/// Turns a device string (see the module docs) into a [`Device`].
///
/// A backend whose feature is not compiled in is an error that names the feature to enable; a bad
/// `BURN_DEVICE` (read for `auto`) is an error that names the variable. What `auto` picks, and
/// why, is [`auto_choice`] (a program says it: `cli::say_auto_device`).
///
/// ```
/// let device = layernorm_scaling::parse_device("flex").unwrap();
/// let err = layernorm_scaling::parse_device("cudaa").unwrap_err();
/// assert!(err.to_string().contains("unknown device"));
/// ```
pub fn parse_device(spec: &str) -> Result<Device, ConfigError> {
    if let Some(problem) = burn_device_problem() {
        return Err(ConfigError::Conflict(problem));
    }
    let spec = spec.trim().to_ascii_lowercase();
    if spec == "auto" {
        return match burn_device_for_auto() {
            Some(name) => parse_device(&name).map_err(|error| {
                ConfigError::Conflict(format!(
                    "the environment variable BURN_DEVICE={name}, which picks the device `auto` stands for: \
                     {error}; set BURN_DEVICE to a valid device, unset it, or give the device explicitly"
                ))
            }),
            None => {
                let choice = auto_choice().ok_or(ConfigError::NoBackend)?;
                build_device(choice.device, 0).ok_or(ConfigError::NoBackend)
            }
        };
    }
    let (name, index) = match spec.split_once(':') {
        Some((name, index)) => {
            let index = index.parse::<usize>().map_err(|_| ConfigError::Unknown {
                what: "device index",
                name: spec.clone(),
                expected: "a number after the colon, e.g. `cuda:0`".into(),
            })?;
            (name, Some(index))
        }
        None => (spec.as_str(), None),
    };
    let Some(&(_, feature)) = DEVICE_NAMES.iter().find(|(known, _)| *known == name) else {
        return Err(ConfigError::Unknown {
            what: "device",
            name: spec.clone(),
            expected: "auto, flex, ndarray, wgpu, wgpu:N, wgpu-cpu, vulkan, metal, cuda, cuda:N, tch, tch-cuda:N"
                .into(),
        });
    };
    let takes_index = matches!(name, "wgpu" | "cuda" | "tch-cuda");
    if index.is_some() && !takes_index {
        return Err(ConfigError::Unknown {
            what: "device",
            name: spec.clone(),
            expected: "an index only after wgpu, cuda or tch-cuda".into(),
        });
    }
    let index = index.unwrap_or(0);
    let device = build_device(name, index).ok_or_else(|| ConfigError::NotCompiled {
        device: spec.clone(),
        feature,
        compiled: compiled_backends().join(", "),
    })?;
    // CUDA's libraries stop the whole program (a panic) at the first tensor on a missing GPU;
    // wgpu panics without an adapter of the kind asked for, and hangs on OpenGL's software renderer.
    let problem = match name {
        "wgpu" if index == 0 => adapters::wgpu_device_problem(adapters::WgpuKind::Default),
        "wgpu" => adapters::wgpu_device_problem(adapters::WgpuKind::Discrete(index)),
        "wgpu-cpu" => adapters::wgpu_device_problem(adapters::WgpuKind::Software),
        "cuda" => gpu::cuda_problem_here(index),
        #[cfg(feature = "tch")]
        "tch-cuda" => gpu::tch_cuda_problem(index),
        _ => None,
    };
    match problem {
        Some(message) => Err(ConfigError::Unavailable { device: spec, message }),
        None => Ok(device),
    }
}

/// Why the `BURN_DEVICE` environment variable would stop the program, if it would: Burn's default
/// device (burn-dispatch's `Device::default()`, which training calls whatever device it runs on)
/// panics on a value that is not one of its backends' names compiled into this build
/// (`wgpu:1`, an empty string, or `cuda` in a CPU build), even when `--device` names another.
pub(crate) fn burn_device_problem() -> Option<String> {
    let value = std::env::var("BURN_DEVICE").ok()?;
    // Burn's names for its backends are those of this crate's backend features.
    let accepted = compiled_backends();
    if accepted.contains(&value.to_lowercase().as_str()) {
        return None;
    }
    let shown = if value.is_empty() { "(empty)".to_string() } else { value };
    Some(format!(
        "the environment variable BURN_DEVICE={shown} is read by Burn itself (its default device, which training \
         uses whatever --device says), and Burn stops on it: this build takes one of {} there (no index, no \
         `tch-cuda`); set it to one of those, or unset it (`unset BURN_DEVICE`) and give the device with --device",
        accepted.join(", ")
    ))
}

/// The device of a known name, or `None` when its backend is not compiled in.
#[allow(unused_variables, deprecated)]
fn build_device(name: &str, index: usize) -> Option<Device> {
    #[cfg(feature = "wgpu")]
    use burn::tensor::DeviceKind;
    match name {
        #[cfg(feature = "flex")]
        "flex" => Some(Device::flex()),
        #[cfg(feature = "ndarray")]
        "ndarray" => Some(Device::ndarray()),
        #[cfg(feature = "wgpu")]
        "wgpu" if index == 0 => Some(Device::wgpu(DeviceKind::DefaultDevice)),
        #[cfg(feature = "wgpu")]
        "wgpu" => Some(Device::wgpu(DeviceKind::DiscreteGpu(index))),
        #[cfg(feature = "wgpu")]
        "wgpu-cpu" => Some(Device::wgpu(DeviceKind::Cpu)),
        #[cfg(feature = "vulkan")]
        "vulkan" => Some(Device::vulkan(DeviceKind::DefaultDevice)),
        #[cfg(feature = "metal")]
        "metal" => Some(Device::metal(DeviceKind::DefaultDevice)),
        #[cfg(feature = "cuda")]
        "cuda" => Some(Device::cuda(index)),
        #[cfg(feature = "tch")]
        "tch" => Some(Device::libtorch()),
        #[cfg(feature = "tch")]
        "tch-cuda" => Some(Device::libtorch_cuda(index)),
        _ => None,
    }
}

/// Parses a comma-separated list of devices (`cuda:0,cuda:1`) for data-parallel training.
pub fn parse_devices(spec: &str) -> Result<Vec<Device>, ConfigError> {
    let devices = spec.split(',').map(parse_device).collect::<Result<Vec<_>, _>>()?;
    let auto = spec.split(',').filter(|s| s.trim().eq_ignore_ascii_case("auto")).count();
    if devices.len() > 1 && auto > 0 {
        return Err(ConfigError::Unknown {
            what: "device list",
            name: spec.to_string(),
            expected: "explicit devices such as cuda:0,cuda:1 (`auto` only alone)".into(),
        });
    }
    Ok(devices)
}

/// The floating-point precision of training: of the whole device, or mixed (f32 weights,
/// half-precision products).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "kebab-case")]
pub enum Precision {
    /// 32-bit floats (the default).
    #[default]
    F32,
    /// bfloat16 for every float tensor, as the paper's "pure bf16" training.
    Bf16,
    /// Mixed precision: f32 weights, optimiser state, residual stream, norms and loss; the matrix
    /// products, attention and the LM head in bfloat16 (accumulating in f32 where the kernels do).
    Bf16Mixed,
    /// As `bf16-mixed` in IEEE half precision, with the loss scaled dynamically so that small
    /// gradients do not vanish in f16 (a step whose gradients overflow is skipped).
    F16Mixed,
}

impl Precision {
    /// Every precision, in the order the bench measures them.
    pub const ALL: [Precision; 4] = [Precision::F32, Precision::Bf16, Precision::Bf16Mixed, Precision::F16Mixed];

    /// The name the command line and config files use (`f32`, `bf16`, `bf16-mixed`, `f16-mixed`).
    pub fn name(self) -> &'static str {
        match self {
            Precision::F32 => "f32",
            Precision::Bf16 => "bf16",
            Precision::Bf16Mixed => "bf16-mixed",
            Precision::F16Mixed => "f16-mixed",
        }
    }

    /// The device's default float type: bf16 for whole-device bf16, else f32.
    pub fn device_dtype(self) -> FloatDType {
        match self {
            Precision::Bf16 => FloatDType::BF16,
            _ => FloatDType::F32,
        }
    }

    /// The half type the products compute in under mixed precision, `None` otherwise.
    pub fn half_compute(self) -> Option<FloatDType> {
        match self {
            Precision::Bf16Mixed => Some(FloatDType::BF16),
            Precision::F16Mixed => Some(FloatDType::F16),
            _ => None,
        }
    }

    /// Whether the loss is scaled (f16's narrow range).
    pub fn scales_loss(self) -> bool {
        self == Precision::F16Mixed
    }
}

impl std::fmt::Display for Precision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Sets the device's default float type and the process's mixed precision
/// ([`set_half_compute`](crate::fused::set_half_compute)). Call it before creating any tensor on
/// the device: a device's float type cannot change once it has tensors.
///
/// A precision whose float types the device cannot compute in is refused with a clear error.
pub fn set_precision(device: &mut Device, precision: Precision) -> Result<(), ConfigError> {
    let name = format!("{device:?}");
    let refused =
        |message: String| ConfigError::Precision { device: name.clone(), precision: precision.name().into(), message };
    let supports = |precision: Precision| {
        [Some(precision.device_dtype()), precision.half_compute()]
            .into_iter()
            .flatten()
            .all(|t| device.supports_dtype(t))
    };
    if !supports(precision) {
        let others: Vec<&str> = Precision::ALL
            .into_iter()
            .filter(|&other| other != precision && supports(other))
            .map(Precision::name)
            .collect();
        return Err(refused(format!(
            "use --precision {} (what this device computes in), or a device that has {}",
            others.join(" or "),
            if precision == Precision::F16Mixed { "f16" } else { "bf16" }
        )));
    }
    // A device already in this float type (f32, its default, for the mixed precisions) is left as
    // it is: configuring it again is an error once it has tensors.
    if device.settings().float_dtype != precision.device_dtype() {
        device.configure(precision.device_dtype()).map_err(|e| refused(e.to_string()))?;
    }
    crate::fused::set_half_compute(precision.half_compute());
    Ok(())
}
