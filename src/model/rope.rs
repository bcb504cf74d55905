//! Rotary position embedding with the Hugging Face "rotate-half" pairing.
//!
//! Dimension `i` of a head is rotated together with dimension `i + head_dim/2` (not with `i + 1`
//! as in Meta's layout and Burn's `RotaryEncoding`), so Hugging Face LLaMA checkpoints load without
//! permuting the query and key weights.

use burn::tensor::{Device, Tensor, TensorData};

/// The rotation angles' base frequencies: `theta^(-2i/head_dim)` for `i < head_dim/2`.
#[derive(Clone, Debug, PartialEq)]
pub struct RotaryEmbedding {
    head_dim: usize,
    theta: f64,
}

/// `cos` and `sin` of the angles of a run of positions, each `[seq, head_dim]`.
#[derive(Clone, Debug)]
pub struct RopeTables {
    cos: Tensor<2>,
    sin: Tensor<2>,
}

impl RotaryEmbedding {
    /// A rotary embedding for heads of even size `head_dim`.
    pub fn new(head_dim: usize, theta: f64) -> Self {
        Self { head_dim, theta }
    }

    /// Tables for positions `offset .. offset + len`, computed in f64 on the host.
    pub fn tables(&self, offset: usize, len: usize, device: &Device) -> RopeTables {
        let half = self.head_dim / 2;
        let inv_freq: Vec<f64> =
            (0..half).map(|i| self.theta.powf(-((2 * i) as f64) / self.head_dim as f64)).collect();
        let mut cos = Vec::with_capacity(len * self.head_dim);
        let mut sin = Vec::with_capacity(len * self.head_dim);
        for position in offset..offset + len {
            // Both halves of a head share the angles: [f_0 .. f_{h-1}, f_0 .. f_{h-1}].
            for i in 0..self.head_dim {
                let angle = position as f64 * inv_freq[i % half];
                cos.push(angle.cos() as f32);
                sin.push(angle.sin() as f32);
            }
        }
        let shape = [len, self.head_dim];
        RopeTables {
            cos: Tensor::from_data(TensorData::new(cos, shape), device),
            sin: Tensor::from_data(TensorData::new(sin, shape), device),
        }
    }
}

impl RopeTables {
    /// Rotates queries or keys. Shapes: `[batch, heads, seq, head_dim] -> same`.
    pub fn apply(&self, x: Tensor<4>) -> Tensor<4> {
        let [_, _, _, head_dim] = x.dims();
        let half = head_dim / 2;
        let dtype = x.dtype();
        let cos = self.cos.clone().cast(dtype).unsqueeze::<4>(); // [1, 1, seq, head_dim]
        let sin = self.sin.clone().cast(dtype).unsqueeze::<4>();
        // rotate_half(x) = [-x2, x1] where x = [x1, x2]
        let x1 = x.clone().narrow(3, 0, half);
        let x2 = x.clone().narrow(3, half, half);
        let rotated = Tensor::cat(vec![x2.neg(), x1], 3);
        x * cos + rotated * sin
    }
}
