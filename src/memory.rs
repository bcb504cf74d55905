//! How much memory the machine has left, so that work which cannot fit is refused with an error
//! before it is allocated (a failed allocation aborts the process, it cannot be caught).

use burn::tensor::Device;

/// Bytes of memory the machine can still give to new allocations (Linux `MemAvailable` of
/// `/proc/meminfo`), or `None` where that cannot be read (then no check should be made).
pub fn available_memory_bytes() -> Option<u64> {
    mem_available(&std::fs::read_to_string("/proc/meminfo").ok()?)
}

/// The peak resident memory of this process so far (Linux `VmHWM` of `/proc/self/status`), in
/// bytes, or `None` where that cannot be read.
pub fn peak_resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|line| line.starts_with("VmHWM:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// The `MemAvailable` of a `/proc/meminfo` text, in bytes.
pub fn mem_available(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|line| line.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// Whether `device` allocates its tensors in the machine's memory (flex, ndarray, LibTorch CPU,
/// wgpu on a CPU adapter), with or without autodiff; GPUs have memory of their own.
#[allow(deprecated)]
pub fn uses_host_memory(device: &Device) -> bool {
    let host: Vec<Device> = vec![
        #[cfg(feature = "flex")]
        Device::flex(),
        #[cfg(feature = "ndarray")]
        Device::ndarray(),
        #[cfg(feature = "tch")]
        Device::libtorch(),
        #[cfg(feature = "wgpu")]
        Device::wgpu(burn::tensor::DeviceKind::Cpu),
    ];
    // Device equality compares the hardware and ignores autodiff.
    host.contains(device)
}

/// A byte count for people: `512 B`, `3.2 GiB`, `1.5 TiB`.
pub fn format_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}
