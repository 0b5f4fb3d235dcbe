//! How a user's string (a hostname, a URL, a file name, a message from a
//! server) is shown in the human views: its control characters escaped, so
//! that a value cannot move the cursor, clear the screen or reverse the text
//! around it; cut short when very long; padded to a column by its display
//! width, computed here rather than by a `format!` width (which panics beyond
//! `u16::MAX`). The JSON views never use these: they show values exactly.

use std::borrow::Cow;
use std::fmt::Write as _;

use unicode_width::UnicodeWidthStr;

/// The most characters of a table cell, its escapes counted; the rest is
/// replaced by `… (N more characters)`.
pub const MAX_CELL_CHARS: usize = 200;

/// The most characters of one line of free text (a message, a diff line),
/// its escapes counted; the rest is replaced by `… (N more characters)`.
pub const MAX_LINE_CHARS: usize = 4096;

/// Whether `c` is escaped when shown: C0 controls (line breaks and tabs
/// too), DEL, C1 controls, and the invisible bidirectional formatting
/// characters (U+061C, U+200E, U+200F, the embeddings and overrides
/// U+202A–U+202E, the isolates U+2066–U+2069).
pub fn is_unsafe(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
        )
}

/// Append `c` as it is shown: itself, or its escape (`\n`, `\r`, `\t`,
/// `\x1b` below U+0080, `\u{202e}` above).
fn push_shown(out: &mut String, c: char) {
    match c {
        '\n' => out.push_str("\\n"),
        '\r' => out.push_str("\\r"),
        '\t' => out.push_str("\\t"),
        c if is_unsafe(c) && u32::from(c) < 0x80 => {
            let _ = write!(out, "\\x{:02x}", u32::from(c));
        }
        c if is_unsafe(c) => {
            let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
        }
        c => out.push(c),
    }
}

/// `text` with every [`is_unsafe`] character escaped (`\x1b`, `\r`,
/// `\u{202e}`), at most `max` characters of it shown and the rest counted:
/// `… (N more characters)`, N counting `text`'s own characters. Borrowed when
/// nothing changes.
pub fn clean(text: &str, max: usize) -> Cow<'_, str> {
    let mut shown_chars = 0usize;
    let mut needs_change = false;
    for c in text.chars() {
        shown_chars += 1;
        if is_unsafe(c) || shown_chars > max {
            needs_change = true;
            break;
        }
    }
    if !needs_change {
        return Cow::Borrowed(text);
    }
    let mut out = String::new();
    let mut shown = 0usize;
    let mut escaped = String::new();
    for (i, c) in text.char_indices() {
        escaped.clear();
        push_shown(&mut escaped, c);
        let n = escaped.chars().count();
        if shown + n > max {
            let left = text[i..].chars().count();
            let _ = write!(out, "… ({left} more characters)");
            return Cow::Owned(out);
        }
        out.push_str(&escaped);
        shown += n;
    }
    Cow::Owned(out)
}

/// A table cell or a short value in a line: [`clean`] to
/// [`MAX_CELL_CHARS`], with line breaks escaped too.
pub fn cell(text: &str) -> Cow<'_, str> {
    clean(text, MAX_CELL_CHARS)
}

/// Any value's `Display`, as a [`cell`].
pub fn cell_of(value: impl std::fmt::Display) -> String {
    cell(&value.to_string()).into_owned()
}

/// One line of free text (a message, a path): [`clean`] to
/// [`MAX_LINE_CHARS`], line breaks escaped, so it stays one line.
pub fn line(text: &str) -> Cow<'_, str> {
    clean(text, MAX_LINE_CHARS)
}

/// Text of several lines (a rendered plan, an error with its causes): each
/// line [`clean`] to [`MAX_LINE_CHARS`], the `\n` between them kept.
pub fn text(text: &str) -> Cow<'_, str> {
    let lines: Vec<Cow<'_, str>> = text.split('\n').map(|l| clean(l, MAX_LINE_CHARS)).collect();
    if lines.iter().all(|l| matches!(l, Cow::Borrowed(_))) {
        return Cow::Borrowed(text);
    }
    Cow::Owned(lines.join("\n"))
}

/// The columns `text` takes on a terminal (a wide CJK character two, a
/// combining mark none). Meant for text already [`clean`]: control
/// characters have no width of their own.
pub fn width(text: &str) -> usize {
    UnicodeWidthStr::width(text)
}

/// Append `text` to `out`, then spaces up to `columns` display columns
/// (none when it is already as wide).
pub fn push_padded(out: &mut String, text: &str, columns: usize) {
    out.push_str(text);
    let pad = columns.saturating_sub(width(text));
    out.extend(std::iter::repeat_n(' ', pad));
}

/// `text` followed by spaces up to `columns` display columns, as
/// `format!("{text:<columns$}")` would give without its limit on `columns`.
pub fn pad(text: &str, columns: usize) -> String {
    let mut out = String::with_capacity(text.len() + columns);
    push_padded(&mut out, text, columns);
    out
}

/// Spaces up to `columns` display columns, then `text` (right-aligned).
pub fn pad_left(text: &str, columns: usize) -> String {
    let pad = columns.saturating_sub(width(text));
    let mut out: String = std::iter::repeat_n(' ', pad).collect();
    out.push_str(text);
    out
}

/// A left-aligned table: each row on its own line after `indent`, each cell
/// shown as a [`cell`] and padded to its column's widest, `gap` between
/// columns, trailing spaces trimmed. Rows may have fewer cells than others.
pub fn table<S: AsRef<str>>(rows: &[Vec<S>], indent: &str, gap: &str) -> String {
    let rows: Vec<Vec<Cow<'_, str>>> = rows
        .iter()
        .map(|r| r.iter().map(|c| cell(c.as_ref())).collect())
        .collect();
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|s| width(s))
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in &rows {
        let mut line = indent.to_owned();
        for (c, cell) in r.iter().enumerate() {
            if c + 1 == r.len() {
                line.push_str(cell);
            } else {
                push_padded(&mut line, cell, widths[c]);
                line.push_str(gap);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_and_bidi_characters_are_escaped() {
        assert_eq!(cell("a\x1b[2Jb"), "a\\x1b[2Jb");
        assert_eq!(cell("x\ry\n\t"), "x\\ry\\n\\t");
        assert_eq!(cell("\u{7f}\u{85}\u{9b}"), "\\x7f\\u{85}\\u{9b}");
        assert_eq!(cell("abc\u{202e}def\u{2066}"), "abc\\u{202e}def\\u{2066}");
        assert_eq!(text("one\ntwo\x07"), "one\ntwo\\x07");
        assert!(matches!(cell("plain é 日本"), Cow::Borrowed(_)));
    }

    #[test]
    fn long_values_are_cut_and_counted() {
        let long = "u".repeat(65_536);
        let c = cell(&long);
        assert_eq!(
            c,
            format!("{}… (65336 more characters)", "u".repeat(MAX_CELL_CHARS))
        );
        let escapes = "\x1b".repeat(100);
        let c = cell(&escapes);
        assert!(c.starts_with("\\x1b\\x1b"), "{c}");
        assert!(c.ends_with("… (50 more characters)"), "{c}");
        assert_eq!(cell(&"u".repeat(MAX_CELL_CHARS)).len(), MAX_CELL_CHARS);
    }

    #[test]
    fn padding_counts_display_columns_and_never_panics() {
        assert_eq!(pad("ab", 4), "ab  ");
        assert_eq!(pad("日本", 6), "日本  ");
        assert_eq!(pad("toolong", 3), "toolong");
        assert_eq!(pad_left("7", 3), "  7");
        // Beyond u16::MAX, where `format!("{:<w$}")` panics.
        assert_eq!(pad("", 70_000).len(), 70_000);
    }

    #[test]
    fn tables_align_wide_characters() {
        let rows = vec![vec!["NAME", "X"], vec!["日本", "1"], vec!["a\u{1b}", "2"]];
        assert_eq!(
            table(&rows, "  ", "  "),
            "  NAME   X\n  日本   1\n  a\\x1b  2\n"
        );
    }
}
