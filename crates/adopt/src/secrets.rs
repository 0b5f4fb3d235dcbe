//! The cluster's secrets bundle from a state's `talos_machine_secrets`
//! (siderolabs/talos provider, `pkg/talos/talos_machine_secrets_resource.go`).
//!
//! Schema version 1 (provider 0.2 and later) holds `machine_secrets` as an
//! object: talosctl's `secrets.yaml` with its keys renamed (`bootstrap_token`
//! for `bootstraptoken`, `k8s_aggregator` for `k8saggregator`, `cert` for
//! `crt`, ...) and the same base64 PEM values. Schema version 0 held the
//! bundle as one YAML string in talosctl's layout. Both are turned into that
//! layout and read by [`parse_secrets_yaml`], so a bundle adopted from a
//! state is checked exactly as one given to `secrets import`.

use serde_json::Value;
use serde_yaml_ng::{Mapping, Value as Yaml};

use super::tfstate::TfState;
use talosprov_base::sensitive::Sensitive;
use talosprov_machine::secrets::SecretsBundle;
use talosprov_machine::secrets_file::parse_secrets_yaml;

/// The secrets a state holds, ready for the new state.
#[derive(Debug)]
pub struct StateSecrets {
    /// The `talos_machine_secrets` instance they were read from.
    pub address: String,
    /// The bundle, checked as Talos checks one.
    pub bundle: SecretsBundle,
    /// The same bundle in talosctl's `secrets.yaml` layout.
    pub yaml: Sensitive<String>,
}

/// Why a state's secrets cannot be adopted; no message holds a secret value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SecretsError {
    /// No `talos_machine_secrets` instance with its secrets.
    #[error(
        "{file}: the state holds no talos_machine_secrets resource, so it has no secrets bundle \
         to adopt (secrets made by the ephemeral talos_machine_secrets of talos provider 0.10 \
         and later, or kept outside the state, are never in it): give the cluster's bundle with \
         --secrets secrets.yaml (`talosctl gen secrets --from-controlplane-config` makes one \
         from a control plane's machine config)"
    )]
    Missing {
        /// The state file.
        file: String,
    },
    /// Several clusters' secrets, and none chosen.
    #[error(
        "{file}: the state holds {} talos_machine_secrets instances ({}): name the cluster's \
         with --secrets-address",
        addresses.len(),
        addresses.join(", ")
    )]
    Ambiguous {
        /// The state file.
        file: String,
        /// Each instance's address.
        addresses: Vec<String>,
    },
    /// `--secrets-address` names no instance.
    #[error("{file}: no talos_machine_secrets instance at {address} (the state has: {})", known.join(", "))]
    NotFound {
        /// The state file.
        file: String,
        /// The address asked for.
        address: String,
        /// The instances there are.
        known: Vec<String>,
    },
    /// The instance's `machine_secrets` is missing a field or holds an
    /// invalid value: each problem, named by its state field.
    #[error("{file}: {address}.machine_secrets is not a usable bundle:\n  - {}", problems.join("\n  - "))]
    Invalid {
        /// The state file.
        file: String,
        /// The instance's address.
        address: String,
        /// One line per problem, naming the field.
        problems: Vec<String>,
    },
}

/// The bundle of `state`'s `talos_machine_secrets` instance: the one at
/// `address` when given, else the only one.
///
/// # Errors
/// [`SecretsError`]: none, several and none chosen, the chosen one absent,
/// or a bundle Talos would refuse (each field named).
pub fn machine_secrets(
    state: &TfState,
    address: Option<&str>,
) -> Result<StateSecrets, SecretsError> {
    let file = state.file.clone();
    let all: Vec<_> = state.managed("talos_machine_secrets").collect();
    let known = || all.iter().map(|i| i.address.clone()).collect::<Vec<_>>();
    let instance = match (address, all.as_slice()) {
        (_, []) => return Err(SecretsError::Missing { file }),
        (Some(a), _) => {
            *all.iter()
                .find(|i| i.address == a)
                .ok_or_else(|| SecretsError::NotFound {
                    file: file.clone(),
                    address: a.to_owned(),
                    known: known(),
                })?
        }
        (None, [one]) => *one,
        (None, _) => {
            return Err(SecretsError::Ambiguous {
                file,
                addresses: known(),
            });
        }
    };
    let invalid = |problems: Vec<String>| SecretsError::Invalid {
        file: file.clone(),
        address: instance.address.clone(),
        problems,
    };
    let yaml = match instance.attribute("machine_secrets") {
        Some(Value::String(text)) => text.clone(),
        Some(v @ Value::Object(_)) => talosctl_layout(v)
            .ok_or_else(|| invalid(vec!["machine_secrets does not convert to YAML".into()]))?,
        Some(Value::Null) | None => {
            return Err(invalid(vec!["machine_secrets is missing".into()]));
        }
        Some(_) => return Err(invalid(vec!["machine_secrets is not an object".into()])),
    };
    let bundle = parse_secrets_yaml(&yaml).map_err(|e| match e {
        talosprov_machine::secrets_file::SecretsFileError::Invalid { problems } => {
            invalid(problems.iter().map(|p| state_field_names(p)).collect())
        }
        talosprov_machine::secrets_file::SecretsFileError::Yaml { line, .. } => {
            invalid(vec![format!(
                "machine_secrets is not a secrets bundle in talosctl's layout{}",
                line.map(|l| format!(" (line {l})")).unwrap_or_default()
            )])
        }
    })?;
    Ok(StateSecrets {
        address: instance.address.clone(),
        bundle,
        yaml: Sensitive::new(yaml),
    })
}

/// The state's names for talosctl's keys, and back: `(state, talosctl)`.
const RENAMED: [(&str, &str); 5] = [
    ("bootstrap_token", "bootstraptoken"),
    ("secretbox_encryption_secret", "secretboxencryptionsecret"),
    ("aescbc_encryption_secret", "aescbcencryptionsecret"),
    ("k8s_aggregator", "k8saggregator"),
    ("k8s_serviceaccount", "k8sserviceaccount"),
];

/// A problem of [`parse_secrets_yaml`] (which names talosctl's keys) with
/// the state's key names, as the user sees them in the state.
fn state_field_names(problem: &str) -> String {
    let mut out = problem.replace(".crt", ".cert");
    for (state, talosctl) in RENAMED {
        out = out.replace(talosctl, state);
    }
    format!("machine_secrets.{out}")
}

/// `machine_secrets` (an object) as talosctl's `secrets.yaml`: every
/// string member kept, keys renamed; members that are not strings or
/// objects (null for an unset `aescbc_encryption_secret`) left out.
fn talosctl_layout(value: &Value) -> Option<String> {
    fn convert(v: &Value) -> Option<Yaml> {
        match v {
            Value::String(s) => Some(Yaml::String(s.clone())),
            Value::Object(members) => {
                let mut m = Mapping::new();
                for (key, value) in members {
                    let key = match key.as_str() {
                        "cert" => "crt",
                        k => RENAMED
                            .iter()
                            .find(|(state, _)| *state == k)
                            .map_or(k, |(_, talosctl)| talosctl),
                    };
                    if let Some(v) = convert(value) {
                        m.insert(Yaml::String(key.to_owned()), v);
                    }
                }
                Some(Yaml::Mapping(m))
            }
            Value::Null | Value::Bool(_) | Value::Number(_) | Value::Array(_) => None,
        }
    }
    convert(value).and_then(|y| serde_yaml_ng::to_string(&y).ok())
}
