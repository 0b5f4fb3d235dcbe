//! Which line of a template wrote a line of its rendered output. minijinja keeps no map
//! from output to source, so a YAML error in a template's output is located by its text:
//! each template line is cut into the literal text around its tags, and the output line
//! is matched against those pieces in order. A line that writes only literal text matches
//! itself; `  - name: {{ n }}` matches `  - name: eth0`. When several lines match, the one
//! nearest the output line's own number is taken (a loop body repeats one template line);
//! when none does (a value written out over several lines), the error stays on the file.

use super::discover::PatchKind;

/// The literal pieces of one template line, in order, and whether a tag (or a comment)
/// opens, closes or runs through it.
#[derive(Debug, Default)]
struct Line {
    pieces: Vec<String>,
    tagged: bool,
    starts_literal: bool,
    ends_literal: bool,
}

/// The 1-based line of `template` that wrote line `line` (1-based) of `rendered`, when
/// exactly that can be told from their text; `None` for a literal file, a line past the
/// output's end, or an output line no template line matches.
pub fn template_line(
    kind: PatchKind,
    template: &str,
    rendered: &str,
    line: usize,
) -> Option<usize> {
    if kind == PatchKind::Literal {
        return None;
    }
    let target = rendered.lines().nth(line.checked_sub(1)?)?.trim_end();
    let lines = split(kind, template);
    let mut best: Option<(usize, usize)> = None;
    for (i, l) in lines.iter().enumerate() {
        if !matches(l, target) {
            continue;
        }
        let distance = i.abs_diff(line - 1);
        if best.is_none_or(|(_, d)| distance < d) {
            best = Some((i + 1, distance));
        }
    }
    best.map(|(i, _)| i)
}

/// Whether `l` can have written `target`.
fn matches(l: &Line, target: &str) -> bool {
    if !l.tagged {
        let text = l.pieces.concat();
        return !text.trim().is_empty() && text.trim_end() == target;
    }
    if l.pieces.iter().all(|p| p.trim().is_empty()) {
        return false;
    }
    let mut rest = target;
    let last = l.pieces.len().saturating_sub(1);
    for (k, piece) in l.pieces.iter().enumerate() {
        let piece = if k == last && l.ends_literal {
            piece.trim_end()
        } else {
            piece.as_str()
        };
        if k == 0 && l.starts_literal {
            let Some(after) = rest.strip_prefix(piece) else {
                return false;
            };
            rest = after;
        } else if k == last && l.ends_literal {
            return rest.ends_with(piece);
        } else {
            let Some(at) = rest.find(piece) else {
                return false;
            };
            rest = &rest[at + piece.len()..];
        }
    }
    true
}

/// The opening and closing of the tags of `kind`: Jinja's three, and templatefile's
/// `${ }` and `%{ }` (closed by the `}` that balances their braces; `$${` and `%%{` are
/// literal).
fn split(kind: PatchKind, text: &str) -> Vec<Line> {
    let bytes = text.as_bytes();
    let mut lines = vec![Line {
        starts_literal: true,
        ..Line::default()
    }];
    let mut piece = String::new();
    let mut i = 0;
    // Inside a tag: its closing for Jinja, or its brace depth for templatefile.
    let mut close: Option<&'static [u8]> = None;
    let mut depth = 0usize;
    let flush = |lines: &mut Vec<Line>, piece: &mut String| {
        if !piece.is_empty() {
            let line = lines.last_mut().expect("one line at least");
            line.pieces.push(std::mem::take(piece));
        }
    };
    while i < bytes.len() {
        let b = bytes[i];
        let inside = close.is_some() || depth > 0;
        if b == b'\n' {
            let literal = !inside && !piece.is_empty();
            flush(&mut lines, &mut piece);
            let line = lines.last_mut().expect("one line at least");
            line.ends_literal = literal;
            lines.push(Line {
                starts_literal: !inside,
                tagged: inside,
                ..Line::default()
            });
            i += 1;
            continue;
        }
        if let Some(end) = close {
            if bytes[i..].starts_with(end) {
                close = None;
                i += end.len();
            } else {
                i += 1;
            }
            continue;
        }
        if depth > 0 {
            match b {
                b'{' => depth += 1,
                b'}' => depth -= 1,
                _ => {}
            }
            i += 1;
            continue;
        }
        let open = opening(kind, &bytes[i..]);
        match open {
            Open::Tag(len, end) => {
                if piece.is_empty() && lines.last().is_some_and(|l| l.pieces.is_empty()) {
                    lines.last_mut().expect("one line at least").starts_literal = false;
                }
                flush(&mut lines, &mut piece);
                lines.last_mut().expect("one line at least").tagged = true;
                match end {
                    Some(end) => close = Some(end),
                    None => depth = 1,
                }
                i += len;
            }
            Open::Escaped(len) => {
                piece.push_str(&text[i + 1..i + len]);
                i += len;
            }
            Open::Text => {
                let len = text[i..].chars().next().map_or(1, char::len_utf8);
                piece.push_str(&text[i..i + len]);
                i += len;
            }
        }
    }
    let literal = close.is_none() && depth == 0 && !piece.is_empty();
    flush(&mut lines, &mut piece);
    lines.last_mut().expect("one line at least").ends_literal = literal;
    lines
}

/// What starts at the front of `rest`.
enum Open {
    /// A tag of this many bytes' opening, closed by the given text (Jinja) or by the brace
    /// that balances it (templatefile).
    Tag(usize, Option<&'static [u8]>),
    /// A templatefile escape (`$${`, `%%{`) of this many bytes, written without its first.
    Escaped(usize),
    /// Anything else.
    Text,
}

fn opening(kind: PatchKind, rest: &[u8]) -> Open {
    match kind {
        PatchKind::Jinja => match rest {
            [b'{', b'{', ..] => Open::Tag(2, Some(b"}}")),
            [b'{', b'%', ..] => Open::Tag(2, Some(b"%}")),
            [b'{', b'#', ..] => Open::Tag(2, Some(b"#}")),
            _ => Open::Text,
        },
        PatchKind::Templatefile => match rest {
            [b'$', b'$', b'{', ..] | [b'%', b'%', b'{', ..] => Open::Escaped(3),
            [b'$', b'{', ..] | [b'%', b'{', ..] => Open::Tag(2, None),
            _ => Open::Text,
        },
        PatchKind::Literal => Open::Text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_lines_and_lines_with_values_find_their_template_line() {
        let tpl = "machine:\n  network:\n    interfaces:\n{% for n in nics %}\n      - interface: {{ n }}\n        dhcp: [true\n{% endfor %}\n";
        let out = "machine:\n  network:\n    interfaces:\n      - interface: eth0\n        dhcp: [true\n      - interface: eth1\n        dhcp: [true\n";
        assert_eq!(template_line(PatchKind::Jinja, tpl, out, 5), Some(6));
        assert_eq!(template_line(PatchKind::Jinja, tpl, out, 7), Some(6));
        assert_eq!(template_line(PatchKind::Jinja, tpl, out, 6), Some(5));
        assert_eq!(template_line(PatchKind::Jinja, tpl, out, 2), Some(2));
        // Past the output's end, or a literal file: nothing to say.
        assert_eq!(template_line(PatchKind::Jinja, tpl, out, 99), None);
        assert_eq!(template_line(PatchKind::Literal, out, out, 2), None);
    }

    #[test]
    fn tags_over_several_lines_and_values_written_over_several_lines() {
        let tpl = "a: 1\n{#\n  b: [\n#}\nc: {{ x\n  | upper }}\nd: |\n{{ block }}\n";
        // `  b: [` is inside a comment: it writes nothing.
        assert_eq!(
            template_line(PatchKind::Jinja, tpl, "a: 1\n  b: [\n", 2),
            None
        );
        assert_eq!(
            template_line(PatchKind::Jinja, tpl, "a: 1\nc: X: y\n", 2),
            Some(5)
        );
        // A line only a value wrote matches no template line.
        assert_eq!(
            template_line(PatchKind::Jinja, tpl, "a: 1\nd: |\n  ]\n", 3),
            None
        );
    }

    #[test]
    fn templatefile_tags_balance_braces_and_escapes_are_literal() {
        let tpl = "x: ${ {a = 1}.a }\ny: $${literal}\n%{ if on }\nz: ${v}]\n%{ endif }\n";
        let out = "x: 1\ny: ${literal}\nz: 2]\n";
        assert_eq!(template_line(PatchKind::Templatefile, tpl, out, 1), Some(1));
        assert_eq!(template_line(PatchKind::Templatefile, tpl, out, 2), Some(2));
        assert_eq!(template_line(PatchKind::Templatefile, tpl, out, 3), Some(4));
    }

    #[test]
    fn repeated_lines_take_the_nearest() {
        let tpl = "a:\n  - k: [\nb:\n  - k: [\n";
        let out = "a:\n  - k: [\nb:\n  - k: [\n";
        assert_eq!(template_line(PatchKind::Jinja, tpl, out, 4), Some(4));
        assert_eq!(template_line(PatchKind::Jinja, tpl, out, 2), Some(2));
    }
}
