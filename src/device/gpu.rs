//! What a program can tell of the GPU it runs on, for the bench's records: its name (the NVIDIA
//! driver's list, or wgpu's adapter) and its peak dense tensor throughput, against which MFU is
//! reported.

/// Peak dense bf16 tensor throughput, TFLOP/s, of known GPUs (the vendors' data sheets, without
/// sparsity), by a part of the name the driver gives. The first match counts: longer names first.
pub const KNOWN_PEAK_TFLOPS: [(&str, f64); 9] = [
    ("H100 PCIe", 756.0),
    ("H100 NVL", 835.0),
    ("H100", 989.0),
    ("H200", 989.0),
    ("A100", 312.0),
    ("L40S", 362.0),
    ("RTX 4090", 165.2),
    ("RTX 6000 Ada", 364.2),
    ("A6000", 154.8),
];

/// The peak of [`KNOWN_PEAK_TFLOPS`] for a GPU named `name`, or `None` for an unknown one (give
/// `--peak-tflops`).
pub fn known_peak_tflops(name: &str) -> Option<f64> {
    KNOWN_PEAK_TFLOPS.iter().find(|(part, _)| name.contains(part)).map(|&(_, peak)| peak)
}

/// The names of the NVIDIA GPUs the driver lists (`/proc/driver/nvidia/gpus/*/information`), in
/// bus order (CUDA's order under `CUDA_DEVICE_ORDER=PCI_BUS_ID`, and on a machine of one model).
pub fn nvidia_gpu_names() -> Vec<String> {
    let Ok(entries) = std::fs::read_dir("/proc/driver/nvidia/gpus") else { return Vec::new() };
    let mut gpus: Vec<std::path::PathBuf> = entries.flatten().map(|entry| entry.path()).collect();
    gpus.sort();
    gpus.iter()
        .filter_map(|gpu| std::fs::read_to_string(gpu.join("information")).ok())
        .filter_map(|text| {
            let line = text.lines().find(|line| line.starts_with("Model:"))?;
            Some(line.trim_start_matches("Model:").trim().to_string())
        })
        .collect()
}

/// Whether a device file of an NVIDIA GPU exists: `/dev/nvidiaN` (a container may have it
/// without the driver's `/proc` list), `/dev/dxg` (WSL2) or `/dev/nvgpu` (Jetson).
pub(crate) fn nvidia_device_file() -> bool {
    let numbered = std::fs::read_dir("/dev").is_ok_and(|entries| {
        entries.flatten().any(|entry| {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            name.strip_prefix("nvidia").is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
    });
    numbered || ["/dev/dxg", "/dev/nvgpu"].iter().any(|path| std::path::Path::new(path).exists())
}

/// Why CUDA GPU `index` cannot run here, if it cannot, from the GPUs the NVIDIA driver lists
/// (`listed`, [`nvidia_gpu_names`]), whether an NVIDIA device file exists ([`nvidia_device_file`])
/// and `CUDA_VISIBLE_DEVICES` (`visible`), which CUDA numbers the GPUs through. Without a GPU,
/// CUDA's libraries would stop the program at its first tensor (cudarc cannot load `libcuda.so`).
pub(crate) fn cuda_problem(
    index: usize,
    listed: &[String],
    device_file: bool,
    visible: Option<&str>,
) -> Option<String> {
    if listed.is_empty() && !device_file {
        return Some(
            "no NVIDIA GPU was found (the NVIDIA driver lists none in /proc/driver/nvidia/gpus, and there is no \
             /dev/nvidiaN, /dev/dxg or /dev/nvgpu); use --device auto, which picks the fastest device this machine \
             has, or --device flex"
                .into(),
        );
    }
    if let Some(visible) = visible {
        // CUDA takes the entries up to the first one that is not a GPU.
        let count = visible.split(',').map(str::trim).take_while(|id| !id.is_empty() && !id.starts_with('-')).count();
        return (index >= count).then(|| match count {
            0 => format!(
                "CUDA_VISIBLE_DEVICES={visible} hides every GPU from CUDA; unset it (`unset CUDA_VISIBLE_DEVICES`) or \
                 list the GPUs to use, e.g. CUDA_VISIBLE_DEVICES=0"
            ),
            _ => format!("GPU {index} does not exist: CUDA_VISIBLE_DEVICES={visible} leaves {count}, numbered from 0"),
        });
    }
    (!listed.is_empty() && index >= listed.len()).then(|| {
        let names: Vec<String> = listed.iter().enumerate().map(|(i, name)| format!("{i}: {name}")).collect();
        format!(
            "GPU {index} does not exist: the NVIDIA driver lists {} ({}), numbered from 0",
            listed.len(),
            names.join(", ")
        )
    })
}

/// [`cuda_problem`] on this machine.
pub(crate) fn cuda_problem_here(index: usize) -> Option<String> {
    let visible = std::env::var("CUDA_VISIBLE_DEVICES").ok();
    cuda_problem(index, &nvidia_gpu_names(), nvidia_device_file(), visible.as_deref())
}

/// Why LibTorch cannot run on CUDA GPU `index`, if it cannot: LibTorch's own count of the GPUs it
/// can use (none for a CPU-only LibTorch).
#[cfg(feature = "tch")]
pub(crate) fn tch_cuda_problem(index: usize) -> Option<String> {
    let count = usize::try_from(tch::Cuda::device_count()).unwrap_or(0);
    (index >= count).then(|| match count {
        0 => "LibTorch finds no CUDA GPU: this LibTorch is a CPU-only build, or the machine has no NVIDIA GPU \
              (or CUDA_VISIBLE_DEVICES hides them); use a CUDA build of LibTorch (docs/backends.md), or --device tch \
              for the CPU"
            .to_string(),
        _ => format!("GPU {index} does not exist: LibTorch finds {count}, numbered from 0"),
    })
}

/// The name of the GPU the device string `spec` names (`cuda:1`, `wgpu`, `vulkan`): the NVIDIA
/// driver's name of GPU `N` (0 without an index), else the first GPU adapter wgpu finds; `None`
/// where neither tells.
pub fn gpu_name(spec: &str) -> Option<String> {
    let index = spec.split_once(':').and_then(|(_, n)| n.parse::<usize>().ok()).unwrap_or(0);
    nvidia_gpu_names().into_iter().nth(index).or_else(|| super::adapters::wgpu_gpu_names().into_iter().next())
}

#[cfg(test)]
mod tests {
    use super::{cuda_problem, known_peak_tflops};

    #[test]
    fn cuda_is_refused_where_the_driver_lists_no_such_gpu() {
        let h100 = vec!["NVIDIA H100 80GB HBM3".to_string()];
        assert!(cuda_problem(0, &h100, true, None).is_none());
        assert!(cuda_problem(0, &[], true, None).is_none(), "a container or WSL2: a device file, no /proc list");
        let none = cuda_problem(0, &[], false, None).unwrap();
        assert!(none.contains("no NVIDIA GPU") && none.contains("--device flex"), "{none}");
        let beyond = cuda_problem(1, &h100, true, None).unwrap();
        assert!(beyond.contains("GPU 1 does not exist") && beyond.contains("0: NVIDIA H100"), "{beyond}");
        // CUDA_VISIBLE_DEVICES numbers the GPUs CUDA sees.
        let two = vec!["NVIDIA H100 80GB HBM3".to_string(); 2];
        assert!(cuda_problem(0, &two, true, Some("1")).is_none());
        assert!(cuda_problem(1, &two, true, Some("1")).unwrap().contains("leaves 1"));
        for hidden in ["", "-1", " "] {
            let problem = cuda_problem(0, &two, true, Some(hidden)).unwrap();
            assert!(problem.contains("hides every GPU"), "{problem}");
        }
    }

    #[test]
    fn known_gpus_are_found_by_the_names_their_drivers_give() {
        assert_eq!(known_peak_tflops("NVIDIA H100 80GB HBM3"), Some(989.0));
        assert_eq!(known_peak_tflops("NVIDIA H100 PCIe"), Some(756.0));
        assert_eq!(known_peak_tflops("NVIDIA H200"), Some(989.0));
        assert_eq!(known_peak_tflops("NVIDIA A100-SXM4-80GB"), Some(312.0));
        assert_eq!(known_peak_tflops("NVIDIA GeForce RTX 4090"), Some(165.2));
        assert_eq!(known_peak_tflops("llvmpipe (LLVM 15.0.6, 256 bits)"), None);
    }
}
