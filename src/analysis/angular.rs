//! Angular distance between hidden states (the paper's figure 5): deep blocks whose output barely
//! turns the representation are close to the identity.
//!
//! `d(x, y) = arccos(cos(x, y)) / pi`, averaged over tokens: 0 for parallel vectors, 0.5 for
//! orthogonal ones, 1 for opposite ones.

use burn::tensor::Tensor;

/// Mean over tokens of the angular distance between `a` and `b`, both `[batch, seq, d_model]`.
pub fn angular_distance(a: &Tensor<3>, b: &Tensor<3>) -> f64 {
    let values = token_cosines(a, b);
    let total: f64 = values.iter().map(|c| c.acos() / std::f64::consts::PI).sum();
    total / values.len().max(1) as f64
}

/// The cosine similarity of each token's `a` and `b` (both `[batch, seq, d_model]`), in `[-1, 1]`:
/// `batch * seq` values.
pub(crate) fn token_cosines(a: &Tensor<3>, b: &Tensor<3>) -> Vec<f64> {
    let dot = (a.clone() * b.clone()).sum_dim(2); // [batch, seq, 1]
    let norms = a.clone().powf_scalar(2.0).sum_dim(2).sqrt() * b.clone().powf_scalar(2.0).sum_dim(2).sqrt();
    let cosine = (dot / norms.clamp_min(1e-12)).clamp(-1.0, 1.0);
    cosine.to_data().convert::<f64>().try_into_vec::<f64>().unwrap_or_default()
}

/// `d[l][n - 1]` = the angular distance between the hidden states entering block `l + 1` and
/// leaving block `l + n` (i.e. `hidden[l]` and `hidden[l + n]`), for `n = 1 ..= L - l`.
/// Row `l` has `L - l` entries.
pub fn angular_distance_matrix(hidden: &[Tensor<3>]) -> Vec<Vec<f64>> {
    let layers = hidden.len().saturating_sub(1);
    (0..layers).map(|l| (1..=layers - l).map(|n| angular_distance(&hidden[l], &hidden[l + n])).collect()).collect()
}

/// Min-max normalises `matrix[l][n - 1]` (as from [`angular_distance_matrix`]) to `[0, 1]` for each
/// block size `n` over the starting layers `l`: a row of the paper's heatmap (figure 5, after
/// Gromov et al.), whose x axis is `l` and y axis `n`, so each row shows which `n` layers starting
/// at `l` change the representation least. A row with a single or constant value becomes zeros.
/// The result has the input's (triangular) shape.
pub fn normalize_per_n(matrix: &[Vec<f64>]) -> Vec<Vec<f64>> {
    let longest = matrix.iter().map(Vec::len).max().unwrap_or(0);
    let ranges: Vec<(f64, f64)> = (0..longest)
        .map(|k| {
            let values = matrix.iter().filter_map(|row| row.get(k).copied());
            values.fold((f64::INFINITY, f64::NEG_INFINITY), |(min, max), v| (min.min(v), max.max(v)))
        })
        .collect();
    matrix
        .iter()
        .map(|row| {
            row.iter()
                .zip(&ranges)
                .map(|(&v, &(min, max))| if max > min { (v - min) / (max - min) } else { 0.0 })
                .collect()
        })
        .collect()
}
