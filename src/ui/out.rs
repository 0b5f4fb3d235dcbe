//! The few ways anything reaches stdout or stderr outside the progress
//! view: an error, a warning, a line, raw text. Each goes to the JSON view
//! instead when `-json` is on, so stdout then holds only JSON lines. Errors,
//! warnings, notes and lines have their control characters escaped on the
//! console (see [`super::cell::text`]) and stay exact in the JSON view; raw
//! text is written as it is.

use std::io::Write;

use super::cell;
use super::json;

/// Print an error and its causes on stderr, once: `Error: <message>` then one
/// `  caused by: <cause>` line per source (in the JSON view, an error
/// `diagnostic` on stdout, the causes in its `detail`).
pub fn print_error(e: &anyhow::Error) {
    if json::enabled() {
        let causes: Vec<String> = e.chain().skip(1).map(ToString::to_string).collect();
        json::diagnostic(json::Level::Error, &e.to_string(), Some(&causes.join("\n")));
        return;
    }
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err, "Error: {}", cell::text(&e.to_string()));
    for cause in e.chain().skip(1) {
        let _ = writeln!(err, "  caused by: {}", cell::text(&cause.to_string()));
    }
}

/// Print one line on stdout. A closed pipe is ignored here; commands that print
/// a lot use `std::io::stdout` and propagate the error instead.
pub fn print_line(line: &str) {
    let _ = writeln!(std::io::stdout().lock(), "{}", cell::text(line));
}

/// Print a warning on stderr, prefixed `Warning: ` (in the JSON view, a
/// `diagnostic` object on stdout).
pub fn warn(message: &str) {
    if json::enabled() {
        json::diagnostic(json::Level::Warn, message, None);
        return;
    }
    let _ = writeln!(std::io::stderr().lock(), "Warning: {}", cell::text(message));
}

/// Print a note (what a command is doing) on stderr, followed by a line
/// break (in the JSON view, a `log` object with the text exact).
pub fn note(text: &str) {
    if json::enabled() {
        json::log(&format!("{text}\n"));
        return;
    }
    let _ = writeln!(std::io::stderr().lock(), "{}", cell::text(text));
}

/// Write text to stdout as is (in the JSON view, a `log` object): for text
/// a view rendered, its values already escaped, or output meant exact.
///
/// # Errors
/// When stdout is closed (a broken pipe, say).
pub fn write_stdout(text: &str) -> std::io::Result<()> {
    if json::enabled() {
        json::log(text);
        return Ok(());
    }
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()
}

/// Write text to stderr as is; a closed stderr is ignored (in the JSON
/// view, a `log` object on stdout): for text a view rendered (diagnostics,
/// with their colours), its values already escaped.
pub fn write_stderr(text: &str) {
    if json::enabled() {
        json::log(text);
        return;
    }
    let _ = std::io::stderr().lock().write_all(text.as_bytes());
}
