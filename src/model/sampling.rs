//! Sampling text from a model with its KV cache: temperature, top-k and top-p (nucleus).

use burn::tensor::{Int, Tensor, TensorData};

use super::Llama;
use crate::data::splitmix64;

/// How tokens are drawn.
#[derive(Clone, Debug, PartialEq)]
pub struct SamplingConfig {
    /// Tokens to generate.
    pub max_new_tokens: usize,
    /// Softmax temperature; 0 picks the most likely token (greedy).
    pub temperature: f64,
    /// Keep only the `k` most likely tokens.
    pub top_k: Option<usize>,
    /// Keep the smallest set of most likely tokens whose probability reaches `p`.
    pub top_p: Option<f64>,
    /// Seed of the draws.
    pub seed: u64,
    /// Stop after generating this token (e.g. end-of-text).
    pub stop: Option<u32>,
}

impl Default for SamplingConfig {
    fn default() -> Self {
        Self { max_new_tokens: 100, temperature: 0.8, top_k: Some(40), top_p: Some(0.95), seed: 0, stop: None }
    }
}

/// Continues `prompt` (non-empty token ids); returns only the new tokens.
pub fn generate(model: &Llama, prompt: &[u32], config: &SamplingConfig) -> Vec<u32> {
    let device = model.embed_tokens.weight.device();
    let mut cache = model.new_cache();
    let mut state = config.seed;
    let mut input: Vec<i64> = prompt.iter().map(|&t| t as i64).collect();
    let mut generated = Vec::with_capacity(config.max_new_tokens);
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
    if let Some(k) = config.top_k {
        order.truncate(k.max(1));
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
