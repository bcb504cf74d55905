//! Printing that never stops a program: a closed or full standard output (`train ... | head -3`)
//! loses the lines written to it, never the training behind them. `println!` panics when a write
//! fails; these macros drop what cannot be written.

use std::io::Write;

/// Writes a formatted line to standard output; a write that fails (a closed pipe) is ignored.
#[macro_export]
macro_rules! outln {
    () => { $crate::console::write_out(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::console::write_out(format_args!("{}\n", format_args!($($arg)*))) };
}

/// Writes formatted text (no newline) to standard output and flushes it; a failed write is ignored.
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => { $crate::console::write_out(format_args!($($arg)*)) };
}

/// Writes a formatted line to standard error; a write that fails is ignored.
#[macro_export]
macro_rules! errln {
    ($($arg:tt)*) => { $crate::console::write_err(format_args!("{}\n", format_args!($($arg)*))) };
}

/// Writes `text` to standard output and flushes it, ignoring failures (use [`outln!`]).
pub fn write_out(text: std::fmt::Arguments) {
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_fmt(text).and_then(|()| stdout.flush());
}

/// Writes `text` to standard error, ignoring failures (use [`errln!`]).
pub fn write_err(text: std::fmt::Arguments) {
    let _ = std::io::stderr().lock().write_fmt(text);
}
