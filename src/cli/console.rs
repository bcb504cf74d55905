//! Output for the command-line programs (the examples): the library itself prints nothing, it
//! reports through events and results. Printing that never stops a program: a closed or full
//! standard output (`train ... | head -3`) loses the lines written to it, never the training
//! behind them. `println!` panics when a write
//! fails; these macros drop what cannot be written. A program's result on standard output (logits,
//! samples) goes through [`write_result`] instead: a reader that closed the pipe is done with it,
//! but any other failed write (a full disk) is an error.

use std::io::Write;

/// Writes a formatted line to standard output; a write that fails (a closed pipe) is ignored.
#[macro_export]
macro_rules! outln {
    () => { $crate::cli::console::write_out(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::cli::console::write_out(format_args!("{}\n", format_args!($($arg)*))) };
}

/// Writes formatted text (no newline) to standard output and flushes it; a failed write is ignored.
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => { $crate::cli::console::write_out(format_args!($($arg)*)) };
}

/// Writes a formatted line to standard error; a write that fails is ignored.
#[macro_export]
macro_rules! errln {
    ($($arg:tt)*) => { $crate::cli::console::write_err(format_args!("{}\n", format_args!($($arg)*))) };
}

/// Writes `text` to standard output and flushes it (use [`outln!`]); a failure does not stop the
/// program, and the first is kept for [`output_written`].
pub fn write_out(text: std::fmt::Arguments) {
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout.write_fmt(text).and_then(|()| stdout.flush()) {
        if e.kind() != std::io::ErrorKind::BrokenPipe {
            let mut failure = OUTPUT_FAILURE.lock().unwrap_or_else(|e| e.into_inner());
            failure.get_or_insert_with(|| e.to_string());
        }
    }
}

/// The first failure of [`write_out`] (a full disk under `> file`), kept for [`output_written`].
static OUTPUT_FAILURE: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

/// An error when something [`outln!`] wrote could not be written: for a program whose printed
/// table is its result (`bench`), which must then not exit 0. A closed pipe (`| head`) is no
/// failure.
pub fn output_written() -> Result<(), crate::error::Error> {
    match OUTPUT_FAILURE.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
        Some(e) => Err(crate::error::Error::Output { error: e.clone() }),
        None => Ok(()),
    }
}

/// Writes `text` to standard error, ignoring failures (use [`errln!`]).
pub fn write_err(text: std::fmt::Arguments) {
    let _ = std::io::stderr().lock().write_fmt(text);
}

/// [`memory::reuse_freed_memory`](crate::memory::reuse_freed_memory), as the programs call it
/// first thing: with a note on stderr when the environment's malloc settings rule instead (a
/// setting glibc cannot read counts as 0, which can make each step several times slower).
pub fn reuse_freed_memory() {
    if !crate::memory::reuse_freed_memory() {
        if let Some(settings) = crate::memory::malloc_settings_in_environment() {
            write_err(format_args!(
                "note: malloc's settings come from the environment ({settings}), not from this program; unset \
                 them unless they are meant (docs/performance.md)\n"
            ));
        }
    }
}

/// Prints one of a run's events as the programs do: notes and warnings (`notice`) on standard
/// error, progress on standard output.
pub fn print_event(event: impl std::fmt::Display, notice: bool) {
    if notice {
        write_err(format_args!("{event}\n"));
    } else {
        write_out(format_args!("{event}\n"));
    }
}

/// Writes a line of a program's result to standard output and flushes it. A closed pipe
/// (`| head`) is not an error: the reader has what it wanted. Any other failure (a full disk
/// under `> file`) is, so that a cut-short result never exits with success.
pub fn write_result(text: std::fmt::Arguments) -> Result<(), crate::error::Error> {
    let mut stdout = std::io::stdout().lock();
    match stdout.write_fmt(format_args!("{text}\n")).and_then(|()| stdout.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(crate::error::Error::Output { error: e.to_string() })
        }
        _ => Ok(()),
    }
}

/// Makes SIGINT (Ctrl-C) and SIGTERM stop the program with a word on standard error: the line
/// `note` gives for the signal's name (`SIGINT`, `SIGTERM`), such as what a training kept and how
/// to resume it. The program then ends as the signal alone would have ended it (the signal's
/// default action, which a shell reports as status 130 or 143, and which stops a shell loop around
/// it): at once, no destructor run, so the stop loses no more than the signal's own would (the
/// crate writes every file atomically). On other systems than Unix, it does nothing.
pub fn on_stop_signal(note: impl Fn(&str) -> String + Send + 'static) -> std::io::Result<()> {
    #[cfg(unix)]
    {
        use signal_hook::consts::{SIGINT, SIGTERM};
        let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])?;
        std::thread::Builder::new().name("stop-signal".into()).spawn(move || {
            if let Some(signal) = signals.forever().next() {
                let name = if signal == SIGINT { "SIGINT" } else { "SIGTERM" };
                write_err(format_args!("{}\n", note(name)));
                // The default action ends the process; should it not, the status a shell shows for it.
                let _ = signal_hook::low_level::emulate_default_handler(signal);
                signal_hook::low_level::exit(128 + signal);
            }
        })?;
    }
    #[cfg(not(unix))]
    drop(note);
    Ok(())
}

/// The exit of a command-line program: success, or the error printed as `error: ...` on stderr
/// with a non-zero status (never a panic trace).
pub fn exit_code<E: std::fmt::Display>(result: Result<(), E>) -> std::process::ExitCode {
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(error) => {
            crate::errln!("error: {error}");
            std::process::ExitCode::FAILURE
        }
    }
}
