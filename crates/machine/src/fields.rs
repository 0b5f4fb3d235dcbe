//! The field set of each Talos config contract: every document kind, its keys and their
//! types, read from `talos_fields.txt` (a table the project owns, written from Talos's
//! configuration reference) once per contract. `decode` checks configs against it.

use std::collections::HashMap;
use std::sync::OnceLock;

use talosprov_base::version::Contract;

/// The table, compiled in.
const TABLE: &str = include_str!("talos_fields.txt");

/// A scalar (or opaque) value type, as Talos's Go types decode it with `yaml`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scalar {
    /// A Go `string`: any scalar, read as its text (`42` becomes `"42"`).
    String,
    /// A signed integer (a float is truncated, as Go's yaml does).
    Int,
    /// An unsigned integer.
    Uint,
    /// A floating-point number.
    Float,
    /// `true`/`false`; Go's yaml also takes `yes`/`no`/`on`/`off` (and `y`/`n`) into a bool.
    Bool,
    /// A Go `time.Duration`: a string such as `30s` or `1h30m` (a bare number is refused).
    Duration,
    /// A Go `netip.Addr`: an IPv4 or IPv6 address.
    Ip,
    /// A Go `netip.Prefix`: an address and a prefix length, `10.0.0.0/24`.
    Cidr,
    /// A Go `netip.AddrPort`: `10.0.0.1:51820` or `[fd00::1]:51820`.
    IpPort,
    /// Base64 text decoded into bytes (standard alphabet, padded).
    Base64,
    /// A mapping with any content (`Unstructured`: kubelet `extraConfig`, audit policies).
    Object,
    /// Any value at all.
    Any,
}

/// The type of a field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Type {
    /// A scalar or opaque value.
    Scalar(Scalar),
    /// A YAML sequence of the inner type.
    List(Box<Type>),
    /// A mapping from string keys to the inner type (Go `map[string]T`).
    Map(Box<Type>),
    /// Any one of these types (Talos's `extraArgs` values: a string or a list of strings).
    Either(Vec<Type>),
    /// A mapping with a fixed set of keys: an index into [`FieldSet::structs`].
    Struct(usize),
}

/// One key of a mapping and the type of its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    /// The YAML key, such as `interfaces`.
    pub key: String,
    /// Its value's type.
    pub ty: Type,
    /// Talos accepts the key but leaves it out of its configuration reference
    /// (`docgen:nodoc` in the Go types, mostly deprecated fields such as `machine.network`).
    pub nodoc: bool,
}

/// A mapping with a fixed set of keys (a Go struct).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StructDef {
    /// The name it has in the table (`Device`), or the document kind for a document's body.
    pub name: String,
    /// Its keys, in table order.
    pub fields: Vec<Field>,
}

impl StructDef {
    /// The field with this key.
    pub fn field(&self, key: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.key == key)
    }
}

/// A document kind Talos decodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DocumentDef {
    /// `kind`, or `v1alpha1` for the legacy document, which has none.
    pub kind: String,
    /// `apiVersion`; `None` for the legacy v1alpha1 document.
    pub api_version: Option<String>,
    /// The document's body: an index into [`FieldSet::structs`]. A typed document's body
    /// also has the `apiVersion` and `kind` keys.
    pub body: usize,
}

/// Every document kind and field of one Talos config contract.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldSet {
    /// The contract this set is for.
    pub contract: Contract,
    /// Every struct, indexed by [`Type::Struct`].
    pub structs: Vec<StructDef>,
    /// Every document kind, in table order (the legacy v1alpha1 document first).
    pub documents: Vec<DocumentDef>,
}

impl FieldSet {
    /// The struct at `index` (from [`Type::Struct`] or [`DocumentDef::body`]).
    pub fn get(&self, index: usize) -> &StructDef {
        &self.structs[index]
    }

    /// The legacy v1alpha1 document.
    pub fn v1alpha1(&self) -> &DocumentDef {
        self.documents
            .iter()
            .find(|d| d.api_version.is_none())
            .unwrap_or(&self.documents[0])
    }

    /// The typed document `kind` of `apiVersion`, when the contract has it.
    pub fn document(&self, kind: &str, api_version: &str) -> Option<&DocumentDef> {
        self.documents
            .iter()
            .find(|d| d.kind == kind && d.api_version.as_deref() == Some(api_version))
    }

    /// The typed document kinds, in table order.
    pub fn kinds(&self) -> impl Iterator<Item = &str> {
        self.documents
            .iter()
            .filter(|d| d.api_version.is_some())
            .map(|d| d.kind.as_str())
    }

    /// Every leaf path of a document (`machine.network.interfaces[].vip.ip`), with `[]` for
    /// list elements and `{}` for map values; structs nested in themselves are not expanded.
    pub fn paths(&self, document: &DocumentDef) -> Vec<String> {
        let mut out = Vec::new();
        let mut stack = Vec::new();
        self.collect_paths(document.body, String::new(), &mut stack, &mut out);
        out
    }

    fn collect_paths(
        &self,
        index: usize,
        prefix: String,
        stack: &mut Vec<usize>,
        out: &mut Vec<String>,
    ) {
        if stack.contains(&index) {
            return;
        }
        stack.push(index);
        for field in &self.structs[index].fields {
            let path = if prefix.is_empty() {
                field.key.clone()
            } else {
                format!("{prefix}.{}", field.key)
            };
            self.collect_type_paths(&field.ty, path, stack, out);
        }
        stack.pop();
    }

    fn collect_type_paths(
        &self,
        ty: &Type,
        path: String,
        stack: &mut Vec<usize>,
        out: &mut Vec<String>,
    ) {
        match ty {
            Type::Struct(i) if !self.structs[*i].fields.is_empty() => {
                self.collect_paths(*i, path, stack, out);
            }
            Type::List(inner) => self.collect_type_paths(inner, format!("{path}[]"), stack, out),
            Type::Map(inner) => self.collect_type_paths(inner, format!("{path}.{{}}"), stack, out),
            Type::Scalar(_) | Type::Either(_) | Type::Struct(_) => out.push(path),
        }
    }
}

/// The field set of a contract, parsed from the table on first use.
pub fn field_set(contract: Contract) -> &'static FieldSet {
    static V1_12: OnceLock<FieldSet> = OnceLock::new();
    static V1_13: OnceLock<FieldSet> = OnceLock::new();
    static V1_14: OnceLock<FieldSet> = OnceLock::new();
    let cell = match contract {
        Contract::V1_12 => &V1_12,
        Contract::V1_13 => &V1_13,
        Contract::V1_14 => &V1_14,
    };
    // The table is compiled in and checked by the unit tests below, so it always parses.
    cell.get_or_init(|| parse(TABLE, contract).unwrap_or_else(|e| panic!("talos_fields.txt: {e}")))
}

/// Which contracts a table entry applies to.
#[derive(Debug, Clone, Copy, Default)]
struct Gate {
    since: Option<Contract>,
    until: Option<Contract>,
}

impl Gate {
    fn admits(self, c: Contract) -> bool {
        self.since.is_none_or(|s| c >= s) && self.until.is_none_or(|u| c <= u)
    }
}

/// A field line before names are resolved.
enum RawLine<'a> {
    Field {
        key: &'a str,
        ty: &'a str,
        gate: Gate,
        nodoc: bool,
        line: usize,
    },
    Inline {
        name: &'a str,
        line: usize,
    },
}

/// A block header before names are resolved.
struct RawBlock<'a> {
    /// `document`, `struct`.
    what: &'a str,
    name: &'a str,
    api_version: Option<&'a str>,
    gate: Gate,
    lines: Vec<RawLine<'a>>,
}

fn contract_named(text: &str, line: usize) -> Result<Contract, String> {
    match text {
        "1.12" => Ok(Contract::V1_12),
        "1.13" => Ok(Contract::V1_13),
        "1.14" => Ok(Contract::V1_14),
        other => Err(format!(
            "line {line}: unknown contract {other:?} (known: 1.12, 1.13, 1.14)"
        )),
    }
}

/// `since V`, `until V` and `nodoc` at the end of a line.
fn flags(words: &[&str], line: usize) -> Result<(Gate, bool), String> {
    let mut gate = Gate::default();
    let mut nodoc = false;
    let mut i = 0;
    while i < words.len() {
        match words[i] {
            "nodoc" => nodoc = true,
            "since" | "until" => {
                let v = words
                    .get(i + 1)
                    .ok_or(format!("line {line}: {} needs a version", words[i]))?;
                let c = contract_named(v, line)?;
                if words[i] == "since" {
                    gate.since = Some(c);
                } else {
                    gate.until = Some(c);
                }
                i += 1;
            }
            other => return Err(format!("line {line}: unexpected {other:?}")),
        }
        i += 1;
    }
    Ok((gate, nodoc))
}

/// An `alias NAME TYPE [flags]` line: name, type, gate, line number.
type RawAlias<'t> = (&'t str, &'t str, Gate, usize);

/// Parse the table for one contract.
fn parse(table: &str, contract: Contract) -> Result<FieldSet, String> {
    let (blocks, aliases) = read_blocks(table)?;
    build_field_set(&blocks, &aliases, contract)
}

/// The table's blocks (`struct`, `document`) with their indented lines, and
/// its aliases, in file order; errors name the line.
fn read_blocks(table: &str) -> Result<(Vec<RawBlock<'_>>, Vec<RawAlias<'_>>), String> {
    let mut blocks: Vec<RawBlock> = Vec::new();
    let mut aliases: Vec<RawAlias<'_>> = Vec::new();
    for (n, raw) in table.lines().enumerate() {
        let line = n + 1;
        let text = raw.split('#').next().unwrap_or("");
        if text.trim().is_empty() {
            continue;
        }
        let words: Vec<&str> = text.split_whitespace().collect();
        if text.starts_with(char::is_whitespace) {
            let block = blocks
                .last_mut()
                .ok_or(format!("line {line}: a field outside any block"))?;
            if let Some(name) = words[0].strip_prefix("..") {
                block.lines.push(RawLine::Inline { name, line });
                continue;
            }
            let ty = words
                .get(1)
                .ok_or(format!("line {line}: {:?} has no type", words[0]))?;
            let (gate, nodoc) = flags(&words[2..], line)?;
            block.lines.push(RawLine::Field {
                key: words[0],
                ty,
                gate,
                nodoc,
                line,
            });
            continue;
        }
        match words.as_slice() {
            ["alias", name, ty, rest @ ..] => {
                let (gate, _) = flags(rest, line)?;
                aliases.push((name, ty, gate, line));
            }
            ["struct", name] => blocks.push(RawBlock {
                what: "struct",
                name,
                api_version: None,
                gate: Gate::default(),
                lines: Vec::new(),
            }),
            ["document", "v1alpha1"] => blocks.push(RawBlock {
                what: "document",
                name: "v1alpha1",
                api_version: None,
                gate: Gate::default(),
                lines: Vec::new(),
            }),
            ["document", kind, api_version, rest @ ..] => {
                let (gate, _) = flags(rest, line)?;
                blocks.push(RawBlock {
                    what: "document",
                    name: kind,
                    api_version: Some(api_version),
                    gate,
                    lines: Vec::new(),
                });
            }
            _ => return Err(format!("line {line}: cannot read {:?}", text.trim())),
        }
    }
    Ok((blocks, aliases))
}

/// The field set `contract` admits: every struct, then each document with a
/// body struct of its own (`apiVersion` and `kind` first for a typed one).
fn build_field_set(
    blocks: &[RawBlock<'_>],
    aliases: &[RawAlias<'_>],
    contract: Contract,
) -> Result<FieldSet, String> {
    // Structs first (documents get their own body struct), so types can refer to them.
    let mut index: HashMap<&str, usize> = HashMap::new();
    let mut structs: Vec<StructDef> = Vec::new();
    for b in blocks.iter().filter(|b| b.what == "struct") {
        if index.insert(b.name, structs.len()).is_some() {
            return Err(format!("struct {} is defined twice", b.name));
        }
        structs.push(StructDef {
            name: b.name.to_string(),
            fields: Vec::new(),
        });
    }
    let alias_types: HashMap<&str, &str> = aliases
        .iter()
        .filter(|(_, _, gate, _)| gate.admits(contract))
        .map(|(name, ty, _, _)| (*name, *ty))
        .collect();
    let resolver = Resolver {
        index: &index,
        aliases: &alias_types,
    };
    let mut documents = Vec::new();
    for b in blocks {
        if !b.gate.admits(contract) {
            continue;
        }
        let mut fields = Vec::new();
        if b.api_version.is_some() {
            for key in ["apiVersion", "kind"] {
                fields.push(Field {
                    key: key.to_string(),
                    ty: Type::Scalar(Scalar::String),
                    nodoc: false,
                });
            }
        }
        resolver.fields(b, blocks, contract, &mut fields, 0)?;
        if b.what == "struct" {
            structs[index[b.name]].fields = fields;
        } else {
            documents.push(DocumentDef {
                kind: b.name.to_string(),
                api_version: b.api_version.map(str::to_owned),
                body: structs.len(),
            });
            structs.push(StructDef {
                name: b.name.to_string(),
                fields,
            });
        }
    }
    if !documents.iter().any(|d| d.api_version.is_none()) {
        return Err("no v1alpha1 document".into());
    }
    Ok(FieldSet {
        contract,
        structs,
        documents,
    })
}

struct Resolver<'a> {
    index: &'a HashMap<&'a str, usize>,
    aliases: &'a HashMap<&'a str, &'a str>,
}

impl Resolver<'_> {
    /// The fields of a block for `contract`, with inlined structs expanded in place.
    fn fields(
        &self,
        block: &RawBlock,
        blocks: &[RawBlock],
        contract: Contract,
        out: &mut Vec<Field>,
        depth: usize,
    ) -> Result<(), String> {
        if depth > 4 {
            return Err(format!("{}: inlining nests too deep", block.name));
        }
        for l in &block.lines {
            match l {
                RawLine::Field {
                    key,
                    ty,
                    gate,
                    nodoc,
                    line,
                } => {
                    if !gate.admits(contract) {
                        continue;
                    }
                    if out.iter().any(|f| f.key == *key) {
                        return Err(format!(
                            "line {line}: {key} is defined twice in {}",
                            block.name
                        ));
                    }
                    let ty = self.ty(ty).map_err(|e| format!("line {line}: {e}"))?;
                    out.push(Field {
                        key: key.to_string(),
                        ty,
                        nodoc: *nodoc,
                    });
                }
                RawLine::Inline { name, line } => {
                    let inner = blocks
                        .iter()
                        .find(|b| b.what == "struct" && b.name == *name)
                        .ok_or(format!("line {line}: no struct {name} to inline"))?;
                    self.fields(inner, blocks, contract, out, depth + 1)?;
                }
            }
        }
        Ok(())
    }

    /// A type expression: `A|B`, `[T]`, `{T}`, a scalar name, an alias or a struct name.
    fn ty(&self, text: &str) -> Result<Type, String> {
        let parts = split_top(text, '|');
        if parts.len() > 1 {
            return parts
                .iter()
                .map(|p| self.ty(p))
                .collect::<Result<_, _>>()
                .map(Type::Either);
        }
        if let Some(inner) = text.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
            return Ok(Type::List(Box::new(self.ty(inner)?)));
        }
        if let Some(inner) = text.strip_prefix('{').and_then(|t| t.strip_suffix('}')) {
            return Ok(Type::Map(Box::new(self.ty(inner)?)));
        }
        let scalar = match text {
            "string" => Scalar::String,
            "int" => Scalar::Int,
            "uint" => Scalar::Uint,
            "float" => Scalar::Float,
            "bool" => Scalar::Bool,
            "duration" => Scalar::Duration,
            "ip" => Scalar::Ip,
            "cidr" => Scalar::Cidr,
            "ipport" => Scalar::IpPort,
            "base64" => Scalar::Base64,
            "object" => Scalar::Object,
            "any" => Scalar::Any,
            name => {
                if let Some(alias) = self.aliases.get(name) {
                    return self.ty(alias);
                }
                return self
                    .index
                    .get(name)
                    .map(|i| Type::Struct(*i))
                    .ok_or(format!("unknown type {name:?}"));
            }
        };
        Ok(Type::Scalar(scalar))
    }
}

/// Split on `sep` outside brackets and braces.
fn split_top(text: &str, sep: char) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in text.char_indices() {
        match c {
            '[' | '{' => depth += 1,
            ']' | '}' => depth -= 1,
            c if c == sep && depth == 0 => {
                parts.push(&text[start..i]);
                start = i + c.len_utf8();
            }
            _ => {}
        }
    }
    parts.push(&text[start..]);
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_parses_for_every_contract() {
        for contract in [Contract::V1_12, Contract::V1_13] {
            let set = parse(TABLE, contract).unwrap_or_else(|e| panic!("{contract}: {e}"));
            assert!(
                set.documents.len() > 30,
                "{contract}: {} documents",
                set.documents.len()
            );
            let v1 = set.v1alpha1();
            assert!(v1.api_version.is_none());
            let paths = set.paths(v1);
            assert!(paths.contains(&"machine.network.interfaces[].vip.ip".to_string()));
            assert!(paths.contains(&"cluster.inlineManifests[].contents".to_string()));
        }
    }

    #[test]
    fn fields_and_kinds_follow_their_contract() {
        let old = field_set(Contract::V1_12);
        let new = field_set(Contract::V1_13);
        assert!(old.document("KubeSpanConfig", "v1alpha1").is_none());
        assert!(new.document("KubeSpanConfig", "v1alpha1").is_some());
        let args = |set: &FieldSet| {
            let v1 = set.v1alpha1();
            let machine = set.get(v1.body).field("machine").map(|f| f.ty.clone());
            let Some(Type::Struct(m)) = machine else {
                panic!("machine")
            };
            let Some(Type::Struct(k)) = set.get(m).field("kubelet").map(|f| f.ty.clone()) else {
                panic!("kubelet")
            };
            set.get(k).field("extraArgs").map(|f| f.ty.clone())
        };
        assert_eq!(
            args(old),
            Some(Type::Map(Box::new(Type::Scalar(Scalar::String))))
        );
        assert!(matches!(args(new), Some(Type::Map(inner)) if matches!(*inner, Type::Either(_))));
    }

    #[test]
    fn typed_documents_have_api_version_and_kind() {
        let set = field_set(Contract::V1_13);
        let link = set.document("LinkConfig", "v1alpha1").expect("LinkConfig");
        let body = set.get(link.body);
        for key in ["apiVersion", "kind", "name", "addresses", "routes", "mtu"] {
            assert!(body.field(key).is_some(), "LinkConfig.{key}");
        }
    }

    #[test]
    fn mistakes_in_a_table_are_reported_with_their_line() {
        let err = parse("document v1alpha1\n  machine Nope\n", Contract::V1_13).unwrap_err();
        assert!(err.contains("line 2") && err.contains("Nope"), "{err}");
        let err = parse(
            "struct A\n  a string sometimes\ndocument v1alpha1\n",
            Contract::V1_13,
        )
        .unwrap_err();
        assert!(err.contains("line 2"), "{err}");
        assert_eq!(split_top("{string|[string]}", '|'), ["{string|[string]}"]);
        assert_eq!(split_top("string|[string]", '|'), ["string", "[string]"]);
    }
}
