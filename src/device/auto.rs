//! What `--device auto` stands for: a real GPU where a GPU backend is compiled in and the machine
//! has one, otherwise the CPU backend. A software Vulkan adapter (Mesa's lavapipe, which wgpu
//! offers on a machine without a GPU) is never picked while a CPU backend is compiled in: it
//! trains many times slower than flex. `wgpu-cpu` names it explicitly.

use super::adapters::wgpu_adapter_infos;

/// A graphics adapter as [`choose_auto`] sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AdapterKind {
    /// A GPU: discrete, integrated or virtual.
    Gpu,
    /// A software rasteriser on the CPU (lavapipe, llvmpipe, WARP).
    Software,
}

/// The device `auto` picks, and why (one line, printed by the programs first).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AutoChoice {
    /// A device name of [`DEVICE_NAMES`](super::DEVICE_NAMES).
    pub device: &'static str,
    /// Why this one, and what was passed over.
    pub reason: String,
}

/// What `auto` picks from the backends `compiled` ([`compiled_backends`](super::compiled_backends)),
/// the wgpu `adapters` the machine has, and whether it has an NVIDIA GPU. `None` when no backend is
/// compiled in.
///
/// The order: CUDA on an NVIDIA GPU; wgpu (pinned to Vulkan or Metal where those are compiled in)
/// on a GPU adapter; then the CPU backends, flex first (its fused kernels), LibTorch, ndarray. A
/// software adapter is the last resort, for a build with no CPU backend.
pub fn choose_auto(compiled: &[&str], adapters: &[AdapterKind], nvidia_gpu: bool) -> Option<AutoChoice> {
    let has = |name: &str| compiled.contains(&name);
    let choice = |device: &'static str, reason: String| Some(AutoChoice { device, reason });
    if has("cuda") && nvidia_gpu {
        return choice("cuda", "an NVIDIA GPU, and the cuda backend is compiled in".into());
    }
    let wgpu = ["vulkan", "metal", "wgpu"].into_iter().find(|name| has(name));
    if let Some(wgpu) = wgpu.filter(|_| adapters.contains(&AdapterKind::Gpu)) {
        return choice(wgpu, format!("a GPU adapter, and the {wgpu} backend is compiled in"));
    }
    let mut passed_over = Vec::new();
    if has("cuda") {
        passed_over.push("cuda is compiled in, but this machine has no NVIDIA GPU".to_string());
    }
    if let Some(wgpu) = wgpu {
        passed_over.push(if adapters.is_empty() {
            format!("{wgpu} is compiled in, but it finds no GPU adapter")
        } else {
            format!(
                "{wgpu} is compiled in, but its only adapter is a software one on the CPU, many times slower; \
                 --device wgpu-cpu uses it anyway"
            )
        });
    }
    let why = |cpu: &str| match passed_over.is_empty() {
        true => format!("the {cpu} CPU backend: no GPU backend is compiled in"),
        false => format!("the {cpu} CPU backend: {}", passed_over.join("; ")),
    };
    for cpu in ["flex", "tch", "ndarray"] {
        if has(cpu) {
            return choice(cpu, why(cpu));
        }
    }
    if wgpu.is_some() && adapters.contains(&AdapterKind::Software) {
        return choice(
            "wgpu-cpu",
            "wgpu's software adapter on the CPU, the only device this build has: slow; build with the flex \
             feature for the CPU backend"
                .into(),
        );
    }
    if let Some(wgpu) = wgpu {
        return choice(wgpu, format!("{wgpu} is the only backend compiled in, though it finds no GPU adapter"));
    }
    has("cuda").then(|| AutoChoice {
        device: "cuda",
        reason: "cuda is the only backend compiled in, though no NVIDIA GPU was found".into(),
    })
}

/// [`choose_auto`] on this machine: the backends compiled in, the adapters wgpu finds (asked only
/// where a wgpu backend is compiled in) and the NVIDIA driver's list of GPUs. Found once per
/// process (listing wgpu's adapters starts a Vulkan instance), however often a program and the
/// library ask. Nothing is printed: a program says what was picked (`cli::say_auto_device`).
pub fn auto_choice() -> Option<AutoChoice> {
    static CHOICE: std::sync::OnceLock<Option<AutoChoice>> = std::sync::OnceLock::new();
    CHOICE
        .get_or_init(|| {
            let compiled = super::compiled_backends();
            // A GPU CUDA can use: present, and not hidden by CUDA_VISIBLE_DEVICES.
            let nvidia_gpu = super::gpu::cuda_problem_here(0).is_none();
            choose_auto(&compiled, &wgpu_adapters(), nvidia_gpu)
        })
        .clone()
}

/// The device that `BURN_DEVICE` names for `auto`, when it names one (set, not empty, not
/// `auto` itself); [`auto_choice`] decides otherwise.
pub fn burn_device_for_auto() -> Option<String> {
    std::env::var("BURN_DEVICE").ok().map(|name| name.trim().to_string()).filter(|n| !n.is_empty() && n != "auto")
}

/// The kinds of the adapters wgpu finds ([`wgpu_adapter_infos`]).
fn wgpu_adapters() -> Vec<AdapterKind> {
    wgpu_adapter_infos()
        .into_iter()
        .map(|(_, software)| if software { AdapterKind::Software } else { AdapterKind::Gpu })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::{choose_auto, AdapterKind::*};

    fn picked(compiled: &[&str], adapters: &[super::AdapterKind], nvidia: bool) -> &'static str {
        choose_auto(compiled, adapters, nvidia).unwrap().device
    }

    #[test]
    fn auto_takes_a_real_gpu_and_never_a_software_adapter_over_a_cpu_backend() {
        // The CI machine and a laptop without a GPU: lavapipe only.
        assert_eq!(picked(&["flex", "wgpu"], &[Software], false), "flex");
        assert_eq!(picked(&["flex", "wgpu", "vulkan"], &[], false), "flex");
        let reason = choose_auto(&["flex", "wgpu"], &[Software], false).unwrap().reason;
        assert!(reason.contains("software") && reason.contains("wgpu-cpu"), "{reason}");
        // A GPU: wgpu, pinned to Vulkan where that is compiled in.
        assert_eq!(picked(&["flex", "wgpu"], &[Software, Gpu], false), "wgpu");
        assert_eq!(picked(&["flex", "wgpu", "vulkan"], &[Gpu], false), "vulkan");
        // CUDA on an NVIDIA GPU comes first; without one, it is passed over and said so.
        assert_eq!(picked(&["flex", "wgpu", "cuda"], &[Gpu], true), "cuda");
        assert_eq!(picked(&["flex", "cuda"], &[], false), "flex");
        let reason = choose_auto(&["flex", "cuda"], &[], false).unwrap().reason;
        assert!(reason.contains("no NVIDIA GPU"), "{reason}");
        // CPU backends in order; the software adapter only where nothing else runs.
        assert_eq!(picked(&["ndarray", "tch"], &[Software], false), "tch");
        assert_eq!(picked(&["ndarray"], &[], false), "ndarray");
        assert_eq!(picked(&["wgpu"], &[Software], false), "wgpu-cpu");
        assert_eq!(picked(&["wgpu"], &[], false), "wgpu");
        assert!(choose_auto(&[], &[Gpu], true).is_none());
    }
}
