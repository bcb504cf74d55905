//! The LLaMA model: causality, KV cache, layer skipping, presets, config files, bad configs.

mod common;

use burn::module::Module;
use burn::tensor::{Device, FloatDType, Int, Tensor};
use common::{all_backends, cpu, max_abs_diff, random_tokens};
use layernorm_scaling::model::{cast_weights, generate, SamplingConfig};
use layernorm_scaling::{ConfigError, Error, LlamaConfig, NormKind, NormScheme};

#[test]
fn changing_future_tokens_leaves_earlier_logits_unchanged() {
    let device = cpu();
    for scheme in [NormScheme::default(), NormScheme::PostLn, NormScheme::SandwichLn] {
        let model = LlamaConfig::tiny().with_norm_scheme(scheme.clone()).init(&device).unwrap();
        let a = random_tokens(2, 16, 256, 1, &device);
        let tail = random_tokens(2, 6, 256, 2, &device);
        let b = Tensor::cat(vec![a.clone().narrow(1, 0, 10), tail], 1);
        let (la, lb) = (model.forward(a), model.forward(b));
        let prefix = max_abs_diff(&la.clone().narrow(1, 0, 10), &lb.clone().narrow(1, 0, 10));
        assert!(prefix < 1e-5, "{scheme}: earlier logits moved by {prefix}");
        assert!(max_abs_diff(&la.narrow(1, 10, 6), &lb.narrow(1, 10, 6)) > 1e-3, "{scheme}: later logits must change");
    }
}

fn decode_in_chunks(config: LlamaConfig, chunks: &[usize]) {
    decode_in_chunks_on(config, chunks, &cpu(), 1e-4);
}

/// [`decode_in_chunks`] on `device`, the logits within `tolerance`.
fn decode_in_chunks_on(config: LlamaConfig, chunks: &[usize], device: &Device, tolerance: f32) {
    let device = device.clone();
    let model = config.init(&device).unwrap();
    let total: usize = chunks.iter().sum();
    let tokens = random_tokens(2, total, config.vocab_size, 11, &device);
    let full = model.forward(tokens.clone());
    let mut cache = model.new_cache();
    let mut start = 0;
    for &len in chunks {
        let logits = model.forward_cached(tokens.clone().narrow(1, start, len), &mut cache);
        let diff = max_abs_diff(&logits, &full.clone().narrow(1, start, len));
        assert!(diff < tolerance, "chunk at {start}+{len}: {diff}");
        start += len;
        assert_eq!(cache.len(), start);
    }
}

#[test]
fn kv_cache_decoding_equals_the_full_forward() {
    decode_in_chunks(LlamaConfig::tiny(), &[5, 1, 1, 1, 1, 1]);
    // A multi-token chunk after a prefix needs the offset causal mask.
    decode_in_chunks(LlamaConfig::tiny(), &[4, 3, 1, 4]);
    // Grouped-query attention, a non-default rope theta, tied embeddings and Qwen2-style biases.
    let gqa = LlamaConfig::tiny()
        .with_n_kv_heads(Some(2))
        .with_rope_theta(500_000.0)
        .with_tie_embeddings(true)
        .with_qkv_bias(true);
    decode_in_chunks(gqa, &[3, 1, 2, 1]);
    // Across the buffers' growth (16 -> 32 -> 64 positions), in one chunk and token by token.
    decode_in_chunks(LlamaConfig::tiny(), &[5, 12, 1, 20, 1]);
    // Without biases the full forward takes the packed projections (attention reading q, k and v
    // in place, RoPE at load) and decoding the separate ones: grouped heads and one key/value
    // head, on every backend (the GPUs' kernels, and their portable body for groups).
    for (name, device) in all_backends() {
        for kv_heads in [2, 1, 4] {
            let config = LlamaConfig::tiny().with_n_kv_heads(Some(kv_heads));
            let tolerance = if name == "wgpu-cpu" { 1e-3 } else { 1e-4 };
            decode_in_chunks_on(config, &[3, 1, 2, 1], &device, tolerance);
        }
    }
}

/// A half-precision model (a pure-bf16 run's weights) decodes on a device whose float type is
/// f32, on every backend that has the type: the cache is made in the weights' type (it was made
/// in the device's, and the first append panicked with a dtype mismatch).
#[test]
fn a_half_precision_model_decodes_with_its_cache_in_its_own_type() {
    for (name, device) in all_backends() {
        // lavapipe has f16 but no bf16; ndarray computes in f32 alone.
        let Some(half) = [FloatDType::BF16, FloatDType::F16].into_iter().find(|&t| device.supports_dtype(t)) else {
            continue;
        };
        let model = cast_weights(LlamaConfig::tiny().init(&device).unwrap(), half);
        assert_eq!(model.embed_tokens.weight.val().dtype(), half.into(), "{name}");
        let tokens = random_tokens(1, 12, 256, 5, &device);
        let full = model.forward(tokens.clone());
        assert_eq!(full.dtype(), half.into(), "{name}: the logits follow the weights");
        let mut cache = model.new_cache();
        let mut start = 0;
        for len in [5, 1, 1, 5] {
            let logits = model.forward_cached(tokens.clone().narrow(1, start, len), &mut cache);
            let diff = max_abs_diff(&logits, &full.clone().narrow(1, start, len));
            // Half-precision rounding of logits of magnitude ~1, in another order of products.
            assert!(diff < 0.05, "{name} {half:?}: chunk at {start}+{len} differs by {diff}");
            start += len;
        }
        // The whole sampling path, as `generate` and the end of a training run take it.
        let sampled =
            generate(&model, &[1, 2, 3], &SamplingConfig { max_new_tokens: 20, stop: None, ..Default::default() });
        assert_eq!(sampled.len(), 20, "{name}");
    }
}

/// Decoding token by token meets a handful of shapes, not one per length: the cache's buffers
/// hold a power of two of positions and double when full (on a GPU each new shape compiles and
/// autotunes kernels again).
#[test]
fn decoding_token_by_token_meets_a_bounded_number_of_shapes() {
    let device = cpu();
    let model = LlamaConfig::tiny().init(&device).unwrap();
    let tokens = random_tokens(1, 101, 256, 3, &device);
    let mut cache = model.new_cache();
    model.forward_cached(tokens.clone().narrow(1, 0, 3), &mut cache);
    let mut capacities = vec![cache.capacity()];
    for position in 3..101 {
        model.forward_cached(tokens.clone().narrow(1, position, 1), &mut cache);
        assert!(cache.capacity() >= cache.len(), "{} positions in {}", cache.len(), cache.capacity());
        if capacities.last() != Some(&cache.capacity()) {
            capacities.push(cache.capacity());
        }
    }
    assert_eq!(cache.len(), 101);
    assert_eq!(capacities, [16, 32, 64, 128], "one shape per doubling, not one per length");
}

#[test]
fn skipping_a_layer_equals_a_model_built_without_it() {
    let device = cpu();
    let config = LlamaConfig::tiny().with_norm_scheme(NormScheme::PreLn);
    let model = config.init(&device).unwrap();
    let tokens = random_tokens(2, 9, 256, 4, &device);
    for k in 1..=4 {
        // An independently built 3-layer model holding the other blocks' weights.
        let mut smaller = LlamaConfig { n_layers: 3, ..config.clone() }.init(&device).unwrap();
        smaller.embed_tokens = model.embed_tokens.clone();
        smaller.layers = model.layers.iter().enumerate().filter(|(i, _)| i + 1 != k).map(|(_, b)| b.clone()).collect();
        smaller.norm = model.norm.clone();
        smaller.lm_head = model.lm_head.clone();
        let skipped = model.forward_skipping(tokens.clone(), &[k]).unwrap();
        assert!(max_abs_diff(&skipped, &smaller.forward(tokens.clone())) < 1e-5, "layer {k}");
        assert!(max_abs_diff(&skipped, &model.forward(tokens.clone())) > 1e-4, "skipping layer {k} changes the output");
    }
}

#[test]
fn removed_layers_keep_their_own_lns_factors() {
    let device = cpu();
    let model = LlamaConfig::tiny().init(&device).unwrap();
    let tokens = random_tokens(1, 7, 256, 9, &device);
    let skipped = model.forward_skipping(tokens.clone(), &[2]).unwrap();
    let pruned = model.remove_layers(&[2]).unwrap();
    assert_eq!(pruned.layers.iter().map(|b| b.layer()).collect::<Vec<_>>(), vec![1, 3, 4]);
    assert!(max_abs_diff(&skipped, &pruned.forward(tokens)) < 1e-6);
}

#[test]
fn bad_layer_numbers_are_errors() {
    let device = cpu();
    let model = LlamaConfig::tiny().init(&device).unwrap();
    let tokens = random_tokens(1, 4, 256, 1, &device);
    assert_eq!(model.forward_skipping(tokens.clone(), &[0]).unwrap_err(), ConfigError::LayerZero);
    // Each layer is removed once: a second mention is a mistake, not a no-op.
    assert_eq!(model.forward_skipping(tokens.clone(), &[2, 3, 2]).unwrap_err(), ConfigError::LayerTwice { layer: 2 });
    assert_eq!(model.clone().remove_layers(&[1, 1]).unwrap_err(), ConfigError::LayerTwice { layer: 1 });
    assert_eq!(model.forward_skipping(tokens, &[5]).unwrap_err(), ConfigError::NoSuchLayer { layer: 5, n_layers: 4 });
    assert_eq!(model.remove_layers(&[9]).unwrap_err(), ConfigError::NoSuchLayer { layer: 9, n_layers: 4 });
}

#[test]
fn preset_parameter_counts_match_their_names() {
    let m = 1e6;
    let c130 = LlamaConfig::llama_130m().num_params() as f64;
    assert!((132.0 * m..136.0 * m).contains(&c130), "130m has {c130}");
    for (name, nominal) in [
        ("9m", 9.0 * m),
        ("20m", 20.0 * m),
        ("35m", 35.0 * m),
        ("60m", 60.0 * m),
        ("71m", 71.0 * m),
        ("130m", 130.0 * m),
        ("250m", 250.0 * m),
        ("350m", 350.0 * m),
        ("7b", 7000.0 * m),
    ] {
        let count = LlamaConfig::preset(name).unwrap().num_params() as f64;
        assert!((0.9..1.1).contains(&(count / nominal)), "{name}: {count}");
    }
    // The 1B and 3B of the paper's code base count 1.34B and 2.69B parameters.
    let c1b = LlamaConfig::llama_1b().num_params() as f64;
    assert!((1.3e9..1.4e9).contains(&c1b), "1b: {c1b}");
    let c3b = LlamaConfig::llama_3b().num_params() as f64;
    assert!((2.6e9..2.8e9).contains(&c3b), "3b: {c3b}");
}

#[test]
fn computed_parameter_counts_equal_the_built_models() {
    let device = cpu();
    let tiny = LlamaConfig::tiny;
    let configs = [
        tiny(),
        tiny().with_norm_kind(NormKind::LayerNorm),
        tiny().with_n_kv_heads(Some(1)),
        tiny().with_tie_embeddings(true),
        tiny().with_qkv_bias(true),
        tiny().with_norm_scheme(NormScheme::SandwichLn).with_norm_kind(NormKind::LayerNorm),
        tiny().with_norm_scheme(NormScheme::LayerScale { init: 0.1 }),
        tiny().with_norm_scheme(NormScheme::SkipInit { init: 0.0 }),
        LlamaConfig::llama_9m(),
        LlamaConfig::llama_20m(),
    ];
    for config in configs {
        let model = config.init(&device).unwrap();
        assert_eq!(model.num_params(), config.num_params(), "{config:?}");
    }
}

#[test]
fn config_files_are_the_presets_and_round_trip() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("configs/models");
    for name in LlamaConfig::preset_names() {
        let from_file = LlamaConfig::from_file(dir.join(format!("{name}.json"))).unwrap();
        assert_eq!(from_file, LlamaConfig::preset(name).unwrap(), "configs/models/{name}.json");
    }
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("custom.json");
    let config = LlamaConfig::tiny()
        .with_norm_scheme(NormScheme::MixLn { post_ln_fraction: 0.5 })
        .with_n_kv_heads(Some(2))
        .with_norm_kind(NormKind::LayerNorm);
    config.to_file(&path).unwrap();
    assert_eq!(LlamaConfig::from_file(&path).unwrap(), config);
    // Only the required fields: the rest take their defaults.
    std::fs::write(&path, r#"{"d_model": 64, "d_ff": 128, "n_layers": 2, "n_heads": 4}"#).unwrap();
    let minimal = LlamaConfig::from_file(&path).unwrap();
    assert_eq!(minimal, LlamaConfig::new(64, 128, 2, 4));
    assert_eq!(minimal.norm_scheme, NormScheme::default());
}

#[test]
fn bad_configs_are_clear_errors() {
    let device = cpu();
    // What is wrong, as the error's kind and field: the wording is pinned once, below.
    let error = |config: LlamaConfig| config.init(&device).unwrap_err();
    let divisible = |config, a_is: &str, b_is: &str| match error(config) {
        ConfigError::NotDivisible { a, b, .. } => assert_eq!((a, b), (a_is, b_is)),
        other => panic!("{a_is} / {b_is}: {other}"),
    };
    divisible(LlamaConfig { d_model: 66, ..LlamaConfig::tiny() }, "d_model", "n_heads");
    divisible(LlamaConfig::tiny().with_n_kv_heads(Some(3)), "n_heads", "n_kv_heads");
    divisible(LlamaConfig { d_model: 12, ..LlamaConfig::tiny() }, "head_dim (d_model / n_heads)", "2 (rotary pairs)");
    let err = error(LlamaConfig { d_model: 66, ..LlamaConfig::tiny() }).to_string();
    assert_eq!(err, "`d_model` (66) must be divisible by `n_heads` (4)");
    assert_eq!(error(LlamaConfig { n_layers: 0, ..LlamaConfig::tiny() }), ConfigError::Zero { field: "n_layers" });
    assert_eq!(error(LlamaConfig { n_heads: 0, ..LlamaConfig::tiny() }), ConfigError::Zero { field: "n_heads" });
    let out_of_range = |config, expected: &str| match error(config) {
        ConfigError::OutOfRange { field, .. } => assert_eq!(field, expected),
        other => panic!("{expected}: {other}"),
    };
    out_of_range(LlamaConfig::tiny().with_norm_scheme(NormScheme::MixLn { post_ln_fraction: 1.5 }), "post_ln_fraction");
    out_of_range(
        LlamaConfig::tiny().with_norm_scheme(NormScheme::MixLn { post_ln_fraction: -0.1 }),
        "post_ln_fraction",
    );
    out_of_range(LlamaConfig::tiny().with_norm_eps(0.0), "norm_eps");
    // Finite in f64, infinite (or 0) in the f32 the model computes with: refused naming the
    // field, not trained and blamed on the learning rate.
    for (field, value) in [("norm_eps", 1e40), ("init_std", 1e40), ("embed_init_std", 1e-50), ("dyt_alpha_init", 1e40)]
    {
        let mut json = serde_json::to_value(LlamaConfig::tiny()).unwrap();
        json[field] = value.into();
        if field == "dyt_alpha_init" {
            json["norm_kind"] = "dyt".into();
        }
        let config: LlamaConfig = serde_json::from_value(json).unwrap();
        let err = error(config);
        assert!(matches!(err, ConfigError::OutOfRange { field: f, .. } if f == field), "{field}: {err}");
        assert!(err.to_string().contains("a number > 0 within f32's range"), "{err}");
    }
    for (scheme, field) in [("completep:1e300", "base_depth"), ("layer-scale:1e40", "init")] {
        let err = scheme.parse::<NormScheme>().and_then(|s| s.validate()).unwrap_err();
        assert!(matches!(err, ConfigError::OutOfRange { field: f, .. } if f == field), "{scheme}: {err}");
    }

    let err = LlamaConfig::preset("13m").unwrap_err();
    assert!(
        matches!(&err, ConfigError::Unknown { what: "model preset", name, expected } if name == "13m" && expected.contains("130m")),
        "{err}"
    );

    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("bad.json");
    std::fs::write(&path, r#"{"d_model": 64, "d_ff": 128, "n_layers": 0, "n_heads": 4}"#).unwrap();
    let err = LlamaConfig::from_file(&path).unwrap_err().to_string();
    assert!(err.contains("bad.json") && err.contains("n_layers"), "{err}");
    // Text that is not a model config: refused as invalid, the file named with the parser's own
    // error (what `from_json` says of the same text).
    let invalid_file = |text: &str| {
        std::fs::write(&path, text).unwrap();
        let parsed = LlamaConfig::from_json(text).unwrap_err();
        match LlamaConfig::from_file(&path).unwrap_err() {
            Error::File { path: at, message } if at == path && message == parsed.to_string() => parsed,
            other => panic!("expected the file's error, naming it with {parsed}: {other:?}"),
        }
    };
    let err = invalid_file("{ not json");
    assert!(matches!(err, ConfigError::Invalid { .. }), "{err:?}");
    assert!(LlamaConfig::from_file(tmp.path().join("missing.json")).is_err());
    std::fs::write(&path, r#"{"d_model": 64, "d_ff": 128, "n_layers": 2, "n_heads": 4, "n_layer": 3}"#).unwrap();
    let err = LlamaConfig::from_file(&path).unwrap_err().to_string();
    assert!(err.contains("unknown field `n_layer`"), "{err}");
    std::fs::write(&path, r#"{"d_model": 64, "d_ff": 128, "n_heads": 4}"#).unwrap();
    let err = LlamaConfig::from_file(&path).unwrap_err().to_string();
    assert!(err.contains("missing required field `n_layers`"), "{err}");
    // A number beyond f64's range fails in the JSON parser, before any field is read: the error
    // quotes the line, so the field is named.
    let err =
        invalid_file("{\n  \"d_model\": 64, \"d_ff\": 128, \"n_layers\": 2, \"n_heads\": 4,\n  \"init_std\": 1e400\n}");
    assert!(
        matches!(&err, ConfigError::Invalid { message, .. } if message.contains("`\"init_std\": 1e400`")),
        "{err:?}"
    );
}

#[test]
fn tied_embeddings_share_the_embedding_matrix() {
    let device = cpu();
    let model = LlamaConfig::tiny().with_tie_embeddings(true).init(&device).unwrap();
    assert!(model.lm_head.is_none());
    let tokens: Tensor<2, Int> = random_tokens(1, 5, 256, 2, &device);
    let trace = model.forward_trace(tokens);
    let hidden = model.norm.forward(trace.hidden[4].clone());
    let expected = hidden.matmul(model.embed_tokens.weight.val().transpose().unsqueeze());
    assert!(max_abs_diff(&trace.logits, &expected) < 1e-5);
}

/// The library surface a Burn user expects: paths as `AsRef<Path>` (a `&str` works), and `?` on
/// Burn's own record errors inside a function returning the crate's `Error`.
#[test]
fn paths_take_as_ref_and_record_errors_convert_with_question_mark() {
    use layernorm_scaling::run::{load_run_model, save_run_model, RunModelInfo};

    let dir = tempfile::tempdir().unwrap();
    let config = LlamaConfig::new(32, 64, 2, 2).with_vocab_size(16);
    let model = config.init(&cpu()).unwrap();
    let info = RunModelInfo {
        model: config.clone(),
        tokenizer: "byte".into(),
        steps: 3,
        data: None,
        tokenizer_identity: None,
    };
    let run = dir.path().join("run");
    std::fs::create_dir(&run).unwrap();
    save_run_model(run.to_str().unwrap(), &model, &info).unwrap();
    let (loaded, loaded_info) = load_run_model(run.to_string_lossy().into_owned(), None, &cpu()).unwrap();
    assert_eq!(loaded_info.steps, 3);
    let tokens = random_tokens(1, 5, 16, 1, &cpu());
    assert!(max_abs_diff(&model.forward(tokens.clone()), &loaded.forward(tokens)) == 0.0);

    let load_missing = || -> Result<(), Error> {
        let fresh = config.init(&cpu())?;
        fresh.try_load_file(dir.path().join("missing.bpk"))?;
        Ok(())
    };
    // A file that cannot be read (not a record of another shape): the error says so by its kind.
    match load_missing() {
        Err(Error::Record(error @ burn::store::RecordError::Io(_))) => assert!(!error.to_string().is_empty()),
        other => panic!("expected Error::Record(RecordError::Io(_)), got {:?}", other.map(|_| ())),
    }
}
