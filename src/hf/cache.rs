//! Models already on disk by name: `org/name` (or `org/name@revision`) is resolved in the local
//! Hugging Face cache, offline, through hf-hub's `Cache` (the `models--org--name/` folder, its
//! `refs/<revision>` and `snapshots/<commit>/`). Nothing is downloaded.
//!
//! The cache is `HF_HUB_CACHE` when set, else `HF_HOME/hub`, else `~/.cache/huggingface/hub`, as
//! `huggingface-cli` and transformers place it.

use std::path::{Path, PathBuf};

use hf_hub::{Cache, Repo, RepoType};

use super::HfError;

/// The local Hugging Face hub cache this machine's tools use; `None` without `HF_HUB_CACHE`,
/// `HF_HOME` or a home folder.
pub fn hub_cache() -> Option<Cache> {
    if let Some(dir) = std::env::var_os("HF_HUB_CACHE").filter(|dir| !dir.is_empty()) {
        return Some(Cache::new(dir.into()));
    }
    // hf-hub reads HF_HOME, and falls back on the home folder (which it requires).
    (std::env::var_os("HF_HOME").is_some() || std::env::home_dir().is_some()).then(Cache::from_env)
}

/// A model repository name and revision (`org/name`, `org/name@revision`), or `None` when `spec`
/// does not look like one (a path of several folders, an absolute or a relative `./` path).
pub fn repo_name(spec: &str) -> Option<(&str, Option<&str>)> {
    let (name, revision) = match spec.split_once('@') {
        Some((name, revision)) => (name, Some(revision)),
        None => (spec, None),
    };
    let (org, model) = name.split_once('/')?;
    let part = |s: &str| {
        !s.is_empty() && !s.starts_with('.') && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    };
    (part(org) && part(model) && revision.is_none_or(|r| !r.is_empty())).then_some((name, revision))
}

/// The folder `spec` names: itself when it exists on disk (a local folder wins over a cached
/// model of the same name), else the snapshot of the model `org/name[@revision]` in the local
/// Hugging Face cache ([`hub_cache`]), else `spec` unchanged (not a name: the caller's error
/// says the folder does not exist). A name with no snapshot in the cache is an error saying
/// where it looked and how to download it.
pub fn resolve_model_dir(spec: &Path) -> Result<PathBuf, HfError> {
    resolve_model_dir_in(spec, hub_cache())
}

/// [`resolve_model_dir`] in the given hub cache (`None`: there is none to look in).
pub fn resolve_model_dir_in(spec: &Path, cache: Option<Cache>) -> Result<PathBuf, HfError> {
    if let Some(name) = spec.to_str().filter(|_| !spec.exists()).and_then(|s| s.strip_suffix('@')) {
        return Err(HfError::File {
            path: spec.display().to_string(),
            message: format!("no revision after `@`: give {name}@BRANCH, {name}@TAG or {name}@COMMIT, or {name} alone"),
        });
    }
    let Some((name, revision)) = spec.to_str().filter(|_| !spec.exists()).and_then(repo_name) else {
        return Ok(spec.to_path_buf());
    };
    let not_found = |looked: String| HfError::File {
        path: spec.display().to_string(),
        message: format!(
            "no such folder, and no snapshot of the model {name}{} in the local Hugging Face cache ({looked}); \
             download it first (`huggingface-cli download {name}{}`), or give the model's folder: nothing is \
             downloaded here",
            revision.map(|r| format!(" at revision {r}")).unwrap_or_default(),
            revision.map(|r| format!(" --revision {r}")).unwrap_or_default(),
        ),
    };
    let Some(cache) = cache else {
        return Err(not_found("no HF_HUB_CACHE, HF_HOME or home folder to find it in".into()));
    };
    let repo = match revision {
        Some(revision) => Repo::with_revision(name.to_string(), RepoType::Model, revision.to_string()),
        None => Repo::model(name.to_string()),
    };
    if !cache.path().is_dir() {
        return Err(not_found(format!("the cache {} is not a folder", cache.path().display())));
    }
    let folder = cache.path().join(repo.folder_name());
    let snapshot = |commit: &str| folder.join("snapshots").join(commit);
    let is_commit = |text: &str| text.len() == 40 && text.chars().all(|c| c.is_ascii_hexdigit());
    // A revision names a file under `refs/`: one that leaves it (`../x`) names nothing.
    if let Some(revision) = revision {
        if revision.split('/').any(|part| part.is_empty() || part == "." || part == "..") || revision.contains('\\') {
            return Err(HfError::file(
                spec,
                format!("`{revision}` is not a revision: give a branch, a tag or a commit hash after `@`"),
            ));
        }
    }
    // A commit hash names its snapshot itself; a branch or tag goes through `refs/`, which must
    // hold a commit hash (a ref written by hand may end with a newline). A ref holding a path is
    // refused: it would lead out of the cache.
    let commit = revision.filter(|r| is_commit(r));
    let by_commit = commit.map(|commit| snapshot(commit).join("config.json")).filter(|config| config.is_file());
    let ref_file = folder.join("refs").join(revision.unwrap_or("main"));
    let named = std::fs::read_to_string(&ref_file).ok().map(|commit| commit.trim().to_string());
    if let Some(named) = named.as_deref().filter(|named| by_commit.is_none() && !is_commit(named)) {
        return Err(not_found(format!(
            "{} holds `{}`, which is not a commit hash (40 hex digits)",
            ref_file.display(),
            named.chars().take(80).collect::<String>()
        )));
    }
    let by_ref = named.as_deref().map(|commit| snapshot(commit).join("config.json")).filter(|c| c.is_file());
    match by_commit.or(by_ref).and_then(|config| config.parent().map(Path::to_path_buf)) {
        Some(dir) => Ok(dir),
        None if !folder.is_dir() => Err(not_found(format!("{} does not exist", folder.display()))),
        None => Err(not_found(match named {
            Some(commit) => format!(
                "{} names commit `{commit}`, whose snapshot {} holds no config.json",
                ref_file.display(),
                snapshot(&commit).display()
            ),
            None => format!("{} holds no {} and no snapshot of that commit", folder.display(), ref_file.display()),
        })),
    }
}
