//! Multiple-choice accuracy, following lm-evaluation-harness: each choice is scored by the summed
//! log-likelihood of its tokens after the item's context (its task's prompt, see
//! [`read_choice_file`](super::read_choice_file)); `acc` picks the highest sum, `acc_norm` the
//! highest sum per character of the choice. As there, context and choice are encoded together
//! (`"{context} {choice}"`, whitespace at the end of the context moved to the choice) and the
//! choice's tokens are those after the context's own encoding, so a tokenizer that merges across
//! the space scores what it would read.

use burn::tensor::activation::log_softmax;
use burn::tensor::{Int, Tensor, TensorData};

use crate::data::{DataError, Tokenizer, TokenizerProblem};
use crate::error::Error;
use crate::model::Llama;

/// One multiple-choice question, ready to score: the model reads `context`, then each choice after
/// a space.
#[derive(Clone, Debug, PartialEq)]
pub struct ChoiceItem {
    /// The question, as messages show it.
    pub question: String,
    /// What the model reads before each choice: the task's prompt for this question.
    pub context: String,
    /// The candidate answers, without the space that joins each to the context.
    pub choices: Vec<String>,
    /// The index of the right answer.
    pub answer: usize,
}

impl ChoiceItem {
    /// An item with ARC's (and PIQA's) prompt, `Question: {question}\nAnswer:`.
    pub fn with_question_prompt(question: String, choices: Vec<String>, answer: usize) -> Self {
        let context = format!("Question: {question}\nAnswer:");
        ChoiceItem { question, context, choices, answer }
    }
}

/// Summed log-probability of `continuation` after `context` (both token ids, non-empty), with the
/// given layers (1-based) skipped.
pub fn continuation_log_likelihood(
    model: &Llama,
    context: &[u32],
    continuation: &[u32],
    skip: &[usize],
) -> Result<f64, Error> {
    if context.is_empty() || continuation.is_empty() {
        let what = "a multiple-choice context or choice".to_string();
        return Err(DataError::Tokenizer(TokenizerProblem::EncodesToNothing { what }).into());
    }
    let device = model.embed_tokens.weight.device();
    let all: Vec<i64> = context.iter().chain(continuation).map(|&t| t as i64).collect();
    let len = all.len() - 1;
    let inputs: Tensor<2, Int> = Tensor::from_data(TensorData::new(all[..len].to_vec(), [1, len]), &device);
    let log_probs = log_softmax(model.forward_skipping(inputs, skip)?, 2); // [1, len, vocab]
    let start = context.len() - 1;
    let targets: Vec<i64> = continuation.iter().map(|&t| t as i64).collect();
    let n = targets.len();
    let index: Tensor<3, Int> = Tensor::from_data(TensorData::new(targets, [1, n, 1]), &device);
    let picked = log_probs.narrow(1, start, n).gather(2, index);
    Ok(picked.sum().into_scalar::<f64>())
}

/// Accuracy over questions: `acc` by summed log-likelihood, `acc_norm` by log-likelihood per
/// character of the choice.
#[derive(Clone, Copy, Debug, PartialEq, serde::Serialize)]
pub struct ChoiceAccuracy {
    /// Fraction right when choosing by summed log-likelihood.
    pub acc: f64,
    /// Fraction right when choosing by log-likelihood per character of the choice.
    pub acc_norm: f64,
}

/// The index picked by the highest score (the first on ties, as numpy's `argmax`).
fn best(scores: &[f64]) -> usize {
    scores.iter().enumerate().fold(0, |best, (i, &s)| if s > scores[best] { i } else { best })
}

/// The picks of lm-eval's two metrics from each choice's summed log-likelihood: `acc` by the
/// highest sum, `acc_norm` by the highest sum per character of the choice (Python's `len`:
/// characters, not bytes, without the joining space). Ties go to the first choice.
pub fn choice_picks(log_likelihoods: &[f64], choices: &[String]) -> (usize, usize) {
    let per_char: Vec<f64> =
        log_likelihoods.iter().zip(choices).map(|(ll, choice)| ll / choice.chars().count().max(1) as f64).collect();
    (best(log_likelihoods), best(&per_char))
}

/// The text the model reads before the choices of `item` (lm-eval moves whitespace at its end to
/// each choice), and the whole text (context and choice) of each choice.
fn item_texts(item: &ChoiceItem) -> (&str, Vec<String>) {
    let wholes = item.choices.iter().map(|choice| format!("{} {choice}", item.context)).collect();
    (item.context.trim_end(), wholes)
}

/// The most tokens [`score_choices`] gives the model for one question and choice: a model must
/// attend over that many positions (its `max_seq_len`).
pub fn longest_choice_tokens(tokenizer: &Tokenizer, items: &[ChoiceItem]) -> Result<usize, DataError> {
    let mut longest = 0;
    for item in items {
        for whole in item_texts(item).1 {
            longest = longest.max(tokenizer.encode(&whole)?.len().saturating_sub(1));
        }
    }
    Ok(longest)
}

/// Scores every item; returns the accuracy and, per item, the pick by `acc` and by `acc_norm`.
pub fn score_choices(
    model: &Llama,
    tokenizer: &Tokenizer,
    items: &[ChoiceItem],
    skip: &[usize],
) -> Result<(ChoiceAccuracy, Vec<(usize, usize)>), Error> {
    let encode = |text: &str| tokenizer.encode(text);
    let mut picks = Vec::with_capacity(items.len());
    let (mut right, mut right_norm) = (0, 0);
    for item in items {
        let (context_text, wholes) = item_texts(item);
        let context = encode(context_text)?;
        let mut sums = Vec::new();
        for (choice, whole) in item.choices.iter().zip(&wholes) {
            let whole = encode(whole)?;
            let continuation = whole.get(context.len()..).unwrap_or_default();
            let sum = continuation_log_likelihood(model, &context, continuation, skip).map_err(|e| match e {
                // Said with the question and the choice it is about.
                Error::Data(DataError::Tokenizer(TokenizerProblem::EncodesToNothing { .. })) => {
                    let what = format!("question {:?}, choice {choice:?}", item.question);
                    DataError::Tokenizer(TokenizerProblem::EncodesToNothing { what }).into()
                }
                other => other,
            })?;
            sums.push(sum);
        }
        let pick = choice_picks(&sums, &item.choices);
        right += usize::from(pick.0 == item.answer);
        right_norm += usize::from(pick.1 == item.answer);
        picks.push(pick);
    }
    let n = items.len().max(1) as f64;
    Ok((ChoiceAccuracy { acc: right as f64 / n, acc_norm: right_norm as f64 / n }, picks))
}
