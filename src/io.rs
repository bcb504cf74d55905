//! File and process helpers: atomic writes (a reader never sees a half-written file), checksums
//! that tell a complete file from one cut short or overwritten, and the exit of command-line programs.

use std::io::{Read, Write};
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
fn parent_dir(path: &Path) -> &Path {
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

/// The CRC-32 and length of a file's content, read in chunks (never the whole file in memory).
pub fn file_crc32(path: &Path) -> std::io::Result<(u32, u64)> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = crc32fast::Hasher::new();
    let mut buffer = vec![0u8; 1 << 20];
    let mut len = 0u64;
    loop {
        let n = match file.read(&mut buffer) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            read => read?,
        };
        if n == 0 {
            return Ok((hasher.finalize(), len));
        }
        hasher.update(&buffer[..n]);
        len += n as u64;
    }
}

/// [`write_atomically`], with the checksum ([`write_sum`]) beside it. The old checksum goes
/// first, so that a kill at any moment leaves the file with its own checksum or with none
/// (which [`verify_sum`] reports as [`SumError::NoSum`]), never beside another's.
pub fn write_atomically_with_sum(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    match std::fs::remove_file(sum_path(path)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    write_atomically(path, bytes)?;
    write_sum(path)
}

/// The checksum file written beside `path`: `<path>.sum`.
pub fn sum_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".sum");
    PathBuf::from(name)
}

/// Writes `<path>.sum` (atomically) with the CRC-32 and length of `path`: call it once `path` is
/// complete, so that [`verify_sum`] tells a complete file from one cut short or overwritten.
pub fn write_sum(path: &Path) -> std::io::Result<()> {
    let (crc32, bytes) = file_crc32(path)?;
    write_atomically(&sum_path(path), format!("crc32 {crc32:08x} bytes {bytes}\n").as_bytes())
}

/// Why a file failed [`verify_sum`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SumError {
    /// The file does not exist.
    Missing,
    /// The file exists but its `.sum` does not: its writing never finished.
    NoSum,
    /// The content does not match the `.sum`: cut short, overwritten or corrupt.
    Mismatch(String),
}

impl std::fmt::Display for SumError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Missing => write!(f, "the file is missing"),
            Self::NoSum => write!(f, "its writing never finished (no .sum beside it)"),
            Self::Mismatch(what) => write!(f, "it is corrupt or cut short ({what})"),
        }
    }
}

/// Checks `bytes`, read whole from `path`, against the `<path>.sum` that [`write_sum`] wrote:
/// what is then used is exactly what was checked, even if the file is replaced meanwhile.
pub fn verify_sum_of(path: &Path, bytes: &[u8]) -> Result<(), SumError> {
    let expected = std::fs::read_to_string(sum_path(path)).map_err(|_| SumError::NoSum)?;
    let actual = format!("crc32 {:08x} bytes {}", crc32fast::hash(bytes), bytes.len());
    if expected.trim() == actual {
        Ok(())
    } else {
        Err(SumError::Mismatch(format!("{actual}, expected {}", expected.trim())))
    }
}

/// Checks `path` against the `<path>.sum` that [`write_sum`] wrote.
pub fn verify_sum(path: &Path) -> Result<(), SumError> {
    if !path.is_file() {
        return Err(SumError::Missing);
    }
    let expected = std::fs::read_to_string(sum_path(path)).map_err(|_| SumError::NoSum)?;
    let (crc32, bytes) = file_crc32(path).map_err(|e| SumError::Mismatch(format!("cannot read it: {e}")))?;
    let actual = format!("crc32 {crc32:08x} bytes {bytes}");
    if expected.trim() == actual {
        Ok(())
    } else {
        Err(SumError::Mismatch(format!("{actual}, expected {}", expected.trim())))
    }
}

/// The environment variable that names a [`crash_point`] to die at.
pub const CRASH_AT: &str = "LAYERNORM_SCALING_CRASH_AT";

/// A place where the crash-safety tests kill the process: when the environment variable
/// [`CRASH_AT`] names `point`, the process says so on stderr and aborts there (no clean-up runs,
/// as under `kill -9`).
pub fn crash_point(point: &str) {
    if std::env::var_os(CRASH_AT).is_some_and(|at| at == point) {
        eprintln!("{CRASH_AT}={point}: aborting here");
        std::process::abort();
    }
}

/// The environment variable that names a [`fail_point`], where a write fails as on a full disk.
pub const FAIL_AT: &str = "LAYERNORM_SCALING_FAIL_AT";

/// A write that the reliability tests make fail: an error as from a full disk when the
/// environment variable [`FAIL_AT`] names `point`.
pub fn fail_point(point: &str) -> std::io::Result<()> {
    if !fault_injected(point) {
        return Ok(());
    }
    Err(std::io::Error::new(std::io::ErrorKind::StorageFull, format!("no space left on device ({FAIL_AT}={point})")))
}

/// Whether the reliability tests inject a fault at `point`: the environment variable
/// [`FAIL_AT`] names it.
pub fn fault_injected(point: &str) -> bool {
    std::env::var_os(FAIL_AT).is_some_and(|at| at == point)
}

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

/// The PNG text chunk's content that marks the charts this crate draws (`Software`, then the
/// crate's name): a chart of ours may be replaced by a new one, any other image may not.
const CHART_MARK: &[u8] = b"Software\0layernorm-scaling";

/// `png` (a whole PNG file) with the text chunk that marks our charts added before its end.
pub fn mark_chart(mut png: Vec<u8>) -> std::io::Result<Vec<u8>> {
    // The last chunk is IEND: 4 bytes of length (0), "IEND", 4 bytes of CRC.
    if png.len() < 20 || &png[png.len() - 8..png.len() - 4] != b"IEND" {
        return Err(std::io::Error::other("not a PNG file that ends with IEND"));
    }
    let mut chunk = (CHART_MARK.len() as u32).to_be_bytes().to_vec();
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(b"tEXt");
    hasher.update(CHART_MARK);
    chunk.extend_from_slice(b"tEXt");
    chunk.extend_from_slice(CHART_MARK);
    chunk.extend_from_slice(&hasher.finalize().to_be_bytes());
    let end = png.len() - 12;
    png.splice(end..end, chunk);
    Ok(png)
}

/// Whether `bytes` are a PNG chart this crate drew ([`mark_chart`]).
pub fn is_our_chart(bytes: &[u8]) -> bool {
    let mark = [b"tEXt".as_slice(), CHART_MARK].concat();
    bytes.starts_with(b"\x89PNG\r\n\x1a\n") && bytes.windows(mark.len()).any(|window| window == mark)
}

/// Why no folder can be at `path` or be made there, or `None` where one can: a symbolic link on
/// the way that leads nowhere (to a missing target, or round a loop), or a file on the way
/// (`path` itself included).
pub fn folder_path_problem(path: &Path) -> Option<String> {
    let on_the_way = || path.ancestors().filter(|a| !a.as_os_str().is_empty());
    for link in on_the_way().filter(|a| a.symlink_metadata().is_ok()) {
        if let Err(e) = std::fs::metadata(link) {
            return Some(format!("{} is a symbolic link that leads to no folder ({e})", link.display()));
        }
    }
    let existing = on_the_way().find(|a| a.exists())?;
    (!existing.is_dir()).then(|| format!("{} is a file, not a folder", existing.display()))
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
