//! The baselines of 2025-26: the schemes `reordered-norm`, `completep` and `gpas`, and the norm
//! kinds `derf` and `bhyt`. Each is checked against values computed here by hand (erf from a
//! table, tanh and SiLU in f64), against its formula written out from the model's own modules,
//! trained 20 steps, and saved and loaded back.

mod common;

use burn::module::{Module, Param};
use burn::tensor::{Tensor, TensorData};
use common::{cpu, max_abs_diff, random_tokens, values, Redraw};
use layernorm_scaling::model::RotaryEmbedding;
use layernorm_scaling::norm::{
    gpas, BoundedTanhScalingConfig, DynamicErfScalingConfig, GpasBase, Norm, Placement, BHYT_KAPPA,
};
use layernorm_scaling::{ConfigError, LlamaConfig, NormKind, NormScheme};

/// A 2-layer model of width 64 over a 256-token vocabulary.
fn two_layers(scheme: &str) -> LlamaConfig {
    LlamaConfig::new(64, 128, 2, 4).with_vocab_size(256).with_norm_scheme(scheme.parse().unwrap())
}

fn tensor(values: &[f32], device: &burn::tensor::Device) -> Tensor<1> {
    Tensor::from_data(TensorData::new(values.to_vec(), [values.len()]), device)
}

fn assert_close(got: &[f32], expected: &[f64], tolerance: f64, what: &str) {
    assert_eq!(got.len(), expected.len(), "{what}");
    for (i, (&g, &e)) in got.iter().zip(expected).enumerate() {
        assert!((g as f64 - e).abs() <= tolerance * e.abs().max(1.0), "{what}[{i}]: {g} vs {e}");
    }
}

#[test]
fn derf_matches_erf_from_a_table_and_its_gradient() {
    let device = cpu().autodiff();
    let mut norm = DynamicErfScalingConfig::new(4, 4).with_alpha_init(0.5).init(&device).unwrap();
    norm.shift = Param::from_tensor(tensor(&[0.25], &device));
    norm.gamma = Param::from_tensor(tensor(&[1.0, 2.0, -1.0, 0.5], &device));
    norm.beta = Param::from_tensor(tensor(&[0.0, 0.1, 0.2, -0.3], &device));
    // alpha x + s = 0.5, 1.0, -0.25, 0.25 (x = 0.5, 1.5, -1.0, 0.0).
    let x = tensor(&[0.5, 1.5, -1.0, 0.0], &device).require_grad();
    // erf(0.5), erf(1), erf(-0.25), erf(0.25) (Abramowitz and Stegun, table 7.1).
    let erf = [0.520_499_877_8, 0.842_700_792_9, -0.276_326_390_2, 0.276_326_390_2];
    let (gamma, beta, z) = ([1.0, 2.0, -1.0, 0.5], [0.0, 0.1, 0.2, -0.3], [0.5f64, 1.0, -0.25, 0.25]);
    // Layer 4: the output is divided by sqrt(4) = 2.
    let expected: Vec<f64> = (0..4).map(|i| (gamma[i] * erf[i] + beta[i]) / 2.0).collect();
    let y = norm.forward(x.clone());
    assert_close(&values(&y), &expected, 1e-6, "Derf");
    // dY/dx = gamma alpha (2 / sqrt(pi)) exp(-(alpha x + s)^2) / sqrt(l).
    let grads = y.sum().backward();
    let expected: Vec<f64> =
        (0..4).map(|i| gamma[i] * 0.5 * 2.0 / std::f64::consts::PI.sqrt() * (-z[i] * z[i]).exp() / 2.0).collect();
    assert_close(&values(&x.grad(&grads).unwrap()), &expected, 1e-5, "dDerf/dx");
    // dY/ds summed: sum_i gamma_i (2 / sqrt(pi)) exp(-z_i^2) / 2.
    let ds: f64 = (0..4).map(|i| gamma[i] * 2.0 / std::f64::consts::PI.sqrt() * (-z[i] * z[i]).exp() / 2.0).sum();
    assert_close(&values(&norm.shift.val().grad(&grads).unwrap()), &[ds], 1e-5, "dDerf/ds");
}

#[test]
fn bhyt_is_a_tanh_of_the_rms_normalised_input_with_its_gradient() {
    let device = cpu().autodiff();
    let mut norm = BoundedTanhScalingConfig::new(2, 9).init(&device).unwrap();
    norm.gamma = Param::from_tensor(tensor(&[1.5, -0.5], &device));
    let x = tensor(&[3.0, 4.0], &device);
    // rms = sqrt((9 + 16) / 2 + 1e-6); u = x / (kappa rms); y = gamma tanh(lambda u) / sqrt(9).
    let rms = (12.5f64 + 1e-6).sqrt();
    let (lambda, gamma) = (2.0, [1.5, -0.5]);
    let u: Vec<f64> = [3.0, 4.0].iter().map(|x| x / (BHYT_KAPPA * rms)).collect();
    let expected: Vec<f64> = (0..2).map(|i| gamma[i] * (lambda * u[i]).tanh() / 3.0).collect();
    let y = norm.forward(x);
    assert_close(&values(&y), &expected, 1e-6, "BHyT");
    // d sum(Y) / d lambda = sum_i gamma_i u_i (1 - tanh^2(lambda u_i)) / 3.
    let grads = y.sum().backward();
    let dlambda: f64 = (0..2).map(|i| gamma[i] * u[i] * (1.0 - (lambda * u[i]).tanh().powi(2)) / 3.0).sum();
    assert_close(&values(&norm.lambda.val().grad(&grads).unwrap()), &[dlambda], 1e-5, "dBHyT/dlambda");
    // A fresh BHyT norm outputs an RMS near lambda / kappa = 0.2, whatever the input's scale.
    let fresh = BoundedTanhScalingConfig::new(256, 1).init(&cpu()).unwrap();
    for scale in [0.01f32, 1.0, 100.0] {
        let x = common::randn([4, 256], &cpu()) * scale;
        let out = values(&fresh.forward(x));
        let rms = (out.iter().map(|v| (*v as f64).powi(2)).sum::<f64>() / out.len() as f64).sqrt();
        assert!((rms - 0.2).abs() < 0.01, "input scale {scale}: output RMS {rms}");
    }
}

#[test]
fn gpas_scales_the_value_and_passes_the_gradient_unscaled() {
    let device = cpu().autodiff();
    let r = tensor(&[1.0, -2.0, 0.5], &device).require_grad();
    let gate = tensor(&[0.7], &device).require_grad();
    let silu = |g: f64| g / (1.0 + (-g).exp());
    let y = gpas(r.clone(), gate.clone());
    let expected: Vec<f64> = [1.0, -2.0, 0.5].iter().map(|v| (1.0 - silu(0.7)) * v).collect();
    assert_close(&values(&y), &expected, 1e-6, "GPAS value");
    // Loss sum(w y): dL/dr = w (not scaled), dL/dg = -SiLU'(g) <w, r>.
    let w = [0.3, 0.2, -1.0];
    let grads = (y * tensor(&[0.3, 0.2, -1.0], &device)).sum().backward();
    assert_close(&values(&r.grad(&grads).unwrap()), &w, 1e-6, "GPAS dL/dr");
    let sigmoid = 1.0 / (1.0 + (-0.7f64).exp());
    let silu_prime = sigmoid * (1.0 + 0.7 * (1.0 - sigmoid));
    let dot: f64 = [0.3, 0.2, -1.0].iter().zip([1.0, -2.0, 0.5]).map(|(w, r)| w * r).sum();
    assert_close(&values(&gate.grad(&grads).unwrap()), &[-silu_prime * dot], 1e-5, "GPAS dL/dg");
}

/// Sets every GPAS gate to `g` (they start at 0, where GPAS is the identity).
fn with_gates(mut model: layernorm_scaling::Llama, g: f32) -> layernorm_scaling::Llama {
    for block in &mut model.layers {
        let device = block.gpas_gate.as_ref().expect("a GPAS block has a gate").val().device();
        block.gpas_gate = Some(Param::from_tensor(tensor(&[g], &device)));
    }
    model
}

#[test]
fn each_scheme_is_its_formula_written_out_from_the_modules_of_a_two_layer_model() {
    let device = cpu();
    let tokens = random_tokens(2, 6, 256, 5, &device);
    let silu = |g: f64| g / (1.0 + (-g).exp());
    for scheme in ["reordered-norm", "completep", "completep:4", "gpas", "gpas:lns"] {
        let config = two_layers(scheme);
        let mut model = config.init(&device).unwrap();
        if scheme.starts_with("gpas") {
            model = with_gates(model, 0.7);
        }
        let trace = model.forward_trace(tokens.clone());
        let rope = RotaryEmbedding::new(config.head_dim(), config.rope_theta).tables(0, 6, &device);
        let mut x = model.embed_tokens.forward(tokens.clone());
        for (index, block) in model.layers.iter().enumerate() {
            let l = (index + 1) as f64;
            let (h, y) = match scheme {
                "reordered-norm" => {
                    assert_eq!(block.plan().placement, Placement::Reordered);
                    let h = x.clone() + block.attn_norm.forward(block.self_attn.forward(x.clone(), &rope, None));
                    let y = h.clone() + block.ffn_norm.forward(block.mlp.forward(h.clone()));
                    (h, y)
                }
                "completep" | "completep:4" => {
                    let base = if scheme == "completep" { 2.0 } else { 4.0 };
                    let branch = base / 2.0; // L_base / L with L = 2.
                    let attn = block.self_attn.forward(block.attn_norm.forward(x.clone()), &rope, None);
                    let h = x.clone() + attn * branch;
                    let y = h.clone() + block.mlp.forward(block.ffn_norm.forward(h.clone())) * branch;
                    (h, y)
                }
                _ => {
                    // Pre-LN (or LNS: the norms carry 1/sqrt(l)), each residual sum scaled by 1 - SiLU(0.7).
                    let lns = scheme == "gpas:lns";
                    assert_eq!(block.attn_norm.scale(), if lns { 1.0 / l.sqrt() } else { 1.0 });
                    let keep = 1.0 - silu(0.7);
                    let attn = block.self_attn.forward(block.attn_norm.forward(x.clone()), &rope, None);
                    let h = (x.clone() + attn) * keep;
                    let y = (h.clone() + block.mlp.forward(block.ffn_norm.forward(h.clone()))) * keep;
                    (h, y)
                }
            };
            assert!(max_abs_diff(&h, &trace.after_attention[index]) < 1e-5, "{scheme}: block {} after attention", l);
            assert!(max_abs_diff(&y, &trace.hidden[index + 1]) < 1e-5, "{scheme}: block {} output", l);
            x = y;
        }
        let logits = model.lm_head.as_ref().unwrap().forward(model.norm.forward(x));
        assert!(max_abs_diff(&logits, &trace.logits) < 1e-5, "{scheme}: logits");
    }
}

#[test]
fn a_gpas_gate_gets_the_gradient_its_stop_gradient_defines() {
    // GPAS's gradient is by design not the loss's derivative: the value of each residual sum `r`
    // is scaled by `1 - s` (`s = SiLU(g)`), its gradient is not. For the last layer's gate, shared
    // by its adds `h = (1 - s) a` and `y = (1 - s) r`, with `A = -s' <dL/dy, r>` (nothing above `y`
    // is scaled) and `B = -s' <G_h, a>` (`G_h` the gradient autodiff gives `h`, `1 / (1 - s)` times
    // the true one, since every path from `h` runs through `r`):
    //   autodiff gives `A + B`; the loss's derivative (central differences) is `A + (1 - s) B`.
    // `A` is computed alone from the head's gradient at `y` (near 0: the final RMSNorm is scale
    // invariant), so `B` follows from the derivative. An init std of 0.2 makes the branches
    // comparable to the residual stream, so that the gate moves the loss well above f32's noise;
    // the weights are drawn by the test's own generator, so the model is the same on every run.
    let device = cpu().autodiff();
    let tokens = random_tokens(4, 17, 256, 3, &device);
    let (inputs, targets) = (tokens.clone().narrow(1, 0, 16), tokens.narrow(1, 1, 16));
    let g = 1.0f64;
    let model = two_layers("gpas").init(&device).unwrap().map(&mut Redraw::new(11, 0.2));
    let model = with_gates(model, g as f32);
    let grads = model.next_token_loss(inputs.clone(), targets.clone()).backward();
    let analytic = values(&model.layers[1].gpas_gate.as_ref().unwrap().val().grad(&grads).unwrap())[0] as f64;

    let sigmoid = 1.0 / (1.0 + (-g).exp());
    let (s, s_prime) = (g * sigmoid, sigmoid * (1.0 + g * (1.0 - sigmoid)));
    let loss_at = |gate: f64| {
        let mut m = model.clone();
        m.layers[1].gpas_gate = Some(Param::from_tensor(tensor(&[gate as f32], &device)));
        values(&m.next_token_loss(inputs.clone(), targets.clone()))[0] as f64
    };
    // Central differences at steps h and h / 2, combined (Richardson) to cancel their O(h^2)
    // error: the loss curves enough in the gate that one step of 0.05 alone is off by up to ~1%.
    let central = |h: f64| (loss_at(g + h) - loss_at(g - h)) / (2.0 * h);
    let derivative = (4.0 * central(0.025) - central(0.05)) / 3.0;
    // dL/dy of the head (final norm, LM head, mean cross-entropy) at the last hidden state y.
    let y = model.forward_trace(inputs.clone()).hidden[2].clone().detach().require_grad();
    let log_probs = burn::tensor::activation::log_softmax(model.logit_lens(y.clone()), 2);
    let head_loss = -log_probs.gather(2, targets.clone().unsqueeze_dim::<3>(2)).mean();
    let head_grads = head_loss.backward();
    let r = y.clone().detach() / (1.0 - s);
    let a = -s_prime * values(&(y.grad(&head_grads).unwrap() * r).sum())[0] as f64;
    let b = (derivative - a) / (1.0 - s);
    assert!(b.abs() > 1e-3, "the first add moves the loss: A {a}, B {b}, derivative {derivative}");
    let expected = a + b;
    assert!((analytic - expected).abs() < 0.02 * expected.abs(), "autodiff {analytic} vs A + B {expected} (A {a})");
    // And it is not the loss's derivative: the stop-gradient shows.
    assert!((analytic - derivative).abs() > 0.2 * derivative.abs(), "{analytic} vs {derivative}");
}

#[test]
fn completep_scales_adams_epsilon_and_keeps_its_init() {
    let scheme: NormScheme = "completep:4".parse().unwrap();
    assert_eq!(scheme.adam_eps_factor(16), 0.25);
    assert_eq!(NormScheme::PreLn.adam_eps_factor(16), 1.0);
    let err = "completep:0.5".parse::<NormScheme>().unwrap_err();
    assert!(matches!(err, ConfigError::OutOfRange { field: "base_depth", value: 0.5, .. }), "{err}");
    let err = two_layers("completep").with_init(Some("scaled".parse().unwrap())).validate().unwrap_err().to_string();
    assert!(err.contains("completep") && err.contains("independent of depth"), "{err}");
}

#[test]
fn new_schemes_and_kinds_parse_print_and_serialise() {
    // A scheme with a number shows it, its default too (as `mix-ln:0.25`).
    let shown = [
        ("reordered-norm", "reordered-norm"),
        ("completep", "completep:2"),
        ("completep:8", "completep:8"),
        ("gpas", "gpas"),
        ("gpas:lns", "gpas:lns"),
    ];
    for (text, display) in shown {
        let scheme: NormScheme = text.parse().unwrap();
        assert_eq!(scheme.to_string(), display);
        let json = serde_json::to_string(&scheme).unwrap();
        assert_eq!(serde_json::from_str::<NormScheme>(&json).unwrap(), scheme, "{json}");
    }
    assert_eq!("gpas:pre-ln".parse::<NormScheme>().unwrap(), NormScheme::Gpas { base: GpasBase::PreLn });
    assert_eq!("olmo2".parse::<NormScheme>().unwrap(), NormScheme::ReorderedNorm);
    assert!("gpas:post-ln".parse::<NormScheme>().is_err());
    for kind in [NormKind::Derf, NormKind::Bhyt] {
        let json = serde_json::to_string(&kind).unwrap();
        assert_eq!(serde_json::from_str::<NormKind>(&json).unwrap(), kind);
    }
    assert_eq!(serde_json::to_string(&NormKind::Bhyt).unwrap(), "\"bhyt\"");
}

#[test]
fn lns_composes_with_derf_and_bhyt_and_bhyt_keeps_an_rms_final_norm() {
    let device = cpu();
    for kind in [NormKind::Derf, NormKind::Bhyt] {
        let model = two_layers("lns").with_norm_kind(kind).init(&device).unwrap();
        for (index, block) in model.layers.iter().enumerate() {
            assert_eq!(block.ffn_norm.kind(), kind);
            assert_eq!(block.ffn_norm.scale(), 1.0 / ((index + 1) as f64).sqrt());
        }
        let final_kind = if kind == NormKind::Bhyt { NormKind::RmsNorm } else { kind };
        assert_eq!(model.norm.kind(), final_kind);
        let config = two_layers("lns").with_norm_kind(kind);
        assert_eq!(model.num_params(), config.num_params(), "{kind:?}");
    }
    let Norm::Bhyt(norm) =
        &two_layers("pre-ln").with_norm_kind(NormKind::Bhyt).init(&device).unwrap().layers[0].attn_norm
    else {
        panic!("a BHyT model has BHyT block norms")
    };
    assert_eq!(values(&norm.lambda.val()), vec![2.0], "lambda starts at 2");
}

#[test]
fn every_new_scheme_and_kind_trains_20_steps_and_round_trips_through_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let configs = [
        two_layers("reordered-norm"),
        two_layers("completep"),
        two_layers("gpas"),
        two_layers("gpas:lns"),
        two_layers("lns").with_norm_kind(NormKind::Derf),
        two_layers("lns").with_norm_kind(NormKind::Bhyt),
    ];
    for (index, config) in configs.iter().enumerate() {
        let what = format!("{} over {:?}", config.norm_scheme, config.norm_kind);
        let (losses, model) = common::train_on_one_batch(config, 20);
        assert!(losses.iter().all(|l| l.is_finite()), "{what}: {losses:?}");
        assert!(losses[19] < losses[0] - 0.5, "{what}: the loss must fall: {losses:?}");
        let model = model.valid();
        let path = dir.path().join(format!("model-{index}"));
        model.clone().save_file(&path).unwrap();
        let loaded = config.init(&cpu()).unwrap().try_load_file(&path).unwrap();
        let tokens = random_tokens(1, 8, 256, 2, &cpu());
        let (a, b) = (model.forward(tokens.clone()), loaded.forward(tokens));
        assert_eq!(values(&a), values(&b), "{what}: the loaded model is the saved one");
    }
}
