//! An OpenTofu or Terraform state file, format version 4: `{version,
//! terraform_version, serial, lineage, outputs, resources[]}`, each resource
//! `{module, mode, type, name, provider, instances[]}` and each instance
//! `{index_key, schema_version, attributes, sensitive_attributes}`
//! (OpenTofu's `internal/states/statefile/version4.go`). Resources in
//! modules and under `count` or `for_each` are flattened to one
//! [`Instance`] each, with the address OpenTofu prints for it
//! (`module.cluster["a"].talos_machine_secrets.this[0]`).

use serde::Deserialize;
use serde_json::Value;

use talosprov_base::load::{Budget, check_json_bytes};

/// Why a state file cannot be read; every message names the file, and none
/// holds a value of the state.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TfStateError {
    /// Not JSON, cut short, or beyond [`Budget::STATE`].
    #[error("{file}:{line}:{column}: {message}")]
    Syntax {
        /// The state file, as the user named it.
        file: String,
        /// 1-based line of the problem.
        line: u32,
        /// 1-based column.
        column: u32,
        /// What is wrong.
        message: String,
    },
    /// A state whose `version` is not 4.
    #[error(
        "{file}: state format version {found} is not read (only version 4, written by \
         Terraform 0.12 and later and by every OpenTofu): {hint}"
    )]
    Version {
        /// The state file.
        file: String,
        /// The `version` it holds (`none` when it has none).
        found: String,
        /// How to get a version 4 state.
        hint: &'static str,
    },
    /// Encrypted with OpenTofu's state encryption (`encrypted_data`).
    #[error(
        "{file}: the state is encrypted with OpenTofu's state encryption ({method}); adopt \
         reads a plain state: write one with `tofu state pull > plain.tfstate` in the old \
         configuration (with its encryption key), adopt from it, then delete it"
    )]
    Encrypted {
        /// The state file.
        file: String,
        /// Its `encryption_version`, e.g. `v0`.
        method: String,
    },
    /// Valid JSON of another shape: the JSON path of the first wrong member.
    #[error("{file}: {path}: {message}")]
    Shape {
        /// The state file.
        file: String,
        /// Where, e.g. `resources[3].instances[0]`.
        path: String,
        /// What is wrong.
        message: String,
    },
}

/// A resource's mode: `managed` (a `resource` block) or `data`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// `resource "type" "name"`.
    Managed,
    /// `data "type" "name"`.
    Data,
}

/// One instance of one resource, with its attributes as the provider stored
/// them (sensitive ones included: callers keep them out of what they print).
#[derive(Debug, Clone, PartialEq)]
pub struct Instance {
    /// Its address, as `tofu state list` prints it.
    pub address: String,
    /// Its module path (`module.a.module.b`), empty at the root.
    pub module: String,
    /// Managed or data.
    pub mode: Mode,
    /// The resource type, e.g. `talos_machine_secrets`.
    pub kind: String,
    /// The resource name in its module.
    pub name: String,
    /// The provider address, e.g.
    /// `provider["registry.opentofu.org/siderolabs/talos"]`.
    pub provider: String,
    /// `count.index` (a number) or `each.key` (a string); `None` for a
    /// resource with neither.
    pub index_key: Option<Value>,
    /// The provider's schema version of `attributes`.
    pub schema_version: u64,
    /// The attributes.
    pub attributes: Value,
}

impl Instance {
    /// The provider's type name (`siderolabs/talos`, `bpg/proxmox`): the
    /// last two segments of [`Instance::provider`]'s registry address.
    pub fn provider_name(&self) -> String {
        let inner = self
            .provider
            .split_once("[\"")
            .and_then(|(_, rest)| rest.split_once("\"]"))
            .map_or(self.provider.as_str(), |(inner, _)| inner);
        let parts: Vec<&str> = inner.split('/').collect();
        match parts.as_slice() {
            [.., ns, name] => format!("{ns}/{name}"),
            _ => inner.to_owned(),
        }
    }

    /// The attribute at `path` (`machine_secrets.certs.os.cert`), when every
    /// step is an object member.
    pub fn attribute(&self, path: &str) -> Option<&Value> {
        path.split('.')
            .try_fold(&self.attributes, |v, key| v.as_object()?.get(key))
    }
}

/// A state file, read.
#[derive(Debug, Clone, PartialEq)]
pub struct TfState {
    /// The file it was read from, for messages.
    pub file: String,
    /// `terraform_version`: the OpenTofu or Terraform that wrote it.
    pub terraform_version: String,
    /// `serial`.
    pub serial: u64,
    /// `lineage`.
    pub lineage: String,
    /// Every resource instance, in file order.
    pub instances: Vec<Instance>,
}

#[derive(Deserialize)]
struct RawState {
    #[serde(default)]
    terraform_version: String,
    #[serde(default)]
    serial: u64,
    #[serde(default)]
    lineage: String,
    #[serde(default)]
    resources: Vec<Value>,
}

#[derive(Deserialize)]
struct RawResource {
    #[serde(default)]
    module: String,
    mode: Mode,
    #[serde(rename = "type")]
    kind: String,
    name: String,
    #[serde(default)]
    provider: String,
    #[serde(default)]
    instances: Vec<RawInstance>,
}

#[derive(Deserialize)]
struct RawInstance {
    #[serde(default)]
    index_key: Option<Value>,
    #[serde(default)]
    schema_version: u64,
    #[serde(default)]
    attributes: Option<Value>,
}

impl TfState {
    /// Read `bytes`, the content of `file`.
    ///
    /// # Errors
    /// [`TfStateError::Syntax`] for text that is not JSON (a truncated file
    /// is refused at its end) or beyond [`Budget::STATE`];
    /// [`TfStateError::Encrypted`]; [`TfStateError::Version`] for any format
    /// but 4; [`TfStateError::Shape`] for a resource or instance of the
    /// wrong shape, naming its place.
    pub fn parse(bytes: &[u8], file: &str) -> Result<TfState, TfStateError> {
        let syntax = |line: usize, column: usize, message: String| TfStateError::Syntax {
            file: file.to_owned(),
            line: u32::try_from(line).unwrap_or(u32::MAX),
            column: u32::try_from(column).unwrap_or(u32::MAX),
            message,
        };
        check_json_bytes(bytes, Budget::STATE)
            .map_err(|e| syntax(e.pos.line as usize, e.pos.column as usize, e.message))?;
        let value: Value = serde_json::from_slice(bytes).map_err(|e| {
            let message = if e.is_eof() {
                format!("the state ends too early, so the file is truncated ({e})")
            } else {
                e.to_string()
            };
            syntax(e.line(), e.column(), message)
        })?;
        let top = value.as_object().ok_or_else(|| TfStateError::Shape {
            file: file.to_owned(),
            path: "(the document)".into(),
            message: "a state is a JSON object".into(),
        })?;
        if top.contains_key("encrypted_data") {
            let method = top
                .get("encryption_version")
                .and_then(Value::as_str)
                .unwrap_or("unknown method");
            return Err(TfStateError::Encrypted {
                file: file.to_owned(),
                method: method.to_owned(),
            });
        }
        check_version(top.get("version"), file)?;
        let raw: RawState = serde_json::from_value(value).map_err(|e| TfStateError::Shape {
            file: file.to_owned(),
            path: "(the document)".into(),
            message: e.to_string(),
        })?;
        let mut instances = Vec::new();
        for (i, resource) in raw.resources.into_iter().enumerate() {
            instances.extend(flatten(resource, i, file)?);
        }
        Ok(TfState {
            file: file.to_owned(),
            terraform_version: raw.terraform_version,
            serial: raw.serial,
            lineage: raw.lineage,
            instances,
        })
    }

    /// The managed instances of resource type `kind`, in file order.
    pub fn managed<'s>(&'s self, kind: &'s str) -> impl Iterator<Item = &'s Instance> + 's {
        self.instances
            .iter()
            .filter(move |i| i.mode == Mode::Managed && i.kind == kind)
    }

    /// The data instances of type `kind`, in file order.
    pub fn data<'s>(&'s self, kind: &'s str) -> impl Iterator<Item = &'s Instance> + 's {
        self.instances
            .iter()
            .filter(move |i| i.mode == Mode::Data && i.kind == kind)
    }
}

/// Refuse every `version` but 4, saying how to get a version 4 state.
fn check_version(version: Option<&Value>, file: &str) -> Result<(), TfStateError> {
    let hint = match version.and_then(Value::as_u64) {
        Some(4) => return Ok(()),
        Some(0..=3) => {
            "it was written by Terraform before 0.12; run `terraform apply` once with Terraform \
             0.12 or later (or `tofu apply`) to upgrade it"
        }
        Some(_) => "it was written by a newer tool than adopt knows",
        None => "is this a state file? It has no numeric `version`",
    };
    Err(TfStateError::Version {
        file: file.to_owned(),
        found: version.map_or_else(|| "none".to_owned(), ToString::to_string),
        hint,
    })
}

/// One resource's instances, each with its address.
fn flatten(resource: Value, i: usize, file: &str) -> Result<Vec<Instance>, TfStateError> {
    let r: RawResource = serde_json::from_value(resource).map_err(|e| TfStateError::Shape {
        file: file.to_owned(),
        path: format!("resources[{i}]"),
        message: e.to_string(),
    })?;
    let prefix = match (r.module.is_empty(), r.mode) {
        (true, Mode::Managed) => String::new(),
        (true, Mode::Data) => "data.".to_owned(),
        (false, Mode::Managed) => format!("{}.", r.module),
        (false, Mode::Data) => format!("{}.data.", r.module),
    };
    let mut out = Vec::with_capacity(r.instances.len());
    for (j, inst) in r.instances.into_iter().enumerate() {
        let key = match &inst.index_key {
            None | Some(Value::Null) => String::new(),
            Some(Value::Number(n)) => format!("[{n}]"),
            Some(Value::String(s)) => format!("[{}]", Value::String(s.clone())),
            Some(other) => {
                return Err(TfStateError::Shape {
                    file: file.to_owned(),
                    path: format!("resources[{i}].instances[{j}].index_key"),
                    message: format!("an index key is a number or a string, not {other}"),
                });
            }
        };
        let attributes = inst.attributes.ok_or_else(|| TfStateError::Shape {
            file: file.to_owned(),
            path: format!("resources[{i}].instances[{j}]"),
            message: "the instance has no `attributes` (a state older than version 4's \
                      attributes_flat is not read)"
                .into(),
        })?;
        out.push(Instance {
            address: format!("{prefix}{}.{}{key}", r.kind, r.name),
            module: r.module.clone(),
            mode: r.mode,
            kind: r.kind.clone(),
            name: r.name.clone(),
            provider: r.provider.clone(),
            index_key: inst.index_key.filter(|k| !k.is_null()),
            schema_version: inst.schema_version,
            attributes,
        });
    }
    Ok(out)
}
