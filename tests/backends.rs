//! One test body on every backend compiled in, and device selection.

mod common;

use burn::module::Module;
use common::{all_backends, cpu, max_abs_diff, random_tokens, values};
use layernorm_scaling::model::cross_entropy;
use layernorm_scaling::{compiled_backends, parse_device, ConfigError, LlamaConfig, NormKind, NormScheme};

/// The same weights give the same logits on every backend.
#[test]
fn same_weights_give_the_same_logits_on_every_backend() {
    let backends = all_backends();
    println!("backends under test: {:?}", backends.iter().map(|(name, _)| *name).collect::<Vec<_>>());
    for (scheme, kind) in [
        (NormScheme::default(), NormKind::RmsNorm),
        (NormScheme::PreLn, NormKind::LayerNorm),
        (NormScheme::SandwichLn, NormKind::RmsNorm),
    ] {
        let config = LlamaConfig::tiny().with_norm_scheme(scheme.clone()).with_norm_kind(kind).with_n_kv_heads(Some(2));
        let reference_model = config.init(&cpu()).unwrap();
        let reference = reference_model.forward(random_tokens(2, 24, 256, 3, &cpu()));
        for (name, device) in &backends {
            let model = config.init(device).unwrap().load_record(reference_model.clone().into_record());
            let logits = model.forward(random_tokens(2, 24, 256, 3, device));
            let diff = max_abs_diff(&logits.to_device(&cpu()), &reference);
            assert!(diff < 1e-4, "{name} {scheme} {kind:?}: logits differ by {diff}");
        }
    }
}

/// Forward, backward and the KV cache work on every backend.
#[test]
fn every_backend_trains_and_decodes() {
    for (name, device) in all_backends() {
        let model = LlamaConfig::tiny().init(&device.clone().autodiff()).unwrap();
        let tokens = random_tokens(2, 9, 256, 5, &device.clone().autodiff());
        let loss = cross_entropy(model.forward(tokens.clone().narrow(1, 0, 8)), tokens.narrow(1, 1, 8));
        let grads = loss.backward();
        let grad = model.layers[3].mlp.down_proj.weight.val().grad(&grads).expect("gradient");
        assert!(values(&grad).iter().all(|g| g.is_finite()), "{name}");

        let model = LlamaConfig::tiny().init(&device).unwrap();
        let tokens = random_tokens(1, 6, 256, 8, &device);
        let full = model.forward(tokens.clone());
        let mut cache = model.new_cache();
        let first = model.forward_cached(tokens.clone().narrow(1, 0, 5), &mut cache);
        let last = model.forward_cached(tokens.narrow(1, 5, 1), &mut cache);
        assert!(max_abs_diff(&first, &full.clone().narrow(1, 0, 5)) < 1e-4, "{name}");
        assert!(max_abs_diff(&last, &full.narrow(1, 5, 1)) < 1e-4, "{name}");
    }
}

#[test]
fn device_strings_select_compiled_backends_or_name_the_missing_feature() {
    assert!(compiled_backends().contains(&"flex"));
    assert!(parse_device("flex").is_ok());
    assert!(parse_device(" FLEX ").is_ok());
    assert!(parse_device("auto").is_ok());
    // `auto` never picks a software adapter (lavapipe) while flex is compiled in: it trained the
    // 9m preset for 17 minutes where flex takes one.
    let choice = layernorm_scaling::device::auto_choice().unwrap();
    assert_ne!(choice.device, "wgpu-cpu", "{choice:?}");
    if cfg!(feature = "wgpu") && choice.device == "flex" {
        assert!(choice.reason.contains("wgpu is compiled in"), "{choice:?}");
    }
    let err = parse_device("gpu").unwrap_err();
    assert!(
        matches!(&err, ConfigError::Unknown { what: "device", name, expected } if name == "gpu" && expected.contains("cuda:N")),
        "{err}"
    );
    let err = parse_device("cuda:x").unwrap_err().to_string();
    assert!(err.contains("device index"), "{err}");
    let err = parse_device("flex:1").unwrap_err().to_string();
    assert!(err.contains("index only after"), "{err}");
    if !cfg!(feature = "cuda") {
        let err = parse_device("cuda:1").unwrap_err();
        assert!(matches!(&err, ConfigError::NotCompiled { feature: "cuda", .. }), "{err}");
        // The message says how to get it.
        assert!(err.to_string().contains("`--features cuda`"), "{err}");
    }
    if !cfg!(feature = "tch") {
        let err = parse_device("tch-cuda:0").unwrap_err().to_string();
        assert!(err.contains("`tch` cargo feature of layernorm-scaling"), "{err}");
        // A dependent project learns where the feature goes, not only the command-line flag.
        assert!(err.contains("features = [\"tch\"]") && err.contains("`layernorm-scaling` dependency"), "{err}");
    }
    if !cfg!(feature = "ndarray") {
        let err = parse_device("ndarray").unwrap_err();
        assert!(matches!(&err, ConfigError::NotCompiled { feature: "ndarray", .. }), "{err}");
    }
}

/// Without a Vulkan adapter Burn falls back to OpenGL, where its autotuned kernels wait on each
/// other for ever on Mesa's llvmpipe (or, without OpenGL either, it panics): `--device wgpu-cpu`,
/// `--device wgpu` and `--device wgpu:3` are refused at once, with the driver to install,
/// instead. The Vulkan loader is shown no driver.
#[cfg(all(feature = "wgpu", target_os = "linux"))]
#[test]
fn wgpu_without_a_vulkan_adapter_is_refused_instead_of_hanging() {
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};
    for device in ["wgpu-cpu", "wgpu", "wgpu:3"] {
        let mut child = Command::new(common::example("curse"))
            .args(["--device", device, "--layers", "2", "--batch", "1", "--seq-len", "8"])
            .env("VK_ICD_FILENAMES", "/nonexistent/icd.json")
            .env("VK_DRIVER_FILES", "/nonexistent/icd.json")
            .env_remove("VK_ADD_DRIVER_FILES")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let started = Instant::now();
        while child.try_wait().unwrap().is_none() {
            if started.elapsed() > Duration::from_secs(120) {
                child.kill().unwrap();
                panic!("--device {device} without a Vulkan driver still runs after 120 s");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let output = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{device}: {stderr}");
        assert!(stderr.contains(&format!("device `{device}` cannot run on this machine")), "{stderr}");
        assert!(stderr.contains("mesa-vulkan-drivers") && !stderr.contains("panicked"), "{stderr}");
    }
}
