//! The curse of depth in miniature, at initialisation: in a deep, narrow random model the
//! variance of the block outputs grows about linearly with depth under Pre-LN and much more
//! slowly under LayerNorm Scaling.

mod common;

use common::{cpu, random_tokens};
use layernorm_scaling::{LlamaConfig, NormScheme};

/// Variance of every element of `hidden[l]` for `l = 0..=L`.
fn layer_variances(scheme: NormScheme) -> Vec<f64> {
    let device = cpu();
    device.seed(42);
    let config = LlamaConfig::new(64, 176, 32, 4).with_vocab_size(256).with_norm_scheme(scheme);
    let model = config.init(&device).unwrap();
    let trace = model.forward_trace(random_tokens(4, 64, 256, 1, &device));
    trace.hidden.iter().map(|h| common::mean_std(h).1.powi(2)).collect()
}

#[test]
fn pre_ln_variance_grows_linearly_and_lns_tames_it() {
    let pre = layer_variances(NormScheme::PreLn);
    let lns = layer_variances(NormScheme::default());
    let growth = |v: &[f64], from: usize, to: usize| v[to] - v[from];
    println!("layer  pre-ln      lns");
    for l in (0..=32).step_by(4) {
        println!("{l:5}  {:.3e}  {:.3e}", pre[l], lns[l]);
    }
    // Pre-LN: every block adds about the same variance (linear growth): the second half of the
    // stack adds at least 70% of what the first half added.
    let (pre_first, pre_second) = (growth(&pre, 0, 16), growth(&pre, 16, 32));
    assert!(pre_first > 0.0 && pre_second > 0.7 * pre_first, "pre-ln: {pre_first:.3e} then {pre_second:.3e}");
    // LNS: block l adds at most about 1/l of that (the attention branch is linear in the norm
    // output, so its variance shrinks as 1/l; the feed-forward branch shrinks faster), so growth
    // is sublinear: the second half adds clearly less than the first (measured: 0.45x)...
    let (lns_first, lns_second) = (growth(&lns, 0, 16), growth(&lns, 16, 32));
    assert!(lns_first > 0.0 && lns_second < 0.6 * lns_first, "lns: {lns_first:.3e} then {lns_second:.3e}");
    // ...and the total growth over 32 layers is many times smaller (measured: 17x).
    assert!(
        growth(&lns, 0, 32) * 5.0 < growth(&pre, 0, 32),
        "pre {:.3e} vs lns {:.3e}",
        growth(&pre, 0, 32),
        growth(&lns, 0, 32)
    );
    // Both start from the same embedding.
    assert!((pre[0] - lns[0]).abs() < 1e-12);
}
