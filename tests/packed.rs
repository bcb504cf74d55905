//! Packed projections against separate ones: q, k and v (or gate and up) made by one matrix
//! product and read in place by attention (with RoPE at load) or SwiGLU, against the three (two)
//! products, RoPE and the op on separate tensors: forward and every gradient, on every compiled
//! backend, in f32 and in the half types.

mod common;

use burn::tensor::{DType, FloatDType, Tensor};
use common::all_backends;
use common::op_check::{assert_close, check, half_check, on_path, seeded, tolerance};
use layernorm_scaling::fused::{self, with_half_compute, OpPath};
use layernorm_scaling::model::RotaryEmbedding;

/// `(batch, seq, heads, kv_heads, head_dim)`: a single position, grouped-query heads (the GPUs'
/// portable body), odd head counts, sequences over several blocks and tiles of rows.
const SHAPES: [(usize, usize, usize, usize, usize); 6] =
    [(2, 7, 4, 2, 8), (1, 1, 2, 2, 4), (2, 64, 3, 3, 6), (1, 129, 6, 6, 12), (1, 100, 4, 2, 64), (1, 40, 2, 2, 128)];

/// The separate path: the parts cut out of `qkv` as tensors of their own, rotated by
/// [`fused::rope`] and passed to [`fused::causal_attention`].
fn separate_attention(qkv: Tensor<3>, cos: Tensor<2>, sin: Tensor<2>, heads: usize, kv_heads: usize) -> Tensor<4> {
    let [batch, seq, width] = qkv.dims();
    let hd = width / (heads + 2 * kv_heads);
    let part =
        |first: usize, count: usize| qkv.clone().narrow(2, first * hd, count * hd).reshape([batch, seq, count, hd]);
    let (q, k, v) = (part(0, heads), part(heads, kv_heads), part(heads + kv_heads, kv_heads));
    let q = fused::rope(q, cos.clone(), sin.clone());
    fused::causal_attention(q, fused::rope(k, cos, sin), v)
}

#[test]
fn packed_attention_matches_the_reference_and_the_separate_ops_on_every_backend() {
    for (backend, device) in all_backends() {
        for (batch, seq, heads, kv_heads, hd) in SHAPES {
            let width = (heads + 2 * kv_heads) * hd;
            let qkv = seeded([batch, seq, width], 21, &device);
            let weights = seeded([batch, seq, heads, hd], 22, &device);
            // Positions from 3: the tables' rows are the sequence's, not position 0's.
            let tables = RotaryEmbedding::new(hd, 10_000.0).tables(3, seq, &device);
            let what = format!("{backend} packed attention b{batch} s{seq} h{heads} kv{kv_heads} d{hd}");
            let packed = |t: Vec<Tensor<3>>| {
                fused::causal_attention_packed(t[0].clone(), tables.cos(), tables.sin(), heads, kv_heads)
            };
            check(&what, std::slice::from_ref(&qkv), &weights, tolerance(backend), packed);
            let (out, grads) = on_path(OpPath::Fused, std::slice::from_ref(&qkv), &weights, &packed);
            let (want_out, want_grads) = on_path(OpPath::Fused, std::slice::from_ref(&qkv), &weights, &|t| {
                separate_attention(t[0].clone(), tables.cos(), tables.sin(), heads, kv_heads)
            });
            assert_close(&format!("{what} vs separate: output"), &out, &want_out, tolerance(backend));
            assert_close(&format!("{what} vs separate: gradient"), &grads[0], &want_grads[0], tolerance(backend));
        }
    }
}

#[test]
fn packed_swiglu_matches_the_reference_and_the_separate_op_on_every_backend() {
    for (backend, device) in all_backends() {
        for shape in [[3, 5, 22], [1, 1, 2], [2, 64, 352]] {
            let gate_up = seeded(shape, 23, &device) * 3.0;
            let d = shape[2] / 2;
            let weights = seeded([shape[0], shape[1], d], 24, &device);
            let what = format!("{backend} packed swiglu {shape:?}");
            check(&what, std::slice::from_ref(&gate_up), &weights, tolerance(backend), |t| {
                fused::swiglu_packed(t[0].clone())
            });
            let (out, grads) = on_path(OpPath::Fused, std::slice::from_ref(&gate_up), &weights, &|t| {
                fused::swiglu_packed(t[0].clone())
            });
            let (want_out, want_grads) = on_path(OpPath::Fused, std::slice::from_ref(&gate_up), &weights, &|t| {
                fused::swiglu(t[0].clone().narrow(2, 0, d), t[0].clone().narrow(2, d, d))
            });
            assert_close(&format!("{what} vs separate: output"), &out, &want_out, tolerance(backend));
            assert_close(&format!("{what} vs separate: gradient"), &grads[0], &want_grads[0], tolerance(backend));
        }
    }
}

/// `x`, and the weights' widths: three parts (q, k, v with grouped heads), two (gate, up), one.
const LINEAR_CASES: [([usize; 3], &[usize]); 3] =
    [([2, 5, 16], &[16, 8, 8]), ([3, 33, 40], &[96, 96]), ([1, 4, 8], &[3])];

#[test]
fn a_packed_linear_layer_matches_separate_layers_and_each_weight_gets_its_gradient() {
    for (backend, device) in all_backends() {
        for (shape, widths) in LINEAR_CASES {
            let x = seeded(shape, 25, &device);
            let parts: Vec<Tensor<3>> =
                widths.iter().enumerate().map(|(i, &w)| seeded([1, shape[2], w], 26 + i as u64, &device)).collect();
            let total: usize = widths.iter().sum();
            let weights = seeded([shape[0], shape[1], total], 30, &device);
            let mut inputs = vec![x];
            inputs.extend(parts);
            let as_matrices = |t: &[Tensor<3>]| -> Vec<Tensor<2>> {
                t.iter().zip(widths).map(|(w, &width)| w.clone().reshape([shape[2], width])).collect()
            };
            let packed = |t: Vec<Tensor<3>>| fused::linear_packed(t[0].clone(), &as_matrices(&t[1..]));
            let separate = |t: Vec<Tensor<3>>| {
                Tensor::cat(as_matrices(&t[1..]).into_iter().map(|w| fused::linear(t[0].clone(), w)).collect(), 2)
            };
            let what = format!("{backend} packed linear {shape:?} x {widths:?}");
            check(&what, &inputs, &weights, tolerance(backend), packed);
            let (out, grads) = on_path(OpPath::Fused, &inputs, &weights, &packed);
            let (want_out, want_grads) = on_path(OpPath::Fused, &inputs, &weights, &separate);
            assert_close(&format!("{what} vs separate: output"), &out, &want_out, tolerance(backend));
            for (i, (got, want)) in grads.iter().zip(&want_grads).enumerate() {
                assert_close(&format!("{what} vs separate: gradient of input {i}"), got, want, tolerance(backend));
            }
        }
    }
}

/// In a half type the packed ops match the f32 reference on the same rounded values; under mixed
/// precision the packed weight is the half type (the pack is the weights' cast) and each f32
/// weight gets an f32 gradient.
#[test]
fn packed_ops_in_the_half_types_match_the_f32_reference() {
    for (backend, device) in all_backends() {
        for (half, tol) in [(FloatDType::F16, 4e-3), (FloatDType::BF16, 3e-2)] {
            if !device.supports_dtype(half) {
                continue;
            }
            let what = |op: &str| format!("{backend} {half:?} packed {op}");
            let (heads, kv_heads, hd, seq) = (2, 2, 8, 9);
            let qkv = seeded([2, seq, (heads + 2 * kv_heads) * hd], 31, &device);
            let weights = seeded([2, seq, heads, hd], 32, &device);
            let tables = RotaryEmbedding::new(hd, 10_000.0).tables(0, seq, &device);
            half_check(&what("attention"), std::slice::from_ref(&qkv), &weights, half, 1.5 * tol, |t| {
                fused::causal_attention_packed(t[0].clone(), tables.cos(), tables.sin(), heads, kv_heads)
            });
            let gate_up = seeded([2, seq, 32], 33, &device);
            half_check(
                &what("swiglu"),
                std::slice::from_ref(&gate_up),
                &seeded([2, seq, 16], 34, &device),
                half,
                tol,
                |t| fused::swiglu_packed(t[0].clone()),
            );
            // Under mixed precision: f32 inputs, the product in the half type.
            let widths = [8, 4, 4];
            let mut inputs = vec![seeded([2, seq, 16], 35, &device)];
            inputs.extend(widths.iter().enumerate().map(|(i, &w)| seeded([1, 16, w], 36 + i as u64, &device)));
            let upstream = seeded([2, seq, 16], 40, &device);
            let packed = |t: Vec<Tensor<3>>| {
                let parts: Vec<Tensor<2>> =
                    t[1..].iter().zip(widths).map(|(p, w)| p.clone().reshape([16, w])).collect();
                let output = fused::linear_packed(t[0].clone(), &parts);
                assert_eq!(output.dtype(), t[0].dtype(), "{}: the output comes back in x's type", what("linear"));
                output
            };
            let (out, grads) = with_half_compute(Some(half), || on_path(OpPath::Fused, &inputs, &upstream, &packed));
            let rounded: Vec<Tensor<3>> = inputs.iter().map(|t| t.clone().cast(half).cast(DType::F32)).collect();
            let (want_out, want_grads) = on_path(OpPath::Reference, &rounded, &upstream, &packed);
            assert_close(&what("linear: output"), &out, &want_out, tol);
            for (i, (got, want)) in grads.iter().zip(&want_grads).enumerate() {
                assert_close(&what(&format!("linear: gradient of input {i}")), got, want, tol);
            }
        }
    }
}

/// Empty inputs give empty outputs of the right shape on every backend (flex's gemm faulted on a
/// product without rows, and parts cut from an empty tensor tripped its kernels), and degenerate
/// sizes are refused with a message naming them.
#[test]
fn empty_inputs_give_empty_outputs_and_degenerate_sizes_are_refused() {
    for (backend, device) in all_backends() {
        let weights = [seeded([16, 4], 1, &device), seeded([16, 4], 2, &device)];
        for x in [seeded([0, 3, 16], 3, &device), seeded([2, 0, 16], 3, &device)] {
            let dims = x.dims();
            assert_eq!(fused::linear_packed(x, &weights).dims(), [dims[0], dims[1], 8], "{backend}");
        }
        for (batch, seq) in [(0, 4), (2, 0)] {
            let tables = RotaryEmbedding::new(8, 10_000.0).tables(0, seq, &device);
            let qkv = seeded([batch, seq, 48], 4, &device).autodiff().require_grad();
            let out = fused::causal_attention_packed(qkv.clone(), tables.cos(), tables.sin(), 2, 2);
            assert_eq!(out.dims(), [batch, seq, 2, 8], "{backend}");
            let grads = out.sum().backward();
            assert_eq!(qkv.grad(&grads).map(|g| g.dims()), Some([batch, seq, 48]), "{backend}");
            assert_eq!(fused::swiglu_packed(seeded([batch, seq, 6], 5, &device)).dims(), [batch, seq, 3], "{backend}");
        }
    }
    let device = common::cpu();
    let refused = |f: &dyn Fn()| {
        let panic = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).expect_err("expected a refusal");
        panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()
    };
    let tables = RotaryEmbedding::new(12, 10_000.0).tables(0, 4, &device);
    let message = refused(&|| {
        fused::causal_attention_packed(seeded([1, 4, 48], 6, &device), tables.cos(), tables.sin(), 0, 2);
    });
    assert!(message.contains("does not hold 0 query"), "{message}");
    let message = refused(&|| {
        let no_columns = Tensor::<2>::zeros([16, 0], &device);
        fused::linear_packed(seeded([2, 3, 16], 7, &device), &[no_columns.clone(), no_columns]);
    });
    assert!(message.contains("no columns"), "{message}");
}
