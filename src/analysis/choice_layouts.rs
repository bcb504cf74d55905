//! The multiple-choice layouts people have on disk, read into [`ChoiceItem`]s with
//! lm-evaluation-harness's own prompt for each task (its `doc_to_text`, with the task's
//! description, and its `doc_to_choice`):
//!
//! | format | files | prompt | choices |
//! |---|---|---|---|
//! | `arc` | ARC-style rows: `question`, `choices`, `answer` / `answerKey` | `Question: {question}\nAnswer:` | the choices |
//! | `hellaswag` | the Hub's `Rowan/hellaswag` rows (`label` a string) or rowanz's `hellaswag_val.jsonl` (an int) | `preprocess(activity_label + ": " + ctx_a + " " + ctx_b.capitalize())` | each ending, preprocessed |
//! | `piqa` | `goal`, `sol1`, `sol2`, `label`; or the original `valid.jsonl` with `valid-labels.lst` | `Question: {goal}\nAnswer:` | `sol1`, `sol2` |
//! | `mmlu` | the Hub's `cais/mmlu` rows (`question`, `subject`, `choices`, `answer`) or Hendrycks's `<subject>_test.csv` | the subject's description, `question.strip()`, `A. ..` to `D. ..`, `Answer:` | `A` to `D` |
//!
//! Rows come from JSON lines, a JSON array, Parquet (with the `parquet` feature) or, for MMLU, CSV.

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::choice_file_error::{ChoiceFileError, ChoiceProblem};
use super::choice_format::ChoiceFormat;
use super::choice_rows::{read_rows, Row};
use super::item_problem::ItemProblem;
use super::ChoiceItem;
use crate::data::{Place, Spot};

/// Reads a multiple-choice file in the format its first row shows (see [`read_choice_file`]).
pub fn read_choice_items(path: &Path) -> Result<Vec<ChoiceItem>, ChoiceFileError> {
    Ok(read_choice_file(path, None)?.1)
}

/// Reads a multiple-choice file in `format`, or, when `None`, in the format its first row shows:
/// a CSV file is MMLU's; a row with `ctx_a` and `endings` HellaSwag's; with `goal`, `sol1` and
/// `sol2` PIQA's; with `question`, `subject` and `choices` MMLU's; with `question` ARC's. Returns
/// the format and the items, each with its task's prompt. Errors name the file and line (or row).
pub fn read_choice_file(
    path: &Path,
    format: Option<ChoiceFormat>,
) -> Result<(ChoiceFormat, Vec<ChoiceItem>), ChoiceFileError> {
    let rows = read_rows(path)?;
    let first = rows.first().ok_or_else(|| ChoiceFileError::new(path, ChoiceProblem::NoQuestion))?;
    let format = match format {
        Some(format) => format,
        None => detect(first)?,
    };
    if first.value.is_array() && format != ChoiceFormat::Mmlu {
        return Err(ChoiceFileError::new(path, ChoiceProblem::CsvNotMmlu(format)));
    }
    let labels = match format {
        ChoiceFormat::Piqa if first.value.get("label").is_none() => Some(read_piqa_labels(path, &rows)?),
        _ => None,
    };
    let subject = subject_of_file(path);
    let items = rows
        .iter()
        .enumerate()
        .map(|(index, row)| {
            let item = match format {
                ChoiceFormat::Arc => arc_item(&row.value),
                ChoiceFormat::Hellaswag => hellaswag_item(&row.value),
                ChoiceFormat::Piqa => piqa_item(&row.value, labels.as_ref().map(|l| l[index])),
                ChoiceFormat::Mmlu => mmlu_item(&row.value, subject.as_deref()),
            };
            item.map_err(|what| ChoiceFileError::new(row.place.clone(), ChoiceProblem::NotAnItem(what)))
        })
        .collect::<Result<_, _>>()?;
    Ok((format, items))
}

/// The format the fields of `row` show, or an error listing each format's fields.
fn detect(row: &Row) -> Result<ChoiceFormat, ChoiceFileError> {
    let has = |key: &str| row.value.get(key).is_some_and(|v| !v.is_null());
    if row.value.is_array() {
        return Ok(ChoiceFormat::Mmlu);
    }
    if has("ctx_a") && has("endings") {
        return Ok(ChoiceFormat::Hellaswag);
    }
    if has("goal") && has("sol1") && has("sol2") {
        return Ok(ChoiceFormat::Piqa);
    }
    if has("question") && has("subject") && has("choices") {
        return Ok(ChoiceFormat::Mmlu);
    }
    if has("question") {
        return Ok(ChoiceFormat::Arc);
    }
    let found = match row.value.as_object() {
        Some(object) => format!("the fields [{}]", object.keys().map(String::as_str).collect::<Vec<_>>().join(", ")),
        None => "no JSON object".to_string(),
    };
    Err(ChoiceFileError::new(row.place.clone(), ChoiceProblem::NoFormat { found }))
}

/// The string field `key` of `row`, or an error naming the format's fields.
fn text<'a>(row: &'a Value, key: &str, format: ChoiceFormat) -> Result<&'a str, ItemProblem> {
    row[key].as_str().ok_or_else(|| ItemProblem::NoText { key: key.into(), format })
}

/// The list of strings `key` of `row`, or an error naming the format's fields.
fn texts(row: &Value, key: &str, format: ChoiceFormat) -> Result<Vec<String>, ItemProblem> {
    row[key]
        .as_array()
        .and_then(|list| list.iter().map(|t| t.as_str().map(str::to_string)).collect::<Option<Vec<_>>>())
        .ok_or_else(|| ItemProblem::NoTexts { key: key.into(), format })
}

/// The 0-based answer in `value` (an integer or a digit string; with `letters`, also `A`, `B`, ...)
/// for `n` choices.
fn answer_index(value: &Value, key: &str, n: usize, letters: bool) -> Result<usize, ItemProblem> {
    let index = match value {
        Value::Number(number) => number.as_i64(),
        Value::String(s) if s.trim().is_empty() => {
            return Err(ItemProblem::EmptyAnswer { key: key.into() });
        }
        Value::String(s) => s.trim().parse::<i64>().ok().or_else(|| {
            let mut chars = s.trim().chars();
            match (chars.next(), chars.next()) {
                (Some(c @ 'A'..='Z'), None) if letters => Some(i64::from(c as u8 - b'A')),
                _ => None,
            }
        }),
        Value::Null => return Err(ItemProblem::NoAnswer { key: key.into() }),
        _ => None,
    };
    let key = key.to_string();
    match index {
        Some(i) if i >= 0 && (i as usize) < n => Ok(i as usize),
        Some(value) if value < 0 => Err(ItemProblem::NegativeAnswer { key, value, choices: n, letters }),
        _ => Err(ItemProblem::NoSuchChoice { key, value: value.to_string(), choices: n, letters }),
    }
}

/// ARC-style: `question` (a string, or an object with a `stem`), `choices` (a list of strings, or
/// an object with `text` and `label` lists, or a list of `{text, label}`), and the answer as
/// `answer` / `answerKey` (an index, or a label such as `"B"`).
fn arc_item(row: &Value) -> Result<ChoiceItem, ItemProblem> {
    let question = match &row["question"] {
        Value::String(q) => q.clone(),
        q => q["stem"].as_str().ok_or(ItemProblem::NoArcQuestion)?.to_string(),
    };
    let choices_value = if row["choices"].is_null() { &row["question"]["choices"] } else { &row["choices"] };
    let (choices, labels) = arc_choices(choices_value).ok_or(ItemProblem::NoArcChoices)?;
    if choices.len() < 2 {
        return Err(ItemProblem::FewerThanTwo { key: "choices".into() });
    }
    let key = if row["answer"].is_null() { &row["answerKey"] } else { &row["answer"] };
    let answer = match key {
        Value::Number(n) => n.as_u64().map(|n| n as usize),
        Value::String(label) => labels
            .iter()
            .position(|l| l == label)
            .or_else(|| label.parse::<usize>().ok().filter(|_| labels.iter().all(|l| l.parse::<usize>().is_err())))
            .or_else(|| label.chars().next().filter(|c| c.is_ascii_uppercase()).map(|c| (c as u8 - b'A') as usize)),
        _ => None,
    }
    .filter(|&a| a < choices.len())
    .ok_or(ItemProblem::NoArcAnswer)?;
    Ok(ChoiceItem::with_question_prompt(question, choices, answer))
}

/// ARC's choice texts and labels (`A`, `B`, ... when none are given).
fn arc_choices(value: &Value) -> Option<(Vec<String>, Vec<String>)> {
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

/// HellaSwag as lm-eval's `process_docs`: the query
/// `preprocess(activity_label + ": " + ctx_a + " " + ctx_b.capitalize())`, each ending preprocessed.
fn hellaswag_item(row: &Value) -> Result<ChoiceItem, ItemProblem> {
    let format = ChoiceFormat::Hellaswag;
    let ctx = format!("{} {}", text(row, "ctx_a", format)?, python_capitalize(text(row, "ctx_b", format)?));
    let query = hellaswag_preprocess(&format!("{}: {ctx}", text(row, "activity_label", format)?));
    let choices: Vec<String> = texts(row, "endings", format)?.iter().map(|e| hellaswag_preprocess(e)).collect();
    if choices.len() < 2 {
        return Err(ItemProblem::FewerThanTwo { key: "endings".into() });
    }
    let answer = answer_index(&row["label"], "label", choices.len(), false)?;
    Ok(ChoiceItem { question: query.clone(), context: query, choices, answer })
}

/// lm-eval's HellaSwag `preprocess`: strip, `" [title]"` becomes `". "`, every `[...]` is removed
/// (the regex `\[.*?\]`, which does not cross a line), then each double space becomes one (one pass).
pub fn hellaswag_preprocess(text: &str) -> String {
    let text = text.trim().replace(" [title]", ". ");
    let mut kept = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(open) = rest.find('[') {
        kept.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        match after.find([']', '\n']) {
            Some(close) if after.as_bytes()[close] == b']' => rest = &after[close + 1..],
            _ => {
                kept.push('[');
                rest = after;
            }
        }
    }
    kept.push_str(rest);
    kept.replace("  ", " ")
}

/// Python's `str.capitalize`: the first character upper case, every other one lower case.
fn python_capitalize(text: &str) -> String {
    let mut chars = text.chars();
    match chars.next() {
        Some(first) => first.to_uppercase().chain(chars.as_str().to_lowercase().chars()).collect(),
        None => String::new(),
    }
}

/// PIQA: the prompt `Question: {goal}\nAnswer:`, the choices `sol1` and `sol2`; the answer from
/// `label`, else from the labels file (`file_label`).
fn piqa_item(row: &Value, file_label: Option<usize>) -> Result<ChoiceItem, ItemProblem> {
    let format = ChoiceFormat::Piqa;
    let goal = text(row, "goal", format)?;
    let choices = vec![text(row, "sol1", format)?.to_string(), text(row, "sol2", format)?.to_string()];
    let answer = match file_label {
        Some(label) => label,
        None => answer_index(&row["label"], "label", 2, false)?,
    };
    Ok(ChoiceItem::with_question_prompt(goal.to_string(), choices, answer))
}

/// The labels file of an original PIQA file: `X-labels.lst` beside `X.jsonl`.
pub fn piqa_labels_path(path: &Path) -> PathBuf {
    let stem = path.file_stem().map(|s| s.to_string_lossy().into_owned()).unwrap_or_default();
    path.with_file_name(format!("{stem}-labels.lst"))
}

/// The labels of an original PIQA file (one 0 or 1 a line), one per row of `rows`.
fn read_piqa_labels(path: &Path, rows: &[Row]) -> Result<Vec<usize>, ChoiceFileError> {
    let labels_path = piqa_labels_path(path);
    let text = std::fs::read_to_string(&labels_path).map_err(|e| {
        let problem = ChoiceProblem::NoPiqaLabels { labels: labels_path.clone(), error: e.to_string() };
        ChoiceFileError::new(rows[0].place.clone(), problem)
    })?;
    let lines: Vec<&str> = text.trim_end().lines().collect();
    let mut labels = Vec::with_capacity(lines.len());
    for (index, line) in lines.iter().enumerate() {
        match line.trim().parse::<usize>() {
            Ok(label) if label < 2 => labels.push(label),
            _ => {
                let place = Place::at(&labels_path, Spot::Line(index + 1));
                return Err(ChoiceFileError::new(place, ChoiceProblem::NotPiqaLabel(line.to_string())));
            }
        }
    }
    if labels.len() != rows.len() {
        let problem = ChoiceProblem::PiqaLabelCount { labels: labels.len(), rows_file: path.into(), rows: rows.len() };
        return Err(ChoiceFileError::new(labels_path, problem));
    }
    Ok(labels)
}

/// The MMLU subject in a file name of Hendrycks's naming, `<subject>_{test,val,dev}.csv`.
fn subject_of_file(path: &Path) -> Option<String> {
    let stem = path.file_stem()?.to_string_lossy().into_owned();
    ["_test", "_val", "_dev"].iter().find_map(|split| stem.strip_suffix(split)).map(str::to_string)
}

/// MMLU as lm-eval's default template: the subject's description, then
/// `{question.strip()}\nA. {choices[0]}\nB. ..\nC. ..\nD. {choices[3]}\nAnswer:`; the choices are the
/// letters. A CSV row (`question, A, B, C, D, answer letter`) takes its subject from the file name.
fn mmlu_item(row: &Value, file_subject: Option<&str>) -> Result<ChoiceItem, ItemProblem> {
    let format = ChoiceFormat::Mmlu;
    let (question, options, answer) = match row {
        Value::Array(fields) => {
            if fields.len() != 6 {
                return Err(ItemProblem::CsvFields { found: fields.len() });
            }
            let field = |i: usize| fields[i].as_str().unwrap_or_default().to_string();
            let options = (1..5).map(field).collect::<Vec<_>>();
            (field(0), options, answer_index(&fields[5], "answer", 4, true)?)
        }
        _ => {
            let options = texts(row, "choices", format)?;
            if options.len() != 4 {
                return Err(ItemProblem::MmluChoices { found: options.len() });
            }
            (text(row, "question", format)?.to_string(), options, answer_index(&row["answer"], "answer", 4, true)?)
        }
    };
    let subject = match row["subject"].as_str() {
        Some(subject) => subject,
        None => file_subject.ok_or(ItemProblem::NoSubject)?,
    };
    let question = question.trim().to_string();
    let mut context = format!(
        "The following are multiple choice questions (with answers) about {}.\n\n{question}",
        subject.replace('_', " ")
    );
    for (letter, option) in ["A", "B", "C", "D"].iter().zip(&options) {
        context.push_str(&format!("\n{letter}. {option}"));
    }
    context.push_str("\nAnswer:");
    let choices = ["A", "B", "C", "D"].map(str::to_string).to_vec();
    Ok(ChoiceItem { question, context, choices, answer })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_capitalize_lowers_the_rest() {
        assert_eq!(python_capitalize("then, the Man uses a BOWLING ball."), "Then, the man uses a bowling ball.");
        assert_eq!(python_capitalize("élan"), "Élan");
        assert_eq!(python_capitalize(""), "");
    }

    #[test]
    fn answers_are_indices_digit_strings_or_letters() {
        assert_eq!(answer_index(&Value::from(2), "label", 4, false), Ok(2));
        assert_eq!(answer_index(&Value::from("3"), "label", 4, false), Ok(3));
        assert_eq!(answer_index(&Value::from("C"), "answer", 4, true), Ok(2));
        let no_choice = |value: &str| ItemProblem::NoSuchChoice {
            key: "label".into(),
            value: value.into(),
            choices: 4,
            letters: false,
        };
        assert_eq!(answer_index(&Value::from("C"), "label", 4, false), Err(no_choice("\"C\"")));
        assert_eq!(answer_index(&Value::from(4), "label", 4, false), Err(no_choice("4")));
        let negative = ItemProblem::NegativeAnswer { key: "label".into(), value: -1, choices: 2, letters: false };
        assert_eq!(answer_index(&Value::from(-1), "label", 2, false), Err(negative));
        let empty = ItemProblem::EmptyAnswer { key: "label".into() };
        assert_eq!(answer_index(&Value::from(""), "label", 4, false), Err(empty));
        // The range the message gives: by index, or by index or letter.
        assert!(no_choice("4").to_string().ends_with("expected 0 to 3"));
        let lettered = ItemProblem::NoSuchChoice { key: "answer".into(), value: "9".into(), choices: 4, letters: true };
        assert!(lettered.to_string().ends_with("expected 0 to 3 or A to D"), "{lettered}");
    }

    #[test]
    fn the_subject_comes_from_hendrycks_file_names() {
        assert_eq!(
            subject_of_file(Path::new("data/test/college_computer_science_test.csv")).as_deref(),
            Some("college_computer_science")
        );
        assert_eq!(subject_of_file(Path::new("test.jsonl")), None);
        assert_eq!(piqa_labels_path(Path::new("piqa/valid.jsonl")), Path::new("piqa/valid-labels.lst"));
    }
}
