//! Every normalisation scheme the paper compares, plus Peri-LN, each resolved per layer into a
//! [`LayerPlan`].
//!
//! This file is the one place where what a scheme does to a layer lives (its formula as code);
//! the transformer block only executes the plan. Notation: `N` a norm, `F` a sub-layer (attention or feed-forward),
//! `l` the 1-based layer, `L` the number of layers, `sigma` the base init std (0.02).
//!
//! [`NormScheme::plan`] holds what each scheme does to a layer; the schemes' names, parsing and
//! table are in `scheme_names.rs` ([`SCHEMES`](super::SCHEMES)).
//!
//! Every model also has a final norm before the LM head, never depth-scaled. `N` is any
//! [`NormKind`](super::NormKind) (RMSNorm, LayerNorm, DyT, Derf or BHyT); each carries the LNS
//! factor, so `lns` over DyT is `x + F(DyT(x) / sqrt(l))`.
//!
//! Sandwich-LN vs Peri-LN: the blocks are the same (one [`Placement::Sandwich`], a norm on each
//! sub-layer's input and one on its output, inside the residual branch). Peri-LN (Kim et al. 2025;
//! OLMo-core's `PeriNormTransformerBlock` with its embedding norm) also normalises the embedding
//! output once, so the residual stream starts at the norm's scale instead of the embedding's
//! init std (0.02); Sandwich-LN (CogView) feeds the raw embedding to block 1. Neither takes the
//! LNS factor: each output norm already fixes its branch's contribution to the residual at
//! `gamma`'s scale, so the hidden-state variance grows at most linearly with depth instead of the
//! growth LNS corrects, and a `1/sqrt(l)` on an output norm would only reparametrise its learnable
//! `gamma` (`gamma / sqrt(l)`).
use serde::{Deserialize, Serialize};

use super::depth_scale;
use super::init::{InitScheme, LayerInit};
use crate::config_error::ConfigError;

/// Where LayerNorm Scaling applies its factor `1/sqrt(l)` (the positions of the paper's Table 8).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LnsPosition {
    /// On the output of both Pre-LN norms: `F(N(x) / sqrt(l))`. The method of the paper.
    #[default]
    AfterNorm,
    /// On the norm's input: `F(N(x / sqrt(l)))`. RMSNorm and LayerNorm are scale invariant, so this
    /// differs from Pre-LN only through epsilon (the paper measured 26.97 ppl vs Pre-LN 26.73).
    BeforeNorm,
    /// On the output of both sub-layers: `F(N(x)) / sqrt(l)`.
    AfterSublayer,
    /// On the attention output only.
    AfterAttention,
    /// On the feed-forward output only.
    AfterFfn,
}

impl LnsPosition {
    /// Every position: its name after `lns:`, its title and its block, as the docs show them.
    pub(super) const ALL: [(LnsPosition, &'static str, &'static str, &'static str); 5] = [
        (LnsPosition::AfterNorm, "after-norm", "LayerNorm Scaling (the paper)", "`x + F(N(x) / sqrt(l))`"),
        (
            LnsPosition::BeforeNorm,
            "before-norm",
            "LNS before the norm",
            "`x + F(N(x / sqrt(l)))` (RMSNorm and LayerNorm are scale invariant: Pre-LN up to eps)",
        ),
        (LnsPosition::AfterSublayer, "after-sublayer", "LNS on the sub-layer output", "`x + F(N(x)) / sqrt(l)`"),
        (
            LnsPosition::AfterAttention,
            "after-attention",
            "LNS on the attention output only",
            "`x + Attn(N(x)) / sqrt(l)`, the feed-forward as Pre-LN",
        ),
        (
            LnsPosition::AfterFfn,
            "after-ffn",
            "LNS on the feed-forward output only",
            "`x + FFN(N(x)) / sqrt(l)`, attention as Pre-LN",
        ),
    ];

    /// The position's name after `lns:`.
    pub fn name(self) -> &'static str {
        Self::ALL.iter().find(|row| row.0 == self).map_or("after-norm", |row| row.1)
    }

    pub(super) fn from_name(name: &str) -> Option<LnsPosition> {
        Self::ALL.iter().find(|row| row.1 == name).map(|row| row.0)
    }
}

/// A normalisation scheme: where the norms sit in each block, how the residual is scaled and how
/// the weights are initialised. Serialised as `{"scheme": "lns", "position": "after-norm"}` etc.;
/// parsed from strings such as `lns`, `lns:after-ffn`, `mix-ln:0.25`, `layer-scale:0.1`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "scheme", rename_all = "kebab-case")]
pub enum NormScheme {
    /// Pre-LN: `x + F(N(x))`.
    PreLn,
    /// Pre-LN with LayerNorm Scaling (the paper's method).
    Lns {
        /// Where the factor is applied.
        #[serde(default)]
        position: LnsPosition,
    },
    /// Post-LN: `N(x + F(x))`.
    PostLn,
    /// DeepNorm (DeepNet, decoder-only): `N(alpha x + F(x))` with `alpha = (2L)^(1/4)` and init
    /// gain `beta = (8L)^(-1/4)` on the value, output and feed-forward weights.
    ///
    /// The paper's public code hard-codes `alpha = sqrt(8)` and a gain of `(8L)^(+1/4)`, which
    /// looks inverted; this crate implements DeepNet's formulas.
    DeepNorm,
    /// Mix-LN: the first `round(post_ln_fraction * L)` layers are Post-LN, the rest Pre-LN.
    MixLn {
        /// Fraction of layers (from the bottom) that are Post-LN, in `[0, 1]`. Default 0.25.
        #[serde(default = "default_post_ln_fraction")]
        post_ln_fraction: f64,
    },
    /// Pre-LN with the output and down projections initialised with std `sigma / sqrt(2L)`.
    ScaledInit,
    /// Pre-LN with the output and down projections of layer `l` initialised with std `sigma / sqrt(2l)`.
    DepthScaledInit,
    /// Pre-LN with a learnable per-channel scale on each branch output (CaiT's LayerScale).
    LayerScale {
        /// Initial value of every `lambda` (CaiT: 0.1 up to 18 layers, smaller for deeper). Default 0.1.
        #[serde(default = "default_layer_scale_init")]
        init: f64,
    },
    /// Pre-LN with a learnable scalar on each branch output (SkipInit / scaled residual).
    SkipInit {
        /// Initial value of the scalar. Default 0.001, as in the paper's runs (SkipInit proper uses 0).
        #[serde(default = "default_skip_init")]
        init: f64,
    },
    /// Sandwich-LN: `x + N2(F(N1(x)))`; block 1 takes the embedding as it is.
    SandwichLn,
    /// Peri-LN: Sandwich-LN's blocks, `x + N2(F(N1(x)))`, plus a norm on the embedding output.
    PeriLn,
    /// OLMo-2's reordered norm (OLMo-core's `ReorderedNormTransformerBlock`): `x + N(F(x))`, a norm
    /// on each sub-layer's output and none on its input.
    ReorderedNorm,
    /// CompleteP (arXiv 2505.01618, depth part at `alpha = 1`): Pre-LN with each branch output
    /// multiplied by `L_base / L`, and Adam's epsilon by the same factor, so that settings tuned
    /// at depth `L_base` transfer to depth `L`.
    #[serde(rename = "completep")]
    CompleteP {
        /// The depth the settings were tuned at, `L_base`. Default 2 (the authors' depth check).
        #[serde(default = "default_base_depth")]
        base_depth: f64,
    },
    /// GPAS (arXiv 2506.22049) over Pre-LN or LNS: after each residual add, `y - SiLU(g) sg(y)` with
    /// one learnable scalar `g` per layer (starting at 0) and `sg` the stop-gradient.
    Gpas {
        /// The blocks GPAS acts on.
        #[serde(default)]
        base: GpasBase,
    },
}

/// The blocks GPAS acts on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GpasBase {
    /// Pre-LN: `x + F(N(x))`.
    #[default]
    PreLn,
    /// LayerNorm Scaling: `x + F(N(x) / sqrt(l))`.
    Lns,
}

impl GpasBase {
    pub(super) const ALL: [(GpasBase, &'static str); 2] = [(GpasBase::PreLn, "pre-ln"), (GpasBase::Lns, "lns")];

    /// The base's name after `gpas:`.
    pub fn name(self) -> &'static str {
        Self::ALL.iter().find(|row| row.0 == self).map_or("pre-ln", |row| row.1)
    }

    pub(super) fn from_name(name: &str) -> Option<GpasBase> {
        Self::ALL.iter().find(|row| row.1 == name).map(|row| row.0)
    }
}

/// Mix-LN's default fraction of Post-LN layers.
pub(super) const POST_LN_FRACTION: f64 = 0.25;
/// LayerScale's default initial `lambda` (CaiT, up to 18 layers).
pub(super) const LAYER_SCALE_INIT: f64 = 0.1;
/// SkipInit's default initial scalar (the paper's runs).
pub(super) const SKIP_INIT: f64 = 0.001;
/// CompleteP's default base depth (the authors' public depth check).
pub(super) const BASE_DEPTH: f64 = 2.0;

fn default_post_ln_fraction() -> f64 {
    POST_LN_FRACTION
}
fn default_layer_scale_init() -> f64 {
    LAYER_SCALE_INIT
}
fn default_skip_init() -> f64 {
    SKIP_INIT
}
fn default_base_depth() -> f64 {
    BASE_DEPTH
}

impl Default for NormScheme {
    /// LayerNorm Scaling after the norm: the paper's method.
    fn default() -> Self {
        NormScheme::Lns { position: LnsPosition::AfterNorm }
    }
}

/// Where a block's norms sit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placement {
    /// `x + F(N(x))`.
    Pre,
    /// `N(alpha x + F(x))`.
    Post,
    /// `x + N2(F(N1(x)))` (Sandwich-LN and Peri-LN).
    Sandwich,
    /// `x + N(F(x))` (OLMo-2's reordered norm).
    Reordered,
}

/// A learnable multiplier on each residual branch's output.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum BranchGate {
    /// No gate.
    None,
    /// One value per channel, `[d_model]`, starting at `init`.
    PerChannel {
        /// The initial value.
        init: f64,
    },
    /// One scalar, `[1]`, starting at `init`.
    Scalar {
        /// The initial value.
        init: f64,
    },
}

/// What one layer does under a scheme; computed by [`NormScheme::plan`], executed by the block.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerPlan {
    /// Where the norms sit.
    pub placement: Placement,
    /// Factor on each norm's output (LNS after the norm, the paper's method: `1/sqrt(l)`; also
    /// GPAS over LNS). The norms carry it ([`NormKind::init`](super::NormKind::init)).
    pub norm_output_scale: f64,
    /// Factor on each norm's input (LNS before the norm).
    pub norm_input_scale: f64,
    /// Factor on the attention output (LNS after the sub-layer).
    pub attn_output_scale: f64,
    /// Factor on the feed-forward output (LNS after the sub-layer).
    pub ffn_output_scale: f64,
    /// Factor on the residual stream inside a Post-LN block (DeepNorm's alpha).
    pub residual_scale: f64,
    /// The learnable gate on each branch output.
    pub gate: BranchGate,
    /// Whether GPAS follows each residual add: `y - SiLU(g) sg(y)`, one scalar `g` a layer.
    pub gpas: bool,
    /// The init of the layer's projections.
    pub init: LayerInit,
}

impl NormScheme {
    /// Checks the scheme's own parameters.
    pub fn validate(&self) -> Result<(), ConfigError> {
        match *self {
            NormScheme::MixLn { post_ln_fraction: f } if !(0.0..=1.0).contains(&f) => {
                Err(ConfigError::OutOfRange { field: "post_ln_fraction", value: f, expected: "a fraction in [0, 1]" })
            }
            // A negative gate would flip its branch's sign: a typo, not a setting.
            // The gate is an f32 parameter: a value past its range would start it at infinity.
            NormScheme::LayerScale { init } | NormScheme::SkipInit { init }
                if !((init as f32).is_finite() && init >= 0.0) =>
            {
                Err(ConfigError::OutOfRange {
                    field: "init",
                    value: init,
                    expected: "a number >= 0 within f32's range (at most 3.4e38; the gate's initial value, e.g. 0.1)",
                })
            }
            // Its factor L_BASE / L scales f32 branches and Adam's epsilon.
            NormScheme::CompleteP { base_depth } if !(base_depth >= 1.0 && (base_depth as f32).is_finite()) => {
                Err(ConfigError::OutOfRange {
                    field: "base_depth",
                    value: base_depth,
                    expected: "a number of layers >= 1 within f32's range (the depth the settings were tuned at, \
                               e.g. 2)",
                })
            }
            _ => Ok(()),
        }
    }

    /// Mix-LN's number of Post-LN layers out of `n_layers`: `round(fraction * L)`; 0 for other schemes.
    pub fn post_ln_layers(&self, n_layers: usize) -> usize {
        match *self {
            NormScheme::MixLn { post_ln_fraction } => (post_ln_fraction * n_layers as f64).round() as usize,
            _ => 0,
        }
    }

    /// Whether the embedding output is normalised before block 1 (Peri-LN).
    pub fn embedding_norm(&self) -> bool {
        *self == NormScheme::PeriLn
    }

    /// Norms in each block: 4 with a norm on each sub-layer's input and output (Sandwich-LN,
    /// Peri-LN), else 2.
    pub fn norms_per_block(&self) -> usize {
        match self {
            NormScheme::SandwichLn | NormScheme::PeriLn => 4,
            _ => 2,
        }
    }

    /// Whether the scheme sets its own init (DeepNorm's gain, `scaled-init`, `depth-scaled-init`,
    /// CompleteP's depth-independent `N(0, sigma)`): such a scheme combines with no [`InitScheme`]
    /// but `normal`.
    pub fn sets_init(&self) -> bool {
        matches!(
            self,
            NormScheme::DeepNorm | NormScheme::ScaledInit | NormScheme::DepthScaledInit | NormScheme::CompleteP { .. }
        )
    }

    /// The factor on Adam's epsilon at depth `n_layers`: CompleteP's `L_base / L`, else 1.
    pub fn adam_eps_factor(&self, n_layers: usize) -> f64 {
        match *self {
            NormScheme::CompleteP { base_depth } => base_depth / n_layers.max(1) as f64,
            _ => 1.0,
        }
    }

    /// DeepNorm's residual factor `alpha = (2L)^(1/4)`.
    pub fn deepnorm_alpha(n_layers: usize) -> f64 {
        (2.0 * n_layers as f64).powf(0.25)
    }

    /// DeepNorm's init gain `beta = (8L)^(-1/4)`.
    pub fn deepnorm_beta(n_layers: usize) -> f64 {
        (8.0 * n_layers as f64).powf(-0.25)
    }

    /// Resolves the scheme for the 1-based `layer` of an `n_layers` model whose base init std is `std`.
    pub fn plan(&self, layer: usize, n_layers: usize, std: f64) -> Result<LayerPlan, ConfigError> {
        self.validate()?;
        let s = depth_scale(layer)?;
        if layer > n_layers {
            return Err(ConfigError::NoSuchLayer { layer, n_layers });
        }
        let mut plan = LayerPlan {
            placement: Placement::Pre,
            norm_output_scale: 1.0,
            norm_input_scale: 1.0,
            attn_output_scale: 1.0,
            ffn_output_scale: 1.0,
            residual_scale: 1.0,
            gate: BranchGate::None,
            gpas: false,
            init: LayerInit::uniform(std),
        };
        match *self {
            NormScheme::PreLn => {}
            NormScheme::Lns { position } => match position {
                LnsPosition::AfterNorm => plan.norm_output_scale = s,
                LnsPosition::BeforeNorm => plan.norm_input_scale = s,
                LnsPosition::AfterSublayer => {
                    plan.attn_output_scale = s;
                    plan.ffn_output_scale = s;
                }
                LnsPosition::AfterAttention => plan.attn_output_scale = s,
                LnsPosition::AfterFfn => plan.ffn_output_scale = s,
            },
            NormScheme::PostLn => plan.placement = Placement::Post,
            NormScheme::DeepNorm => {
                let beta = Self::deepnorm_beta(n_layers);
                plan.placement = Placement::Post;
                plan.residual_scale = Self::deepnorm_alpha(n_layers);
                plan.init = LayerInit { q_k_std: std, ..LayerInit::uniform(std * beta) };
            }
            NormScheme::MixLn { .. } => {
                if layer <= self.post_ln_layers(n_layers) {
                    plan.placement = Placement::Post;
                }
            }
            NormScheme::ScaledInit => plan.init = InitScheme::Scaled.apply(plan.init, std, layer, n_layers),
            NormScheme::DepthScaledInit => plan.init = InitScheme::DepthScaled.apply(plan.init, std, layer, n_layers),
            NormScheme::LayerScale { init } => plan.gate = BranchGate::PerChannel { init },
            NormScheme::SkipInit { init } => plan.gate = BranchGate::Scalar { init },
            // Peri-LN's embedding norm is the model's, not a block's: see `embedding_norm`.
            NormScheme::SandwichLn | NormScheme::PeriLn => plan.placement = Placement::Sandwich,
            NormScheme::ReorderedNorm => plan.placement = Placement::Reordered,
            NormScheme::CompleteP { base_depth } => {
                let branch = base_depth / n_layers as f64;
                plan.attn_output_scale = branch;
                plan.ffn_output_scale = branch;
            }
            NormScheme::Gpas { base } => {
                plan.gpas = true;
                if base == GpasBase::Lns {
                    plan.norm_output_scale = s;
                }
            }
        }
        Ok(plan)
    }
}
