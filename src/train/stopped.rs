//! What a training stopped by a signal (Ctrl-C's SIGINT, a scheduler's SIGTERM) kept, and the
//! command that goes on from it: the line `train` prints as it stops. The stop itself is as
//! abrupt as the signal's own: every file of a run is written atomically, so a run stopped at
//! any moment keeps its last complete checkpoint and resumes from it.

use std::path::Path;

use crate::io::sum_path;
use crate::run::{checkpoint_file, checkpoint_steps, has_settings, is_replacing, CHECKPOINTS, CHECKPOINT_KINDS, MODEL};

/// The line for a training into `out` stopped by `signal` (`SIGINT`, `SIGTERM`): what it kept
/// (its last complete checkpoint, its final model, or nothing) and the command that goes on.
/// Looks only at which files exist (a checkpoint counts once every file of it has its checksum
/// beside it, written last): nothing is read whole while the user waits.
pub fn stopped_note(out: &Path, signal: &str) -> String {
    let shown = out.display();
    let resume = format!("train --resume --out {}", shell_word(&out.display().to_string()));
    let checkpoints = out.join(CHECKPOINTS);
    let complete = |step: usize| {
        CHECKPOINT_KINDS.iter().all(|kind| sum_path(&checkpoint_file(&checkpoints, kind, step)).is_file())
    };
    if sum_path(&out.join(MODEL)).is_file() {
        return format!("stopped by {signal}: the run had finished; its final model is kept in {shown}");
    }
    if is_replacing(out) && checkpoint_steps(&checkpoints).is_empty() {
        return format!(
            "stopped by {signal} during --overwrite, before the new run's first checkpoint: the run it replaces is \
             kept (put back in {shown} when the folder is next used); give the --overwrite command again to replace \
             it"
        );
    }
    match checkpoint_steps(&checkpoints).into_iter().rev().find(|&step| complete(step)) {
        Some(step) => format!(
            "stopped by {signal}: kept the checkpoint of step {step} ({}); resume with: {resume}",
            checkpoints.display()
        ),
        None if has_settings(out) => format!(
            "stopped by {signal} before the first checkpoint: no trained step is kept; `{resume}` starts the run \
             again from step 0"
        ),
        None => format!("stopped by {signal} before the run started: nothing was kept; give the same command again"),
    }
}

/// `word` as one word of a POSIX shell command: as it is when it holds nothing the shell reads
/// otherwise, else in single quotes.
fn shell_word(word: &str) -> String {
    let plain = !word.is_empty() && word.bytes().all(|b| b.is_ascii_alphanumeric() || b"/._-+,:=@%".contains(&b));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes `<dir>/<name>` and its checksum.
    fn write_summed(path: &Path) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        crate::io::write_atomically_with_sum(path, b"x").unwrap();
    }

    #[test]
    fn the_note_names_the_last_complete_checkpoint_and_the_resume_command() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("my run");
        std::fs::create_dir(&out).unwrap();
        assert!(stopped_note(&out, "SIGINT").contains("before the run started: nothing was kept"));
        std::fs::write(out.join(crate::run::TRAIN_CONFIG), "{}").unwrap();
        let note = stopped_note(&out, "SIGTERM");
        assert!(
            note.starts_with("stopped by SIGTERM before the first checkpoint") && note.contains("step 0"),
            "{note}"
        );
        let checkpoints = out.join(CHECKPOINTS);
        for kind in CHECKPOINT_KINDS {
            write_summed(&checkpoint_file(&checkpoints, kind, 20));
        }
        // Step 40's checkpoint is still being written: only its model has its checksum.
        write_summed(&checkpoint_file(&checkpoints, "model", 40));
        std::fs::write(checkpoint_file(&checkpoints, "optim", 40), "x").unwrap();
        let note = stopped_note(&out, "SIGINT");
        assert!(note.contains("the checkpoint of step 20"), "{note}");
        let quoted = format!("train --resume --out '{}'", out.display());
        assert!(note.ends_with(&quoted), "{note}");
        write_summed(&out.join(MODEL));
        assert!(stopped_note(&out, "SIGINT").contains("final model is kept"));
    }

    #[test]
    fn a_stopped_overwrite_says_the_replaced_run_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join(crate::run::PREVIOUS_RUN)).unwrap();
        std::fs::write(dir.path().join(crate::run::TRAIN_CONFIG), "{}").unwrap();
        let note = stopped_note(dir.path(), "SIGINT");
        assert!(note.contains("the run it replaces is kept") && !note.contains("--resume"), "{note}");
    }

    #[test]
    fn a_path_the_shell_would_split_is_quoted() {
        assert_eq!(shell_word("runs/lns-1"), "runs/lns-1");
        assert_eq!(shell_word("a b"), "'a b'");
        assert_eq!(shell_word("it's"), r"'it'\''s'");
    }
}
