//! Every normalisation scheme the paper compares, plus Peri-LN, each resolved per layer into a
//! [`LayerPlan`].
//!
//! This file is the one place where a scheme's formula lives; the transformer block only
//! executes the plan. Notation: `N` a norm, `F` a sub-layer (attention or feed-forward),
//! `l` the 1-based layer, `L` the number of layers, `sigma` the base init std (0.02).
//!
//! | scheme | block | init |
//! |---|---|---|
//! | Pre-LN | `x + F(N(x))` | all `N(0, sigma)` |
//! | LNS (after norm) | `x + F(N(x) / sqrt(l))` | plain |
//! | LNS before norm | `x + F(N(x / sqrt(l)))` | plain |
//! | LNS after sub-layer | `x + F(N(x)) / sqrt(l)` (attention and FFN, or only one of them) | plain |
//! | Post-LN | `N(x + F(x))` | plain |
//! | DeepNorm | `N(alpha x + F(x))`, `alpha = (2L)^(1/4)` | v, o, FFN: `sigma * (8L)^(-1/4)` |
//! | Mix-LN | Post-LN for layers `l <= round(f L)`, Pre-LN after | plain |
//! | Scaled Init | Pre-LN | o, down: `sigma / sqrt(2L)` |
//! | Depth-Scaled Init | Pre-LN | o, down: `sigma / sqrt(2l)` |
//! | LayerScale | `x + diag(lambda) F(N(x))`, `lambda` learnable per channel | plain |
//! | SkipInit | `x + a F(N(x))`, `a` a learnable scalar | plain |
//! | Sandwich-LN | `x + N2(F(N1(x)))` | plain |
//! | Peri-LN | `x + N2(F(N1(x)))`, and block 1's input is `Ne(embedding)` | plain |
//!
//! Every model also has a final norm before the LM head, never depth-scaled. `N` is any
//! [`NormKind`](super::NormKind) (RMSNorm, LayerNorm or DyT); each carries the LNS factor, so
//! `lns` over DyT is `x + F(DyT(x) / sqrt(l))`.
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
use core::fmt;
use core::str::FromStr;

use serde::{Deserialize, Serialize};

use super::depth_scale;
use crate::ConfigError;

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
    const ALL: [(LnsPosition, &'static str); 5] = [
        (LnsPosition::AfterNorm, "after-norm"),
        (LnsPosition::BeforeNorm, "before-norm"),
        (LnsPosition::AfterSublayer, "after-sublayer"),
        (LnsPosition::AfterAttention, "after-attention"),
        (LnsPosition::AfterFfn, "after-ffn"),
    ];

    fn name(self) -> &'static str {
        Self::ALL.iter().find(|(p, _)| *p == self).map(|(_, n)| *n).unwrap_or("after-norm")
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
}

fn default_post_ln_fraction() -> f64 {
    0.25
}
fn default_layer_scale_init() -> f64 {
    0.1
}
fn default_skip_init() -> f64 {
    0.001
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

/// Standard deviations of the normal init of one layer's projections.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LayerInit {
    /// Query and key projections.
    pub q_k_std: f64,
    /// Value projection.
    pub v_std: f64,
    /// Attention output projection.
    pub o_std: f64,
    /// Feed-forward gate and up projections.
    pub gate_up_std: f64,
    /// Feed-forward down projection.
    pub down_std: f64,
}

impl LayerInit {
    fn uniform(std: f64) -> Self {
        Self { q_k_std: std, v_std: std, o_std: std, gate_up_std: std, down_std: std }
    }
}

/// What one layer does under a scheme; computed by [`NormScheme::plan`], executed by the block.
#[derive(Clone, Debug, PartialEq)]
pub struct LayerPlan {
    /// Where the norms sit.
    pub placement: Placement,
    /// Layer number given to the block's norms: `l` for LNS after the norm, 1 (no factor) otherwise.
    pub norm_layer: usize,
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
            NormScheme::LayerScale { init } | NormScheme::SkipInit { init } if !init.is_finite() => {
                Err(ConfigError::OutOfRange { field: "init", value: init, expected: "a finite number" })
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

    /// Norms in each block: 4 with a norm on each sub-layer's output (Sandwich-LN, Peri-LN), else 2.
    pub fn norms_per_block(&self) -> usize {
        match self {
            NormScheme::SandwichLn | NormScheme::PeriLn => 4,
            _ => 2,
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
            norm_layer: 1,
            norm_input_scale: 1.0,
            attn_output_scale: 1.0,
            ffn_output_scale: 1.0,
            residual_scale: 1.0,
            gate: BranchGate::None,
            init: LayerInit::uniform(std),
        };
        match *self {
            NormScheme::PreLn => {}
            NormScheme::Lns { position } => match position {
                LnsPosition::AfterNorm => plan.norm_layer = layer,
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
            NormScheme::ScaledInit => {
                let scaled = std / (2.0 * n_layers as f64).sqrt();
                plan.init.o_std = scaled;
                plan.init.down_std = scaled;
            }
            NormScheme::DepthScaledInit => {
                let scaled = std / (2.0 * layer as f64).sqrt();
                plan.init.o_std = scaled;
                plan.init.down_std = scaled;
            }
            NormScheme::LayerScale { init } => plan.gate = BranchGate::PerChannel { init },
            NormScheme::SkipInit { init } => plan.gate = BranchGate::Scalar { init },
            // Peri-LN's embedding norm is the model's, not a block's: see `embedding_norm`.
            NormScheme::SandwichLn | NormScheme::PeriLn => plan.placement = Placement::Sandwich,
        }
        Ok(plan)
    }

    /// Every scheme with its default parameters, one per variant (and every LNS position).
    pub fn all() -> Vec<NormScheme> {
        let mut all = vec![NormScheme::PreLn];
        all.extend(LnsPosition::ALL.iter().map(|(position, _)| NormScheme::Lns { position: *position }));
        all.extend([
            NormScheme::PostLn,
            NormScheme::DeepNorm,
            NormScheme::MixLn { post_ln_fraction: default_post_ln_fraction() },
            NormScheme::ScaledInit,
            NormScheme::DepthScaledInit,
            NormScheme::LayerScale { init: default_layer_scale_init() },
            NormScheme::SkipInit { init: default_skip_init() },
            NormScheme::SandwichLn,
            NormScheme::PeriLn,
        ]);
        all
    }
}

const SCHEME_NAMES: &str = "pre-ln, lns[:after-norm|before-norm|after-sublayer|after-attention|after-ffn], \
post-ln, deepnorm, mix-ln[:FRACTION], scaled-init, depth-scaled-init, layer-scale[:INIT], skip-init[:INIT], sandwich-ln, peri-ln";

impl fmt::Display for NormScheme {
    /// The string form that [`FromStr`] parses back.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NormScheme::PreLn => write!(f, "pre-ln"),
            NormScheme::Lns { position: LnsPosition::AfterNorm } => write!(f, "lns"),
            NormScheme::Lns { position } => write!(f, "lns:{}", position.name()),
            NormScheme::PostLn => write!(f, "post-ln"),
            NormScheme::DeepNorm => write!(f, "deepnorm"),
            NormScheme::MixLn { post_ln_fraction } => write!(f, "mix-ln:{}", short_number(*post_ln_fraction)),
            NormScheme::ScaledInit => write!(f, "scaled-init"),
            NormScheme::DepthScaledInit => write!(f, "depth-scaled-init"),
            NormScheme::LayerScale { init } => write!(f, "layer-scale:{}", short_number(*init)),
            NormScheme::SkipInit { init } => write!(f, "skip-init:{}", short_number(*init)),
            NormScheme::SandwichLn => write!(f, "sandwich-ln"),
            NormScheme::PeriLn => write!(f, "peri-ln"),
        }
    }
}

/// A number as it parses back, in exponent form where that is shorter (`1e30`, not thirty zeros;
/// `0.25`, `1`).
fn short_number(x: f64) -> String {
    let debug = format!("{x:?}");
    debug.strip_suffix(".0").map(str::to_string).unwrap_or(debug)
}

impl FromStr for NormScheme {
    type Err = ConfigError;

    /// Parses `name[:argument]`, e.g. `lns`, `lns:after-ffn`, `mix-ln:0.25`, `layer-scale:1e-4`.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let unknown = || ConfigError::Unknown {
            what: "normalisation scheme",
            name: text.to_string(),
            expected: SCHEME_NAMES.to_string(),
        };
        let lower = text.trim().to_ascii_lowercase().replace('_', "-");
        let (name, arg) = match lower.split_once(':') {
            Some((name, arg)) => (name, Some(arg)),
            None => (lower.as_str(), None),
        };
        let number = |default: f64| -> Result<f64, ConfigError> {
            arg.map_or(Ok(default), |a| a.parse::<f64>().map_err(|_| unknown()))
        };
        let scheme = match name {
            "pre-ln" | "pre" | "preln" => NormScheme::PreLn,
            "lns" | "layernorm-scaling" => {
                let position = match arg {
                    None => LnsPosition::AfterNorm,
                    Some(a) => LnsPosition::ALL.iter().find(|(_, n)| *n == a).map(|(p, _)| *p).ok_or_else(unknown)?,
                };
                NormScheme::Lns { position }
            }
            "post-ln" | "post" | "postln" => NormScheme::PostLn,
            "deepnorm" | "deep-norm" => NormScheme::DeepNorm,
            "mix-ln" | "mixln" => NormScheme::MixLn { post_ln_fraction: number(default_post_ln_fraction())? },
            "scaled-init" => NormScheme::ScaledInit,
            "depth-scaled-init" => NormScheme::DepthScaledInit,
            "layer-scale" | "layerscale" => NormScheme::LayerScale { init: number(default_layer_scale_init())? },
            "skip-init" | "skipinit" => NormScheme::SkipInit { init: number(default_skip_init())? },
            "sandwich-ln" | "sandwich" => NormScheme::SandwichLn,
            "peri-ln" | "periln" | "peri" => NormScheme::PeriLn,
            _ => return Err(unknown()),
        };
        if arg.is_some()
            && !matches!(
                scheme,
                NormScheme::Lns { .. }
                    | NormScheme::MixLn { .. }
                    | NormScheme::LayerScale { .. }
                    | NormScheme::SkipInit { .. }
            )
        {
            return Err(unknown());
        }
        scheme.validate()?;
        Ok(scheme)
    }
}

/// Serde for an optional scheme as its string form (`"lns"`, `"mix-ln:0.25"`), as config files
/// and `train.json` write it: `#[serde(with = "layernorm_scaling::norm::scheme_as_string")]`.
pub mod scheme_as_string {
    use serde::{Deserialize, Deserializer, Serializer};

    use super::NormScheme;

    /// Writes `Some(scheme)` as its string, `None` as null.
    pub fn serialize<S: Serializer>(scheme: &Option<NormScheme>, serializer: S) -> Result<S::Ok, S::Error> {
        match scheme {
            Some(scheme) => serializer.serialize_str(&scheme.to_string()),
            None => serializer.serialize_none(),
        }
    }

    /// Reads a scheme string (or null).
    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<NormScheme>, D::Error> {
        Option::<String>::deserialize(deserializer)?
            .map(|text| text.parse::<NormScheme>().map_err(serde::de::Error::custom))
            .transpose()
    }
}

impl NormScheme {
    /// One of every scheme, with its default argument (LNS at its paper position), in the order
    /// of [`SCHEME_NAMES`]: what a sweep over `all` trains.
    pub fn every() -> Vec<NormScheme> {
        SCHEME_NAMES
            .split(", ")
            .map(|name| name.split('[').next().unwrap_or(name).parse().expect("every listed name parses"))
            .collect()
    }
}
