//! The key/value cache of incremental decoding.

use burn::tensor::Tensor;

/// Keys and values of the positions one layer has seen, each `[batch, n_kv_heads, seq, head_dim]`.
#[derive(Clone, Debug)]
pub struct LayerKv {
    /// Rotated keys.
    pub key: Tensor<4>,
    /// Values.
    pub value: Tensor<4>,
}

/// The keys and values of every layer for the positions decoded so far.
///
/// Create one with [`Llama::new_cache`](super::Llama::new_cache) and pass it to
/// [`Llama::forward_cached`](super::Llama::forward_cached) for each new chunk of tokens.
#[derive(Clone, Debug)]
pub struct KvCache {
    pub(crate) layers: Vec<Option<LayerKv>>,
}

impl KvCache {
    /// An empty cache for a model of `n_layers` blocks.
    pub fn new(n_layers: usize) -> Self {
        Self { layers: vec![None; n_layers] }
    }

    /// The number of positions cached (the position of the next token).
    pub fn len(&self) -> usize {
        self.layers.first().and_then(|kv| kv.as_ref()).map_or(0, |kv| kv.key.dims()[2])
    }

    /// Whether no position is cached yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets every cached position.
    pub fn clear(&mut self) {
        self.layers.iter_mut().for_each(|kv| *kv = None);
    }
}
