//! The schemes' names: the table of schemes ([`SCHEMES`]), with each one's name, aliases,
//! argument and the formulas shown in the docs, and what is derived from it: parsing
//! ([`FromStr`]), the string form ([`Display`](fmt::Display)), the lists of schemes, the help
//! text ([`scheme_names`]) and the table of `docs/schemes.md` ([`schemes_markdown`]; a test keeps
//! the two equal). What a scheme does to a layer is in [`NormScheme::plan`].

use core::fmt;
use core::str::FromStr;

use super::scheme::{GpasBase, LnsPosition, NormScheme, BASE_DEPTH, LAYER_SCALE_INIT, POST_LN_FRACTION, SKIP_INIT};
use crate::ConfigError;

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
