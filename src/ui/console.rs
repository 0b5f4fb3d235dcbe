//! Console input and raw output: the yes/no confirmation that `state rm` and
//! `force-unlock` ask, and printing a value exactly as stored (`output -raw`).

use std::io::{self, BufRead, IsTerminal, Write};

/// Whether stdin is a terminal a person can answer on.
pub fn stdin_is_terminal() -> bool {
    io::stdin().is_terminal()
}

/// Print `question` (its control characters escaped: it names addresses and
/// locations), then read one line; true only for `yes`, as OpenTofu asks
/// ("Only 'yes' will be accepted to confirm.").
///
/// # Errors
/// When stdin or stderr fail.
pub fn confirm(question: &str) -> io::Result<bool> {
    let mut err = io::stderr().lock();
    writeln!(err, "{}", super::cell::text(question))?;
    writeln!(err, "  Only 'yes' will be accepted to confirm.")?;
    write!(err, "\n  Enter a value: ")?;
    err.flush()?;
    let mut answer = String::new();
    io::stdin().lock().read_line(&mut answer)?;
    Ok(answer.trim() == "yes")
}

/// Write `text` to stdout exactly, without adding a newline.
///
/// # Errors
/// When stdout is closed (a broken pipe is the caller's to ignore).
pub fn print_raw(text: &str) -> io::Result<()> {
    let mut out = io::stdout().lock();
    out.write_all(text.as_bytes())?;
    out.flush()
}

/// Write `lines` to stdout, one per line, exactly (they may be JSON or a
/// value asked for, as `output -json` and `state show` print).
///
/// # Errors
/// When stdout is closed.
pub fn print_lines<S: AsRef<str>>(lines: &[S]) -> io::Result<()> {
    let mut out = io::stdout().lock();
    for l in lines {
        writeln!(out, "{}", l.as_ref())?;
    }
    out.flush()
}
