//! The fused ops (attention, RMSNorm, LayerNorm, SwiGLU, RoPE, linear layers, the loss, the LM head with the loss) against Burn's decomposed ops (the reference path), on every compiled backend:
//! the forward and the gradient of every input, on shapes that stress them; bit-identical results
//! on any number of threads; and a few training steps of the model on both paths.

mod common;

use burn::module::Module;
use burn::optim::{AdamWConfig, GradientsParams};
use burn::tensor::{DType, Device, FloatDType, Tensor, TensorData};
use common::op_check::{assert_close, both_paths, check, half_check, on_path, seeded, tolerance};
use common::{all_backends, cpu, random_tokens, values, Redraw};
use layernorm_scaling::fused::{self, with_path, OpPath};
use layernorm_scaling::model::{lm_head_cross_entropy, RotaryEmbedding};
use layernorm_scaling::LlamaConfig;

#[test]
fn rms_norm_matches_the_reference_on_every_backend() {
    for (backend, device) in all_backends() {
        // The last shape: rows wider than a GPU kernel's 256 units, more rows than its 256 partial sums.
        for (shape, layer) in [([2, 5, 7], 3usize), ([1, 1, 64], 1), ([3, 33, 40], 12), ([2, 300, 520], 5)] {
            let x = seeded(shape, 1, &device);
            let gamma = seeded([shape[2]], 2, &device).reshape([1, 1, shape[2]]) + 1.0;
            let weights = seeded(shape, 3, &device);
            let scale = 1.0 / (layer as f64).sqrt();
            // gamma's gradient sums 600 rows there: f32 rounding grows with the sum.
            let tol = if shape[1] > 100 { 4.0 * tolerance(backend) } else { tolerance(backend) };
            check(&format!("{backend} rms_norm {shape:?}"), &[x, gamma], &weights, tol, |t| {
                let gamma = t[1].clone().reshape([shape[2]]);
                fused::rms_norm(t[0].clone(), gamma, 1e-6, scale)
            });
        }
    }
}

/// More rows than a GPU grid axis holds (65535 cubes), against the reference path on the CPU:
/// Burn 0.22.1's own `sum_dim` over an axis of 65535 or more values comes out short on wgpu over
/// lavapipe (65532 for 70000 ones), so its reference path cannot serve on that device.
#[test]
fn norms_over_more_rows_than_a_grid_axis_match_the_cpu_reference() {
    let shape = [1, 70_000, 4];
    let inputs = |device: &Device| {
        let x = seeded(shape, 29, device);
        (x.clone(), seeded([4], 30, device) + 1.0, seeded([4], 31, device), seeded(shape, 32, device))
    };
    let rms = |t: Vec<Tensor<3>>| fused::rms_norm(t[0].clone(), t[1].clone().reshape([4]), 1e-6, 0.5);
    let layer =
        |t: Vec<Tensor<3>>| fused::layer_norm(t[0].clone(), t[1].clone().reshape([4]), t[2].clone().reshape([4]), 1e-5);
    let run = |path: OpPath, device: &Device| {
        let (x, gamma, beta, weights) = inputs(device);
        let (gamma, beta) = (gamma.reshape([1, 1, 4]), beta.reshape([1, 1, 4]));
        [on_path(path, &[x.clone(), gamma.clone()], &weights, &rms), on_path(path, &[x, gamma, beta], &weights, &layer)]
    };
    let reference = run(OpPath::Reference, &cpu());
    for (backend, device) in all_backends() {
        for ((name, (output, grads)), (want_output, want_grads)) in
            ["rms_norm", "layer_norm"].into_iter().zip(run(OpPath::Fused, &device)).zip(&reference)
        {
            // The weights' gradients sum 70000 rows: f32 rounding grows with the sum.
            let tol = 20.0 * tolerance(backend);
            assert_close(&format!("{backend} {name} {shape:?}: output"), &output, want_output, tol);
            for (i, (grad, want)) in grads.iter().zip(want_grads).enumerate() {
                assert_close(&format!("{backend} {name} {shape:?}: gradient of input {i}"), grad, want, tol);
            }
        }
    }
}

#[test]
fn layer_norm_matches_the_reference_on_every_backend() {
    for (backend, device) in all_backends() {
        // The last shape: rows wider than a GPU kernel's 256 units, more rows than its 256 partial sums.
        for shape in [[2, 5, 7], [1, 1, 64], [3, 33, 40], [2, 300, 520]] {
            let d = shape[2];
            // A row offset far from zero checks the mean's subtraction.
            let x = seeded(shape, 25, &device) + 3.0;
            let gamma = seeded([1, 1, d], 26, &device) + 1.0;
            let beta = seeded([1, 1, d], 27, &device);
            let weights = seeded(shape, 28, &device);
            // The weights' gradients sum 600 rows there: f32 rounding grows with the sum.
            let tol = if shape[1] > 100 { 4.0 * tolerance(backend) } else { tolerance(backend) };
            check(&format!("{backend} layer_norm {shape:?}"), &[x, gamma, beta], &weights, tol, |t| {
                fused::layer_norm(t[0].clone(), t[1].clone().reshape([d]), t[2].clone().reshape([d]), 1e-5)
            });
        }
    }
}

#[test]
fn the_loss_and_its_gradient_match_the_reference_on_every_backend() {
    for (backend, device) in all_backends() {
        // 300 rows: more than the 256 units of the GPU kernel that averages the rows' losses.
        for (tokens, vocab) in [(1, 2), (7, 37), (64, 256), (5, 1000), (300, 50)] {
            let logits = seeded([tokens, vocab], 29, &device) * 4.0;
            let ids: Vec<i64> = (0..tokens).map(|i| ((i * 7919 + 3) % vocab) as i64).collect();
            let targets = Tensor::<1, burn::tensor::Int>::from_data(TensorData::new(ids, [tokens]), &device);
            let results = [OpPath::Fused, OpPath::Reference]
                .map(|path| with_path(path, || fused::cross_entropy_with_gradient(logits.clone(), targets.clone())));
            let [(fused_value, fused_grad), (reference_value, reference_grad)] = results;
            let what = format!("{backend} cross-entropy {tokens} x {vocab}");
            assert_close(
                &format!("{what}: loss"),
                &values(&fused_value),
                &values(&reference_value),
                tolerance(backend),
            );
            assert_close(
                &format!("{what}: gradient"),
                &values(&fused_grad),
                &values(&reference_grad),
                tolerance(backend),
            );
        }
    }
}

#[test]
fn the_lm_head_and_loss_match_the_reference_on_every_backend() {
    for (backend, device) in all_backends() {
        for (tokens, d_model, vocab) in [(1, 3, 2), (7, 5, 37), (5, 8, 1000)] {
            let (hidden, targets) = (seeded([tokens, d_model], 30, &device), lm_head_targets(tokens, vocab, &device));
            // A head of its own, and a tied embedding (the transpose of a `[vocab, d_model]` table).
            let head = seeded([d_model, vocab], 31, &device);
            let tied = seeded([vocab, d_model], 32, &device).transpose();
            for (kind, weight) in [("head", head), ("tied", tied)] {
                let [fused, reference] = [OpPath::Fused, OpPath::Reference].map(|path| {
                    with_path(path, || {
                        let (value, grad_hidden, grad_weight) = fused::lm_head_cross_entropy_with_gradients(
                            hidden.clone(),
                            weight.clone(),
                            targets.clone(),
                        );
                        [values(&value), values(&grad_hidden), values(&grad_weight)]
                    })
                });
                let what = format!("{backend} LM head ({kind}) {tokens} x {d_model} x {vocab}");
                for (part, (fused, reference)) in
                    ["loss", "grad hidden", "grad weight"].iter().zip(fused.iter().zip(&reference))
                {
                    assert_close(&format!("{what}: {part}"), fused, reference, tolerance(backend));
                }
            }
        }
    }
}

/// Target ids `[tokens]` spread over the vocabulary.
fn lm_head_targets(tokens: usize, vocab: usize, device: &Device) -> Tensor<1, burn::tensor::Int> {
    let ids: Vec<i64> = (0..tokens).map(|i| ((i * 7919 + 3) % vocab) as i64).collect();
    Tensor::from_data(TensorData::new(ids, [tokens]), device)
}

#[test]
fn linear_matches_the_reference_on_every_backend() {
    for (backend, device) in all_backends() {
        // Batch dimensions folded into rows; a single row; odd widths; enough rows (2,100) for
        // flex to split the weight's gradient into pieces, the last one shorter.
        for (shape, d_out) in [([2, 5, 7], 3), ([1, 1, 1], 1), ([3, 33, 40], 96), ([4, 525, 24], 20)] {
            let x = seeded(shape, 33, &device);
            let weight = seeded([1, shape[2], d_out], 34, &device);
            let weights = seeded([shape[0], shape[1], d_out], 35, &device);
            // An f32 sum over 2,100 rows rounds: here gemm's own, unsplit, is 8e-5 from the exact
            // (f64) weight gradient, the pieces' 7.5e-5, and the two paths differ by 5e-5.
            let tol = if shape[1] > 500 { 20.0 * tolerance(backend) } else { tolerance(backend) };
            check(&format!("{backend} linear {shape:?} x {d_out}"), &[x, weight], &weights, tol, |t| {
                fused::linear(t[0].clone(), t[1].clone().reshape([shape[2], d_out]))
            });
        }
    }
}

#[test]
fn swiglu_matches_the_reference_on_every_backend() {
    for (backend, device) in all_backends() {
        // Widths 11 and 1: a value a unit; 6: vectors of 2; 176: vectors of 4 (8 on CUDA in half).
        for shape in [[3, 5, 11], [1, 1, 1], [2, 3, 6], [2, 64, 176]] {
            let (gate, up) = (seeded(shape, 4, &device) * 3.0, seeded(shape, 5, &device));
            let weights = seeded(shape, 6, &device);
            check(&format!("{backend} swiglu {shape:?}"), &[gate, up], &weights, tolerance(backend), |t| {
                fused::swiglu(t[0].clone(), t[1].clone())
            });
        }
    }
}

#[test]
fn rope_matches_the_reference_on_every_backend() {
    for (backend, device) in all_backends() {
        for shape in [[2, 5, 3, 8], [1, 1, 1, 2], [2, 70, 4, 16]] {
            let tables = RotaryEmbedding::new(shape[3], 10_000.0).tables(3, shape[1], &device);
            let x = seeded(shape, 7, &device);
            let weights = seeded(shape, 8, &device);
            check(&format!("{backend} rope {shape:?}"), &[x], &weights, tolerance(backend), |t| {
                fused::rope(t[0].clone(), tables.cos(), tables.sin())
            });
        }
    }
}

/// `(batch, seq, heads, kv_heads, head_dim)`: one position, grouped-query heads, a batch of one,
/// odd head sizes, sequences that span several blocks of query rows, and head sizes whose
/// shared-memory tiles hold fewer rows than a block (31 rows at 64, 15 at 128), so that a
/// sequence spans several tiles ending part-way, and a head size past the GPU kernels' 256 (the
/// portable body takes it).
const ATTENTION_SHAPES: [(usize, usize, usize, usize, usize); 9] = [
    (2, 7, 4, 2, 8),
    (1, 1, 2, 2, 4),
    (1, 150, 2, 1, 16),
    (2, 64, 3, 3, 5),
    (1, 129, 6, 2, 12),
    (3, 20, 1, 1, 32),
    (1, 100, 4, 2, 64),
    (1, 40, 2, 1, 128),
    (1, 5, 2, 1, 300),
];

#[test]
fn causal_attention_matches_the_reference_on_every_backend() {
    for (backend, device) in all_backends() {
        for (batch, seq, heads, kv_heads, head_dim) in ATTENTION_SHAPES {
            let q = seeded([batch, seq, heads, head_dim], 9, &device);
            let k = seeded([batch, seq, kv_heads, head_dim], 10, &device);
            let v = seeded([batch, seq, kv_heads, head_dim], 11, &device);
            let weights = seeded([batch, seq, heads, head_dim], 12, &device);
            let what = format!("{backend} attention b{batch} s{seq} h{heads} kv{kv_heads} d{head_dim}");
            let [(fused_out, fused_grads), (reference_out, reference_grads)] =
                both_paths(&[q, k, v], &weights, |t| fused::causal_attention(t[0].clone(), t[1].clone(), t[2].clone()));
            assert_close(&format!("{what}: output"), &fused_out, &reference_out, tolerance(backend));
            for (name, fused, reference) in
                [("q", 0, 0), ("k", 1, 1), ("v", 2, 2)].map(|(name, a, b)| (name, &fused_grads[a], &reference_grads[b]))
            {
                assert_close(&format!("{what}: gradient of {name}"), fused, reference, tolerance(backend));
            }
        }
    }
}

/// Scores that climb along the sequence (2 a key, to 126: past `exp`'s f32 range at 88), so that
/// the forward's reference maximum must move past its rescale margin many times a row, with heads
/// on both sides of the dK, dV split (32: one launch; 64: two).
#[test]
fn attention_with_climbing_scores_matches_the_reference_on_every_backend() {
    for (backend, device) in all_backends() {
        for head_dim in [32, 64] {
            let (batch, seq, heads) = (1, 64, 2);
            let step = 2.0 / (head_dim as f32).sqrt();
            let ramp: Vec<f32> = (0..seq).flat_map(|j| vec![step * j as f32; heads * head_dim]).collect();
            let ramp = Tensor::<4>::from_data(TensorData::new(ramp, [batch, seq, heads, head_dim]), &device);
            let q = seeded([batch, seq, heads, head_dim], 33, &device) * 0.3 + 1.0;
            let k = seeded([batch, seq, heads, head_dim], 34, &device) * 0.3 + ramp;
            let v = seeded([batch, seq, heads, head_dim], 35, &device);
            let weights = seeded([batch, seq, heads, head_dim], 36, &device);
            let what = format!("{backend} attention with climbing scores d{head_dim}");
            // Scores near 126 carry f32's rounding (126 x 6e-8) into every probability.
            check(&what, &[q, k, v], &weights, 4.0 * tolerance(backend), |t| {
                fused::causal_attention(t[0].clone(), t[1].clone(), t[2].clone())
            });
        }
    }
}

#[test]
fn bf16_inputs_take_the_portable_bodies_within_bf16_precision() {
    let device = cpu();
    let x = seeded([2, 9, 16], 13, &device).cast(DType::BF16);
    let gamma = seeded([1, 1, 16], 14, &device).cast(DType::BF16) + 1.0;
    let weights = seeded([2, 9, 16], 15, &device).cast(DType::BF16);
    check("bf16 rms_norm", &[x.clone(), gamma], &weights, 2e-2, |t| {
        fused::rms_norm(t[0].clone(), t[1].clone().reshape([16]), 1e-6, 0.5)
    });
    check("bf16 layer_norm", &[x.clone(), x.clone().narrow(0, 0, 1).narrow(1, 0, 1)], &weights, 2e-2, |t| {
        let gamma = t[1].clone().reshape([16]);
        fused::layer_norm(t[0].clone(), gamma.clone(), gamma * 0.5, 1e-5)
    });
    check("bf16 swiglu", &[x.clone(), x.clone() * 0.5], &weights, 2e-2, |t| fused::swiglu(t[0].clone(), t[1].clone()));
    let q = seeded([2, 9, 2, 8], 16, &device).cast(DType::BF16);
    let weights = seeded([2, 9, 2, 8], 17, &device).cast(DType::BF16);
    check("bf16 attention", &[q.clone(), q.clone() * 0.7, q * -0.3], &weights, 3e-2, |t| {
        fused::causal_attention(t[0].clone(), t[1].clone(), t[2].clone())
    });
}

/// Each op's fused path in a half type against the reference path in f32 on the same (rounded)
/// inputs, forward and every gradient, on every device that computes in that type: on wgpu over
/// Mesa's CPU Vulkan (f16) these are the CubeCL kernels. Tolerances: a few roundings of the half
/// type (f16 keeps 11 bits, bf16 8).
#[test]
fn half_inputs_match_the_f32_reference_within_the_half_types_precision() {
    for (backend, device) in all_backends() {
        for (half, tol) in [(FloatDType::F16, 4e-3), (FloatDType::BF16, 3e-2)] {
            if !device.supports_dtype(half) {
                continue;
            }
            let what = |op: &str| format!("{backend} {half:?} {op}");
            let x = seeded([2, 9, 16], 13, &device);
            let gamma = seeded([1, 1, 16], 14, &device) + 1.0;
            let weights = seeded([2, 9, 16], 15, &device);
            half_check(&what("rms_norm"), &[x.clone(), gamma.clone()], &weights, half, tol, |t| {
                fused::rms_norm(t[0].clone(), t[1].clone().reshape([16]), 1e-6, 0.5)
            });
            half_check(&what("layer_norm"), &[x.clone(), gamma], &weights, half, tol, |t| {
                let gamma = t[1].clone().reshape([16]);
                fused::layer_norm(t[0].clone(), gamma.clone(), gamma * 0.5, 1e-5)
            });
            half_check(&what("swiglu"), &[x.clone() * 2.0, x * 0.5], &weights, half, tol, |t| {
                fused::swiglu(t[0].clone(), t[1].clone())
            });
            let q = seeded([2, 9, 2, 8], 16, &device);
            let weights = seeded([2, 9, 2, 8], 17, &device);
            let tables = RotaryEmbedding::new(8, 10_000.0).tables(0, 9, &device);
            let (cos, sin) = (tables.cos().cast(half), tables.sin().cast(half));
            half_check(&what("rope"), std::slice::from_ref(&q), &weights, half, tol, |t| {
                let (cos, sin) = (cos.clone().cast(t[0].dtype()), sin.clone().cast(t[0].dtype()));
                fused::rope(t[0].clone(), cos, sin)
            });
            half_check(&what("attention"), &[q.clone(), q.clone() * 0.7, q * -0.3], &weights, half, 1.5 * tol, |t| {
                fused::causal_attention(t[0].clone(), t[1].clone(), t[2].clone())
            });
            // The loss takes logits in the half type too; its value is f32, its gradient the logits' type.
            let logits = (seeded([40, 300], 18, &device) * 4.0).cast(half);
            let targets = lm_head_targets(40, 300, &device);
            let (value, grad) = fused::cross_entropy_with_gradient(logits.clone(), targets.clone());
            assert_eq!((value.dtype(), grad.dtype()), (DType::F32, logits.dtype()), "{}", what("loss"));
            let reference = with_path(OpPath::Reference, || {
                fused::cross_entropy_with_gradient(logits.clone().cast(DType::F32), targets.clone())
            });
            assert_close(&what("loss: value"), &values(&value), &values(&reference.0), tol);
            assert_close(&what("loss: gradient"), &values(&grad), &values(&reference.1), tol);
            // The LM head keeps its logits and `softmax - onehot` in the half type (the GPU's
            // kernel reads and writes them so); its value and gradients are f32.
            let hidden = seeded([40, 16], 19, &device).cast(half);
            let weight = (seeded([16, 300], 20, &device) * 0.5).cast(half);
            let (value, grad_hidden, grad_weight) =
                fused::lm_head_cross_entropy_with_gradients(hidden.clone(), weight.clone(), targets.clone());
            let dtypes = [value.dtype(), grad_hidden.dtype(), grad_weight.dtype()];
            assert_eq!(dtypes, [DType::F32; 3], "{}", what("lm head"));
            let reference = with_path(OpPath::Reference, || {
                fused::lm_head_cross_entropy_with_gradients(hidden.cast(DType::F32), weight.cast(DType::F32), targets)
            });
            // Two products in the half type, each rounding its result.
            assert_close(&what("lm head: value"), &values(&value), &values(&reference.0), 2.0 * tol);
            assert_close(&what("lm head: hidden's gradient"), &values(&grad_hidden), &values(&reference.1), 2.0 * tol);
            assert_close(&what("lm head: weight's gradient"), &values(&grad_weight), &values(&reference.2), 2.0 * tol);
        }
    }
}

/// More elements than one grid axis of 256-unit cubes holds (65535 x 256): the element-wise
/// kernels (SwiGLU, RoPE) spread their cubes over the grid's axes. Against the CPU's fused path.
/// SwiGLU's rows are an odd width, so that it takes one value a unit (a vector of 4 would need
/// four times the elements to fill the axis).
#[test]
fn element_wise_ops_over_more_cubes_than_a_grid_axis_match_the_cpu() {
    let shape = [1, 4097, 8, 512]; // 16.8 million elements
    let odd = [1, 4099, 8, 513]; // 16.8 million too
    let run = |device: &Device| {
        let x = seeded(shape, 33, device);
        let tables = RotaryEmbedding::new(shape[3], 10_000.0).tables(0, shape[1], device);
        let rope = fused::rope(x, tables.cos(), tables.sin());
        let x = seeded(odd, 34, device);
        let swiglu = fused::swiglu(x.clone(), x * 0.5);
        [values(&swiglu), values(&rope)]
    };
    let want = run(&cpu());
    for (backend, device) in all_backends() {
        for (name, (got, want)) in ["swiglu", "rope"].into_iter().zip(run(&device).iter().zip(&want)) {
            assert_close(&format!("{backend} {name} {shape:?}"), got, want, tolerance(backend));
        }
    }
}

/// LibTorch's attention runs torch's fused kernels in bf16 too (f32 log-sum-exp inside).
#[cfg(feature = "tch")]
#[test]
fn libtorch_attention_matches_the_reference_in_bf16() {
    let device = layernorm_scaling::parse_device("tch").unwrap();
    for (batch, seq, heads, kv_heads, head_dim) in [(2, 9, 4, 2, 8), (1, 70, 2, 2, 16)] {
        let q = seeded([batch, seq, heads, head_dim], 18, &device).cast(DType::BF16);
        let k = seeded([batch, seq, kv_heads, head_dim], 19, &device).cast(DType::BF16);
        let v = seeded([batch, seq, kv_heads, head_dim], 20, &device).cast(DType::BF16);
        let weights = seeded([batch, seq, heads, head_dim], 21, &device).cast(DType::BF16);
        let [(fused_out, fused_grads), (reference_out, reference_grads)] =
            both_paths(&[q, k, v], &weights, |t| fused::causal_attention(t[0].clone(), t[1].clone(), t[2].clone()));
        let what = format!("tch bf16 attention b{batch} s{seq} h{heads} kv{kv_heads}");
        assert_close(&format!("{what}: output"), &fused_out, &reference_out, 3e-2);
        for (i, name) in ["q", "k", "v"].into_iter().enumerate() {
            assert_close(&format!("{what}: gradient of {name}"), &fused_grads[i], &reference_grads[i], 5e-2);
        }
    }
}

/// The flex kernels split work into pieces of a fixed size and add their sums in piece order.
#[test]
fn flex_kernels_give_the_same_bits_on_any_number_of_threads() {
    let device = cpu();
    let run = || {
        let q = seeded([2, 150, 4, 16], 18, &device).autodiff().require_grad();
        let k = seeded([2, 150, 2, 16], 19, &device).autodiff().require_grad();
        let v = seeded([2, 150, 2, 16], 20, &device).autodiff().require_grad();
        let gamma = seeded([64], 21, &device).autodiff().require_grad();
        let attention = fused::causal_attention(q.clone(), k.clone(), v.clone()).reshape([2, 150, 64]);
        let normed = fused::rms_norm(attention, gamma.clone(), 1e-6, 0.5);
        let projection = seeded([64, 64], 23, &device).autodiff().require_grad();
        let out = fused::linear(fused::swiglu(normed.clone(), normed), projection.clone());
        // Rows enough (1,300) for the weight's gradient to be split into pieces.
        let wide = seeded([1300, 24], 24, &device).autodiff();
        let wide_weight = seeded([24, 40], 25, &device).autodiff().require_grad();
        let wide_out = fused::linear(wide, wide_weight.clone());
        // An LM head large enough for gemm to spread its products over threads.
        let head = seeded([64, 3000], 22, &device).autodiff().require_grad();
        let ids: Vec<i64> = (0..300).map(|i| (i * 7919 % 3000) as i64).collect();
        let targets = Tensor::<1, burn::tensor::Int>::from_data(TensorData::new(ids, [300]), &device);
        let loss = lm_head_cross_entropy(out.clone().reshape([300, 64]), head.clone(), targets);
        let grads = ((out.clone() * out.clone()).sum() + loss.clone() + (wide_out.clone() * wide_out).sum()).backward();
        let mut all = values(&out);
        all.extend(values(&loss));
        for t in [&q, &k, &v] {
            all.extend(values(&t.grad(&grads).unwrap()));
        }
        all.extend(values(&gamma.grad(&grads).unwrap()));
        all.extend(values(&head.grad(&grads).unwrap()));
        all.extend(values(&projection.grad(&grads).unwrap()));
        all.extend(values(&wide_weight.grad(&grads).unwrap()));
        all
    };
    let on = |threads: usize| {
        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
        pool.install(|| with_path(OpPath::Fused, run))
    };
    let one = on(1);
    for threads in [2, 3, 8] {
        let many = on(threads);
        assert!(
            one.iter().zip(&many).all(|(a, b)| a.to_bits() == b.to_bits()),
            "{threads} threads give other bits than one"
        );
    }
}

#[test]
fn training_steps_on_both_paths_give_the_same_losses() {
    let device = cpu().autodiff();
    let config = LlamaConfig::tiny().with_n_kv_heads(Some(2));
    let tokens = random_tokens(4, 48, 256, 22, &device);
    let targets = random_tokens(4, 48, 256, 23, &device);
    let losses = |path: OpPath| {
        with_path(path, || {
            // Drawn by the test's own generator: tests beside this one draw from the device's.
            let mut model = config.init(&device).unwrap().map(&mut Redraw::new(24, 0.02));
            let mut optim = AdamWConfig::new().init();
            (0..6)
                .map(|_| {
                    let loss = model.next_token_loss(tokens.clone(), targets.clone());
                    let value = values(&loss)[0];
                    let grads = GradientsParams::from_grads(loss.backward(), &model);
                    model = optim.step(3e-3, model.clone(), grads);
                    value
                })
                .collect::<Vec<f32>>()
        })
    };
    let (fused, reference) = (losses(OpPath::Fused), losses(OpPath::Reference));
    assert!(fused[5] < fused[0] - 0.05, "the loss falls: {fused:?}");
    assert_close("losses", &fused, &reference, 1e-4);
}

/// Empty products and bad targets, as a hostile review found them: Burn's answer (an empty
/// tensor, or zeros) on both paths, and panics that name the bad value.
#[test]
fn empty_products_and_bad_targets_behave_on_both_paths() {
    let device = cpu();
    for path in [OpPath::Fused, OpPath::Reference] {
        with_path(path, || {
            let zeros = |shape: [usize; 2]| Tensor::<2>::zeros(shape, &device);
            assert_eq!(fused::linear(zeros([0, 5]), zeros([5, 3])).dims(), [0, 3], "{path:?}");
            assert_eq!(fused::linear(zeros([2, 5]), zeros([5, 0])).dims(), [2, 0], "{path:?}");
            let x = Tensor::<3>::zeros([2, 0, 5], &device);
            assert_eq!(fused::linear(x, zeros([5, 3])).dims(), [2, 0, 3], "{path:?}");
            // A sum over nothing is 0.
            let out = fused::linear(Tensor::<2>::ones([2, 0], &device), zeros([0, 3]));
            assert_eq!(values(&out), vec![0.0; 6], "{path:?}");

            // d_model 0: every logit is 0, so the loss is ln(vocab).
            let targets = lm_head_targets(4, 5, &device);
            let (loss, grad_hidden, grad_weight) =
                fused::lm_head_cross_entropy_with_gradients(zeros([4, 0]), zeros([0, 5]), targets);
            assert!((values(&loss)[0] - 5f32.ln()).abs() < 1e-6, "{path:?}: {:?}", values(&loss));
            assert_eq!((grad_hidden.dims(), grad_weight.dims()), ([4, 0], [0, 5]), "{path:?}");
        });
    }
    let panic_message = |f: &dyn Fn()| {
        let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).expect_err("expected a panic");
        panic.downcast_ref::<String>().cloned().or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
    };
    let message = panic_message(&|| {
        let hidden = Tensor::<2>::ones([2, 3], &device);
        let _ = fused::lm_head_cross_entropy_with_gradients(
            hidden,
            Tensor::zeros([3, 0], &device),
            lm_head_targets(2, 1, &device),
        );
    });
    assert!(message.as_deref().is_some_and(|m| m.contains("vocabulary is empty")), "{message:?}");
    let message = panic_message(&|| {
        let targets = Tensor::from_data(TensorData::new(vec![0i64, -1], [2]), &device);
        let _ = fused::lm_head_cross_entropy_with_gradients(
            seeded([2, 3], 1, &device),
            seeded([3, 5], 2, &device),
            targets,
        );
    });
    assert!(message.as_deref().is_some_and(|m| m.contains("target -1")), "{message:?}");
}

/// The reference loss is finite where the softmax of the target underflows, and takes bf16
/// tensors made by a cast on an f32 device, as the fused path does.
#[test]
fn the_reference_loss_survives_large_logits_and_cast_bf16_inputs() {
    let device = cpu();
    let hidden = seeded([6, 8], 40, &device) * 300.0;
    let (weight, targets) = (seeded([8, 50], 41, &device), lm_head_targets(6, 50, &device));
    let [fused, reference] = [OpPath::Fused, OpPath::Reference].map(|path| {
        with_path(path, || {
            values(&fused::lm_head_cross_entropy_with_gradients(hidden.clone(), weight.clone(), targets.clone()).0)[0]
        })
    });
    assert!(reference.is_finite() && (fused - reference).abs() <= 1e-4 * fused.abs(), "{fused} vs {reference}");

    let (hidden, weight) =
        (seeded([4, 8], 42, &device).cast(DType::BF16), seeded([8, 16], 43, &device).cast(DType::BF16));
    let targets = lm_head_targets(4, 16, &device);
    let [fused, reference] = [OpPath::Fused, OpPath::Reference].map(|path| {
        with_path(path, || {
            let (loss, grad_hidden, _) =
                fused::lm_head_cross_entropy_with_gradients(hidden.clone(), weight.clone(), targets.clone());
            (values(&loss)[0], loss.dtype(), grad_hidden.dtype())
        })
    });
    // bf16 products, the loss and the gradients' division by the token count in f32.
    assert_eq!((fused.1, fused.2, reference.1, reference.2), (DType::F32, DType::F32, DType::F32, DType::F32));
    assert!((fused.0 - reference.0).abs() < 3e-2 * fused.0.abs(), "{fused:?} vs {reference:?}");
}
