//! One bounded loader for every structured input talosprov reads (the
//! topology, machine config patches plain, templated and JSON 6902, add-on
//! manifests local, downloaded and printed by `helm template`, Helm values
//! files): the text's size, its nesting, its alias expansion and its number
//! of nodes are checked before any value is built, and every refusal says
//! where (line and column).
//!
//! YAML is checked on saphyr-parser's events, one pass, no value built; JSON
//! by a byte scan. Only then does serde_yaml_ng or serde_json build the
//! value, so no input can make a command use unbounded memory, time or
//! stack. go-yaml v3, which Talos and Helm use, refuses "excessive aliasing"
//! the same way.

use std::cell::Cell;
use std::collections::HashMap;
use std::fmt;

use saphyr_parser::{Event, Marker, Parser};
use serde::de::{DeserializeOwned, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::diagnostics::Pos;
use crate::limits::{MAX_ALIAS_EXPANSION, MAX_INPUT_BYTES, MAX_NESTING};

/// What one input may cost: its size in bytes and its nodes (scalars,
/// sequences and mappings, mapping keys included, each alias counting the
/// nodes it names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// The most bytes of text.
    pub max_bytes: u64,
    /// The most nodes, aliases expanded.
    pub max_nodes: usize,
}

impl Budget {
    /// A file the user writes (topology, patch, manifest, values file, a
    /// template's output): [`MAX_INPUT_BYTES`] (4 MiB), one million nodes
    /// (a 4 MiB flow list of one-digit numbers has two million; a real
    /// machine config patch has a few hundred).
    pub const INPUT: Budget = Budget {
        max_bytes: MAX_INPUT_BYTES,
        max_nodes: 1_000_000,
    };

    /// A `url` add-on's downloaded manifests: 32 MiB, two million nodes
    /// (the largest operator bundles, CRDs included, are a few MiB and a
    /// few hundred thousand nodes; each node built costs about 80 bytes, so
    /// the nodes, not the bytes, bound the memory a dense file takes).
    pub const DOWNLOAD: Budget = Budget {
        max_bytes: 32 * 1024 * 1024,
        max_nodes: 2_000_000,
    };

    /// A state document or a saved plan (JSON): 256 MiB, one million values (a
    /// 1000-node cluster's state holds some tens of thousands; the machine
    /// configs and chart renderings in it are single strings).
    pub const STATE: Budget = Budget {
        max_bytes: 256 * 1024 * 1024,
        max_nodes: 1_000_000,
    };

    /// What `helm template` prints for one chart: 64 MiB, two million nodes
    /// (Cilium's chart renders to about 1 MiB and 50,000 nodes).
    pub const HELM_OUTPUT: Budget = Budget {
        max_bytes: 64 * 1024 * 1024,
        max_nodes: 2_000_000,
    };
}

/// Which bound an input broke, or that it is not valid YAML or JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Problem {
    /// Larger than [`Budget::max_bytes`].
    TooLarge,
    /// Collections nested deeper than [`MAX_NESTING`].
    TooDeep,
    /// Aliases that expand to more than [`MAX_ALIAS_EXPANSION`] characters.
    TooManyAliases,
    /// More nodes than [`Budget::max_nodes`].
    TooManyNodes,
    /// A syntax error (or a value of the wrong shape for what was asked).
    Syntax,
}

/// Why an input was refused, and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    /// 1-based line and column (in characters) of the offending construct:
    /// the collection or alias beyond a bound, the syntax error; line 1,
    /// column 1 when it is about the whole text (its size).
    pub pos: Pos,
    /// Which bound, or a syntax error.
    pub problem: Problem,
    /// What is wrong, for the operator, without the position.
    pub message: String,
}

impl Located {
    /// Whether a bound refused the input (as opposed to a syntax error):
    /// diagnostics use `T043 input-limit`'s wording for these.
    pub fn is_limit(&self) -> bool {
        self.problem != Problem::Syntax
    }
}

impl fmt::Display for Located {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "line {} column {}: {}",
            self.pos.line, self.pos.column, self.message
        )
    }
}

impl std::error::Error for Located {}

fn to_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// 1-based line and column (in characters) of a byte offset in `text`.
pub fn pos_of_offset(text: &str, offset: usize) -> Pos {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text.as_bytes()[..offset];
    let line = before.iter().filter(|b| **b == b'\n').count() + 1;
    let start = before
        .iter()
        .rposition(|b| *b == b'\n')
        .map_or(0, |i| i + 1);
    let column = text[start..offset].chars().count() + 1;
    Pos::new(to_u32(line), to_u32(column))
}

fn too_large(text: &str, budget: Budget) -> Result<(), Located> {
    if text.len() as u64 <= budget.max_bytes {
        return Ok(());
    }
    Err(Located {
        pos: Pos::new(1, 1),
        problem: Problem::TooLarge,
        message: format!(
            "it is {} bytes, over the {} MiB limit for this input",
            text.len(),
            budget.max_bytes / (1024 * 1024)
        ),
    })
}

fn too_deep(pos: Pos) -> Located {
    Located {
        pos,
        problem: Problem::TooDeep,
        message: format!(
            "the YAML nests deeper than {MAX_NESTING} levels; no topology, machine config \
             patch, manifest or values file needs that many"
        ),
    }
}

fn too_many_nodes(pos: Pos, budget: Budget) -> Located {
    Located {
        pos,
        problem: Problem::TooManyNodes,
        message: format!(
            "it has more than {} values (aliases expanded), over the limit for this input",
            budget.max_nodes
        ),
    }
}

fn marker_pos(m: &Marker) -> Pos {
    Pos::new(to_u32(m.line()), to_u32(m.col() + 1))
}

/// Check a YAML text (one or more documents) against `budget`,
/// [`MAX_NESTING`] and [`MAX_ALIAS_EXPANSION`] by its parser events, before
/// anything is built: each alias costs the text and the nodes of what it
/// names, aliases inside that included, so nested "billion laughs" anchors
/// count as they would expand. Time and memory are linear in the text.
///
/// Syntax errors are left to the YAML loader (serde_yaml_ng, whose go-yaml
/// heritage accepts a little more than saphyr-parser); a text saphyr-parser
/// cannot read to its end is checked instead by a byte scan of its flow
/// collections and a pass of serde_yaml_ng that counts nodes (aliases
/// replayed) and builds nothing.
///
/// # Errors
/// [`Located`] at the first collection, alias or node beyond a bound.
pub fn check_yaml(text: &str, budget: Budget) -> Result<(), Located> {
    too_large(text, budget)?;
    match scan_events(text, budget)? {
        Scan::Complete => Ok(()),
        Scan::SyntaxError => {
            flow_depth(text)?;
            count_nodes(text, budget)
        }
    }
}

/// How the event scan ended.
enum Scan {
    /// Every event was read.
    Complete,
    /// saphyr-parser stopped at a syntax error, before the end.
    SyntaxError,
}

fn scan_events(text: &str, budget: Budget) -> Result<Scan, Located> {
    struct Open {
        anchor: usize,
        start: usize,
        /// Nodes counted (aliases expanded) when it opened.
        nodes_before: usize,
        /// Text that aliases inside this collection add.
        expanded: usize,
    }
    let mut open: Vec<Open> = Vec::new();
    // Anchor id -> (text size with its aliases expanded, nodes).
    let mut anchors: HashMap<usize, (usize, usize)> = HashMap::new();
    let mut alias_text = 0usize;
    let mut nodes = 0usize;
    for event in Parser::new_from_str(text) {
        let (event, span) = match event {
            Ok(e) => e,
            // saphyr-parser stops flow collections nested some hundreds
            // deep, before it emits their events: the byte scan finds the 65th level.
            Err(e) if e.info().contains("recursion limit") => {
                flow_depth(text)?;
                return Err(too_deep(marker_pos(e.marker())));
            }
            Err(_) => return Ok(Scan::SyntaxError),
        };
        let added = match event {
            Event::SequenceStart(anchor, _) | Event::MappingStart(anchor, _) => {
                if open.len() >= MAX_NESTING {
                    return Err(too_deep(marker_pos(&span.start)));
                }
                open.push(Open {
                    anchor,
                    start: span.start.index(),
                    nodes_before: nodes,
                    expanded: 0,
                });
                1
            }
            Event::SequenceEnd | Event::MappingEnd => {
                if let Some(done) = open.pop() {
                    let size = span.end.index().saturating_sub(done.start) + done.expanded;
                    if done.anchor > 0 {
                        anchors.insert(done.anchor, (size, nodes - done.nodes_before));
                    }
                    if let Some(parent) = open.last_mut() {
                        parent.expanded = parent.expanded.saturating_add(done.expanded);
                    }
                }
                0
            }
            Event::Scalar(value, _, anchor, _) => {
                if anchor > 0 {
                    anchors.insert(anchor, (value.len() + 1, 1));
                }
                1
            }
            Event::Alias(id) => {
                let (size, count) = anchors.get(&id).copied().unwrap_or((1, 1));
                alias_text = alias_text.saturating_add(size);
                if let Some(parent) = open.last_mut() {
                    parent.expanded = parent.expanded.saturating_add(size);
                }
                if alias_text > MAX_ALIAS_EXPANSION {
                    return Err(Located {
                        pos: marker_pos(&span.start),
                        problem: Problem::TooManyAliases,
                        message: format!(
                            "the YAML's aliases expand to more than {} KiB of text (excessive \
                             aliasing); write the values out, or use fewer aliases",
                            MAX_ALIAS_EXPANSION / 1024
                        ),
                    });
                }
                count
            }
            Event::Nothing
            | Event::StreamStart
            | Event::StreamEnd
            | Event::DocumentStart(_)
            | Event::DocumentEnd => 0,
        };
        nodes = nodes.saturating_add(added);
        if nodes > budget.max_nodes {
            return Err(too_many_nodes(marker_pos(&span.start), budget));
        }
    }
    Ok(Scan::Complete)
}

/// The flow collections (`[`, `{`) of a YAML or JSON text, counted by a
/// byte scan that skips comments and quoted scalars: deeper than
/// [`MAX_NESTING`] is refused. A conservative guard for texts the event scan
/// could not read to their end (go-yaml-style parsers take time quadratic in
/// the depth of flow collections).
fn flow_depth(text: &str) -> Result<(), Located> {
    let bytes = text.as_bytes();
    let mut depth = 0usize;
    let mut i = 0;
    // The last byte that is not a space or tab: whether a quote opens a scalar.
    let mut last = b'\n';
    while i < bytes.len() {
        let b = bytes[i];
        match b {
            b'#' if matches!(
                bytes.get(i.wrapping_sub(1)),
                None | Some(b' ' | b'\t' | b'\n')
            ) =>
            {
                while i < bytes.len() && bytes[i] != b'\n' {
                    i += 1;
                }
                continue;
            }
            b'"' | b'\'' if matches!(last, b'\n' | b':' | b'-' | b'?' | b',' | b'[' | b'{') => {
                i = skip_quoted(bytes, i);
                last = b;
                continue;
            }
            b'[' | b'{' => {
                depth += 1;
                if depth > MAX_NESTING {
                    return Err(too_deep(pos_of_offset(text, i)));
                }
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
        if b != b' ' && b != b'\t' {
            last = b;
        }
        i += 1;
    }
    Ok(())
}

/// The offset after the quoted scalar opening at `start`: `"` with `\`
/// escapes, `'` with `''`.
fn skip_quoted(bytes: &[u8], start: usize) -> usize {
    let quote = bytes[start];
    let mut i = start + 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if quote == b'"' => i += 2,
            b'\'' if quote == b'\'' && bytes.get(i + 1) == Some(&b'\'') => i += 2,
            c if c == quote => return i + 1,
            _ => i += 1,
        }
    }
    i
}

/// A serde_yaml_ng error as [`Located`]: its message without the " at line
/// L column C" serde_yaml_ng appends, its position (line 1 when it has none).
pub fn yaml_error(e: &serde_yaml_ng::Error) -> Located {
    let loc = e.location();
    let message = e.to_string();
    let message = match message.find(" at line ") {
        Some(i) if loc.is_some() => message[..i].to_string(),
        _ => message,
    };
    Located {
        pos: loc.map_or(Pos::new(1, 1), |l| {
            Pos::new(to_u32(l.line()), to_u32(l.column()))
        }),
        problem: Problem::Syntax,
        message,
    }
}

/// Count the nodes serde_yaml_ng reads from `text` (aliases replayed), building nothing, and
/// stop past the budget: the guard when saphyr-parser could not read the text to its end.
fn count_nodes(text: &str, budget: Budget) -> Result<(), Located> {
    let count = Cell::new(0usize);
    for de in serde_yaml_ng::Deserializer::from_str(text) {
        let seed = Counter {
            count: &count,
            max: budget.max_nodes,
        };
        if let Err(e) = seed.deserialize(de) {
            if count.get() > budget.max_nodes {
                let at = yaml_error(&e).pos;
                return Err(too_many_nodes(at, budget));
            }
            // A syntax error: the loader reports it.
            return Ok(());
        }
    }
    Ok(())
}

/// A serde seed that counts the nodes it is given and fails past `max`.
#[derive(Clone, Copy)]
struct Counter<'a> {
    count: &'a Cell<usize>,
    max: usize,
}

impl Counter<'_> {
    fn one<E: serde::de::Error>(self) -> Result<(), E> {
        self.count.set(self.count.get() + 1);
        if self.count.get() > self.max {
            return Err(E::custom("too many nodes"));
        }
        Ok(())
    }
}

impl<'de> DeserializeSeed<'de> for Counter<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Counter<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any YAML value")
    }

    fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<(), E> {
        self.one()
    }
    fn visit_i64<E: serde::de::Error>(self, _: i64) -> Result<(), E> {
        self.one()
    }
    fn visit_u64<E: serde::de::Error>(self, _: u64) -> Result<(), E> {
        self.one()
    }
    fn visit_f64<E: serde::de::Error>(self, _: f64) -> Result<(), E> {
        self.one()
    }
    fn visit_str<E: serde::de::Error>(self, _: &str) -> Result<(), E> {
        self.one()
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<(), E> {
        self.one()
    }
    fn visit_none<E: serde::de::Error>(self) -> Result<(), E> {
        self.one()
    }
    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
    fn visit_newtype_struct<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
    fn visit_enum<A: serde::de::EnumAccess<'de>>(self, data: A) -> Result<(), A::Error> {
        use serde::de::VariantAccess as _;
        self.one()?;
        let ((), variant) = data.variant_seed(self)?;
        variant.newtype_variant_seed(self)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        self.one()?;
        while seq.next_element_seed(self)?.is_some() {}
        Ok(())
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        self.one()?;
        while map.next_key_seed(self)?.is_some() {
            map.next_value_seed(self)?;
        }
        Ok(())
    }
}

/// Check `text` ([`check_yaml`]) and read its YAML documents, empty (null)
/// ones skipped: for the topology, patches, manifests and templates' output.
///
/// # Errors
/// [`Located`]: the first bound broken, or the first syntax error.
pub fn yaml_documents(text: &str, budget: Budget) -> Result<Vec<serde_yaml_ng::Value>, Located> {
    use serde::Deserialize as _;
    check_yaml(text, budget)?;
    let mut out = Vec::new();
    for de in serde_yaml_ng::Deserializer::from_str(text) {
        let value = serde_yaml_ng::Value::deserialize(de).map_err(|e| yaml_error(&e))?;
        if !value.is_null() {
            out.push(value);
        }
    }
    Ok(out)
}

/// Check `text` ([`check_yaml`]) and read it as one YAML document of type
/// `T` (a Helm values file as `serde_json::Value`, say); `None` for an
/// empty document.
///
/// # Errors
/// [`Located`]: the first bound broken, a syntax error, more than one
/// document, or a value `T` cannot take.
pub fn yaml_value<T: DeserializeOwned>(text: &str, budget: Budget) -> Result<Option<T>, Located> {
    check_yaml(text, budget)?;
    serde_yaml_ng::from_str::<Option<T>>(text).map_err(|e| yaml_error(&e))
}

/// Check a JSON text against `budget` and [`MAX_NESTING`] by one byte scan,
/// before anything is built: arrays and objects opened, strings and other
/// scalars counted as nodes (object keys included).
///
/// # Errors
/// [`Located`] at the first array or object nested too deep, or the first
/// value past the node budget. Syntax errors are left to [`json_value`].
pub fn check_json(text: &str, budget: Budget) -> Result<(), Located> {
    check_json_within(text, budget, MAX_NESTING)
}

/// [`check_json`] with `max_depth` levels of nesting allowed.
fn check_json_within(text: &str, budget: Budget, max_depth: usize) -> Result<(), Located> {
    too_large(text, budget)?;
    let bytes = text.as_bytes();
    let (mut depth, mut nodes, mut i) = (0usize, 0usize, 0usize);
    let mut in_scalar = false;
    while i < bytes.len() {
        let b = bytes[i];
        let starts_node = match b {
            b'[' | b'{' => {
                depth += 1;
                if depth > max_depth {
                    return Err(Located {
                        message: format!("the JSON nests deeper than {max_depth} levels"),
                        ..too_deep(pos_of_offset(text, i))
                    });
                }
                in_scalar = false;
                true
            }
            b']' | b'}' | b',' | b':' | b' ' | b'\t' | b'\n' | b'\r' => {
                if matches!(b, b']' | b'}') {
                    depth = depth.saturating_sub(1);
                }
                in_scalar = false;
                false
            }
            b'"' => {
                let end = skip_quoted(bytes, i);
                let at = i;
                i = end;
                in_scalar = false;
                nodes += 1;
                if nodes > budget.max_nodes {
                    return Err(too_many_nodes(pos_of_offset(text, at), budget));
                }
                continue;
            }
            _ => !std::mem::replace(&mut in_scalar, true),
        };
        if starts_node {
            nodes += 1;
            if nodes > budget.max_nodes {
                return Err(too_many_nodes(pos_of_offset(text, i), budget));
            }
        }
        i += 1;
    }
    Ok(())
}

/// [`check_json`] on the bytes of a document talosprov writes itself (a state,
/// a saved plan), which may wrap user values (Helm values, say) already nested
/// [`MAX_NESTING`] deep: twice that nesting is allowed. Text that is not UTF-8
/// is a syntax error at its first invalid byte, left for the parser to report.
///
/// # Errors
/// As [`check_json`].
pub fn check_json_bytes(bytes: &[u8], budget: Budget) -> Result<(), Located> {
    let valid = match std::str::from_utf8(bytes) {
        Ok(text) => text,
        Err(e) => std::str::from_utf8(&bytes[..e.valid_up_to()]).unwrap_or_default(),
    };
    if bytes.len() as u64 > budget.max_bytes {
        return Err(Located {
            pos: Pos::new(1, 1),
            problem: Problem::TooLarge,
            message: format!(
                "it is {} bytes, over the {} MiB limit for this input",
                bytes.len(),
                budget.max_bytes / (1024 * 1024)
            ),
        });
    }
    check_json_within(valid, budget, 2 * MAX_NESTING)
}

/// Check `text` ([`check_json`]) and read it as JSON of type `T` (an RFC
/// 6902 patch, say).
///
/// # Errors
/// [`Located`]: the first bound broken, or serde_json's error (syntax, or a
/// value `T` cannot take) at its line and column.
pub fn json_value<T: DeserializeOwned>(text: &str, budget: Budget) -> Result<T, Located> {
    check_json(text, budget)?;
    serde_json::from_str(text).map_err(|e| Located {
        pos: Pos::new(to_u32(e.line().max(1)), to_u32(e.column().max(1))),
        problem: Problem::Syntax,
        message: {
            let m = e.to_string();
            match m.find(" at line ") {
                Some(i) => m[..i].to_string(),
                None => m,
            }
        },
    })
}

#[cfg(test)]
#[path = "load_tests.rs"]
mod tests;
