//! Grouped-query attention's heads: each key/value head serves a group of query heads.

use burn::tensor::Tensor;

/// Repeats each key/value head for the query heads of its group:
/// `[b, kv_heads, s, hd] -> [b, heads, s, hd]`.
pub(crate) fn repeat_kv(x: Tensor<4>, heads: usize) -> Tensor<4> {
    let [batch, kv_heads, seq, head_dim] = x.dims();
    let groups = heads / kv_heads;
    if groups == 1 {
        return x;
    }
    x.unsqueeze_dim::<5>(2).expand([batch, kv_heads, groups, seq, head_dim]).reshape([batch, heads, seq, head_dim])
}
