//! How much memory the machine has left, so that work which cannot fit is refused with an error
//! before it is allocated (a failed allocation aborts the process, it cannot be caught).

use burn::tensor::{DType, Device};

/// Which limit bounds the memory this process may still use: the least of them applies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryLimitKind {
    /// The machine's free memory (Linux `MemAvailable` of `/proc/meminfo`).
    FreeMemory,
    /// The control group's memory limit (cgroup v2 `memory.max`, v1 `memory.limit_in_bytes`: a
    /// container's `--memory`, a systemd `MemoryMax`).
    ControlGroup,
    /// The address-space limit (`RLIMIT_AS`, set by `ulimit -v`), against the process's virtual size.
    AddressSpace,
}

/// The memory this process may still use: what the least of its limits leaves, which limit that
/// is, and what the process holds already.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryLimit {
    /// Bytes the process can still allocate (under `ulimit -v`, map).
    pub available: u64,
    /// The limit that leaves the least.
    pub kind: MemoryLimitKind,
    /// The process's resident size now (Linux `VmRSS`), 0 where it cannot be read.
    pub resident: u64,
    /// Under `ulimit -v`, the address space the process will map beyond its resident memory and
    /// has not mapped yet ([`unresident_address_space`] less what its virtual size holds beyond
    /// its resident size); 0 under the other limits, which count resident memory.
    pub unresident: u64,
}

impl MemoryLimit {
    /// The least of `limits` (each with what it leaves) for a process holding `resident` bytes,
    /// which maps `unresident` bytes of address space beyond them: the one that admits the lowest
    /// peak.
    pub fn least(
        limits: impl IntoIterator<Item = (MemoryLimitKind, u64)>,
        resident: u64,
        unresident: u64,
    ) -> Option<Self> {
        let limit = |(kind, available)| {
            let unresident = if kind == MemoryLimitKind::AddressSpace { unresident } else { 0 };
            Self { available, kind, resident, unresident }
        };
        limits.into_iter().map(limit).min_by_key(Self::peak_allowed)
    }

    /// The largest peak of resident memory the process can reach: what it holds plus what is left
    /// (less, under `ulimit -v`, the address space it maps beyond its resident memory).
    pub fn peak_allowed(&self) -> u64 {
        self.resident.saturating_add(self.available).saturating_sub(self.unresident)
    }

    /// Whether a process whose resident memory will peak at `peak` bytes stays within the limit.
    pub fn admits(&self, peak: u64) -> bool {
        peak <= self.peak_allowed()
    }

    /// The limit in words, where it is read and what it leaves: "the control group's memory limit
    /// (memory.max; ...) leaves 1.2 GiB beyond the 11.0 MiB this process holds".
    pub fn describe(&self) -> String {
        let source = match self.kind {
            MemoryLimitKind::FreeMemory => "the machine's free memory (MemAvailable in /proc/meminfo)",
            MemoryLimitKind::ControlGroup => {
                "the control group's memory limit (memory.max; a container's --memory, a systemd MemoryMax)"
            }
            MemoryLimitKind::AddressSpace => "the address-space limit (ulimit -v)",
        };
        let left = format!("{source} leaves {}", format_bytes(self.available));
        match self.kind {
            MemoryLimitKind::AddressSpace => format!(
                "{left} beyond the process's virtual size, of which malloc's arenas and the threads' stacks will \
                 map about {} more",
                format_bytes(self.unresident)
            ),
            _ => format!("{left} beyond the {} this process holds", format_bytes(self.resident)),
        }
    }
}

/// The memory this process may still use, or `None` where no limit can be read (then no check
/// should be made): the least of the machine's free memory, what the process's control group has
/// left under its limit (a container's `--memory`), and what its address-space limit (`ulimit -v`)
/// has left; see [`MemoryLimit`].
pub fn memory_limit() -> Option<MemoryLimit> {
    let machine = std::fs::read_to_string("/proc/meminfo").ok().and_then(|text| mem_available(&text));
    let limits = [
        (MemoryLimitKind::FreeMemory, machine),
        (MemoryLimitKind::ControlGroup, cgroup_headroom()),
        (MemoryLimitKind::AddressSpace, address_space_headroom()),
    ];
    let found = limits.into_iter().filter_map(|(kind, available)| Some((kind, available?)));
    let resident = resident_bytes().unwrap_or(0);
    // What the process maps beyond its resident memory already counts in its virtual size.
    let mapped = process_status_bytes("VmSize").unwrap_or(0).saturating_sub(resident);
    MemoryLimit::least(found, resident, unresident_address_space().saturating_sub(mapped))
}

/// The address space a training process maps beyond its resident memory, which counts against
/// `ulimit -v` only: glibc's malloc reserves 64 MiB of it for the arena of each thread that
/// allocates, and the code, libraries and thread stacks are mapped whole. Counted as 64 MiB for
/// each compute thread and 8 more; measured (`VmPeak` less `VmHWM` of the `train` example on the
/// `tiny` and `20m` presets): 610 MB on 1 compute thread, 617 on 2, 814 on 4, 1022 on 8.
pub fn unresident_address_space() -> u64 {
    #[cfg(feature = "flex")]
    let threads = rayon::current_num_threads();
    #[cfg(not(feature = "flex"))]
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    (8 + threads as u64).saturating_mul(64 << 20)
}

/// Bytes of memory this process can still allocate, or `None` where that cannot be read (then no
/// check should be made): [`memory_limit`]'s `available`.
pub fn available_memory_bytes() -> Option<u64> {
    memory_limit().map(|limit| limit.available)
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
        Some(limit.rlim_cur.saturating_sub(process_status_bytes("VmSize")?))
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    None
}

/// The peak resident memory of this process so far (Linux `VmHWM` of `/proc/self/status`), in
/// bytes, or `None` where that cannot be read.
pub fn peak_resident_bytes() -> Option<u64> {
    process_status_bytes("VmHWM")
}

/// The resident memory of this process now (Linux `VmRSS` of `/proc/self/status`), in bytes, or
/// `None` where that cannot be read.
pub fn resident_bytes() -> Option<u64> {
    process_status_bytes("VmRSS")
}

/// The size `key` of `/proc/self/status` (`VmRSS`, `VmHWM`, `VmSize`: in kB there), in bytes.
fn process_status_bytes(key: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    status_bytes(&status, key)
}

/// The size `key` of a `/proc/<pid>/status` text (`VmHWM:   1234 kB`), in bytes.
pub fn status_bytes(status: &str, key: &str) -> Option<u64> {
    let line = status.lines().find_map(|line| line.strip_prefix(key)?.strip_prefix(':'))?;
    let kib: u64 = line.split_whitespace().next()?.parse().ok()?;
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

/// A byte count for people: `512 B`, `3.2 GiB`, `1.5 TiB`. `u64::MAX`, what a count too large
/// to hold saturates to, reads `at least 16 EiB`.
pub fn format_bytes(bytes: u64) -> String {
    if bytes == u64::MAX {
        return "at least 16 EiB".into();
    }
    const UNITS: [&str; 7] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
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
    malloc_settings_in_environment().is_none() && set_malloc_thresholds(MMAP_THRESHOLD as i32, TRIM_THRESHOLD as i32)
}

/// The size from which [`reuse_freed_memory`] has malloc serve a block with pages of its own
/// (returned to the system when it is freed): 32 MiB.
pub const MMAP_THRESHOLD: u64 = 32 << 20;

/// The free memory at the top of its heap that [`reuse_freed_memory`] lets malloc keep for
/// reuse instead of returning it: 256 MiB.
pub const TRIM_THRESHOLD: u64 = 256 << 20;

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
    fn sizes_read_as_people_write_them_and_impossible_ones_say_so() {
        assert_eq!(format_bytes(512), "512 B");
        assert_eq!(format_bytes(3 << 30), "3.0 GiB");
        assert_eq!(format_bytes(1536 << 40), "1.5 PiB");
        // 2^62 bytes was "4096.0 PiB"; a saturated count, "16384.0 PiB".
        assert_eq!(format_bytes(1 << 62), "4.0 EiB");
        assert_eq!(format_bytes(u64::MAX), "at least 16 EiB");
    }

    #[test]
    fn the_least_limit_applies_and_is_named() {
        let status = "Name:\tx\nVmSize:\t  204800 kB\nVmHWM:\t   2048 kB\nVmRSS:\t    1024 kB\n";
        assert_eq!(status_bytes(status, "VmRSS"), Some(1 << 20));
        assert_eq!(status_bytes(status, "VmHWM"), Some(2 << 20));
        assert_eq!(status_bytes(status, "VmSize"), Some(200 << 20));
        assert_eq!(status_bytes(status, "VmSwap"), None);
        let gib = 1u64 << 30;
        let limits = [(MemoryLimitKind::FreeMemory, 8 * gib), (MemoryLimitKind::ControlGroup, 2 * gib)];
        let limit = MemoryLimit::least(limits, gib / 2, gib).unwrap();
        assert_eq!(
            (limit.kind, limit.available, limit.peak_allowed()),
            (MemoryLimitKind::ControlGroup, 2 * gib, 5 * gib / 2)
        );
        assert!(limit.admits(5 * gib / 2) && !limit.admits(5 * gib / 2 + 1));
        assert_eq!(
            limit.describe(),
            "the control group's memory limit (memory.max; a container's --memory, a systemd MemoryMax) leaves 2.0 \
             GiB beyond the 512.0 MiB this process holds"
        );
        // Under ulimit -v the address space mapped beyond resident memory is not there to use:
        // 3 GiB of address space left admits a resident peak of 0.5 + 3 - 1 GiB, less than the
        // control group's 0.5 + 2.75.
        let limits = [(MemoryLimitKind::ControlGroup, 11 * gib / 4), (MemoryLimitKind::AddressSpace, 3 * gib)];
        let address = MemoryLimit::least(limits, gib / 2, gib).unwrap();
        assert_eq!(
            (address.kind, address.peak_allowed(), address.unresident),
            (MemoryLimitKind::AddressSpace, 5 * gib / 2, gib)
        );
        assert_eq!(
            address.describe(),
            "the address-space limit (ulimit -v) leaves 3.0 GiB beyond the process's virtual size, of which malloc's \
             arenas and the threads' stacks will map about 1.0 GiB more"
        );
        assert_eq!(MemoryLimit::least(Vec::<(MemoryLimitKind, u64)>::new(), 0, 0), None);
    }

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
