//! Everything talosprov shows a person: errors, diagnostics, plans and progress.
//! No other module writes to the terminal; `tracing` carries developer logs.

use std::io::Write;

pub mod console;
pub mod diagnostics;
pub mod plan;
pub mod progress;
pub mod summary;

/// Set up developer logs on stderr. By default only talosprov's own warnings:
/// a library's log lines (kube-rs retrying a connection, say) never reach the
/// console, since talosprov says itself what it waits for. `-v` adds the
/// libraries' warnings and talosprov's debug lines, `-vv` the libraries' debug
/// lines and talosprov's trace; `RUST_LOG` overrides all of it. Coloured only on
/// a terminal without `NO_COLOR`, like the rest of the output.
pub fn init_logging(verbose: u8) {
    let default = match verbose {
        0 => "off,talosprov=warn",
        1 => "warn,talosprov=debug",
        _ => "debug,talosprov=trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_ansi(diagnostics::stderr_colour())
        .try_init();
}

/// Print an error and its causes on stderr, once: `Error: <message>` then one
/// `  caused by: <cause>` line per source.
pub fn print_error(e: &anyhow::Error) {
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "Error: {e}");
    for cause in e.chain().skip(1) {
        let _ = writeln!(err, "  caused by: {cause}");
    }
}

/// Print one line on stdout. A closed pipe is ignored here; commands that print
/// a lot use `std::io::stdout` and propagate the error instead.
pub fn print_line(line: &str) {
    let _ = writeln!(std::io::stdout().lock(), "{line}");
}

/// Print a warning on stderr, prefixed `Warning: `.
pub fn warn(message: &str) {
    let _ = writeln!(std::io::stderr().lock(), "Warning: {message}");
}

/// Write text to stdout as is.
///
/// # Errors
/// When stdout is closed (a broken pipe, say).
pub fn write_stdout(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()
}

/// Write text to stderr as is; a closed stderr is ignored.
pub fn write_stderr(text: &str) {
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}
