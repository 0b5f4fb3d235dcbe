//! Diagnostics as people and scripts read them: a compiler-style text block per
//! problem (colour only on a terminal without NO_COLOR), and a JSON object per
//! problem with flat fields.

use super::cell;
use serde::Serialize;
use std::fmt::Write as _;
use talosprov_base::diagnostics::{Diagnostic, Severity};

const RED: &str = "\x1b[1;31m";
const YELLOW: &str = "\x1b[1;33m";
const BOLD: &str = "\x1b[1m";
const RESET: &str = "\x1b[0m";

/// Whether to colour output written to stderr: it is a terminal and `NO_COLOR`
/// is unset or empty (<https://no-color.org>).
pub fn stderr_colour() -> bool {
    use std::io::IsTerminal;
    std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Render one diagnostic:
///
/// ```text
/// error[T012 duplicate-ip]: IP 192.168.1.121 is already used by talos-cp-01 (line 21)
///   --> cluster.yaml:27:5
///    = node: talos-worker-01
///    = field: nodes[1].ip
/// ```
///
/// The `-->` line has `file`, `file:line` or `file:line:column` as known; the
/// node and field lines appear when set. Ends with a newline. The message,
/// file, node and field are shown as [`cell::line`]s: control characters
/// (in an unknown key's name, a patch file's name) escaped, so that a
/// diagnostic is always these lines and never rewrites the terminal; the
/// JSON view ([`JsonDiagnostic`]) keeps them exact.
pub fn render(d: &Diagnostic, colour: bool) -> String {
    let mut out = String::new();
    let (c, r, b) = match (colour, d.severity) {
        (false, _) => ("", "", ""),
        (true, Severity::Error) => (RED, RESET, BOLD),
        (true, Severity::Warning) => (YELLOW, RESET, BOLD),
    };
    let _ = writeln!(
        out,
        "{c}{}[{} {}]{r}{b}: {}{r}",
        d.severity,
        d.code.code(),
        d.code.name(),
        cell::line(&d.message)
    );
    let file = d.file.display().to_string();
    let file = cell::line(&file);
    let _ = match d.pos {
        Some(p) => writeln!(out, "  --> {file}:{}:{}", p.line, p.column),
        None => writeln!(out, "  --> {file}"),
    };
    if let Some(node) = &d.node {
        let _ = writeln!(out, "   = node: {}", cell::line(node));
    }
    if let Some(field) = &d.field {
        let _ = writeln!(out, "   = field: {}", cell::line(field));
    }
    out
}

/// Render a list of diagnostics, a blank line between them, then a count line
/// such as `2 errors, 1 warning`. Empty input gives an empty string.
pub fn render_all(diagnostics: &[Diagnostic], colour: bool) -> String {
    if diagnostics.is_empty() {
        return String::new();
    }
    let mut out = String::new();
    for d in diagnostics {
        out.push_str(&render(d, colour));
        out.push('\n');
    }
    out.push_str(&count_line(diagnostics));
    out.push('\n');
    out
}

/// `N error(s), M warning(s)`.
pub fn count_line(diagnostics: &[Diagnostic]) -> String {
    let errors = diagnostics.iter().filter(|d| d.is_error()).count();
    let warnings = diagnostics.len() - errors;
    let plural = |n: usize, word: &str| format!("{n} {word}{}", if n == 1 { "" } else { "s" });
    format!(
        "{}, {}",
        plural(errors, "error"),
        plural(warnings, "warning")
    )
}

/// The JSON form of one diagnostic:
/// `{"code": "T012", "name": "duplicate-ip", "severity": "error"|"warning",
/// "message": str, "file": str, "line": int|null, "column": int|null,
/// "node": str|null, "field": str|null}`.
#[derive(Debug, Serialize)]
pub struct JsonDiagnostic<'a> {
    /// Stable code, `T012`.
    pub code: &'static str,
    /// Stable name, `duplicate-ip`.
    pub name: &'static str,
    /// `error` or `warning`.
    pub severity: Severity,
    /// The diagnostic's message, one line, values quoted short.
    pub message: &'a str,
    /// The file, as given.
    pub file: String,
    /// 1-based line, when known.
    pub line: Option<u32>,
    /// 1-based column, when known.
    pub column: Option<u32>,
    /// The node's hostname, when the problem is about one node.
    pub node: Option<&'a str>,
    /// Dotted field path.
    pub field: Option<&'a str>,
}

impl<'a> From<&'a Diagnostic> for JsonDiagnostic<'a> {
    fn from(d: &'a Diagnostic) -> Self {
        JsonDiagnostic {
            code: d.code.code(),
            name: d.code.name(),
            severity: d.severity,
            message: &d.message,
            file: d.file.display().to_string(),
            line: d.pos.map(|p| p.line),
            column: d.pos.map(|p| p.column),
            node: d.node.as_deref(),
            field: d.field.as_deref(),
        }
    }
}

/// Print topology diagnostics on stderr, rendered as `validate` shows them;
/// in the JSON view, one `diagnostic` object each on stdout, its
/// `diagnostic` holding [`JsonDiagnostic`]'s keys beside `severity` and
/// `summary`.
pub fn print_all(diagnostics: &[Diagnostic]) {
    if diagnostics.is_empty() {
        return;
    }
    if super::json::enabled() {
        for d in diagnostics {
            let level = if d.is_error() {
                super::json::Level::Error
            } else {
                super::json::Level::Warn
            };
            let mut detail = serde_json::to_value(JsonDiagnostic::from(d)).unwrap_or_default();
            detail["summary"] = d.message.clone().into();
            detail["severity"] = if d.is_error() { "error" } else { "warning" }.into();
            let mut fields = serde_json::Map::new();
            fields.insert("diagnostic".into(), detail);
            super::json::emit("diagnostic", level, &d.message, fields);
        }
        return;
    }
    super::out::write_stderr(&render_all(diagnostics, stderr_colour()));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;
    use talosprov_base::diagnostics::{Code, Pos};

    #[test]
    fn plain_rendering_names_file_line_node_and_field() {
        let d = Diagnostic::error(Code::DuplicateIp, Path::new("c.yaml"), "IP taken")
            .at(Pos::new(27, 5))
            .on_node(Some("w1"))
            .field("nodes[1].ip");
        assert_eq!(
            render(&d, false),
            "error[T012 duplicate-ip]: IP taken\n  --> c.yaml:27:5\n   = node: w1\n   = field: nodes[1].ip\n"
        );
    }

    #[test]
    fn colour_only_when_asked() {
        let d = Diagnostic::warning(Code::EvenControlplanes, Path::new("c.yaml"), "even");
        assert!(!render(&d, false).contains('\x1b'));
        assert!(render(&d, true).contains(YELLOW));
    }

    #[test]
    fn count_line_pluralises() {
        let f = Path::new("c.yaml");
        let d = vec![
            Diagnostic::error(Code::DuplicateIp, f, "a"),
            Diagnostic::warning(Code::EvenControlplanes, f, "b"),
            Diagnostic::warning(Code::EvenControlplanes, f, "c"),
        ];
        assert_eq!(count_line(&d), "1 error, 2 warnings");
    }
}
