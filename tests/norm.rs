//! The method itself: the factor, the two drop-in modules and their checkpoints, and DyT.

mod common;

use burn::module::{Module, Param};
use burn::nn::{LayerNormConfig, RmsNorm, RmsNormConfig};
use burn::tensor::{Tensor, TensorData};
use common::{cpu, max_abs_diff, randn, values};
use layernorm_scaling::norm::{apply_depth_scale, depth_scale, Norm};
use layernorm_scaling::{
    ConfigError, DynamicTanhScalingConfig, LayerNormScalingConfig, NormKind, RmsNormScaling, RmsNormScalingConfig,
};

#[test]
fn factor_is_one_over_sqrt_of_the_one_based_layer() {
    let expected = [1.0, 0.707_106_781_186_547_5, 0.577_350_269_189_625_8, 0.5, 0.447_213_595_499_958];
    for (l, want) in (1..=5).zip(expected) {
        assert!((depth_scale(l).unwrap() - want).abs() < 1e-15, "layer {l}");
    }
    assert_eq!(depth_scale(100).unwrap(), 0.1);
    assert_eq!(depth_scale(0), Err(ConfigError::LayerZero));
}

#[test]
fn layer_zero_is_a_clear_configuration_error() {
    let err = RmsNormScalingConfig::new(8, 0).init(&cpu()).unwrap_err();
    assert!(err.to_string().contains("layers are numbered from 1"), "{err}");
    let err = LayerNormScalingConfig::new(8, 0).init(&cpu()).unwrap_err();
    assert_eq!(err, ConfigError::LayerZero);
    let err = RmsNormScalingConfig::new(8, 1).with_epsilon(0.0).init(&cpu()).unwrap_err();
    assert!(err.to_string().contains("epsilon"), "{err}");
}

#[test]
fn apply_depth_scale_multiplies_by_the_factor() {
    let device = cpu();
    let x = Tensor::<2>::from_data(TensorData::from([[2.0f32, -4.0], [6.0, 8.0]]), &device);
    let y = apply_depth_scale(x, 4).unwrap();
    assert_eq!(values(&y), vec![1.0, -2.0, 3.0, 4.0]);
}

#[test]
fn rms_norm_scaling_matches_a_hand_computation() {
    let device = cpu();
    // x = [1, 2, 3, 4]: mean square 7.5, rms sqrt(7.5 + 1e-5); layer 4 halves the output.
    let norm = RmsNormScalingConfig::new(4, 4).init(&device).unwrap();
    let x = Tensor::<2>::from_data(TensorData::from([[1.0f32, 2.0, 3.0, 4.0]]), &device);
    let rms = (7.5f64 + 1e-5).sqrt();
    let expected: Vec<f32> = [1.0, 2.0, 3.0, 4.0].iter().map(|v| (v / rms * 0.5) as f32).collect();
    let got = values(&norm.forward(x));
    for (g, e) in got.iter().zip(&expected) {
        assert!((g - e).abs() < 1e-6, "{got:?} vs {expected:?}");
    }
}

#[test]
fn output_rms_of_rms_norm_scaling_is_gamma_over_sqrt_layer() {
    let device = cpu();
    let gamma = 1.5f32;
    for layer in [1, 2, 7, 16] {
        let mut norm = RmsNormScalingConfig::new(64, layer).with_epsilon(1e-6).init(&device).unwrap();
        norm.gamma = Param::from_tensor(Tensor::ones([64], &device) * gamma);
        let x = randn([4, 16, 64], &device) * 3.0;
        let y = norm.forward(x);
        let row_rms = y.powf_scalar(2.0).mean_dim(2).sqrt(); // [4, 16, 1]
        let expected = gamma as f64 / (layer as f64).sqrt();
        for rms in values(&row_rms) {
            assert!((rms as f64 - expected).abs() < 1e-4 * expected, "layer {layer}: rms {rms} vs {expected}");
        }
    }
}

#[test]
fn no_parameter_is_added() {
    let device = cpu();
    let scaled = RmsNormScalingConfig::new(32, 5).init(&device).unwrap();
    let plain = RmsNormConfig::new(32).init(&device);
    assert_eq!(scaled.num_params(), plain.num_params());
    let scaled = LayerNormScalingConfig::new(32, 5).init(&device).unwrap();
    let plain = LayerNormConfig::new(32).init(&device);
    assert_eq!(scaled.num_params(), plain.num_params());
}

#[test]
fn rms_norm_checkpoints_load_both_ways() {
    let device = cpu();
    let dir = tempfile::tempdir().unwrap();
    let mut plain = RmsNormConfig::new(16).with_epsilon(1e-6).init(&device);
    plain.gamma = Param::from_tensor(randn([16], &device));
    let x = randn([3, 16], &device);

    // RmsNorm file -> RmsNormScaling of layer 4: same gamma, output halved.
    let path = dir.path().join("rms_norm.bpk");
    plain.clone().save_file(&path).unwrap();
    let scaled = RmsNormScalingConfig::new(16, 4).with_epsilon(1e-6).init(&device).unwrap().load_file(&path);
    assert_eq!(values(&scaled.gamma.val()), values(&plain.gamma.val()));
    assert!(max_abs_diff(&scaled.forward(x.clone()), &(plain.forward(x.clone()) * 0.5)) < 1e-6);
    assert_eq!(scaled.scale(), 0.5, "the factor derives from the config, not the checkpoint");

    // RmsNormScaling file -> RmsNorm: the same gamma comes back.
    let path = dir.path().join("rms_norm_scaling.bpk");
    let mut trained = RmsNormScalingConfig::new(16, 9).init(&device).unwrap();
    trained.gamma = Param::from_tensor(randn([16], &device));
    trained.clone().save_file(&path).unwrap();
    let back: RmsNorm = RmsNormConfig::new(16).init(&device).load_file(&path);
    assert_eq!(values(&back.gamma.val()), values(&trained.gamma.val()));

    // And the conversion functions.
    let wrapped = RmsNormScaling::from_rms_norm(back, 9).unwrap();
    assert!((wrapped.scale() - 1.0 / 3.0).abs() < 1e-15);
    assert!(RmsNormScaling::from_rms_norm(wrapped.clone().into_rms_norm(), 0).is_err());
}

#[test]
fn layer_norm_checkpoints_load_both_ways_and_outputs_scale() {
    let device = cpu();
    let mut plain = LayerNormConfig::new(16).init(&device);
    plain.gamma = Param::from_tensor(randn([16], &device));
    plain.beta = Some(Param::from_tensor(randn([16], &device)));
    let x = randn([3, 5, 16], &device);

    let scaled = LayerNormScalingConfig::new(16, 9).init(&device).unwrap().load_record(plain.clone().into_record());
    assert!(max_abs_diff(&scaled.forward(x.clone()), &(plain.forward(x.clone()) / 3.0)) < 1e-5);

    let back = LayerNormConfig::new(16).init(&device).load_record(scaled.clone().into_record());
    assert!(max_abs_diff(&back.forward(x.clone()), &plain.forward(x.clone())) < 1e-6);

    // Layer 1 is the plain norm: the same function, computed by the fused kernel where Burn's
    // LayerNorm takes its own ops, so to f32 rounding of outputs up to ~5 (as the scaled one above;
    // 1e-6 failed now and then on random inputs).
    let first = LayerNormScalingConfig::new(16, 1).init(&device).unwrap().load_record(plain.clone().into_record());
    assert!(max_abs_diff(&first.forward(x.clone()), &plain.forward(x)) < 1e-5);
}

/// `tanh` of the four inputs `alpha * x` below, from tables (to 16 digits).
const TANH_OF: [(f64, f64); 4] = [
    (-1.0, -0.761_594_155_955_764_9),
    (-0.25, -0.244_918_662_403_709_1),
    (0.5, 0.462_117_157_260_009_8),
    (1.5, 0.905_148_253_644_866_6),
];

#[test]
fn dyt_matches_a_hand_computation_with_and_without_the_depth_factor() {
    let device = cpu();
    // x = [-2, -0.5, 1, 3] and alpha = 0.5 (the default): alpha * x = [-1, -0.25, 0.5, 1.5].
    let x = Tensor::<2>::from_data(TensorData::from([[-2.0f32, -0.5, 1.0, 3.0]]), &device);
    let gamma = [1.0, 2.0, -1.0, 0.5];
    let beta = [0.1, 0.0, -0.2, 0.3];
    // gamma * tanh(alpha x) + beta, term by term.
    let layer_one =
        [-0.661_594_155_955_764_9, -0.489_837_324_807_418_2, -0.662_117_157_260_009_8, 0.752_574_126_822_433_3];
    for (i, (alpha_x, tanh)) in TANH_OF.iter().enumerate() {
        assert_eq!(*alpha_x, [-2.0, -0.5, 1.0, 3.0][i] * 0.5);
        assert!((gamma[i] * tanh + beta[i] - layer_one[i]).abs() < 1e-15);
    }
    for (layer, factor) in [(1, 1.0), (4, 0.5), (9, 1.0 / 3.0)] {
        let mut norm = DynamicTanhScalingConfig::new(4, layer).init(&device).unwrap();
        norm.gamma = Param::from_tensor(Tensor::from_data(TensorData::from(gamma.map(|g| g as f32)), &device));
        norm.beta = Param::from_tensor(Tensor::from_data(TensorData::from(beta.map(|b| b as f32)), &device));
        assert_eq!(norm.scale(), factor);
        let got = values(&norm.forward(x.clone()));
        for (g, e) in got.iter().zip(layer_one) {
            assert!((*g as f64 - e * factor).abs() < 1e-6, "layer {layer}: {got:?}");
        }
    }
    // A fresh DyT (gamma 1, beta 0) is tanh(0.5 x), the same on every row of a 3-D input.
    let fresh = DynamicTanhScalingConfig::new(4, 1).init(&device).unwrap();
    let got = values(&fresh.forward(x.reshape([1, 1, 4]).repeat_dim(1, 2)));
    let expected: Vec<f64> = TANH_OF.iter().map(|(_, t)| *t).collect();
    for (i, g) in got.iter().enumerate() {
        assert!((*g as f64 - expected[i % 4]).abs() < 1e-6, "{got:?}");
    }
}

#[test]
fn dyt_alpha_gets_a_finite_non_zero_gradient() {
    let device = cpu().autodiff();
    // Layer 4, gamma 1, beta 0, alpha 0.5: y = tanh(0.5 x) / 2, so for L = sum(y)
    // dL/dalpha = sum(x * (1 - tanh(0.5 x)^2)) / 2. With x = [1, 2]:
    // (1 * (1 - 0.462117^2) + 2 * (1 - 0.761594^2)) / 2 = (0.786448 + 0.839949) / 2 = 0.813198.
    let norm = DynamicTanhScalingConfig::new(2, 4).init(&device).unwrap();
    let x = Tensor::<2>::from_data(TensorData::from([[1.0f32, 2.0]]), &device);
    let grads = norm.forward(x).sum().backward();
    let alpha = values(&norm.alpha.val().grad(&grads).unwrap());
    assert_eq!(alpha.len(), 1);
    assert!(alpha[0].is_finite() && (alpha[0] - 0.813_198).abs() < 1e-5, "{alpha:?}");
    // gamma's gradient is tanh(alpha x) / 2, beta's is 1/2.
    let gamma = values(&norm.gamma.val().grad(&grads).unwrap());
    assert!((gamma[0] - 0.231_058_6).abs() < 1e-6 && (gamma[1] - 0.380_797_1).abs() < 1e-6, "{gamma:?}");
    assert_eq!(values(&norm.beta.val().grad(&grads).unwrap()), vec![0.5, 0.5]);
}

#[test]
fn dyt_has_two_d_model_plus_one_parameters_and_checks_its_config() {
    let device = cpu();
    let norm = DynamicTanhScalingConfig::new(32, 5).init(&device).unwrap();
    assert_eq!(norm.num_params(), 2 * 32 + 1);
    assert_eq!(NormKind::Dyt.num_params(32), 65);
    assert_eq!(values(&norm.alpha.val()), vec![0.5]);
    let norm = DynamicTanhScalingConfig::new(8, 1).with_alpha_init(0.2).init(&device).unwrap();
    assert_eq!(values(&norm.alpha.val()), vec![0.2]);
    assert_eq!(DynamicTanhScalingConfig::new(8, 0).init(&device).unwrap_err(), ConfigError::LayerZero);
    for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        let err = DynamicTanhScalingConfig::new(8, 1).with_alpha_init(bad).init(&device).unwrap_err();
        assert!(matches!(err, ConfigError::OutOfRange { field: "dyt_alpha_init", .. }), "{err}");
    }
}

#[test]
fn norm_kinds_serialise_as_kebab_case_and_dyt_copies_its_weights() {
    for (kind, name) in NormKind::ALL.into_iter().zip(["\"rms-norm\"", "\"layer-norm\"", "\"dyt\""]) {
        assert_eq!(serde_json::to_string(&kind).unwrap(), name);
        assert_eq!(serde_json::from_str::<NormKind>(name).unwrap(), kind);
    }
    let device = cpu();
    let mut trained = NormKind::Dyt.init(16, 1e-6, 0.5, 1.0, &device).unwrap();
    if let Norm::Dyt(norm) = &mut trained {
        norm.alpha = Param::from_tensor(Tensor::from_data(TensorData::from([0.8f32]), &device));
        norm.gamma = Param::from_tensor(randn([16], &device));
        norm.beta = Param::from_tensor(randn([16], &device));
    }
    // Copied into a norm with layer 4's factor: the same weights, the output halved.
    let copy = NormKind::Dyt.init(16, 1e-6, 0.5, 0.5, &device).unwrap().with_weights_of(&trained).unwrap();
    let x = randn([3, 16], &device);
    assert!(max_abs_diff(&copy.forward(x.clone()), &(trained.forward(x) * 0.5)) < 1e-6);
    for bad in [0.0, -0.5, f64::NAN, f64::INFINITY] {
        assert!(NormKind::Dyt.init(16, 1e-6, 0.5, bad, &device).is_err(), "a factor of {bad} was accepted");
    }
    let rms = NormKind::RmsNorm.init(16, 1e-6, 0.5, 1.0, &device).unwrap();
    let err = rms.with_weights_of(&trained).unwrap_err();
    assert!(err.to_string().contains("DyT") && err.to_string().contains("RMSNorm"), "{err}");
}

/// Like Burn's norms, a wrong feature width stops at the norm with both sizes named, instead of
/// broadcasting `[2, 3, 1]` to `[2, 3, 64]` or failing deep inside a multiply.
#[test]
fn every_norm_checks_the_last_dimension_of_its_input() {
    let device = cpu();
    for kind in NormKind::ALL {
        for width in [1, 63] {
            let norm = kind.init(64, 1e-5, 0.5, 1.0 / 2f64.sqrt(), &device).unwrap();
            let x = Tensor::<3>::ones([2, 3, width], &device);
            let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| norm.forward(x)))
                .expect_err(&format!("{} accepted a last dimension of {width}", kind.name()));
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            assert!(message.contains("expected 64") && message.contains(&format!("got {width}")), "{message}");
        }
    }
}
