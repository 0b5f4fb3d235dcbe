//! Bounds on what talosprov reads, so that no input can make a command use
//! unbounded memory or time, or overflow the stack: a size limit per input
//! file, a nesting limit and an alias expansion budget for YAML (go-yaml v3,
//! which Talos uses, refuses "excessive aliasing" the same way), and short
//! quotes of values in messages. [`ReadError`] says what is wrong with an
//! input file that could not be read as text; [`crate::inputs`] reads them,
//! and [`crate::load`] holds YAML and JSON to these bounds.

use std::borrow::Cow;
use std::fmt;

/// The largest input file talosprov reads (the topology, a patch file): 4 MiB.
/// A machine config patch with inline manifests (a CNI's, say) stays well
/// below it.
pub const MAX_INPUT_BYTES: u64 = 4 * 1024 * 1024;

/// The deepest nesting of YAML collections accepted in the topology file.
pub const MAX_NESTING: usize = 64;

/// The most text (in characters) that YAML aliases may add to a topology file
/// when expanded: 1 MiB, far above any real use of anchors for shared node
/// settings, far below what an "alias bomb" asks for.
pub const MAX_ALIAS_EXPANSION: usize = 1024 * 1024;

/// The most nodes a topology may have: 1000. Every node gets its own machine config,
/// rendered, merged and checked by `validate`, `plan` and `apply`, so the nodes bound the
/// work and memory of a command (a 4 MiB topology fits some 45,000 one-line nodes, which
/// took 13 s and 530 MiB to validate); a Proxmox cluster runs far fewer Talos VMs.
pub const MAX_NODES: usize = 1000;

/// How much of a value a message quotes, in characters, before eliding.
pub const MAX_QUOTED_CHARS: usize = 120;

/// Why an input file could not be read as text.
#[derive(Debug)]
pub enum ReadError {
    /// The path is not a regular file (after following symlinks): `what`
    /// says what it is, e.g. "a FIFO".
    NotAFile {
        /// What the path is.
        what: &'static str,
    },
    /// Larger than [`MAX_INPUT_BYTES`].
    TooLarge {
        /// The size seen, in bytes (at least the limit plus one).
        bytes: u64,
    },
    /// Not UTF-8 text: where the first invalid byte is.
    NotUtf8 {
        /// 1-based line of the first invalid byte.
        line: u32,
        /// 0-based byte offset of the first invalid byte in the file.
        offset: usize,
    },
    /// Any other I/O error.
    Io(std::io::Error),
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReadError::NotAFile { what } => write!(f, "it is {what}, not a regular file"),
            ReadError::TooLarge { bytes } => write!(
                f,
                "it is {} bytes or more, over the {} MiB limit for an input file",
                bytes,
                MAX_INPUT_BYTES / (1024 * 1024)
            ),
            ReadError::NotUtf8 { line, offset } => write!(
                f,
                "it is not UTF-8 text: invalid byte at line {line} (byte offset {offset})"
            ),
            ReadError::Io(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ReadError {}

/// A value quoted for a message: whole when short, else its first
/// [`MAX_QUOTED_CHARS`] characters and how much was left out; its control
/// characters (C0 with line breaks and tabs, DEL, C1) and invisible
/// bidirectional formatting characters (U+061C, U+200E, U+200F,
/// U+202A–U+202E, U+2066–U+2069) escaped as `\n`, `\x1b`, `\u{202e}`, so that
/// a quoted value can neither rewrite a terminal nor break a message's line.
/// Borrowed when nothing changes.
pub fn quoted(value: &str) -> Cow<'_, str> {
    fn is_unsafe(c: char) -> bool {
        c.is_control()
            || matches!(
                c,
                '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}'
            )
    }
    fn push_escaped(out: &mut String, text: &str) {
        for c in text.chars() {
            match c {
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                c if is_unsafe(c) && u32::from(c) < 0x80 => {
                    out.push_str(&format!("\\x{:02x}", u32::from(c)));
                }
                c if is_unsafe(c) => out.push_str(&format!("\\u{{{:x}}}", u32::from(c))),
                c => out.push(c),
            }
        }
    }
    let cut = value.char_indices().nth(MAX_QUOTED_CHARS).map(|(i, _)| i);
    let shown = &value[..cut.unwrap_or(value.len())];
    if cut.is_none() && !shown.chars().any(is_unsafe) {
        return Cow::Borrowed(value);
    }
    let mut out = String::with_capacity(shown.len() + 32);
    push_escaped(&mut out, shown);
    if let Some(cut) = cut {
        out.push_str(&format!("… ({} more bytes)", value.len() - cut));
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_values_are_quoted_short() {
        assert_eq!(quoted("short"), "short");
        let long = "y".repeat(10_000);
        let q = quoted(&long);
        assert!(q.len() < 200, "{q}");
        assert!(q.ends_with("(9880 more bytes)"), "{q}");
    }

    #[test]
    fn control_and_bidi_characters_are_quoted_escaped() {
        assert_eq!(quoted("a\x1b[2Jb\r\n\t"), "a\\x1b[2Jb\\r\\n\\t");
        assert_eq!(quoted("\u{7f}\u{9b}"), "\\x7f\\u{9b}");
        assert_eq!(quoted("abc\u{202e}fed\u{2066}"), "abc\\u{202e}fed\\u{2066}");
        assert!(matches!(quoted("plain é 日本"), Cow::Borrowed(_)));
        let long = format!("\x1b{}", "y".repeat(10_000));
        let q = quoted(&long);
        assert!(q.starts_with("\\x1byyy"), "{q}");
        assert!(q.ends_with("(9881 more bytes)"), "{q}");
        assert!(!q.chars().any(char::is_control), "{q}");
    }
}
