//! The residual-fused RMSNorm (`fused::residual_rms_norm`: a Pre-LN block's residual add made in
//! the next norm's pass) against add-then-norm, on every compiled backend: the sum, the norm and
//! the gradients of both terms and of gamma, with the sum used again downstream (the backward then
//! adds that gradient in the norm's pass) and without.

mod common;

use burn::tensor::{FloatDType, Tensor};
use common::op_check::{assert_close, check, half_check, on_path, seeded, tolerance};
use common::{all_backends, values};
use layernorm_scaling::fused::{self, OpPath};

/// Two residual sums in a row as in a Pre-LN model: `x1 = base + branch`, `x2 = x1 + f(norm(x1))`,
/// then `norm(x2)`; `x1` has two uses (its norm and the next sum), `x2` one. Inputs `[base, branch,
/// gamma as [1, 1, d]]`; the output is `norm(x2) + x2 / 4`, so that both sums reach the loss.
fn two_residual_sums(t: Vec<Tensor<3>>, fuse: bool) -> Tensor<3> {
    let d = t[2].dims()[2];
    let gamma = t[2].clone().reshape([d]);
    let norm = |base: Tensor<3>, branch: Tensor<3>, scale: f64| {
        if fuse {
            fused::residual_rms_norm(base, branch, gamma.clone(), 1e-6, scale)
        } else {
            let x = base + branch;
            (x.clone(), fused::rms_norm(x, gamma.clone(), 1e-6, scale))
        }
    };
    let (x1, y1) = norm(t[0].clone(), t[1].clone(), 1.0);
    let (x2, y2) = norm(x1, y1.tanh() * 0.5, 0.5);
    y2 + x2 * 0.25
}

fn inputs(shape: [usize; 3], device: &burn::tensor::Device) -> [Tensor<3>; 3] {
    let d = shape[2];
    [seeded(shape, 1, device), seeded(shape, 2, device) * 0.5, seeded([1, 1, d], 3, device) + 1.0]
}

#[test]
fn the_fused_sum_and_norm_match_add_then_norm_on_every_backend() {
    for (backend, device) in all_backends() {
        // The last shape: rows wider than a GPU kernel's 256 units, more rows than its partial sums.
        for shape in [[2, 5, 7], [1, 1, 64], [3, 33, 40], [2, 300, 520]] {
            let [base, branch, gamma] = inputs(shape, &device);
            let weights = seeded(shape, 4, &device);
            let tol = if shape[1] > 100 { 4.0 * tolerance(backend) } else { tolerance(backend) };
            // Against Burn's decomposed ops (the reference path adds, then normalises); with a
            // backward pass promised, the sum's other gradient is added in the norm's kernel.
            let inputs = [base, branch, gamma];
            check(&format!("{backend} residual_rms_norm {shape:?}"), &inputs, &weights, tol, |t| {
                fused::with_backward_following(|| two_residual_sums(t, true))
            });
            check(&format!("{backend} residual_rms_norm {shape:?}, no promise"), &inputs, &weights, tol, |t| {
                two_residual_sums(t, true)
            });
        }
    }
}

/// In f32 the fused op is the separate add and the fused norm to the bit: the sum is added in the
/// inputs' type, and the backward adds the other gradient to the norm's in f32 before it is stored.
#[test]
fn in_f32_the_fused_op_equals_the_separate_add_bit_for_bit() {
    for (backend, device) in all_backends() {
        let shape = [2, 9, 48];
        let inputs = inputs(shape, &device);
        let weights = seeded(shape, 5, &device);
        let op = |fuse: bool| move |t| fused::with_backward_following(|| two_residual_sums(t, fuse));
        let [(fused_out, fused_grads), (separate_out, separate_grads)] =
            [true, false].map(|fuse| on_path(OpPath::Fused, &inputs, &weights, &op(fuse)));
        assert_eq!(fused_out, separate_out, "{backend}: output");
        for (i, (fused, separate)) in fused_grads.iter().zip(&separate_grads).enumerate() {
            assert_eq!(fused, separate, "{backend}: gradient of input {i}");
        }
    }
}

#[test]
fn half_inputs_match_the_f32_reference_within_the_half_types_precision() {
    for (backend, device) in all_backends() {
        for (half, tol) in [(FloatDType::F16, 4e-3), (FloatDType::BF16, 3e-2)] {
            if !device.supports_dtype(half) {
                continue;
            }
            let shape = [2, 9, 16];
            let weights = seeded(shape, 6, &device);
            half_check(
                &format!("{backend} {half:?} residual_rms_norm"),
                &inputs(shape, &device),
                &weights,
                half,
                tol,
                |t| fused::with_backward_following(|| two_residual_sums(t, true)),
            );
        }
    }
}

/// The sum alone (its norm unused) and the norm alone (the sum unused) each get their gradients;
/// a branch of another type is cast to the base's first; mismatched shapes are refused by name.
#[test]
fn unused_outputs_mixed_types_and_bad_shapes() {
    for (backend, device) in all_backends() {
        let shape = [2, 3, 8];
        let [base, branch, gamma] = inputs(shape, &device);
        let gamma = gamma.reshape([8]);
        let weights = seeded(shape, 7, &device);
        for keep_sum in [true, false] {
            let pick = |t: Vec<Tensor<3>>| {
                let (x, y) = fused::residual_rms_norm(t[0].clone(), t[1].clone(), gamma.clone(), 1e-6, 1.0);
                if keep_sum {
                    x
                } else {
                    y
                }
            };
            check(
                &format!("{backend} keep_sum={keep_sum}"),
                &[base.clone(), branch.clone()],
                &weights,
                tolerance(backend),
                pick,
            );
        }
        if device.supports_dtype(FloatDType::F16) {
            let (x, y) =
                fused::residual_rms_norm(base.clone(), branch.clone().cast(FloatDType::F16), gamma.clone(), 1e-6, 1.0);
            let separate = base.clone() + branch.clone().cast(FloatDType::F16).cast(base.dtype());
            assert_close(&format!("{backend} mixed types: sum"), &values(&x), &values(&separate), 0.0);
            let norm = fused::rms_norm(separate, gamma.clone(), 1e-6, 1.0);
            assert_close(&format!("{backend} mixed types: norm"), &values(&y), &values(&norm), 0.0);
        }
        // No rows: empty results, and gamma's gradient zero. (Burn 0.22.1's own element-wise ops
        // on empty tensors overflow over wgpu, so the loss is the plain sum of both outputs.)
        let trainable = device.clone().autodiff();
        let empty = Tensor::<3>::zeros([0, 3, 8], &trainable).require_grad();
        let ones = Tensor::<1>::ones([8], &trainable).require_grad();
        let (x, y) = fused::residual_rms_norm(empty.clone(), empty.clone(), ones.clone(), 1e-6, 1.0);
        assert_eq!((values(&x).len(), values(&y).len()), (0, 0), "{backend}: no rows");
        let grads = (x.sum() + y.sum()).backward();
        assert_eq!(values(&ones.grad(&grads).unwrap()), vec![0.0; 8], "{backend}: no rows");
        let wrong = seeded([2, 4, 8], 8, &device);
        let refused = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            fused::residual_rms_norm(base.clone(), wrong, gamma.clone(), 1e-6, 1.0)
        }));
        let message = refused.err().and_then(|e| e.downcast_ref::<String>().cloned()).unwrap_or_default();
        assert!(message.contains("one shape"), "{backend}: {message}");
    }
}

/// Every parameter's gradient of the tiny model: the blocks' residual adds made in the norms
/// (fused path) against Burn's separate adds and norms (reference path), on every backend.
#[test]
fn the_models_gradients_match_the_reference_path_on_every_backend() {
    use burn::module::{Module, ModuleVisitor, Param};
    use burn::tensor::Gradients;
    use layernorm_scaling::fused::with_path;
    use layernorm_scaling::LlamaConfig;

    struct Grads<'a> {
        grads: &'a Gradients,
        found: Vec<Vec<f32>>,
    }
    impl ModuleVisitor for Grads<'_> {
        fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
            let grad = param.val().grad(self.grads).expect("every parameter gets a gradient");
            self.found.push(values(&grad));
        }
    }
    for (backend, device) in all_backends() {
        let device = device.autodiff();
        let config = LlamaConfig::tiny().with_n_kv_heads(Some(2));
        let model = config.init(&device).unwrap().map(&mut common::Redraw::new(31, 0.02));
        let tokens = common::random_tokens(2, 16, 256, 32, &device);
        let targets = common::random_tokens(2, 16, 256, 33, &device);
        // The fused path with a backward pass promised (the norms add the residual gradients),
        // the fused path without, and the reference path.
        let gradients = |path: OpPath, promised: bool| {
            with_path(path, || {
                let loss = || model.next_token_loss(tokens.clone(), targets.clone());
                let loss = if promised { fused::with_backward_following(loss) } else { loss() };
                let grads = loss.backward();
                let mut visitor = Grads { grads: &grads, found: Vec::new() };
                model.visit(&mut visitor);
                visitor.found
            })
        };
        let reference = gradients(OpPath::Reference, false);
        for promised in [true, false] {
            let fused = gradients(OpPath::Fused, promised);
            assert_eq!(fused.len(), reference.len());
            for (i, (fused, reference)) in fused.iter().zip(&reference).enumerate() {
                let what = format!("{backend} (promised: {promised}): gradient of parameter {i}");
                assert_close(&what, fused, reference, 10.0 * tolerance(backend));
            }
        }
    }
}
