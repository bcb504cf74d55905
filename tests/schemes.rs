//! Every normalisation scheme of the paper, and Peri-LN, over every norm kind (RMSNorm, LayerNorm,
//! DyT), on the tiny preset.

mod common;

use burn::module::{Module, ModuleMapper, ModuleVisitor, Param};
use burn::tensor::{Gradients, Tensor};
use common::{assert_std, cpu, max_abs_diff, randn, random_tokens, values};
use layernorm_scaling::model::{cross_entropy, RotaryEmbedding};
use layernorm_scaling::norm::{BranchGate, Norm, Placement};
use layernorm_scaling::{ConfigError, LlamaConfig, LnsPosition, NormKind, NormScheme};

fn tiny(scheme: NormScheme) -> LlamaConfig {
    LlamaConfig::tiny().with_norm_scheme(scheme)
}

/// Checks that every parameter got a finite gradient, and counts the non-zero ones.
struct GradCheck<'a> {
    grads: &'a Gradients,
    missing: usize,
    non_finite: usize,
    non_zero: usize,
    total: usize,
}

impl ModuleVisitor for GradCheck<'_> {
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        self.total += 1;
        match param.val().grad(self.grads) {
            None => self.missing += 1,
            Some(grad) => {
                let v = values(&grad);
                if v.iter().any(|x| !x.is_finite()) {
                    self.non_finite += 1;
                }
                if v.iter().any(|&x| x != 0.0) {
                    self.non_zero += 1;
                }
            }
        }
    }
}

#[test]
fn every_scheme_and_norm_kind_trains_with_finite_loss_and_gradients() {
    let device = cpu().autodiff();
    let tokens = random_tokens(2, 17, 256, 7, &device);
    let inputs = tokens.clone().narrow(1, 0, 16);
    let targets = tokens.narrow(1, 1, 16);
    for kind in NormKind::ALL {
        for scheme in NormScheme::with_every_position() {
            let model = tiny(scheme.clone()).with_norm_kind(kind).init(&device).unwrap();
            let loss = cross_entropy(model.forward(inputs.clone()), targets.clone());
            let value = values(&loss)[0];
            // A fresh model predicts roughly uniformly over 256 tokens: loss near ln(256) = 5.55.
            assert!(value.is_finite() && (value - 256f32.ln()).abs() < 0.5, "{scheme} {kind:?}: loss {value}");
            let grads = loss.backward();
            let mut check = GradCheck { grads: &grads, missing: 0, non_finite: 0, non_zero: 0, total: 0 };
            model.visit(&mut check);
            assert_eq!(check.missing, 0, "{scheme} {kind:?}: parameters without gradient");
            assert_eq!(check.non_finite, 0, "{scheme} {kind:?}: non-finite gradients");
            assert!(
                check.non_zero * 10 >= check.total * 9,
                "{scheme} {kind:?}: {}/{} non-zero",
                check.non_zero,
                check.total
            );
        }
    }
}

#[test]
fn layer_one_of_lns_equals_pre_ln_and_deeper_layers_differ() {
    let device = cpu();
    let pre = tiny(NormScheme::PreLn).init(&device).unwrap();
    let lns = tiny(NormScheme::default()).init(&device).unwrap().load_record(pre.clone().into_record());
    let tokens = random_tokens(2, 12, 256, 3, &device);
    let (a, b) = (pre.forward_trace(tokens.clone()), lns.forward_trace(tokens));
    assert_eq!(max_abs_diff(&a.hidden[1], &b.hidden[1]), 0.0, "layer 1 has factor 1");
    for l in 2..=4 {
        assert!(max_abs_diff(&a.hidden[l], &b.hidden[l]) > 1e-4, "layer {l} must be scaled");
    }
    let factors: Vec<f64> = lns.layers.iter().map(|b| b.attn_norm.scale()).collect();
    assert_eq!(factors, vec![1.0, 1.0 / 2f64.sqrt(), 1.0 / 3f64.sqrt(), 0.5]);
    assert_eq!(lns.norm.scale(), 1.0, "the final norm is never scaled");
}

#[test]
fn lns_before_the_norm_is_pre_ln_up_to_epsilon() {
    // RMSNorm is scale invariant: N(x / sqrt(l)) = N(x) but for epsilon. The paper's Table 8
    // indeed finds this position no better than Pre-LN.
    let device = cpu();
    let pre = tiny(NormScheme::PreLn).init(&device).unwrap();
    let before = tiny(NormScheme::Lns { position: LnsPosition::BeforeNorm })
        .init(&device)
        .unwrap()
        .load_record(pre.clone().into_record());
    let tokens = random_tokens(1, 10, 256, 5, &device);
    let diff = max_abs_diff(&pre.forward(tokens.clone()), &before.forward(tokens));
    assert!(diff < 1e-3, "{diff}");
}

#[test]
fn lns_positions_put_the_factor_where_they_say() {
    let plan = |position| NormScheme::Lns { position }.plan(4, 12, 0.02).unwrap();
    let p = plan(LnsPosition::AfterNorm);
    assert_eq!(
        (p.norm_output_scale, p.norm_input_scale, p.attn_output_scale, p.ffn_output_scale),
        (0.5, 1.0, 1.0, 1.0)
    );
    let p = plan(LnsPosition::BeforeNorm);
    assert_eq!(
        (p.norm_output_scale, p.norm_input_scale, p.attn_output_scale, p.ffn_output_scale),
        (1.0, 0.5, 1.0, 1.0)
    );
    let p = plan(LnsPosition::AfterSublayer);
    assert_eq!((p.norm_output_scale, p.attn_output_scale, p.ffn_output_scale), (1.0, 0.5, 0.5));
    let p = plan(LnsPosition::AfterAttention);
    assert_eq!((p.attn_output_scale, p.ffn_output_scale), (0.5, 1.0));
    let p = plan(LnsPosition::AfterFfn);
    assert_eq!((p.attn_output_scale, p.ffn_output_scale), (1.0, 0.5));
}

#[test]
fn mix_ln_has_round_quarter_post_ln_layers() {
    let device = cpu();
    for (n_layers, expected) in [(12, 3), (24, 6), (4, 1), (8, 2)] {
        let scheme = NormScheme::MixLn { post_ln_fraction: 0.25 };
        assert_eq!(scheme.post_ln_layers(n_layers), expected);
        let model =
            LlamaConfig::new(32, 64, n_layers, 2).with_vocab_size(16).with_norm_scheme(scheme).init(&device).unwrap();
        let placements: Vec<Placement> = model.layers.iter().map(|b| b.plan().placement).collect();
        let post = placements.iter().take_while(|p| **p == Placement::Post).count();
        assert_eq!(post, expected, "{n_layers} layers");
        assert!(placements[post..].iter().all(|p| *p == Placement::Pre), "Post-LN layers come first");
    }
    assert_eq!(NormScheme::MixLn { post_ln_fraction: 0.0 }.post_ln_layers(12), 0);
    assert_eq!(NormScheme::MixLn { post_ln_fraction: 1.0 }.post_ln_layers(12), 12);
}

#[test]
fn post_ln_blocks_output_normalised_states() {
    let device = cpu();
    let model = tiny(NormScheme::PostLn).init(&device).unwrap();
    let trace = model.forward_trace(random_tokens(2, 8, 256, 1, &device));
    for (l, h) in trace.hidden.iter().enumerate().skip(1) {
        let rms = values(&h.clone().powf_scalar(2.0).mean_dim(2).sqrt());
        assert!(rms.iter().all(|r| (r - 1.0).abs() < 1e-3), "layer {l}: {rms:?}");
    }
}

#[test]
fn deepnorm_uses_deepnets_constants() {
    let l = 12.0f64;
    assert!((NormScheme::deepnorm_alpha(12) - (2.0 * l).powf(0.25)).abs() < 1e-12);
    assert!((NormScheme::deepnorm_alpha(12) - 2.213_363_839).abs() < 1e-8);
    assert!((NormScheme::deepnorm_beta(12) - 0.319_471_552).abs() < 1e-8);
    let plan = NormScheme::DeepNorm.plan(3, 12, 0.02).unwrap();
    assert_eq!(plan.placement, Placement::Post);
    assert_eq!(plan.residual_scale, NormScheme::deepnorm_alpha(12));
    let beta = NormScheme::deepnorm_beta(12);
    assert_eq!(plan.init.q_k_std, 0.02);
    for std in [plan.init.v_std, plan.init.o_std, plan.init.gate_up_std, plan.init.down_std] {
        assert!((std - 0.02 * beta).abs() < 1e-15);
    }
}

#[test]
fn init_standard_deviations_are_measured_on_the_weights() {
    let device = cpu();
    let config = |scheme| LlamaConfig::new(256, 512, 8, 4).with_vocab_size(64).with_norm_scheme(scheme);
    let sigma = 0.02;

    let model = config(NormScheme::PreLn).init(&device).unwrap();
    let block = &model.layers[5];
    assert_std(&block.self_attn.q_proj.weight.val(), sigma, "pre-ln q");
    assert_std(&block.self_attn.o_proj.weight.val(), sigma, "pre-ln o");
    assert_std(&block.mlp.down_proj.weight.val(), sigma, "pre-ln down");
    assert_std(&model.embed_tokens.weight.val(), sigma, "embedding");

    let model = config(NormScheme::ScaledInit).init(&device).unwrap();
    for block in &model.layers {
        let scaled = sigma / (2.0f64 * 8.0).sqrt();
        assert_std(&block.self_attn.o_proj.weight.val(), scaled, "scaled-init o");
        assert_std(&block.mlp.down_proj.weight.val(), scaled, "scaled-init down");
        assert_std(&block.self_attn.v_proj.weight.val(), sigma, "scaled-init v");
        assert_std(&block.mlp.up_proj.weight.val(), sigma, "scaled-init up");
    }

    let model = config(NormScheme::DepthScaledInit).init(&device).unwrap();
    for (index, block) in model.layers.iter().enumerate() {
        let scaled = sigma / (2.0 * (index + 1) as f64).sqrt();
        assert_std(&block.self_attn.o_proj.weight.val(), scaled, "depth-scaled o");
        assert_std(&block.mlp.down_proj.weight.val(), scaled, "depth-scaled down");
    }

    let model = config(NormScheme::DeepNorm).init(&device).unwrap();
    let beta = NormScheme::deepnorm_beta(8);
    let block = &model.layers[0];
    assert_std(&block.self_attn.q_proj.weight.val(), sigma, "deepnorm q");
    assert_std(&block.self_attn.v_proj.weight.val(), sigma * beta, "deepnorm v");
    assert_std(&block.mlp.gate_proj.weight.val(), sigma * beta, "deepnorm gate");
}

#[test]
fn gates_and_sandwich_norms_have_their_shapes_and_inits() {
    let device = cpu();
    let model = tiny(NormScheme::LayerScale { init: 0.1 }).init(&device).unwrap();
    let gate = model.layers[0].attn_gate.as_ref().unwrap().val();
    assert_eq!(gate.dims(), [64]);
    assert!(values(&gate).iter().all(|&v| (v - 0.1).abs() < 1e-7));
    assert_eq!(model.layers[0].plan().gate, BranchGate::PerChannel { init: 0.1 });

    let model = tiny(NormScheme::SkipInit { init: 0.001 }).init(&device).unwrap();
    let gate = model.layers[3].ffn_gate.as_ref().unwrap().val();
    assert_eq!(gate.dims(), [1]);

    let model = tiny(NormScheme::SandwichLn).init(&device).unwrap();
    assert!(model.layers.iter().all(|b| b.attn_out_norm.is_some() && b.ffn_out_norm.is_some()));
    let model = tiny(NormScheme::PreLn).init(&device).unwrap();
    assert!(model.layers.iter().all(|b| b.attn_out_norm.is_none() && b.attn_gate.is_none()));
}

#[test]
fn schemes_parse_print_and_serialise_round_trip() {
    for scheme in NormScheme::with_every_position() {
        let text = scheme.to_string();
        assert_eq!(text.parse::<NormScheme>().unwrap(), scheme, "{text}");
        let json = serde_json::to_string(&scheme).unwrap();
        assert_eq!(serde_json::from_str::<NormScheme>(&json).unwrap(), scheme, "{json}");
    }
    assert_eq!("LNS".parse::<NormScheme>().unwrap(), NormScheme::default());
    // Numbers print short (they name sweep directories) and parse back.
    for (scheme, text) in [
        (NormScheme::SkipInit { init: 1e30 }, "skip-init:1e30"),
        (NormScheme::LayerScale { init: 1e-7 }, "layer-scale:1e-7"),
        (NormScheme::LayerScale { init: 1.0 }, "layer-scale:1"),
        (NormScheme::MixLn { post_ln_fraction: 0.25 }, "mix-ln:0.25"),
    ] {
        assert_eq!(scheme.to_string(), text);
        assert_eq!(text.parse::<NormScheme>().unwrap(), scheme);
    }
    assert_eq!("mix-ln:0.5".parse::<NormScheme>().unwrap(), NormScheme::MixLn { post_ln_fraction: 0.5 });
    assert_eq!(
        serde_json::from_str::<NormScheme>(r#"{"scheme":"lns"}"#).unwrap(),
        NormScheme::Lns { position: LnsPosition::AfterNorm }
    );
    let err = "layernorm".parse::<NormScheme>().unwrap_err();
    assert!(err.to_string().contains("pre-ln") && err.to_string().contains("sandwich-ln"), "{err}");
    let err = "mix-ln:1.5".parse::<NormScheme>().unwrap_err();
    assert!(matches!(err, ConfigError::OutOfRange { field: "post_ln_fraction", .. }), "{err}");
    assert!("deepnorm:2".parse::<NormScheme>().is_err());
    assert!("peri-ln:0.5".parse::<NormScheme>().is_err());
}

#[test]
fn peri_ln_and_dyt_parse_print_and_serialise() {
    assert!(NormScheme::with_every_position().contains(&NormScheme::PeriLn));
    for text in ["peri-ln", "Peri_LN", "periln"] {
        assert_eq!(text.parse::<NormScheme>().unwrap(), NormScheme::PeriLn, "{text}");
    }
    assert_eq!(NormScheme::PeriLn.to_string(), "peri-ln");
    assert_eq!(serde_json::to_string(&NormScheme::PeriLn).unwrap(), r#"{"scheme":"peri-ln"}"#);
    assert_eq!(serde_json::from_str::<NormScheme>(r#"{"scheme":"peri-ln"}"#).unwrap(), NormScheme::PeriLn);
    let err = "nope".parse::<NormScheme>().unwrap_err().to_string();
    assert!(err.contains("peri-ln"), "the error lists peri-ln: {err}");

    // A model config with DyT round-trips; one written before DyT existed loads with alpha 0.5.
    let config = tiny(NormScheme::PeriLn).with_norm_kind(NormKind::Dyt).with_dyt_alpha_init(Some(0.2));
    let json = serde_json::to_string(&config).unwrap();
    assert!(json.contains(r#""norm_kind":"dyt""#) && json.contains(r#""dyt_alpha_init":0.2"#), "{json}");
    assert_eq!(LlamaConfig::from_json(&json).unwrap(), config);
    assert_eq!(serde_json::from_str::<LlamaConfig>(&json).unwrap(), config);
    let mut old: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&serde_json::to_string(&LlamaConfig::tiny()).unwrap()).unwrap();
    old.remove("dyt_alpha_init").unwrap();
    let old = serde_json::Value::Object(old).to_string();
    assert_eq!(LlamaConfig::from_json(&old).unwrap().dyt_alpha(), 0.5);
    assert_eq!(serde_json::from_str::<LlamaConfig>(&old).unwrap(), LlamaConfig::tiny());
    let err =
        LlamaConfig::from_json(r#"{"d_model": 64, "d_ff": 128, "n_layers": 2, "n_heads": 4, "norm_kind": "tanh"}"#)
            .unwrap_err()
            .to_string();
    assert!(err.contains("dyt"), "the error lists the kinds: {err}");
    let err =
        tiny(NormScheme::PreLn).with_norm_kind(NormKind::Dyt).with_dyt_alpha_init(Some(-1.0)).init(&cpu()).unwrap_err();
    assert!(matches!(err, ConfigError::OutOfRange { field: "dyt_alpha_init", .. }), "{err}");
}

#[test]
fn a_gate_starts_at_zero_or_above() {
    for name in ["layer-scale:-1", "skip-init:-0.5", "layer-scale:inf", "skip-init:1e40"] {
        let err = name.parse::<NormScheme>().and_then(|scheme| scheme.validate()).unwrap_err();
        assert!(matches!(err, ConfigError::OutOfRange { field: "init", .. }), "{name}: {err}");
    }
    for name in ["layer-scale:0.1", "skip-init:0", "layer-scale:0"] {
        name.parse::<NormScheme>().unwrap().validate().unwrap();
    }
}

/// Adds a random normal value to every norm weight (1-D parameters), so that no two norms of a
/// block are interchangeable.
struct PerturbNorms;

impl ModuleMapper for PerturbNorms {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        if D != 1 {
            return param;
        }
        param.map(|t| {
            let noise = Tensor::<D>::random(t.shape(), burn::tensor::Distribution::Normal(0.0, 0.5), &t.device());
            t + noise
        })
    }
}

#[test]
fn a_peri_ln_model_is_sandwich_blocks_after_a_normalised_embedding() {
    let device = cpu();
    let config = tiny(NormScheme::PeriLn);
    let model = config.init(&device).unwrap();
    assert!(model.layers.iter().all(|b| b.plan().placement == Placement::Sandwich && b.attn_norm.scale() == 1.0));
    let sandwich = tiny(NormScheme::SandwichLn).init(&device).unwrap();
    assert!(sandwich.embed_norm.is_none(), "Sandwich-LN feeds the raw embedding to block 1");
    let tokens = random_tokens(2, 6, 256, 11, &device);

    // At init (gamma 1), block 1's input is each embedding row divided by its RMS, by hand.
    let embedded = values(&model.embed_tokens.forward(tokens.clone()));
    let expected: Vec<f32> = embedded
        .chunks(64)
        .flat_map(|row| {
            let rms = (row.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / 64.0 + 1e-6).sqrt();
            row.iter().map(move |&v| (v as f64 / rms) as f32)
        })
        .collect();
    let trace = model.forward_trace(tokens.clone());
    let diff = values(&trace.hidden[0]).iter().zip(&expected).map(|(a, b)| (a - b).abs()).fold(0.0, f32::max);
    assert!(diff < 1e-5, "{diff}");

    // With every norm weight distinct, the model equals the composition written out from its
    // modules: x0 = Ne(embed), h = x + Na'(Attn(Na(x))), y = h + Nf'(FFN(Nf(h))), then the final norm.
    let model = model.map(&mut PerturbNorms);
    let trace = model.forward_trace(tokens.clone());
    let rope = RotaryEmbedding::new(config.head_dim(), config.rope_theta).tables(0, 6, &device);
    let out = |norm: &Option<Norm>| norm.as_ref().expect("Peri-LN has output norms").clone();
    let mut x = model.embed_norm.as_ref().unwrap().forward(model.embed_tokens.forward(tokens));
    assert!(max_abs_diff(&x, &trace.hidden[0]) < 1e-6);
    for (index, block) in model.layers.iter().enumerate() {
        let attn = block.self_attn.forward(block.attn_norm.forward(x.clone()), &rope, None);
        let h = x + out(&block.attn_out_norm).forward(attn);
        let y = h.clone() + out(&block.ffn_out_norm).forward(block.mlp.forward(block.ffn_norm.forward(h.clone())));
        assert!(max_abs_diff(&h, &trace.after_attention[index]) < 1e-5, "block {}", index + 1);
        assert!(max_abs_diff(&y, &trace.hidden[index + 1]) < 1e-5, "block {}", index + 1);
        x = y;
    }
    let logits = model.lm_head.as_ref().unwrap().forward(model.norm.forward(x));
    assert!(max_abs_diff(&logits, &trace.logits) < 1e-5);
}

#[test]
fn lns_over_dyt_scales_each_block_norm_by_one_over_sqrt_l() {
    let device = cpu();
    let model = tiny(NormScheme::default()).with_norm_kind(NormKind::Dyt).init(&device).unwrap();
    let x = randn([2, 3, 64], &device);
    for (index, block) in model.layers.iter().enumerate() {
        let Norm::Dyt(norm) = &block.ffn_norm else { panic!("a DyT model has DyT norms") };
        // gamma 1, beta 0, alpha 0.5: N(x) = tanh(0.5 x) / sqrt(l).
        let expected = (x.clone() * 0.5).tanh() / ((index + 1) as f64).sqrt();
        assert!(max_abs_diff(&norm.forward(x.clone()), &expected) < 1e-6, "layer {}", index + 1);
        assert_eq!(values(&norm.alpha.val()), vec![0.5]);
    }
    assert_eq!(model.norm.scale(), 1.0, "the final norm is never scaled");
    let model =
        tiny(NormScheme::PeriLn).with_norm_kind(NormKind::Dyt).with_dyt_alpha_init(Some(0.2)).init(&device).unwrap();
    let Some(Norm::Dyt(norm)) = &model.embed_norm else { panic!("Peri-LN over DyT has a DyT embedding norm") };
    assert_eq!(values(&norm.alpha.val()), vec![0.2], "alpha starts at dyt_alpha_init");
}

#[test]
fn computed_parameter_counts_include_dyt_alpha_and_peri_ln_norms() {
    let device = cpu();
    for kind in NormKind::ALL {
        for scheme in [NormScheme::PeriLn, NormScheme::SandwichLn, NormScheme::default()] {
            let config = tiny(scheme.clone()).with_norm_kind(kind);
            let model = config.init(&device).unwrap();
            assert_eq!(model.num_params(), config.num_params(), "{scheme} {kind:?}");
        }
    }
    // Peri-LN has Sandwich-LN's parameters plus one embedding norm; DyT's norm is 2d + 1.
    let count = |scheme, kind| tiny(scheme).with_norm_kind(kind).num_params();
    assert_eq!(count(NormScheme::PeriLn, NormKind::RmsNorm) - count(NormScheme::SandwichLn, NormKind::RmsNorm), 64);
    assert_eq!(count(NormScheme::PreLn, NormKind::Dyt) - count(NormScheme::PreLn, NormKind::LayerNorm), 2 * 4 + 1);
}

#[test]
fn peri_ln_and_dyt_train_with_finite_falling_loss() {
    for config in [
        tiny(NormScheme::PeriLn),
        tiny(NormScheme::default()).with_norm_kind(NormKind::Dyt),
        tiny(NormScheme::PeriLn).with_norm_kind(NormKind::Dyt),
    ] {
        let what = format!("{} over {:?}", config.norm_scheme, config.norm_kind);
        let losses = common::train_on_one_batch(&config, 8).0;
        assert!(losses.iter().all(|l| l.is_finite()), "{what}: {losses:?}");
        assert!(losses[7] < losses[0] - 0.5, "{what}: the loss must fall: {losses:?}");
        assert!(losses.windows(2).filter(|w| w[1] < w[0]).count() >= 5, "{what}: mostly falling: {losses:?}");
    }
}

#[cfg(feature = "hf")]
#[test]
fn hugging_face_export_refuses_peri_ln_and_dyt_by_name() {
    use layernorm_scaling::hf::{export_hf, hf_config_json};
    let device = cpu();
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (tiny(NormScheme::PeriLn), "peri-ln", "peri-ln"),
        (tiny(NormScheme::default()).with_norm_kind(NormKind::Dyt), "`lns`", "DyT"),
        (tiny(NormScheme::PreLn).with_norm_kind(NormKind::Dyt), "`pre-ln`", "DyT"),
    ];
    for (index, (config, scheme, named)) in cases.into_iter().enumerate() {
        let model = config.init(&device).unwrap();
        let out = dir.path().join(index.to_string());
        let err = export_hf(&model, &config, &out, None).unwrap_err().to_string();
        for part in [scheme, named, "cannot be expressed in a", "own format"] {
            assert!(err.contains(part), "{part:?} missing from: {err}");
        }
        assert!(!out.exists(), "nothing is written");
    }
    let err = hf_config_json(&tiny(NormScheme::PreLn).with_norm_kind(NormKind::Dyt)).unwrap_err().to_string();
    assert!(err.contains("DyT") && err.contains("RMSNorm"), "{err}");
}

/// The scheme table is the one source: the docs' table, the error's list and every row's names
/// come from it, and each name and alias parses to its row's scheme.
#[test]
fn the_scheme_table_drives_parsing_display_and_the_docs() {
    use layernorm_scaling::norm::{scheme_names, schemes_markdown, SchemeArgument, SCHEMES};

    let docs = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/schemes.md")).unwrap();
    let table = schemes_markdown();
    assert!(docs.contains(&table), "docs/schemes.md must hold the table `schemes_markdown()` writes:\n{table}");

    assert_eq!(NormScheme::defaults().len(), SCHEMES.len());
    for (info, scheme) in SCHEMES.iter().zip(NormScheme::defaults()) {
        assert_eq!(scheme.info().name, info.name);
        for name in std::iter::once(&info.name).chain(info.aliases) {
            assert_eq!(name.parse::<NormScheme>().unwrap(), scheme, "{name}");
            assert_eq!(name.to_uppercase().replace('-', "_").parse::<NormScheme>().unwrap(), scheme, "{name}");
        }
        match info.argument() {
            SchemeArgument::None => {
                let err = format!("{}:1", info.name).parse::<NormScheme>().unwrap_err();
                assert!(
                    matches!(&err, ConfigError::Invalid { message, .. } if message.contains("takes no argument")),
                    "{err}"
                );
            }
            SchemeArgument::Number { default, name } => {
                assert_eq!(format!("{}:{default}", info.name).parse::<NormScheme>().unwrap(), scheme);
                // Two arguments are one too many, whatever they are.
                let err = format!("{}:{default}:1", info.name).parse::<NormScheme>().unwrap_err();
                assert!(
                    matches!(&err, ConfigError::Invalid { message, .. } if message.contains("one argument")),
                    "{err}"
                );
                // A known scheme with a bad argument is told what it takes, not listed as unknown.
                let err = format!("{}:x", info.name).parse::<NormScheme>().unwrap_err();
                assert!(matches!(&err, ConfigError::Invalid { message, .. } if message.contains(name)), "{err}");
            }
            SchemeArgument::Position | SchemeArgument::Base => {
                let err = format!("{}:nowhere", info.name).parse::<NormScheme>().unwrap_err();
                let first = if info.argument() == SchemeArgument::Position { "after-norm" } else { "pre-ln" };
                assert!(matches!(&err, ConfigError::Invalid { message, .. } if message.contains(first)), "{err}");
            }
        }
    }
    let err = "lsn".parse::<NormScheme>().unwrap_err().to_string();
    assert!(err.ends_with(&scheme_names()), "{err}");
    assert!(scheme_names().starts_with("pre-ln, lns[:after-norm|before-norm|"), "{}", scheme_names());
    // `with_every_position` adds LNS's four other positions to one of each scheme.
    assert_eq!(NormScheme::with_every_position().len(), SCHEMES.len() + 4);
}
