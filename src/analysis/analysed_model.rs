//! The models of an analysis, loaded and checked against its settings before any evaluation: a
//! decoder (a run directory, or a Hugging Face LLaMA-style directory) with what its training
//! tracked, or a BERT-style encoder; and the evaluation text each reads.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use burn::tensor::Device;

use super::analysis_request::usage;
use super::{AnalysisEvent, AnalysisRequest, Report};
use crate::data::{tokenize_corpus, CorpusSource, SequenceDataset, TokenCache, Tokenizer};
use crate::model::Llama;
use crate::run::{load_model_dir, read_tracking_skipping_damage, TrackRecord, TRACKING};
use crate::{error::Error, model::LlamaConfig};

/// The documents of the built-in corpus an analysis reads when no `--data` is given: fresh ones
/// (another seed than training's).
const BUILTIN_EVALUATION: CorpusSource = CorpusSource::Builtin { n_docs: 2000, seed: 0xa11a };

/// A decoder to analyse, loaded and checked.
pub(super) struct AnalysedRun {
    pub(super) dir: PathBuf,
    pub(super) model: Llama,
    pub(super) tokenizer: Tokenizer,
    /// The model's config.
    pub(super) config: LlamaConfig,
    pub(super) title: String,
    /// What training recorded with `--track-every` (`tracking.jsonl`), if anything.
    tracking: Option<Vec<TrackRecord>>,
}

impl AnalysedRun {
    /// Loads the run directory (or Hugging Face decoder directory) `dir` at the request's
    /// checkpoint onto `device` and checks the request's sequence length and layers against it. A
    /// diverged or damaged model is refused by `load_model_dir`. What the user should know of it
    /// goes to `on_event` as it is found.
    pub(super) fn load(
        dir: &Path,
        request: &AnalysisRequest,
        device: &Device,
        on_event: &mut dyn FnMut(AnalysisEvent),
    ) -> Result<Self, Error> {
        let (step, deprecated) = crate::run::step_of_options(dir, request.step, request.epoch)?;
        if let Some(warning) = deprecated {
            on_event(AnalysisEvent::Warning(warning));
        }
        let loaded = load_model_dir(dir, step, device)?;
        let tokenizer = loaded.tokenizer(request.tokenizer.as_deref())?;
        let config = &loaded.config;
        let asked_by = format!("--seq-len {} on {}", request.seq_len, dir.display());
        config.check_seq_len(request.seq_len, &asked_by, "lower --seq-len")?;
        let layers = &request.options.layers;
        loaded.model.check_layers(layers).map_err(layers_refused(dir))?;
        let tracking = Self::tracking(dir, config.n_layers, on_event)?.filter(|records| !records.is_empty());
        // A checkpoint's report says which: it is written where the final model's goes.
        let at = step.map(|step| format!(" at step {step}")).unwrap_or_default();
        let title =
            format!("Diagnostics of {}{at} ({} layers, {})", dir.display(), config.n_layers, config.norm_scheme);
        Ok(Self { dir: dir.to_path_buf(), model: loaded.model, config: loaded.config, tokenizer, title, tracking })
    }

    /// The run's `tracking.jsonl`, if it has one: the records of a model of `n_layers`. A damaged
    /// line (a write cut short by a full disk) or a record of another depth costs its record, with
    /// a warning, not the run's report.
    fn tracking(
        dir: &Path,
        n_layers: usize,
        on_event: &mut dyn FnMut(AnalysisEvent),
    ) -> Result<Option<Vec<TrackRecord>>, Error> {
        let path = dir.join(TRACKING);
        if !path.is_file() {
            return Ok(None);
        }
        let (records, damaged) = read_tracking_skipping_damage(dir, n_layers)?;
        if let Some((line, what)) = damaged.first() {
            on_event(AnalysisEvent::Warning(format!(
                "{}: {} damaged line(s) left out (line {line}: {what}); the tracked curves show the other {} records",
                path.display(),
                damaged.len(),
                records.len()
            )));
        } else if records.is_empty() {
            let note = format!("{} holds no records; the report has no tracked curves", path.display());
            on_event(AnalysisEvent::Note(note));
        }
        Ok(Some(records))
    }

    /// The report on this model: its diagnostics on the request's evaluation text, its
    /// multiple-choice scores on `choices`, and what its training tracked.
    pub(super) fn report(
        &self,
        request: &AnalysisRequest,
        choices: Option<&[super::ChoiceItem]>,
        on_event: &mut dyn FnMut(AnalysisEvent),
    ) -> Result<Report, Error> {
        let cache = evaluation_tokens(request, &self.tokenizer, self.config.vocab_size, on_event)?;
        let docs: Vec<usize> = (0..cache.n_docs()).collect();
        let data = SequenceDataset::new(cache, &docs, request.seq_len);
        on_event(AnalysisEvent::Model(&self.title));
        let mut perplexity = |done, total| on_event(AnalysisEvent::Progress { stage: "perplexity", done, total });
        let mut report = super::analyze(&self.model, &data, &request.options, &mut perplexity)?;
        if let Some(items) = choices {
            let layers = &request.options.layers;
            let mut choice = |done, total| on_event(AnalysisEvent::Progress { stage: "multiple choice", done, total });
            report.multiple_choice =
                Some(super::choice_report(&self.model, &self.tokenizer, items, layers, &mut choice)?);
        }
        report.tracking = self.tracking.clone();
        Ok(report)
    }
}

/// The request's evaluation text (`data`, or fresh built-in documents) tokenised by `tokenizer`
/// and checked against a model vocabulary of `vocab_size`; its warnings go to `on_event`.
fn evaluation_tokens(
    request: &AnalysisRequest,
    tokenizer: &Tokenizer,
    vocab_size: usize,
    on_event: &mut dyn FnMut(AnalysisEvent),
) -> Result<Arc<TokenCache>, Error> {
    let source = if request.data.is_empty() {
        BUILTIN_EVALUATION
    } else {
        CorpusSource::Files { paths: request.data.clone(), text_field: request.text_field.clone() }
    };
    let cache_root =
        request.cache_dir.clone().unwrap_or_else(|| std::env::temp_dir().join("layernorm-scaling-token-cache"));
    let cache = Arc::new(tokenize_corpus(&source, tokenizer, &cache_root)?);
    for warning in cache.warnings() {
        on_event(AnalysisEvent::Warning(warning.to_string()));
    }
    cache.check_vocabulary(tokenizer, vocab_size)?;
    Ok(cache)
}

/// The refusal of `--layers` naming layers that the model in `dir` does not have.
fn layers_refused(dir: &Path) -> impl Fn(crate::config_error::ConfigError) -> Error + '_ {
    move |e| usage(format!("--layers: {e} ({})", dir.display()))
}

#[cfg(feature = "hf")]
pub(super) use encoder::AnalysedEncoder;

#[cfg(feature = "hf")]
mod encoder {
    use std::path::{Path, PathBuf};

    use burn::tensor::Device;

    use super::{evaluation_tokens, layers_refused};
    use crate::analysis::analysis_request::{usage, DEFAULT_ENCODER_SEQUENCES};
    use crate::analysis::{AnalysisEvent, AnalysisRequest, EncoderReport};
    use crate::data::Tokenizer;
    use crate::error::Error;
    use crate::hf::{bert_layer_removal, encoder_sequences, load_bert_model, BertConfig, BertForMaskedLm, BertTokens};

    /// A BERT-style encoder to analyse, loaded and checked.
    pub(in crate::analysis) struct AnalysedEncoder {
        dir: PathBuf,
        model: BertForMaskedLm,
        config: BertConfig,
        tokenizer: Tokenizer,
        tokens: BertTokens,
        pub(in crate::analysis) title: String,
    }

    impl AnalysedEncoder {
        /// Loads the BERT-style encoder of the Hugging Face directory `dir` onto `device` and
        /// checks the request against it.
        pub(in crate::analysis) fn load(dir: &Path, request: &AnalysisRequest, device: &Device) -> Result<Self, Error> {
            if request.step.is_some() || request.epoch.is_some() {
                return Err(usage(format!(
                    "--step picks a checkpoint of a run; {} is a Hugging Face encoder, which has only its weights",
                    dir.display()
                )));
            }
            let (model, config) = load_bert_model(dir, device).map_err(|e| Error::file(dir, e))?;
            let tokenizer_path = request.tokenizer.clone().unwrap_or_else(|| dir.join("tokenizer.json"));
            if !tokenizer_path.is_file() {
                return Err(Error::file(
                    &tokenizer_path,
                    format!(
                        "no such file: the encoder {} needs its tokenizer.json; give it with --tokenizer",
                        dir.display()
                    ),
                ));
            }
            let tokenizer = Tokenizer::from_file(&tokenizer_path)?;
            let tokens = BertTokens::of(&tokenizer).map_err(|e| Error::file(&tokenizer_path, e))?;
            if request.seq_len < 3 || request.seq_len > model.max_positions() {
                return Err(usage(format!(
                    "--seq-len {}: the encoder {} takes sequences of 3 to {} tokens ([CLS] and [SEP] included)",
                    request.seq_len,
                    dir.display(),
                    model.max_positions()
                )));
            }
            let layers = &request.options.layers;
            model.check_layers(layers).map_err(layers_refused(dir))?;
            let title =
                format!("Layer removal of {} (Post-LN encoder, {} layers)", dir.display(), config.num_hidden_layers);
            Ok(Self { dir: dir.to_path_buf(), model, config, tokenizer, tokens, title })
        }

        /// The pseudo-perplexity of the encoder on the request's evaluation text with each layer
        /// removed.
        pub(in crate::analysis) fn report(
            &self,
            request: &AnalysisRequest,
            on_event: &mut dyn FnMut(AnalysisEvent),
        ) -> Result<EncoderReport, Error> {
            let cache = evaluation_tokens(request, &self.tokenizer, self.config.vocab_size, on_event)?;
            let wanted = request.sequences.unwrap_or(DEFAULT_ENCODER_SEQUENCES);
            let sequences = encoder_sequences(&cache, self.tokens, request.seq_len, wanted)?;
            if sequences.len() < wanted {
                on_event(AnalysisEvent::Warning(format!(
                    "the evaluation text holds {} sequences of {} tokens, fewer than {wanted}",
                    sequences.len(),
                    request.seq_len
                )));
            }
            on_event(AnalysisEvent::Model(&self.title));
            let mut counter =
                |done, total| on_event(AnalysisEvent::Progress { stage: "pseudo-perplexity", done, total });
            let layers = &request.options.layers;
            let removal = bert_layer_removal(&self.model, &sequences, self.tokens.mask, layers, &mut counter)?;
            Ok(EncoderReport::new(&self.dir, self.config.clone(), request.seq_len, removal))
        }
    }
}

#[cfg(all(test, feature = "flex"))]
mod tests {
    use super::{AnalysedRun, AnalysisEvent};
    use crate::analysis::test_support::{flex, request, run_dir};
    use crate::analysis::ModelSource;
    use crate::run::{TrackRecord, TRACKING};

    fn record(step: usize, layers: usize) -> String {
        let values = |n: usize| vec![1.0; n];
        let record = TrackRecord {
            step,
            block_output_variance: values(layers + 1),
            after_attention_variance: values(layers),
            grad_norm: values(layers),
            max_abs_activation: values(layers + 1),
        };
        serde_json::to_string(&record).unwrap() + "\n"
    }

    #[test]
    fn tracked_records_of_another_depth_than_the_models_are_left_out_one_by_one() {
        let root = tempfile::tempdir().unwrap();
        let run = run_dir(root.path(), "run");
        let request = request(vec![ModelSource::Run(run.clone())]);
        let layers = crate::model::LlamaConfig::tiny().n_layers;
        // The records kept, and what the user is told: a warning or a note (`W`, `N`).
        let tracked = |text: String| {
            std::fs::write(run.join(TRACKING), text).unwrap();
            let mut kinds = String::new();
            let mut said = |event: AnalysisEvent| match event {
                AnalysisEvent::Warning(_) => kinds.push('W'),
                AnalysisEvent::Note(_) => kinds.push('N'),
                other => panic!("{other:?}"),
            };
            let records = AnalysedRun::load(&run, &request, &flex(), &mut said).unwrap().tracking;
            (records.map(|records| records.len()), kinds)
        };
        assert_eq!(tracked(record(0, layers) + &record(10, layers)), (Some(2), String::new()));
        // A damaged line costs its own record only, with a warning.
        let damaged = record(0, layers) + "{\"step\": 1\n" + &record(10, layers);
        assert_eq!(tracked(damaged), (Some(2), "W".into()));
        // A record of another depth too, even the first.
        let deeper = record(0, layers + 1) + &record(10, layers) + &record(20, layers);
        assert_eq!(tracked(deeper), (Some(2), "W".into()));
        // An empty file (with a note) gives no tracked curves, as no file.
        assert_eq!(tracked(String::new()), (None, "N".into()));
    }
}
