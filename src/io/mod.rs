//! File helpers: atomic writes (a reader never sees a half-written file), checksums that tell a
//! complete file from one cut short or overwritten ([`verify_sum`]), output folders that replace
//! only what they wrote ([`write_dir_atomically`]), the mark of our charts ([`mark_chart`]), and
//! the fault points of the reliability tests ([`fault`]).

mod chart_mark;
mod checksum;
pub mod fault;
mod folder_problem;
mod output_folder;

pub use chart_mark::{is_our_chart, mark_chart};
pub use checksum::{file_crc32, sum_path, verify_sum, verify_sum_of, write_atomically_with_sum, write_sum, SumError};
pub use fault::{crash_point, fail_point, fault_injected, CRASH_AT, FAIL_AT, FAULT_INJECTION};
pub use folder_problem::{folder_path_problem, FolderProblem};
pub use output_folder::{
    check_replaceable_dir, check_replaceable_file, is_output_folder, same_folder, write_dir_atomically, CONTENTS_FILE,
    RUN_SETTINGS_FILE,
};

use std::io::Write;
use std::path::{Path, PathBuf};

/// Writes `bytes` to `path` through a temporary file in the same directory (an unpredictable
/// name, created exclusively), synced, renamed into place and the directory synced, so a crash
/// leaves either the old file or the new one.
///
/// A symbolic link is followed: the file it points to is replaced and the link stays. A path
/// that is neither a file nor a folder (`/dev/null`, `/dev/stdout`, a named pipe) is written
/// through, never replaced. A replaced file keeps its permissions; a new one gets those of any
/// new file (`0666` less the umask), not the temporary file's `0600`.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let path = &follow_links(path)?;
    let existing = std::fs::metadata(path).ok();
    if existing.as_ref().is_some_and(|meta| !meta.is_file() && !meta.is_dir()) {
        return std::fs::OpenOptions::new().write(true).open(path)?.write_all(bytes);
    }
    let mut file = temporary_sibling(path)?;
    if let Some(meta) = existing.filter(|meta| meta.is_file()) {
        file.as_file().set_permissions(meta.permissions())?;
    }
    file.write_all(bytes)?;
    file.as_file().sync_all()?;
    file.persist(path).map_err(|e| e.error)?;
    sync_parent(path)
}

/// `path`, or where its chain of symbolic links ends (which may not exist yet).
fn follow_links(path: &Path) -> std::io::Result<PathBuf> {
    let mut path = path.to_path_buf();
    for _ in 0..40 {
        match std::fs::symlink_metadata(&path) {
            Ok(meta) if meta.file_type().is_symlink() => {
                let target = std::fs::read_link(&path)?;
                path = parent_dir(&path).join(target);
            }
            _ => return Ok(path),
        }
    }
    Err(std::io::Error::other(format!("{}: too many levels of symbolic links", path.display())))
}

/// A new temporary file beside `path`, named `.<name>.tmp<pid>.<random>`: removed when dropped
/// unless persisted; a crash leaves it behind, for the run directory's clean-up to remove. Its
/// permissions are a new file's (`0666` less the umask).
fn temporary_sibling(path: &Path) -> std::io::Result<tempfile::NamedTempFile> {
    let name = path.file_name().ok_or_else(|| std::io::Error::other("path has no file name"))?;
    let dir = parent_dir(path);
    let mut builder = tempfile::Builder::new();
    #[cfg(unix)]
    builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o666));
    builder.prefix(&format!(".{}.tmp{}.", name.to_string_lossy(), std::process::id())).tempfile_in(dir).map_err(|e| {
        // tempfile's message names the temporary file, which the user never chose: name the folder.
        let why = if dir.is_dir() { e.kind().to_string() } else { "no such folder; create it first".into() };
        std::io::Error::new(e.kind(), format!("cannot write in the folder {}: {why}", dir.display()))
    })
}

/// The directory `path` is in (`.` for a bare file name).
pub(super) fn parent_dir(path: &Path) -> &Path {
    path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."))
}

/// Syncs the directory of `path`, so that a rename into it survives a power loss (Unix; a
/// no-op elsewhere).
fn sync_parent(path: &Path) -> std::io::Result<()> {
    if cfg!(unix) {
        std::fs::File::open(parent_dir(path))?.sync_all()?;
    }
    Ok(())
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn a_new_file_gets_a_new_files_permissions_and_a_replaced_one_keeps_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let (ours, plain) = (dir.path().join("new.json"), dir.path().join("plain.json"));
        write_atomically(&ours, b"{}").unwrap();
        std::fs::write(&plain, b"{}").unwrap();
        assert_eq!(mode(&ours), mode(&plain), "a new file's mode (0666 less the umask)");
        std::fs::set_permissions(&ours, std::fs::Permissions::from_mode(0o640)).unwrap();
        write_atomically(&ours, b"[1]").unwrap();
        assert_eq!((mode(&ours), std::fs::read(&ours).unwrap()), (0o640, b"[1]".to_vec()));
    }

    #[test]
    fn a_link_is_followed_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("real")).unwrap();
        let (target, link) = (dir.path().join("real/target.json"), dir.path().join("link.json"));
        std::fs::write(&target, b"old").unwrap();
        std::os::unix::fs::symlink("real/target.json", &link).unwrap();
        write_atomically(&link, b"new").unwrap();
        assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        assert_eq!(std::fs::read(&target).unwrap(), b"new");
        // A link to a file not there yet makes it.
        std::os::unix::fs::symlink("real/later.json", dir.path().join("dangling.json")).unwrap();
        write_atomically(&dir.path().join("dangling.json"), b"made").unwrap();
        assert_eq!(std::fs::read(dir.path().join("real/later.json")).unwrap(), b"made");
    }

    #[test]
    fn a_named_pipe_is_written_through_not_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let pipe = dir.path().join("pipe.json");
        let made = std::process::Command::new("mkfifo").arg(&pipe).status().unwrap();
        assert!(made.success());
        let reader = {
            let pipe = pipe.clone();
            std::thread::spawn(move || std::fs::read(pipe).unwrap())
        };
        write_atomically(&pipe, b"through").unwrap();
        assert_eq!(reader.join().unwrap(), b"through");
        assert!(!std::fs::metadata(&pipe).unwrap().is_file(), "the pipe is still a pipe");
    }
}
