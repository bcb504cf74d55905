//! The model sizes of the paper (section 4.1, Table 1) and `tiny` ones for tests and CPU runs.

use super::config::LlamaConfig;
use crate::config_error::ConfigError;

/// `(name, d_model, d_ff, n_layers, n_heads)` of every preset. All use vocabulary 32000 (t5-base),
/// RoPE theta 10000, RMSNorm eps 1e-6, untied embeddings and full multi-head attention.
pub const PRESETS: [(&str, usize, usize, usize, usize); 11] = [
    ("9m", 128, 352, 4, 4),
    ("20m", 256, 688, 4, 4),
    ("35m", 384, 1024, 6, 8),
    ("60m", 512, 1376, 8, 8),
    ("71m", 512, 1368, 12, 8),
    ("130m", 768, 2048, 12, 12),
    ("250m", 768, 2560, 24, 16),
    ("350m", 1024, 2736, 24, 16),
    ("1b", 2048, 5461, 24, 32),
    ("3b", 2560, 6848, 32, 32),
    ("7b", 4096, 11008, 32, 32),
];

impl LlamaConfig {
    /// The config of a named preset: `tiny` or one of [`PRESETS`] (`9m` ... `7b`).
    pub fn preset(name: &str) -> Result<Self, ConfigError> {
        let lower = name.trim().to_ascii_lowercase();
        let lower = lower.strip_prefix("llama-").unwrap_or(&lower);
        if lower == "tiny" {
            return Ok(Self::tiny());
        }
        if lower == "tiny-8l" {
            return Ok(Self::tiny_8l());
        }
        PRESETS
            .iter()
            .find(|(preset, ..)| *preset == lower)
            .map(|&(_, d_model, d_ff, n_layers, n_heads)| LlamaConfig::new(d_model, d_ff, n_layers, n_heads))
            .ok_or_else(|| ConfigError::Unknown {
                what: "model preset",
                name: name.to_string(),
                expected: Self::preset_names().join(", "),
            })
    }

    /// The names [`preset`](LlamaConfig::preset) accepts.
    pub fn preset_names() -> Vec<&'static str> {
        ["tiny", "tiny-8l"].into_iter().chain(PRESETS.iter().map(|(name, ..)| *name)).collect()
    }

    /// A 4-layer, 64-wide model over a 256-token (byte) vocabulary, for tests and CI (~0.23M parameters).
    pub fn tiny() -> Self {
        LlamaConfig::new(64, 176, 4, 4).with_vocab_size(256).with_max_seq_len(256)
    }

    /// [`tiny`](LlamaConfig::tiny) at 8 layers: the default training model, deep enough to show
    /// the curse of depth and trained in minutes on a CPU (~0.43M parameters).
    pub fn tiny_8l() -> Self {
        Self { n_layers: 8, ..Self::tiny() }
    }

    /// LLaMA-9M: 128 wide, 4 layers.
    pub fn llama_9m() -> Self {
        Self::named("9m")
    }
    /// LLaMA-20M: 256 wide, 4 layers.
    pub fn llama_20m() -> Self {
        Self::named("20m")
    }
    /// LLaMA-35M: 384 wide, 6 layers.
    pub fn llama_35m() -> Self {
        Self::named("35m")
    }
    /// LLaMA-60M: 512 wide, 8 layers.
    pub fn llama_60m() -> Self {
        Self::named("60m")
    }
    /// LLaMA-71M: 512 wide, 12 layers.
    pub fn llama_71m() -> Self {
        Self::named("71m")
    }
    /// LLaMA-130M: 768 wide, 12 layers (the paper's main ablation size).
    pub fn llama_130m() -> Self {
        Self::named("130m")
    }
    /// LLaMA-250M: 768 wide, 24 layers.
    pub fn llama_250m() -> Self {
        Self::named("250m")
    }
    /// LLaMA-350M: 1024 wide, 24 layers.
    pub fn llama_350m() -> Self {
        Self::named("350m")
    }
    /// LLaMA-1B: 2048 wide, 24 layers.
    pub fn llama_1b() -> Self {
        Self::named("1b")
    }
    /// LLaMA-3B: 2560 wide, 32 layers.
    pub fn llama_3b() -> Self {
        Self::named("3b")
    }
    /// LLaMA-7B: 4096 wide, 32 layers.
    pub fn llama_7b() -> Self {
        Self::named("7b")
    }

    fn named(name: &str) -> Self {
        Self::preset(name).expect("every name in PRESETS is a preset")
    }
}
