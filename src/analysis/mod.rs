//! The paper's instruments for the curse of depth: layer-wise variance, angular distance between
//! layers, how close each block is to the identity, and the performance drop of layer pruning,
//! with PNG figures, single-run reports and multi-run comparisons.

mod analysed_model;
mod analysis_event;
mod analysis_request;
mod angular;
mod block_influence;
mod choice_file_error;
mod choice_format;
mod choice_layouts;
mod choice_rows;
mod comparison;
#[cfg(feature = "train")]
mod depth_report;
#[cfg(feature = "hf")]
mod encoder_report;
mod figures;
mod identity;
mod item_problem;
mod logit_lens;
mod multiple_choice;
#[cfg(feature = "train")]
mod paired;
mod plot;
mod prepared_analysis;
mod pruning;
mod report;
mod report_destination;
mod report_files;
#[cfg(feature = "train")]
mod scheme_result;
#[cfg(feature = "train")]
mod sweep_diagnostics;
#[cfg(feature = "train")]
mod sweep_report;
#[cfg(all(test, feature = "flex"))]
mod test_support;
mod trace_statistics;

pub use analysis_event::AnalysisEvent;
pub use analysis_request::{AnalysisRequest, ChoiceSet, ModelSource, DEFAULT_ENCODER_SEQUENCES, DEFAULT_SEQ_LEN};
pub use angular::{angular_distance, angular_distance_matrix, normalize_per_n};
pub use block_influence::block_influence;
pub use choice_file_error::{ChoiceFileError, ChoiceProblem};
pub use choice_format::ChoiceFormat;
pub use choice_layouts::{hellaswag_preprocess, piqa_labels_path, read_choice_file, read_choice_items};
pub use comparison::{path_labels, unique_labels, write_comparison, ComparedRun, RunSummary};
#[cfg(feature = "train")]
pub use depth_report::{depth_csv, depth_markdown, depth_points, write_depth_figures, DepthPoint};
#[cfg(feature = "hf")]
pub use encoder_report::{write_removal_comparison, ComparedEncoder, EncoderReport};
pub use figures::{
    angular_heatmap, variance_chart, write_comparison_figures, write_report_figures, write_tracking_figures,
};
pub use identity::{identity_ratios, update_ratio};
pub use item_problem::ItemProblem;
pub use logit_lens::{logit_lens, LogitLens};
pub use multiple_choice::{
    choice_picks, continuation_log_likelihood, longest_choice_tokens, score_choices, ChoiceAccuracy, ChoiceItem,
};
#[cfg(feature = "train")]
pub use paired::{paired_differences, paired_markdown, t_quantile_975, PairedDifference};
pub use plot::{Heatmap, LineChart, Series};
pub use prepared_analysis::PreparedAnalysis;
pub use pruning::{layers_or_all, pruning_drops};
pub use report::{
    analyze, check_removal_threshold, choice_report, AnalysisOptions, ChoiceReport, Report, EFFECTIVE_DEPTH_THRESHOLD,
};
pub use report_destination::{report_dir, report_labels, ReportModel};
#[cfg(feature = "train")]
pub use scheme_result::{sweep_results, SchemeResult};
#[cfg(feature = "train")]
pub use sweep_diagnostics::{sweep_diagnostics, DiagnosticsProgress};
#[cfg(feature = "train")]
pub use sweep_report::{
    results_markdown, sweep_loss_curves, sweep_report_dir, write_sweep_report, LossCurves, SWEEP_RESULTS,
};
