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
