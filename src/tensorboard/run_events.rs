//! A run directory's event file (`<run>/tensorboard/`), started from the run's own records, so
//! that TensorBoard shows every step once: the run's settings (`train.json`) as text, then the
//! points of `metrics.jsonl` and `tracking.jsonl` up to the step the run (re)starts from. The
//! event files of earlier processes are removed once the new one holds their history: points a
//! killed run logged after its last checkpoint go with them (the resumed run trains those steps
//! again and logs them anew), as they go from `metrics.jsonl`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::history::{layer_points, metric_points};
use super::writer::is_event_file;
use super::EventWriter;
use crate::run::{
    parse_metric_lines, read_tracking_lines, training_in, MetricRow, TrackRecord, METRICS, TENSORBOARD, TRACKING,
    TRAIN_CONFIG,
};
use crate::Error;

/// What a run's history gave its new event file.
#[derive(Debug)]
pub struct RunEvents {
    /// The event file, open for the points that follow.
    pub writer: EventWriter,
    /// Steps with points written from the history.
    pub steps: usize,
    /// The event files of earlier processes that it replaced.
    pub replaced: Vec<PathBuf>,
}

/// Starts the event file of the run in `dir` with its history up to step `up_to`, the step the
/// run restarts from (all of it for `None`), and removes the run's older event files. The records are read as far as they
/// are whole: a damaged line ends a log's history there.
pub fn start_run_events(dir: &Path, up_to: Option<usize>) -> std::io::Result<RunEvents> {
    let rows = read_metric_rows(dir)?;
    let tracks = read_track_records(dir);
    let settings = match std::fs::read_to_string(dir.join(TRAIN_CONFIG)) {
        Ok(text) => Some(text),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    let mut points: BTreeMap<u64, Vec<(String, f64)>> = BTreeMap::new();
    for (step, values) in metric_points(&rows, up_to) {
        points.entry(step).or_default().extend(values);
    }
    // A record of step `s` is taken before update `s + 1`: the run restarting at `up_to` takes
    // that step's again.
    for record in tracks.iter().filter(|record| up_to.is_none_or(|start| record.step < start)) {
        points.entry(record.step as u64).or_default().extend(layer_points(record));
    }
    let events_dir = dir.join(TENSORBOARD);
    let writer = EventWriter::create_with(&events_dir, |writer| {
        if let Some(settings) = &settings {
            writer.text(0, "settings", &format!("```json\n{}\n```", settings.trim()))?;
        }
        points.iter().try_for_each(|(step, values)| writer.scalars(*step, values))
    })?;
    let mut replaced = Vec::new();
    for entry in std::fs::read_dir(&events_dir)? {
        let path = entry?.path();
        let name = path.file_name().and_then(|name| name.to_str()).unwrap_or_default();
        if path != writer.path() && (is_event_file(name) || name.starts_with(".partial-")) {
            std::fs::remove_file(&path)?;
            if is_event_file(name) {
                replaced.push(path);
            }
        }
    }
    Ok(RunEvents { writer, steps: points.len(), replaced })
}

/// Writes the event file of the run in `dir` from its records (a run trained before event files
/// were written, or with `tensorboard = false`), replacing its older event files. Refused for a
/// directory without `metrics.jsonl`, and for a run being trained (its training writes its own).
pub fn write_run_events(dir: &Path) -> Result<RunEvents, Error> {
    let refuse = |message: String| Error::RunDir { path: dir.to_path_buf(), message };
    if !dir.is_dir() {
        return Err(refuse("no such directory: give a run directory of the train example".into()));
    }
    if !dir.join(METRICS).is_file() {
        return Err(refuse(format!("it has no {METRICS}: give a run directory of the train example")));
    }
    if let Some(pid) = training_in(dir) {
        return Err(refuse(format!(
            "a training (PID {pid}) is writing this run, and its TensorBoard events with it: wait for it to end"
        )));
    }
    let events = start_run_events(dir, None)
        .map_err(|e| refuse(format!("cannot write its event file in {}/: {e}", dir.join(TENSORBOARD).display())))?;
    Ok(events)
}

/// The rows of the run's `metrics.jsonl` up to its first damaged line (none without the file).
fn read_metric_rows(dir: &Path) -> std::io::Result<Vec<MetricRow>> {
    match std::fs::read_to_string(dir.join(METRICS)) {
        Ok(text) => Ok(parse_metric_lines(&text).0),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// The valid records of the run's `tracking.jsonl` (none without the file).
fn read_track_records(dir: &Path) -> Vec<TrackRecord> {
    if !dir.join(TRACKING).is_file() {
        return Vec::new();
    }
    read_tracking_lines(&dir.join(TRACKING), None).map(|(records, _bad)| records).unwrap_or_default()
}
