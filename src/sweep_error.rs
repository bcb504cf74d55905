//! Why a sweep cannot start or go on as asked ([`SweepError`]): its axes clash with the shared
//! settings, or its directory holds something else than this sweep. Each refusal is a variant
//! with the facts it names; the advice to the user is written once, in its message. A leaf beside
//! `run_dir_error.rs`, so that the crate's error, which wraps it, does not depend on `train/`.

use std::path::PathBuf;

use crate::norm::{InitScheme, NormScheme};
use crate::run_dir_error::{RunDirError, SettingChange};

/// A sweep that cannot run as asked: what clashes or what its directory holds, and (in its
/// message) what to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SweepError {
    /// `--norm` (or a config's `norm`) given to a sweep, whose schemes are its axis.
    #[error(
        "--norm {norm} does not apply to a sweep: list the schemes with --schemes (a config file's `norm` is replaced \
         by them)"
    )]
    NormGiven {
        /// The norm given.
        norm: NormScheme,
    },
    /// The init set both by the shared settings (the config, or its model file) and by `--inits`.
    #[error(
        "{} init `{init}` and --inits {} both set the init; give one of them",
        if *.in_model_file { "the model file's" } else { "the config's" },
        listed(.inits)
    )]
    InitTwice {
        /// The shared settings' init.
        init: InitScheme,
        /// Whether it is the model file's (`model` JSON with `init`) rather than the config's.
        in_model_file: bool,
        /// The init axis.
        inits: Vec<InitScheme>,
    },
    /// An init axis with a scheme that sets its own init (DeepNorm, `scaled-init`).
    #[error(
        "the scheme `{scheme}` sets its own init and takes no other, but --inits has `{init}`: drop `{scheme}` from \
         --schemes, or keep --inits to normal"
    )]
    SchemeSetsInit {
        /// The scheme.
        scheme: NormScheme,
        /// The init of the axis that is not `normal`.
        init: InitScheme,
    },
    /// The depth set both by the shared settings (`layers`) and by a depth axis.
    #[error("the config's `layers = {layers}` and the depth axis --layers {} both set the depth; give one", listed(.depths))]
    DepthTwice {
        /// The shared settings' depth.
        layers: usize,
        /// The depth axis.
        depths: Vec<usize>,
    },
    /// A depth axis on a model started from another (`init_from`), whose depth is fixed.
    #[error(
        "a depth axis (--layers {}) cannot apply to `init_from` ({}): its model's depth is fixed; drop --layers or \
         --init-from",
        listed(.depths), .init_from.display()
    )]
    DepthOfInitFrom {
        /// The depth axis.
        depths: Vec<usize>,
        /// The model it starts from.
        init_from: PathBuf,
    },
    /// A folder that holds files but no sweep's record: the user's.
    #[error("{}: is not empty and holds no sweep.json: not a sweep directory; give a new or empty --out", .dir.display())]
    NotASweep {
        /// The sweep directory.
        dir: PathBuf,
    },
    /// The sweep directory that cannot be made or listed, or its `sweep.json` written.
    #[error("{}: cannot {doing}: {source}", .dir.display())]
    Io {
        /// The sweep directory.
        dir: PathBuf,
        /// What was being done (`create it`, `list it`, `write sweep.json`).
        doing: &'static str,
        /// The system's error.
        source: std::io::Error,
    },
    /// The directory's lock that another sweep (or a reader) holds, or that cannot be taken.
    #[error("{}: {refused}", .dir.display())]
    Locked {
        /// The sweep directory.
        dir: PathBuf,
        /// Why the lock was refused.
        refused: RunDirError,
    },
    /// The sweep's record (`sweep.json`) that cannot be read, or is no sweep record.
    #[error(
        "{}: its sweep.json is damaged ({reason}); restore it, or move the folder away and start a new sweep (its runs \
         stay readable by `analyze`)",
        .dir.display()
    )]
    RecordDamaged {
        /// The sweep directory.
        dir: PathBuf,
        /// The reader's words.
        reason: String,
    },
    /// A sweep under way with a depth axis continued without one, or the other way round.
    #[error("{}: {}", .dir.display(), depth_axis_change(.recorded, .given))]
    DepthAxisChanged {
        /// The sweep directory.
        dir: PathBuf,
        /// The depth axis the sweep under way has (empty: none).
        recorded: Vec<usize>,
        /// The depth axis given now (empty: none).
        given: Vec<usize>,
    },
    /// A sweep under way continued with other training settings.
    #[error(
        "{}: holds a sweep with other training settings ({}); keep them, or give a new --out for a new sweep",
        .dir.display(), .changes.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
    )]
    OtherSettings {
        /// The sweep directory.
        dir: PathBuf,
        /// The settings that differ from the sweep's.
        changes: Vec<SettingChange>,
    },
    /// A sweep under way continued on data whose content changed since it began.
    #[error(
        "{}: holds a sweep trained on other data: the content of the --data files (or of the tokenizer) changed since \
         it began, so new pairs would not be comparable with those done; restore the data, or give a new --out for a \
         new sweep",
        .dir.display()
    )]
    OtherData {
        /// The sweep directory.
        dir: PathBuf,
    },
}

/// An axis as the options write it: `2,3,4`.
fn listed(values: &[impl ToString]) -> String {
    values.iter().map(ToString::to_string).collect::<Vec<_>>().join(",")
}

/// What [`SweepError::DepthAxisChanged`] says: how to go on with the sweep under way.
fn depth_axis_change(recorded: &[usize], given: &[usize]) -> String {
    if given.is_empty() {
        format!(
            "holds a depth sweep (--layers {}): give --layers with a list of two or more depths to go on with it (one \
             depth is every run's fixed depth, not the axis), or a new --out",
            listed(recorded)
        )
    } else {
        format!(
            "holds a sweep without a depth axis (every run at one depth): a depth axis (--layers {}) needs a new --out",
            listed(given)
        )
    }
}
