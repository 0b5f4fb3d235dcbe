//! An adoption put together: the topology ([`super::topology`]), each
//! node's patches derived against talosprov's own base config for the same
//! secrets, role and versions ([`super::diff`]) and factored into the patch
//! tree ([`super::patches`]), then rendered as `plan` renders them, and the
//! state's records of what exists.
//!
//! A node's patches are, in order: what turns talosprov's base config into
//! the source's input config, then the source's own patches; when that does
//! not give the config the node runs (a patch talosprov merges otherwise),
//! a last patch makes up the difference. Where the source kept no input,
//! the node's patches are what turns the base into its running config.
//!
//! Talos's encoder may write the same config in other bytes than
//! talosprov's (key order): the state then records both digests, so that
//! the first plan sees the running config as the one applied
//! ([`crate::state::format::NodeConfig::running_sha256`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use sha2::Digest as _;

use super::diff::{Piece, first_difference, patches_between, pieces_between};
use super::patches::{NodePatches, PatchTree, factor};
use super::proxmox::ProxmoxSide;
use super::talos::ClusterFacts;
use super::topology::{
    AdoptError, AdoptedNode, NodeSource, Settings, Sides, match_nodes, system_disk, write,
};
use talosprov_base::inputs::MemoryInputs;
use talosprov_base::sensitive::Sensitive;
use talosprov_machine::secrets::SecretsBundle;
use talosprov_patch::apply::apply_patches;
use talosprov_patch::document::MachineConfig;
use talosprov_patch::load::load_patch;
use talosprov_patch::set::PatchSet;
use talosprov_plan::desired::RenderedConfig;
use talosprov_statefile::format;
use talosprov_topology::model::{Environment, Topology};

/// Everything an adoption is made from.
pub struct Source<'a> {
    /// The nodes, as the source gives them.
    pub nodes: Vec<NodeSource>,
    /// The cluster's values from the Talos side.
    pub facts: &'a ClusterFacts,
    /// The Proxmox side.
    pub proxmox: &'a ProxmoxSide,
    /// Adopt's settings.
    pub settings: &'a Settings,
    /// The secrets bundle.
    pub secrets: &'a SecretsBundle,
    /// The text of the bundle, to keep its values out of the patches.
    pub secrets_yaml: &'a str,
    /// The cluster was bootstrapped (`talos_machine_bootstrap`, or etcd
    /// runs): talosprov must never bootstrap it again.
    pub bootstrapped: bool,
    /// When, as RFC 3339 UTC, for the bootstrap record.
    pub now: String,
    /// The folder the files go to (absolute): the topology is rendered
    /// there, in memory.
    pub dir: &'a Path,
    /// `PROXMOX_VE_ENDPOINT`, when set.
    pub proxmox_endpoint_env: Option<String>,
    /// Whether the image storage is shared between hosts (one download
    /// serves all).
    pub image_storage_shared: bool,
}

/// An adoption: the files to write, the state's records and the report.
#[derive(Debug)]
pub struct Adopted {
    /// The files, by path relative to the folder: `cluster.yaml` and each
    /// patch under `patches/`. The patches hold no secret of the bundle.
    pub files: Vec<(PathBuf, String)>,
    /// The records: VMs, images, PCI mappings, node configs, bootstrap.
    pub resources: format::Resources,
    /// Each node's rendered machine config, by hostname (the outputs).
    pub machineconfigs: BTreeMap<String, Sensitive<String>>,
    /// The topology as loaded from the files.
    pub topology: Topology,
    /// What was adopted: one line per record, naming its source.
    pub adopted: Vec<String>,
    /// What could not be expressed, or was left out, with its consequence.
    pub report: Vec<String>,
}

/// The patch tree's files: `patches/common/`, `patches/<role>/`,
/// `patches/nodes/<hostname>/`, each patch `NN-<label>.yaml` in merge order.
fn tree_files(tree: &PatchTree, labels: &BTreeMap<String, String>) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut folder = |dir: PathBuf, list: &[Sensitive<String>]| {
        // Every number as wide as the last one, so byte-wise order is merge
        // order (`0999-…` before `1000-…`).
        let width = list.len().saturating_sub(1).to_string().len().max(2);
        for (i, p) in list.iter().enumerate() {
            let label = labels
                .get(p.expose().trim())
                .map_or("patch", String::as_str);
            out.push((
                dir.join(format!("{i:0width$}-{label}.yaml")),
                p.expose().clone(),
            ));
        }
    };
    folder(PathBuf::from("patches/common"), &tree.common);
    for (role, list) in &tree.roles {
        folder(PathBuf::from("patches").join(role.as_str()), list);
    }
    for (host, list) in &tree.nodes {
        folder(PathBuf::from("patches/nodes").join(host), list);
    }
    out
}

/// Load the topology and patch tree from `files` and render every node.
fn render(
    dir: &Path,
    files: &[(PathBuf, String)],
    secrets: &SecretsBundle,
    env: &Environment,
) -> Result<(Topology, Vec<talosprov_machine::node::NodeConfig>), AdoptError> {
    let mut inputs = MemoryInputs::new();
    for (path, text) in files {
        inputs = inputs.with(dir.join(path), text.as_bytes().to_vec());
    }
    let file = dir.join("cluster.yaml");
    let lines = |d: &[talosprov_base::diagnostics::Diagnostic]| AdoptError {
        problems: d
            .iter()
            .filter(|d| d.severity == talosprov_base::diagnostics::Severity::Error)
            .map(|d| {
                let place = [
                    d.node.as_deref().map(|n| format!("node {n}")),
                    d.field.clone(),
                ]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(", ");
                format!("the adopted topology ({}, {place}): {}", d.code, d.message)
            })
            .collect(),
    };
    let loaded = talosprov_topology::load(&file, &inputs, env).map_err(|e| AdoptError {
        problems: vec![e.to_string()],
    })?;
    let topology = match loaded.topology {
        Some(t) if !talosprov_base::diagnostics::has_errors(&loaded.diagnostics) => t,
        _ => return Err(lines(&loaded.diagnostics)),
    };
    let patches = PatchSet::load(&topology, &inputs).map_err(|d| lines(&d))?;
    let configs = talosprov_machine::node::node_configs(&topology, secrets, &patches, &[])
        .map_err(|d| lines(&d))?;
    Ok((topology, configs))
}

/// The strings of the bundle that are secret (keys, tokens, secrets), at
/// least 16 characters long.
fn secret_values(secrets_yaml: &str) -> Vec<String> {
    fn walk(v: &serde_yaml_ng::Value, key: &str, out: &mut Vec<String>) {
        match v {
            serde_yaml_ng::Value::Mapping(m) => {
                for (k, v) in m {
                    walk(v, k.as_str().unwrap_or_default(), out);
                }
            }
            serde_yaml_ng::Value::String(s) => {
                if key != "crt" && key != "id" && s.len() >= 16 {
                    out.push(s.clone());
                }
            }
            serde_yaml_ng::Value::Null
            | serde_yaml_ng::Value::Bool(_)
            | serde_yaml_ng::Value::Number(_)
            | serde_yaml_ng::Value::Sequence(_)
            | serde_yaml_ng::Value::Tagged(_) => {}
        }
    }
    let mut out = Vec::new();
    if let Ok(v) = serde_yaml_ng::from_str::<serde_yaml_ng::Value>(secrets_yaml) {
        walk(&v, "", &mut out);
    }
    out
}

/// Whether `patches` applied to `base` give a config that means `target`.
fn gives(base: &MachineConfig, patches: &[String], target: &MachineConfig) -> bool {
    applied(base, patches).is_some_and(|c| first_difference(&c, target).is_none())
}

/// `patches` applied to `base`, when they all load and apply.
fn applied(base: &MachineConfig, patches: &[String]) -> Option<MachineConfig> {
    let loaded: Result<Vec<_>, _> = patches
        .iter()
        .enumerate()
        .map(|(i, t)| load_patch(format!("patch {i}"), t))
        .collect();
    apply_patches(base, &loaded.ok()?).ok()
}

/// A node's patches: the leading ones, with their labels, then the pieces
/// that make up the rest of its difference (see [`Piece`]).
type NodeList = (Vec<(String, String)>, Vec<Piece>);

fn texts(lead: &[(String, String)], tail: &[Piece]) -> Vec<String> {
    lead.iter()
        .map(|(_, t)| t.clone())
        .chain(tail.iter().flat_map(Piece::patches))
        .collect()
}

/// `lead`, then the pieces that make the result into `target`, when that
/// gives it.
fn completed(
    base: &MachineConfig,
    lead: Vec<(String, String)>,
    target: &MachineConfig,
) -> Option<NodeList> {
    let patched = applied(base, &texts(&lead, &[]))?;
    let tail = pieces_between(&patched, target);
    gives(base, &texts(&lead, &tail), target).then_some((lead, tail))
}

/// The patches of one node: the source's own patches first, as they are,
/// then what makes talosprov's base config with them into the running
/// config; else the difference from talosprov's base to the source's input
/// first; else the whole difference.
fn node_patches(n: &AdoptedNode, base: &MachineConfig, report: &mut Vec<String>) -> NodeList {
    let own: Vec<(String, String)> = n
        .patches
        .iter()
        .enumerate()
        .map(|(i, p)| (format!("config-patch-{i}"), p.expose().clone()))
        .collect();
    if let Some(list) = completed(base, own.clone(), &n.running) {
        return list;
    }
    if let Some(input) = &n.input {
        let mut lead: Vec<(String, String)> = patches_between(base, input)
            .into_iter()
            .map(|p| ("base".to_owned(), p))
            .collect();
        lead.extend(own.iter().cloned());
        if let Some(list) = completed(base, lead, &n.running) {
            return list;
        }
    }
    if !own.is_empty() {
        report.push(format!(
            "{}: its {} config patch(es) could not be kept apart (talosprov merges them \
             otherwise over its own base config): nodes/{}/ holds the node's whole difference \
             from talosprov's base config instead",
            n.source,
            own.len(),
            n.hostname
        ));
    }
    (Vec::new(), pieces_between(base, &n.running))
}

/// Each node's patches in merge order, labelled: its leading ones, then its
/// pieces, those more nodes share first (pieces touch different fields, so
/// their order is free), so that factoring moves what nodes share up to
/// `common/` and `<role>/`.
fn ordered(lists: Vec<NodeList>) -> Vec<Vec<(String, String)>> {
    let count = |p: &Piece| lists.iter().filter(|(_, t)| t.contains(p)).count();
    lists
        .iter()
        .map(|(lead, tail)| {
            let mut tail = tail.clone();
            tail.sort_by(|a, b| count(b).cmp(&count(a)).then_with(|| a.label.cmp(&b.label)));
            let mut out = lead.clone();
            for piece in &tail {
                let label = format!("adopted-{}", piece.label);
                out.extend(piece.patches().into_iter().map(|t| (label.clone(), t)));
            }
            out
        })
        .collect()
}

/// Refuse a patch that holds a value of the bundle, or a field Talos keeps
/// secret: the patches are files beside the topology, the secrets go to the
/// state only.
fn check_secrets(files: &[(PathBuf, String)], secrets_yaml: &str) -> Result<(), AdoptError> {
    let values = secret_values(secrets_yaml);
    let mut problems = Vec::new();
    for (path, text) in files {
        if values.iter().any(|v| text.contains(v.as_str())) {
            problems.push(format!(
                "{}: would hold a value of the cluster's secrets bundle; talosprov keeps the \
                 secrets in the state only",
                path.display()
            ));
            continue;
        }
        if let Ok(config) = MachineConfig::parse(text) {
            let mut redacted = config.documents.clone();
            talosprov_machine::redact::redact_secrets(&mut redacted);
            if redacted != config.documents {
                problems.push(format!(
                    "{}: would hold a field Talos keeps secret (a key, token or credential); \
                     move it out of the source's patches (a registry credential, say, belongs \
                     in a template reading it from the environment) and adopt again",
                    path.display()
                ));
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(AdoptError { problems })
    }
}

/// Each node's patches, ready to factor, and each patch's label by its
/// text.
fn patch_lists(
    nodes: &[AdoptedNode],
    bases: &[talosprov_machine::node::NodeConfig],
    report: &mut Vec<String>,
) -> Result<(Vec<NodePatches>, BTreeMap<String, String>), AdoptError> {
    let mut lists = Vec::new();
    for n in nodes {
        let base = bases
            .iter()
            .find(|b| b.hostname == n.hostname)
            .and_then(|b| MachineConfig::parse(b.yaml.expose()).ok())
            .ok_or_else(|| AdoptError {
                problems: vec![format!("{}: no base config was rendered", n.hostname)],
            })?;
        lists.push(node_patches(n, &base, report));
    }
    let mut labels = BTreeMap::new();
    let mut per_node = Vec::new();
    for (n, list) in nodes.iter().zip(ordered(lists)) {
        for (label, text) in &list {
            labels
                .entry(text.trim().to_owned())
                .or_insert_with(|| label.clone());
        }
        per_node.push(NodePatches {
            hostname: n.hostname.clone(),
            role: n.role,
            patches: list.into_iter().map(|(_, t)| Sensitive::new(t)).collect(),
        });
    }
    Ok((per_node, labels))
}

/// Put an adoption together (see the module's rules).
///
/// # Errors
/// [`AdoptError`] with every problem: a node no VM matches, a value neither
/// the source nor the settings hold, a patch that would hold a secret, or
/// an adopted topology talosprov itself refuses.
pub fn adopt(mut source: Source<'_>) -> Result<Adopted, AdoptError> {
    let mut report = Vec::new();
    let nodes = match_nodes(std::mem::take(&mut source.nodes), source.proxmox)?;
    let sides = Sides {
        facts: source.facts,
        proxmox: source.proxmox,
        settings: source.settings,
    };
    let written = write(&sides, nodes, &mut report)?;
    let env = Environment {
        proxmox_endpoint: source.proxmox_endpoint_env.clone(),
        ..Environment::default()
    };
    let mut files = vec![(PathBuf::from("cluster.yaml"), written.text.clone())];
    let (_, bases) = render(source.dir, &files, source.secrets, &env)?;
    let (per_node, labels) = patch_lists(&written.nodes, &bases, &mut report)?;
    let patch_files = tree_files(&factor(&per_node), &labels);
    check_secrets(&patch_files, source.secrets_yaml)?;
    files.extend(patch_files);
    let (topology, configs) = render(source.dir, &files, source.secrets, &env)?;
    let rendered: Vec<RenderedConfig> = configs
        .iter()
        .map(|c| RenderedConfig {
            hostname: c.hostname.clone(),
            schematic_id: c.schematic_id.clone(),
            installer_image: c.installer_image.clone(),
            talos_version: c.talos_version.clone(),
            sha256: c.sha256.clone(),
            yaml: c.yaml.clone(),
        })
        .collect();
    let desired =
        talosprov_plan::desired::desired(&topology, &rendered, source.image_storage_shared)
            .map_err(|e| AdoptError {
                problems: e.iter().map(ToString::to_string).collect(),
            })?;
    let mut adopted = Vec::new();
    let mut resources = format::Resources::default();
    let mut machineconfigs = BTreeMap::new();
    for n in &written.nodes {
        let records = node_records(
            n,
            &desired,
            &configs,
            &mut resources,
            &mut adopted,
            &mut report,
        );
        if let Some(yaml) = records {
            machineconfigs.insert(n.hostname.clone(), yaml);
        }
    }
    images(
        &source,
        &desired,
        &written.nodes,
        &mut resources,
        &mut adopted,
        &mut report,
    );
    if let Some(pool) = &desired.pool
        && let Some((address, _, comment)) =
            source.proxmox.pools.iter().find(|(_, id, _)| id == pool)
    {
        resources.pools.insert(
            pool.clone(),
            format::Pool {
                comment: comment.clone(),
            },
        );
        adopted.push(format!("pool/{pool}, from {address}"));
    }
    for (name, m) in &desired.pci_mappings {
        resources.pci_mappings.insert(name.clone(), m.clone());
        adopted.push(format!("pci_mapping/{name}"));
    }
    if source.bootstrapped
        && let Some(first) = desired.bootstrap_node.clone()
    {
        resources.bootstrap = Some(format::Bootstrap {
            done: true,
            node: first,
            at: source.now.clone(),
        });
        adopted.push(
            "bootstrap: the cluster was bootstrapped; talosprov never bootstraps it again".into(),
        );
    }
    for (address, why) in &source.proxmox.left_out {
        report.push(format!("{address}: left out: {why}"));
    }
    Ok(Adopted {
        files,
        resources,
        machineconfigs,
        topology,
        adopted,
        report,
    })
}

/// The records of node `n`: its VM as talosprov wants it, and its config,
/// with the digest of what it runs when that is the same config in other
/// bytes, or in place of talosprov's when it is not (the first plan then
/// applies talosprov's); its rendered config, for the outputs.
fn node_records(
    n: &AdoptedNode,
    desired: &talosprov_plan::desired::Desired,
    configs: &[talosprov_machine::node::NodeConfig],
    resources: &mut format::Resources,
    adopted: &mut Vec<String>,
    report: &mut Vec<String>,
) -> Option<Sensitive<String>> {
    let (Some(vm), Some(config), Some(ours)) = (
        desired.vms.get(&n.hostname),
        desired.configs.get(&n.hostname),
        configs.iter().find(|c| c.hostname == n.hostname),
    ) else {
        return None;
    };
    resources.vms.insert(n.hostname.clone(), vm.record.clone());
    adopted.push(format!(
        "vm/{}: VM {} on {}, from {}",
        n.hostname, vm.record.vmid, vm.record.node, n.vm.address
    ));
    let running_sha = hex::encode(sha2::Sha256::digest(n.running_text.expose().as_bytes()));
    let mut record = config.record.clone();
    let rendered = MachineConfig::parse(ours.yaml.expose()).ok();
    match rendered.as_ref().map(|r| first_difference(r, &n.running)) {
        Some(None) => {
            if running_sha != record.config_sha256 {
                record.running_sha256 = Some(running_sha);
            }
            adopted.push(format!(
                "config/{}: the machine config it runs, from {}",
                n.hostname, n.source
            ));
        }
        Some(Some(field)) => {
            report.push(format!(
                "{}: talosprov's config for it differs from the one it runs at {field}: \
                 the first plan applies talosprov's",
                n.hostname
            ));
            record.config_sha256 = running_sha;
        }
        None => record.config_sha256 = running_sha,
    }
    resources.configs.insert(n.hostname.clone(), record);
    Some(ours.yaml.clone())
}

/// The images the adopted VMs were made from, recorded under talosprov's
/// names with the source's volume; the others are listed and left out.
fn images(
    source: &Source<'_>,
    desired: &talosprov_plan::desired::Desired,
    nodes: &[AdoptedNode],
    resources: &mut format::Resources,
    adopted: &mut Vec<String>,
    report: &mut Vec<String>,
) {
    let mut used = Vec::new();
    for n in nodes {
        let Some(want) = desired.vms.get(&n.hostname) else {
            continue;
        };
        let Some(volid) = system_disk(&n.vm).and_then(|d| d.source.clone()) else {
            continue;
        };
        let Some(image) = source.proxmox.images.iter().find(|i| {
            i.file_name
                .as_deref()
                .is_some_and(|f| volid.ends_with(&format!("/{f}")))
        }) else {
            continue;
        };
        used.push(image.address.clone());
        let Some(d) = desired.images.get(&want.image) else {
            continue;
        };
        if image.schematic.as_deref() != Some(d.record.schematic_id.as_str()) {
            continue;
        }
        let record = format::Image {
            volid: volid.clone(),
            node: image.node.clone().unwrap_or_else(|| d.record.node.clone()),
            storage: image
                .storage
                .clone()
                .unwrap_or_else(|| d.record.storage.clone()),
            schematic_id: d.record.schematic_id.clone(),
            talos_version: d.record.talos_version.clone(),
        };
        if !resources.images.contains_key(&want.image) {
            adopted.push(format!(
                "image/{}: {volid}, from {}",
                want.image, image.address
            ));
            resources.images.insert(want.image.clone(), record);
        }
    }
    for i in &source.proxmox.images {
        if !used.contains(&i.address) {
            report.push(format!(
                "{}: image {} is the disk of no adopted VM: left out (talosprov neither owns \
                 nor deletes it)",
                i.address,
                i.file_name.as_deref().unwrap_or(&i.url)
            ));
        }
    }
}
