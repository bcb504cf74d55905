//! How our model maps onto the Hugging Face LLaMA layout: tensor names, the `[out, in]` weight
//! orientation, and the depth factors folded into weights on export.

use burn::module::Param;
use burn::nn::Linear;
use burn::tensor::{Device, Tensor, TensorData};

use super::HfError;
use crate::model::Block;
use crate::norm::{BranchGate, Norm, Placement};

/// The name of block `index`'s (0-based) tensor `name`, e.g. `model.layers.0.self_attn.q_proj`.
pub fn block_key(index: usize, name: &str) -> String {
    format!("model.layers.{index}.{name}")
}

/// The factors a scheme applies inside block: `[attention norm, feed-forward norm, attention
/// output, feed-forward output]`. A Hugging Face LLaMA has none, so export multiplies them into
/// the norm weights and the `o_proj`/`down_proj` weights (exact: RMSNorm and both projections are
/// linear in those weights), and loading divides them out again.
///
/// Schemes with no such counterpart (Post-LN, Sandwich-LN, branch gates, LNS before the norm,
/// DeepNorm's residual scale) are refused.
pub fn folded_factors(block: &Block) -> Result<[f64; 4], HfError> {
    let plan = block.plan();
    let unsupported = |what: &str| {
        Err(HfError::Unsupported(format!(
            "{what} has no counterpart in the Hugging Face LLaMA architecture; export supports Pre-LN, LNS (after the norm or the sub-layer) and the init-only schemes"
        )))
    };
    if plan.placement != Placement::Pre {
        return unsupported("a Post-LN or Sandwich-LN block");
    }
    if plan.gate != BranchGate::None {
        return unsupported("a LayerScale or SkipInit gate");
    }
    if plan.norm_input_scale != 1.0 {
        return unsupported("scaling the norm's input (LNS before the norm)");
    }
    if plan.residual_scale != 1.0 {
        return unsupported("a residual scale (DeepNorm)");
    }
    Ok([block.attn_norm.scale(), block.ffn_norm.scale(), plan.attn_output_scale, plan.ffn_output_scale])
}

/// Row-major values of a `[rows, cols]` matrix transposed (`[cols, rows]`).
fn transpose(values: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0.0; values.len()];
    for r in 0..rows {
        for c in 0..cols {
            out[c * rows + r] = values[r * cols + c];
        }
    }
    out
}

fn scaled(values: Vec<f32>, factor: f64) -> Vec<f32> {
    if factor == 1.0 {
        values
    } else {
        values.into_iter().map(|v| (v as f64 * factor) as f32).collect()
    }
}

/// A vector's values on the host as f32.
pub fn host(tensor: Tensor<1>) -> Vec<f32> {
    tensor.into_data().convert::<f32>().try_into_vec::<f32>().unwrap_or_default()
}

/// Sets a linear layer from a PyTorch `[out, in]` weight (and `[out]` bias), times `factor`.
pub fn set_linear(linear: &mut Linear, weight: Vec<f32>, bias: Option<Vec<f32>>, factor: f64, device: &Device) {
    let [d_in, d_out] = linear.weight.shape().dims();
    let weight = transpose(&scaled(weight, factor), d_out, d_in);
    linear.weight = Param::from_tensor(Tensor::from_data(TensorData::new(weight, [d_in, d_out]), device));
    if let Some(bias) = bias {
        linear.bias = Some(Param::from_tensor(Tensor::from_data(TensorData::new(bias, [d_out]), device)));
    }
}

/// A linear layer's weight as PyTorch `[out, in]` values times `factor`, and its bias.
pub fn linear_values(linear: &Linear, factor: f64) -> (Vec<usize>, Vec<f32>, Option<Vec<f32>>) {
    let [d_in, d_out] = linear.weight.shape().dims();
    let weight = host(linear.weight.val().flatten(0, 1));
    (vec![d_out, d_in], scaled(transpose(&weight, d_in, d_out), factor), linear.bias.as_ref().map(|b| host(b.val())))
}

/// Sets an RMSNorm's `gamma` to `weight` times `factor`.
pub fn set_norm(norm: &mut Norm, weight: Vec<f32>, factor: f64, device: &Device) -> Result<(), HfError> {
    match norm {
        Norm::RmsNorm(norm) => {
            let n = weight.len();
            norm.gamma = Param::from_tensor(Tensor::from_data(TensorData::new(scaled(weight, factor), [n]), device));
            Ok(())
        }
        Norm::LayerNorm(_) => Err(HfError::Unsupported("LayerNorm in a LLaMA-family checkpoint".into())),
    }
}

/// An RMSNorm's `gamma` times `factor`.
pub fn norm_values(norm: &Norm, factor: f64) -> Result<Vec<f32>, HfError> {
    match norm {
        Norm::RmsNorm(norm) => Ok(scaled(host(norm.gamma.val()), factor)),
        Norm::LayerNorm(_) => {
            Err(HfError::Unsupported("exporting a LayerNorm model: the LLaMA family uses RMSNorm".into()))
        }
    }
}
