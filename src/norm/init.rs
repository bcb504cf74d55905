//! `InitScheme`: how the residual branches' output projections are initialised, an axis of its
//! own beside the normalisation scheme (the paper's Table 4 compares LNS with scaled init,
//! depth-scaled init and LNS combined with scaled init).
//!
//! Every projection starts as `N(0, sigma)` (`sigma` the model's `init_std`, 0.02); the init
//! scheme changes the std of the two projections that write into the residual stream, the
//! attention output `o` and the feed-forward `down`, of layer `l` (1-based) out of `L`:
//!
//! | init | `o`, `down` std |
//! |---|---|
//! | `normal` | `sigma` |
//! | `scaled` | `sigma / sqrt(2L)` (GPT-2, Megatron) |
//! | `depth-scaled` | `sigma / sqrt(2l)` |

use core::fmt;
use core::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::config_error::ConfigError;

/// How the output (`o`) and down projections are initialised; serialised `normal`, `scaled`,
/// `depth-scaled`. Parsed also from `scaled-init` and `depth-scaled-init`, the names of the
/// schemes that were Pre-LN with these inits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum InitScheme {
    /// Every projection `N(0, sigma)`.
    #[default]
    #[serde(alias = "plain")]
    Normal,
    /// `o` and `down` of every layer `N(0, sigma / sqrt(2L))`.
    #[serde(alias = "scaled-init")]
    Scaled,
    /// `o` and `down` of layer `l` `N(0, sigma / sqrt(2l))`.
    #[serde(alias = "depth-scaled-init")]
    DepthScaled,
}

impl InitScheme {
    /// Every init scheme: value, name, other accepted names, the `o`/`down` std as the docs show it.
    const ALL: [(InitScheme, &'static str, &'static [&'static str], &'static str); 3] = [
        (InitScheme::Normal, "normal", &["plain"], "`sigma`"),
        (InitScheme::Scaled, "scaled", &["scaled-init"], "`sigma / sqrt(2L)`"),
        (InitScheme::DepthScaled, "depth-scaled", &["depth-scaled-init"], "`sigma / sqrt(2l)`"),
    ];

    /// Every init scheme, in the order the help and the docs list them.
    pub fn all() -> [InitScheme; 3] {
        Self::ALL.map(|row| row.0)
    }

    /// The name [`Display`](fmt::Display) writes and [`FromStr`] reads.
    pub fn name(self) -> &'static str {
        Self::ALL.iter().find(|row| row.0 == self).map_or("normal", |row| row.1)
    }

    /// The std of the `o` and `down` projections of the 1-based `layer` of `n_layers`, the others
    /// being `std`.
    pub fn output_std(self, std: f64, layer: usize, n_layers: usize) -> f64 {
        match self {
            InitScheme::Normal => std,
            InitScheme::Scaled => std / (2.0 * n_layers as f64).sqrt(),
            InitScheme::DepthScaled => std / (2.0 * layer as f64).sqrt(),
        }
    }

    /// `init` with its `o` and `down` std set by this scheme for `layer` of `n_layers`.
    pub fn apply(self, init: LayerInit, std: f64, layer: usize, n_layers: usize) -> LayerInit {
        if self == InitScheme::Normal {
            return init;
        }
        let output = self.output_std(std, layer, n_layers);
        LayerInit { o_std: output, down_std: output, ..init }
    }

    /// The names, as errors and `--help` list them: `normal, scaled, depth-scaled`.
    pub fn names() -> String {
        Self::ALL.iter().map(|row| row.1).collect::<Vec<_>>().join(", ")
    }

    /// The init schemes as the Markdown table of `docs/schemes.md`: string, `o`/`down` std.
    pub fn markdown() -> String {
        let mut table = String::from("| `--init` | `o`, `down` std of layer `l` |\n|---|---|\n");
        for (_, name, aliases, std) in Self::ALL {
            let also = aliases.iter().map(|alias| format!("`{alias}`")).collect::<Vec<_>>().join(", ");
            table += &format!("| `{name}` (also {also}) | {std} |\n");
        }
        table
    }
}

impl fmt::Display for InitScheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for InitScheme {
    type Err = ConfigError;

    /// Parses `normal`, `scaled` or `depth-scaled` (any case, `_` for `-`).
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let name = text.trim().to_ascii_lowercase().replace('_', "-");
        Self::ALL.iter().find(|row| row.1 == name || row.2.contains(&name.as_str())).map(|row| row.0).ok_or_else(|| {
            ConfigError::Unknown { what: "init scheme", name: text.to_string(), expected: Self::names() }
        })
    }
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
    pub(super) fn uniform(std: f64) -> Self {
        Self { q_k_std: std, v_std: std, o_std: std, gate_up_std: std, down_std: std }
    }
}
