//! A machine config as a list of YAML documents (the v1alpha1 document plus
//! typed documents such as `HostnameConfig`), read and written the way Talos
//! identifies them: by `apiVersion`, `kind` and `name`.

use serde_yaml_ng::{Mapping, Value};
use std::fmt;

/// The kind Talos gives the legacy v1alpha1 document, which has no `kind` key.
pub const V1ALPHA1: &str = "v1alpha1";

/// Keys that mark a document as the legacy v1alpha1 document
/// (`configloader/internal/decoder/decoder.go`).
const V1ALPHA1_MARKERS: [&str; 4] = ["machine", "cluster", "debug", "persist"];

/// A machine config: one or more YAML documents, each a mapping, in file order.
///
/// Key order inside every document is kept as read, so a patched config prints
/// in the order of the original with new keys after the existing ones.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MachineConfig {
    /// The documents, in order. Each one is a `Value::Mapping`.
    pub documents: Vec<Value>,
}

/// Why a machine config (or a strategic-merge patch) could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DocumentError {
    /// The text is not YAML. `line` and `column` are 1-based, when known.
    #[error("{}invalid YAML: {message}", location(*line, *column))]
    Yaml {
        /// 1-based line of the problem.
        line: Option<usize>,
        /// 1-based column of the problem.
        column: Option<usize>,
        /// The parser's message.
        message: String,
    },
    /// A document is a list or a scalar rather than a mapping.
    #[error("document {index} is not a mapping (expected a YAML document with keys)")]
    NotAMapping {
        /// 1-based position of the document in the file.
        index: usize,
    },
    /// A document has neither v1alpha1 keys nor `kind`.
    #[error(
        "document {index}: missing kind (and it has none of the v1alpha1 keys machine, cluster, debug, persist)"
    )]
    MissingKind {
        /// 1-based position of the document in the file.
        index: usize,
    },
    /// A typed document has `kind` but no `apiVersion`.
    #[error("document {index}: missing apiVersion for kind {kind}")]
    MissingApiVersion {
        /// 1-based position of the document in the file.
        index: usize,
        /// The document's kind.
        kind: String,
    },
    /// Two documents share `apiVersion/kind/name`.
    #[error("duplicate document {id} is not allowed")]
    Duplicate {
        /// The repeated identity.
        id: DocumentId,
    },
}

fn location(line: Option<usize>, column: Option<usize>) -> String {
    match (line, column) {
        (Some(l), Some(c)) => format!("line {l} column {c}: "),
        (Some(l), None) => format!("line {l}: "),
        _ => String::new(),
    }
}

impl DocumentError {
    /// Build from a serde_yaml_ng error, keeping its location.
    pub fn from_yaml(e: &serde_yaml_ng::Error) -> Self {
        let loc = e.location();
        let message = e.to_string();
        // serde_yaml_ng appends " at line L column C" to its message; the
        // location is carried separately.
        let message = match message.find(" at line ") {
            Some(i) if loc.is_some() => message[..i].to_string(),
            _ => message,
        };
        DocumentError::Yaml {
            line: loc.as_ref().map(|l| l.line()),
            column: loc.as_ref().map(|l| l.column()),
            message,
        }
    }
}

/// A document's identity for matching patch documents against config documents:
/// `apiVersion/kind[/name]`; the v1alpha1 document is `/v1alpha1`
/// (`configpatcher/strategic.go`, `documentID`).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DocumentId {
    /// `apiVersion`, empty for the v1alpha1 document.
    pub api_version: String,
    /// `kind`, or `v1alpha1` for the legacy document.
    pub kind: String,
    /// `name`, for named documents.
    pub name: Option<String>,
}

impl DocumentId {
    /// The identity of the legacy v1alpha1 document.
    pub fn v1alpha1() -> Self {
        DocumentId {
            api_version: String::new(),
            kind: V1ALPHA1.to_string(),
            name: None,
        }
    }

    /// Whether this is the legacy v1alpha1 document.
    pub fn is_v1alpha1(&self) -> bool {
        self.api_version.is_empty() && self.kind == V1ALPHA1
    }
}

impl fmt::Display for DocumentId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.api_version, self.kind)?;
        if let Some(name) = &self.name {
            write!(f, "/{name}")?;
        }
        Ok(())
    }
}

/// The string value of `key` in a mapping, when it is a scalar.
pub(crate) fn scalar_field(map: &Mapping, key: &str) -> Option<String> {
    map.get(key).and_then(scalar_text)
}

/// The text of a scalar (string, number or bool), as YAML would print it plain.
pub fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        Value::Tagged(t) => scalar_text(&t.value),
        Value::Null | Value::Sequence(_) | Value::Mapping(_) => None,
    }
}

/// Identify a document the way Talos's decoder does: a document with any of the
/// v1alpha1 keys (and no `kind`) is the v1alpha1 document; any other needs
/// `apiVersion` and `kind`.
///
/// # Errors
/// [`DocumentError::MissingKind`] or [`DocumentError::MissingApiVersion`];
/// `index` is the 1-based position used in the message.
pub fn identify(map: &Mapping, index: usize) -> Result<DocumentId, DocumentError> {
    let kind = scalar_field(map, "kind").unwrap_or_default();
    let api_version = scalar_field(map, "apiVersion").unwrap_or_default();
    let legacy = V1ALPHA1_MARKERS.iter().any(|k| map.contains_key(*k));
    if kind.is_empty() {
        if legacy || api_version == V1ALPHA1 {
            return Ok(DocumentId::v1alpha1());
        }
        return Err(DocumentError::MissingKind { index });
    }
    if api_version.is_empty() {
        return Err(DocumentError::MissingApiVersion { index, kind });
    }
    let name = scalar_field(map, "name").filter(|n| !n.is_empty());
    Ok(DocumentId {
        api_version,
        kind,
        name,
    })
}

/// Split YAML text into its documents, skipping empty (null) ones, through the bounded
/// loader ([`crate::load::yaml_documents`] with [`Budget::INPUT`](crate::load::Budget::INPUT)):
/// no more than 4 MiB and one million nodes, checked before anything is built.
///
/// # Errors
/// [`DocumentError::Yaml`] with the line and column of the first syntax error, or of the
/// first collection nested deeper than [`MAX_NESTING`](crate::limits::MAX_NESTING), alias
/// beyond [`MAX_ALIAS_EXPANSION`](crate::limits::MAX_ALIAS_EXPANSION) or node beyond the budget.
pub fn parse_documents(text: &str) -> Result<Vec<Value>, DocumentError> {
    talosprov_base::load::yaml_documents(text, talosprov_base::load::Budget::INPUT).map_err(|e| {
        DocumentError::Yaml {
            line: Some(e.pos.line as usize),
            column: Some(e.pos.column as usize),
            message: e.message,
        }
    })
}

/// What Talos's decoder normalises when it reads the v1alpha1 document: the
/// leading tabs and line breaks of `cluster.inlineManifests[].contents` are
/// trimmed (`ClusterInlineManifests.UnmarshalYAML`).
pub fn normalize_v1alpha1(doc: &mut Value) {
    let manifests = doc
        .get_mut("cluster")
        .and_then(|c| c.get_mut("inlineManifests"))
        .and_then(Value::as_sequence_mut);
    for manifest in manifests.into_iter().flatten() {
        if let Some(Value::String(contents)) = manifest.get_mut("contents") {
            let trimmed = contents.trim_start_matches(['\t', '\n', '\u{b}', '\u{c}', '\r']);
            if trimmed.len() != contents.len() {
                *contents = trimmed.to_string();
            }
        }
    }
}

impl MachineConfig {
    /// Read a machine config from YAML text (documents separated by `---`).
    ///
    /// # Errors
    /// A YAML syntax error, a document that is not a mapping, a document that
    /// Talos could not identify, or two documents with the same identity.
    pub fn parse(text: &str) -> Result<Self, DocumentError> {
        let documents = parse_documents(text)?;
        let mut config = MachineConfig { documents };
        config.check()?;
        for i in 0..config.documents.len() {
            let legacy = config.documents[i]
                .as_mapping()
                .and_then(|m| identify(m, i + 1).ok())
                .is_some_and(|id| id.is_v1alpha1());
            if legacy {
                normalize_v1alpha1(&mut config.documents[i]);
            }
        }
        Ok(config)
    }

    /// Check every document is an identifiable mapping and identities are unique.
    ///
    /// # Errors
    /// As [`MachineConfig::parse`].
    pub fn check(&self) -> Result<(), DocumentError> {
        let mut seen = std::collections::HashSet::new();
        for (i, doc) in self.documents.iter().enumerate() {
            let map = doc
                .as_mapping()
                .ok_or(DocumentError::NotAMapping { index: i + 1 })?;
            let id = identify(map, i + 1)?;
            if !seen.insert(id.clone()) {
                return Err(DocumentError::Duplicate { id });
            }
        }
        Ok(())
    }

    /// The identity of each document, in order. Documents that cannot be
    /// identified are skipped (a checked config has none).
    pub fn ids(&self) -> Vec<Option<DocumentId>> {
        self.documents
            .iter()
            .enumerate()
            .map(|(i, d)| d.as_mapping().and_then(|m| identify(m, i + 1).ok()))
            .collect()
    }

    /// The position of the document with this identity.
    pub fn position(&self, id: &DocumentId) -> Option<usize> {
        self.documents.iter().enumerate().position(|(i, d)| {
            d.as_mapping()
                .and_then(|m| identify(m, i + 1).ok())
                .is_some_and(|d| &d == id)
        })
    }

    /// The config as YAML text, as `talosctl machineconfig patch` prints it:
    /// documents separated by `---`, 2-space indentation, multi-line strings as
    /// block literals (`|`, `|-`). Ends with a newline.
    ///
    /// # Errors
    /// Only when a value cannot be written as YAML (a non-finite float key, say).
    pub fn to_yaml(&self) -> Result<String, serde_yaml_ng::Error> {
        let mut out = String::new();
        for (i, doc) in self.documents.iter().enumerate() {
            if i > 0 {
                out.push_str("---\n");
            }
            out.push_str(&serde_yaml_ng::to_string(doc)?);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deep_nesting_is_refused_at_its_place_before_the_yaml_is_built() {
        let text = format!(
            "machine:\n  sysctls:\n    a:\n      {}x\n",
            "- ".repeat(100_000)
        );
        match parse_documents(&text) {
            Err(DocumentError::Yaml {
                line: Some(4),
                column: Some(_),
                message,
            }) => assert!(
                message.starts_with("the YAML nests deeper than 64 levels"),
                "{message}"
            ),
            other => panic!("{other:?}"),
        }
        // Patches as deep as real configs get still parse.
        assert!(parse_documents("a:\n  b:\n    - - - c\n").is_ok());
    }

    #[test]
    fn legacy_document_is_identified_by_its_keys() {
        let config = MachineConfig::parse("version: v1alpha1\nmachine: {}\n").unwrap();
        assert_eq!(config.ids(), vec![Some(DocumentId::v1alpha1())]);
    }

    #[test]
    fn named_documents_carry_their_name() {
        let config =
            MachineConfig::parse("apiVersion: v1alpha1\nkind: ExtensionServiceConfig\nname: foo\n")
                .unwrap();
        let id = config.ids().remove(0).unwrap();
        assert_eq!(id.to_string(), "v1alpha1/ExtensionServiceConfig/foo");
    }

    #[test]
    fn duplicate_documents_are_refused() {
        let err = MachineConfig::parse(
            "apiVersion: v1alpha1\nkind: A\n---\napiVersion: v1alpha1\nkind: A\n",
        )
        .unwrap_err();
        assert_eq!(
            err.to_string(),
            "duplicate document v1alpha1/A is not allowed"
        );
    }

    #[test]
    fn a_document_without_kind_is_refused() {
        let err = MachineConfig::parse("foo: bar\n").unwrap_err();
        assert!(matches!(err, DocumentError::MissingKind { index: 1 }));
    }

    #[test]
    fn yaml_errors_carry_the_line() {
        let err = MachineConfig::parse("machine:\n  a: [\n").unwrap_err();
        let DocumentError::Yaml { line, .. } = err else {
            panic!("expected a YAML error")
        };
        assert!(line.is_some());
    }

    #[test]
    fn output_separates_documents_and_uses_block_literals() {
        let config = MachineConfig::parse(
            "machine:\n  files:\n    - content: \"a\\nb\"\n---\napiVersion: v1alpha1\nkind: HostnameConfig\nauto: stable\n",
        )
        .unwrap();
        insta::assert_snapshot!(config.to_yaml().unwrap());
    }
}
