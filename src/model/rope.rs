//! Rotary position embedding with the Hugging Face "rotate-half" pairing.
//!
//! Dimension `i` of a head is rotated together with dimension `i + head_dim/2` (not with `i + 1`
//! as in Meta's layout and Burn's `RotaryEncoding`), so Hugging Face LLaMA checkpoints load without
//! permuting the query and key weights.

use std::sync::{Arc, OnceLock};

use burn::tensor::{DType, Device, Tensor, TensorData};
use serde::{Deserialize, Serialize};

use crate::{config_error::ConfigError, fused};

/// A change of the rotary frequencies for longer contexts, as Hugging Face's `rope_scaling`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case", deny_unknown_fields)]
pub enum RopeScaling {
    /// Every frequency divided by `factor` (position interpolation).
    Linear {
        /// The divisor.
        factor: f64,
    },
    /// Llama 3.1's scaling: low frequencies divided by `factor`, high ones kept, the band between
    /// interpolated smoothly.
    Llama3 {
        /// Divisor of the low frequencies.
        factor: f64,
        /// Wavelengths above `original_max_position_embeddings / low_freq_factor` are scaled.
        low_freq_factor: f64,
        /// Wavelengths below `original_max_position_embeddings / high_freq_factor` are kept.
        high_freq_factor: f64,
        /// The context length the model was first trained with.
        original_max_position_embeddings: usize,
    },
}

impl RopeScaling {
    /// Checks the scaling's parameters.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let positive = |field: &'static str, value: f64| {
            if value > 0.0 && value.is_finite() {
                Ok(())
            } else {
                Err(ConfigError::OutOfRange { field, value, expected: "a finite number > 0" })
            }
        };
        match *self {
            RopeScaling::Linear { factor } => positive("rope_scaling.factor", factor),
            RopeScaling::Llama3 { factor, low_freq_factor, high_freq_factor, original_max_position_embeddings } => {
                positive("rope_scaling.factor", factor)?;
                positive("rope_scaling.low_freq_factor", low_freq_factor)?;
                positive("rope_scaling.original_max_position_embeddings", original_max_position_embeddings as f64)?;
                if high_freq_factor > low_freq_factor {
                    Ok(())
                } else {
                    Err(ConfigError::OutOfRange {
                        field: "rope_scaling.high_freq_factor",
                        value: high_freq_factor,
                        expected: "greater than low_freq_factor",
                    })
                }
            }
        }
    }

    /// Applies the scaling to the base inverse frequencies.
    fn apply(&self, inv_freq: Vec<f64>) -> Vec<f64> {
        match *self {
            RopeScaling::Linear { factor } => inv_freq.into_iter().map(|f| f / factor).collect(),
            RopeScaling::Llama3 { factor, low_freq_factor, high_freq_factor, original_max_position_embeddings } => {
                let context = original_max_position_embeddings as f64;
                let (low_wavelen, high_wavelen) = (context / low_freq_factor, context / high_freq_factor);
                inv_freq
                    .into_iter()
                    .map(|f| {
                        let wavelen = 2.0 * std::f64::consts::PI / f;
                        if wavelen < high_wavelen {
                            f
                        } else if wavelen > low_wavelen {
                            f / factor
                        } else {
                            let smooth = (context / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
                            (1.0 - smooth) * f / factor + smooth * f
                        }
                    })
                    .collect()
            }
        }
    }
}

/// The rotation angles' frequencies: `theta^(-2i/head_dim)` for `i < head_dim/2`, optionally scaled.
#[derive(Clone, Debug, PartialEq)]
pub struct RotaryEmbedding {
    head_dim: usize,
    inv_freq: Vec<f64>,
}

/// `cos` and `sin` of the angles of a run of positions, each `[seq, head_dim]`.
#[derive(Clone, Debug)]
pub struct RopeTables {
    cos: Tensor<2>,
    sin: Tensor<2>,
    /// The tables in the type the queries and keys come in under mixed precision, cast once for
    /// every layer of a pass rather than twice per layer.
    in_half: Arc<OnceLock<(Tensor<2>, Tensor<2>)>>,
}

impl RotaryEmbedding {
    /// A rotary embedding for heads of even size `head_dim`.
    pub fn new(head_dim: usize, theta: f64) -> Self {
        Self::scaled(head_dim, theta, None)
    }

    /// A rotary embedding whose frequencies are changed by `scaling`.
    pub fn scaled(head_dim: usize, theta: f64, scaling: Option<&RopeScaling>) -> Self {
        let inv_freq: Vec<f64> = (0..head_dim / 2).map(|i| theta.powf(-((2 * i) as f64) / head_dim as f64)).collect();
        let inv_freq = match scaling {
            Some(scaling) => scaling.apply(inv_freq),
            None => inv_freq,
        };
        Self { head_dim, inv_freq }
    }

    /// The inverse frequencies, `head_dim / 2` values.
    pub fn inv_freq(&self) -> &[f64] {
        &self.inv_freq
    }

    /// Tables for positions `offset .. offset + len`, computed in f64 on the host.
    pub fn tables(&self, offset: usize, len: usize, device: &Device) -> RopeTables {
        let half = self.head_dim / 2;
        let inv_freq = &self.inv_freq;
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
            in_half: Default::default(),
        }
    }
}

impl RopeTables {
    /// Rotates queries or keys in the projections' layout ([`fused::rope`]).
    /// Shapes: `[batch, seq, heads, head_dim] -> same`.
    pub fn apply_seq_major(&self, x: Tensor<4>) -> Tensor<4> {
        let (cos, sin) = self.tables_in(x.dtype());
        fused::rope(x, cos, sin)
    }

    /// `(cos, sin)` for queries and keys of `dtype`: in it when it is the pass's half type (cast
    /// once for every layer of the pass), else the f32 tables.
    pub fn tables_in(&self, dtype: DType) -> (Tensor<2>, Tensor<2>) {
        if dtype == self.cos.dtype() {
            return (self.cos.clone(), self.sin.clone());
        }
        let (cos, sin) = self.in_half.get_or_init(|| (self.cos.clone().cast(dtype), self.sin.clone().cast(dtype)));
        // A pass in one half type: a tensor of another (never, in this crate) takes its own cast.
        if cos.dtype() == dtype {
            (cos.clone(), sin.clone())
        } else {
            (self.cos.clone(), self.sin.clone())
        }
    }

    /// Rotates queries or keys. Shapes: `[batch, heads, seq, head_dim] -> same`.
    pub fn apply(&self, x: Tensor<4>) -> Tensor<4> {
        self.apply_seq_major(x.swap_dims(1, 2)).swap_dims(1, 2)
    }

    /// `cos` of the angles, `[seq, head_dim]`.
    pub fn cos(&self) -> Tensor<2> {
        self.cos.clone()
    }

    /// `sin` of the angles, `[seq, head_dim]`.
    pub fn sin(&self) -> Tensor<2> {
        self.sin.clone()
    }
}
