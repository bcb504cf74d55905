//! The key/value cache of incremental decoding, in buffers of a fixed capacity.
//!
//! Decoding token by token, a cache that grows by one position a step gives every attention
//! kernel a new shape a step, and a GPU backend compiles (and autotunes) kernels for each new
//! shape: the main command's samples took longer than its training on wgpu. The buffers here
//! hold a power-of-two number of positions (at least [`MIN_CAPACITY`]) and double when full, so
//! `n` tokens meet about `log2(n)` shapes; the positions not yet written are masked out of the
//! attention.

use burn::tensor::{Bool, IndexingUpdateOp, Int, Tensor, TensorData};

/// The fewest positions a layer's buffers hold.
pub const MIN_CAPACITY: usize = 16;

/// Keys and values of the positions one layer has seen: `key`, `value`: `[batch, n_kv_heads,
/// capacity, head_dim]` in the float type of the keys first written, positions `0..len` written,
/// the rest zero.
#[derive(Clone, Debug)]
pub struct LayerKv {
    /// Rotated keys.
    pub key: Tensor<4>,
    /// Values.
    pub value: Tensor<4>,
    /// The positions written.
    pub len: usize,
}

impl LayerKv {
    /// A cache holding the keys and values of the first positions, `[batch, n_kv_heads, seq, head_dim]`.
    pub fn new(key: Tensor<4>, value: Tensor<4>) -> Self {
        let [batch, heads, seq, head_dim] = key.dims();
        // In the keys' float type (a bf16 model's, whatever the device's default type is).
        let empty = || Tensor::zeros([batch, heads, capacity_for(seq), head_dim], (&key.device(), key.dtype()));
        let mut cache = Self { key: empty(), value: empty(), len: 0 };
        cache.append(key, value);
        cache
    }

    /// The positions the buffers hold.
    pub fn capacity(&self) -> usize {
        self.key.dims()[2]
    }

    /// Writes the keys and values of the next positions (`[batch, n_kv_heads, new, head_dim]`)
    /// after the `len` written, doubling the buffers first when they are full.
    pub fn append(&mut self, key: Tensor<4>, value: Tensor<4>) {
        let new = key.dims()[2];
        let needed = self.len + new;
        if needed > self.capacity() {
            let [batch, heads, capacity, head_dim] = self.key.dims();
            let grown = |old: Tensor<4>| {
                let zeros = Tensor::zeros([batch, heads, capacity_for(needed), head_dim], (&old.device(), old.dtype()));
                zeros.slice_assign([0..batch, 0..heads, 0..capacity, 0..head_dim], old)
            };
            self.key = grown(self.key.clone());
            self.value = grown(self.value.clone());
        }
        // The positions as data: the same kernel shapes whatever `len` is. The buffers are zero
        // there, so adding writes them.
        let positions: Vec<i64> = (self.len..needed).map(|p| p as i64).collect();
        let positions: Tensor<1, Int> = Tensor::from_data(TensorData::new(positions, [new]), &key.device());
        self.key = self.key.clone().select_assign(2, positions.clone(), key, IndexingUpdateOp::Add);
        self.value = self.value.clone().select_assign(2, positions, value, IndexingUpdateOp::Add);
        self.len = needed;
    }

    /// The attention mask of `new` queries that follow `len - new` earlier positions, over the
    /// whole buffer: `[1, 1, new, capacity]`, true where a key is hidden (a later position, or
    /// one not written).
    pub fn mask(&self, new: usize) -> Tensor<4, Bool> {
        let (capacity, past) = (self.capacity(), self.len - new);
        let hidden: Vec<bool> = (0..new).flat_map(|i| (0..capacity).map(move |j| j > past + i)).collect();
        Tensor::from_data(TensorData::new(hidden, [1, 1, new, capacity]), &self.key.device())
    }
}

/// The capacity of buffers that hold `len` positions: a power of two, at least [`MIN_CAPACITY`].
pub fn capacity_for(len: usize) -> usize {
    len.next_power_of_two().max(MIN_CAPACITY)
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
        self.layers.first().and_then(|kv| kv.as_ref()).map_or(0, |kv| kv.len)
    }

    /// The positions the buffers hold before they grow (0 while empty).
    pub fn capacity(&self) -> usize {
        self.layers.first().and_then(|kv| kv.as_ref()).map_or(0, LayerKv::capacity)
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
