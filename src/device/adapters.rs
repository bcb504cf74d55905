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
    use burn::backend::wgpu::wgpu;
    let backends = wgpu::Backends::PRIMARY;
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

/// Why a wgpu device (`software`: the `wgpu-cpu` one) cannot be used here, if it cannot: with
/// no such adapter on Vulkan, Metal or DirectX 12, wgpu falls back to OpenGL, where Burn's
/// autotuned kernels wait on each other for ever (seen on Mesa's llvmpipe), so the program would
/// hang rather than fail.
pub(super) fn wgpu_fallback_problem(software: bool) -> Option<String> {
    let adapters = wgpu_adapter_infos();
    let found = if software { adapters.iter().any(|(_, software)| *software) } else { !adapters.is_empty() };
    let (missing, driver) = if software {
        ("no software adapter (Mesa's lavapipe)", "Mesa's Vulkan driver")
    } else {
        ("no adapter", "a Vulkan driver: your GPU's, or Mesa's for the CPU")
    };
    (!found).then(|| {
        format!(
            "wgpu finds {missing} on Vulkan, Metal or DirectX 12, and would fall back to OpenGL, on which Burn's \
             kernels hang; install {driver} (`apt-get install mesa-vulkan-drivers libvulkan1` on Debian or \
             Ubuntu), or use --device flex"
        )
    })
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
