//! Sampling text from a model with its KV cache: temperature, top-k and top-p (nucleus).

use burn::tensor::{Int, Tensor, TensorData};

use super::Llama;
use crate::seed::splitmix64;

/// How tokens are drawn. With the `cli` feature it is also a command line (`clap::Args`:
/// `--max-tokens`, `--temperature`, `--top-k`, `--top-p`, `--seed`).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[cfg_attr(feature = "cli", command(next_help_heading = "Sampling"))]
pub struct SamplingConfig {
    /// Tokens to generate.
    #[cfg_attr(feature = "cli", arg(long = "max-tokens", required = false))]
    pub max_new_tokens: usize,
    /// Softmax temperature; 0 picks the most likely token (greedy).
    #[cfg_attr(feature = "cli", arg(long, required = false))]
    pub temperature: f64,
    /// Keep only the `k` most likely tokens (0: all).
    #[cfg_attr(feature = "cli", arg(long))]
    pub top_k: Option<usize>,
    /// Keep the smallest set of most likely tokens whose probability reaches `p` (1: all).
    #[cfg_attr(feature = "cli", arg(long))]
    pub top_p: Option<f64>,
    /// Seed of the draws.
    #[cfg_attr(feature = "cli", arg(long, required = false))]
    pub seed: u64,
    /// Stop after generating this token (e.g. end-of-text).
    #[cfg_attr(feature = "cli", arg(skip))]
    pub stop: Option<u32>,
}

impl Default for SamplingConfig {
    fn default() -> Self {
        Self { max_new_tokens: 100, temperature: 0.8, top_k: Some(40), top_p: Some(0.95), seed: 0, stop: None }
    }
}

impl SamplingConfig {
    /// An error unless the temperature is a number `>= 0` and `top_p` one in `[0, 1]`.
    pub fn validate(&self) -> Result<(), crate::config_error::ConfigError> {
        if !self.temperature.is_finite() || self.temperature < 0.0 {
            let value = self.temperature;
            return Err(crate::config_error::ConfigError::OutOfRange {
                field: "temperature",
                value,
                expected: "a finite number >= 0",
            });
        }
        match self.top_p {
            Some(value) if !(0.0..=1.0).contains(&value) => Err(crate::config_error::ConfigError::OutOfRange {
                field: "top_p",
                value,
                expected: "a fraction in [0, 1]",
            }),
            _ => Ok(()),
        }
    }
}

/// Continues `prompt` (non-empty token ids); returns only the new tokens.
pub fn generate(model: &Llama, prompt: &[u32], config: &SamplingConfig) -> Vec<u32> {
    let device = model.embed_tokens.weight.device();
    let mut cache = model.new_cache();
    let mut state = config.seed;
    let mut input: Vec<i64> = prompt.iter().map(|&t| t as i64).collect();
    // Not `with_capacity(max_new_tokens)`: a huge request must not allocate before the first token.
    let mut generated = Vec::new();
    while generated.len() < config.max_new_tokens && !input.is_empty() {
        let len = input.len();
        let tokens: Tensor<2, Int> = Tensor::from_data(TensorData::new(std::mem::take(&mut input), [1, len]), &device);
        let logits = model.forward_cached(tokens, &mut cache).narrow(1, len - 1, 1); // [1, 1, vocab]
        let logits: Vec<f32> = logits.to_data().convert::<f32>().try_into_vec().unwrap_or_default();
        state = splitmix64(state);
        let next = sample_from_logits(&logits, config, (state >> 11) as f64 / (1u64 << 53) as f64);
        generated.push(next);
        if Some(next) == config.stop {
            break;
        }
        input.push(next as i64);
    }
    generated
}

/// Picks a token from `logits` given a uniform draw `u` in `[0, 1)`.
pub fn sample_from_logits(logits: &[f32], config: &SamplingConfig, u: f64) -> u32 {
    let argmax = || logits.iter().enumerate().max_by(|a, b| a.1.total_cmp(b.1)).map_or(0, |(i, _)| i as u32);
    if config.temperature <= 0.0 {
        return argmax();
    }
    let mut order: Vec<usize> = (0..logits.len()).collect();
    order.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
    if let Some(k) = config.top_k.filter(|&k| k > 0) {
        order.truncate(k);
    }
    let max = logits[order[0]] as f64;
    let mut probs: Vec<f64> = order.iter().map(|&i| ((logits[i] as f64 - max) / config.temperature).exp()).collect();
    let total: f64 = probs.iter().sum();
    probs.iter_mut().for_each(|p| *p /= total);
    if let Some(top_p) = config.top_p {
        let mut cumulative = 0.0;
        let keep = probs.iter().take_while(|&&p| {
            let before = cumulative;
            cumulative += p;
            before < top_p
        });
        let keep = keep.count().max(1);
        probs.truncate(keep);
        order.truncate(keep);
    }
    let total: f64 = probs.iter().sum();
    let mut target = u * total;
    for (index, p) in order.iter().zip(&probs) {
        if target < *p {
            return *index as u32;
        }
        target -= p;
    }
    *order.last().unwrap_or(&0) as u32
}
