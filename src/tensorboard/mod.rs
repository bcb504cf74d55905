//! TensorBoard event files: the metrics and the layer-wise tracking of a run, where researchers
//! compare runs (`tensorboard --logdir runs`; W&B imports them with `wandb sync
//! --sync-tensorboard`).
//!
//! [`EventWriter`] writes one file (TFRecord framing with masked CRC32C, [`record`]; protobuf
//! `Event`s derived with prost, [`proto`]); [`EventSink`] shares one between a run's writers and
//! stops at a full disk; [`history`] says which tag and step each record becomes;
//! [`start_run_events`] starts a run's file from its records (a resumed run), [`write_run_events`]
//! writes one for a run trained without. The
//! burn-train logger is `train::TensorBoardLogger`.

pub mod history;
pub mod proto;
pub mod record;
mod run_events;
mod sink;
mod writer;

pub use crate::run::is_own_event_file;
pub use run_events::{own_event_files, start_run_events, write_run_events, RunEvents};
pub use sink::EventSink;
pub use writer::{wall_time, EventWriter, FAIL_POINT};
