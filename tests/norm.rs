//! The method itself: the factor, the two drop-in modules and their checkpoints.

mod common;

use burn::module::{Module, Param};
use burn::nn::{LayerNormConfig, RmsNorm, RmsNormConfig};
use burn::tensor::{Tensor, TensorData};
use common::{cpu, max_abs_diff, randn, values};
use layernorm_scaling::norm::{apply_depth_scale, depth_scale};
use layernorm_scaling::{ConfigError, LayerNormScalingConfig, RmsNormScaling, RmsNormScalingConfig};

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
    assert_eq!(scaled.layer(), 4, "the factor derives from the config, not the checkpoint");

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

    // Layer 1 is exactly the plain norm.
    let first = LayerNormScalingConfig::new(16, 1).init(&device).unwrap().load_record(plain.clone().into_record());
    assert!(max_abs_diff(&first.forward(x.clone()), &plain.forward(x)) < 1e-6);
}
