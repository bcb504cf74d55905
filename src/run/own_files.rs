//! Which files in a run directory are the run's own, by name: the temporary files of its
//! interrupted writes, its TensorBoard event files, and what in its folders is not its own
//! (a user's files there, which `--overwrite` must not delete).

use std::path::Path;

use super::{is_checkpoint_file_name, ANALYSIS, CHECKPOINTS, REPORT, TENSORBOARD};

/// Whether `name` is that of an event file this crate writes, or of one it was writing when it
/// was killed: `events.out.tfevents.<seconds>.<host>.<pid>.<n>`, `.partial-<seconds>-<pid>-<n>`.
/// Other files (a user's, another program's writer's) are never the crate's to remove.
pub fn is_own_event_file(name: &str) -> bool {
    if let Some(rest) = name.strip_prefix("events.out.tfevents.") {
        let parts: Vec<&str> = rest.split('.').collect();
        return parts.len() == 4 && [parts[0], parts[2], parts[3]].into_iter().all(is_number) && !parts[1].is_empty();
    }
    name.strip_prefix(".partial-").is_some_and(|rest| rest.split('-').all(is_number))
}

/// Whether `part` is a number of one or more decimal digits.
fn is_number(part: &str) -> bool {
    !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit())
}

/// A temporary file of a write a crash may have cut short: `.<name>.tmp<pid>.<random>` from
/// [`crate::io::write_atomically`], and burn-pack's scratch files of the checkpoints and the
/// model, `<name>.bpk.<pid>-<n>.tmp`.
pub(crate) fn is_temporary_name(name: &str) -> bool {
    let ours = name.starts_with('.')
        && name.match_indices(".tmp").any(|(at, _)| name[at + 4..].starts_with(|c: char| c.is_ascii_digit()));
    let burn_pack = name
        .strip_suffix(".tmp")
        .and_then(|rest| rest.rsplit_once(".bpk."))
        .is_some_and(|(_, id)| id.split_once('-').is_some_and(|(pid, n)| is_number(pid) && is_number(n)));
    ours || burn_pack
}

/// The files in `dir`'s run folders that are not the run's, which `--overwrite` would delete
/// with them: in `checkpoint/` any file not named as a checkpoint's, in `tensorboard/` any file
/// not named as the crate's event files, in `analysis/` any file its report did not write (or
/// changed since). Paths relative to `dir`.
pub fn foreign_files_in_run_folders(dir: &Path) -> Vec<String> {
    let not_own = |folder: &str, own: fn(&str) -> bool| -> Vec<String> {
        let names = std::fs::read_dir(dir.join(folder)).into_iter().flatten().flatten();
        let names = names.map(|entry| entry.file_name().to_string_lossy().into_owned());
        names.filter(|name| !own(name)).map(|name| format!("{folder}/{name}")).collect()
    };
    let mut foreign = not_own(CHECKPOINTS, |name| is_checkpoint_file_name(name) || is_temporary_name(name));
    foreign.extend(not_own(TENSORBOARD, is_own_event_file));
    if let Err(e) = crate::io::check_replaceable_dir(&dir.join(ANALYSIS), REPORT) {
        foreign.push(format!("{ANALYSIS}/ ({e})"));
    }
    foreign.sort();
    foreign
}
