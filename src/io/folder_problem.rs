//! Why no folder can be at a path ([`folder_path_problem`]): what is in the way, as data.

use std::path::{Path, PathBuf};

/// What stands where a folder should be, or on the way to it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FolderProblem {
    /// A symbolic link on the way that leads nowhere: to a missing target, or round a loop.
    #[error("{} is a symbolic link that leads to no folder ({error})", .link.display())]
    DanglingLink {
        /// The link.
        link: PathBuf,
        /// The system's error following it ("No such file or directory", "Too many levels of
        /// symbolic links").
        error: String,
    },
    /// A file on the way, or at the path itself.
    #[error("{} is a file, not a folder", .file.display())]
    File {
        /// The file.
        file: PathBuf,
    },
}

/// Why no folder can be at `path` or be made there, or `None` where one can: a symbolic link on
/// the way that leads nowhere (to a missing target, or round a loop), or a file on the way
/// (`path` itself included).
pub fn folder_path_problem(path: &Path) -> Option<FolderProblem> {
    let on_the_way = || path.ancestors().filter(|a| !a.as_os_str().is_empty());
    for link in on_the_way().filter(|a| a.symlink_metadata().is_ok()) {
        if let Err(e) = std::fs::metadata(link) {
            return Some(FolderProblem::DanglingLink { link: link.to_path_buf(), error: e.to_string() });
        }
    }
    let existing = on_the_way().find(|a| a.exists())?;
    (!existing.is_dir()).then(|| FolderProblem::File { file: existing.to_path_buf() })
}
