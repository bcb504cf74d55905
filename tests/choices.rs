//! Multiple-choice sets in the layouts people have on disk (ARC, HellaSwag, PIQA, MMLU), each read
//! into lm-evaluation-harness's prompt and choices; the metrics' picks; errors naming file and line.
//!
//! The fixtures in `tests/fixtures/choices/` come from `make_fixtures.py` there, which also writes
//! `expected.json`: what lm-eval's own rules (its HellaSwag `preprocess`, its task templates, copied
//! into the script) make of each file, computed by Python. The literal expectations below are
//! derived by hand from the same rules.

mod common;

use std::path::{Path, PathBuf};

use common::assert_mentions;

use layernorm_scaling::analysis::{
    choice_picks, hellaswag_preprocess, read_choice_file, read_choice_items, ChoiceFileError, ChoiceFormat, ChoiceItem,
    ChoiceProblem, ItemProblem,
};
use layernorm_scaling::data::Spot;

fn fixture(name: &str) -> PathBuf {
    common::fixture("choices").join(name)
}

fn read(name: &str) -> (ChoiceFormat, Vec<ChoiceItem>) {
    read_choice_file(&fixture(name), None).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn strings(texts: &[&str]) -> Vec<String> {
    texts.iter().map(|t| t.to_string()).collect()
}

/// Every fixture gives, item by item, the context, choices and answer lm-eval's rules give
/// (`expected.json`, computed by Python).
#[test]
fn every_fixture_reads_as_lm_eval_renders_it() {
    let expected: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("expected.json")).unwrap()).unwrap();
    let formats = [
        ("hellaswag_hf.jsonl", ChoiceFormat::Hellaswag),
        ("hellaswag_val.jsonl", ChoiceFormat::Hellaswag),
        ("piqa_hf.jsonl", ChoiceFormat::Piqa),
        ("valid.jsonl", ChoiceFormat::Piqa),
        ("mmlu_hf.jsonl", ChoiceFormat::Mmlu),
        ("college_computer_science_test.csv", ChoiceFormat::Mmlu),
        #[cfg(feature = "parquet")]
        ("hellaswag_hf.parquet", ChoiceFormat::Hellaswag),
        #[cfg(feature = "parquet")]
        ("mmlu_hf.parquet", ChoiceFormat::Mmlu),
    ];
    for (name, format) in formats {
        let (found, items) = read(name);
        assert_eq!(found, format, "{name}: the detected format");
        let want = expected[name].as_array().unwrap_or_else(|| panic!("{name} is not in expected.json"));
        assert_eq!(items.len(), want.len(), "{name}");
        for (item, want) in items.iter().zip(want) {
            assert_eq!(item.context, want["context"].as_str().unwrap(), "{name}");
            let choices: Vec<&str> = want["choices"].as_array().unwrap().iter().map(|c| c.as_str().unwrap()).collect();
            assert_eq!(item.choices, choices, "{name}");
            assert_eq!(item.answer as u64, want["answer"].as_u64().unwrap(), "{name}");
        }
        // The explicit format reads the same items.
        assert_eq!(read_choice_file(&fixture(name), Some(format)).unwrap().1, items, "{name}");
    }
}

#[test]
fn hellaswag_capitalizes_ctx_b_and_strips_the_wikihow_brackets() {
    // The Hub's export (`label` a string).
    let (_, items) = read("hellaswag_hf.jsonl");
    assert_eq!(items[0].context, "Roof shingle removal: A man is sitting on a roof. He");
    assert_eq!(items[0].answer, 3);
    // ctx_b "[step] Wrap an ICE cube in a Towel " -> capitalize() -> "[step] wrap an ice cube in a towel ";
    // " [title]" -> ". ", the brackets go, the double spaces left become one, the ends are stripped.
    assert_eq!(items[1].context, "Health: How to soothe a cold sore. Apply Ice. wrap an ice cube in a towel");
    assert_eq!(
        items[1].choices,
        strings(&[
            " Hold it on the sore for 10 minutes.", // "[substeps]" goes after the strip: the space stays
            "Eat the ice cube now.",
            " Call a doctor If it hurts.", // "[title]" at the start has no space before it
            "Throw the [towel away.",      // no closing bracket: kept
        ])
    );
    assert_eq!(items[1].answer, 0);
    assert_eq!(items[1].question, items[1].context);
    // rowanz's original (`label` an int).
    let (_, items) = read("hellaswag_val.jsonl");
    assert_eq!(
        items[0].context,
        "Clean and jerk: A lady walks to a barbell. She bends down and grabs the pole. The lady"
    );
    assert_eq!(items[0].choices[3], "stands and lifts the weight over her head.");
    assert_eq!(items[0].answer, 3);
}

#[test]
fn hellaswag_preprocess_is_lm_evals() {
    assert_eq!(hellaswag_preprocess("  a [title] b  "), "a. b");
    // The regex `\[.*?\]` is lazy and does not cross a line.
    assert_eq!(hellaswag_preprocess("x [a] y [b] z"), "x y z");
    assert_eq!(hellaswag_preprocess("x [a\nb] y [c]"), "x [a\nb] y "); // stripped before, not after
    assert_eq!(hellaswag_preprocess("[[a]] b"), "] b");
    // One pass of replace("  ", " "): three spaces become two.
    assert_eq!(hellaswag_preprocess("a   b"), "a  b");
    assert_eq!(hellaswag_preprocess("héllo [x] wörld"), "héllo wörld");
}

#[test]
fn piqa_reads_the_hub_export_and_the_original_with_its_labels_file() {
    for name in ["piqa_hf.jsonl", "valid.jsonl"] {
        let (format, items) = read(name);
        assert_eq!(format, ChoiceFormat::Piqa);
        assert_eq!(items[1].context, "Question: To open a jar lid, you can\nAnswer:");
        assert_eq!(items[1].question, "To open a jar lid, you can");
        assert_eq!(
            items[1].choices,
            strings(&["tap it on the counter, then twist.", "hold it under cold water, then twist."])
        );
        assert_eq!(items.iter().map(|i| i.answer).collect::<Vec<_>>(), vec![0, 1], "{name}");
    }
}

#[test]
fn mmlu_reads_the_hub_export_and_hendrycks_csv() {
    let (_, items) = read("mmlu_hf.jsonl");
    // The subject's underscores become spaces; the question is stripped; the choices are the letters.
    assert_eq!(
        items[0].context,
        "The following are multiple choice questions (with answers) about elementary mathematics.\n\n\
         What is 2 + 2?\nA. 3\nB. 4\nC. 5\nD. 22\nAnswer:"
    );
    assert_eq!(items[0].choices, strings(&["A", "B", "C", "D"]));
    assert_eq!((items[0].answer, items[1].answer), (1, 1));

    // The CSV: quoted commas and doubled quotes, a newline inside a question, the subject from the
    // file name, the answer a letter.
    let (format, items) = read("college_computer_science_test.csv");
    assert_eq!((format, items.len()), (ChoiceFormat::Mmlu, 3));
    let about = "The following are multiple choice questions (with answers) about college computer science.\n\n";
    assert_eq!(
        items[0].context,
        format!(
            "{about}Which of these, if any, are regular languages?\nA. Only I\nB. I, II and III\nC. None of them\n\
             D. Both \"I\" and II\nAnswer:"
        )
    );
    assert_eq!(items[0].answer, 2);
    assert_eq!(
        items[1].context,
        format!(
            "{about}Consider the program:\nx = 1\nWhat is x after it runs?\nA. 0\nB. 1\nC. 2\nD. undefined\nAnswer:"
        )
    );
    assert_eq!((items[1].answer, items[2].answer), (1, 0));
    assert!(!ChoiceFormat::Mmlu.has_acc_norm() && ChoiceFormat::Hellaswag.has_acc_norm());
}

#[test]
fn arc_files_still_read_as_before() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("arc.jsonl");
    std::fs::write(
        &path,
        r#"{"id": "Mercury_1", "question": {"stem": "Which is a gas?", "choices": [{"text": "ice", "label": "A"}, {"text": "steam", "label": "B"}]}, "answerKey": "B"}"#,
    )
    .unwrap();
    let (format, items) = read_choice_file(&path, None).unwrap();
    assert_eq!(format, ChoiceFormat::Arc);
    assert_eq!(
        items,
        vec![ChoiceItem {
            question: "Which is a gas?".into(),
            context: "Question: Which is a gas?\nAnswer:".into(),
            choices: strings(&["ice", "steam"]),
            answer: 1,
        }]
    );
    assert_eq!(read_choice_items(&path).unwrap(), items);
}

#[test]
fn acc_and_acc_norm_pick_as_lm_eval() {
    // acc: the highest log-likelihood; acc_norm: the highest per character of the choice.
    let choices = strings(&["a", "bbbb"]);
    assert_eq!(choice_picks(&[-2.0, -4.0], &choices), (0, 1)); // -2/1 < -4/4
                                                               // Characters, not bytes: "éé" is 2 characters (4 bytes). Per character -1.5 against -1.33;
                                                               // per byte it would be -0.75 against -1.33 and pick the first.
    assert_eq!(choice_picks(&[-3.0, -4.0], &strings(&["éé", "abc"])), (0, 1));
    // Ties go to the first choice (numpy's argmax).
    assert_eq!(choice_picks(&[-1.0, -1.0, -2.0], &strings(&["x", "y", "z"])), (0, 0));
    // One letter per choice (MMLU): acc_norm picks as acc.
    let letters = strings(&["A", "B", "C", "D"]);
    for lls in [[-1.5, -0.5, -3.0, -2.0], [-9.0, -8.0, -7.0, -0.1]] {
        let (acc, norm) = choice_picks(&lls, &letters);
        assert_eq!(acc, norm);
    }
}

/// Scoring reads each item's own context: the picks are those of the log-likelihoods of
/// `" " + choice` after the context, as lm-eval requests them.
#[test]
fn scoring_uses_each_items_context() {
    use layernorm_scaling::analysis::{continuation_log_likelihood, score_choices};
    use layernorm_scaling::data::Tokenizer;
    use layernorm_scaling::LlamaConfig;

    let model = LlamaConfig::tiny().init(&common::cpu()).unwrap();
    let tokenizer = Tokenizer::Byte;
    let (_, mut items) = read("mmlu_hf.jsonl");
    items.extend(read("hellaswag_val.jsonl").1);
    let bytes = |text: &str| tokenizer.encode(text).unwrap();
    let expected: Vec<(usize, usize)> = items
        .iter()
        .map(|item| {
            let lls: Vec<f64> = item
                .choices
                .iter()
                .map(|c| {
                    continuation_log_likelihood(&model, &bytes(&item.context), &bytes(&format!(" {c}")), &[]).unwrap()
                })
                .collect();
            choice_picks(&lls, &item.choices)
        })
        .collect();
    let (_, picks) = score_choices(&model, &tokenizer, &items, &[]).unwrap();
    assert_eq!(picks, expected);
}

/// Writes `text` as `name` in a new temporary folder.
fn temp_file(name: &str, text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    (dir, path)
}

fn error(path: &Path, format: Option<ChoiceFormat>) -> String {
    read_choice_file(path, format).unwrap_err().to_string()
}

/// The file name and spot where reading `path` fails, and the problem.
fn refusal(path: &Path, format: Option<ChoiceFormat>) -> (String, Option<Spot>, ChoiceProblem) {
    let ChoiceFileError { place, problem } = read_choice_file(path, format).unwrap_err();
    (place.path.file_name().unwrap().to_string_lossy().into_owned(), place.at, problem)
}

#[test]
fn bad_piqa_labels_are_named() {
    let rows = std::fs::read_to_string(fixture("valid.jsonl")).unwrap();
    // No labels file beside the rows.
    let (dir, path) = temp_file("dev.jsonl", &rows);
    let (name, at, problem) = refusal(&path, None);
    assert_eq!((name.as_str(), at), ("dev.jsonl", Some(Spot::Line(1))));
    let ChoiceProblem::NoPiqaLabels { labels, .. } = problem else { panic!("{problem}") };
    assert_eq!(labels, dir.path().join("dev-labels.lst"));
    // One label for two rows.
    std::fs::write(dir.path().join("dev-labels.lst"), "1\n").unwrap();
    let count = ChoiceProblem::PiqaLabelCount { labels: 1, rows_file: path.clone(), rows: 2 };
    assert_eq!(refusal(&path, None), ("dev-labels.lst".into(), None, count));
    // A label that is not 0 or 1.
    std::fs::write(dir.path().join("dev-labels.lst"), "1\n2\n").unwrap();
    let not_label = ChoiceProblem::NotPiqaLabel("2".into());
    assert_eq!(refusal(&path, None), ("dev-labels.lst".into(), Some(Spot::Line(2)), not_label));
    std::fs::write(dir.path().join("dev-labels.lst"), "1\n0\n").unwrap();
    assert_eq!(read_choice_items(&path).unwrap().iter().map(|i| i.answer).collect::<Vec<_>>(), vec![1, 0]);
}

#[test]
fn unknown_layouts_and_bad_answers_are_named_with_their_line() {
    // Fields of no layout: the message lists what each layout has.
    let (_dir, path) = temp_file("odd.jsonl", "{\"prompt\": \"q\", \"options\": [\"a\", \"b\"]}\n");
    let no_format = ChoiceProblem::NoFormat { found: "the fields [options, prompt]".into() };
    assert_eq!(refusal(&path, None), ("odd.jsonl".into(), Some(Spot::Line(1)), no_format));
    // Said once, in the variant: what each layout has.
    assert_mentions(
        &error(&path, None),
        &["arc: `question`", "hellaswag: `activity_label`", "piqa: `goal`", "mmlu: `question`, `subject`"],
    );
    // An answer out of range, on the second line.
    let mmlu = "{\"question\": \"q\", \"subject\": \"s\", \"choices\": [\"a\", \"b\", \"c\", \"d\"], \"answer\": 0}\n\
                {\"question\": \"q\", \"subject\": \"s\", \"choices\": [\"a\", \"b\", \"c\", \"d\"], \"answer\": 4}\n";
    let (_dir, path) = temp_file("mmlu.jsonl", mmlu);
    let no_choice = ItemProblem::NoSuchChoice { key: "answer".into(), value: "4".into(), choices: 4, letters: true };
    assert_eq!(refusal(&path, None), ("mmlu.jsonl".into(), Some(Spot::Line(2)), ChoiceProblem::NotAnItem(no_choice)));
    // HellaSwag's test split has an empty label.
    let row =
        std::fs::read_to_string(fixture("hellaswag_hf.jsonl")).unwrap().replace("\"label\": \"0\"", "\"label\": \"\"");
    let (_dir, path) = temp_file("hellaswag.jsonl", &row);
    let empty = ChoiceProblem::NotAnItem(ItemProblem::EmptyAnswer { key: "label".into() });
    assert_eq!(refusal(&path, None), ("hellaswag.jsonl".into(), Some(Spot::Line(2)), empty));
    // PIQA's test split in the Hub's export: label -1.
    let (_dir, path) = temp_file("piqa.jsonl", "{\"goal\": \"g\", \"sol1\": \"a\", \"sol2\": \"b\", \"label\": -1}\n");
    let negative = ItemProblem::NegativeAnswer { key: "label".into(), value: -1, choices: 2, letters: false };
    assert_eq!(refusal(&path, None), ("piqa.jsonl".into(), Some(Spot::Line(1)), ChoiceProblem::NotAnItem(negative)));
    // A CSV row with 5 fields, on line 6 (the second row spans lines 2 to 4).
    let csv = std::fs::read_to_string(fixture("college_computer_science_test.csv")).unwrap() + "q,a,b,c,A\n";
    let (_dir, path) = temp_file("anatomy_test.csv", &csv);
    let fields = ChoiceProblem::NotAnItem(ItemProblem::CsvFields { found: 5 });
    assert_eq!(refusal(&path, None), ("anatomy_test.csv".into(), Some(Spot::Line(6)), fields));
    // A CSV whose name says no subject.
    let (_dir, path) = temp_file("questions.csv", "q,a,b,c,d,A\n");
    let no_subject = ChoiceProblem::NotAnItem(ItemProblem::NoSubject);
    assert_eq!(refusal(&path, None), ("questions.csv".into(), Some(Spot::Line(1)), no_subject));
    // A named format the rows do not have.
    let (_dir, path) = temp_file("piqa.jsonl", "{\"goal\": \"g\", \"sol1\": \"a\", \"sol2\": \"b\", \"label\": 0}\n");
    let no_text = ItemProblem::NoText { key: "ctx_a".into(), format: ChoiceFormat::Hellaswag };
    let refused = refusal(&path, Some(ChoiceFormat::Hellaswag));
    assert_eq!(refused, ("piqa.jsonl".into(), Some(Spot::Line(1)), ChoiceProblem::NotAnItem(no_text)));
    let refused = refusal(&fixture("college_computer_science_test.csv"), Some(ChoiceFormat::Arc));
    let csv_not_mmlu = ChoiceProblem::CsvNotMmlu(ChoiceFormat::Arc);
    assert_eq!(refused, ("college_computer_science_test.csv".into(), None, csv_not_mmlu));
    // The format's name.
    assert_eq!("HellaSwag".parse::<ChoiceFormat>().unwrap(), ChoiceFormat::Hellaswag);
    assert_mentions(
        &"gsm8k".parse::<ChoiceFormat>().unwrap_err().to_string(),
        &["gsm8k", "arc, hellaswag, piqa, mmlu"],
    );
    // An empty file.
    let (_dir, path) = temp_file("empty.jsonl", "\n");
    assert_eq!(refusal(&path, None), ("empty.jsonl".into(), None, ChoiceProblem::NoQuestion));
}
