//! Flex's own kernels for the fused ops, on f32 tensors; other dtypes take the portable bodies.
//!
//! Work is split into pieces of a fixed size (rows, or one head of one sequence), never by the
//! number of threads, and every sum over pieces runs in piece order: the results are the same
//! bit for bit on any number of threads.

mod attention;
mod cross_entropy;
mod elementwise;
mod exp;
mod gemm;
mod lanes;
mod layer_norm;
mod lm_head;
mod rms_norm;
mod simd;

use std::borrow::Cow;

use burn::backend::flex::FlexTensor;
use burn::backend::ops::FloatTensorOps;
use burn::backend::tensor::IntTensor;
use burn::backend::{DType, Flex, Shape, TensorData, TensorMetadata};

use super::kernels::FusedKernels;
use super::portable;
use super::row_stats_shape;

/// The values of an f32 tensor in row-major order, borrowed when it is stored that way.
fn values(t: &FlexTensor) -> Cow<'_, [f32]> {
    match t.as_slice::<f32>() {
        Some(values) => Cow::Borrowed(values),
        None => Cow::Owned(t.to_contiguous().into_data().try_into_vec::<f32>().expect("an f32 tensor")),
    }
}

/// An f32 tensor of `shape` holding `values`.
fn tensor(values: Vec<f32>, shape: impl Into<Shape>) -> FlexTensor {
    FlexTensor::from_data(TensorData::new(values, shape.into()))
}

/// Token ids as indices. A negative id panics here, naming it; one past the vocabulary panics in
/// the kernels, naming it and the vocabulary size.
fn token_ids(targets: IntTensor<Flex>) -> Vec<usize> {
    let ids = targets.into_data().convert::<i64>().try_into_vec::<i64>().expect("integer targets");
    let index = |id: i64| usize::try_from(id).unwrap_or_else(|_| panic!("cross_entropy: target {id} is negative"));
    ids.into_iter().map(index).collect()
}

/// A 2-d f32 tensor as a gemm operand: its storage with its strides when they are non-negative
/// (row-major, or a transpose such as the tied embedding's), a row-major copy otherwise.
enum MatrixView<'a> {
    Strided(&'a [f32], usize, usize),
    Copied(Vec<f32>, usize),
}

impl MatrixView<'_> {
    fn view(&self) -> gemm::View<'_> {
        match self {
            MatrixView::Strided(values, rs, cs) => (values, *rs, *cs),
            MatrixView::Copied(values, cols) => (values, *cols, 1),
        }
    }
}

fn matrix_view(t: &FlexTensor) -> MatrixView<'_> {
    let strides = t.layout().strides();
    match (usize::try_from(strides[0]), usize::try_from(strides[1])) {
        (Ok(rs), Ok(cs)) => MatrixView::Strided(&t.storage::<f32>()[t.layout().start_offset()..], rs, cs),
        _ => MatrixView::Copied(values(t).into_owned(), t.shape()[1]),
    }
}

fn all_f32(tensors: &[&FlexTensor]) -> bool {
    tensors.iter().all(|t| t.dtype() == DType::F32)
}

impl FusedKernels for Flex {
    fn rms_norm_forward(x: FlexTensor, gamma: FlexTensor, epsilon: f64, scale: f64) -> (FlexTensor, FlexTensor) {
        if !all_f32(&[&x, &gamma]) {
            return portable::rms_norm_forward::<Flex>(x, gamma, epsilon, scale);
        }
        let shape = x.shape();
        let (y, inv_rms) = rms_norm::forward(&values(&x), &values(&gamma), epsilon, scale);
        let stats_shape = row_stats_shape(&shape);
        (tensor(y, shape), tensor(inv_rms, stats_shape))
    }

    fn rms_norm_backward(
        x: FlexTensor,
        gamma: FlexTensor,
        inv_rms: FlexTensor,
        grad: FlexTensor,
        scale: f64,
    ) -> (FlexTensor, FlexTensor) {
        if !all_f32(&[&x, &gamma, &inv_rms, &grad]) {
            return portable::rms_norm_backward::<Flex>(x, gamma, inv_rms, grad, scale);
        }
        let (shape, gamma_shape) = (x.shape(), gamma.shape());
        let (grad_x, grad_gamma) =
            rms_norm::backward(&values(&x), &values(&gamma), &values(&inv_rms), &values(&grad), scale);
        (tensor(grad_x, shape), tensor(grad_gamma, gamma_shape))
    }

    fn layer_norm_forward(
        x: FlexTensor,
        gamma: FlexTensor,
        beta: FlexTensor,
        epsilon: f64,
    ) -> (FlexTensor, FlexTensor, FlexTensor) {
        if !all_f32(&[&x, &gamma, &beta]) {
            return portable::layer_norm_forward::<Flex>(x, gamma, beta, epsilon);
        }
        let shape = x.shape();
        let (y, mean, inv_std) = layer_norm::forward(&values(&x), &values(&gamma), &values(&beta), epsilon);
        let stats_shape = row_stats_shape(&shape);
        (tensor(y, shape), tensor(mean, stats_shape.clone()), tensor(inv_std, stats_shape))
    }

    fn layer_norm_backward(
        x: FlexTensor,
        gamma: FlexTensor,
        mean: FlexTensor,
        inv_std: FlexTensor,
        grad: FlexTensor,
    ) -> (FlexTensor, FlexTensor, FlexTensor) {
        if !all_f32(&[&x, &gamma, &mean, &inv_std, &grad]) {
            return portable::layer_norm_backward::<Flex>(x, gamma, mean, inv_std, grad);
        }
        let (shape, gamma_shape) = (x.shape(), gamma.shape());
        let (grad_x, grad_gamma, grad_beta) =
            layer_norm::backward(&values(&x), &values(&gamma), &values(&mean), &values(&inv_std), &values(&grad));
        (tensor(grad_x, shape), tensor(grad_gamma, gamma_shape.clone()), tensor(grad_beta, gamma_shape))
    }

    fn swiglu_forward(gate: FlexTensor, up: FlexTensor) -> FlexTensor {
        if !all_f32(&[&gate, &up]) {
            return portable::swiglu_forward::<Flex>(gate, up);
        }
        let shape = gate.shape();
        tensor(elementwise::swiglu(&values(&gate), &values(&up)), shape)
    }

    fn swiglu_backward(gate: FlexTensor, up: FlexTensor, grad: FlexTensor) -> (FlexTensor, FlexTensor) {
        if !all_f32(&[&gate, &up, &grad]) {
            return portable::swiglu_backward::<Flex>(gate, up, grad);
        }
        let shape = gate.shape();
        let (grad_gate, grad_up) = elementwise::swiglu_backward(&values(&gate), &values(&up), &values(&grad));
        (tensor(grad_gate, shape.clone()), tensor(grad_up, shape))
    }

    fn rope_forward(x: FlexTensor, cos: FlexTensor, sin: FlexTensor) -> FlexTensor {
        if !all_f32(&[&x, &cos, &sin]) {
            return portable::rope_forward::<Flex>(x, cos, sin);
        }
        let shape = x.shape();
        let (heads, head_dim) = (shape[2], shape[3]);
        tensor(elementwise::rope(&values(&x), &values(&cos), &values(&sin), heads, head_dim), shape)
    }

    fn cross_entropy(logits: FlexTensor, targets: IntTensor<Flex>) -> (FlexTensor, FlexTensor) {
        if !all_f32(&[&logits]) {
            return portable::cross_entropy::<Flex>(logits, targets);
        }
        let ids = token_ids(targets);
        let shape = logits.shape();
        let (value, grad) = cross_entropy::cross_entropy(&values(&logits), &ids, shape[1]);
        (tensor(vec![value], [1]), tensor(grad, shape))
    }

    fn linear_forward(x: FlexTensor, weight: FlexTensor) -> FlexTensor {
        if !all_f32(&[&x, &weight]) {
            return Flex::float_matmul(x, weight);
        }
        let ([rows, d_in], d_out) = ([x.shape()[0], x.shape()[1]], weight.shape()[1]);
        let mut output = vec![0.0f32; rows * d_out];
        gemm::matmul_parallel(
            (rows, d_out, d_in),
            &mut output,
            d_out,
            false,
            (&values(&x), d_in, 1),
            matrix_view(&weight).view(),
        );
        tensor(output, [rows, d_out])
    }

    fn linear_backward(x: FlexTensor, weight: FlexTensor, grad: FlexTensor) -> (FlexTensor, FlexTensor) {
        if !all_f32(&[&x, &weight, &grad]) {
            let grad_x = Flex::float_matmul(grad.clone(), Flex::float_transpose(weight));
            return (grad_x, Flex::float_matmul(Flex::float_transpose(x), grad));
        }
        let ([rows, d_in], d_out) = ([x.shape()[0], x.shape()[1]], weight.shape()[1]);
        let (x, grad, weight) = (values(&x), values(&grad), matrix_view(&weight));
        let (w, w_rs, w_cs) = weight.view();
        let mut grad_x = vec![0.0f32; rows * d_in];
        gemm::matmul_parallel((rows, d_in, d_out), &mut grad_x, d_in, false, (&grad, d_out, 1), (w, w_cs, w_rs));
        let grad_weight = gemm::transposed_product((rows, d_in, d_out), &x, &grad);
        (tensor(grad_x, [rows, d_in]), tensor(grad_weight, [d_in, d_out]))
    }

    fn lm_head_cross_entropy(
        hidden: FlexTensor,
        weight: FlexTensor,
        targets: IntTensor<Flex>,
    ) -> (FlexTensor, FlexTensor, FlexTensor) {
        if !all_f32(&[&hidden, &weight]) {
            let block_values = Self::LM_HEAD_BLOCK_VALUES;
            return portable::lm_head_cross_entropy::<Flex>(
                hidden,
                weight,
                targets,
                block_values,
                Self::unit_cross_entropy,
            );
        }
        let (hidden_shape, weight_shape) = (hidden.shape(), weight.shape());
        let sizes = lm_head::Sizes { tokens: hidden_shape[0], d_model: hidden_shape[1], vocab: weight_shape[1] };
        let weight = matrix_view(&weight);
        let ids = token_ids(targets);
        let block = portable::lm_head_block_rows(sizes.vocab, Self::LM_HEAD_BLOCK_VALUES);
        let (value, grad_hidden, grad_weight) =
            lm_head::lm_head_cross_entropy(sizes, &values(&hidden), weight.view(), &ids, block);
        (tensor(vec![value], [1]), tensor(grad_hidden, hidden_shape), tensor(grad_weight, weight_shape))
    }

    fn attention_forward(q: FlexTensor, k: FlexTensor, v: FlexTensor, scale: f64) -> (FlexTensor, FlexTensor) {
        if !all_f32(&[&q, &k, &v]) {
            return portable::attention_forward::<Flex>(q, k, v, scale);
        }
        let shape = attention::Shape::of(&q.shape(), &k.shape());
        let (output, lse) = attention::forward(&shape, &values(&q), &values(&k), &values(&v), scale as f32);
        (tensor(output, q.shape()), tensor(lse, [shape.batch, shape.heads, shape.seq, 1]))
    }

    fn attention_backward(
        q: FlexTensor,
        k: FlexTensor,
        v: FlexTensor,
        output: FlexTensor,
        lse: FlexTensor,
        grad: FlexTensor,
        scale: f64,
    ) -> (FlexTensor, FlexTensor, FlexTensor) {
        if !all_f32(&[&q, &k, &v, &output, &lse, &grad]) {
            return portable::attention_backward::<Flex>(q, k, v, output, lse, grad, scale);
        }
        let shape = attention::Shape::of(&q.shape(), &k.shape());
        let inputs = attention::Saved {
            q: &values(&q),
            k: &values(&k),
            v: &values(&v),
            output: &values(&output),
            lse: &values(&lse),
        };
        let (grad_q, grad_k, grad_v) = attention::backward(&shape, &inputs, &values(&grad), scale as f32);
        (tensor(grad_q, q.shape()), tensor(grad_k, k.shape()), tensor(grad_v, v.shape()))
    }
}
