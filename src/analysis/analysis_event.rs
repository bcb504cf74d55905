//! What a running analysis tells its caller ([`PreparedAnalysis::run`](super::PreparedAnalysis::run)):
//! the library prints nothing; the `analyze` example shows these as lines and progress bars.

/// One thing a running analysis has to say, in the order it happens.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AnalysisEvent<'a> {
    /// Something to know before trusting the report: damaged tracking lines, models whose
    /// perplexities cannot be compared, fewer sequences than asked, a deprecated option, the
    /// evaluation text's own warnings.
    Warning(String),
    /// Something to know about the report, not a problem (a run that tracked nothing).
    Note(String),
    /// A model's evaluations begin: its title (`Diagnostics of runs/x (4 layers, lns)`).
    Model(&'a str),
    /// `done` of `total` evaluations of a stage of the current model: `perplexity`, `multiple
    /// choice`, `pseudo-perplexity`.
    Progress {
        /// The stage.
        stage: &'static str,
        /// Evaluations done.
        done: usize,
        /// Evaluations in the stage.
        total: usize,
    },
}
