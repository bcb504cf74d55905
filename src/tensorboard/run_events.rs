//! A run directory's event file (`<run>/tensorboard/`), started from the run's own records, so
//! that TensorBoard shows every step once: the run's settings (`train.json`) as text, then the
//! points of `metrics.jsonl` and `tracking.jsonl` up to the step the run (re)starts from, at the
//! times the older event files give them. The event files of earlier processes are removed once
//! the new one holds their history: points a killed run logged after its last checkpoint go with
//! them (the resumed run trains those steps again and logs them anew), as they go from
//! `metrics.jsonl`. Only the crate's own event files are removed ([`is_own_event_file`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::history::{layer_points, metric_points};
use super::proto::What;
use super::record::read_events;
use super::writer::wall_time;
use super::EventWriter;
use crate::error::Error;
use crate::run::{
    is_own_event_file, lock_run_dir, parse_metric_lines, read_metrics, read_tracking_lines, LockRefused, MetricRow,
    TrackRecord, METRICS, TENSORBOARD, TRACKING, TRAIN_CONFIG,
};
use crate::run_dir_error::RunDirError;

/// What a run's history gave its new event file.
#[derive(Debug)]
pub struct RunEvents {
    /// The event file, open for the points that follow.
    pub writer: EventWriter,
    /// The steps with points written from the history, the first and the last (none: `None`).
    pub steps: Option<(u64, u64)>,
    /// The event files of earlier processes that it replaced.
    pub replaced: Vec<PathBuf>,
}

/// Starts the event file of the run in `dir` with its history up to step `up_to`, the step the
/// run restarts from (all of it for `None`), and removes the run's older event files. The
/// records are read as far as they are whole: a damaged line ends a log's history there.
pub fn start_run_events(dir: &Path, up_to: Option<usize>) -> std::io::Result<RunEvents> {
    let rows = read_metric_rows(dir)?;
    let older = OlderEvents::read(&dir.join(TENSORBOARD))?;
    start_with(dir, &rows, older, up_to)
}

/// The run's event files of earlier processes, and when they first charted each step.
struct OlderEvents {
    files: Vec<PathBuf>,
    times: BTreeMap<u64, f64>,
}

impl OlderEvents {
    /// The crate's own event files in `events_dir` and their readable parts' steps.
    fn read(events_dir: &Path) -> std::io::Result<Self> {
        let files = own_event_files(events_dir)?;
        let mut times = BTreeMap::new();
        for path in &files {
            let Ok(bytes) = std::fs::read(path) else { continue };
            for event in read_events(&bytes).0 {
                if matches!(event.what, Some(What::Summary(_))) && event.step >= 0 {
                    times.entry(event.step as u64).or_insert(event.wall_time);
                }
            }
        }
        Ok(Self { files, times })
    }
}

/// [`start_run_events`] with the run's metric records and older event files read already.
fn start_with(dir: &Path, rows: &[MetricRow], older: OlderEvents, up_to: Option<usize>) -> std::io::Result<RunEvents> {
    let tracks = read_track_records(dir);
    let settings = match std::fs::read_to_string(dir.join(TRAIN_CONFIG)) {
        Ok(text) => Some(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(reading(&dir.join(TRAIN_CONFIG), e)),
    };
    let mut points: BTreeMap<u64, Vec<(String, f64)>> = BTreeMap::new();
    for (step, values) in metric_points(rows, up_to) {
        points.entry(step).or_default().extend(values);
    }
    // A record of step `s` is taken before update `s + 1`: the run restarting at `up_to` takes
    // that step's again.
    for record in tracks.iter().filter(|record| up_to.is_none_or(|start| record.step < start)) {
        points.entry(record.step as u64).or_default().extend(layer_points(record));
    }
    let writer = EventWriter::create_with(&dir.join(TENSORBOARD), |writer| {
        if let Some(settings) = &settings {
            writer.text(0, "settings", &format!("```json\n{}\n```", settings.trim()))?;
        }
        points.iter().try_for_each(|(step, values)| {
            writer.scalars_at(*step, older.times.get(step).copied().unwrap_or_else(wall_time), values)
        })
    })?;
    let mut replaced = Vec::new();
    for path in older.files {
        std::fs::remove_file(&path)?;
        if !path.file_name().is_some_and(|name| name.to_string_lossy().starts_with(".partial-")) {
            replaced.push(path);
        }
    }
    let steps = points.keys().next().zip(points.keys().next_back()).map(|(a, b)| (*a, *b));
    Ok(RunEvents { writer, steps, replaced })
}

/// Writes the event file of the run in `dir` from its records (a run trained before event files
/// were written, or with `tensorboard = false`), replacing its older event files, under the run's
/// lock (a training started meanwhile waits for none: it is refused). Refused for a directory
/// without `metrics.jsonl`, one whose `metrics.jsonl` is damaged or empty, a run being trained,
/// and a run whose event files hold steps its records do not (nothing is lost then).
pub fn write_run_events(dir: &Path) -> Result<RunEvents, Error> {
    let refuse = |error: RunDirError| Error::run_dir(dir, error);
    if !dir.is_dir() {
        return Err(refuse(RunDirError::NoRunDir { exists: dir.exists() }));
    }
    if !dir.join(METRICS).is_file() {
        return Err(refuse(RunDirError::NoMetrics { empty: false }));
    }
    let _lock = lock_run_dir(dir).map_err(|refused| match refused {
        LockRefused::Held(pid) => refuse(RunDirError::BeingTrained { pid: Some(pid).filter(|pid| !pid.is_empty()) }),
        LockRefused::Readers => refuse(RunDirError::ReadersHoldLock),
        LockRefused::Failed(message) => refuse(RunDirError::LockFailed(message)),
    })?;
    let rows = read_metrics(dir)?;
    let Some(last) = rows.iter().map(|row| row.step as u64).max() else {
        return Err(refuse(RunDirError::NoMetrics { empty: true }));
    };
    let events_dir = dir.join(TENSORBOARD);
    let not_written = |source| refuse(RunDirError::EventsNotWritten { source });
    let older = OlderEvents::read(&events_dir).map_err(not_written)?;
    if let Some(&charted) = older.times.keys().next_back().filter(|&&charted| charted > last) {
        return Err(refuse(RunDirError::EventsAhead { events_dir, charted, last }));
    }
    start_with(dir, &rows, older, None).map_err(not_written)
}

/// The crate's own event files in `events_dir` (regular files only), sorted; none without the folder.
pub fn own_event_files(events_dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let entries = match std::fs::read_dir(events_dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(reading(events_dir, e)),
    };
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| reading(events_dir, e))?;
        let own = entry.file_name().to_str().is_some_and(is_own_event_file);
        if own && entry.file_type().is_ok_and(|kind| kind.is_file()) {
            files.push(entry.path());
        }
    }
    files.sort();
    Ok(files)
}

/// The rows of the run's `metrics.jsonl` up to its first damaged line (none without the file).
fn read_metric_rows(dir: &Path) -> std::io::Result<Vec<MetricRow>> {
    let path = dir.join(METRICS);
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(parse_metric_lines(&text).0),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(reading(&path, e)),
    }
}

/// The valid records of the run's `tracking.jsonl` (none without the file).
fn read_track_records(dir: &Path) -> Vec<TrackRecord> {
    if !dir.join(TRACKING).is_file() {
        return Vec::new();
    }
    read_tracking_lines(&dir.join(TRACKING), None).map(|(records, _bad)| records).unwrap_or_default()
}

/// `error`, from reading `path`, said so.
fn reading(path: &Path, error: std::io::Error) -> std::io::Error {
    std::io::Error::new(error.kind(), format!("cannot read {}: {error}", path.display()))
}
