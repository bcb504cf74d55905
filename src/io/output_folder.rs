//! Output folders: a folder of results is written whole or not at all, and replaces only an
//! earlier output of the same kind, never a folder or a file of the user's (its `.contents` list
//! says what it wrote).

use std::path::{Path, PathBuf};

use super::file_crc32;

/// The file in a directory [`write_dir_atomically`] wrote that lists what it wrote there, one
/// entry a line: `<crc32, 8 hex digits> <bytes> <path>` for a file, `folder <path>` for a folder
/// (paths relative, `/`-separated). What a later output may replace: a file counts as ours only
/// while its content matches its line, so a name added to the list by hand, or a file of ours
/// edited since, is kept.
pub const CONTENTS_FILE: &str = ".contents";

/// The file that makes a folder a run directory: every setting of its training
/// ([`crate::run::TRAIN_CONFIG`]). Named in this leaf module so that what lists folders of input
/// (a corpus) can tell this crate's output apart without depending on the run directory's module.
pub const RUN_SETTINGS_FILE: &str = "train.json";

/// Whether `dir` is output of this crate: a run directory ([`RUN_SETTINGS_FILE`]) or a folder
/// [`write_dir_atomically`] wrote ([`CONTENTS_FILE`]).
pub fn is_output_folder(dir: &Path) -> bool {
    dir.join(RUN_SETTINGS_FILE).is_file() || dir.join(CONTENTS_FILE).is_file()
}

/// The [`CONTENTS_FILE`] line of each of `paths` (relative to `dir`).
fn contents_lines(dir: &Path, paths: &[String]) -> std::io::Result<Vec<String>> {
    paths
        .iter()
        .map(|path| {
            let full = dir.join(path);
            if full.symlink_metadata()?.is_dir() {
                return Ok(format!("folder {path}"));
            }
            let (crc, len) = file_crc32(&full)?;
            Ok(format!("{crc:08x} {len} {path}"))
        })
        .collect()
}

/// Every file and directory below `dir` (symbolic links not followed), as sorted relative
/// `/`-separated paths.
fn relative_paths(dir: &Path) -> std::io::Result<Vec<String>> {
    let mut paths = Vec::new();
    let mut pending = vec![(dir.to_path_buf(), String::new())];
    while let Some((folder, prefix)) = pending.pop() {
        for entry in std::fs::read_dir(&folder)? {
            let entry = entry?;
            let path = format!("{prefix}{}", entry.file_name().to_string_lossy());
            if entry.file_type()?.is_dir() {
                pending.push((entry.path(), format!("{path}/")));
            }
            paths.push(path);
        }
    }
    paths.sort();
    Ok(paths)
}

/// Fills a temporary sibling of `dir` with `fill`, then swaps it in for `dir`: `dir` never holds
/// half of its new contents, and on an error the old contents (if any) stay.
///
/// An existing `dir` is replaced only when every file in it is provably an earlier output's: it
/// is empty, or it holds the file `marker` (an earlier output of the same kind, e.g.
/// `report.json`) and nothing but what its [`CONTENTS_FILE`] lists. Otherwise it is refused,
/// naming the files that are not provably ours (all of them when it has no such list: an output
/// copied without it, written by version 0.1, or a folder of the user's whose files merely have
/// our names): a mistyped output path never deletes a run, a model or a working directory, nor a
/// file put beside an earlier report. The old directory is renamed aside before the new one is
/// renamed in, and put back if that fails.
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
    remove_stale_siblings(parent, &name);
    std::fs::create_dir_all(&tmp)?;
    let result = fill(&tmp).and_then(|()| {
        let written = relative_paths(&tmp)?;
        give_new_file_permissions(&tmp, &written)?;
        std::fs::write(tmp.join(CONTENTS_FILE), contents_lines(&tmp, &written)?.join("\n") + "\n")?;
        if existing {
            // Again: files may have been added while `fill` ran.
            check_replaceable_dir(&dir, marker)?;
        }
        if !existing {
            return std::fs::rename(&tmp, &dir).map_err(|error| match dir.exists() {
                // Another command (a second one given the same output) renamed its output in first.
                true => std::io::Error::new(
                    std::io::ErrorKind::AlreadyExists,
                    format!(
                        "{} was written by another command while this one ran (it did not exist when this one \
                         started); nothing of this one was written: run it again to replace that output, or give \
                         another output path",
                        dir.display()
                    ),
                ),
                false => error,
            });
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

/// Gives each regular file of `paths` (relative to `dir`) a new file's permissions (`0666` less
/// the umask): a writer that went through a temporary file of its own (safetensors) leaves
/// `0600`, which other users of the machine cannot read.
fn give_new_file_permissions(dir: &Path, paths: &[String]) -> std::io::Result<()> {
    let probe = dir.join(".permissions-probe");
    std::fs::File::create(&probe)?;
    let permissions = std::fs::metadata(&probe)?.permissions();
    std::fs::remove_file(&probe)?;
    for path in paths.iter().map(|p| dir.join(p)) {
        if std::fs::symlink_metadata(&path)?.is_file() {
            std::fs::set_permissions(&path, permissions.clone())?;
        }
    }
    Ok(())
}

/// Removes the half-written `.name.tmp<PID>` siblings that killed writers of `parent/name` left
/// (of processes that no longer run, and this one's). Where processes cannot be listed (no
/// `/proc`), only this process's own is removed. (A `.name.old<PID>` may hold the only copy of
/// the old contents: it stays.)
fn remove_stale_siblings(parent: &Path, name: &str) {
    let Ok(entries) = std::fs::read_dir(parent) else { return };
    let can_list = Path::new("/proc/self").exists();
    for entry in entries.flatten() {
        let file_name = entry.file_name().to_string_lossy().into_owned();
        let pid = file_name.strip_prefix(&format!(".{name}.tmp"));
        let Some(pid) = pid.filter(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit())) else {
            continue;
        };
        let ours = pid == std::process::id().to_string();
        if ours || (can_list && !Path::new("/proc").join(pid).exists()) {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// An error unless `path` is absent or a file that `is_ours` recognises as an earlier output of the
/// same kind (`what`: "a PNG figure"), which a new one may replace. Check it before long work: a
/// single-file output (`--plot`, `--json`) must never replace a model, a corpus or notes that the
/// user named by mistake. Files of 64 MiB or more are never taken for ours.
pub fn check_replaceable_file(path: &Path, what: &str, is_ours: impl Fn(&[u8]) -> bool) -> std::io::Result<()> {
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    let refuse = |why: &str| {
        Err(std::io::Error::other(format!(
            "{} {why}, which writing {what} there would replace; choose another path, or move it away",
            path.display()
        )))
    };
    if !meta.is_file() {
        return refuse("exists and is not a file");
    }
    if let Some(output) = output_listing(path) {
        return refuse(&format!(
            "is part of the output in {} (listed in its {CONTENTS_FILE}; replacing it would make that output refuse \
             to be written again)",
            output.display()
        ));
    }
    let ours = meta.len() < 64 << 20 && std::fs::read(path).is_ok_and(|bytes| is_ours(&bytes));
    if ours {
        return Ok(());
    }
    refuse(&format!("exists and is not {what}"))
}

/// The output folder ([`write_dir_atomically`]'s) whose [`CONTENTS_FILE`] lists the file at
/// `path`, if one of its folders is one: a report's chart, a sweep's results.
fn output_listing(path: &Path) -> Option<PathBuf> {
    let path = path.canonicalize().ok()?;
    path.ancestors().skip(1).find_map(|dir| {
        let relative = path.strip_prefix(dir).ok()?.to_str()?.replace(std::path::MAIN_SEPARATOR, "/");
        let listed = std::fs::read_to_string(dir.join(CONTENTS_FILE)).ok()?;
        let suffix = format!(" {relative}");
        listed.lines().any(|line| line.ends_with(&suffix)).then(|| dir.to_path_buf())
    })
}

/// An error unless `dir` is absent, empty, or an earlier output that [`write_dir_atomically`]
/// may replace (it holds `marker`, and its [`CONTENTS_FILE`] lists every other file in it): check
/// it before long work. The error names the files that are not provably ours.
pub fn check_replaceable_dir(dir: &Path, marker: &str) -> std::io::Result<()> {
    if !dir.exists() {
        return Ok(());
    }
    if !dir.is_dir() {
        return Err(std::io::Error::other(format!("{} exists and is not a directory", dir.display())));
    }
    let present = relative_paths(dir)?;
    if present.is_empty() {
        return Ok(());
    }
    if !dir.join(marker).is_file() {
        return Err(std::io::Error::other(format!(
            "{} is not empty and holds no {marker}, so it is not an earlier output that may be replaced; \
             choose a new output directory",
            dir.display()
        )));
    }
    let (listed, how) = match std::fs::read_to_string(dir.join(CONTENTS_FILE)) {
        Ok(listed) => (
            listed.lines().map(str::to_string).collect::<std::collections::HashSet<_>>(),
            "what it did not write, or changed since",
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => (
            std::collections::HashSet::new(),
            "no list of what it wrote (.contents: an output copied without it, or written by version 0.1), so none \
             of its files is provably an earlier output's",
        ),
        Err(e) => return Err(std::io::Error::other(format!("{}: {e}", dir.join(CONTENTS_FILE).display()))),
    };
    // A file is ours while its line, made now, is one of the list's.
    let foreign: Vec<&String> = present
        .iter()
        .filter(|p| *p != CONTENTS_FILE)
        .filter(|p| !contents_lines(dir, std::slice::from_ref(*p)).is_ok_and(|line| listed.contains(&line[0])))
        .collect();
    if foreign.is_empty() {
        return Ok(());
    }
    let shown = foreign.iter().take(3).map(|p| p.as_str()).collect::<Vec<_>>().join(", ");
    let more = if foreign.len() > 3 { format!(" and {} more", foreign.len() - 3) } else { String::new() };
    Err(std::io::Error::other(format!(
        "{} holds an earlier output, but also {how} ({shown}{more}), which replacing it would delete; move \
         that out, or choose a new output directory",
        dir.display()
    )))
}

/// Whether `a` and `b` name the same folder, however spelt (`runs/x`, `./runs/x/`, absolute).
pub fn same_folder(a: &Path, b: &Path) -> bool {
    let parts = |path: &Path| -> Vec<std::ffi::OsString> {
        let kept = path.components().filter(|part| *part != std::path::Component::CurDir);
        kept.map(|part| part.as_os_str().to_os_string()).collect()
    };
    parts(a) == parts(b) || matches!((a.canonicalize(), b.canonicalize()), (Ok(a), Ok(b)) if a == b)
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn an_earlier_output_is_replaced_but_not_what_was_put_beside_it() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("report");
        let write = |text: &str| {
            write_dir_atomically(&dir, "report.json", |tmp| {
                std::fs::create_dir(tmp.join("figures"))?;
                std::fs::write(tmp.join("figures/a.png"), text)?;
                std::fs::write(tmp.join("report.json"), text)
            })
        };
        write("one").unwrap();
        write("two").unwrap();
        assert_eq!(std::fs::read_to_string(dir.join("figures/a.png")).unwrap(), "two");
        std::fs::write(dir.join("figures/notes.txt"), "mine").unwrap();
        let error = write("three").unwrap_err().to_string();
        assert!(error.contains("figures/notes.txt") && error.contains("move that out"), "{error}");
        assert_eq!(std::fs::read_to_string(dir.join("figures/notes.txt")).unwrap(), "mine");
        assert_eq!(std::fs::read_to_string(dir.join("report.json")).unwrap(), "two", "the old output stays");
        // A name added to the list by hand is no proof (its content is not what was written),
        // nor is a file of the output edited since.
        let contents = std::fs::read_to_string(dir.join(CONTENTS_FILE)).unwrap();
        std::fs::write(dir.join(CONTENTS_FILE), format!("{contents}figures/notes.txt\n")).unwrap();
        let error = write("three").unwrap_err().to_string();
        assert!(error.contains("figures/notes.txt"), "{error}");
        std::fs::remove_file(dir.join("figures/notes.txt")).unwrap();
        std::fs::write(dir.join("figures/a.png"), "my edit").unwrap();
        let error = write("three").unwrap_err().to_string();
        assert!(error.contains("figures/a.png") && error.contains("changed since"), "{error}");
        assert_eq!(std::fs::read_to_string(dir.join("figures/a.png")).unwrap(), "my edit");
        std::fs::write(dir.join("figures/a.png"), "two").unwrap();
        std::fs::write(dir.join("figures/notes.txt"), "mine").unwrap();
        // An output written without the list (copied with `cp -r report/*`, or by 0.1.0) holds no
        // file that is provably ours, even when every name is one the output writes: refused
        // before any work, naming them.
        std::fs::remove_file(dir.join(CONTENTS_FILE)).unwrap();
        let error = check_replaceable_dir(&dir, "report.json").unwrap_err().to_string();
        assert!(error.contains("figures/notes.txt") && error.contains(".contents"), "{error}");
        std::fs::remove_file(dir.join("figures/notes.txt")).unwrap();
        let error = write("four").unwrap_err().to_string();
        assert!(error.contains("figures/a.png") && error.contains("report.json"), "{error}");
        assert_eq!(std::fs::read_to_string(dir.join("report.json")).unwrap(), "two");
    }

    #[test]
    fn every_file_of_an_output_gets_a_new_files_permissions() {
        let root = tempfile::tempdir().unwrap();
        let (dir, plain) = (root.path().join("out"), root.path().join("plain"));
        std::fs::write(&plain, "").unwrap();
        write_dir_atomically(&dir, "a.json", |tmp| {
            std::fs::write(tmp.join("a.json"), "{}")?;
            // As a writer through a temporary file of its own leaves it.
            std::fs::write(tmp.join("model.safetensors"), "weights")?;
            std::fs::set_permissions(tmp.join("model.safetensors"), std::fs::Permissions::from_mode(0o600))
        })
        .unwrap();
        assert_eq!(mode(&dir.join("model.safetensors")), mode(&plain));
        assert_eq!(mode(&dir.join("a.json")), mode(&plain));
    }

    #[test]
    fn a_folder_of_the_users_holding_a_file_named_like_the_marker_is_not_replaced() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("myproj");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("report.json"), "my own").unwrap();
        std::fs::write(dir.join("thesis.tex"), "years of work").unwrap();
        let error = write_dir_atomically(&dir, "report.json", |tmp| std::fs::write(tmp.join("report.json"), "new"))
            .unwrap_err()
            .to_string();
        assert!(error.contains("thesis.tex"), "{error}");
        assert_eq!(std::fs::read_to_string(dir.join("thesis.tex")).unwrap(), "years of work");
        assert_eq!(std::fs::read_to_string(dir.join("report.json")).unwrap(), "my own");
        assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 1, "no temporary folder is left");
    }

    #[test]
    fn a_file_of_an_output_folder_is_not_replaced_on_its_own() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("report");
        write_dir_atomically(&dir, "report.json", |tmp| {
            std::fs::write(tmp.join("report.json"), "{}")?;
            std::fs::create_dir(tmp.join("sub"))?;
            std::fs::write(tmp.join("sub/chart.png"), "ours")
        })
        .unwrap();
        // `curse --plot report/sub/chart.png` replaced it, and the report then refused to be
        // written again ("changed since").
        let error = check_replaceable_file(&dir.join("sub/chart.png"), "a chart", |_| true).unwrap_err().to_string();
        assert!(error.contains("is part of the output in"), "{error}");
        std::fs::write(root.path().join("loose.png"), "ours").unwrap();
        assert!(check_replaceable_file(&root.path().join("loose.png"), "a chart", |_| true).is_ok());
    }

    #[test]
    fn an_output_another_command_wrote_first_is_named_as_such() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("out");
        let error = write_dir_atomically(&dir, "report.json", |tmp| {
            // The other command's output lands while this one runs.
            std::fs::create_dir(&dir)?;
            std::fs::write(dir.join("report.json"), "theirs")?;
            std::fs::write(tmp.join("report.json"), "ours")
        })
        .unwrap_err()
        .to_string();
        assert!(error.contains("written by another command while this one ran"), "{error}");
        assert_eq!(std::fs::read_to_string(dir.join("report.json")).unwrap(), "theirs");
        assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 1, "no temporary folder is left");
    }
}
