//! How much memory the machine has left, so that work which cannot fit is refused with an error
//! before it is allocated (a failed allocation aborts the process, it cannot be caught).

use burn::tensor::{DType, Device};

/// Bytes of memory this process can still allocate, or `None` where that cannot be read (then no
/// check should be made): the least of the machine's (Linux `MemAvailable` of `/proc/meminfo`),
/// what the process's control group has left under its limit (a container's `--memory`), and
/// what its address-space limit (`ulimit -v`) has left.
pub fn available_memory_bytes() -> Option<u64> {
    let machine = std::fs::read_to_string("/proc/meminfo").ok().and_then(|text| mem_available(&text));
    [machine, cgroup_headroom(), address_space_headroom()].into_iter().flatten().min()
}

/// What the control group's memory limit leaves (cgroup v2's `memory.max` less `memory.current`,
/// or v1's `memory.limit_in_bytes` less `memory.usage_in_bytes`), when it sets one.
/// The page cache the group can drop (`inactive_file`) does not count as used.
fn cgroup_headroom() -> Option<u64> {
    let read = |path: &str| std::fs::read_to_string(path).ok()?.trim().parse::<u64>().ok();
    let stat = |path: &str, key: &str| -> u64 {
        let text = std::fs::read_to_string(path).unwrap_or_default();
        let value = text.lines().find_map(|line| line.strip_prefix(key)?.strip_prefix(' ')?.trim().parse().ok());
        value.unwrap_or(0)
    };
    let (limit, used, cache) = match read("/sys/fs/cgroup/memory.max") {
        Some(limit) => {
            (limit, read("/sys/fs/cgroup/memory.current")?, stat("/sys/fs/cgroup/memory.stat", "inactive_file"))
        }
        None => (
            read("/sys/fs/cgroup/memory/memory.limit_in_bytes")?,
            read("/sys/fs/cgroup/memory/memory.usage_in_bytes")?,
            stat("/sys/fs/cgroup/memory/memory.stat", "total_inactive_file"),
        ),
    };
    // "No limit" reads as `max` (not a number) in v2, and as about 2^63 in v1.
    (limit < 1 << 60).then(|| limit.saturating_sub(used.saturating_sub(cache)))
}

/// What the address-space limit (`RLIMIT_AS`, `ulimit -v`) leaves beyond the process's virtual
/// size (`VmSize`), when one is set.
fn address_space_headroom() -> Option<u64> {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        // SAFETY: getrlimit writes the limit into the struct it is given, nothing else.
        if unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut limit) } != 0 || limit.rlim_cur == libc::RLIM_INFINITY {
            return None;
        }
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let line = status.lines().find(|line| line.starts_with("VmSize:"))?;
        let size = line.split_whitespace().nth(1)?.parse::<u64>().ok()?.checked_mul(1024)?;
        Some(limit.rlim_cur.saturating_sub(size))
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    None
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

/// Lets the process reuse the memory it frees instead of handing it back to the system and
/// faulting in fresh, zeroed pages for the next allocation; returns whether it changed anything.
///
/// glibc's malloc serves blocks above a threshold (128 KiB, raised as such blocks are freed) with
/// pages of their own, and returns free memory at the top of its heap beyond 128 KiB. A training
/// step allocates and frees its activations and gradients every step, so each step paid for
/// hundreds of MB of page faults: 600k faults and about 12% of the CPU time in a 12-step bench of
/// an 8-layer byte model on 2 threads. This raises the threshold to 32 MiB and keeps up to
/// 256 MiB free for reuse (85k faults, 12-25% shorter steps on that model, the same peak
/// resident memory). The programs call it first thing; call it at the start of your own binary
/// to get the same. It leaves malloc as it is when the environment already sets its tunables
/// (`GLIBC_TUNABLES=glibc.malloc...`, `MALLOC_MMAP_THRESHOLD_`, `MALLOC_TRIM_THRESHOLD_`), and
/// does nothing outside Linux with glibc.
pub fn reuse_freed_memory() -> bool {
    malloc_settings_in_environment().is_none() && set_malloc_thresholds(32 << 20, 256 << 20)
}

/// The environment's settings of malloc's thresholds (`NAME=value`), which
/// [`reuse_freed_memory`] leaves to rule; `None` when it sets none.
pub fn malloc_settings_in_environment() -> Option<String> {
    environment_tunes_malloc(|name| std::env::var_os(name).map(|value| value.to_string_lossy().into_owned()))
}

/// The malloc settings among the variables `var` reads, as `NAME=value` joined by spaces.
fn environment_tunes_malloc(var: impl Fn(&str) -> Option<String>) -> Option<String> {
    let tunables = var("GLIBC_TUNABLES").filter(|t| t.contains("glibc.malloc."));
    let settings: Vec<String> = std::iter::once(("GLIBC_TUNABLES", tunables))
        .chain(["MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"].map(|name| (name, var(name))))
        .filter_map(|(name, value)| value.map(|value| format!("{name}={value}")))
        .collect();
    (!settings.is_empty()).then(|| settings.join(" "))
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn set_malloc_thresholds(mmap: i32, trim: i32) -> bool {
    // SAFETY: mallopt only changes malloc's parameters; glibc makes it safe to call at any time.
    unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, mmap) == 1 && libc::mallopt(libc::M_TRIM_THRESHOLD, trim) == 1 }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn set_malloc_thresholds(_mmap: i32, _trim: i32) -> bool {
    false
}

/// The bytes of memory left to a device that allocates in the machine's memory, or `None` for a
/// device with memory of its own (a GPU) or where it cannot be read.
pub(crate) fn host_memory_available(device: &Device) -> Option<u64> {
    uses_host_memory(device).then(available_memory_bytes).flatten()
}

/// The size of one float of `device`'s float type.
pub(crate) fn float_bytes(device: &Device) -> usize {
    DType::from(device.settings().float_dtype).size()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malloc_is_tuned_unless_the_environment_already_tunes_it() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| pairs.iter().find(|(key, _)| *key == name).map(|(_, value)| value.to_string())
        };
        assert_eq!(environment_tunes_malloc(env(&[])), None);
        assert_eq!(environment_tunes_malloc(env(&[("GLIBC_TUNABLES", "glibc.pthread.rseq=0")])), None);
        let tunable = environment_tunes_malloc(env(&[("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=0")]));
        assert_eq!(tunable.as_deref(), Some("GLIBC_TUNABLES=glibc.malloc.trim_threshold=0"));
        let both = environment_tunes_malloc(env(&[("MALLOC_MMAP_THRESHOLD_", "4096"), ("MALLOC_TRIM_THRESHOLD_", "")]));
        assert_eq!(both.as_deref(), Some("MALLOC_MMAP_THRESHOLD_=4096 MALLOC_TRIM_THRESHOLD_="));
        // mallopt reports whether glibc took each value.
        let tuned_here =
            cfg!(all(target_os = "linux", target_env = "gnu")) && malloc_settings_in_environment().is_none();
        assert_eq!(reuse_freed_memory(), tuned_here);
    }
}
