//! File and process helpers: atomic writes (a reader never sees a half-written file) and the exit
//! of command-line programs.

use std::io::Write;
use std::path::Path;

/// Writes `bytes` to `path` through a temporary file in the same directory, synced and renamed
/// into place, so a crash leaves either the old file or the new one.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().ok_or_else(|| std::io::Error::other("path has no file name"))?;
    let tmp = dir.join(format!(".{}.tmp{}", name.to_string_lossy(), std::process::id()));
    let result = (|| {
        let mut file = std::fs::File::create(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// The exit of a command-line program: success, or the error printed as `error: ...` on stderr
/// with a non-zero status (never a panic trace).
pub fn exit_code<E: std::fmt::Display>(result: Result<(), E>) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// Fills a temporary sibling of `dir` with `fill`, then swaps it in for `dir`: `dir` never holds
/// half of its new contents, and on an error the old contents (if any) stay.
///
/// An existing `dir` is replaced only when it is empty or holds the file `marker` (an earlier
/// output of the same kind, e.g. `report.json`): a mistyped output path never deletes a run, a
/// model or a working directory. The old directory is renamed aside before the new one is renamed
/// in, and put back if that fails.
pub fn write_dir_atomically(
    dir: &Path,
    marker: &str,
    fill: impl FnOnce(&Path) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let existing = dir.exists();
    // `.`, `..` and paths ending in them have no file name of their own: resolve them first.
    let dir = if existing { dir.canonicalize()? } else { dir.to_path_buf() };
    if existing {
        check_replaceable_dir(&dir, marker)?;
    }
    let parent = dir.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .ok_or_else(|| std::io::Error::other(format!("{} cannot be an output directory", dir.display())))?;
    std::fs::create_dir_all(parent)?;
    let tmp = parent.join(format!(".{name}.tmp{}", std::process::id()));
    let old = parent.join(format!(".{name}.old{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp)?;
    let result = fill(&tmp).and_then(|()| {
        if !existing {
            return std::fs::rename(&tmp, &dir);
        }
        std::fs::rename(&dir, &old)?;
        std::fs::rename(&tmp, &dir).inspect_err(|_| {
            let _ = std::fs::rename(&old, &dir);
        })?;
        let _ = std::fs::remove_dir_all(&old);
        Ok(())
    });
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    result
}

/// An error unless `dir` is absent, or a directory that is empty or holds `marker`: whether
/// [`write_dir_atomically`] may write there (check it before long work).
pub fn check_replaceable_dir(dir: &Path, marker: &str) -> std::io::Result<()> {
    if !dir.exists() {
        return Ok(());
    }
    if !dir.is_dir() {
        return Err(std::io::Error::other(format!("{} exists and is not a directory", dir.display())));
    }
    let empty = std::fs::read_dir(dir)?.next().is_none();
    if empty || dir.join(marker).is_file() {
        return Ok(());
    }
    Err(std::io::Error::other(format!(
        "{} is not empty and holds no {marker}, so it is not an earlier output that may be replaced; \
         choose a new output directory",
        dir.display()
    )))
}
