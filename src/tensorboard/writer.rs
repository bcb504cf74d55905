//! One event file, written as TensorBoard writes them: `events.out.tfevents.<seconds>.<host>.<pid>.<n>`,
//! a version record first, then one record per step's values. Every record goes to the file in
//! one write, so that a killed process leaves whole records and at most one torn last record,
//! which readers drop.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use prost::Message;

use super::proto::{
    Event, PluginData, Summary, SummaryMetadata, SummaryValue, TensorProto, TensorShapeProto, ValueKind, What,
    DT_STRING,
};
use super::record::frame;

/// The fault point where the tests make a write fail as on a full disk: every write
/// (`LAYERNORM_SCALING_FAIL_AT=tensorboard`), or that of step `N`'s values (`tensorboard:N`).
pub const FAIL_POINT: &str = "tensorboard";

/// Seconds since the Unix epoch, as events record them.
pub fn wall_time() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

/// An event file being written.
#[derive(Debug)]
pub struct EventWriter {
    file: File,
    path: PathBuf,
}

impl EventWriter {
    /// A new event file in `dir` (made if missing), with its version record.
    pub fn create(dir: &Path) -> std::io::Result<Self> {
        Self::create_with(dir, |_| Ok(()))
    }

    /// A new event file in `dir` whose first records `first` writes (a run's history) before the
    /// file takes its name: until then it is hidden from readers, so that they never see half of
    /// it (a process killed meanwhile leaves a `.partial-*` file that nothing reads).
    pub fn create_with(
        dir: &Path,
        first: impl FnOnce(&mut EventWriter) -> std::io::Result<()>,
    ) -> std::io::Result<Self> {
        static FILES: AtomicUsize = AtomicUsize::new(0);
        std::fs::create_dir_all(dir)?;
        let seconds = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let (pid, n) = (std::process::id(), FILES.fetch_add(1, Ordering::Relaxed));
        let name = format!("events.out.tfevents.{seconds}.{}.{pid}.{n}", host_name());
        let partial = dir.join(format!(".partial-{seconds}-{pid}-{n}"));
        let file = OpenOptions::new().write(true).create_new(true).open(&partial)?;
        let mut writer = EventWriter { file, path: partial };
        let written = writer
            .write_event(Event {
                wall_time: wall_time(),
                step: 0,
                what: Some(What::FileVersion("brain.Event:2".into())),
            })
            .and_then(|()| first(&mut writer))
            .and_then(|()| writer.file.sync_all());
        if let Err(e) = written {
            let _ = std::fs::remove_file(&writer.path);
            return Err(e);
        }
        let path = dir.join(name);
        std::fs::rename(&writer.path, &path)?;
        writer.path = path;
        Ok(writer)
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes `values` (`(tag, value)`) at `step` as scalars, in one record. Nothing is written
    /// for no values.
    pub fn scalars(&mut self, step: u64, values: &[(String, f64)]) -> std::io::Result<()> {
        self.scalars_at(step, wall_time(), values)
    }

    /// [`scalars`](Self::scalars) with the time they were measured (seconds since the Unix
    /// epoch), for points written again from a run's history.
    pub fn scalars_at(&mut self, step: u64, wall_time: f64, values: &[(String, f64)]) -> std::io::Result<()> {
        if values.is_empty() {
            return Ok(());
        }
        let value = values
            .iter()
            .map(|(tag, value)| SummaryValue {
                tag: tag.clone(),
                metadata: None,
                value: Some(ValueKind::SimpleValue(*value as f32)),
            })
            .collect();
        self.write_summary(step, wall_time, Summary { value })
    }

    /// Writes `text` (Markdown) under `tag` at `step`, for TensorBoard's text dashboard.
    pub fn text(&mut self, step: u64, tag: &str, text: &str) -> std::io::Result<()> {
        let tensor = TensorProto {
            dtype: DT_STRING,
            tensor_shape: Some(TensorShapeProto {}),
            string_val: vec![text.as_bytes().to_vec()],
        };
        let plugin = PluginData { plugin_name: "text".into(), content: Vec::new() };
        let value = SummaryValue {
            tag: tag.into(),
            metadata: Some(SummaryMetadata { plugin_data: Some(plugin) }),
            value: Some(ValueKind::Tensor(tensor)),
        };
        self.write_summary(step, wall_time(), Summary { value: vec![value] })
    }

    /// Makes what was written durable (at each validation: what a crash loses is then at most
    /// the interval in progress).
    pub fn sync(&self) -> std::io::Result<()> {
        self.file.sync_data()
    }

    fn write_summary(&mut self, step: u64, wall_time: f64, summary: Summary) -> std::io::Result<()> {
        crate::io::fail_point(format_args!("{FAIL_POINT}:{step}"))?;
        let step = i64::try_from(step).unwrap_or(i64::MAX);
        self.write_event(Event { wall_time, step, what: Some(What::Summary(summary)) })
    }

    fn write_event(&mut self, event: Event) -> std::io::Result<()> {
        crate::io::fail_point(FAIL_POINT)?;
        self.file.write_all(&frame(&event.encode_to_vec()))
    }
}

/// The machine's name for event file names (letters, digits, `-` and `_` only), `localhost`
/// where none is known.
fn host_name() -> String {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| std::env::var("COMPUTERNAME").ok())
        .unwrap_or_default();
    let name: String = name.trim().chars().filter(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_')).collect();
    if name.is_empty() {
        "localhost".into()
    } else {
        name
    }
}

#[cfg(test)]
mod tests {
    use super::super::proto::Event;
    use super::super::record::read_records;
    use super::*;
    use crate::run::is_own_event_file;

    fn events(path: &Path) -> Vec<Event> {
        let bytes = std::fs::read(path).unwrap();
        let (records, torn) = read_records(&bytes);
        assert!(!torn);
        records.into_iter().map(|r| Event::decode(r).unwrap()).collect()
    }

    #[test]
    fn writes_a_version_then_scalars_and_text() {
        let dir = tempfile::tempdir().unwrap();
        let mut writer = EventWriter::create(dir.path()).unwrap();
        writer.scalars(3, &[("train/loss".into(), 2.5), ("train/lr".into(), 1e-3)]).unwrap();
        writer.scalars(4, &[]).unwrap();
        writer.text(0, "settings", "lr = 1e-3").unwrap();
        let name = writer.path().file_name().unwrap().to_str().unwrap().to_string();
        assert!(name.starts_with("events.out.tfevents.") && is_own_event_file(&name), "{name}");
        for other in
            ["events.out.tfevents.0.backup", "events.out.tfevents.1.h.2", "notes.md", ".partial-x", "a.tfevents.d"]
        {
            assert!(!is_own_event_file(other), "{other}");
        }
        assert!(is_own_event_file(".partial-1796559065-25421-0"));
        let read = events(writer.path());
        assert_eq!(read.len(), 3);
        assert_eq!(read[0].what, Some(What::FileVersion("brain.Event:2".into())));
        let Some(What::Summary(summary)) = &read[1].what else { panic!("not a summary: {:?}", read[1]) };
        assert_eq!(read[1].step, 3);
        assert_eq!(summary.value[0].tag, "train/loss");
        assert_eq!(summary.value[0].value, Some(ValueKind::SimpleValue(2.5)));
        assert_eq!(summary.value[1].value, Some(ValueKind::SimpleValue(1e-3)));
        let Some(What::Summary(text)) = &read[2].what else { panic!("not a summary") };
        let Some(ValueKind::Tensor(tensor)) = &text.value[0].value else { panic!("not a tensor") };
        assert_eq!(tensor.string_val, vec![b"lr = 1e-3".to_vec()]);
    }

    #[test]
    fn a_file_whose_first_records_fail_is_not_left_behind() {
        let dir = tempfile::tempdir().unwrap();
        let failed = EventWriter::create_with(dir.path(), |_| Err(std::io::Error::other("disk full")));
        assert!(failed.is_err());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        let kept = EventWriter::create_with(dir.path(), |w| w.scalars(1, &[("a".into(), 1.0)])).unwrap();
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().path()).collect();
        assert_eq!(names, vec![kept.path().to_path_buf()]);
        assert_eq!(events(kept.path()).len(), 2);
    }
}
