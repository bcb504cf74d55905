//! The schemes' names: the table of schemes ([`SCHEMES`]), with each one's name, aliases,
//! argument and the formulas shown in the docs, and what is derived from it: parsing
//! ([`FromStr`]), the string form ([`Display`](fmt::Display)), the lists of schemes, the help
//! text ([`scheme_names`]) and the table of `docs/schemes.md` ([`schemes_markdown`]; a test keeps
//! the two equal). What a scheme does to a layer is in [`NormScheme::plan`].

use core::fmt;
use core::str::FromStr;

use super::init::InitScheme;
use super::scheme::{GpasBase, LnsPosition, NormScheme, BASE_DEPTH, LAYER_SCALE_INIT, POST_LN_FRACTION, SKIP_INIT};
use crate::config_error::ConfigError;

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

/// The argument of one scheme value, as [`Display`](fmt::Display) writes it.
#[derive(Clone, Copy, Debug, PartialEq)]
enum ArgumentValue {
    None,
    Position(LnsPosition),
    Base(GpasBase),
    Number(f64),
}

/// How a row of the table makes its scheme: the argument a string may give after the colon,
/// typed, and what the scheme is without one.
#[derive(Clone, Copy, Debug)]
enum Build {
    /// A scheme that takes no argument.
    Plain(fn() -> NormScheme),
    /// From an [`LnsPosition`] (`after-norm` without one).
    Position(fn(LnsPosition) -> NormScheme),
    /// From a [`GpasBase`] (`pre-ln` without one).
    Base(fn(GpasBase) -> NormScheme),
    /// From a number, `default` without one; `name` is the number's in the help text.
    Number { name: &'static str, default: f64, build: fn(f64) -> NormScheme },
}

impl Build {
    /// The scheme when the string gives no argument.
    fn default_scheme(self) -> NormScheme {
        match self {
            Build::Plain(build) => build(),
            Build::Position(build) => build(LnsPosition::AfterNorm),
            Build::Base(build) => build(GpasBase::PreLn),
            Build::Number { default, build, .. } => build(default),
        }
    }

    /// The scheme of `argument` (what follows the colon), or `None` when this row takes no such
    /// argument.
    fn with(self, argument: &str) -> Option<NormScheme> {
        match self {
            Build::Plain(_) => None,
            Build::Position(build) => LnsPosition::from_name(argument).map(build),
            Build::Base(build) => GpasBase::from_name(argument).map(build),
            Build::Number { build, .. } => argument.parse().ok().map(build),
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
    /// The scheme's name in prose (`Pre-LN`).
    pub title: &'static str,
    /// Its block, as a formula.
    pub block: &'static str,
    /// Its init, where it differs from `N(0, sigma)` everywhere (`plain`).
    pub init: &'static str,
    /// How the scheme is made from the argument after the colon, or without one.
    build: Build,
}

impl SchemeInfo {
    /// What may follow the name after a colon, in words, for an error.
    fn what_it_takes(&self) -> String {
        let name = self.name;
        match self.argument() {
            SchemeArgument::None => format!("{name} takes no argument; write `{name}`"),
            SchemeArgument::Position => format!(
                "{name} takes where LNS applies its factor after the colon: one of {}",
                LnsPosition::ALL.iter().map(|row| row.1).collect::<Vec<_>>().join(", ")
            ),
            SchemeArgument::Base => {
                format!(
                    "{name} takes the blocks it acts on after the colon: one of {}",
                    GpasBase::ALL.map(|row| row.1).join(", ")
                )
            }
            SchemeArgument::Number { name: number, default } => {
                format!(
                    "{name} takes a number after the colon ({number}; `{name}` alone is `{name}:{}`)",
                    short_number(default)
                )
            }
        }
    }

    /// What may follow the name after a colon.
    pub fn argument(&self) -> SchemeArgument {
        match self.build {
            Build::Plain(_) => SchemeArgument::None,
            Build::Position(_) => SchemeArgument::Position,
            Build::Base(_) => SchemeArgument::Base,
            Build::Number { name, default, .. } => SchemeArgument::Number { name, default },
        }
    }
}

/// Every scheme, in the order the lists, the help text and the docs show them.
pub const SCHEMES: [SchemeInfo; 14] = [
    SchemeInfo {
        name: "pre-ln",
        aliases: &["pre", "preln"],
        title: "Pre-LN",
        block: "`x + F(N(x))`",
        init: "all `N(0, sigma)`",
        build: Build::Plain(|| NormScheme::PreLn),
    },
    SchemeInfo {
        name: "lns",
        aliases: &["layernorm-scaling"],
        title: "LayerNorm Scaling",
        block: "see the positions",
        init: "plain",
        build: Build::Position(|position| NormScheme::Lns { position }),
    },
    SchemeInfo {
        name: "post-ln",
        aliases: &["post", "postln"],
        title: "Post-LN",
        block: "`N(x + F(x))`",
        init: "plain",
        build: Build::Plain(|| NormScheme::PostLn),
    },
    SchemeInfo {
        name: "deepnorm",
        aliases: &["deep-norm"],
        title: "DeepNorm",
        block: "`N(alpha x + F(x))`, `alpha = (2L)^(1/4)`",
        init: "v, o, FFN: `sigma (8L)^(-1/4)`",
        build: Build::Plain(|| NormScheme::DeepNorm),
    },
    SchemeInfo {
        name: "mix-ln",
        aliases: &["mixln"],
        title: "Mix-LN",
        block: "Post-LN for the first `round(FRACTION L)` layers, then Pre-LN",
        init: "plain",
        build: Build::Number {
            name: "FRACTION",
            default: POST_LN_FRACTION,
            build: |post_ln_fraction| NormScheme::MixLn { post_ln_fraction },
        },
    },
    SchemeInfo {
        name: "scaled-init",
        aliases: &[],
        title: "Scaled Init",
        block: "Pre-LN",
        init: "o, down: `sigma / sqrt(2L)`",
        build: Build::Plain(|| NormScheme::ScaledInit),
    },
    SchemeInfo {
        name: "depth-scaled-init",
        aliases: &[],
        title: "Depth-Scaled Init",
        block: "Pre-LN",
        init: "o, down: `sigma / sqrt(2l)`",
        build: Build::Plain(|| NormScheme::DepthScaledInit),
    },
    SchemeInfo {
        name: "layer-scale",
        aliases: &["layerscale"],
        title: "LayerScale",
        block: "`x + diag(lambda) F(N(x))`, `lambda` learnable per channel, starting at INIT",
        init: "plain",
        build: Build::Number { name: "INIT", default: LAYER_SCALE_INIT, build: |init| NormScheme::LayerScale { init } },
    },
    SchemeInfo {
        name: "skip-init",
        aliases: &["skipinit"],
        title: "SkipInit",
        block: "`x + a F(N(x))`, scalar `a` learnable, starting at INIT",
        init: "plain",
        build: Build::Number { name: "INIT", default: SKIP_INIT, build: |init| NormScheme::SkipInit { init } },
    },
    SchemeInfo {
        name: "sandwich-ln",
        aliases: &["sandwich"],
        title: "Sandwich-LN",
        block: "`x + N2(F(N1(x)))`; block 1 takes the raw embedding",
        init: "plain",
        build: Build::Plain(|| NormScheme::SandwichLn),
    },
    SchemeInfo {
        name: "peri-ln",
        aliases: &["periln", "peri"],
        title: "Peri-LN",
        block: "`x + N2(F(N1(x)))`; block 1 takes `Ne(embedding)`",
        init: "plain",
        build: Build::Plain(|| NormScheme::PeriLn),
    },
    SchemeInfo {
        name: "reordered-norm",
        aliases: &["reordered", "olmo2"],
        title: "Reordered norm (OLMo 2)",
        block: "`x + N(F(x))`: a norm on each sub-layer's output, none on its input",
        init: "plain",
        build: Build::Plain(|| NormScheme::ReorderedNorm),
    },
    SchemeInfo {
        name: "completep",
        aliases: &["complete-p"],
        title: "CompleteP (depth, alpha = 1)",
        block: "`x + (L_BASE / L) F(N(x))`; Adam's eps times `L_BASE / L`",
        init: "all `N(0, sigma)` at every depth",
        build: Build::Number {
            name: "L_BASE",
            default: BASE_DEPTH,
            build: |base_depth| NormScheme::CompleteP { base_depth },
        },
    },
    SchemeInfo {
        name: "gpas",
        aliases: &[],
        title: "GPAS",
        block: "after each residual add `y - SiLU(g) sg(y)`, scalar `g` per layer learnable from 0",
        init: "plain",
        build: Build::Base(|base| NormScheme::Gpas { base }),
    },
];

impl NormScheme {
    /// This scheme's row of [`SCHEMES`]: the row whose scheme is the same variant. A unit test
    /// checks that each row is a different variant; a variant added without a row panics here.
    pub fn info(&self) -> &'static SchemeInfo {
        let variant = std::mem::discriminant(self);
        SCHEMES
            .iter()
            .find(|info| std::mem::discriminant(&info.build.default_scheme()) == variant)
            .expect("every variant has a row in SCHEMES")
    }

    /// The argument this scheme was built with, as its row's [`Build`] takes it.
    fn argument_value(&self) -> ArgumentValue {
        match *self {
            NormScheme::PreLn
            | NormScheme::PostLn
            | NormScheme::DeepNorm
            | NormScheme::ScaledInit
            | NormScheme::DepthScaledInit
            | NormScheme::SandwichLn
            | NormScheme::PeriLn
            | NormScheme::ReorderedNorm => ArgumentValue::None,
            NormScheme::Lns { position } => ArgumentValue::Position(position),
            NormScheme::Gpas { base } => ArgumentValue::Base(base),
            NormScheme::MixLn { post_ln_fraction: x }
            | NormScheme::LayerScale { init: x }
            | NormScheme::SkipInit { init: x }
            | NormScheme::CompleteP { base_depth: x } => ArgumentValue::Number(x),
        }
    }

    /// An error unless `init` combines with this scheme (any init does, but with a scheme that sets
    /// its own); it says why, names the scheme's init from its row of [`SCHEMES`], and what to use
    /// instead.
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

    /// One scheme per row of [`SCHEMES`], with its default argument (LNS after the norm): what a
    /// sweep over `all` trains.
    pub fn defaults() -> Vec<NormScheme> {
        SCHEMES.iter().map(|info| info.build.default_scheme()).collect()
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
    let shown = |info: &SchemeInfo| match info.argument() {
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
        match info.argument() {
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
        match self.argument_value() {
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
        let scheme = match argument {
            None => info.build.default_scheme(),
            // A known name with an argument it does not take: say what it takes.
            Some(argument) => info.build.with(argument).ok_or_else(|| ConfigError::Invalid {
                what: "normalisation scheme",
                message: match argument.contains(':') {
                    true => format!("`{}`: a scheme takes at most one argument; {}", text.trim(), info.what_it_takes()),
                    false => format!("`{}`: {}", text.trim(), info.what_it_takes()),
                },
            })?,
        };
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_row_is_found_by_its_variant_and_every_scheme_reads_back() {
        for info in &SCHEMES {
            let scheme = info.build.default_scheme();
            assert_eq!(scheme.info().name, info.name);
        }
        let names: std::collections::BTreeSet<_> = SCHEMES.iter().map(|info| info.name).collect();
        assert_eq!(names.len(), SCHEMES.len(), "two rows share a name");
        let mut schemes = NormScheme::with_every_position();
        schemes.extend([NormScheme::MixLn { post_ln_fraction: 0.5 }, NormScheme::Gpas { base: GpasBase::Lns }]);
        for scheme in schemes {
            assert_eq!(scheme.to_string().parse::<NormScheme>().unwrap(), scheme, "{scheme}");
        }
    }
}
