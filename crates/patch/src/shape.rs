//! The shape of a Jinja template, checked before minijinja compiles it, and the checks it
//! gets. minijinja parses a chain such as `1+1+…`, `x|upper|upper…` or `.a.a…` into a tree
//! as deep as the chain is long, and compiles, evaluates and drops that tree recursively: a
//! tag of 100,000 terms overflows the stack. So each tag is limited to [`MAX_TAG_TERMS`]
//! operators, filters, calls and subscripts, to [`MAX_TAG_GROWTH`] of the operators that
//! build a larger value from smaller ones (`~`, `+`, `*`), and its brackets to
//! [`crate::limits::MAX_NESTING`] levels. A `{% set %}` and a macro get a call right after
//! them that measures what they bound ([`super::budget`]): a string doubled in a loop stops
//! at the budget, not when memory runs out. And each `a * b`, `a ~ b` and `a + b` becomes a
//! call that refuses a result over the budget before minijinja builds it ([`super::expr`]).

use super::budget::{BIND_CHECK, MAX_TAG_GROWTH, MAX_TAG_TERMS, guarded_op};
use super::expr::{Growth, skip_string};
use super::tftpl::{TftplError, Translated};
use talosprov_base::limits::MAX_NESTING;

/// What [`scan_tag`] found in one tag's body.
#[derive(Debug, Default)]
struct Tag {
    terms: usize,
    growth: usize,
    /// The names a `set` or a macro binds, to be measured after the tag.
    binds: Vec<String>,
    /// Where the tag's closing delimiter ends.
    end: usize,
    /// Whether the tag ends with `-%}` (whitespace after it is stripped).
    strip_after: bool,
    /// Its growing operations ([`super::expr::growth_ops`]).
    ops: Vec<(Growth, usize, usize, usize)>,
}

fn error(offset: usize, message: String) -> TftplError {
    TftplError { offset, message }
}

/// Scan the body of a tag from `start` (just past its `{{`/`{%`) to its closing `close`.
/// `None` for a tag never closed, which minijinja reports.
fn scan_tag(
    src: &str,
    start: usize,
    close: &[u8; 2],
    at: usize,
) -> Result<Option<Tag>, TftplError> {
    let b = src.as_bytes();
    let mut tag = Tag::default();
    let mut depth = 0usize;
    let mut i = start;
    let mut words: Vec<&str> = Vec::new();
    while i < b.len() {
        let c = b[i];
        if depth == 0 && b[i..].starts_with(close) {
            tag.strip_after = i > start && b[i - 1] == b'-';
            tag.end = i + 2;
            tag.binds = binds(&words, &src[start..i]);
            let from = start + usize::from(matches!(b.get(start), Some(b'-' | b'+')));
            let to = i - usize::from(i > from && matches!(b[i - 1], b'-' | b'+'));
            tag.ops = super::expr::growth_ops(&src[from..to.max(from)], from);
            return Ok(Some(tag));
        }
        match c {
            b'"' | b'\'' => {
                i = skip_string(b, i);
                continue;
            }
            b'(' | b'[' | b'{' => {
                depth += 1;
                tag.terms += 1;
                if depth > MAX_NESTING {
                    return Err(error(
                        at,
                        format!("the tag nests brackets deeper than {MAX_NESTING} levels"),
                    ));
                }
            }
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            b'~' | b'+' | b'*' => {
                tag.terms += 1;
                tag.growth += 1;
                if b.get(i + 1) == Some(&b'*') {
                    i += 1;
                }
            }
            b'|' | b'.' | b'-' | b'/' | b'%' | b'<' | b'>' | b'=' | b'!' => tag.terms += 1,
            c if c.is_ascii_alphabetic() || c == b'_' => {
                let s = i;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                    i += 1;
                }
                let word = &src[s..i];
                if matches!(word, "and" | "or" | "not" | "in" | "is" | "if" | "else") {
                    tag.terms += 1;
                }
                if words.len() < 2 {
                    words.push(word);
                }
                continue;
            }
            _ => {}
        }
        if tag.terms > MAX_TAG_TERMS {
            return Err(error(
                at,
                format!(
                    "the tag holds more than {MAX_TAG_TERMS} operators, filters, calls and \
                     subscripts; split the expression with {{% set %}}"
                ),
            ));
        }
        if tag.growth > MAX_TAG_GROWTH {
            return Err(error(
                at,
                format!(
                    "the tag holds more than {MAX_TAG_GROWTH} of the operators `~`, `+` and \
                     `*`; build the value in several steps with {{% set %}}"
                ),
            ));
        }
        i += 1;
    }
    Ok(None)
}

/// Split `text` at the commas outside brackets and strings.
fn top_level_commas(text: &str) -> Vec<&str> {
    let b = text.as_bytes();
    let (mut out, mut depth, mut start, mut i) = (Vec::new(), 0usize, 0, 0);
    while i < b.len() {
        match b[i] {
            b'"' | b'\'' => {
                i = skip_string(b, i);
                continue;
            }
            b'(' | b'[' | b'{' => depth += 1,
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            b',' if depth == 0 => {
                out.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        i += 1;
    }
    out.push(&text[start..]);
    out
}

/// The leading identifier of `text` (`ns` of `ns.a`, `a` of `(a`).
fn leading_name(text: &str) -> Option<String> {
    let t = text.trim_start_matches(|c: char| c.is_whitespace() || c == '(');
    let name: String = t
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty() && !name.starts_with(|c: char| c.is_ascii_digit())).then_some(name)
}

/// The names a `{% set a, b = … %}` or `{% macro m(a, b=1) %}` binds.
fn binds(words: &[&str], body: &str) -> Vec<String> {
    let body = body.trim_start_matches(['-', '+']).trim_start();
    match words.first().copied() {
        Some("set") => {
            let rest = &body[3..];
            let Some(eq) = assignment(rest) else {
                return Vec::new();
            };
            top_level_commas(&rest[..eq])
                .into_iter()
                .filter_map(leading_name)
                .collect()
        }
        Some("macro") => {
            let Some((_, params)) = body.split_once('(') else {
                return Vec::new();
            };
            let params = params.rsplit_once(')').map_or(params, |(p, _)| p);
            top_level_commas(params)
                .into_iter()
                .filter_map(|p| leading_name(p.split('=').next().unwrap_or_default()))
                .collect()
        }
        Some(_) | None => Vec::new(),
    }
}

/// The offset of the `=` of an assignment (not `==`, `<=`, `>=`, `!=`), outside strings.
fn assignment(text: &str) -> Option<usize> {
    let b = text.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'"' | b'\'' => {
                i = skip_string(b, i);
                continue;
            }
            b'=' if b.get(i + 1) != Some(&b'=')
                && !matches!(
                    i.checked_sub(1).map(|p| b[p]),
                    Some(b'=' | b'<' | b'>' | b'!')
                ) =>
            {
                return Some(i);
            }
            _ => {}
        }
        i += 1;
    }
    None
}

/// The offset just past the `{% endraw %}` that ends a raw block starting its body at `from`.
fn end_of_raw(src: &str, from: usize) -> usize {
    let mut i = from;
    while let Some(k) = src[i..].find("{%") {
        let s = i + k + 2;
        let body = src[s..].trim_start_matches(['-', '+']).trim_start();
        if body.starts_with("endraw") {
            return src[s..].find("%}").map_or(src.len(), |e| s + e + 2);
        }
        i = s;
    }
    src.len()
}

/// Check the shape of a Jinja template and add the binding checks; the result maps
/// offsets back to `src` for error messages.
///
/// # Errors
/// A tag over [`MAX_TAG_TERMS`] or [`MAX_TAG_GROWTH`], or nesting brackets deeper than
/// [`MAX_NESTING`], at the tag's offset.
pub fn jinja(src: &str) -> Result<Translated, TftplError> {
    let b = src.as_bytes();
    let mut out = Translated::builder(src.len());
    let (mut i, mut copied) = (0usize, 0usize);
    while let Some(k) = src[i..].find('{') {
        let at = i + k;
        let (close, is_block): (&[u8; 2], bool) = match b.get(at + 1) {
            Some(b'{') => (b"}}", false),
            Some(b'%') => (b"%}", true),
            Some(b'#') => {
                i = src[at..].find("#}").map_or(src.len(), |e| at + e + 2);
                continue;
            }
            _ => {
                i = at + 1;
                continue;
            }
        };
        let Some(tag) = scan_tag(src, at + 2, close, at)? else {
            break;
        };
        let body = src[at + 2..tag.end - 2]
            .trim_start_matches(['-', '+'])
            .trim_start();
        if is_block
            && body.starts_with("raw")
            && !body[3..].starts_with(|c: char| c.is_alphanumeric() || c == '_')
        {
            i = end_of_raw(src, tag.end);
            continue;
        }
        i = tag.end;
        // Edits in source order: closers before openers before the replaced `*`; of two
        // openers at one byte, the outer (recorded later) first.
        let mut edits: Vec<(usize, u8, isize, String, usize)> = Vec::new();
        for (k, &(growth, left, op, right)) in tag.ops.iter().enumerate() {
            edits.push((
                left,
                1,
                -(k as isize),
                format!("{}(", guarded_op(growth)),
                0,
            ));
            edits.push((op, 2, 0, ",".into(), 1));
            edits.push((right, 0, 0, ")".into(), 0));
        }
        if !tag.binds.is_empty() {
            let names: Vec<String> = tag.binds.iter().map(|n| format!("{n:?}")).collect();
            let (open, shut) = if tag.strip_after {
                ("{{-", "-}}")
            } else {
                ("{{", "}}")
            };
            let check = format!("{open} {BIND_CHECK}({}) {shut}", names.join(", "));
            edits.push((i, 3, 0, check, 0));
        }
        edits.sort_by_key(|e| (e.0, e.1, e.2));
        for (pos, _, _, text, skip) in edits {
            out.verbatim(&src[copied..pos], copied);
            out.tag(&text, pos);
            copied = pos + skip;
        }
    }
    out.verbatim(&src[copied..], copied);
    Ok(out.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_and_macros_get_a_check_and_offsets_map_back() {
        let src =
            "a\n{% set x, ns.y = 1, 2 -%}\n{% macro m(p, q=3) %}{{ p }}{% endmacro %}{{ '{' }}";
        let t = jinja(src).unwrap();
        assert!(
            t.source
                .contains("{% set x, ns.y = 1, 2 -%}{{- __talosprov_bound(\"x\", \"ns\") -}}"),
            "{}",
            t.source
        );
        assert!(
            t.source
                .contains("{% macro m(p, q=3) %}{{ __talosprov_bound(\"p\", \"q\") }}")
        );
        let last = t.source.rfind("{{ '{' }}").unwrap();
        assert_eq!(t.original_offset(last), src.rfind("{{ '{' }}").unwrap());
    }

    #[test]
    fn long_chains_are_refused_at_their_tag() {
        for chain in [
            "1+1".to_owned() + &"+1".repeat(100_000),
            "x".to_owned() + &"|upper".repeat(100_000),
            "not ".repeat(100_000) + "x",
            "x".to_owned() + &".a".repeat(100_000),
            "'a'".to_owned() + &"~'a'".repeat(40),
            "(".repeat(100_000) + "1" + &")".repeat(100_000),
        ] {
            let src = format!("ok\n{{{{ {chain} }}}}");
            let e = jinja(&src).unwrap_err();
            assert_eq!(e.offset, 3, "{}", e.message);
        }
    }

    #[test]
    fn ordinary_tags_and_raw_blocks_pass_unchanged() {
        let src =
            "{% raw %}{{ 1+1+1 }}{% endraw %}{{ a - 1 | upper }}{# c #}{% if x == 1 %}y{% endif %}";
        assert_eq!(jinja(src).unwrap().source, src);
        let grown = jinja("{{ a ~ '-' ~ b | upper }}").unwrap().source;
        assert_eq!(
            grown,
            "{{ __talosprov_concat(__talosprov_concat(a , '-') , b | upper) }}"
        );
    }
}
