//! Strict decoding of a machine config, as Talos's config loader does it
//! (`configloader/internal/decoder/decoder.go`: yaml into the Go types, then
//! `xyaml.CheckUnknownKeys`): every key must be a field of its document's contract, and every
//! value must have a type Go's yaml can decode into that field. Pure; the field set is
//! [`super::fields`].

use serde_yaml_ng::Value;
use std::fmt::Write as _;
use std::net::{IpAddr, SocketAddr};

use super::fields::{FieldSet, Scalar, StructDef, Type, field_set};
use super::validate::{ConfigProblem, ProblemKind, Severity};
use talosprov_base::version::Contract;
use talosprov_patch::document::{identify, scalar_text};

/// Decode every document of a config strictly against `contract`'s field set and return every
/// problem: unknown document kinds and keys ([`ProblemKind::UnknownKey`], each with a "did you
/// mean" hint where one fits) and values Talos cannot decode ([`ProblemKind::WrongType`]).
/// Documents that cannot be identified (no `kind`) are left to [`super::check_config`].
pub fn decode_config(documents: &[Value], contract: Contract) -> Vec<ConfigProblem> {
    let set = field_set(contract);
    let other = field_set(match contract {
        Contract::V1_12 => Contract::V1_13,
        Contract::V1_13 => Contract::V1_12,
        Contract::V1_14 => Contract::V1_13,
    });
    let mut d = Decoder {
        set,
        other,
        document: String::new(),
        problems: Vec::new(),
        unknown: 0,
        more_unknown: 0,
        first_more: None,
    };
    for (i, doc) in documents.iter().enumerate() {
        let Some(map) = doc.as_mapping() else {
            continue;
        };
        let Ok(id) = identify(map, i + 1) else {
            continue;
        };
        if id.is_v1alpha1() {
            d.document = "v1alpha1".into();
            d.value(doc, &Type::Struct(set.v1alpha1().body), &mut String::new());
            d.summarize_unknown();
            continue;
        }
        d.document = [
            id.api_version.as_str(),
            id.kind.as_str(),
            id.name.as_deref().unwrap_or(""),
        ]
        .iter()
        .filter(|s| !s.is_empty())
        .copied()
        .collect::<Vec<_>>()
        .join("/");
        match set.document(&id.kind, &id.api_version) {
            Some(def) => {
                d.value(doc, &Type::Struct(def.body), &mut String::new());
                d.summarize_unknown();
            }
            None => {
                let message = unknown_kind(set, other, &id.kind, &id.api_version);
                d.push(ProblemKind::UnknownKey, "", message);
            }
        }
    }
    d.problems
}

/// Why a typed document has no type in this contract, with the hint that fits.
fn unknown_kind(set: &FieldSet, other: &FieldSet, kind: &str, api_version: &str) -> String {
    let base = format!(
        "unknown document kind `{kind}` (apiVersion {api_version}): Talos has no such document \
         (\"{kind}\" \"{api_version}\": not registered)"
    );
    if other.document(kind, api_version).is_some() {
        return format!(
            "{base}; `{kind}` documents are in the {} contract, and this cluster's Talos version \
             uses {}",
            other.contract, set.contract
        );
    }
    if let Some(def) = set.documents.iter().find(|d| d.kind == kind) {
        let api = def.api_version.as_deref().unwrap_or("");
        return format!("{base}; `{kind}` documents have apiVersion {api}");
    }
    match closest(kind, set.kinds()) {
        Some(k) => format!("{base}; did you mean `{k}`?"),
        None => base,
    }
}

/// The candidate closest to `value` (Jaro-Winkler similarity of at least 0.8, ignoring case).
fn closest<'a>(value: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let value = value.to_lowercase();
    candidates
        .into_iter()
        .map(|c| (strsim::jaro_winkler(&c.to_lowercase(), &value), c))
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

struct Decoder<'a> {
    set: &'a FieldSet,
    other: &'a FieldSet,
    /// The document being decoded, named as [`ConfigProblem::document`] names it.
    document: String,
    problems: Vec<ConfigProblem>,
    /// Unknown keys reported so far (at most [`MAX_UNKNOWN_KEYS`]).
    unknown: usize,
    /// Unknown keys past [`MAX_UNKNOWN_KEYS`] in the current document, counted only.
    more_unknown: usize,
    /// The path of the first of them.
    first_more: Option<String>,
}

/// The most unknown keys reported one by one for a config: each is located in its patch file,
/// and a patch of thousands of stray keys needs no more to be fixed; the rest are counted in
/// one more problem per document.
pub const MAX_UNKNOWN_KEYS: usize = 100;

impl Decoder<'_> {
    /// The problem counting the current document's unknown keys past [`MAX_UNKNOWN_KEYS`],
    /// at the first of them.
    fn summarize_unknown(&mut self) {
        let more = std::mem::take(&mut self.more_unknown);
        let first = self.first_more.take().unwrap_or_default();
        if more > 0 {
            let message = format!(
                "{more} more unknown key{} in {}, from `{first}` on (only the first \
                 {MAX_UNKNOWN_KEYS} unknown keys are listed one by one)",
                if more == 1 { "" } else { "s" },
                self.place("")
            );
            self.push(ProblemKind::UnknownKey, &first, message);
        }
    }

    fn push(&mut self, kind: ProblemKind, field: &str, message: String) {
        self.problems.push(ConfigProblem {
            severity: Severity::Error,
            kind,
            document: self.document.clone(),
            field: field.to_string(),
            message,
        });
    }

    /// Check `v` against `ty`; `path` is the dotted path of `v` (list items as `[i]`).
    fn value(&mut self, v: &Value, ty: &Type, path: &mut String) {
        let v = untagged(v);
        if v.is_null() {
            // A null decodes as the zero value of any Go type.
            return;
        }
        match ty {
            Type::Scalar(s) => {
                if let Err(why) = scalar(v, *s) {
                    let sep = if why.starts_with("must") { " " } else { ": " };
                    let message = format!("{}{sep}{why}", self.place(path));
                    self.push(ProblemKind::WrongType, path, message);
                }
            }
            Type::List(inner) => match v {
                Value::Sequence(items) => {
                    if is_plain(inner)
                        && items
                            .iter()
                            .all(|item| scalar(item, Scalar::String).is_ok())
                    {
                        return;
                    }
                    for (i, item) in items.iter().enumerate() {
                        let len = path.len();
                        let _ = write!(path, "[{i}]");
                        self.value(item, inner, path);
                        path.truncate(len);
                    }
                }
                Value::Null
                | Value::Bool(_)
                | Value::Number(_)
                | Value::String(_)
                | Value::Mapping(_)
                | Value::Tagged(_) => self.wrong(v, ty, path),
            },
            Type::Map(inner) => match v {
                Value::Mapping(map) => {
                    if is_plain(inner)
                        && map
                            .values()
                            .all(|item| scalar(item, Scalar::String).is_ok())
                    {
                        // A map of strings (sysctls, labels): every scalar fits.
                        return;
                    }
                    for (k, item) in map {
                        let len = path.len();
                        match k {
                            Value::String(s) => push_key(path, s),
                            other @ Value::Null
                            | other @ Value::Bool(_)
                            | other @ Value::Number(_)
                            | other @ Value::Sequence(_)
                            | other @ Value::Mapping(_)
                            | other @ Value::Tagged(_) => {
                                push_key(path, &scalar_text(other).unwrap_or_default())
                            }
                        }
                        self.value(item, inner, path);
                        path.truncate(len);
                    }
                }
                Value::Null
                | Value::Bool(_)
                | Value::Number(_)
                | Value::String(_)
                | Value::Sequence(_)
                | Value::Tagged(_) => self.wrong(v, ty, path),
            },
            Type::Either(options) => self.either(v, ty, options, path),
            Type::Struct(index) => match v {
                Value::Mapping(map) => {
                    let def = self.set.get(*index);
                    for (k, item) in map {
                        let owned;
                        let key = match k {
                            Value::String(s) => s.as_str(),
                            other @ Value::Null
                            | other @ Value::Bool(_)
                            | other @ Value::Number(_)
                            | other @ Value::Sequence(_)
                            | other @ Value::Mapping(_)
                            | other @ Value::Tagged(_) => {
                                owned = scalar_text(other).unwrap_or_default();
                                owned.as_str()
                            }
                        };
                        let len = path.len();
                        match def.field(key) {
                            Some(field) => {
                                push_key(path, key);
                                self.value(item, &field.ty, path);
                            }
                            None => self.unknown_field(def, key, path),
                        }
                        path.truncate(len);
                    }
                }
                Value::Null
                | Value::Bool(_)
                | Value::Number(_)
                | Value::String(_)
                | Value::Sequence(_)
                | Value::Tagged(_) => self.wrong(v, ty, path),
            },
        }
    }

    /// A key the struct at `path` does not have: reported with its hint while fewer than
    /// [`MAX_UNKNOWN_KEYS`] are, else only counted (and the first counted one remembered).
    /// `path` comes back with the key pushed on it.
    fn unknown_field(&mut self, def: &StructDef, key: &str, path: &mut String) {
        if self.unknown >= MAX_UNKNOWN_KEYS {
            self.more_unknown += 1;
            push_key(path, key);
            if self.first_more.is_none() {
                self.first_more = Some(path.clone());
            }
            return;
        }
        self.unknown += 1;
        let message = self.unknown_key(def, key, path);
        push_key(path, key);
        self.push(ProblemKind::UnknownKey, path, message);
    }

    /// A value that fits one of several types: the first that decodes without a problem.
    fn either(&mut self, v: &Value, ty: &Type, options: &[Type], path: &mut String) {
        if options
            .iter()
            .any(|o| is_plain(o) && scalar(v, Scalar::String).is_ok())
        {
            return;
        }
        let mut attempts = Vec::new();
        for option in options {
            let mut trial = Decoder {
                set: self.set,
                other: self.other,
                document: self.document.clone(),
                problems: Vec::new(),
                unknown: self.unknown,
                more_unknown: 0,
                first_more: None,
            };
            trial.value(v, option, path);
            if trial.problems.is_empty() && trial.more_unknown == 0 {
                return;
            }
            attempts.push((option, trial));
        }
        // A value of the right shape for one option is best explained by that option's problems.
        let shaped: Vec<_> = attempts
            .into_iter()
            .filter(|(option, _)| same_shape(v, option))
            .collect();
        match <[_; 1]>::try_from(shaped) {
            Ok([(_, trial)]) => {
                self.problems.extend(trial.problems);
                self.unknown = trial.unknown;
                self.more_unknown += trial.more_unknown;
                if self.first_more.is_none() {
                    self.first_more = trial.first_more;
                }
            }
            Err(_) => self.wrong(v, ty, path),
        }
    }

    fn wrong(&mut self, v: &Value, ty: &Type, path: &str) {
        let message = format!(
            "{} must be {}, not {}",
            self.place(path),
            self.describe(ty),
            found(v)
        );
        self.push(ProblemKind::WrongType, path, message);
    }

    /// How a path reads in a message: `machine.install.disk`, or `LinkConfig eth0: mtu`.
    fn place(&self, path: &str) -> String {
        if self.document == "v1alpha1" {
            if path.is_empty() {
                "the v1alpha1 document".into()
            } else {
                format!("`{path}`")
            }
        } else {
            let name = self
                .document
                .split('/')
                .skip(1)
                .collect::<Vec<_>>()
                .join(" ");
            if path.is_empty() {
                format!("the {name} document")
            } else {
                format!("`{path}` in the {name} document")
            }
        }
    }

    /// The message for a key the struct at `path` does not have, with the best hint.
    fn unknown_key(&self, def: &StructDef, key: &str, path: &str) -> String {
        let parent = if path.is_empty() {
            match self.document.as_str() {
                "v1alpha1" => "the top of the v1alpha1 document".to_string(),
                doc => format!(
                    "the {} document",
                    doc.split('/').skip(1).collect::<Vec<_>>().join(" ")
                ),
            }
        } else {
            format!("`{}`", talosprov_base::limits::quoted(path))
        };
        let base = format!(
            "unknown key `{}` in {parent} (Talos: unknown keys found during decoding)",
            talosprov_base::limits::quoted(key)
        );
        let shape = schema_path(path);
        let join = |rest: &str| {
            if shape.is_empty() {
                rest.to_string()
            } else {
                format!("{shape}.{rest}")
            }
        };
        // The key itself a few levels down (`network.vip` for `interfaces[].vip`) beats a key
        // spelled alike beside it (`nodeIP` is the kubelet's, not a misspelt `nodeTaints`).
        if let Some(deeper) = self.find_below(def, key, 3) {
            return format!("{base}; did you mean `{}`?", join(&deeper));
        }
        if let Some(found) = closest(key, def.fields.iter().map(|f| f.key.as_str())) {
            return format!("{base}; did you mean `{}`?", join(found));
        }
        if let Some(theirs) = self.other.structs.iter().find(|s| s.name == def.name)
            && theirs.field(key).is_some()
        {
            return format!(
                "{base}; `{}` is in the {} contract, and this cluster's Talos version uses {}",
                talosprov_base::limits::quoted(key),
                self.other.contract,
                self.set.contract
            );
        }
        // Elsewhere in the document (short keys such as `ip` are everywhere: no hint for them).
        if key.len() >= 4 {
            let root = self.set.get(self.root_index());
            if let Some(anywhere) = self.find_below(root, key, 6) {
                let doc = if self.document == "v1alpha1" {
                    ""
                } else {
                    " of this document"
                };
                return format!("{base}; `{key}` belongs at `{anywhere}`{doc}");
            }
        }
        base
    }

    /// The body struct of the document being decoded.
    fn root_index(&self) -> usize {
        if self.document == "v1alpha1" {
            return self.set.v1alpha1().body;
        }
        let mut parts = self.document.splitn(3, '/');
        let api = parts.next().unwrap_or("");
        let kind = parts.next().unwrap_or("");
        self.set
            .document(kind, api)
            .map_or(self.set.v1alpha1().body, |d| d.body)
    }

    /// The shallowest path below `def` (at most `depth` keys down) whose last key is `key`,
    /// written with `[]` for list items: `interfaces[].vip`.
    fn find_below(&self, def: &StructDef, key: &str, depth: usize) -> Option<String> {
        let mut level: Vec<(&StructDef, String)> = vec![(def, String::new())];
        for _ in 0..depth {
            let mut next = Vec::new();
            for (s, prefix) in &level {
                for f in &s.fields {
                    let path = if prefix.is_empty() {
                        f.key.clone()
                    } else {
                        format!("{prefix}.{}", f.key)
                    };
                    if f.key.eq_ignore_ascii_case(key) {
                        return Some(path);
                    }
                    let (inner, suffix) = element(&f.ty);
                    if let Type::Struct(i) = inner {
                        next.push((self.set.get(*i), format!("{path}{suffix}")));
                    }
                }
            }
            level = next;
        }
        None
    }

    fn describe(&self, ty: &Type) -> String {
        match ty {
            Type::Scalar(s) => describe_scalar(*s).to_string(),
            Type::Struct(_) => "a mapping".into(),
            Type::List(inner) => match plural(inner) {
                Some(p) => format!("a list of {p}"),
                None => "a list".into(),
            },
            Type::Map(inner) => match plural(inner) {
                Some(p) => format!("a mapping of {p}"),
                None => "a mapping".into(),
            },
            Type::Either(options) => options
                .iter()
                .map(|o| self.describe(o))
                .collect::<Vec<_>>()
                .join(" or "),
        }
    }
}

/// Whether a type is a plain Go string, which any scalar (or null) decodes into.
fn is_plain(ty: &Type) -> bool {
    matches!(ty, Type::Scalar(Scalar::String | Scalar::Any))
}

/// The type a list or map holds, and how its path continues (`[]`, `.<name>`).
fn element(ty: &Type) -> (&Type, &'static str) {
    match ty {
        Type::List(inner) => (element(inner).0, "[]"),
        Type::Map(inner) => (element(inner).0, ".<name>"),
        other @ Type::Scalar(_) | other @ Type::Either(_) | other @ Type::Struct(_) => (other, ""),
    }
}

fn untagged(v: &Value) -> &Value {
    match v {
        Value::Tagged(t) => untagged(&t.value),
        other @ Value::Null
        | other @ Value::Bool(_)
        | other @ Value::Number(_)
        | other @ Value::String(_)
        | other @ Value::Sequence(_)
        | other @ Value::Mapping(_) => other,
    }
}

fn push_key(path: &mut String, key: &str) {
    if !path.is_empty() {
        path.push('.');
    }
    path.push_str(key);
}

/// A value path as a schema path: list indices become `[]`.
fn schema_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut in_index = false;
    for c in path.chars() {
        match c {
            '[' => {
                in_index = true;
                out.push_str("[]");
            }
            ']' => in_index = false,
            c if !in_index => out.push(c),
            _ => {}
        }
    }
    out
}

/// Whether a value has the YAML shape (scalar, list, mapping) a type wants.
fn same_shape(v: &Value, ty: &Type) -> bool {
    match (untagged(v), ty) {
        (Value::Sequence(_), Type::List(_)) => true,
        (Value::Mapping(_), Type::Map(_) | Type::Struct(_) | Type::Scalar(Scalar::Object)) => true,
        (Value::Bool(_) | Value::Number(_) | Value::String(_), Type::Scalar(s)) => {
            *s != Scalar::Object
        }
        _ => false,
    }
}

fn describe_scalar(s: Scalar) -> &'static str {
    match s {
        Scalar::String => "a string",
        Scalar::Int => "an integer",
        Scalar::Uint => "a non-negative integer",
        Scalar::Float => "a number",
        Scalar::Bool => "true or false",
        Scalar::Duration => "a duration such as 30s or 1h30m",
        Scalar::Ip => "an IP address",
        Scalar::Cidr => "an IP prefix such as 10.0.0.0/24",
        Scalar::IpPort => "an address and port such as 10.0.0.1:51820",
        Scalar::Base64 => "base64 text",
        Scalar::Object => "a mapping",
        Scalar::Any => "any value",
    }
}

/// `strings`, `string lists`, `strings or string lists`: how a list or map's items read.
fn plural(ty: &Type) -> Option<String> {
    Some(match ty {
        Type::Scalar(Scalar::String) => "strings".into(),
        Type::Scalar(Scalar::Int | Scalar::Uint) => "integers".into(),
        Type::Scalar(Scalar::Bool) => "true/false values".into(),
        Type::Scalar(Scalar::Ip) => "IP addresses".into(),
        Type::Scalar(Scalar::Cidr) => "IP prefixes".into(),
        Type::Scalar(Scalar::Object) | Type::Struct(_) => "mappings".into(),
        Type::List(inner) if **inner == Type::Scalar(Scalar::String) => "string lists".into(),
        Type::Either(options) => options
            .iter()
            .map(plural)
            .collect::<Option<Vec<_>>>()?
            .join(" or "),
        Type::Scalar(_) | Type::List(_) | Type::Map(_) => return None,
    })
}

/// How a value reads in a message: `a mapping`, `the number 42`, `the string "200"`.
fn found(v: &Value) -> String {
    match untagged(v) {
        Value::Null => "null".into(),
        Value::Bool(b) => format!("`{b}`"),
        Value::Number(n) => format!("the number {n}"),
        Value::String(s) => format!("the string {s:?}"),
        Value::Sequence(_) => "a list".into(),
        Value::Mapping(_) => "a mapping".into(),
        Value::Tagged(_) => "a tagged value".into(),
    }
}

/// Whether a scalar decodes into `s`, as Go's yaml decodes it; `Err` says why not.
fn scalar(v: &Value, s: Scalar) -> Result<(), String> {
    let wrong = || Err(format!("must be {}, not {}", describe_scalar(s), found(v)));
    match v {
        Value::Bool(_) | Value::Number(_) | Value::String(_) => {}
        Value::Sequence(_) | Value::Mapping(_) => {
            return match s {
                Scalar::Any => Ok(()),
                Scalar::Object if v.is_mapping() => Ok(()),
                Scalar::String
                | Scalar::Int
                | Scalar::Uint
                | Scalar::Float
                | Scalar::Bool
                | Scalar::Duration
                | Scalar::Ip
                | Scalar::Cidr
                | Scalar::IpPort
                | Scalar::Base64
                | Scalar::Object => wrong(),
            };
        }
        Value::Null | Value::Tagged(_) => return Ok(()),
    }
    if matches!(s, Scalar::String | Scalar::Any) {
        return Ok(());
    }
    let text = scalar_text(v).unwrap_or_default();
    let invalid = |what: &str| Err(format!("{:?} is not {what}", text));
    match s {
        Scalar::String | Scalar::Any => Ok(()),
        Scalar::Object => wrong(),
        Scalar::Int | Scalar::Float => match v {
            Value::Number(_) => Ok(()),
            Value::String(t) if go_int(t).is_some() => Ok(()),
            Value::Null
            | Value::Bool(_)
            | Value::String(_)
            | Value::Sequence(_)
            | Value::Mapping(_)
            | Value::Tagged(_) => wrong(),
        },
        Scalar::Uint => match v {
            Value::Number(n) if n.as_i64().is_some_and(|i| i < 0) => wrong(),
            Value::Number(n) if n.as_f64().is_some_and(|f| f < 0.0) => wrong(),
            Value::Number(_) => Ok(()),
            Value::String(t) if go_int(t).is_some_and(|i| i >= 0) => Ok(()),
            Value::Null
            | Value::Bool(_)
            | Value::String(_)
            | Value::Sequence(_)
            | Value::Mapping(_)
            | Value::Tagged(_) => wrong(),
        },
        // yaml.v3 `decoder.scalar`: a string decodes into a bool only in YAML 1.1 spelling.
        Scalar::Bool => match v {
            Value::Bool(_) => Ok(()),
            Value::String(t)
                if matches!(
                    t.as_str(),
                    "y" | "Y"
                        | "yes"
                        | "Yes"
                        | "YES"
                        | "on"
                        | "On"
                        | "ON"
                        | "n"
                        | "N"
                        | "no"
                        | "No"
                        | "NO"
                        | "off"
                        | "Off"
                        | "OFF"
                ) =>
            {
                Ok(())
            }
            Value::Null
            | Value::Number(_)
            | Value::String(_)
            | Value::Sequence(_)
            | Value::Mapping(_)
            | Value::Tagged(_) => wrong(),
        },
        Scalar::Duration => match v {
            Value::String(t) => {
                parse_go_duration(t).map_err(|e| format!("{t:?} is not a duration: {e}"))
            }
            Value::Null
            | Value::Bool(_)
            | Value::Number(_)
            | Value::Sequence(_)
            | Value::Mapping(_)
            | Value::Tagged(_) => wrong(),
        },
        Scalar::Ip => parse_ip(&text).map_or_else(|| invalid("an IP address"), |_| Ok(())),
        Scalar::Cidr => {
            if parse_prefix(&text) {
                Ok(())
            } else {
                invalid("an IP prefix (address/bits, such as 10.0.0.0/24)")
            }
        }
        Scalar::IpPort => {
            let plain = strip_zone(&text);
            match plain.parse::<SocketAddr>() {
                Ok(_) => Ok(()),
                Err(_) => invalid("an address and port (such as 10.0.0.1:51820)"),
            }
        }
        Scalar::Base64 => {
            use base64::Engine as _;
            match base64::engine::general_purpose::STANDARD.decode(text.as_bytes()) {
                Ok(_) => Ok(()),
                Err(_) => invalid("base64 text"),
            }
        }
    }
}

/// A plain scalar Go's yaml resolves as an integer that the YAML 1.2 parser here reads as a
/// string: `0644` (octal, as in YAML 1.1), `0b101`, `1_000` (yaml.v3 `resolve`:
/// `strconv.ParseInt` with base 0 after dropping underscores). A quoted `"0644"` is a string to
/// Go too, but the two cannot be told apart here, and a false refusal is the worse mistake.
fn go_int(text: &str) -> Option<i128> {
    let plain = text.replace('_', "");
    let (negative, digits) = match plain.strip_prefix(['-', '+']) {
        Some(rest) => (plain.starts_with('-'), rest),
        None => (false, plain.as_str()),
    };
    let lower = digits.to_ascii_lowercase();
    let (radix, body) = if let Some(b) = lower.strip_prefix("0x") {
        (16, b)
    } else if let Some(b) = lower.strip_prefix("0o") {
        (8, b)
    } else if let Some(b) = lower.strip_prefix("0b") {
        (2, b)
    } else if lower.len() > 1 && lower.starts_with('0') {
        (8, &lower[1..])
    } else {
        (10, lower.as_str())
    };
    if body.is_empty() || !body.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    let value = i128::from_str_radix(body, radix).ok()?;
    Some(if negative { -value } else { value })
}

/// Drop an IPv6 zone (`%eth0`), which Go's `netip.ParseAddr` accepts and Rust's parser does not.
fn strip_zone(text: &str) -> String {
    match (text.find('%'), text.find(']')) {
        (Some(p), Some(b)) if p < b => format!("{}{}", &text[..p], &text[b..]),
        (Some(p), None) => text[..p].to_string(),
        _ => text.to_string(),
    }
}

/// Go `netip.ParseAddr`: dotted-quad IPv4 without leading zeros, or IPv6 with an optional zone.
fn parse_ip(text: &str) -> Option<IpAddr> {
    if text.contains(':') {
        strip_zone(text).parse().ok()
    } else {
        text.parse().ok()
    }
}

/// Go `netip.ParsePrefix`: an address without zone, `/`, and bits in range without leading zeros.
fn parse_prefix(text: &str) -> bool {
    let Some((addr, bits)) = text.rsplit_once('/') else {
        return false;
    };
    if addr.contains('%') || bits.is_empty() || !bits.bytes().all(|b| b.is_ascii_digit()) {
        return false;
    }
    if bits.len() > 1 && bits.starts_with('0') {
        return false;
    }
    let Ok(bits) = bits.parse::<u32>() else {
        return false;
    };
    match addr.parse::<IpAddr>() {
        Ok(IpAddr::V4(_)) => bits <= 32,
        Ok(IpAddr::V6(_)) => bits <= 128,
        Err(_) => false,
    }
}

/// Go `time.ParseDuration`'s grammar: `[-+]?(number unit)+` or `0`; units ns, us (µs, μs), ms,
/// s, m, h; numbers may have a fraction.
pub fn parse_go_duration(text: &str) -> Result<(), String> {
    let body = text.strip_prefix(['-', '+']).unwrap_or(text);
    if body == "0" {
        return Ok(());
    }
    if body.is_empty() {
        return Err("empty duration".into());
    }
    let mut rest = body;
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !c.is_ascii_digit() && c != '.')
            .unwrap_or(rest.len());
        let number = &rest[..digits];
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return Err(format!("expected a number at {rest:?}"));
        }
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let unit = &rest[..unit_len];
        if unit.is_empty() {
            return Err("missing unit (ns, us, ms, s, m or h)".into());
        }
        if !matches!(unit, "ns" | "us" | "µs" | "μs" | "ms" | "s" | "m" | "h") {
            return Err(format!("unknown unit {unit:?} (ns, us, ms, s, m or h)"));
        }
        rest = &rest[unit_len..];
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(yaml: &str, contract: Contract) -> Vec<ConfigProblem> {
        let docs: Vec<Value> = serde_yaml_ng::Deserializer::from_str(yaml)
            .map(|d| serde::Deserialize::deserialize(d).unwrap())
            .collect();
        decode_config(&docs, contract)
    }

    fn messages(yaml: &str) -> Vec<String> {
        decode(yaml, Contract::V1_13)
            .into_iter()
            .map(|p| format!("{}: {}", p.field, p.message))
            .collect()
    }

    #[test]
    fn a_known_config_decodes_without_problems() {
        let yaml = "version: v1alpha1\ndebug: false\nmachine:\n  type: worker\n  install:\n    disk: /dev/sda\n    wipe: no\n  kubelet:\n    extraArgs:\n      max-pods: 200\n      feature-gates: [A=true, B=false]\n  network:\n    interfaces:\n      - interface: eth0\n        mtu: 1500\n        vip: {ip: 10.0.0.5}\n  time:\n    bootTimeout: 2m30s\ncluster:\n  network:\n    podSubnets: [10.244.0.0/16]\n  inlineManifests:\n    - name: a\n      contents: |\n        kind: Namespace\n---\napiVersion: v1alpha1\nkind: LinkConfig\nname: eth0\naddresses:\n  - address: 10.0.0.2/24\nroutes:\n  - gateway: 10.0.0.1\n";
        assert_eq!(messages(yaml), Vec::<String>::new());
    }

    #[test]
    fn thousands_of_unknown_keys_give_the_first_hundred_and_a_count() {
        let mut yaml = String::from("machine:\n  network:\n");
        for i in 0..20_000 {
            yaml.push_str(&format!("    stray{i}: 1\n"));
        }
        yaml.push_str("---\napiVersion: v1alpha1\nkind: HostnameConfig\nauto: stable\nodd: 1\n");
        let found = decode(&yaml, Contract::V1_13);
        assert_eq!(found.len(), MAX_UNKNOWN_KEYS + 2, "{:#?}", &found[..3]);
        assert!(
            found[..MAX_UNKNOWN_KEYS]
                .iter()
                .all(|p| p.kind == ProblemKind::UnknownKey)
        );
        assert_eq!(found[0].field, "machine.network.stray0");
        let summary = &found[MAX_UNKNOWN_KEYS];
        assert_eq!(
            (summary.document.as_str(), summary.field.as_str()),
            ("v1alpha1", "machine.network.stray100")
        );
        assert!(
            summary
                .message
                .starts_with("19900 more unknown keys in the v1alpha1 document, from `machine.network.stray100` on"),
            "{}",
            summary.message
        );
        // The next document's keys are counted, past the hundred, in its own summary.
        assert!(
            found[MAX_UNKNOWN_KEYS + 1]
                .message
                .starts_with("1 more unknown key in the "),
            "{}",
            found[MAX_UNKNOWN_KEYS + 1].message
        );
    }

    #[test]
    fn unknown_keys_are_refused_with_a_hint() {
        let found = messages(
            "machine:\n  foo: bar\n  network:\n    vip:\n      ip: 10.0.0.5\n    hostnmae: x\n",
        );
        assert_eq!(found.len(), 3, "{found:#?}");
        assert!(
            found[0].starts_with("machine.foo: unknown key `foo` in `machine`"),
            "{}",
            found[0]
        );
        assert!(
            found[1].ends_with("did you mean `machine.network.interfaces[].vip`?"),
            "{}",
            found[1]
        );
        assert!(
            found[2].ends_with("did you mean `machine.network.hostname`?"),
            "{}",
            found[2]
        );
    }

    #[test]
    fn values_of_the_wrong_type_are_refused() {
        let found = messages(
            "machine:\n  kubelet:\n    extraArgs: [a, b]\n  network:\n    interfaces: {}\n  install:\n    wipe: \"true\"\n  time:\n    bootTimeout: 30\n",
        );
        assert_eq!(
            found,
            [
                "machine.kubelet.extraArgs: `machine.kubelet.extraArgs` must be a mapping of strings or string lists, not a list",
                "machine.network.interfaces: `machine.network.interfaces` must be a list of mappings, not a mapping",
                "machine.install.wipe: `machine.install.wipe` must be true or false, not the string \"true\"",
                "machine.time.bootTimeout: `machine.time.bootTimeout` must be a duration such as 30s or 1h30m, not the number 30",
            ]
        );
    }

    #[test]
    fn strings_take_any_scalar_as_go_does() {
        assert_eq!(
            messages("machine:\n  install:\n    disk: 42\n  nodeLabels:\n    rack: 7\n"),
            Vec::<String>::new()
        );
    }

    #[test]
    fn the_contract_decides_what_is_known() {
        let yaml = "cluster:\n  network:\n    cni:\n      flannel:\n        kubeNetworkPoliciesEnabled: true\n  apiServer:\n    extraArgs:\n      flag: [a, b]\n---\napiVersion: v1alpha1\nkind: KubeSpanConfig\nenabled: true\n";
        assert!(decode(yaml, Contract::V1_13).is_empty());
        let old: Vec<String> = decode(yaml, Contract::V1_12)
            .into_iter()
            .map(|p| p.message)
            .collect();
        assert_eq!(old.len(), 3, "{old:#?}");
        assert!(old[0].contains("is in the v1.13 contract"), "{}", old[0]);
        assert!(
            old[1].contains("must be a string, not a list"),
            "{}",
            old[1]
        );
        assert!(
            old[2].contains("`KubeSpanConfig` documents are in the v1.13 contract"),
            "{}",
            old[2]
        );
    }

    #[test]
    fn a_key_in_the_wrong_place_is_pointed_to_its_place() {
        let found = messages(
            "machine:\n  cluster:\n    clusterName: a\n  certSANs: [a]\n  kubeletExtraArgs: {}\n  nodeIP:\n    validSubnets: []\n",
        );
        assert_eq!(found.len(), 3, "{found:#?}");
        assert!(
            found[0].ends_with("`cluster` belongs at `cluster`"),
            "{}",
            found[0]
        );
        assert!(
            found[1].starts_with("machine.kubeletExtraArgs: unknown key"),
            "{}",
            found[1]
        );
        assert!(
            found[2].ends_with("did you mean `machine.kubelet.nodeIP`?"),
            "{}",
            found[2]
        );
    }

    #[test]
    fn unknown_document_kinds_get_the_closest_kind() {
        let found = messages("apiVersion: v1alpha1\nkind: LinkConfg\nname: eth0\n");
        assert_eq!(found.len(), 1);
        assert!(
            found[0].ends_with("did you mean `LinkConfig`?"),
            "{}",
            found[0]
        );
    }

    #[test]
    fn typed_documents_check_their_fields_and_values() {
        let found = messages(
            "apiVersion: v1alpha1\nkind: LinkConfig\nname: eth0\nvip: 10.0.0.9\naddresses:\n  - address: 10.0.0.300/24\nroutes:\n  - gateway: 10.0.0.1\n    metric: -1\n",
        );
        assert_eq!(found.len(), 3, "{found:#?}");
        assert!(
            found[0].starts_with("vip: unknown key `vip` in the LinkConfig eth0 document"),
            "{}",
            found[0]
        );
        assert!(
            found[1].starts_with("addresses[0].address: "),
            "{}",
            found[1]
        );
        assert!(found[2].contains("non-negative integer"), "{}", found[2]);
    }

    #[test]
    fn integers_go_reads_from_yaml_1_1_forms_are_accepted() {
        let found = messages(
            "machine:\n  files:\n    - content: a\n      path: /var/a\n      op: create\n      permissions: 0644\n  kubelet:\n    extraMounts:\n      - destination: /a\n        uidMappings:\n          - {containerID: 0, hostID: 1_000, size: 0x10}\n",
        );
        assert_eq!(found, Vec::<String>::new());
        assert_eq!(go_int("0644"), Some(420));
        assert_eq!(go_int("-0b11"), Some(-3));
        assert_eq!(go_int("08"), None);
        assert_eq!(go_int("1.5"), None);
        let negative = messages("machine:\n  files:\n    - permissions: \"-01\"\n");
        assert_eq!(negative.len(), 1, "{negative:#?}");
    }

    #[test]
    fn go_durations_parse_as_go_parses_them() {
        for ok in ["0", "30s", "1h30m", "1.5h", "-5m", "300ms", "2µs", "10us"] {
            assert!(parse_go_duration(ok).is_ok(), "{ok}");
        }
        for bad in ["", "30", "5 m", "1d", "h", "1..5s"] {
            assert!(parse_go_duration(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn addresses_and_prefixes_parse_as_netip_does() {
        assert!(parse_prefix("10.0.0.0/24") && parse_prefix("fd00::/64"));
        assert!(
            !parse_prefix("10.0.0.0/33")
                && !parse_prefix("10.0.0.0/024")
                && !parse_prefix("10.0.0.0")
        );
        assert!(parse_ip("fe80::1%eth0").is_some() && parse_ip("10.0.0.01").is_none());
    }
}
