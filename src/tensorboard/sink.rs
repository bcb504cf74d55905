//! An event file shared by the writers of one run (the metric logger on burn-train's metrics
//! thread, the tracker on the training thread), which stops at its first failed write: the
//! failure is reported once, the training goes on, and nothing more is written.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::EventWriter;

/// Called once with the message of the first failed write.
type OnError = Box<dyn Fn(String) + Send>;

/// A shared [`EventWriter`] that stops at its first failed write. Clones write to the same file.
#[derive(Clone)]
pub struct EventSink {
    state: Arc<Mutex<SinkState>>,
}

struct SinkState {
    writer: Option<EventWriter>,
    path: PathBuf,
    on_error: Option<OnError>,
    /// The message of the first failed write.
    failure: Option<String>,
}

impl std::fmt::Debug for EventSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventSink").field("path", &self.lock().path).finish()
    }
}

impl EventSink {
    /// Writes through `writer`. The library prints nothing: a failed write is kept for
    /// [`failure`](Self::failure), and told to [`on_error`](Self::on_error)'s function if one is set.
    pub fn new(writer: EventWriter) -> Self {
        let path = writer.path().to_path_buf();
        let state = SinkState { writer: Some(writer), path, on_error: None, failure: None };
        Self { state: Arc::new(Mutex::new(state)) }
    }

    /// Reports the first failed write to `report` (a message naming the file and the error).
    pub fn on_error(self, report: impl Fn(String) + Send + 'static) -> Self {
        self.lock().on_error = Some(Box::new(report));
        self
    }

    /// The message of the first failed write, after which nothing more was written.
    pub fn failure(&self) -> Option<String> {
        self.lock().failure.clone()
    }

    /// The event file's path.
    pub fn path(&self) -> PathBuf {
        self.lock().path.clone()
    }

    /// Whether writes still go to the file (no write has failed).
    pub fn is_writing(&self) -> bool {
        self.lock().writer.is_some()
    }

    /// Writes `values` at `step` as scalars (see [`EventWriter::scalars`]).
    pub fn scalars(&self, step: u64, values: &[(String, f64)]) {
        self.write(|writer| writer.scalars(step, values));
    }

    /// Makes what was written durable (see [`EventWriter::sync`]).
    pub fn sync(&self) {
        self.write(|writer| writer.sync());
    }

    fn write(&self, write: impl FnOnce(&mut EventWriter) -> std::io::Result<()>) {
        let mut state = self.lock();
        let Some(writer) = state.writer.as_mut() else { return };
        if let Err(e) = write(writer) {
            let message = format!(
                "cannot write {}: {e}; TensorBoard's events after this point are not written (the run goes on)",
                state.path.display()
            );
            state.writer = None;
            state.failure = Some(message.clone());
            if let Some(report) = &state.on_error {
                report(message);
            }
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SinkState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::super::record::read_events;
    use super::*;

    #[test]
    fn the_first_failed_write_is_kept_told_once_and_ends_the_writing() {
        let dir = tempfile::tempdir().unwrap();
        let (told, heard) = std::sync::mpsc::channel();
        let sink = EventSink::new(EventWriter::create(dir.path()).unwrap()).on_error(move |m| told.send(m).unwrap());
        sink.scalars(1, &[("a".into(), 1.0)]);
        sink.write(|_| Err(std::io::Error::other("no space left on device")));
        sink.scalars(2, &[("a".into(), 2.0)]);
        sink.write(|_| Err(std::io::Error::other("again")));
        assert!(!sink.is_writing());
        let failure = sink.failure().unwrap();
        assert!(failure.contains("no space left") && failure.contains("the run goes on"), "{failure}");
        assert_eq!(heard.try_iter().collect::<Vec<_>>(), vec![failure]);
        let (events, torn) = read_events(&std::fs::read(sink.path()).unwrap());
        assert_eq!((events.len(), torn), (2, false), "the version and step 1");
    }
}
