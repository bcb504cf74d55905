//! Multiple-choice accuracy, following lm-evaluation-harness: each choice is scored by the summed
//! log-likelihood of its tokens after `Question: {question}\nAnswer:`; `acc` picks the highest sum,
//! `acc_norm` the highest sum per character of the choice. As there, context and choice are
//! encoded together (`"{context} {choice}"`) and the choice's tokens are those after the
//! context's own encoding, so a tokenizer that merges across the space scores what it would read.

use std::path::Path;

use burn::tensor::activation::log_softmax;
use burn::tensor::{Int, Tensor, TensorData};

use crate::data::{DataError, Tokenizer};
use crate::model::Llama;
use crate::Error;

/// One question of an ARC-style JSONL file.
#[derive(Clone, Debug, PartialEq)]
pub struct ChoiceItem {
    /// The question.
    pub question: String,
    /// The candidate answers.
    pub choices: Vec<String>,
    /// The index of the right answer.
    pub answer: usize,
}

/// Reads ARC-style JSONL: `question` (a string, or an object with a `stem`), `choices` (a list of
/// strings, or an object with `text` and `label` lists, or a list of `{text, label}`), and the
/// answer as `answer` / `answerKey` (an index, or a label such as `"B"`). Errors name the line.
pub fn read_choice_items(path: &Path) -> Result<Vec<ChoiceItem>, DataError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| DataError::Corpus(format!("{shown}: {e}")))?;
    let mut items = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let bad = |what: &str| DataError::Corpus(format!("{shown}:{}: {what}", index + 1));
        let value: serde_json::Value =
            serde_json::from_str(line).map_err(|e| bad(&format!("not a JSON object: {e}")))?;
        let question = match &value["question"] {
            serde_json::Value::String(q) => q.clone(),
            q => q["stem"].as_str().ok_or_else(|| bad("no string `question` (or `question.stem`)"))?.to_string(),
        };
        let choices_value = if value["choices"].is_null() { &value["question"]["choices"] } else { &value["choices"] };
        let (choices, labels) = parse_choices(choices_value).ok_or_else(|| bad("no `choices` list"))?;
        if choices.len() < 2 {
            return Err(bad("fewer than 2 choices"));
        }
        let key = if value["answer"].is_null() { &value["answerKey"] } else { &value["answer"] };
        let answer = match key {
            serde_json::Value::Number(n) => n.as_u64().map(|n| n as usize),
            serde_json::Value::String(label) => labels
                .iter()
                .position(|l| l == label)
                .or_else(|| label.parse::<usize>().ok().filter(|_| labels.iter().all(|l| l.parse::<usize>().is_err())))
                .or_else(|| label.chars().next().filter(|c| c.is_ascii_uppercase()).map(|c| (c as u8 - b'A') as usize)),
            _ => None,
        }
        .filter(|&a| a < choices.len())
        .ok_or_else(|| bad("`answer` / `answerKey` is missing or names no choice"))?;
        items.push(ChoiceItem { question, choices, answer });
    }
    if items.is_empty() {
        return Err(DataError::Corpus(format!("{shown}: no question")));
    }
    Ok(items)
}

/// Choice texts and labels (`A`, `B`, ... when none are given).
fn parse_choices(value: &serde_json::Value) -> Option<(Vec<String>, Vec<String>)> {
    let letters = |n: usize| (0..n).map(|i| ((b'A' + i as u8) as char).to_string()).collect::<Vec<_>>();
    if let Some(list) = value.as_array() {
        let texts: Option<Vec<String>> =
            list.iter().map(|c| c.as_str().or_else(|| c["text"].as_str()).map(str::to_string)).collect();
        let texts = texts?;
        let labels: Vec<String> = list.iter().filter_map(|c| c["label"].as_str().map(str::to_string)).collect();
        let labels = if labels.len() == texts.len() { labels } else { letters(texts.len()) };
        return Some((texts, labels));
    }
    let texts: Vec<String> =
        value["text"].as_array()?.iter().map(|t| t.as_str().map(str::to_string)).collect::<Option<_>>()?;
    let labels: Vec<String> = value["label"]
        .as_array()
        .map(|l| l.iter().filter_map(|x| x.as_str().map(str::to_string)).collect())
        .filter(|l: &Vec<String>| l.len() == texts.len())
        .unwrap_or_else(|| letters(texts.len()));
    Some((texts, labels))
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
        return Err(DataError::Corpus("a multiple-choice context or choice encodes to no token".into()).into());
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

/// The index picked by the highest score (the first on ties).
fn best(scores: &[f64]) -> usize {
    scores.iter().enumerate().fold(0, |best, (i, &s)| if s > scores[best] { i } else { best })
}

/// The text before the choices of `item`, and the whole text (context and choice) of each choice.
fn item_texts(item: &ChoiceItem) -> (String, Vec<String>) {
    let context = format!("Question: {}\nAnswer:", item.question);
    let wholes = item.choices.iter().map(|choice| format!("{context} {choice}")).collect();
    (context, wholes)
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
        let context = encode(&context_text)?;
        let mut sums = Vec::new();
        let mut per_char = Vec::new();
        for (choice, whole) in item.choices.iter().zip(&wholes) {
            let whole = encode(whole)?;
            let continuation = whole.get(context.len()..).unwrap_or_default();
            let sum = continuation_log_likelihood(model, &context, continuation, skip)
                .map_err(|e| DataError::Corpus(format!("question {:?}, choice {choice:?}: {e}", item.question)))?;
            sums.push(sum);
            per_char.push(sum / choice.chars().count().max(1) as f64);
        }
        let pick = (best(&sums), best(&per_char));
        right += usize::from(pick.0 == item.answer);
        right_norm += usize::from(pick.1 == item.answer);
        picks.push(pick);
    }
    let n = items.len().max(1) as f64;
    Ok((ChoiceAccuracy { acc: right as f64 / n, acc_norm: right_norm as f64 / n }, picks))
}
