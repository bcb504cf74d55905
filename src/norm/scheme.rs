//! Every normalisation scheme the paper compares, plus Peri-LN, each resolved per layer into a
//! [`LayerPlan`].
//!
//! This file is the one place where a scheme's formula lives; the transformer block only
//! executes the plan. Notation: `N` a norm, `F` a sub-layer (attention or feed-forward),
//! `l` the 1-based layer, `L` the number of layers, `sigma` the base init std (0.02).
//!
//! The table of schemes, [`SCHEMES`], holds each one's name, aliases, argument and the formulas
//! shown in the docs; parsing, display, the lists and the help text are derived from it.
//! [`NormScheme::plan`] holds what each scheme does to a layer. `docs/schemes.md` shows the table
//! ([`schemes_markdown`] writes it; a test keeps the two equal).
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
use super::InitScheme;
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
    /// Every position: its name after `lns:`, its title and its block, as the docs show them.
    const ALL: [(LnsPosition, &'static str, &'static str, &'static str); 5] = [
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

    fn from_name(name: &str) -> Option<LnsPosition> {
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
    const ALL: [(GpasBase, &'static str); 2] = [(GpasBase::PreLn, "pre-ln"), (GpasBase::Lns, "lns")];

    /// The base's name after `gpas:`.
    pub fn name(self) -> &'static str {
        Self::ALL.iter().find(|row| row.0 == self).map_or("pre-ln", |row| row.1)
    }

    fn from_name(name: &str) -> Option<GpasBase> {
        Self::ALL.iter().find(|row| row.1 == name).map(|row| row.0)
    }
}

/// Mix-LN's default fraction of Post-LN layers.
const POST_LN_FRACTION: f64 = 0.25;
/// LayerScale's default initial `lambda` (CaiT, up to 18 layers).
const LAYER_SCALE_INIT: f64 = 0.1;
/// SkipInit's default initial scalar (the paper's runs).
const SKIP_INIT: f64 = 0.001;
/// CompleteP's default base depth (the authors' public depth check).
const BASE_DEPTH: f64 = 2.0;

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

    /// An error unless `init` combines with this scheme (any init does, but with a scheme that sets
    /// its own); it says why and what to use instead.
    pub fn check_init(&self, init: InitScheme) -> Result<(), ConfigError> {
        if init == InitScheme::Normal || !self.sets_init() {
            return Ok(());
        }
        let instead = match self {
            NormScheme::ScaledInit | NormScheme::DepthScaledInit => {
                "; `scaled-init` and `depth-scaled-init` are Pre-LN with those inits: write --norm pre-ln --init ..."
            }
            NormScheme::CompleteP { .. } => {
                ": its rules keep every init independent of depth, so that settings transfer across depths"
            }
            _ => "",
        };
        Err(ConfigError::Conflict(format!(
            "the init `{init}` does not combine with the scheme `{self}`: that scheme sets its own init ({}); use --init normal with it{instead}",
            self.info().init
        )))
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
            gpas: false,
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
                    plan.norm_layer = layer;
                }
            }
        }
        Ok(plan)
    }
}

/// What may follow a scheme's name after a colon.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SchemeArgument {
    /// Nothing.
    None,
    /// Where LNS applies its factor: an [`LnsPosition`] name (default `after-norm`).
    Position,
    /// The blocks GPAS acts on: a [`GpasBase`] name (default `pre-ln`).
    Base,
    /// A number.
    Number {
        /// Its name in the help text (`FRACTION`, `INIT`).
        name: &'static str,
        /// Its value when none is given.
        default: f64,
    },
}

impl SchemeArgument {
    /// The value a scheme takes when its string gives none.
    fn default_value(self) -> ArgumentValue {
        match self {
            SchemeArgument::None => ArgumentValue::None,
            SchemeArgument::Position => ArgumentValue::Position(LnsPosition::AfterNorm),
            SchemeArgument::Base => ArgumentValue::Base(GpasBase::PreLn),
            SchemeArgument::Number { default, .. } => ArgumentValue::Number(default),
        }
    }
}

/// The argument of one scheme value.
#[derive(Clone, Copy, Debug, PartialEq)]
enum ArgumentValue {
    None,
    Position(LnsPosition),
    Base(GpasBase),
    Number(f64),
}

impl ArgumentValue {
    /// A number argument (the table gives one to every scheme that takes a number).
    fn number(self) -> f64 {
        match self {
            ArgumentValue::Number(x) => x,
            _ => f64::NAN,
        }
    }
}

/// One row of the scheme table: a scheme's names, argument and the formulas the docs show.
/// What it does to a layer is in [`NormScheme::plan`].
#[derive(Clone, Copy, Debug)]
pub struct SchemeInfo {
    /// The name that [`Display`](fmt::Display) writes and [`FromStr`] reads (`pre-ln`).
    pub name: &'static str,
    /// Other names [`FromStr`] accepts (`pre`, `preln`).
    pub aliases: &'static [&'static str],
    /// What may follow the name after a colon.
    pub argument: SchemeArgument,
    /// The scheme's name in prose (`Pre-LN`).
    pub title: &'static str,
    /// Its block, as a formula.
    pub block: &'static str,
    /// Its init, where it differs from `N(0, sigma)` everywhere (`plain`).
    pub init: &'static str,
    /// The scheme of an argument of this row's kind, its default filled in.
    build: fn(ArgumentValue) -> NormScheme,
}

/// Every scheme, in the order the lists, the help text and the docs show them.
pub const SCHEMES: [SchemeInfo; 14] = [
    SchemeInfo {
        name: "pre-ln",
        aliases: &["pre", "preln"],
        argument: SchemeArgument::None,
        title: "Pre-LN",
        block: "`x + F(N(x))`",
        init: "all `N(0, sigma)`",
        build: |_| NormScheme::PreLn,
    },
    SchemeInfo {
        name: "lns",
        aliases: &["layernorm-scaling"],
        argument: SchemeArgument::Position,
        title: "LayerNorm Scaling",
        block: "see the positions",
        init: "plain",
        build: |argument| match argument {
            ArgumentValue::Position(position) => NormScheme::Lns { position },
            _ => NormScheme::default(),
        },
    },
    SchemeInfo {
        name: "post-ln",
        aliases: &["post", "postln"],
        argument: SchemeArgument::None,
        title: "Post-LN",
        block: "`N(x + F(x))`",
        init: "plain",
        build: |_| NormScheme::PostLn,
    },
    SchemeInfo {
        name: "deepnorm",
        aliases: &["deep-norm"],
        argument: SchemeArgument::None,
        title: "DeepNorm",
        block: "`N(alpha x + F(x))`, `alpha = (2L)^(1/4)`",
        init: "v, o, FFN: `sigma (8L)^(-1/4)`",
        build: |_| NormScheme::DeepNorm,
    },
    SchemeInfo {
        name: "mix-ln",
        aliases: &["mixln"],
        argument: SchemeArgument::Number { name: "FRACTION", default: POST_LN_FRACTION },
        title: "Mix-LN",
        block: "Post-LN for the first `round(FRACTION L)` layers, then Pre-LN",
        init: "plain",
        build: |argument| NormScheme::MixLn { post_ln_fraction: argument.number() },
    },
    SchemeInfo {
        name: "scaled-init",
        aliases: &[],
        argument: SchemeArgument::None,
        title: "Scaled Init",
        block: "Pre-LN",
        init: "o, down: `sigma / sqrt(2L)`",
        build: |_| NormScheme::ScaledInit,
    },
    SchemeInfo {
        name: "depth-scaled-init",
        aliases: &[],
        argument: SchemeArgument::None,
        title: "Depth-Scaled Init",
        block: "Pre-LN",
        init: "o, down: `sigma / sqrt(2l)`",
        build: |_| NormScheme::DepthScaledInit,
    },
    SchemeInfo {
        name: "layer-scale",
        aliases: &["layerscale"],
        argument: SchemeArgument::Number { name: "INIT", default: LAYER_SCALE_INIT },
        title: "LayerScale",
        block: "`x + diag(lambda) F(N(x))`, `lambda` learnable per channel, starting at INIT",
        init: "plain",
        build: |argument| NormScheme::LayerScale { init: argument.number() },
    },
    SchemeInfo {
        name: "skip-init",
        aliases: &["skipinit"],
        argument: SchemeArgument::Number { name: "INIT", default: SKIP_INIT },
        title: "SkipInit",
        block: "`x + a F(N(x))`, scalar `a` learnable, starting at INIT",
        init: "plain",
        build: |argument| NormScheme::SkipInit { init: argument.number() },
    },
    SchemeInfo {
        name: "sandwich-ln",
        aliases: &["sandwich"],
        argument: SchemeArgument::None,
        title: "Sandwich-LN",
        block: "`x + N2(F(N1(x)))`; block 1 takes the raw embedding",
        init: "plain",
        build: |_| NormScheme::SandwichLn,
    },
    SchemeInfo {
        name: "peri-ln",
        aliases: &["periln", "peri"],
        argument: SchemeArgument::None,
        title: "Peri-LN",
        block: "`x + N2(F(N1(x)))`; block 1 takes `Ne(embedding)`",
        init: "plain",
        build: |_| NormScheme::PeriLn,
    },
    SchemeInfo {
        name: "reordered-norm",
        aliases: &["reordered", "olmo2"],
        argument: SchemeArgument::None,
        title: "Reordered norm (OLMo 2)",
        block: "`x + N(F(x))`: a norm on each sub-layer's output, none on its input",
        init: "plain",
        build: |_| NormScheme::ReorderedNorm,
    },
    SchemeInfo {
        name: "completep",
        aliases: &["complete-p"],
        argument: SchemeArgument::Number { name: "L_BASE", default: BASE_DEPTH },
        title: "CompleteP (depth, alpha = 1)",
        block: "`x + (L_BASE / L) F(N(x))`; Adam's eps times `L_BASE / L`",
        init: "all `N(0, sigma)` at every depth",
        build: |argument| NormScheme::CompleteP { base_depth: argument.number() },
    },
    SchemeInfo {
        name: "gpas",
        aliases: &[],
        argument: SchemeArgument::Base,
        title: "GPAS",
        block: "after each residual add `y - SiLU(g) sg(y)`, scalar `g` per layer learnable from 0",
        init: "plain",
        build: |argument| match argument {
            ArgumentValue::Base(base) => NormScheme::Gpas { base },
            _ => NormScheme::Gpas { base: GpasBase::PreLn },
        },
    },
];

impl NormScheme {
    /// This scheme's row of [`SCHEMES`]. The one match over variants outside [`plan`](Self::plan).
    pub fn info(&self) -> &'static SchemeInfo {
        let name = match self {
            NormScheme::PreLn => "pre-ln",
            NormScheme::Lns { .. } => "lns",
            NormScheme::PostLn => "post-ln",
            NormScheme::DeepNorm => "deepnorm",
            NormScheme::MixLn { .. } => "mix-ln",
            NormScheme::ScaledInit => "scaled-init",
            NormScheme::DepthScaledInit => "depth-scaled-init",
            NormScheme::LayerScale { .. } => "layer-scale",
            NormScheme::SkipInit { .. } => "skip-init",
            NormScheme::SandwichLn => "sandwich-ln",
            NormScheme::PeriLn => "peri-ln",
            NormScheme::ReorderedNorm => "reordered-norm",
            NormScheme::CompleteP { .. } => "completep",
            NormScheme::Gpas { .. } => "gpas",
        };
        SCHEMES.iter().find(|info| info.name == name).expect("every variant has a row in SCHEMES")
    }

    fn argument(&self) -> ArgumentValue {
        match *self {
            NormScheme::Lns { position } => ArgumentValue::Position(position),
            NormScheme::MixLn { post_ln_fraction } => ArgumentValue::Number(post_ln_fraction),
            NormScheme::LayerScale { init } | NormScheme::SkipInit { init } => ArgumentValue::Number(init),
            NormScheme::CompleteP { base_depth } => ArgumentValue::Number(base_depth),
            NormScheme::Gpas { base } => ArgumentValue::Base(base),
            _ => ArgumentValue::None,
        }
    }

    /// One scheme per row of [`SCHEMES`], with its default argument (LNS after the norm): what a
    /// sweep over `all` trains.
    pub fn defaults() -> Vec<NormScheme> {
        SCHEMES.iter().map(|info| (info.build)(info.argument.default_value())).collect()
    }

    /// [`defaults`](Self::defaults) and LNS at each of its other positions: every distinct block
    /// formula, for tests that must cover them all.
    pub fn with_every_position() -> Vec<NormScheme> {
        let mut all = Self::defaults();
        let at = all.iter().position(|scheme| matches!(scheme, NormScheme::Lns { .. })).map_or(0, |i| i + 1);
        let others = LnsPosition::ALL.iter().skip(1).map(|row| NormScheme::Lns { position: row.0 });
        all.splice(at..at, others);
        all
    }

    /// Renamed [`with_every_position`](Self::with_every_position).
    #[deprecated(note = "use `NormScheme::with_every_position` (or `defaults` for one per scheme)")]
    pub fn all() -> Vec<NormScheme> {
        Self::with_every_position()
    }

    /// Renamed [`defaults`](Self::defaults).
    #[deprecated(note = "use `NormScheme::defaults`")]
    pub fn every() -> Vec<NormScheme> {
        Self::defaults()
    }
}

/// Every scheme string, as errors and `--help` list them: `pre-ln, lns[:after-norm|...], ...,
/// mix-ln[:FRACTION], ...`.
pub fn scheme_names() -> String {
    let positions = LnsPosition::ALL.iter().map(|row| row.1).collect::<Vec<_>>().join("|");
    let shown = |info: &SchemeInfo| match info.argument {
        SchemeArgument::None => info.name.to_string(),
        SchemeArgument::Position => format!("{}[:{positions}]", info.name),
        SchemeArgument::Base => format!("{}[:{}]", info.name, GpasBase::ALL.map(|row| row.1).join("|")),
        SchemeArgument::Number { name, .. } => format!("{}[:{name}]", info.name),
    };
    SCHEMES.iter().map(shown).collect::<Vec<_>>().join(", ")
}

/// The schemes as the Markdown table of `docs/schemes.md`: string, scheme, block, init.
pub fn schemes_markdown() -> String {
    let mut table = String::from("| string | scheme | block | init |\n|---|---|---|---|\n");
    for info in &SCHEMES {
        // The aliases go with the scheme's first row (its default form).
        let aliases: Vec<String> = info.aliases.iter().map(|alias| format!("`{alias}`")).collect();
        let also = if aliases.is_empty() { String::new() } else { format!(" (also {})", aliases.join(", ")) };
        match info.argument {
            SchemeArgument::Position => {
                for (i, (_, name, title, block)) in LnsPosition::ALL.iter().enumerate() {
                    let string = if i == 0 && aliases.is_empty() {
                        "`lns` (default)".to_string()
                    } else if i == 0 {
                        format!("`lns` (default; also {})", aliases.join(", "))
                    } else {
                        format!("`lns:{name}`")
                    };
                    table += &format!("| {string} | {title} | {block} | {} |\n", info.init);
                }
            }
            SchemeArgument::Number { default, .. } => {
                let string = format!("`{}[:{}]`{also}", info.name, short_number(default));
                table += &format!("| {string} | {} | {} | {} |\n", info.title, info.block, info.init);
            }
            SchemeArgument::Base => {
                for (i, (_, base)) in GpasBase::ALL.iter().enumerate() {
                    let string =
                        if i == 0 { format!("`{}`{also}", info.name) } else { format!("`{}:{base}`", info.name) };
                    let block = format!("{}; on `{base}` blocks", info.block);
                    table += &format!("| {string} | {} | {block} | {} |\n", info.title, info.init);
                }
            }
            SchemeArgument::None => {
                table += &format!("| `{}`{also} | {} | {} | {} |\n", info.name, info.title, info.block, info.init);
            }
        }
    }
    table
}

impl fmt::Display for NormScheme {
    /// The string form that [`FromStr`] parses back: the name, and the argument unless it is LNS's
    /// default position.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = self.info().name;
        match self.argument() {
            ArgumentValue::None
            | ArgumentValue::Position(LnsPosition::AfterNorm)
            | ArgumentValue::Base(GpasBase::PreLn) => write!(f, "{name}"),
            ArgumentValue::Position(position) => write!(f, "{name}:{}", position.name()),
            ArgumentValue::Base(base) => write!(f, "{name}:{}", base.name()),
            ArgumentValue::Number(x) => write!(f, "{name}:{}", short_number(x)),
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
        let unknown =
            || ConfigError::Unknown { what: "normalisation scheme", name: text.to_string(), expected: scheme_names() };
        let lower = text.trim().to_ascii_lowercase().replace('_', "-");
        let (name, argument) = match lower.split_once(':') {
            Some((name, argument)) => (name, Some(argument)),
            None => (lower.as_str(), None),
        };
        let info = SCHEMES.iter().find(|info| info.name == name || info.aliases.contains(&name)).ok_or_else(unknown)?;
        let value = match (info.argument, argument) {
            (kind, None) => kind.default_value(),
            (SchemeArgument::None, Some(_)) => return Err(unknown()),
            (SchemeArgument::Position, Some(a)) => {
                ArgumentValue::Position(LnsPosition::from_name(a).ok_or_else(unknown)?)
            }
            (SchemeArgument::Base, Some(a)) => ArgumentValue::Base(GpasBase::from_name(a).ok_or_else(unknown)?),
            (SchemeArgument::Number { .. }, Some(a)) => ArgumentValue::Number(a.parse().map_err(|_| unknown())?),
        };
        let scheme = (info.build)(value);
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
