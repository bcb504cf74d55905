//! An analysis checked before it runs: the checks of an [`AnalysisRequest`] made, and every model
//! loaded, before the first evaluation ([`AnalysisRequest::prepare`]); then the evaluations and
//! the report written where it goes ([`PreparedAnalysis::run`]).

use std::path::{Path, PathBuf};

use super::analysed_model::AnalysedRun;
use super::analysis_request::usage;
use super::{
    read_choice_file, report_dir, report_labels, write_comparison, AnalysisEvent, AnalysisRequest, ChoiceItem,
    ChoiceSet, ComparedRun, ModelSource, ReportModel,
};
use crate::run::RunIdentity;
use crate::{config_error::ConfigError, error::Error};

/// A model of a prepared analysis.
enum Analysed {
    Decoder(AnalysedRun),
    #[cfg(feature = "hf")]
    Encoder(super::analysed_model::AnalysedEncoder),
}

/// An analysis whose settings were checked and whose models were loaded: what is left to fail is
/// reading the evaluation text (per model, in its tokenizer), the evaluations and the writing.
pub struct PreparedAnalysis {
    request: AnalysisRequest,
    /// Notes for the reader of the report (say, that acc_norm equals acc on a set's choices).
    notes: Vec<String>,
    /// Each model with its label, in the request's order.
    models: Vec<(String, Analysed)>,
    /// What each model's directory held when loaded: a training that rewrites one meanwhile is
    /// caught before the report is written (it would describe the old model beside the new run).
    identities: Vec<(PathBuf, RunIdentity)>,
    choices: Option<Vec<ChoiceItem>>,
    out: PathBuf,
}

impl std::fmt::Debug for PreparedAnalysis {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let models: Vec<(&String, &str)> = self
            .models
            .iter()
            .map(|(label, model)| match model {
                Analysed::Decoder(run) => (label, run.title.as_str()),
                #[cfg(feature = "hf")]
                Analysed::Encoder(encoder) => (label, encoder.title.as_str()),
            })
            .collect();
        f.debug_struct("PreparedAnalysis").field("out", &self.out).field("models", &models).finish_non_exhaustive()
    }
}

impl AnalysisRequest {
    /// Checks the request and loads every model, before the first evaluation: the settings and
    /// the device, where the report goes and its labels, each model against the sequence length
    /// and the layers, the multiple-choice set and whether each question fits each model's
    /// context. The evaluation text is read later, by [`run`](PreparedAnalysis::run), in each
    /// model's tokenizer. What the user should know (a deprecated `epoch`, damaged tracking
    /// records, models whose perplexities cannot be compared) goes to `on_event` as it is found,
    /// before any refusal that follows.
    pub fn prepare(self, on_event: &mut dyn FnMut(AnalysisEvent)) -> Result<PreparedAnalysis, Error> {
        if self.seq_len == 0 || self.sequences == Some(0) {
            return Err(usage("--seq-len and --sequences must be at least 1".into()));
        }
        self.options.validate().map_err(|e| match e {
            ConfigError::Zero { field } => usage(format!("--{} must be at least 1", field.replace('_', "-"))),
            ConfigError::LayerTwice { .. } => usage(format!("--layers: {e}")),
            other => other.into(),
        })?;
        let device = crate::device::parse_device(&self.device)?;
        // `org/name` names a model of the local Hugging Face cache: its folder from here on.
        let dirs: Vec<(PathBuf, Kind)> = self
            .models
            .iter()
            .map(|model| match model {
                ModelSource::Run(dir) => Ok((dir.clone(), Kind::Run)),
                ModelSource::Hf(given) => {
                    let dir = crate::run::require_hf_dir(given)?;
                    let kind = if is_encoder_dir(&dir) { Kind::Encoder } else { Kind::HfDecoder };
                    Ok((dir, kind))
                }
            })
            .collect::<Result<_, Error>>()?;
        let has_encoder = dirs.iter().any(|(_, kind)| *kind == Kind::Encoder);
        let has_decoder = dirs.iter().any(|(_, kind)| *kind != Kind::Encoder);
        if self.choices.is_some() && !has_decoder {
            return Err(usage(
                "--choices scores decoders (a continuation's likelihood); the models given are all BERT-style \
                 encoders"
                    .into(),
            ));
        }
        let described: Vec<ReportModel> = dirs
            .iter()
            .zip(&self.models)
            .map(|((dir, kind), given)| {
                let (ModelSource::Run(given) | ModelSource::Hf(given)) = given;
                ReportModel { dir, given, is_run: *kind == Kind::Run }
            })
            .collect();
        let labels = report_labels(&self.labels, &described)?;
        let out = report_dir(self.out.as_deref(), &described)?;
        let identities = dirs.iter().map(|(dir, _)| (dir.clone(), RunIdentity::of(dir))).collect();
        let mut models = Vec::new();
        for ((dir, kind), label) in dirs.iter().zip(labels) {
            let model = match kind {
                #[cfg(feature = "hf")]
                Kind::Encoder => Analysed::Encoder(super::analysed_model::AnalysedEncoder::load(dir, &self, &device)?),
                _ => Analysed::Decoder(AnalysedRun::load(dir, &self, &device, on_event)?),
            };
            models.push((label, model));
        }
        let decoders: Vec<(&String, &AnalysedRun)> = decoders(&models).collect();
        if let Some(warning) = different_tokenizers(&decoders) {
            on_event(AnalysisEvent::Warning(warning));
        }
        // After loading, so that a damaged config.json is named as such, not taken for a decoder's.
        if self.sequences.is_some() && !has_encoder {
            return Err(usage("--sequences counts an encoder's sequences; no --hf-dir is a BERT-style encoder".into()));
        }
        let mut notes = Vec::new();
        let choices = match &self.choices {
            Some(set) => Some(choice_items(set, &decoders, &mut notes)?),
            None => None,
        };
        Ok(PreparedAnalysis { request: self, notes, models, identities, choices, out })
    }
}

impl PreparedAnalysis {
    /// Where the report will be written.
    pub fn out(&self) -> &Path {
        &self.out
    }

    /// Notes for the reader of the report, found while preparing (the `analyze` example prints
    /// them on stdout).
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// Evaluates every model and writes the report: one model's, or a comparison of them all
    /// (with the encoders' layer removal beside the decoders' where there are both). Returns the
    /// report's summary (Markdown). `on_event` hears, for each model, the evaluation text's
    /// warnings, its title and the progress of each stage ([`AnalysisEvent`]). Nothing is written
    /// when a model's directory changed meanwhile.
    pub fn run(self, on_event: &mut dyn FnMut(AnalysisEvent)) -> Result<String, Error> {
        let request = &self.request;
        let mut compared = Vec::new();
        #[cfg(feature = "hf")]
        let mut compared_encoders = Vec::new();
        for (label, model) in &self.models {
            match model {
                Analysed::Decoder(run) => {
                    let report = run.report(request, self.choices.as_deref(), on_event)?;
                    compared.push(ComparedRun { label: label.clone(), title: run.title.clone(), report });
                }
                #[cfg(feature = "hf")]
                Analysed::Encoder(encoder) => {
                    let report = encoder.report(request, on_event)?;
                    let title = encoder.title.clone();
                    compared_encoders.push(super::ComparedEncoder { label: label.clone(), title, report });
                }
            }
        }
        if let Some((dir, _)) = self.identities.iter().find(|(dir, before)| RunIdentity::of(dir) != *before) {
            return Err(Error::file(
                dir,
                "changed while it was analysed (a training replaced or rewrote the run): nothing was written; run \
                 analyze again once that training is done",
            ));
        }
        let out = &self.out;
        let written = |e: std::io::Error| Error::file(out, format!("cannot write the report: {e}"));
        let comparison = || std::fs::read_to_string(out.join("comparison.md")).unwrap_or_default();
        #[cfg(feature = "hf")]
        match (compared.as_slice(), compared_encoders.as_slice()) {
            ([], [encoder]) => {
                encoder.report.write(out, &encoder.title).map_err(written)?;
                return Ok(encoder.report.summary(&encoder.title));
            }
            (_, [_, ..]) => {
                super::write_removal_comparison(&compared, &compared_encoders, out).map_err(written)?;
                return Ok(comparison());
            }
            _ => {}
        }
        match compared.as_slice() {
            [run] => {
                run.report.write(out, &run.title).map_err(written)?;
                Ok(run.report.summary(&run.title))
            }
            _ => {
                write_comparison(&compared, out).map_err(written)?;
                Ok(comparison())
            }
        }
    }
}

/// What a model directory holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// A run directory of the train example.
    Run,
    /// A Hugging Face decoder (LLaMA, Mistral, Qwen2).
    HfDecoder,
    /// A Hugging Face BERT-style encoder.
    Encoder,
}

/// Whether the Hugging Face directory `dir` holds a BERT-style encoder (never, without the `hf`
/// feature: its decoders are refused by their loader).
fn is_encoder_dir(dir: &Path) -> bool {
    #[cfg(feature = "hf")]
    return crate::hf::is_bert_dir(dir);
    #[cfg(not(feature = "hf"))]
    {
        let _ = dir;
        false
    }
}

/// The decoders among `models`, with their labels.
// Without the `hf` feature every model is a decoder.
#[cfg_attr(not(feature = "hf"), allow(clippy::unnecessary_filter_map))]
fn decoders(models: &[(String, Analysed)]) -> impl Iterator<Item = (&String, &AnalysedRun)> {
    models.iter().filter_map(|(label, model)| match model {
        Analysed::Decoder(run) => Some((label, run)),
        #[cfg(feature = "hf")]
        Analysed::Encoder(_) => None,
    })
}

/// The warning when the decoders use different tokenizers: perplexity is per token of each
/// model's own tokenizer, so across tokenizers it compares nothing.
fn different_tokenizers(decoders: &[(&String, &AnalysedRun)]) -> Option<String> {
    let identities: Vec<String> = decoders.iter().map(|(_, run)| run.tokenizer.identity()).collect();
    let named = || decoders.iter().map(|(label, run)| format!("{label}: {}", run.tokenizer.describe()));
    identities.iter().any(|identity| *identity != identities[0]).then(|| {
        format!(
            "the models use different tokenizers ({}): their perplexities and losses are per token of different \
             tokens, so they cannot be compared with each other; their depth diagnostics can",
            named().collect::<Vec<_>>().join("; ")
        )
    })
}

/// The items of the multiple-choice `set`, each question with each choice checked to fit in
/// every decoder's context; a note for the reader goes to `notes`.
fn choice_items(
    set: &ChoiceSet,
    decoders: &[(&String, &AnalysedRun)],
    notes: &mut Vec<String>,
) -> Result<Vec<ChoiceItem>, Error> {
    // Named as the multiple-choice set, not as a corpus.
    let (format, items) = read_choice_file(&set.path, set.format).map_err(|e| usage(format!("--choices: {e}")))?;
    if !format.has_acc_norm() {
        notes.push(format!("--choices: {format}'s choices are one letter each, so acc_norm equals acc: read acc"));
    }
    for (_, run) in decoders {
        let longest = super::longest_choice_tokens(&run.tokenizer, &items)?;
        let asked_by = format!("--choices (its longest question with a choice) on {}", run.dir.display());
        run.config.check_seq_len(longest, &asked_by, "shorten the questions")?;
    }
    Ok(items)
}

#[cfg(all(test, feature = "flex"))]
mod tests {
    use super::*;
    use crate::analysis::test_support::{request, run_dir};
    use crate::model::LlamaConfig;

    fn is_conflict(result: Result<PreparedAnalysis, Error>) -> bool {
        matches!(result, Err(Error::Config(ConfigError::Conflict(_))))
    }

    #[test]
    fn settings_no_model_can_take_are_refused_before_any_model_is_read() {
        let missing = vec![ModelSource::Run("no/such/run".into())];
        assert!(is_conflict(AnalysisRequest { seq_len: 0, ..request(missing.clone()) }.prepare(&mut |_| {})));
        assert!(is_conflict(AnalysisRequest { sequences: Some(0), ..request(missing.clone()) }.prepare(&mut |_| {})));
        let mut twice = request(missing);
        twice.options.layers = vec![1, 1];
        assert!(is_conflict(twice.prepare(&mut |_| {})));
    }

    #[test]
    fn each_model_is_checked_against_the_settings_before_the_first_evaluation() {
        let root = tempfile::tempdir().unwrap();
        let models = vec![ModelSource::Run(run_dir(root.path(), "run"))];
        let mut too_deep = request(models.clone());
        too_deep.options.layers = vec![LlamaConfig::tiny().n_layers + 1];
        assert!(is_conflict(too_deep.prepare(&mut |_| {})));
        let max_seq_len = LlamaConfig::tiny().max_seq_len;
        let too_long = AnalysisRequest { seq_len: max_seq_len + 1, ..request(models.clone()) };
        let refused = too_long.prepare(&mut |_| {});
        let positions = max_seq_len + 1;
        assert!(
            matches!(&refused, Err(Error::Config(ConfigError::TooLong { positions: p, max_seq_len: m, .. })) if (*p, *m) == (positions, max_seq_len)),
            "{:?}",
            refused.err()
        );
        // An encoder's setting with no encoder.
        assert!(is_conflict(AnalysisRequest { sequences: Some(2), ..request(models) }.prepare(&mut |_| {})));
    }

    #[test]
    fn one_run_is_reported_in_its_analysis_folder_and_two_in_a_comparison() {
        let root = tempfile::tempdir().unwrap();
        let (run, other) = (run_dir(root.path(), "run"), run_dir(root.path(), "other"));
        let mut stages = Vec::new();
        let mut titles = Vec::new();
        let mut progress = |event: AnalysisEvent| match event {
            AnalysisEvent::Progress { stage, done, total } => {
                assert!(done <= total, "{stage}: {done} of {total}");
                if stages.last() != Some(&stage) {
                    stages.push(stage);
                }
            }
            AnalysisEvent::Model(title) => titles.push(title.to_string()),
            other => panic!("nothing to warn of: {other:?}"),
        };

        let analysis = request(vec![ModelSource::Run(run.clone())]).prepare(&mut |_| {}).unwrap();
        assert_eq!(analysis.out(), run.join(crate::run::ANALYSIS));
        let summary = analysis.run(&mut progress).unwrap();
        assert!(run.join(crate::run::ANALYSIS).join(crate::run::REPORT).is_file());
        assert!(summary.contains("Diagnostics of") && summary.contains(&run.display().to_string()), "{summary}");
        assert_eq!(stages, ["perplexity"]);
        assert!(titles.len() == 1 && summary.contains(&titles[0]), "{titles:?}");

        let out = root.path().join("comparison");
        let both = vec![ModelSource::Run(run), ModelSource::Run(other)];
        let analysis = AnalysisRequest { out: Some(out.clone()), ..request(both) }.prepare(&mut |_| {}).unwrap();
        let summary = analysis.run(&mut |_| {}).unwrap();
        assert!(out.join(crate::run::COMPARISON).is_file());
        assert_eq!(summary, std::fs::read_to_string(out.join("comparison.md")).unwrap());
    }
}
