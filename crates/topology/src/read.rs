//! Reading `cluster.yaml` into the raw topology with saphyr, which gives the
//! line and column of every key. Every unknown key and every value of the wrong
//! type is reported, not only the first; unknown keys get a "did you mean".

use super::raw::{
    Entry, Label, RawAddon, RawBackup, RawBackupS3, RawCluster, RawDisk, RawHa, RawHelm,
    RawHostPci, RawImageFactory, RawNetwork, RawNode, RawPciHost, RawPciMapping, RawPool,
    RawProxmox, RawSchematic, RawState, RawTopology, Spanned,
};
use saphyr::{LoadableYamlNode, MarkedYaml, Scalar, YamlData};
use std::path::Path;
use talosprov_base::diagnostics::{Code, Diagnostic, Pos, did_you_mean};

/// Parse the topology file's text into the raw model.
///
/// Returns `None` for the model when the text is not one YAML mapping (the
/// diagnostics then hold the one syntax error); otherwise the model with every
/// field that could be read, and diagnostics for unknown keys and wrong types.
/// `file` only labels the diagnostics. Never panics, whatever the input.
pub fn read(text: &str, file: &Path) -> (Option<RawTopology>, Vec<Diagnostic>) {
    let syntax = |pos: Pos, msg: String| Diagnostic::error(Code::YamlSyntax, file, msg).at(pos);
    // The bounded loader's checks (nesting, aliases, nodes) before saphyr builds anything.
    if let Err(e) = talosprov_base::load::check_yaml(text, talosprov_base::load::Budget::INPUT) {
        return (
            None,
            vec![Diagnostic::error(Code::InputLimit, file, e.message).at(e.pos)],
        );
    }
    let docs = match MarkedYaml::load_from_str(text) {
        Ok(docs) => docs,
        Err(e) => {
            let m = e.marker();
            let pos = Pos::new(to_u32(m.line()), to_u32(m.col() + 1));
            return (
                None,
                vec![syntax(pos, format!("invalid YAML: {}", e.info()))],
            );
        }
    };
    let mut docs = docs.into_iter();
    let Some(doc) = docs.next() else {
        let msg =
            "the file is empty; it must be a YAML mapping with `cluster`, `proxmox` and `nodes`";
        return (None, vec![syntax(Pos::new(1, 1), msg.into())]);
    };
    if let Some(second) = docs.next() {
        let msg = "the file holds more than one YAML document; put the whole topology in one";
        return (None, vec![syntax(pos_of(&second), msg.into())]);
    }
    let mut reader = Reader {
        file,
        node: None,
        diagnostics: Vec::new(),
    };
    if !matches!(unwrap_tag(&doc).data, YamlData::Mapping(_)) {
        let msg = format!(
            "the file must be a YAML mapping with `cluster`, `proxmox` and `nodes`, found {}",
            kind(&doc)
        );
        return (None, vec![syntax(pos_of(&doc), msg)]);
    }
    let raw = reader.topology(&doc);
    (raw, reader.diagnostics)
}

fn to_u32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

fn pos_of(node: &MarkedYaml<'_>) -> Pos {
    Pos::new(
        to_u32(node.span.start.line()),
        to_u32(node.span.start.col() + 1),
    )
}

fn unwrap_tag<'a, 'i>(node: &'a MarkedYaml<'i>) -> &'a MarkedYaml<'i> {
    match &node.data {
        YamlData::Tagged(_, inner) => unwrap_tag(inner),
        YamlData::Representation(..)
        | YamlData::Value(_)
        | YamlData::Sequence(_)
        | YamlData::Mapping(_)
        | YamlData::Alias(_)
        | YamlData::BadValue => node,
    }
}

fn is_null(node: &MarkedYaml<'_>) -> bool {
    matches!(unwrap_tag(node).data, YamlData::Value(Scalar::Null))
}

/// The YAML type of a node, for messages: "a list", "the integer 12".
fn kind(node: &MarkedYaml<'_>) -> String {
    match &unwrap_tag(node).data {
        YamlData::Mapping(_) => "a mapping".into(),
        YamlData::Sequence(_) => "a list".into(),
        YamlData::Value(Scalar::Null) => "nothing (null)".into(),
        YamlData::Value(Scalar::Boolean(b)) => format!("the boolean {b}"),
        YamlData::Value(Scalar::Integer(i)) => format!("the integer {i}"),
        // A number too large for an f64 reads as infinite: say so rather than `inf`.
        YamlData::Value(Scalar::FloatingPoint(f)) if f.is_nan() => "not a number (.nan)".into(),
        YamlData::Value(Scalar::FloatingPoint(f)) if f.is_infinite() => {
            "an infinite number, or one too large to read".into()
        }
        YamlData::Value(Scalar::FloatingPoint(f)) => format!("the number {f}"),
        YamlData::Value(Scalar::String(s)) => {
            format!("the string \"{}\"", talosprov_base::limits::quoted(s))
        }
        YamlData::Representation(..)
        | YamlData::Tagged(..)
        | YamlData::Alias(_)
        | YamlData::BadValue => "a value that cannot be read".into(),
    }
}

/// A YAML node as JSON: mapping keys as strings, `.nan` and infinities as
/// null (JSON has neither), anything unreadable as null.
fn to_json(node: &MarkedYaml<'_>) -> serde_json::Value {
    use serde_json::Value;
    match &unwrap_tag(node).data {
        YamlData::Mapping(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let key = match to_json(k) {
                        Value::String(s) => s,
                        other @ Value::Null
                        | other @ Value::Bool(_)
                        | other @ Value::Number(_)
                        | other @ Value::Array(_)
                        | other @ Value::Object(_) => other.to_string(),
                    };
                    (key, to_json(v))
                })
                .collect(),
        ),
        YamlData::Sequence(items) => Value::Array(items.iter().map(to_json).collect()),
        YamlData::Value(Scalar::Boolean(b)) => Value::Bool(*b),
        YamlData::Value(Scalar::Integer(i)) => Value::from(*i),
        YamlData::Value(Scalar::FloatingPoint(f)) => {
            serde_json::Number::from_f64(f.into_inner()).map_or(Value::Null, Value::Number)
        }
        YamlData::Value(Scalar::String(s)) => Value::String(s.to_string()),
        YamlData::Representation(..)
        | YamlData::Value(_)
        | YamlData::Tagged(..)
        | YamlData::Alias(_)
        | YamlData::BadValue => Value::Null,
    }
}

/// The keys of one mapping, and the keys the format knows at that place.
struct Fields<'a, 'i> {
    path: String,
    entries: Vec<(String, Pos, &'a MarkedYaml<'i>)>,
    known: Vec<&'static str>,
}

struct Reader<'f> {
    file: &'f Path,
    /// Hostname of the node being read, for diagnostics.
    node: Option<String>,
    diagnostics: Vec<Diagnostic>,
}

fn child(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

impl Reader<'_> {
    fn error(&mut self, code: Code, pos: Pos, field: &str, message: String) {
        let d = Diagnostic::error(code, self.file, message)
            .at(pos)
            .on_node(self.node.as_deref())
            .field(field);
        self.diagnostics.push(d);
    }

    fn wrong_type(&mut self, pos: Pos, field: &str, expected: &str, node: &MarkedYaml<'_>) {
        let msg = format!("`{field}` must be {expected}, found {}", kind(node));
        self.error(Code::WrongType, pos, field, msg);
    }

    /// Open a mapping node; a wrong type is reported and gives `None`.
    fn fields<'a, 'i>(
        &mut self,
        node: &'a MarkedYaml<'i>,
        pos: Pos,
        path: &str,
    ) -> Option<Fields<'a, 'i>> {
        let YamlData::Mapping(map) = &unwrap_tag(node).data else {
            self.wrong_type(pos, path, "a mapping", node);
            return None;
        };
        let entries = map
            .iter()
            .map(|(k, v)| {
                let name = match &unwrap_tag(k).data {
                    YamlData::Value(Scalar::String(s)) => s.to_string(),
                    YamlData::Value(Scalar::Integer(i)) => i.to_string(),
                    YamlData::Value(Scalar::Boolean(b)) => b.to_string(),
                    YamlData::Value(Scalar::FloatingPoint(f)) => f.to_string(),
                    YamlData::Representation(..)
                    | YamlData::Value(_)
                    | YamlData::Sequence(_)
                    | YamlData::Mapping(_)
                    | YamlData::Tagged(..)
                    | YamlData::Alias(_)
                    | YamlData::BadValue => "(not a plain key)".to_owned(),
                };
                (name, pos_of(k), v)
            })
            .collect();
        Some(Fields {
            path: path.to_owned(),
            entries,
            known: Vec::new(),
        })
    }

    /// Report every key of `f` that was never asked for, with a suggestion.
    fn finish(&mut self, f: Fields<'_, '_>) {
        for (name, pos, _) in &f.entries {
            if f.known.contains(&name.as_str()) {
                continue;
            }
            let field = child(&f.path, name);
            let suggestion = did_you_mean(name, f.known.iter().copied());
            let place = if f.path.is_empty() {
                "at the top level".to_owned()
            } else {
                format!("in `{}`", f.path)
            };
            let msg = format!("unknown key `{name}` {place}{suggestion}");
            self.error(Code::UnknownKey, *pos, &field, msg);
        }
    }

    /// Take key `key` of `f`: its key position and value, unless absent or null.
    fn take<'a, 'i>(
        &mut self,
        f: &mut Fields<'a, 'i>,
        key: &'static str,
    ) -> Option<(Pos, &'a MarkedYaml<'i>, String)> {
        f.known.push(key);
        let (_, pos, value) = f.entries.iter().find(|(k, _, _)| k == key)?;
        if is_null(value) {
            return None;
        }
        Some((*pos, *value, child(&f.path, key)))
    }

    fn scalar_string(&mut self, node: &MarkedYaml<'_>, pos: Pos, field: &str) -> Option<String> {
        match &unwrap_tag(node).data {
            YamlData::Value(Scalar::String(s)) => Some(s.to_string()),
            YamlData::Representation(..)
            | YamlData::Value(_)
            | YamlData::Sequence(_)
            | YamlData::Mapping(_)
            | YamlData::Tagged(..)
            | YamlData::Alias(_)
            | YamlData::BadValue => {
                self.wrong_type(pos, field, "a string", node);
                None
            }
        }
    }

    fn string(&mut self, f: &mut Fields<'_, '_>, key: &'static str) -> Option<Spanned<String>> {
        let (pos, node, field) = self.take(f, key)?;
        let s = self.scalar_string(node, pos, &field)?;
        Some(Spanned::new(s, pos))
    }

    /// A duration as text: a string as written, or a whole number of seconds
    /// as its digits (parsed later by `duration::parse`).
    fn duration_text(
        &mut self,
        f: &mut Fields<'_, '_>,
        key: &'static str,
    ) -> Option<Spanned<String>> {
        let (pos, node, field) = self.take(f, key)?;
        match &unwrap_tag(node).data {
            YamlData::Value(Scalar::String(s)) => Some(Spanned::new(s.to_string(), pos)),
            YamlData::Value(Scalar::Integer(i)) => Some(Spanned::new(i.to_string(), pos)),
            YamlData::Representation(..)
            | YamlData::Value(_)
            | YamlData::Sequence(_)
            | YamlData::Mapping(_)
            | YamlData::Tagged(..)
            | YamlData::Alias(_)
            | YamlData::BadValue => {
                self.wrong_type(pos, &field, "a duration such as 26h, or seconds", node);
                None
            }
        }
    }

    fn uint(&mut self, f: &mut Fields<'_, '_>, key: &'static str) -> Option<Spanned<u64>> {
        let (pos, node, field) = self.take(f, key)?;
        match &unwrap_tag(node).data {
            YamlData::Value(Scalar::Integer(i)) if *i >= 0 => {
                Some(Spanned::new(u64::try_from(*i).unwrap_or(0), pos))
            }
            YamlData::Representation(..)
            | YamlData::Value(_)
            | YamlData::Sequence(_)
            | YamlData::Mapping(_)
            | YamlData::Tagged(..)
            | YamlData::Alias(_)
            | YamlData::BadValue => {
                self.wrong_type(pos, &field, "a whole number, 0 or more", node);
                None
            }
        }
    }

    fn boolean(&mut self, f: &mut Fields<'_, '_>, key: &'static str) -> Option<Spanned<bool>> {
        let (pos, node, field) = self.take(f, key)?;
        match &unwrap_tag(node).data {
            YamlData::Value(Scalar::Boolean(b)) => Some(Spanned::new(*b, pos)),
            YamlData::Representation(..)
            | YamlData::Value(_)
            | YamlData::Sequence(_)
            | YamlData::Mapping(_)
            | YamlData::Tagged(..)
            | YamlData::Alias(_)
            | YamlData::BadValue => {
                self.wrong_type(pos, &field, "true or false", node);
                None
            }
        }
    }

    /// A list, each item read by `item` (given the item, its position and path).
    fn list<'a, 'i, T>(
        &mut self,
        f: &mut Fields<'a, 'i>,
        key: &'static str,
        mut item: impl FnMut(&mut Self, &'a MarkedYaml<'i>, Pos, &str) -> Option<T>,
    ) -> Option<Spanned<Vec<Spanned<T>>>> {
        let (pos, node, field) = self.take(f, key)?;
        let YamlData::Sequence(items) = &unwrap_tag(node).data else {
            self.wrong_type(pos, &field, "a list", node);
            return None;
        };
        let mut out = Vec::with_capacity(items.len());
        for (i, it) in items.iter().enumerate() {
            let p = pos_of(it);
            if let Some(v) = item(self, it, p, &format!("{field}[{i}]")) {
                out.push(Spanned::new(v, p));
            }
        }
        Some(Spanned::new(out, pos))
    }

    fn string_list(
        &mut self,
        f: &mut Fields<'_, '_>,
        key: &'static str,
    ) -> Option<Spanned<Vec<Spanned<String>>>> {
        self.list(f, key, |r, node, pos, field| {
            r.scalar_string(node, pos, field)
        })
    }

    /// A mapping from names to entries, each read by `entry`.
    fn named<'a, 'i, T>(
        &mut self,
        f: &mut Fields<'a, 'i>,
        key: &'static str,
        mut entry: impl FnMut(&mut Self, Fields<'a, 'i>, Pos) -> T,
    ) -> Option<Spanned<Vec<Entry<T>>>> {
        let (pos, node, field) = self.take(f, key)?;
        let map = self.fields(node, pos, &field)?;
        let mut out = Vec::with_capacity(map.entries.len());
        for (name, npos, value) in map.entries {
            let path = child(&field, &name);
            let value = if is_null(value) {
                // `name:` with nothing after it: an empty entry.
                Some(Fields {
                    path,
                    entries: Vec::new(),
                    known: Vec::new(),
                })
            } else {
                self.fields(value, npos, &path)
            };
            if let Some(fields) = value {
                let v = entry(self, fields, npos);
                out.push(Entry {
                    name: Spanned::new(name, npos),
                    value: v,
                });
            }
        }
        Some(Spanned::new(out, pos))
    }

    /// A sub-mapping read by `section`.
    fn section<'a, 'i, T>(
        &mut self,
        f: &mut Fields<'a, 'i>,
        key: &'static str,
        section: impl FnOnce(&mut Self, &mut Fields<'a, 'i>) -> T,
    ) -> Option<Spanned<T>> {
        let (pos, node, field) = self.take(f, key)?;
        let mut fields = self.fields(node, pos, &field)?;
        let v = section(self, &mut fields);
        self.finish(fields);
        Some(Spanned::new(v, pos))
    }

    fn topology(&mut self, doc: &MarkedYaml<'_>) -> Option<RawTopology> {
        let mut f = self.fields(doc, pos_of(doc), "")?;
        let raw = RawTopology {
            cluster: self.section(&mut f, "cluster", Self::cluster),
            proxmox: self.section(&mut f, "proxmox", Self::proxmox),
            image_factory: self.section(&mut f, "image_factory", |r, f| RawImageFactory {
                url: r.string(f, "url"),
            }),
            schematics: self.named(&mut f, "schematics", Self::schematic),
            default_schematic: self.string(&mut f, "default_schematic"),
            pci_mappings: self.named(&mut f, "pci_mappings", Self::pci_mapping),
            nodes: self.list(&mut f, "nodes", |r, node, pos, field| {
                r.node(node, pos, field)
            }),
            patches_dir: self.string_or_list(&mut f, "patches_dir"),
            state: self.section(&mut f, "state", Self::state),
            addons: self.named(&mut f, "addons", Self::addon),
            pools: self.named(&mut f, "pools", Self::pool),
            backup: self.section(&mut f, "backup", |r, f| RawBackup {
                destination: r.string(f, "destination"),
                keep_last: r.uint(f, "keep_last"),
                keep_daily: r.uint(f, "keep_daily"),
                max_age: r.duration_text(f, "max_age"),
                s3: r.section(f, "s3", |r, f| RawBackupS3 {
                    instance_credentials: r.boolean(f, "instance_credentials"),
                }),
            }),
        };
        self.finish(f);
        Some(raw)
    }

    fn cluster(&mut self, f: &mut Fields<'_, '_>) -> RawCluster {
        RawCluster {
            name: self.string(f, "name"),
            talos_version: self.string(f, "talos_version"),
            kubernetes_version: self.string(f, "kubernetes_version"),
            vip: self.string(f, "vip"),
            endpoint: self.string(f, "endpoint"),
            gateway: self.string(f, "gateway"),
            prefix_length: self.uint(f, "prefix_length"),
            nameservers: self.string_list(f, "nameservers"),
            install_disk: self.string(f, "install_disk"),
        }
    }

    fn proxmox(&mut self, f: &mut Fields<'_, '_>) -> RawProxmox {
        RawProxmox {
            endpoint: self.string(f, "endpoint"),
            node: self.string(f, "node"),
            datastore: self.string(f, "datastore"),
            image_storage: self.string(f, "image_storage"),
            bridge: self.string(f, "bridge"),
            networks: self.list(f, "networks", |r, n, p, field| r.network(n, p, field)),
            disks: self.list(f, "disks", |r, n, p, field| r.disk(n, p, field)),
            ha: self.section(f, "ha", Self::ha),
            spread: self.string_list(f, "spread"),
            pool: self.string(f, "pool"),
            insecure: self.boolean(f, "insecure"),
            ca_file: self.string(f, "ca_file"),
            fingerprint: self.string(f, "fingerprint"),
        }
    }

    fn schematic(&mut self, mut f: Fields<'_, '_>, pos: Pos) -> RawSchematic {
        let s = RawSchematic {
            pos,
            extensions: self.string_list(&mut f, "extensions"),
            kernel_args: self.string_list(&mut f, "kernel_args"),
            id: self.string(&mut f, "id"),
        };
        self.finish(f);
        s
    }

    fn pci_mapping(&mut self, mut f: Fields<'_, '_>, pos: Pos) -> RawPciMapping {
        let m = RawPciMapping {
            pos,
            path: self.string(&mut f, "path"),
            id: self.string(&mut f, "id"),
            iommu_group: self.uint(&mut f, "iommu_group"),
            subsystem_id: self.string(&mut f, "subsystem_id"),
            comment: self.string(&mut f, "comment"),
            node: self.string(&mut f, "node"),
            map: self.list(&mut f, "map", |r, n, p, field| r.pci_host(n, p, field)),
        };
        self.finish(f);
        m
    }

    fn pci_host(&mut self, n: &MarkedYaml<'_>, p: Pos, field: &str) -> Option<RawPciHost> {
        let mut f = self.fields(n, p, field)?;
        let h = RawPciHost {
            node: self.string(&mut f, "node"),
            path: self.string(&mut f, "path"),
            id: self.string(&mut f, "id"),
            subsystem_id: self.string(&mut f, "subsystem_id"),
            iommu_group: self.uint(&mut f, "iommu_group"),
        };
        self.finish(f);
        Some(h)
    }

    fn node(&mut self, node: &MarkedYaml<'_>, pos: Pos, path: &str) -> Option<RawNode> {
        let mut f = self.fields(node, pos, path)?;
        // Diagnostics inside a node name it by hostname, when it has a usable one.
        self.node = f
            .entries
            .iter()
            .find(|(k, _, _)| k == "hostname")
            .and_then(|(_, _, v)| match &unwrap_tag(v).data {
                YamlData::Value(Scalar::String(s)) => Some(s.to_string()),
                YamlData::Representation(..)
                | YamlData::Value(_)
                | YamlData::Sequence(_)
                | YamlData::Mapping(_)
                | YamlData::Tagged(..)
                | YamlData::Alias(_)
                | YamlData::BadValue => None,
            });
        let raw = RawNode {
            hostname: self.string(&mut f, "hostname"),
            ip: self.string(&mut f, "ip"),
            role: self.string(&mut f, "role"),
            cores: self.uint(&mut f, "cores"),
            memory: self.uint(&mut f, "memory"),
            disk_size: self.uint(&mut f, "disk_size"),
            vm_id: self.uint(&mut f, "vm_id"),
            proxmox_node: self.string(&mut f, "proxmox_node"),
            schematic: self.string(&mut f, "schematic"),
            hostpci: self.list(&mut f, "hostpci", |r, n, p, field| r.hostpci(n, p, field)),
            tags: self.string_list(&mut f, "tags"),
            networks: self.list(&mut f, "networks", |r, n, p, field| r.network(n, p, field)),
            disks: self.list(&mut f, "disks", |r, n, p, field| r.disk(n, p, field)),
            ha: self.section(&mut f, "ha", Self::ha),
        };
        self.finish(f);
        self.node = None;
        Some(raw)
    }

    /// One string, read as a list of one, or a list of strings.
    fn string_or_list(
        &mut self,
        f: &mut Fields<'_, '_>,
        key: &'static str,
    ) -> Option<Spanned<Vec<Spanned<String>>>> {
        let is_list = f
            .entries
            .iter()
            .find(|(k, _, _)| k == key)
            .is_some_and(|(_, _, v)| matches!(unwrap_tag(v).data, YamlData::Sequence(_)));
        if is_list {
            return self.string_list(f, key);
        }
        let one = self.string(f, key)?;
        let pos = one.pos;
        Some(Spanned::new(vec![one], pos))
    }

    fn pool(&mut self, mut f: Fields<'_, '_>, pos: Pos) -> RawPool {
        let p = RawPool {
            pos,
            role: self.string(&mut f, "role"),
            replicas: self.uint(&mut f, "replicas"),
            hostname: self.string(&mut f, "hostname"),
            ip_range: self.string(&mut f, "ip_range"),
            vm_id_start: self.uint(&mut f, "vm_id_start"),
            proxmox_nodes: self.string_list(&mut f, "proxmox_nodes"),
            cores: self.uint(&mut f, "cores"),
            memory: self.uint(&mut f, "memory"),
            disk_size: self.uint(&mut f, "disk_size"),
            schematic: self.string(&mut f, "schematic"),
            tags: self.string_list(&mut f, "tags"),
            hostpci: self.list(&mut f, "hostpci", |r, n, p, field| r.hostpci(n, p, field)),
            networks: self.list(&mut f, "networks", |r, n, p, field| r.network(n, p, field)),
            disks: self.list(&mut f, "disks", |r, n, p, field| r.disk(n, p, field)),
            ha: self.section(&mut f, "ha", Self::ha),
        };
        self.finish(f);
        p
    }

    fn network(&mut self, n: &MarkedYaml<'_>, p: Pos, field: &str) -> Option<RawNetwork> {
        let mut f = self.fields(n, p, field)?;
        let net = RawNetwork {
            bridge: self.string(&mut f, "bridge"),
            vlan: self.uint(&mut f, "vlan"),
            mtu: self.uint(&mut f, "mtu"),
            mac: self.string(&mut f, "mac"),
            firewall: self.boolean(&mut f, "firewall"),
        };
        self.finish(f);
        Some(net)
    }

    fn disk(&mut self, n: &MarkedYaml<'_>, p: Pos, field: &str) -> Option<RawDisk> {
        let mut f = self.fields(n, p, field)?;
        let d = RawDisk {
            size: self.uint(&mut f, "size"),
            datastore: self.string(&mut f, "datastore"),
            ssd: self.boolean(&mut f, "ssd"),
            iothread: self.boolean(&mut f, "iothread"),
            discard: self.boolean(&mut f, "discard"),
            cache: self.string(&mut f, "cache"),
            mount: self.string(&mut f, "mount"),
        };
        self.finish(f);
        Some(d)
    }

    fn ha(&mut self, f: &mut Fields<'_, '_>) -> RawHa {
        RawHa {
            state: self.string(f, "state"),
            max_restart: self.uint(f, "max_restart"),
            max_relocate: self.uint(f, "max_relocate"),
        }
    }

    fn hostpci(&mut self, n: &MarkedYaml<'_>, p: Pos, field: &str) -> Option<RawHostPci> {
        let mut f = self.fields(n, p, field)?;
        let h = RawHostPci {
            device: self.string(&mut f, "device"),
            mapping: self.string(&mut f, "mapping"),
            pcie: self.boolean(&mut f, "pcie"),
            rombar: self.boolean(&mut f, "rombar"),
            xvga: self.boolean(&mut f, "xvga"),
        };
        self.finish(f);
        Some(h)
    }

    fn addon(&mut self, mut f: Fields<'_, '_>, pos: Pos) -> RawAddon {
        let a = RawAddon {
            pos,
            preset: self.string(&mut f, "preset"),
            helm: self.section(&mut f, "helm", |r, f| RawHelm {
                repo: r.string(f, "repo"),
                chart: r.string(f, "chart"),
                version: r.string(f, "version"),
                values: r.mapping_value(f, "values"),
                values_files: r.string_list(f, "values_files"),
            }),
            manifests: self.string_list(&mut f, "manifests"),
            url: self.string(&mut f, "url"),
            sha256: self.string(&mut f, "sha256"),
            namespace: self.string(&mut f, "namespace"),
            namespace_labels: self.string_map(&mut f, "namespace_labels"),
            phase: self.string(&mut f, "phase"),
            depends_on: self.string_list(&mut f, "depends_on"),
        };
        self.finish(f);
        a
    }

    /// A mapping of strings to strings (labels), in file order.
    fn string_map(
        &mut self,
        f: &mut Fields<'_, '_>,
        key: &'static str,
    ) -> Option<Spanned<Vec<Label>>> {
        let (pos, node, field) = self.take(f, key)?;
        let map = self.fields(node, pos, &field)?;
        let mut out = Vec::with_capacity(map.entries.len());
        for (name, npos, value) in map.entries {
            let path = child(&field, &name);
            if let Some(v) = self.scalar_string(value, npos, &path) {
                out.push((Spanned::new(name, npos), Spanned::new(v, npos)));
            }
        }
        Some(Spanned::new(out, pos))
    }

    /// A free-form mapping (chart values), as JSON: keys as strings, scalars
    /// as their YAML 1.2 types.
    fn mapping_value(
        &mut self,
        f: &mut Fields<'_, '_>,
        key: &'static str,
    ) -> Option<Spanned<serde_json::Value>> {
        let (pos, node, field) = self.take(f, key)?;
        if !matches!(unwrap_tag(node).data, YamlData::Mapping(_)) {
            self.wrong_type(pos, &field, "a mapping", node);
            return None;
        }
        Some(Spanned::new(to_json(node), pos))
    }

    fn state(&mut self, f: &mut Fields<'_, '_>) -> RawState {
        RawState {
            backend: self.string(f, "backend"),
            path: self.string(f, "path"),
            address: self.string(f, "address"),
            lock_address: self.string(f, "lock_address"),
            unlock_address: self.string(f, "unlock_address"),
            lock_method: self.string(f, "lock_method"),
            unlock_method: self.string(f, "unlock_method"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_number_too_large_for_a_float_is_named_as_such_not_inf() {
        let text = format!(
            "cluster:\n  name: x\nnodes:\n  - hostname: a\n    memory: 1{}\n",
            "0".repeat(400)
        );
        let (_, diagnostics) = read(&text, Path::new("c.yaml"));
        let memory = diagnostics
            .iter()
            .find(|d| d.field.as_deref() == Some("nodes[0].memory"))
            .expect("memory is refused");
        assert!(
            memory
                .message
                .contains("an infinite number, or one too large to read"),
            "{}",
            memory.message
        );
        assert!(!memory.message.contains("inf,"), "{}", memory.message);
    }

    fn one(text: &str) -> (Option<RawTopology>, Vec<Diagnostic>) {
        read(text, Path::new("c.yaml"))
    }

    #[test]
    fn every_key_keeps_its_line_and_column() {
        let (raw, d) = one("cluster:\n  name: lab\nnodes:\n  - hostname: a\n    memory: 4096\n");
        assert!(d.is_empty(), "{d:?}");
        let raw = raw.expect("raw");
        let cluster = raw.cluster.expect("cluster");
        assert_eq!(cluster.pos, Pos::new(1, 1));
        assert_eq!(cluster.value.name.expect("name").pos, Pos::new(2, 3));
        let node = &raw.nodes.expect("nodes").value[0];
        assert_eq!(node.pos, Pos::new(4, 5));
        let memory = node.value.memory.as_ref().expect("memory");
        assert_eq!((memory.value, memory.pos), (4096, Pos::new(5, 5)));
    }

    #[test]
    fn all_unknown_keys_are_reported_with_suggestions() {
        let (_, d) = one("clustr: {}\nnodes:\n  - hostnme: a\n    zzz: 1\n");
        let msgs: Vec<(&str, Option<Pos>)> =
            d.iter().map(|d| (d.message.as_str(), d.pos)).collect();
        assert_eq!(
            msgs,
            [
                (
                    "unknown key `hostnme` in `nodes[0]`; did you mean `hostname`?",
                    Some(Pos::new(3, 5))
                ),
                ("unknown key `zzz` in `nodes[0]`", Some(Pos::new(4, 5))),
                (
                    "unknown key `clustr` at the top level; did you mean `cluster`?",
                    Some(Pos::new(1, 1))
                ),
            ]
        );
    }

    #[test]
    fn syntax_errors_have_a_position() {
        let (raw, d) = one("cluster:\n  name: [a\n");
        assert!(raw.is_none());
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].code, Code::YamlSyntax);
        assert!(d[0].pos.is_some());
    }

    #[test]
    fn duplicate_keys_are_syntax_errors() {
        let (raw, d) = one("cluster:\n  name: a\n  name: b\n");
        assert!(raw.is_none());
        assert_eq!(d[0].code, Code::YamlSyntax);
        assert_eq!(d[0].pos.map(|p| p.line), Some(3));
    }

    #[test]
    fn the_file_must_be_one_mapping() {
        for text in [
            "",
            "# only a comment\n",
            "- a\n- b\n",
            "a: 1\n---\nb: 2\n",
            "just text",
        ] {
            let (raw, d) = one(text);
            assert!(raw.is_none(), "{text:?}");
            assert_eq!(d.len(), 1, "{text:?}");
            assert_eq!(d[0].code, Code::YamlSyntax, "{text:?}");
        }
    }

    #[test]
    fn null_values_read_as_absent() {
        let (raw, d) = one("cluster:\n  name:\n  vip: ~\n");
        assert!(d.is_empty(), "{d:?}");
        let c = raw.expect("raw").cluster.expect("cluster").value;
        assert_eq!((c.name, c.vip), (None, None));
    }

    #[test]
    fn deep_flow_nesting_and_huge_node_counts_are_input_limits_at_their_place() {
        let (raw, d) = one(&format!("cluster:\n  name: {}\n", "[".repeat(100_000)));
        assert!(raw.is_none());
        assert_eq!(d[0].code, Code::InputLimit);
        assert_eq!(d[0].pos, Some(Pos::new(2, 73)), "{}", d[0].message);
        assert!(d[0].message.contains("deeper than 64"), "{}", d[0].message);
        let (_, d) = one(&format!("nodes: [{}0]\n", "0,".repeat(1_100_000)));
        assert_eq!(d[0].code, Code::InputLimit);
        assert!(
            d[0].message.contains("more than 1000000 values"),
            "{}",
            d[0].message
        );
    }

    #[test]
    fn anchors_and_aliases_are_expanded() {
        let text = "nodes:\n  - &n {hostname: a, cores: 2}\n  - *n\n";
        let (raw, d) = one(text);
        assert!(d.is_empty(), "{d:?}");
        let nodes = raw.expect("raw").nodes.expect("nodes").value;
        assert_eq!(nodes.len(), 2);
        assert_eq!(nodes[1].value.cores.as_ref().map(|c| c.value), Some(2));
    }

    #[test]
    fn wrong_types_are_all_reported() {
        let (_, d) = one(
            "cluster:\n  prefix_length: -1\n  nameservers: 1.1.1.1\nproxmox:\n  insecure: yes\n",
        );
        let fields: Vec<_> = d
            .iter()
            .map(|d| (d.code, d.field.clone().unwrap_or_default()))
            .collect();
        assert_eq!(
            fields,
            [
                (Code::WrongType, "cluster.prefix_length".to_owned()),
                (Code::WrongType, "cluster.nameservers".to_owned()),
                (Code::WrongType, "proxmox.insecure".to_owned()),
            ]
        );
    }
}
