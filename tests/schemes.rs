//! Every normalisation scheme of the paper, on the tiny preset.

mod common;

use burn::module::{Module, ModuleVisitor, Param};
use burn::tensor::{Gradients, Tensor};
use common::{cpu, max_abs_diff, mean_std, random_tokens, values};
use layernorm_scaling::model::cross_entropy;
use layernorm_scaling::norm::{BranchGate, Placement};
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
    for kind in [NormKind::RmsNorm, NormKind::LayerNorm] {
        for scheme in NormScheme::all() {
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
    assert_eq!((p.norm_layer, p.norm_input_scale, p.attn_output_scale, p.ffn_output_scale), (4, 1.0, 1.0, 1.0));
    let p = plan(LnsPosition::BeforeNorm);
    assert_eq!((p.norm_layer, p.norm_input_scale, p.attn_output_scale, p.ffn_output_scale), (1, 0.5, 1.0, 1.0));
    let p = plan(LnsPosition::AfterSublayer);
    assert_eq!((p.norm_layer, p.attn_output_scale, p.ffn_output_scale), (1, 0.5, 0.5));
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

/// Measured std of a weight; asserts it is within 5% of `expected`.
fn assert_std(weight: &Tensor<2>, expected: f64, what: &str) {
    let (mean, std) = mean_std(weight);
    assert!(mean.abs() < expected * 0.05, "{what}: mean {mean}");
    assert!((std - expected).abs() < expected * 0.05, "{what}: std {std}, expected {expected}");
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
    for scheme in NormScheme::all() {
        let text = scheme.to_string();
        assert_eq!(text.parse::<NormScheme>().unwrap(), scheme, "{text}");
        let json = serde_json::to_string(&scheme).unwrap();
        assert_eq!(serde_json::from_str::<NormScheme>(&json).unwrap(), scheme, "{json}");
    }
    assert_eq!("LNS".parse::<NormScheme>().unwrap(), NormScheme::default());
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
}
