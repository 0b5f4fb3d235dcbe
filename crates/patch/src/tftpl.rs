//! OpenTofu `templatefile` syntax (`${expr}`, `%{ if }`, `%{ for }`, `$${`
//! and `%%{` escapes, `~` strip markers) turned into minijinja source for the
//! custom syntax in [`syntax`], keeping line numbers so errors point at the
//! original file. HCL operators (`&&`, `||`, `!`, `c ? a : b`, `null`) become
//! their minijinja forms.

use minijinja::syntax::SyntaxConfig;

use talosprov_base::limits::MAX_NESTING;

/// The comment delimiters: templatefile has no comments, so these are control
/// characters that patch files never contain (and are escaped if they do).
const COMMENT_START: &str = "\u{1}#";
const COMMENT_END: &str = "#\u{1}";

/// The minijinja syntax the translated source uses.
///
/// # Panics
/// Never: the delimiters are constants known to be valid.
pub fn syntax() -> SyntaxConfig {
    SyntaxConfig::builder()
        .block_delimiters("%{", "}")
        .variable_delimiters("${", "}")
        .comment_delimiters(COMMENT_START, COMMENT_END)
        .build()
        .expect("constant delimiters are valid")
}

/// A template that is not valid templatefile syntax.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TftplError {
    /// Byte offset in the original text.
    pub offset: usize,
    /// What is wrong.
    pub message: String,
}

/// Translated source, with a map back to offsets in the original text.
#[derive(Debug, Clone)]
pub struct Translated {
    /// minijinja source for [`syntax`].
    pub source: String,
    /// (offset in `source`, offset in the original, length when copied verbatim).
    spans: Vec<(usize, usize, Option<usize>)>,
}

impl Translated {
    /// The offset in the original text for an offset in [`Translated::source`].
    /// Inside a translated `${...}` or `%{...}` it is the start of that tag.
    pub fn original_offset(&self, out: usize) -> usize {
        let i = self.spans.partition_point(|s| s.0 <= out).saturating_sub(1);
        match self.spans.get(i) {
            Some(&(o, s, Some(len))) => s + (out - o).min(len),
            Some(&(_, s, None)) => s,
            None => 0,
        }
    }
}

impl Translated {
    /// An empty translation to build with [`Out`], for a text of about `capacity` bytes.
    pub(super) fn builder(capacity: usize) -> Out {
        Out {
            source: String::with_capacity(capacity + 64),
            spans: Vec::new(),
        }
    }
}

/// A translation being built: text copied verbatim and tags written in its place.
pub(super) struct Out {
    source: String,
    spans: Vec<(usize, usize, Option<usize>)>,
}

impl Out {
    /// The translation built.
    pub(super) fn finish(self) -> Translated {
        Translated {
            source: self.source,
            spans: self.spans,
        }
    }

    /// Copy `text`, which starts at `src` in the original.
    pub(super) fn verbatim(&mut self, text: &str, src: usize) {
        if !text.is_empty() {
            self.spans.push((self.source.len(), src, Some(text.len())));
            self.source.push_str(text);
        }
    }
    /// Write `text` in place of the original at `src`; errors inside it point at `src`.
    pub(super) fn tag(&mut self, text: &str, src: usize) {
        self.spans.push((self.source.len(), src, None));
        self.source.push_str(text);
    }
    /// Text a strip marker removed: nothing is printed, but its line breaks
    /// stay in the source (inside a comment) so line numbers match.
    fn removed(&mut self, text: &str, src: usize) {
        if text.contains('\n') {
            self.tag(&format!("{COMMENT_START}{text}{COMMENT_END}"), src);
        }
    }
    /// Print `literal` as-is through an expression: `${ "${" }`.
    fn literal(&mut self, literal: &str, src: usize) {
        let quoted = serde_json::to_string(literal).unwrap_or_default();
        self.tag(&format!("${{ {quoted} }}"), src);
    }
}

/// One piece of the template, before strip markers are applied.
enum Part {
    /// Literal text, `src[start..end]`.
    Text { start: usize, end: usize },
    /// An escape (`$${`, `%%{`) or a delimiter-like text, printed literally.
    Literal { text: String, at: usize },
    /// A translated `${...}` or `%{...}` tag with its strip markers.
    Tag {
        text: String,
        at: usize,
        left: bool,
        right: bool,
    },
}

/// Translate templatefile text to minijinja source.
///
/// Strip markers follow HCL, where a literal token ends at a line break: `~}`
/// removes the whitespace after the tag up to and including the end of its
/// line; `${~` removes the whitespace before the tag back to the start of its
/// line, or the previous line break when the tag starts a line. The removed
/// line breaks are kept inside minijinja comments so line numbers still match.
///
/// # Errors
/// An unclosed `${` or `%{`, an unknown directive, or a string template inside
/// an expression (`"${x}"`), which is not supported.
pub fn translate(src: &str) -> Result<Translated, TftplError> {
    let parts = split(src)?;
    // Kept range of each text part after stripping.
    let mut kept: Vec<(usize, usize)> = parts
        .iter()
        .map(|p| match p {
            Part::Text { start, end } => (*start, *end),
            Part::Literal { .. } | Part::Tag { .. } => (0, 0),
        })
        .collect();
    for (k, part) in parts.iter().enumerate() {
        let Part::Tag { left, right, .. } = part else {
            continue;
        };
        if *left
            && k > 0
            && let Part::Text { start, end } = parts[k - 1]
        {
            let text = &src[start..end];
            let body = text.strip_suffix('\n').unwrap_or(text);
            let token_start = start + body.rfind('\n').map_or(0, |i| i + 1);
            let token = &src[token_start..end];
            kept[k - 1].1 = token_start + token.trim_end().len();
        }
        if *right && let Some(Part::Text { start, end }) = parts.get(k + 1) {
            let line_end = src[*start..*end].find('\n').map_or(*end, |i| start + i + 1);
            let token = &src[*start..line_end];
            kept[k + 1].0 = line_end - token.trim_start().len();
        }
    }
    let mut out = Translated::builder(src.len());
    for (part, (ks, ke)) in parts.iter().zip(kept) {
        match part {
            Part::Text { start, end } => {
                let ke = ke.max(ks);
                out.removed(&src[*start..ks], *start);
                out.verbatim(&src[ks..ke], ks);
                out.removed(&src[ke..*end], ke);
            }
            Part::Literal { text, at } => out.literal(text, *at),
            Part::Tag { text, at, .. } => out.tag(text, *at),
        }
    }
    Ok(out.finish())
}

fn split(src: &str) -> Result<Vec<Part>, TftplError> {
    let b = src.as_bytes();
    let mut parts = Vec::new();
    let (mut i, mut text_start) = (0, 0);
    let flush = |parts: &mut Vec<Part>, start: usize, end: usize| {
        if end > start {
            parts.push(Part::Text { start, end });
        }
    };
    while i < b.len() {
        let rest = &b[i..];
        let escape = if rest.starts_with(b"$${") {
            Some("${")
        } else if rest.starts_with(b"%%{") {
            Some("%{")
        } else {
            None
        };
        if let Some(lit) = escape {
            flush(&mut parts, text_start, i);
            parts.push(Part::Literal {
                text: lit.to_string(),
                at: i,
            });
            i += 3;
            text_start = i;
        } else if rest.starts_with(b"${") || rest.starts_with(b"%{") {
            flush(&mut parts, text_start, i);
            let end = find_close(src, i + 2)?;
            let body = &src[i + 2..end];
            let (text, left, right) = if b[i] == b'$' {
                interpolation(body, i)?
            } else {
                directive(body, i)?
            };
            parts.push(Part::Tag {
                text,
                at: i,
                left,
                right,
            });
            i = end + 1;
            text_start = i;
        } else if rest.starts_with(COMMENT_START.as_bytes())
            || rest.starts_with(COMMENT_END.as_bytes())
        {
            flush(&mut parts, text_start, i);
            parts.push(Part::Literal {
                text: src[i..i + 2].to_string(),
                at: i,
            });
            i += 2;
            text_start = i;
        } else {
            i += 1;
        }
    }
    flush(&mut parts, text_start, b.len());
    Ok(parts)
}

/// The offset of the `}` closing a tag whose body starts at `start`.
fn find_close(src: &str, start: usize) -> Result<usize, TftplError> {
    let b = src.as_bytes();
    let mut depth = 0usize;
    let mut i = start;
    while i < b.len() {
        match b[i] {
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    if b[i] == b'\\' {
                        i += 1;
                    } else if (b[i] == b'$' || b[i] == b'%') && b.get(i + 1) == Some(&b'{') {
                        return Err(TftplError {
                            offset: i,
                            message: "string templates inside an expression (\"...${...}...\") are not supported; use format() or join()".into(),
                        });
                    }
                    i += 1;
                }
            }
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' => depth = depth.saturating_sub(1),
            b'}' if depth == 0 => return Ok(i),
            b'}' => depth -= 1,
            _ => {}
        }
        i += 1;
    }
    Err(TftplError {
        offset: start - 2,
        message: format!("unclosed {}{{ (no matching }})", &src[start - 2..start - 1]),
    })
}

/// Split a tag body into its strip markers and the inner text.
fn strip_markers(body: &str) -> (bool, &str, bool) {
    let left = body.starts_with('~');
    let inner = if left { &body[1..] } else { body };
    let right = inner.trim_end().ends_with('~');
    let inner = if right {
        let t = inner.trim_end();
        &t[..t.len() - 1]
    } else {
        inner
    };
    (left, inner, right)
}

/// Close a tag, keeping as many line breaks as the original body had.
fn finish(open: &str, inner: String, body: &str) -> String {
    let missing = body
        .matches('\n')
        .count()
        .saturating_sub(inner.matches('\n').count());
    format!("{open} {inner} {}}}", "\n".repeat(missing))
}

fn interpolation(body: &str, at: usize) -> Result<(String, bool, bool), TftplError> {
    let (left, inner, right) = strip_markers(body);
    if inner.trim().is_empty() {
        return Err(TftplError {
            offset: at,
            message: "empty ${} interpolation".into(),
        });
    }
    Ok((finish("${", expression(inner, at)?, body), left, right))
}

fn directive(body: &str, at: usize) -> Result<(String, bool, bool), TftplError> {
    let (left, inner, right) = strip_markers(body);
    let text = inner.trim();
    let (word, rest) = text.split_once(char::is_whitespace).unwrap_or((text, ""));
    let translated = match word {
        "if" => format!("if {}", expression(rest, at)?),
        "else" | "endif" | "endfor" if rest.trim().is_empty() => word.to_string(),
        "for" => {
            let (vars, coll) = rest.split_once(" in ").ok_or_else(|| TftplError {
                offset: at,
                message:
                    "a for directive needs the form %{ for x in list } or %{ for k, v in map }"
                        .into(),
            })?;
            let names: Vec<&str> = vars.split(',').map(str::trim).collect();
            match names.as_slice() {
                [v] => format!("for {v} in tf_values({})", expression(coll, at)?),
                [k, v] => format!("for {k}, {v} in tf_pairs({})", expression(coll, at)?),
                _ => {
                    return Err(TftplError {
                        offset: at,
                        message: "a for directive takes one or two variable names".into(),
                    });
                }
            }
        }
        other => {
            return Err(TftplError {
                offset: at,
                message: format!(
                    "unknown template directive %{{ {other} }} (expected if, else, endif, for, endfor)"
                ),
            });
        }
    };
    Ok((finish("%{", translated, body), left, right))
}

#[derive(Debug, Clone, PartialEq)]
enum Tok<'a> {
    Text(&'a str),
    Open(char),
    Close(char),
    Comma,
    Question,
    Colon,
}

fn tokenize(expr: &str) -> Vec<Tok<'_>> {
    let b = expr.as_bytes();
    let mut toks = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let start = i;
        let tok = match b[i] {
            b'"' | b'\'' => {
                i = super::expr::skip_string(b, i);
                Tok::Text(&expr[start..i])
            }
            b'(' | b'[' | b'{' => {
                i += 1;
                Tok::Open(b[start] as char)
            }
            b')' | b']' | b'}' => {
                i += 1;
                Tok::Close(b[start] as char)
            }
            b',' => {
                i += 1;
                Tok::Comma
            }
            b'?' => {
                i += 1;
                Tok::Question
            }
            b':' => {
                i += 1;
                Tok::Colon
            }
            b'&' if b.get(i + 1) == Some(&b'&') => {
                i += 2;
                Tok::Text(" and ")
            }
            b'|' if b.get(i + 1) == Some(&b'|') => {
                i += 2;
                Tok::Text(" or ")
            }
            b'!' if b.get(i + 1) != Some(&b'=') => {
                i += 1;
                Tok::Text(" not ")
            }
            c if c.is_ascii_alphabetic() || c == b'_' => {
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                    i += 1;
                }
                match &expr[start..i] {
                    "null" => Tok::Text("none"),
                    word => Tok::Text(word),
                }
            }
            _ => {
                // Advance by one whole character.
                i += expr[i..].chars().next().map_or(1, char::len_utf8);
                Tok::Text(&expr[start..i])
            }
        };
        toks.push(tok);
    }
    toks
}

/// Check that an expression's tokens stay within the shape limits of a tag
/// ([`super::budget::MAX_TAG_TERMS`] operators, [`super::budget::MAX_TAG_GROWTH`] of
/// `+` and `*`, brackets [`MAX_NESTING`] deep), so that translating it stays linear
/// and minijinja's recursive compiler stays within its stack.
fn check_shape(toks: &[Tok<'_>], at: usize) -> Result<(), TftplError> {
    use super::budget::{MAX_TAG_GROWTH, MAX_TAG_TERMS};
    let (mut depth, mut terms, mut growth) = (0usize, 0usize, 0usize);
    for t in toks {
        match t {
            Tok::Open(_) => {
                depth += 1;
                terms += 1;
            }
            Tok::Close(_) => depth = depth.saturating_sub(1),
            Tok::Question | Tok::Colon => terms += 1,
            Tok::Text(w) => {
                let w = w.trim();
                if matches!(w, "+" | "*" | "~") {
                    growth += 1;
                }
                if matches!(w, "and" | "or" | "not")
                    || (!w.is_empty() && w.bytes().all(|c| c.is_ascii_punctuation()))
                {
                    terms += 1;
                }
            }
            Tok::Comma => {}
        }
        let problem = if depth > MAX_NESTING {
            format!("the expression nests brackets deeper than {MAX_NESTING} levels")
        } else if terms > MAX_TAG_TERMS {
            format!(
                "the expression holds more than {MAX_TAG_TERMS} operators, calls and subscripts; split it"
            )
        } else if growth > MAX_TAG_GROWTH {
            format!(
                "the expression holds more than {MAX_TAG_GROWTH} of the operators `+` and `*`; split it"
            )
        } else {
            continue;
        };
        return Err(TftplError {
            offset: at,
            message: problem,
        });
    }
    Ok(())
}

/// Translate one HCL expression (of the tag at `at`) to minijinja.
fn expression(expr: &str, at: usize) -> Result<String, TftplError> {
    let toks = tokenize(expr);
    check_shape(&toks, at)?;
    let mut out = String::with_capacity(expr.len() + 16);
    segments(&toks, &mut out);
    Ok(super::expr::wrap_growth(&out, super::budget::guarded_op))
}

/// Comma-separated segments at one nesting level.
fn segments(toks: &[Tok<'_>], out: &mut String) {
    let mut depth = 0usize;
    let mut start = 0;
    for (i, t) in toks.iter().enumerate() {
        match t {
            Tok::Open(_) => depth += 1,
            Tok::Close(_) => depth = depth.saturating_sub(1),
            Tok::Comma if depth == 0 => {
                segment(&toks[start..i], out);
                out.push(',');
                start = i + 1;
            }
            Tok::Text(_) | Tok::Comma | Tok::Question | Tok::Colon => {}
        }
    }
    segment(&toks[start..], out);
}

/// One segment: `c ? a : b` becomes `((a) if (c) else (b))`.
fn segment(toks: &[Tok<'_>], out: &mut String) {
    let mut depth = 0usize;
    let mut question = None;
    let mut pending = 0usize;
    for (i, t) in toks.iter().enumerate() {
        match t {
            Tok::Open(_) => depth += 1,
            Tok::Close(_) => depth = depth.saturating_sub(1),
            Tok::Question if depth == 0 => {
                if question.is_none() {
                    question = Some(i);
                }
                pending += 1;
            }
            Tok::Colon if depth == 0 && pending > 0 => {
                pending -= 1;
                if pending == 0 {
                    let q = question.expect("set with pending");
                    out.push_str("((");
                    segment(&toks[q + 1..i], out);
                    out.push_str(") if (");
                    segment(&toks[..q], out);
                    out.push_str(") else (");
                    segment(&toks[i + 1..], out);
                    out.push_str("))");
                    return;
                }
            }
            Tok::Text(_) | Tok::Comma | Tok::Question | Tok::Colon => {}
        }
    }
    flat(toks, out);
}

fn flat(toks: &[Tok<'_>], out: &mut String) {
    let mut i = 0;
    while i < toks.len() {
        match &toks[i] {
            Tok::Open(c) => {
                out.push(*c);
                let mut depth = 1;
                let mut j = i + 1;
                while j < toks.len() {
                    match toks[j] {
                        Tok::Open(_) => depth += 1,
                        Tok::Close(_) => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        Tok::Text(_) | Tok::Comma | Tok::Question | Tok::Colon => {}
                    }
                    j += 1;
                }
                segments(&toks[i + 1..j.min(toks.len())], out);
                if let Some(Tok::Close(c)) = toks.get(j) {
                    out.push(*c);
                }
                i = j + 1;
                continue;
            }
            Tok::Close(c) => out.push(*c),
            Tok::Comma => out.push(','),
            Tok::Question => out.push('?'),
            Tok::Colon => out.push(':'),
            Tok::Text(t) => out.push_str(t),
        }
        i += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tr(s: &str) -> String {
        translate(s).unwrap().source
    }

    #[test]
    fn interpolations_and_directives_keep_their_delimiters() {
        assert_eq!(tr("a: ${x}\n"), "a: ${ x }\n");
        assert_eq!(
            tr("%{ if a && !b }y%{ endif }"),
            "%{ if a  and   not b }y%{ endif }"
        );
    }

    #[test]
    fn escapes_print_the_delimiters_literally() {
        assert_eq!(tr("$${x} %%{y}"), "${ \"${\" }x} ${ \"%{\" }y}");
    }

    #[test]
    fn conditional_becomes_an_inline_if() {
        assert_eq!(
            tr("${a == null ? \"x\" : b}"),
            "${ (( \"x\" ) if (a == none ) else ( b)) }"
        );
    }

    #[test]
    fn strip_markers_trim_only_to_the_line_end() {
        assert_eq!(
            tr("%{ for v in l ~}  \n  - x"),
            "%{ for v in tf_values(l) }\u{1}#  \n#\u{1}  - x"
        );
    }

    #[test]
    fn line_breaks_inside_tags_are_kept() {
        let t = translate("${\n  x\n}\nnext").unwrap();
        assert_eq!(t.source.matches('\n').count(), 3);
    }

    #[test]
    fn unclosed_tags_are_reported_at_their_start() {
        let err = translate("ok\n${ x").unwrap_err();
        assert_eq!(err.offset, 3);
    }

    #[test]
    fn string_templates_in_expressions_are_refused() {
        assert!(translate("${ \"a${b}\" }").is_err());
    }
}
