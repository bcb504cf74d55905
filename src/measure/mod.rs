//! Measurements that training and the analysis share: the layer-wise variance and largest
//! activation of a forward pass,
//! the mean loss on held-out data, and the tracking and metric records a run writes.

mod activation;
#[cfg(feature = "data")]
mod loss;
mod metric_record;
mod tracking_record;
mod variance;

pub use activation::{max_abs, max_abs_activations, FP16_MAX};
#[cfg(feature = "data")]
pub use loss::{evaluation_batches, mean_loss};
#[cfg(feature = "train")]
pub(crate) use metric_record::parse_metric_lines;
pub use metric_record::{first_non_finite_loss, read_metrics, MetricRow, METRICS_FILE};
#[cfg(feature = "train")]
pub(crate) use tracking_record::read_tracking_lines;
pub use tracking_record::{read_tracking, TrackRecord, TRACKING_FILE};
pub use variance::{layer_variances, token_variance, LayerVariances};

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// `n` varied floats: random bit patterns (finite), f32 values widened to f64 (as the losses
    /// are), losses in `[0, 12)` and learning-rate-like powers of ten. Without serde_json's
    /// `float_roundtrip` about one in ten of them reads back one ulp off.
    pub(crate) fn random_floats(n: usize) -> Vec<f64> {
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move || {
            // SplitMix64.
            state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let z = (state ^ (state >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            let z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        let unit = |bits: u64| (bits >> 11) as f64 / (1u64 << 53) as f64;
        (0..n)
            .map(|i| {
                let bits = next();
                let value = match i % 4 {
                    0 => f64::from_bits(bits),
                    1 => f32::from_bits(bits as u32) as f64,
                    2 => unit(bits) * 12.0,
                    _ => 10f64.powf(-8.0 * unit(bits)),
                };
                if value.is_finite() {
                    value
                } else {
                    unit(bits)
                }
            })
            .collect()
    }

    fn bits(values: &[f64]) -> Vec<u64> {
        values.iter().map(|v| v.to_bits()).collect()
    }

    #[test]
    fn metric_and_tracking_records_read_back_bit_identical() {
        let values = random_floats(4000);
        let dir = tempfile::tempdir().unwrap();
        let rows: Vec<MetricRow> = values
            .iter()
            .enumerate()
            .map(|(i, &value)| MetricRow {
                split: "train".into(),
                epoch: 1,
                batch: i + 1,
                step: i + 1,
                metric: "Loss".into(),
                value,
                count: Some(64),
                is_final: false,
            })
            .collect();
        let text: String = rows.iter().map(|row| serde_json::to_string(row).unwrap() + "\n").collect();
        std::fs::write(dir.path().join(METRICS_FILE), text).unwrap();
        let read: Vec<f64> = read_metrics(dir.path()).unwrap().iter().map(|row| row.value).collect();
        assert_eq!(bits(&read), bits(&values));

        let records: Vec<TrackRecord> = values
            .chunks(8)
            .enumerate()
            .map(|(step, v)| TrackRecord {
                step,
                block_output_variance: v[..3].to_vec(),
                after_attention_variance: v[3..5].to_vec(),
                grad_norm: v[5..7].to_vec(),
                max_abs_activation: v[4..7].to_vec(),
            })
            .collect();
        let text: String = records.iter().map(|r| serde_json::to_string(r).unwrap() + "\n").collect();
        std::fs::write(dir.path().join(TRACKING_FILE), text).unwrap();
        let read = read_tracking(dir.path()).unwrap();
        let flat = |records: &[TrackRecord]| -> Vec<u64> {
            records
                .iter()
                .flat_map(|r| {
                    [&r.block_output_variance, &r.after_attention_variance, &r.grad_norm, &r.max_abs_activation]
                })
                .flat_map(|v| bits(v))
                .collect()
        };
        assert_eq!(flat(&read), flat(&records));
    }
}
