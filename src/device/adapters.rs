//! The graphics adapters wgpu finds on this machine, GPUs and software ones (Mesa's lavapipe):
//! what `--device auto` chooses among and what the bench names a GPU by.

/// The names of the GPU adapters wgpu finds (software ones left out).
pub(super) fn wgpu_gpu_names() -> Vec<String> {
    wgpu_adapter_infos().into_iter().filter(|(_, software)| !software).map(|(name, _)| name).collect()
}

/// Each adapter wgpu finds on Vulkan, Metal and DirectX 12, with whether it is a software one
/// (OpenGL is left out: it adds no GPU those lack, and its probe prints errors on a machine
/// without a display); none where no wgpu backend is compiled in.
#[cfg(feature = "wgpu")]
pub(super) fn wgpu_adapter_infos() -> Vec<(String, bool)> {
    adapter_infos(burn::backend::wgpu::wgpu::Backends::PRIMARY)
}

/// Each adapter of the graphics APIs `backends`, with whether it is a software one.
#[cfg(feature = "wgpu")]
fn adapter_infos(backends: burn::backend::wgpu::wgpu::Backends) -> Vec<(String, bool)> {
    use burn::backend::wgpu::wgpu;
    let instance = wgpu::Instance::new(wgpu::InstanceDescriptor {
        backends,
        ..wgpu::InstanceDescriptor::new_without_display_handle()
    });
    let adapters = ready(instance.enumerate_adapters(backends)).unwrap_or_default();
    adapters
        .iter()
        .map(|adapter| {
            let info = adapter.get_info();
            (info.name, info.device_type == wgpu::DeviceType::Cpu)
        })
        .collect()
}

#[cfg(not(feature = "wgpu"))]
pub(super) fn wgpu_adapter_infos() -> Vec<(String, bool)> {
    Vec::new()
}

/// The wgpu device a device string names: `wgpu` (the default adapter), `wgpu:N` (discrete GPU
/// `N`, N > 0) or `wgpu-cpu` (a software adapter).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum WgpuKind {
    /// `wgpu`: the default adapter.
    Default,
    /// `wgpu:N`: the `N`-th discrete GPU (0-based).
    Discrete(usize),
    /// `wgpu-cpu`: a software adapter (Mesa's lavapipe).
    Software,
}

/// Why the wgpu device `kind` cannot be used here, if it cannot. Burn's wgpu devices pin no
/// graphics API: Burn takes the first of its chain (Vulkan, DirectX 12, then OpenGL on Linux;
/// Metal on macOS) that offers a GPU, else the first that offers a software adapter. Refused:
/// no adapter at all, or none of the kind asked for on that API (Burn would panic), and OpenGL
/// with only a software renderer (llvmpipe), on which Burn's autotuned kernels wait on each
/// other for ever (seen in a training step with gdb), so the program would hang rather than fail.
pub(super) fn wgpu_device_problem(kind: WgpuKind) -> Option<String> {
    let (api, adapters) = settled_api()?;
    let install = if cfg!(target_os = "linux") {
        "install the GPU's Vulkan driver, or Mesa's for the CPU (`apt-get install mesa-vulkan-drivers libvulkan1` on \
         Debian or Ubuntu)"
    } else {
        "install the GPU's driver"
    };
    let software = |info: &(String, bool)| info.1;
    if api == "OpenGL" && adapters.iter().all(software) {
        return Some(format!(
            "wgpu finds no Vulkan, Metal or DirectX 12 adapter and would run on OpenGL's software renderer, on which \
             Burn's kernels hang; {install}, or use --device flex"
        ));
    }
    let (found, wanted) = match kind {
        WgpuKind::Default => (adapters.len(), 1),
        WgpuKind::Discrete(index) => (adapters.iter().filter(|a| !software(a)).count(), index + 1),
        WgpuKind::Software => (adapters.iter().filter(|a| software(a)).count(), 1),
    };
    if found >= wanted {
        return None;
    }
    let what = match kind {
        WgpuKind::Default => "no adapter".to_string(),
        WgpuKind::Discrete(index) => format!("{found} GPU(s), so no GPU {index}"),
        WgpuKind::Software => "no software adapter (Mesa's lavapipe)".to_string(),
    };
    Some(format!("wgpu finds {what} on {api}, the graphics API Burn settles on here; {install}, or use --device flex"))
}

/// The graphics API Burn's wgpu devices come up on, as Burn itself settles it (under its own lock
/// on the Vulkan loader), and its adapters, each with whether it is a software one: probed once a
/// process. `None` where wgpu is not compiled in.
#[cfg(feature = "wgpu")]
fn settled_api() -> Option<(&'static str, Vec<(String, bool)>)> {
    use burn::backend::wgpu::graphics::{AutoGraphicsApi, GraphicsApi};
    use burn::backend::wgpu::wgpu;
    static SETTLED: std::sync::OnceLock<(&'static str, Vec<(String, bool)>)> = std::sync::OnceLock::new();
    let settled = SETTLED.get_or_init(|| {
        let api = AutoGraphicsApi::backend();
        let name = match api {
            wgpu::Backend::Vulkan => "Vulkan",
            wgpu::Backend::Metal => "Metal",
            wgpu::Backend::Dx12 => "DirectX 12",
            wgpu::Backend::Gl => "OpenGL",
            _ => "WebGPU",
        };
        (name, adapter_infos(api.into()))
    });
    Some(settled.clone())
}

#[cfg(not(feature = "wgpu"))]
fn settled_api() -> Option<(&'static str, Vec<(String, bool)>)> {
    None
}

/// The value of `future`, polled until it is ready (wgpu's native futures are ready at once), or
/// `None` after 30 s.
#[cfg(feature = "wgpu")]
fn ready<T>(future: impl std::future::Future<Output = T>) -> Option<T> {
    let mut future = std::pin::pin!(future);
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    let started = std::time::Instant::now();
    while started.elapsed() < std::time::Duration::from_secs(30) {
        if let std::task::Poll::Ready(value) = future.as_mut().poll(&mut context) {
            return Some(value);
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    None
}
