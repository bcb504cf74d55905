//! Seeded randomness without a generator to carry: every seed, split and shuffle of the crate is a
//! hash of its inputs.

/// The SplitMix64 mixing function: a fast, well-spread 64-bit hash (seeds, splits, shuffles).
pub fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
