//! What a Hugging Face LLaMA checkpoint cannot express, so that export refuses it.

use crate::norm::NormKind;

/// What a Hugging Face LLaMA checkpoint cannot express
/// ([`HfError::NotExportable`](super::HfError::NotExportable)): only
/// RMSNorm, and Pre-LN blocks whose depth factors fold into the weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ExportProblem {
    /// A norm kind other than RMSNorm.
    #[error(
        "a {} norm cannot be expressed in a Hugging Face LLaMA checkpoint (the LLaMA family uses RMSNorm)",
        .0.name()
    )]
    NormKind(NormKind),
    /// A part of the block, named with the schemes that have it, that the architecture lacks.
    #[error(
        "{0} has no counterpart in the Hugging Face LLaMA architecture, so it cannot be expressed in a LLaMA \
         checkpoint; Pre-LN, LNS in every position but before-norm, CompleteP and the init-only schemes export"
    )]
    Block(BlockPart),
}

/// A part of a transformer block that the Hugging Face LLaMA architecture has no counterpart for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BlockPart {
    /// A norm after the residual addition.
    #[error("a Post-LN block (post-ln, deepnorm, mix-ln)")]
    PostLn,
    /// A norm on each sub-layer's output as well as its input.
    #[error("a norm on each sub-layer's output (sandwich-ln, and peri-ln with its embedding norm)")]
    OutputNorm,
    /// A norm on each sub-layer's output only.
    #[error("a norm on each sub-layer's output and none on its input (reordered-norm)")]
    OutputNormOnly,
    /// GPAS's learned gate on the residual stream.
    #[error("GPAS's learned scaling of the residual stream (gpas)")]
    Gpas,
    /// A learned gate on each branch.
    #[error("a LayerScale or SkipInit gate")]
    BranchGate,
    /// LNS applied to the norm's input.
    #[error("scaling the norm's input (lns:before-norm)")]
    NormInputScale,
    /// DeepNorm's scale of the residual.
    #[error("a residual scale (DeepNorm)")]
    ResidualScale,
}
