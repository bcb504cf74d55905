//! The checkpoints a run offers to load, as an error names them.

/// The checkpoints of a run that can be loaded (each with its model file and checksum), for an
/// error that offers them.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum CheckpointList {
    /// Their steps, in order.
    Steps(Vec<usize>),
    /// None named by step, but files named by epoch, as versions before 0.1.0 named them: the
    /// first of them.
    EpochNamed {
        /// The first such file in `checkpoint/`.
        first: String,
    },
    /// None.
    Empty,
}

impl CheckpointList {
    /// Whether there is no checkpoint to load.
    pub fn is_empty(&self) -> bool {
        !matches!(self, Self::Steps(steps) if !steps.is_empty())
    }
}

impl std::fmt::Display for CheckpointList {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Steps(steps) => {
                let steps: Vec<String> = steps.iter().map(usize::to_string).collect();
                write!(f, "the run's checkpoints are --step {}", steps.join(", "))
            }
            Self::EpochNamed { first } => write!(
                f,
                "the run has no checkpoints named by step; its checkpoint/ holds ones named by epoch ({first}, ...), \
                 as versions before 0.1.0 named them: rename each <kind>-<epoch>.bpk (and its .sum) to \
                 <kind>-step-<step>.bpk, the step being the epoch times the run's eval_every"
            ),
            Self::Empty => write!(f, "the run has no checkpoints"),
        }
    }
}
