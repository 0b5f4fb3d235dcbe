//! What a state's siderolabs/talos resources say about the cluster
//! (`pkg/talos/*_resource.go` and `*_data_source.go` of the provider):
//!
//! - `data.talos_machine_configuration`: `cluster_name`, `cluster_endpoint`,
//!   `machine_type`, `talos_version`, `kubernetes_version`;
//! - `talos_machine_configuration_apply`, one per node: `node`, `endpoint`,
//!   `apply_mode`, `config_patches[]`, and the config. Schema version 1 keeps
//!   the input in `machine_configuration_input` and the result of the patches
//!   in `machine_configuration`, with its SHA-256 in
//!   `machine_configuration_hash`; with the write-only input (provider 0.10
//!   and later, `machine_configuration_input_wo`) only the hash may be left.
//!   Schema version 0 kept the input in `machine_configuration`;
//! - `talos_machine_bootstrap`: the cluster was bootstrapped;
//! - `talos_cluster_kubeconfig`: `kubeconfig_raw`.

use serde_json::Value;

use super::tfstate::{Instance, TfState};
use talosprov_base::sensitive::Sensitive;

/// The cluster-wide values of the state's `talos_machine_configuration`
/// data sources (the first that sets each).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterFacts {
    /// `cluster_name`.
    pub name: Option<String>,
    /// `cluster_endpoint`, e.g. `https://192.168.1.120:6443`.
    pub endpoint: Option<String>,
    /// `talos_version`, as given (`v1.13.8`, or a contract such as `v1.13`).
    pub talos_version: Option<String>,
    /// `kubernetes_version`, e.g. `1.36.2` or `v1.36.2`.
    pub kubernetes_version: Option<String>,
    /// Each data source's address, for the report.
    pub sources: Vec<String>,
    /// Data sources that disagree on a value: `(field, address, value)`,
    /// after the first one that set it.
    pub conflicts: Vec<(String, String, String)>,
}

/// The config a node runs, as the state knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeConfig {
    /// The whole config after the patches (`machine_configuration`, schema 1).
    Rendered(Sensitive<String>),
    /// Only its input, to which `config_patches` apply (schema 0, or
    /// schema 1 whose result was not kept).
    Input(Sensitive<String>),
    /// Only the SHA-256 of the result (the write-only input): the config
    /// itself must be read from the node.
    Hash(String),
    /// Nothing: the config must be read from the node.
    Unknown,
}

/// One `talos_machine_configuration_apply` instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppliedConfig {
    /// Its address.
    pub address: String,
    /// `node`: the node's IP or name, as the Talos API is reached.
    pub node: String,
    /// `endpoint`, when set and not the node itself.
    pub endpoint: Option<String>,
    /// `apply_mode` (`auto`, `reboot`, `no_reboot`, `staged`, ...).
    pub apply_mode: Option<String>,
    /// `config_patches`, in order (they may hold secrets: kept sensitive).
    pub config_patches: Vec<Sensitive<String>>,
    /// The config, as far as the state holds it.
    pub config: NodeConfig,
    /// The config the patches applied to, when kept
    /// (`machine_configuration_input`; `machine_configuration` in schema 0).
    pub input: Option<Sensitive<String>>,
    /// `machine_configuration_hash`, when the state has it.
    pub config_hash: Option<String>,
}

/// The Talos side of a state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TalosSide {
    /// The cluster's values.
    pub facts: ClusterFacts,
    /// Each node's applied config, in state order.
    pub applied: Vec<AppliedConfig>,
    /// A `talos_machine_bootstrap` instance exists: the cluster was
    /// bootstrapped, and talosprov must never bootstrap it again.
    pub bootstrapped: bool,
    /// `talos_cluster_kubeconfig.kubeconfig_raw`, when kept.
    pub kubeconfig: Option<Sensitive<String>>,
}

fn text(i: &Instance, key: &str) -> Option<String> {
    i.attribute(key)
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
}

/// Read the Talos side of `state`.
pub fn talos_side(state: &TfState) -> TalosSide {
    let mut facts = ClusterFacts::default();
    for i in state.data("talos_machine_configuration") {
        facts.sources.push(i.address.clone());
        for (field, slot) in [
            ("cluster_name", &mut facts.name),
            ("cluster_endpoint", &mut facts.endpoint),
            ("talos_version", &mut facts.talos_version),
            ("kubernetes_version", &mut facts.kubernetes_version),
        ] {
            let Some(v) = text(i, field) else { continue };
            match slot {
                None => *slot = Some(v),
                Some(have) if *have != v => {
                    facts
                        .conflicts
                        .push((field.to_owned(), i.address.clone(), v));
                }
                Some(_) => {}
            }
        }
    }
    let applied = state
        .managed("talos_machine_configuration_apply")
        .map(applied_config)
        .collect();
    TalosSide {
        facts,
        applied,
        bootstrapped: state.managed("talos_machine_bootstrap").next().is_some(),
        kubeconfig: state
            .managed("talos_cluster_kubeconfig")
            .chain(state.data("talos_cluster_kubeconfig"))
            .find_map(|i| text(i, "kubeconfig_raw"))
            .map(Sensitive::new),
    }
}

fn applied_config(i: &Instance) -> AppliedConfig {
    let node = text(i, "node").unwrap_or_default();
    let patches = i
        .attribute("config_patches")
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .filter_map(Value::as_str)
                .map(|s| Sensitive::new(s.to_owned()))
                .collect()
        })
        .unwrap_or_default();
    let hash = text(i, "machine_configuration_hash");
    let config = if i.schema_version == 0 {
        text(i, "machine_configuration").map(|c| NodeConfig::Input(Sensitive::new(c)))
    } else {
        text(i, "machine_configuration")
            .map(|c| NodeConfig::Rendered(Sensitive::new(c)))
            .or_else(|| {
                text(i, "machine_configuration_input").map(|c| NodeConfig::Input(Sensitive::new(c)))
            })
    }
    .or_else(|| hash.clone().map(NodeConfig::Hash))
    .unwrap_or(NodeConfig::Unknown);
    let input = if i.schema_version == 0 {
        text(i, "machine_configuration")
    } else {
        text(i, "machine_configuration_input")
    }
    .map(Sensitive::new);
    AppliedConfig {
        input,
        address: i.address.clone(),
        endpoint: text(i, "endpoint").filter(|e| *e != node),
        node,
        apply_mode: text(i, "apply_mode"),
        config_patches: patches,
        config,
        config_hash: hash,
    }
}
