//! What a sweep is ([`Sweep`]: shared settings and axes, hence its pairs and each pair's
//! settings), the names its pairs' folders take, and what it records in its directory
//! (`sweep.json`, a [`SweepRecord`]: its settings and axes, and each pair's outcome).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::settings::{DataSettings, ModelSettings, OutputSettings};
use super::TrainConfig;
use crate::norm::{InitScheme, NormScheme};

/// The file that marks a directory as a sweep and records its pairs.
pub const SWEEP_FILE: &str = "sweep.json";

/// The items in their first order, each once.
pub(crate) fn distinct<T: PartialEq>(items: impl IntoIterator<Item = T>) -> Vec<T> {
    let mut kept = Vec::new();
    for item in items {
        if !kept.contains(&item) {
            kept.push(item);
        }
    }
    kept
}

/// One training of a sweep.
#[derive(Clone, Debug, PartialEq)]
pub struct SweepPair {
    /// The scheme it trains.
    pub scheme: NormScheme,
    /// Its init, when the sweep has an init axis.
    pub init: Option<InitScheme>,
    /// Its number of layers, when the sweep has a depth axis.
    pub layers: Option<usize>,
    /// Its seed (data order and initial weights).
    pub seed: u64,
    /// Its run directory, `<out>/<group>/seed-<seed>`.
    pub dir: PathBuf,
}

impl SweepPair {
    /// The pair's scheme and init as one name, `lns` or `lns+scaled` ([`arm_name`]).
    pub fn arm(&self) -> String {
        arm_name(&self.scheme, self.init)
    }

    /// The runs this pair is a seed of: `[layers-<L>/]<arm>`, the folder of its seeds.
    pub fn group(&self) -> String {
        group_name(self.layers, &self.arm())
    }

    /// The key of the pair in `sweep.json`: `<group>/seed-<seed>`.
    pub fn key(&self) -> String {
        format!("{}/seed-{}", self.group(), self.seed)
    }
}

/// A scheme with an init as one name: the scheme's directory name, and `+<init>` for an init
/// other than `normal` (`lns`, `pre-ln+scaled`).
pub fn arm_name(scheme: &NormScheme, init: Option<InitScheme>) -> String {
    match init.filter(|&init| init != InitScheme::Normal) {
        Some(init) => format!("{}+{init}", scheme_dir_name(scheme)),
        None => scheme_dir_name(scheme),
    }
}

/// The folder of an arm's seeds: `layers-<L>/<arm>` on a depth axis, `<arm>` otherwise.
pub fn group_name(layers: Option<usize>, arm: &str) -> String {
    match layers {
        Some(layers) => format!("layers-{layers}/{arm}"),
        None => arm.to_string(),
    }
}

/// The directory name of a scheme (`mix-ln:0.25` -> `mix-ln-0.25`).
pub fn scheme_dir_name(scheme: &NormScheme) -> String {
    scheme.to_string().replace(':', "-")
}

/// How a pair ended.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "kebab-case")]
pub enum PairOutcome {
    /// Trained to the end: its final validation loss.
    Finished {
        /// Mean validation loss of the final model.
        valid_loss: f64,
    },
    /// Stopped for a non-finite value, or ended collapsed (its gradient norm vanished while its
    /// loss did not fall).
    Diverged {
        /// What happened.
        reason: String,
    },
}

/// `sweep.json`: the sweep's settings and the outcome of every pair done so far.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SweepRecord {
    /// The training settings every pair shares (its `norm`, `seed` and `out` are the pair's own).
    /// A record written from a run's `train.json` may hold its data budget: it is skipped.
    #[serde(deserialize_with = "super::config_file::settings_skipping_the_budget")]
    pub config: TrainConfig,
    /// The schemes, as given.
    pub schemes: Vec<NormScheme>,
    /// The seeds, as given.
    pub seeds: Vec<u64>,
    /// The inits, when the sweep has an init axis.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inits: Vec<InitScheme>,
    /// The depths, when the sweep has a depth axis.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub depths: Vec<usize>,
    /// The outcome of each pair by its key (`[layers-<L>/]<arm>/seed-<seed>`).
    pub outcomes: BTreeMap<String, PairOutcome>,
    /// The content fingerprint of the `--data` files and tokenizer ([`corpus_fingerprint`](crate::data::corpus_fingerprint)); `None`
    /// for the built-in corpus and in records written before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<String>,
    /// The device list of each pair (by its key) whose training finished on other devices than
    /// `config.device`, the devices the sweep began on (a rerun may give others of the same
    /// number); empty when every pair ran on those.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub devices: BTreeMap<String, String>,
}

impl SweepRecord {
    /// The sweep this record is of: its settings and axes (its pairs and groups).
    pub fn sweep(&self) -> Sweep {
        Sweep {
            config: self.config.clone(),
            schemes: self.schemes.clone(),
            seeds: self.seeds.clone(),
            inits: self.inits.clone(),
            depths: self.depths.clone(),
        }
    }
}

/// An axis's values for [`Sweep::pairs`]: each of `values`, or `None` alone when the axis is absent.
fn axis<T: Copy>(values: &[T]) -> Vec<Option<T>> {
    if values.is_empty() {
        vec![None]
    } else {
        values.iter().copied().map(Some).collect()
    }
}

/// A sweep to run: the shared settings (`config.output.out` is the sweep's directory), schemes and
/// seeds, and optionally inits and depths.
#[derive(Clone, Debug, Default)]
pub struct Sweep {
    /// The shared settings.
    pub config: TrainConfig,
    /// The schemes, in order.
    pub schemes: Vec<NormScheme>,
    /// The seeds, in order.
    pub seeds: Vec<u64>,
    /// The inits, in order; empty: no init axis (every pair takes the config's `init`).
    pub inits: Vec<InitScheme>,
    /// The depths, in order; empty: no depth axis (every pair takes the config's depth).
    pub depths: Vec<usize>,
}

impl Sweep {
    /// Every pair: depth by depth (shallow first), scheme by scheme, init by init, seeds in order.
    pub fn pairs(&self) -> Vec<SweepPair> {
        let depths = axis(&self.depths);
        let inits = axis(&self.inits);
        let mut pairs = Vec::new();
        for &layers in &depths {
            for scheme in &self.schemes {
                for &init in &inits {
                    for &seed in &self.seeds {
                        let mut pair = SweepPair { scheme: scheme.clone(), init, layers, seed, dir: PathBuf::new() };
                        pair.dir = self.config.output.out.join(pair.group()).join(format!("seed-{seed}"));
                        pairs.push(pair);
                    }
                }
            }
        }
        pairs
    }

    /// Every group of seeds (`[layers-<L>/]<arm>`), in the order of [`pairs`](Self::pairs), with its
    /// depth and arm.
    pub fn groups(&self) -> Vec<(Option<usize>, String)> {
        distinct(self.pairs().iter().map(|pair| (pair.layers, pair.arm())))
    }

    /// The training settings of `pair`. Every pair shares one token cache, `<out>/.token-cache`,
    /// unless `cache_dir` is set.
    pub fn pair_config(&self, pair: &SweepPair) -> TrainConfig {
        let cache_dir =
            self.config.data.cache_dir.clone().or_else(|| Some(self.config.output.out.join(".token-cache")));
        TrainConfig {
            model: ModelSettings {
                norm: Some(pair.scheme.clone()),
                init: pair.init.or(self.config.model.init),
                layers: pair.layers.or(self.config.model.layers),
                ..self.config.model.clone()
            },
            data: DataSettings { cache_dir, ..self.config.data.clone() },
            output: OutputSettings { out: pair.dir.clone(), ..self.config.output.clone() },
            seed: pair.seed,
            ..self.config.clone()
        }
    }
}
