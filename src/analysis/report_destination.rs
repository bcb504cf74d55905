//! Where a diagnostics report goes and what it calls its models: the checks a report makes before
//! any evaluation, so that a long analysis never ends in a report it cannot write or that would
//! replace a model it analysed.

use std::path::{Path, PathBuf};

use crate::{config_error::ConfigError, error::Error};

/// A model a report covers.
#[derive(Clone, Copy, Debug)]
pub struct ReportModel<'a> {
    /// Its directory (for a model of the Hugging Face cache, its snapshot's folder).
    pub dir: &'a Path,
    /// The path or name the user gave for it (`org/name` for a model of the cache).
    pub given: &'a Path,
    /// Whether it is a run directory of the train example (else a Hugging Face directory).
    pub is_run: bool,
}

/// The file that marks a report directory: `report.json` for one model, `comparison.json` for several.
fn report_marker(n_models: usize) -> &'static str {
    if n_models == 1 {
        crate::run::REPORT
    } else {
        crate::run::COMPARISON
    }
}

/// The directory a report of `models` goes to: `out`, or `<run>/analysis` for a single run
/// directory. An error unless that directory may be replaced (absent, empty, or an earlier report:
/// [`check_replaceable_dir`](crate::io::check_replaceable_dir)) and holds none of the models. An
/// existing directory comes back absolute, so that `.` names no directory being replaced.
pub fn report_dir(out: Option<&Path>, models: &[ReportModel]) -> Result<PathBuf, Error> {
    if models.is_empty() {
        return Err(ConfigError::Conflict("a report needs at least one model".into()).into());
    }
    let out = match (out, models) {
        (Some(out), _) => out.to_path_buf(),
        (None, [model]) if model.is_run && !crate::run::is_hf_dir(model.dir) => model.dir.join(crate::run::ANALYSIS),
        (None, [_]) => {
            return Err(ConfigError::Conflict(
                "analysing a Hugging Face directory needs --out DIR (the model directory is left untouched)".into(),
            )
            .into())
        }
        _ => {
            return Err(ConfigError::Conflict(
                "comparing several models needs --out DIR for the comparison report".into(),
            )
            .into())
        }
    };
    crate::io::check_replaceable_dir(&out, report_marker(models.len()))
        .map_err(|e| Error::file(&out, format!("--out: {e}")))?;
    let out = if out.exists() { out.canonicalize().map_err(|e| Error::file(&out, e))? } else { out };
    if let Some(model) = models.iter().find(|model| model.dir.canonicalize().is_ok_and(|dir| dir.starts_with(&out))) {
        return Err(ConfigError::Conflict(format!(
            "--out {} holds the model {}, which writing the report would replace",
            out.display(),
            model.dir.display()
        ))
        .into());
    }
    Ok(out)
}

/// The models' labels, which name their sub-folders of a comparison: `given` (one per model) used
/// as given or refused, never renamed; without any, the shortest ends of the models' paths that
/// differ ([`path_labels`](super::path_labels)), a model of the Hugging Face cache going by the
/// name it was given (`org/name`), made unique by [`unique_labels`](super::unique_labels).
pub fn report_labels(given: &[String], models: &[ReportModel]) -> Result<Vec<String>, ConfigError> {
    if !given.is_empty() && given.len() != models.len() {
        return Err(ConfigError::Conflict(format!(
            "{} --label values for {} models; give one per --run/--hf-dir or none",
            given.len(),
            models.len()
        )));
    }
    let names: Vec<String> = if given.is_empty() {
        let mut names = super::path_labels(&models.iter().map(|model| model.dir).collect::<Vec<_>>());
        // Not the commit hash that names a cached snapshot's folder.
        for (name, model) in names.iter_mut().zip(models) {
            if !model.is_run && !model.given.exists() {
                *name = model.given.display().to_string();
            }
        }
        names
    } else {
        given.to_vec()
    };
    let labels = super::unique_labels(&names);
    // A label is a sub-folder beside the comparison's own files and figures: no name of a file.
    let file_like = |label: &String| {
        let first = label.split('/').next().unwrap_or_default();
        first.starts_with('.') || [".md", ".csv", ".json", ".png"].iter().any(|ending| first.ends_with(ending))
    };
    if let Some(label) = given.iter().find(|label| file_like(label)) {
        return Err(ConfigError::Conflict(format!(
            "--label `{label}` names a file: labels name the report's sub-folders, beside its comparison.md, \
             .csv, .json and figures; give a name without `.md`, `.csv`, `.json`, `.png` or a leading `.`"
        )));
    }
    if let Some((given, used)) = given.iter().zip(&labels).find(|(given, used)| given != used) {
        return Err(ConfigError::Conflict(format!(
            "--label `{given}` would become `{used}`: labels name the report's sub-folders, so each must be unique, \
             not hold another's folder (`a` beside `a/b`), and be made of letters, digits, `-`, `_` and `.` (with \
             `/` between folders)"
        )));
    }
    Ok(labels)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(dir: &Path) -> ReportModel<'_> {
        ReportModel { dir, given: dir, is_run: true }
    }

    #[test]
    fn one_run_reports_into_its_folder_and_several_need_a_destination() {
        let tmp = tempfile::tempdir().unwrap();
        let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
        assert_eq!(report_dir(None, &[run(&a)]).unwrap(), a.join("analysis"));
        assert!(matches!(report_dir(None, &[run(&a), run(&b)]), Err(Error::Config(ConfigError::Conflict(_)))));
        // A destination holding an analysed model is refused, whichever way it is named.
        std::fs::create_dir_all(&a).unwrap();
        for out in [tmp.path().to_path_buf(), a.clone(), a.join(".")] {
            assert!(report_dir(Some(&out), &[run(&a)]).is_err(), "{}", out.display());
        }
        assert_eq!(report_dir(Some(&b), &[run(&a)]).unwrap(), b);
        assert!(report_dir(Some(&b), &[]).is_err(), "a report of nothing");
    }

    #[test]
    fn labels_are_used_as_given_or_refused() {
        let (a, b) = (Path::new("runs/pre-ln/seed-1"), Path::new("runs/lns/seed-1"));
        let models = [run(a), run(b)];
        assert_eq!(report_labels(&[], &models).unwrap(), ["pre-ln/seed-1", "lns/seed-1"]);
        let given = |labels: &[&str]| labels.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(report_labels(&given(&["pre", "lns"]), &models).unwrap(), ["pre", "lns"]);
        for refused in [&["x", "x"][..], &["a", "a/b"], &["a b", "c"], &["x.md", "y"], &[".x", "y"], &["one"]] {
            assert!(report_labels(&given(refused), &models).is_err(), "{refused:?}");
        }
        // A model of the Hugging Face cache goes by the name it was given.
        let cached = ReportModel { dir: a, given: Path::new("org/model-that-is-not-here"), is_run: false };
        assert_eq!(report_labels(&[], &[cached, run(b)]).unwrap()[0], "org/model-that-is-not-here");
    }
}
