//! Models already on disk by name: `org/name` (or `org/name@revision`) is resolved in the local
//! Hugging Face cache, offline, through hf-hub's `Cache` (the `models--org--name/` folder, its
//! `refs/<revision>` and `snapshots/<commit>/`). Nothing is downloaded.
//!
//! The cache is `HF_HUB_CACHE` when set, else `HF_HOME/hub`, else `~/.cache/huggingface/hub`, as
//! `huggingface-cli` and transformers place it.

use std::path::{Path, PathBuf};

use hf_hub::{Cache, Repo, RepoType};

use super::{CacheMiss, HfError};

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
        return Err(HfError::NoRevision { name: name.to_string() });
    }
    let Some((name, revision)) = spec.to_str().filter(|_| !spec.exists()).and_then(repo_name) else {
        return Ok(spec.to_path_buf());
    };
    let not_found = |miss: CacheMiss| HfError::NotInCache {
        spec: spec.display().to_string(),
        name: name.to_string(),
        revision: revision.map(str::to_string),
        miss: Box::new(miss),
    };
    let Some(cache) = cache else {
        return Err(not_found(CacheMiss::NoCache));
    };
    let repo = match revision {
        Some(revision) => Repo::with_revision(name.to_string(), RepoType::Model, revision.to_string()),
        None => Repo::model(name.to_string()),
    };
    if !cache.path().is_dir() {
        return Err(not_found(CacheMiss::CacheNotAFolder { cache: cache.path().to_path_buf() }));
    }
    let folder = cache.path().join(repo.folder_name());
    let snapshot = |commit: &str| folder.join("snapshots").join(commit);
    let is_commit = |text: &str| text.len() == 40 && text.chars().all(|c| c.is_ascii_hexdigit());
    // A revision names a file under `refs/`: one that leaves it (`../x`) names nothing.
    if let Some(revision) = revision {
        if revision.split('/').any(|part| part.is_empty() || part == "." || part == "..") || revision.contains('\\') {
            return Err(HfError::NotARevision { spec: spec.display().to_string(), revision: revision.to_string() });
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
        return Err(not_found(CacheMiss::RefNotACommit { ref_file, holds: named.chars().take(80).collect() }));
    }
    let by_ref = named.as_deref().map(|commit| snapshot(commit).join("config.json")).filter(|c| c.is_file());
    match by_commit.or(by_ref).and_then(|config| config.parent().map(Path::to_path_buf)) {
        Some(dir) => Ok(dir),
        None if !folder.is_dir() => Err(not_found(CacheMiss::NoModelFolder { folder })),
        None => Err(not_found(match named {
            Some(commit) => CacheMiss::EmptySnapshot { snapshot: snapshot(&commit), ref_file, commit },
            None => CacheMiss::NoRef { folder, ref_file },
        })),
    }
}
