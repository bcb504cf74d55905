//! Why a folder given as a model (a run directory, or a Hugging Face model directory) is neither.

use super::FoundInstead;

/// Why a folder given as a model cannot be loaded as one: [`Error::ModelDir`](crate::error::Error::ModelDir)
/// pairs it with the folder.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ModelDirProblem {
    /// Nothing there.
    NoSuchFolder,
    /// A file where the folder should be.
    NotAFolder,
    /// A Hugging Face model directory asked for a checkpoint (`--step`): it has none.
    NoHfCheckpoints,
    /// `--hf-dir` without `config.json`. `hides` is the model of the local Hugging Face cache
    /// (`org/name`) that a local folder of that name hides, if it does.
    NotHfDir {
        /// The cached model's name that the folder hides.
        hides: Option<String>,
    },
    /// Neither a run directory (`model.json`) nor a Hugging Face model directory (`config.json`):
    /// `kind` and `error` are why `model.json` could not be read, said unless it is simply not
    /// there (`NotFound`).
    NeitherKind {
        /// The kind of the reading error.
        kind: std::io::ErrorKind,
        /// The reading error, as the system words it.
        error: String,
        /// What the folder is instead.
        what: FoundInstead,
    },
    /// A Hugging Face model directory, in a build without the `hf` feature.
    NeedsHfFeature,
}

impl std::fmt::Display for ModelDirProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let either = "give a run directory of the train example or a Hugging Face model directory";
        match self {
            Self::NoSuchFolder => write!(f, "no such folder: {either}"),
            Self::NotAFolder => write!(f, "a file, not a folder: {either}"),
            Self::NoHfCheckpoints => write!(f, "a Hugging Face model directory has no checkpoints: drop --step"),
            Self::NotHfDir { hides } => {
                write!(
                    f,
                    "--hf-dir: no config.json there; is it a Hugging Face model directory? (a run directory of the \
                     train example goes to --run)"
                )?;
                match hides {
                    Some(name) => write!(
                        f,
                        "; the local folder {name} comes before a model of that name in the Hugging Face cache: \
                         rename or remove the folder to use the cached model"
                    ),
                    None => Ok(()),
                }
            }
            Self::NeitherKind { kind, error, what } => {
                if *kind != std::io::ErrorKind::NotFound {
                    write!(f, "{error}: ")?;
                }
                write!(f, "not a run directory (model.json) nor a Hugging Face model directory (config.json); {what}")
            }
            Self::NeedsHfFeature => {
                write!(f, "a Hugging Face model directory needs the `hf` cargo feature of layernorm-scaling")
            }
        }
    }
}
