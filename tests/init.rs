//! The init axis: `--init normal | scaled | depth-scaled` with every scheme that does not set its
//! own init, measured on the weights it builds.

mod common;
use common::edited;

use common::{assert_std, cpu};
use layernorm_scaling::train::{model_config, TrainConfig};
use layernorm_scaling::{ConfigError, InitScheme, LlamaConfig, NormKind, NormScheme};

const SIGMA: f64 = 0.02;
const LAYERS: usize = 8;

fn config(scheme: NormScheme, init: InitScheme) -> LlamaConfig {
    LlamaConfig::new(256, 512, LAYERS, 4).with_vocab_size(64).with_norm_scheme(scheme).with_init(Some(init))
}

/// The std the init axis gives the `o` and `down` projections of the 1-based `layer`, written out.
fn expected_output_std(init: InitScheme, layer: usize) -> f64 {
    match init {
        InitScheme::Normal => SIGMA,
        InitScheme::Scaled => SIGMA / (2.0 * LAYERS as f64).sqrt(),
        InitScheme::DepthScaled => SIGMA / (2.0 * layer as f64).sqrt(),
    }
}

#[test]
fn every_init_with_every_scheme_that_takes_one_builds_its_stated_std_per_layer() {
    let device = cpu();
    let schemes = ["pre-ln", "lns", "post-ln", "mix-ln", "layer-scale", "peri-ln", "lns:after-ffn"];
    for name in schemes {
        let scheme: NormScheme = name.parse().unwrap();
        for init in InitScheme::all() {
            let model = config(scheme.clone(), init).init(&device).unwrap();
            // Layers 1, 2 and 8 tell the three inits apart (depth-scaled differs in each).
            for layer in [1, 2, LAYERS] {
                let block = &model.layers[layer - 1];
                let what = format!("{name} --init {init}, layer {layer}");
                let output = expected_output_std(init, layer);
                assert_std(&block.self_attn.o_proj.weight.val(), output, &format!("{what}: o"));
                assert_std(&block.mlp.down_proj.weight.val(), output, &format!("{what}: down"));
                // Every other projection keeps sigma.
                assert_std(&block.self_attn.q_proj.weight.val(), SIGMA, &format!("{what}: q"));
                assert_std(&block.self_attn.v_proj.weight.val(), SIGMA, &format!("{what}: v"));
                assert_std(&block.mlp.up_proj.weight.val(), SIGMA, &format!("{what}: up"));
            }
        }
    }
}

#[test]
fn the_old_init_schemes_are_pre_ln_with_that_init() {
    let device = cpu();
    for (old, init) in [("scaled-init", InitScheme::Scaled), ("depth-scaled-init", InitScheme::DepthScaled)] {
        let from_scheme = LlamaConfig::new(64, 128, 4, 4).with_norm_scheme(old.parse().unwrap());
        let from_init = LlamaConfig::new(64, 128, 4, 4).with_norm_scheme(NormScheme::PreLn).with_init(Some(init));
        for layer in 1..=4 {
            let plan = |c: &LlamaConfig| c.init(&device).unwrap().layers[layer - 1].plan().init;
            assert_eq!(plan(&from_scheme), plan(&from_init), "{old}, layer {layer}");
        }
    }
}

#[test]
fn init_names_parse_print_and_serialise() {
    for init in InitScheme::all() {
        assert_eq!(init.to_string().parse::<InitScheme>().unwrap(), init);
        let json = serde_json::to_string(&init).unwrap();
        assert_eq!(json, format!("\"{init}\""));
        assert_eq!(serde_json::from_str::<InitScheme>(&json).unwrap(), init);
    }
    assert_eq!("Depth_Scaled".parse::<InitScheme>().unwrap(), InitScheme::DepthScaled);
    assert_eq!("scaled-init".parse::<InitScheme>().unwrap(), InitScheme::Scaled);
    // A config file takes the aliases the command line takes.
    for (alias, init) in [("plain", InitScheme::Normal), ("depth-scaled-init", InitScheme::DepthScaled)] {
        assert_eq!(serde_json::from_str::<InitScheme>(&format!("\"{alias}\"")).unwrap(), init);
    }
    let err = "scaeld".parse::<InitScheme>().unwrap_err();
    assert!(
        matches!(&err, ConfigError::Unknown { name, expected, .. } if name == "scaeld" && expected.contains("normal, scaled, depth-scaled")),
        "{err}"
    );
    // A model file written before the init axis has no `init`, and loads as `normal`.
    let old = LlamaConfig::from_json(r#"{"d_model": 64, "d_ff": 128, "n_layers": 2, "n_heads": 4}"#).unwrap();
    assert_eq!(old.init_scheme(), InitScheme::Normal);
}

#[test]
fn a_scheme_with_its_own_init_refuses_another_and_says_why() {
    for (scheme, own) in [("deepnorm", "(8L)^(-1/4)"), ("scaled-init", "sqrt(2L)"), ("depth-scaled-init", "sqrt(2l)")] {
        let err = config(scheme.parse().unwrap(), InitScheme::DepthScaled).validate().unwrap_err().to_string();
        for part in ["depth-scaled", scheme, "sets its own init", own, "--init normal"] {
            assert!(err.contains(part), "{part:?} missing from: {err}");
        }
        config(scheme.parse().unwrap(), InitScheme::Normal).validate().unwrap();
    }
    // Every norm kind takes every init.
    for kind in NormKind::ALL {
        config(NormScheme::default(), InitScheme::Scaled).with_norm_kind(kind).validate().unwrap();
    }
}

#[test]
fn a_training_config_sets_the_init_and_refuses_it_with_init_from() {
    let train = edited(&TrainConfig::default(), |c| {
        c.model.init = Some(InitScheme::Scaled);
        c.model.norm = Some(NormScheme::PreLn);
    });
    assert_eq!(model_config(&train).unwrap().init_scheme(), InitScheme::Scaled);
    let bad = edited(&train, |c| c.model.norm = Some(NormScheme::DeepNorm));
    assert!(model_config(&bad).unwrap_err().to_string().contains("sets its own init"));
    let dir = tempfile::tempdir().unwrap();
    let from = edited(&train, |c| c.model.init_from = Some(dir.path().to_path_buf()));
    let err = model_config(&from).unwrap_err().to_string();
    assert!(err.contains("`init` (scaled)") && err.contains("leave --init unset"), "{err}");
}

#[test]
fn the_docs_show_the_init_table() {
    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/schemes.md")).unwrap();
    assert!(docs.contains(&InitScheme::markdown()), "docs/schemes.md must hold:\n{}", InitScheme::markdown());
}

#[test]
fn a_model_drawn_with_scaled_init_moves_to_a_scheme_that_sets_its_own() {
    // The weights of `init_from` are loaded, not drawn: its recorded init does not bind the new
    // scheme, which refuses any init but its own only when it draws weights.
    let dir = tempfile::tempdir().unwrap();
    let drawn = LlamaConfig::new(64, 128, 2, 4).with_vocab_size(256).with_init(Some(InitScheme::Scaled));
    drawn.validate().unwrap();
    let info = serde_json::json!({"model": drawn, "tokenizer": "byte", "steps": 0});
    std::fs::write(dir.path().join("model.json"), info.to_string()).unwrap();
    for scheme in [NormScheme::DeepNorm, NormScheme::ScaledInit, "completep".parse().unwrap()] {
        let train = edited(&TrainConfig::default(), |c| {
            c.model.init_from = Some(dir.path().to_path_buf());
            c.model.norm = Some(scheme.clone());
        });
        let model = model_config(&train).unwrap();
        assert_eq!((model.init_scheme(), model.norm_scheme), (InitScheme::Normal, scheme));
    }
    let kept = edited(&TrainConfig::default(), |c| {
        c.model.init_from = Some(dir.path().to_path_buf());
        c.model.norm = Some(NormScheme::PreLn);
    });
    assert_eq!(model_config(&kept).unwrap().init_scheme(), InitScheme::Scaled, "a scheme that takes it keeps it");
}
