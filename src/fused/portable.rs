//! The fused ops' portable bodies, in Burn's backend ops: every op without a kernel of its own
//! on a backend runs these (ndarray, flex in bf16, most ops on the GPUs and LibTorch). Statistics (mean squares,
//! log-sum-exp, softmax) are computed in f32 whatever the input's precision.

use burn::backend::tensor::{FloatTensor, IntTensor};
use burn::backend::{Backend, DType, Scalar, Shape, Slice, TensorData, TensorMetadata};
use burn::tensor::IndexingUpdateOp;

fn f32_of<B: Backend>(x: FloatTensor<B>) -> FloatTensor<B> {
    cast::<B>(x, DType::F32)
}

pub(super) fn cast<B: Backend>(x: FloatTensor<B>, dtype: DType) -> FloatTensor<B> {
    if x.dtype() == dtype {
        x
    } else {
        B::float_cast(x, dtype.into())
    }
}

fn scalar(value: f64) -> Scalar {
    Scalar::from(value)
}

/// `gamma: [d]` reshaped to broadcast over `rank` dimensions: `[1, ..., 1, d]`.
fn row_vector<B: Backend>(gamma: FloatTensor<B>, rank: usize) -> FloatTensor<B> {
    let d = gamma.shape().num_elements();
    let mut dims = vec![1; rank];
    dims[rank - 1] = d;
    B::float_reshape(gamma, Shape::from(dims))
}

/// See [`FusedKernels::rms_norm_forward`](super::FusedKernels::rms_norm_forward).
pub fn rms_norm_forward<B: Backend>(
    x: FloatTensor<B>,
    gamma: FloatTensor<B>,
    epsilon: f64,
    scale: f64,
) -> (FloatTensor<B>, FloatTensor<B>) {
    let (dtype, rank) = (x.dtype(), x.shape().num_dims());
    let x32 = f32_of::<B>(x.clone());
    let mean_square = B::float_mean_dim(B::float_mul(x32.clone(), x32), rank - 1); // [..., 1]
    let inv_rms = B::float_recip(B::float_sqrt(B::float_add_scalar(mean_square, scalar(epsilon))));
    let gamma = row_vector::<B>(B::float_mul_scalar(gamma, scalar(scale)), rank);
    let y = B::float_mul(B::float_mul(x, cast::<B>(inv_rms.clone(), dtype)), cast::<B>(gamma, dtype));
    (y, inv_rms)
}

/// See [`FusedKernels::rms_norm_backward`](super::FusedKernels::rms_norm_backward):
/// with `g = gamma * scale` and `r` the inverse RMS,
/// `dx = r * (dy g - x r^2 mean(dy g x))`, `dgamma = scale * sum_rows(dy x r)`.
pub fn rms_norm_backward<B: Backend>(
    x: FloatTensor<B>,
    gamma: FloatTensor<B>,
    inv_rms: FloatTensor<B>,
    grad: FloatTensor<B>,
    scale: f64,
) -> (FloatTensor<B>, FloatTensor<B>) {
    let (dtype, gamma_dtype) = (x.dtype(), gamma.dtype());
    let shape = x.shape();
    let rank = shape.num_dims();
    let d = shape[rank - 1];
    let (x, grad) = (f32_of::<B>(x), f32_of::<B>(grad));
    let g = row_vector::<B>(B::float_mul_scalar(f32_of::<B>(gamma), scalar(scale)), rank);
    let grad_g = B::float_mul(grad.clone(), g);
    let dot = B::float_mean_dim(B::float_mul(grad_g.clone(), x.clone()), rank - 1); // [..., 1]
    let r2 = B::float_mul(inv_rms.clone(), inv_rms.clone());
    let correction = B::float_mul(x.clone(), B::float_mul(r2, dot));
    let dx = B::float_mul(B::float_sub(grad_g, correction), inv_rms.clone());
    let normalised = B::float_mul(x, inv_rms);
    let rows = shape.num_elements() / d;
    let per_row = B::float_reshape(B::float_mul(grad, normalised), Shape::from([rows, d]));
    let dgamma = B::float_mul_scalar(B::float_reshape(B::float_sum_dim(per_row, 0), Shape::from([d])), scalar(scale));
    (cast::<B>(dx, dtype), cast::<B>(dgamma, gamma_dtype))
}

/// See [`FusedKernels::layer_norm_forward`](super::FusedKernels::layer_norm_forward).
pub fn layer_norm_forward<B: Backend>(
    x: FloatTensor<B>,
    gamma: FloatTensor<B>,
    beta: FloatTensor<B>,
    epsilon: f64,
) -> (FloatTensor<B>, FloatTensor<B>, FloatTensor<B>) {
    let (dtype, rank) = (x.dtype(), x.shape().num_dims());
    let x = f32_of::<B>(x);
    let mean = B::float_mean_dim(x.clone(), rank - 1); // [..., 1]
    let centred = B::float_sub(x, mean.clone());
    let variance = B::float_mean_dim(B::float_mul(centred.clone(), centred.clone()), rank - 1);
    let inv_std = B::float_recip(B::float_sqrt(B::float_add_scalar(variance, scalar(epsilon))));
    let normalised = B::float_mul(centred, inv_std.clone());
    let (gamma, beta) = (row_vector::<B>(f32_of::<B>(gamma), rank), row_vector::<B>(f32_of::<B>(beta), rank));
    let y = B::float_add(B::float_mul(normalised, gamma), beta);
    (cast::<B>(y, dtype), mean, inv_std)
}

/// See [`FusedKernels::layer_norm_backward`](super::FusedKernels::layer_norm_backward): with
/// `n = (x - mean) r` and `dn = dy gamma`, `dx = r (dn - mean(dn) - n mean(dn n))`,
/// `dgamma = sum_rows(dy n)`, `dbeta = sum_rows(dy)`.
pub fn layer_norm_backward<B: Backend>(
    x: FloatTensor<B>,
    gamma: FloatTensor<B>,
    mean: FloatTensor<B>,
    inv_std: FloatTensor<B>,
    grad: FloatTensor<B>,
) -> (FloatTensor<B>, FloatTensor<B>, FloatTensor<B>) {
    let (dtype, gamma_dtype) = (x.dtype(), gamma.dtype());
    let shape = x.shape();
    let rank = shape.num_dims();
    let d = shape[rank - 1];
    let (x, grad) = (f32_of::<B>(x), f32_of::<B>(grad));
    let normalised = B::float_mul(B::float_sub(x, mean), inv_std.clone());
    let grad_n = B::float_mul(grad.clone(), row_vector::<B>(f32_of::<B>(gamma), rank));
    let mean_grad_n = B::float_mean_dim(grad_n.clone(), rank - 1);
    let mean_grad_n_n = B::float_mean_dim(B::float_mul(grad_n.clone(), normalised.clone()), rank - 1);
    let inner = B::float_sub(B::float_sub(grad_n, mean_grad_n), B::float_mul(normalised.clone(), mean_grad_n_n));
    let dx = B::float_mul(inner, inv_std);
    let rows = shape.num_elements() / d;
    let sum_rows = |t: FloatTensor<B>| {
        B::float_reshape(B::float_sum_dim(B::float_reshape(t, Shape::from([rows, d])), 0), Shape::from([d]))
    };
    let dgamma = sum_rows(B::float_mul(grad.clone(), normalised));
    let dbeta = sum_rows(grad);
    (cast::<B>(dx, dtype), cast::<B>(dgamma, gamma_dtype), cast::<B>(dbeta, gamma_dtype))
}

/// `silu(gate) * up`.
pub fn swiglu_forward<B: Backend>(gate: FloatTensor<B>, up: FloatTensor<B>) -> FloatTensor<B> {
    let silu = B::float_mul(gate.clone(), B::sigmoid(gate));
    B::float_mul(silu, up)
}

/// `d up = dy silu(gate)`, `d gate = dy up s (1 + gate (1 - s))` with `s = sigmoid(gate)`.
pub fn swiglu_backward<B: Backend>(
    gate: FloatTensor<B>,
    up: FloatTensor<B>,
    grad: FloatTensor<B>,
) -> (FloatTensor<B>, FloatTensor<B>) {
    let s = B::sigmoid(gate.clone());
    let silu = B::float_mul(gate.clone(), s.clone());
    let grad_up = B::float_mul(grad.clone(), silu.clone());
    // s (1 + gate (1 - s)) = s + silu - silu s
    let dsilu = B::float_sub(B::float_add(s.clone(), silu.clone()), B::float_mul(silu, s));
    let grad_gate = B::float_mul(B::float_mul(grad, up), dsilu);
    (grad_gate, grad_up)
}

/// `x * cos + rotate_half(x) * sin` on `x: [b, s, h, hd]`, where `rotate_half([x1, x2]) = [-x2, x1]`
/// is the halves swapped (a flip of a `[2, hd/2]` view) times the signs `[-1, 1]`.
pub fn rope_forward<B: Backend>(x: FloatTensor<B>, cos: FloatTensor<B>, sin: FloatTensor<B>) -> FloatTensor<B> {
    let shape = x.shape();
    let [batch, seq, heads, head_dim] = [shape[0], shape[1], shape[2], shape[3]];
    let half = head_dim / 2;
    let table = |t: FloatTensor<B>| B::float_reshape(t, Shape::from([1, seq, 1, head_dim]));
    let halves = B::float_reshape(x.clone(), Shape::from([batch, seq, heads, 2, half]));
    let swapped = B::float_flip(halves, &[3]);
    let signs = B::float_from_data(TensorData::new(vec![-1.0f32, 1.0], [1, 1, 1, 2, 1]), &x.device());
    let signs = cast::<B>(signs, x.dtype());
    let rotated = B::float_reshape(B::float_mul(swapped, signs), shape);
    B::float_add(B::float_mul(x, table(cos)), B::float_mul(rotated, table(sin)))
}

/// See [`FusedOps::fused_cross_entropy`](super::FusedOps::fused_cross_entropy): one softmax in
/// f32, the picked probabilities' mean `-log` (f32), and the softmax with 1 taken from each target,
/// over tokens (in the logits' type).
pub fn cross_entropy<B: Backend>(logits: FloatTensor<B>, targets: IntTensor<B>) -> (FloatTensor<B>, FloatTensor<B>) {
    let shape = logits.shape();
    let tokens = shape[0];
    let (dtype, device) = (logits.dtype(), logits.device());
    let logits = f32_of::<B>(logits);
    let shifted = B::float_sub(logits.clone(), B::float_max_dim(logits, 1)); // [tokens, vocab], max 0
    let exp = B::float_exp(shifted.clone());
    let sum = B::float_sum_dim(exp.clone(), 1); // [tokens, 1]
    let probs = B::float_div(exp, sum.clone());
    let targets = B::int_reshape(targets, Shape::from([tokens, 1]));
    // -log p(target) = log(sum) - shifted[target]: finite where p(target) underflows to 0.
    let picked = B::float_gather(1, shifted, targets.clone());
    let value = B::float_mean(B::float_sub(B::float_log(sum), picked));
    let minus_one = B::float_full(Shape::from([tokens, 1]), scalar(-1.0), &device, DType::F32.into());
    let grad = B::float_scatter(1, probs, targets, minus_one, IndexingUpdateOp::Add);
    (value, cast::<B>(B::float_mul_scalar(grad, scalar(1.0 / tokens as f64)), dtype))
}

/// `[b, s, n, hd] -> [b, h, s, hd]`: head-major, each of the `n` heads repeated for the
/// `heads / n` query heads of its group.
fn head_major<B: Backend>(x: FloatTensor<B>, heads: usize) -> FloatTensor<B> {
    let x = B::float_swap_dims(x, 1, 2);
    let shape = x.shape();
    let [batch, n, seq, head_dim] = [shape[0], shape[1], shape[2], shape[3]];
    let groups = heads / n;
    if groups == 1 {
        return x;
    }
    let x = B::float_reshape(x, Shape::from([batch, n, 1, seq, head_dim]));
    let x = B::float_expand(x, Shape::from([batch, n, groups, seq, head_dim]));
    B::float_reshape(x, Shape::from([batch, heads, seq, head_dim]))
}

/// The inverse of [`head_major`] for gradients: `[b, h, s, hd] -> [b, s, n, hd]`, the gradients
/// of a group's query heads summed into their shared head.
fn seq_major_summed<B: Backend>(x: FloatTensor<B>, n: usize) -> FloatTensor<B> {
    let shape = x.shape();
    let [batch, heads, seq, head_dim] = [shape[0], shape[1], shape[2], shape[3]];
    let x = if heads == n {
        x
    } else {
        let grouped = B::float_reshape(x, Shape::from([batch, n, heads / n, seq, head_dim]));
        B::float_reshape(B::float_sum_dim(grouped, 2), Shape::from([batch, n, seq, head_dim]))
    };
    B::float_swap_dims(x, 1, 2)
}

/// `scale * q k^T` plus the causal mask (`-inf` above the diagonal), in f32: `[b, h, s, s]`.
fn masked_scores<B: Backend>(q: FloatTensor<B>, k: FloatTensor<B>, scale: f64) -> FloatTensor<B> {
    let seq = q.shape()[2];
    let device = q.device();
    let scores = B::float_mul_scalar(f32_of::<B>(B::float_matmul(q, B::float_swap_dims(k, 2, 3))), scalar(scale));
    let mask: Vec<f32> = (0..seq * seq).map(|i| if i % seq > i / seq { f32::NEG_INFINITY } else { 0.0 }).collect();
    let mask = B::float_from_data(TensorData::new(mask, [1, 1, seq, seq]), &device);
    B::float_add(scores, mask)
}

/// See [`FusedKernels::attention_forward`](super::FusedKernels::attention_forward).
pub fn attention_forward<B: Backend>(
    q: FloatTensor<B>,
    k: FloatTensor<B>,
    v: FloatTensor<B>,
    scale: f64,
) -> (FloatTensor<B>, FloatTensor<B>) {
    let dtype = q.dtype();
    let heads = q.shape()[2];
    let (q, k, v) = (head_major::<B>(q, heads), head_major::<B>(k, heads), head_major::<B>(v, heads));
    let scores = masked_scores::<B>(q, k, scale); // [b, h, s, s]
    let max = B::float_max_dim(scores.clone(), 3); // [b, h, s, 1]
    let exp = B::float_exp(B::float_sub(scores, max.clone()));
    let sum = B::float_sum_dim(exp.clone(), 3);
    let lse = B::float_add(max, B::float_log(sum.clone()));
    let probs = cast::<B>(B::float_div(exp, sum), dtype);
    let output = B::float_swap_dims(B::float_matmul(probs, v), 1, 2); // [b, s, h, hd]
    (output, lse)
}

/// See [`FusedKernels::attention_backward`](super::FusedKernels::attention_backward):
/// `P = exp(scores - lse)`, `dV = P^T dO`, `dS = P (dO V^T - rowsum(dO O))`, `dQ = scale dS K`,
/// `dK = scale dS^T Q`.
pub fn attention_backward<B: Backend>(
    q: FloatTensor<B>,
    k: FloatTensor<B>,
    v: FloatTensor<B>,
    output: FloatTensor<B>,
    lse: FloatTensor<B>,
    grad: FloatTensor<B>,
    scale: f64,
) -> (FloatTensor<B>, FloatTensor<B>, FloatTensor<B>) {
    let dtype = q.dtype();
    let (heads, kv_heads) = (q.shape()[2], k.shape()[2]);
    let (q, k, v) = (head_major::<B>(q, heads), head_major::<B>(k, heads), head_major::<B>(v, heads));
    let (output, grad) = (head_major::<B>(output, heads), head_major::<B>(grad, heads));
    let probs = B::float_exp(B::float_sub(masked_scores::<B>(q.clone(), k.clone(), scale), lse)); // f32
    let delta = B::float_sum_dim(B::float_mul(f32_of::<B>(grad.clone()), f32_of::<B>(output)), 3); // [b, h, s, 1]
    let grad_v = B::float_matmul(B::float_swap_dims(cast::<B>(probs.clone(), dtype), 2, 3), grad.clone());
    let grad_probs = f32_of::<B>(B::float_matmul(grad, B::float_swap_dims(v, 2, 3)));
    let grad_scores = cast::<B>(B::float_mul(probs, B::float_sub(grad_probs, delta)), dtype);
    let grad_q = B::float_mul_scalar(B::float_matmul(grad_scores.clone(), k), scalar(scale));
    let grad_k = B::float_mul_scalar(B::float_matmul(B::float_swap_dims(grad_scores, 2, 3), q), scalar(scale));
    (B::float_swap_dims(grad_q, 1, 2), seq_major_summed::<B>(grad_k, kv_heads), seq_major_summed::<B>(grad_v, kv_heads))
}

/// Rows of logits per block of the LM head that makes `block_values` logits at once (a backend's
/// [`LM_HEAD_BLOCK_VALUES`](super::FusedKernels::LM_HEAD_BLOCK_VALUES)), for a vocabulary of
/// `vocab`: at least one.
pub(super) fn lm_head_block_rows(vocab: usize, block_values: usize) -> usize {
    (block_values / vocab.max(1)).max(1)
}

/// See [`FusedKernels::unit_cross_entropy`](super::FusedKernels::unit_cross_entropy), from a
/// backend's `cross_entropy` (of f32 logits, the mean's gradient): the logits cast to f32, the
/// gradient multiplied by the rows and cast back.
pub fn unit_cross_entropy<B: Backend>(
    logits: FloatTensor<B>,
    targets: IntTensor<B>,
    cross_entropy: impl Fn(FloatTensor<B>, IntTensor<B>) -> (FloatTensor<B>, FloatTensor<B>),
) -> (FloatTensor<B>, FloatTensor<B>) {
    let (rows, dtype) = (logits.shape()[0], logits.dtype());
    let (value, grad) = cross_entropy(f32_of::<B>(logits), targets);
    (value, cast::<B>(B::float_mul_scalar(grad, scalar(rows as f64)), dtype))
}

/// See [`FusedKernels::lm_head_cross_entropy`](super::FusedKernels::lm_head_cross_entropy): per
/// block of rows (`block_values` logits at most), the logits in the inputs' type, the backend's
/// `unit_cross_entropy` of them (the value rescaled from the block's mean to the whole mean), and
/// the block's part of both gradients: products in the inputs' type of `softmax - onehot` (within
/// [-1, 1]: undivided by the tokens, only probabilities below f16's least value, 6e-8, flush to
/// 0), divided by the token count and summed over blocks in f32. The value and both gradients
/// are f32.
pub fn lm_head_cross_entropy<B: Backend>(
    hidden: FloatTensor<B>,
    weight: FloatTensor<B>,
    targets: IntTensor<B>,
    block_values: usize,
    unit_cross_entropy: impl Fn(FloatTensor<B>, IntTensor<B>) -> (FloatTensor<B>, FloatTensor<B>),
) -> (FloatTensor<B>, FloatTensor<B>, FloatTensor<B>) {
    let block = lm_head_block_rows(weight.shape()[1], block_values);
    lm_head_cross_entropy_in_blocks::<B>(hidden, weight, targets, block, unit_cross_entropy)
}

/// [`lm_head_cross_entropy`] over blocks of `block` rows.
fn lm_head_cross_entropy_in_blocks<B: Backend>(
    hidden: FloatTensor<B>,
    weight: FloatTensor<B>,
    targets: IntTensor<B>,
    block: usize,
    unit_cross_entropy: impl Fn(FloatTensor<B>, IntTensor<B>) -> (FloatTensor<B>, FloatTensor<B>),
) -> (FloatTensor<B>, FloatTensor<B>, FloatTensor<B>) {
    let (tokens, d_model) = (hidden.shape()[0], hidden.shape()[1]);
    let per_token = scalar(1.0 / tokens as f64);
    let weight_t = B::float_transpose(weight.clone());
    let (mut value, mut grad_hidden, mut grad_weight) = (None, Vec::new(), None);
    for start in (0..tokens).step_by(block) {
        let end = (start + block).min(tokens);
        let share = scalar((end - start) as f64 / tokens as f64);
        let h = B::float_slice(hidden.clone(), &[Slice::from(start..end), Slice::from(0..d_model)]);
        let logits = B::float_matmul(h.clone(), weight.clone());
        let (block_value, unit) = unit_cross_entropy(logits, B::int_slice(targets.clone(), &[Slice::from(start..end)]));
        let block_value = B::float_mul_scalar(block_value, share);
        value = Some(match value {
            None => block_value,
            Some(total) => B::float_add(total, block_value),
        });
        let block_grad_hidden = f32_of::<B>(B::float_matmul(unit.clone(), weight_t.clone()));
        grad_hidden.push(B::float_mul_scalar(block_grad_hidden, per_token));
        let block_grad_weight = f32_of::<B>(B::float_matmul(B::float_transpose(h), unit));
        grad_weight = Some(match grad_weight {
            None => block_grad_weight,
            Some(total) => B::float_add(total, block_grad_weight),
        });
    }
    let none = "lm_head_cross_entropy: no tokens";
    (value.expect(none), B::float_cat(grad_hidden, 0), B::float_mul_scalar(grad_weight.expect(none), per_token))
}

#[cfg(all(test, feature = "flex"))]
mod tests {
    use burn::backend::flex::FlexTensor;
    use burn::backend::Flex;

    use super::*;

    fn tensor(values: Vec<f32>, shape: [usize; 2]) -> FlexTensor {
        FlexTensor::from_data(TensorData::new(values, shape))
    }

    fn values(t: FlexTensor) -> Vec<f32> {
        t.into_data().convert::<f32>().try_into_vec::<f32>().unwrap()
    }

    #[test]
    fn the_lm_head_in_blocks_adds_up_to_the_whole() {
        let (tokens, d, vocab) = (13, 6, 11);
        let value = |i: usize, salt: usize| (((i * 7919 + salt) % 101) as f32 / 50.0 - 1.0) * 1.5;
        let hidden = tensor((0..tokens * d).map(|i| value(i, 3)).collect(), [tokens, d]);
        let weight = tensor((0..d * vocab).map(|i| value(i, 17)).collect(), [d, vocab]);
        let ids: Vec<i64> = (0..tokens as i64).map(|t| (t * 5 + 2) % vocab as i64).collect();
        let targets = FlexTensor::from_data(TensorData::new(ids, [tokens]));
        let run = |block| {
            let (value, grad_hidden, grad_weight) = lm_head_cross_entropy_in_blocks::<Flex>(
                hidden.clone(),
                weight.clone(),
                targets.clone(),
                block,
                |logits, targets| unit_cross_entropy::<Flex>(logits, targets, cross_entropy::<Flex>),
            );
            [values(value), values(grad_hidden), values(grad_weight)]
        };
        let whole = run(tokens);
        for block in [1, 4, 12] {
            for (part, (ours, expected)) in run(block).iter().zip(&whole).enumerate() {
                for (a, b) in ours.iter().zip(expected) {
                    assert!((a - b).abs() <= 1e-6 * (1.0 + b.abs()), "block {block}, part {part}: {a} vs {b}");
                }
            }
        }
    }
}
