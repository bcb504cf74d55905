//! The fault points of the reliability tests: places where a test kills the process (as under
//! `kill -9`) or makes a write fail (as on a full disk), named by an environment variable.
//!
//! They are compiled in only with the `fault-injection` feature in a debug build: the tests turn
//! the feature on through the crate's dev-dependency on itself (so debug builds of the tests and
//! the examples they run have it), and `cargo test` builds in debug. Everywhere else each point is
//! an empty function that reads no environment variable, so a release build (`cargo run
//! --release`) or the library in another project can never be made to fail on purpose.

use std::fmt::Display;

/// The environment variable that names a [`crash_point`] to die at.
pub const CRASH_AT: &str = "LAYERNORM_SCALING_CRASH_AT";

/// The environment variable that names a [`fail_point`], where a write fails as on a full disk.
pub const FAIL_AT: &str = "LAYERNORM_SCALING_FAIL_AT";

/// Whether this build has the fault points (the `fault-injection` feature, in a debug build).
pub const FAULT_INJECTION: bool = cfg!(all(feature = "fault-injection", debug_assertions));

/// A place where the crash-safety tests kill the process: when [`CRASH_AT`] names `point`, the
/// process says so on stderr and aborts there (no clean-up runs, as under `kill -9`).
pub fn crash_point(point: impl Display) {
    if FAULT_INJECTION && named(CRASH_AT, &point) {
        eprintln!("{CRASH_AT}={point}: aborting here");
        std::process::abort();
    }
}

/// A write that the reliability tests make fail: an error as from a full disk when [`FAIL_AT`]
/// names `point`.
pub fn fail_point(point: impl Display) -> std::io::Result<()> {
    if !fault_injected(&point) {
        return Ok(());
    }
    Err(std::io::Error::new(std::io::ErrorKind::StorageFull, format!("no space left on device ({FAIL_AT}={point})")))
}

/// Whether the reliability tests inject a fault at `point`: [`FAIL_AT`] names it.
pub fn fault_injected(point: impl Display) -> bool {
    FAULT_INJECTION && named(FAIL_AT, &point)
}

/// Whether the environment variable `variable` holds `point`.
fn named(variable: &str, point: &impl Display) -> bool {
    std::env::var_os(variable).is_some_and(|at| at.to_str() == Some(point.to_string().as_str()))
}
