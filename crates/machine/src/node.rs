//! The final machine config of every node (pure): schematic ID, installer image, the base
//! config for the role, the node's patches in merge order, then Talos's config checks. Every
//! problem is a diagnostic naming the node and the patch file that set the offending value.

use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::net::Ipv4Addr;

use super::decode::decode_config;
use super::inline::{InlineManifest, merge_inline_manifests};
use super::link::{NodeLink, check_node_link};
use super::managed::{ManagedField, Override, overrides};
use super::redact::redact_secrets;
use super::rotation::AcceptedCas;
use super::secrets::SecretsBundle;
use super::validate::{self, ConfigProblem, ProblemKind, check_config};
use crate::config::{base_config_for, machine_config_yaml};
use crate::config_parts::BaseConfigInput;
use rayon::prelude::*;
use talosprov_base::diagnostics::{Code, Diagnostic, Severity};
use talosprov_base::limits::quoted;
use talosprov_base::role::Role;
use talosprov_base::schematic::{Schematic, SchematicId, installer_image};
use talosprov_base::sensitive::Sensitive;
use talosprov_base::version::{Contract, TalosVersion, contract_for, default_kubernetes_version};
use talosprov_patch::apply::{ApplyCause, ApplyError};
use talosprov_patch::apply::{apply_patches_all, apply_patches_all_traced};
use talosprov_patch::document::{DocumentId, MachineConfig};
use talosprov_patch::load::Patch;
use talosprov_patch::merge::MergeError;
use talosprov_patch::render::TemplateVars;
use talosprov_patch::set::PatchSet;
use talosprov_topology::model::{Node, SchematicSpec, Topology};

/// One node's final machine config, exactly as talosprov sends it.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeConfig {
    /// The node's hostname (also its VM name, which reaches Talos through cloud-init).
    pub hostname: String,
    /// The node's IPv4 address.
    pub ip: Ipv4Addr,
    /// Control plane or worker.
    pub role: Role,
    /// The Image Factory schematic ID, 64 lowercase hex digits.
    pub schematic_id: String,
    /// `<factory host>/nocloud-installer/<schematic id>:<talos version>`.
    pub installer_image: String,
    /// The Talos version, such as `v1.13.8`.
    pub talos_version: String,
    /// The Kubernetes version, such as `v1.36.2`: the topology's, else the Talos release's
    /// default (`DefaultKubernetesVersion`).
    pub kubernetes_version: String,
    /// The config text ApplyConfiguration sends: Talos-style YAML, documents joined by `---`.
    pub yaml: Sensitive<String>,
    /// Lowercase hex SHA-256 of `yaml`.
    pub sha256: String,
    /// `yaml` with every secret value shown as `(sensitive)`: for plans and `render`.
    pub redacted_yaml: String,
    /// Warnings about this node's config (Talos accepts it, but says something).
    pub warnings: Vec<Diagnostic>,
}

/// Build the final machine config of every node, in node order. `inline`: the
/// bootstrap add-ons, merged into every control plane's
/// `cluster.inlineManifests` after its patches (none on workers).
///
/// # Errors
/// Every problem at once, in node order: the patch files' own problems (once each, from
/// [`PatchSet::errors`]), then per node template errors (`P006`), invalid patches (`P007`),
/// every patch that cannot apply (`P008`), a base config that cannot be made (`M001`),
/// keys and document kinds the cluster's config contract does not have (`M004`), values
/// Talos cannot decode (`M005`), Talos's refusals (`M002`) and network entries that would
/// lose the node's address (`M006`), each naming the patch file that set the value, its line
/// when the file spells the field out, the node and the field. A problem shared by many nodes
/// is reported once, with the number of other nodes. Warnings (`M003`, `M007`, and `M008` for
/// a patch that overrides the installer image or install disk talosprov manages) go to
/// [`NodeConfig::warnings`].
pub fn node_configs(
    topology: &Topology,
    secrets: &SecretsBundle,
    patches: &PatchSet,
    inline: &[InlineManifest],
) -> Result<Vec<NodeConfig>, Vec<Diagnostic>> {
    node_configs_with(topology, secrets, &AcceptedCas::default(), patches, inline)
}

/// [`node_configs`] during a CA rotation: `accepted` are the CAs every base
/// config accepts beside the issuing ones (see
/// [`crate::state::rotation::CaRotation::effective`]), before any patch.
///
/// # Errors
/// As [`node_configs`].
pub fn node_configs_with(
    topology: &Topology,
    secrets: &SecretsBundle,
    accepted: &AcceptedCas,
    patches: &PatchSet,
    inline: &[InlineManifest],
) -> Result<Vec<NodeConfig>, Vec<Diagnostic>> {
    let manifests = inline.iter().map(|m| m.contents.len() as u64).sum();
    if let Some(over) = patches.over_budget(topology, manifests) {
        return Err(vec![over]);
    }
    // A broken file is reported once, and only when one of these nodes uses it.
    let mut errors: Vec<Diagnostic> = patches
        .errors()
        .iter()
        .filter(|d| {
            topology.nodes.iter().any(|n| {
                patches
                    .for_node(&n.hostname)
                    .iter()
                    .any(|f| f.path == d.file)
            })
        })
        .cloned()
        .collect();
    let file = &topology.file;
    let cluster = &topology.cluster;
    let talos_text = cluster.talos_version.to_string();
    let talos: TalosVersion = match talos_text.parse() {
        Ok(v) => v,
        Err(e) => {
            errors.push(
                Diagnostic::error(Code::BaseConfig, file, e.to_string())
                    .field("cluster.talos_version"),
            );
            return Err(errors);
        }
    };
    let kubernetes = match &cluster.kubernetes_version {
        Some(v) => v.to_string().trim_start_matches('v').to_string(),
        None => match default_kubernetes_version(&talos) {
            Ok(v) => v.to_string(),
            Err(e) => {
                errors.push(
                    Diagnostic::error(Code::BaseConfig, file, e.to_string())
                        .field("cluster.kubernetes_version"),
                );
                return Err(errors);
            }
        },
    };
    let factory = match url::Url::parse(&topology.image_factory_url) {
        Ok(u) => u,
        Err(e) => {
            let msg = format!("image factory URL {:?}: {e}", topology.image_factory_url);
            errors.push(Diagnostic::error(Code::BaseConfig, file, msg).field("image_factory.url"));
            return Err(errors);
        }
    };
    let contract = contract_for(&talos);
    let cluster_warnings: Vec<Diagnostic> = contract
        .warning
        .iter()
        .map(|w| Diagnostic::warning(Code::ConfigWarning, file, w).field("cluster.talos_version"))
        .collect();
    // HostnameConfig exists from Talos 1.12; the contract leaves it out for older releases.
    let hostname_config = contract.hostname_config;

    let mut build = Build {
        topology,
        secrets,
        accepted,
        patches,
        talos: &talos,
        kubernetes: &kubernetes,
        factory: &factory,
        hostname_config,
        contract: contract.contract,
        schematics: HashMap::new(),
        bases: HashMap::new(),
        inline,
    };
    // The shared parts first, one by one (they are cached); then each node
    // on its own, on every core, results kept in node order.
    let prepared: Vec<Result<Prepared, Vec<Diagnostic>>> =
        topology.nodes.iter().map(|n| build.prepare(n)).collect();
    let build = &build;
    let built: Vec<Result<NodeConfig, Vec<Diagnostic>>> = topology
        .nodes
        .par_iter()
        .zip(prepared)
        .map(|(node, prepared)| build.node(node, prepared?))
        .collect();
    let mut configs = Vec::with_capacity(topology.nodes.len());
    for result in built {
        match result {
            Ok(mut config) => {
                config
                    .warnings
                    .splice(0..0, cluster_warnings.iter().cloned());
                configs.push(config);
            }
            Err(mut problems) => errors.append(&mut problems),
        }
    }
    if errors.is_empty() {
        Ok(configs)
    } else {
        Err(merge_repeats(errors))
    }
}

/// The warnings of every node, each distinct warning once (a warning shared by many nodes
/// names the first and counts the others).
pub fn warnings(configs: &[NodeConfig]) -> Vec<Diagnostic> {
    merge_repeats(configs.iter().flat_map(|c| c.warnings.clone()).collect())
}

/// Collapse diagnostics that differ only by node into the first, noting how many other
/// nodes have it; order is kept.
fn merge_repeats(diagnostics: Vec<Diagnostic>) -> Vec<Diagnostic> {
    let key = |d: &Diagnostic| {
        (
            d.code,
            d.severity,
            d.file.clone(),
            d.pos,
            d.field.clone(),
            d.message.clone(),
        )
    };
    let mut out: Vec<(Diagnostic, std::collections::HashSet<Option<String>>)> = Vec::new();
    let mut index: HashMap<_, usize> = HashMap::new();
    for d in diagnostics {
        match index.get(&key(&d)) {
            Some(&i) => {
                out[i].1.insert(d.node.clone());
            }
            None => {
                index.insert(key(&d), out.len());
                let nodes = std::iter::once(d.node.clone()).collect();
                out.push((d, nodes));
            }
        }
    }
    out.into_iter()
        .map(|(mut d, nodes)| {
            let others = nodes.len() - 1;
            if others > 0 {
                let s = if others == 1 { "" } else { "s" };
                d.message = format!("{} (also on {others} other node{s})", d.message);
            }
            d
        })
        .collect()
}

/// What [`Build::prepare`] gives a node.
struct Prepared {
    schematic: SchematicId,
    installer: String,
    base: MachineConfig,
}

struct Build<'a> {
    topology: &'a Topology,
    secrets: &'a SecretsBundle,
    /// CAs accepted beside the issuing ones (a CA rotation).
    accepted: &'a AcceptedCas,
    patches: &'a PatchSet,
    talos: &'a TalosVersion,
    kubernetes: &'a str,
    factory: &'a url::Url,
    hostname_config: bool,
    /// The config contract the nodes' configs are decoded against.
    contract: Contract,
    /// Schematic ID by schematic name (`None`: no schematic).
    schematics: HashMap<Option<String>, SchematicId>,
    /// Base config by role and installer image.
    bases: HashMap<(Role, String), Result<MachineConfig, Diagnostic>>,
    /// The bootstrap add-ons, put into every control plane's config after
    /// its patches.
    inline: &'a [InlineManifest],
}

impl Build<'_> {
    fn schematic_id(&mut self, node: &Node) -> Result<SchematicId, Diagnostic> {
        if let Some(id) = self.schematics.get(&node.schematic) {
            return Ok(id.clone());
        }
        let id = match &node.schematic {
            None => Some(Schematic::default().id()),
            Some(name) => match self.topology.schematics.get(name) {
                Some(SchematicSpec::Customization {
                    extensions,
                    kernel_args,
                }) => Some(
                    Schematic {
                        extensions: extensions.clone(),
                        kernel_args: kernel_args.clone(),
                    }
                    .id(),
                ),
                Some(SchematicSpec::Id(id)) => SchematicId::parse(id),
                None => None,
            },
        };
        let id = id.ok_or_else(|| {
            let name = node.schematic.as_deref().unwrap_or_default();
            Diagnostic::error(
                Code::BaseConfig,
                &self.topology.file,
                format!("schematic {name:?} has no valid schematic ID"),
            )
            .on_node(Some(&node.hostname))
            .field(format!("schematics.{name}"))
        })?;
        self.schematics.insert(node.schematic.clone(), id.clone());
        Ok(id)
    }

    fn base(&mut self, role: Role, installer: &str) -> Result<MachineConfig, Diagnostic> {
        let key = (role, installer.to_string());
        if let Some(b) = self.bases.get(&key) {
            return b.clone();
        }
        let cluster = &self.topology.cluster;
        let input = BaseConfigInput {
            cluster_name: cluster.name.clone(),
            endpoint: cluster.endpoint.clone(),
            kubernetes_version: Some(self.kubernetes.to_string()),
            talos_version: self.talos.clone(),
            role,
            secrets: self.secrets,
            install_disk: Some(cluster.install_disk.clone()),
            install_image: Some(installer.to_string()),
            additional_sans: cluster.vip.iter().map(ToString::to_string).collect(),
            hostname_config: self.hostname_config,
            accepted_cas: self.accepted,
        };
        let base = base_config_for(&input, contract_for(self.talos))
            .map(|b| MachineConfig {
                documents: b.documents,
            })
            .map_err(|e| {
                Diagnostic::error(Code::BaseConfig, &self.topology.file, e.to_string())
                    .field("cluster.endpoint")
            });
        self.bases.insert(key, base.clone());
        base
    }

    fn vars(&self, node: &Node) -> TemplateVars {
        let cluster = &self.topology.cluster;
        TemplateVars {
            hostname: node.hostname.clone(),
            node_ip: node.ip.to_string(),
            role: node.role.as_str().to_string(),
            vip: cluster.vip.map(|v| v.to_string()),
            gateway: cluster.gateway.to_string(),
            nameservers: cluster
                .nameservers
                .iter()
                .map(ToString::to_string)
                .collect(),
            prefix_length: cluster.prefix_length,
            cluster_name: cluster.name.clone(),
            talos_version: cluster.talos_version.to_string(),
            kubernetes_version: format!("v{}", self.kubernetes),
            node: serde_json::to_value(node).unwrap_or(serde_json::Value::Null),
            pool: node.pool.as_ref().map(|m| m.pool.clone()),
            index: node.pool.as_ref().map(|m| m.index),
        }
    }

    /// What a node's config starts from, made once for every node that
    /// shares it: its schematic ID, installer image and base config.
    fn prepare(&mut self, node: &Node) -> Result<Prepared, Vec<Diagnostic>> {
        let host = Some(node.hostname.as_str());
        let schematic = self.schematic_id(node).map_err(|d| vec![d])?;
        let installer = installer_image(self.factory, &schematic, self.talos);
        let base = self
            .base(node.role, &installer)
            .map_err(|d| vec![d.on_node(host)])?;
        Ok(Prepared {
            schematic,
            installer,
            base,
        })
    }

    /// A node's config from what [`Build::prepare`] made for it: its
    /// patches rendered and merged, then checked. Needs nothing mutable, so
    /// nodes are built in parallel.
    fn node(&self, node: &Node, prepared: Prepared) -> Result<NodeConfig, Vec<Diagnostic>> {
        let Prepared {
            schematic,
            installer,
            mut base,
        } = prepared;
        super::devices::add_node_devices(&mut base.documents, self.topology, node, self.contract);
        let files = self.patches.for_node(&node.hostname);
        if files.iter().any(|f| self.patches.is_broken(&f.path)) {
            // The file's own problem is already reported, once for every node.
            return Err(Vec::new());
        }
        let vars = self.vars(node);
        let mut problems = Vec::new();
        let mut loaded: Vec<Patch> = Vec::with_capacity(files.len());
        for f in files {
            match self.patches.patch(&f.path, &vars) {
                Ok(p) => loaded.push(p.into_owned()),
                Err(d) => problems.push(d),
            }
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        // Every patch that applies, and each one that does not (not only the first).
        let applied = apply_patches_all(&base, &loaded);
        for e in &applied.errors {
            problems.push(self.conflict(node, e));
        }
        let mut config = applied.config;
        if node.role == Role::Controlplane {
            merge_inline_manifests(&mut config.documents, self.inline, self.contract);
        }
        let mut found = decode_config(&config.documents, self.contract);
        if applied.errors.is_empty() {
            // Talos stops at a value it cannot decode; its checks on that value (or on what
            // holds it) would only repeat the problem, or judge a value Talos never reads.
            let undecoded: Vec<(String, String)> = found
                .iter()
                .map(|p| (p.document.clone(), p.field.clone()))
                .collect();
            found.extend(check_config(&config.documents).into_iter().filter(|p| {
                !undecoded.iter().any(|(doc, field)| {
                    *doc == p.document
                        && (is_within(&p.field, field)
                            || (!p.field.is_empty() && is_within(field, &p.field)))
                })
            }));
            let cluster = &self.topology.cluster;
            let link = NodeLink::nocloud(node.ip, cluster.prefix_length, cluster.gateway)
                .with_mac(node.networks.first().and_then(|n| n.mac.as_deref()));
            found.extend(check_node_link(&config.documents, &link));
        }
        let mut warnings = Vec::new();
        if !found.is_empty() {
            // Only now is it worth knowing which patch set each value.
            let provenance = apply_patches_all_traced(&base, &loaded).provenance;
            for problem in &found {
                let d = self.problem(node, problem, &config, &loaded, |doc, field| {
                    provenance.source_of(doc, field).map(str::to_owned)
                });
                match d.severity {
                    Severity::Error => problems.push(d),
                    Severity::Warning => warnings.push(d),
                }
            }
        }
        if applied.errors.is_empty() {
            let managed = [
                (ManagedField::InstallImage, installer.as_str()),
                (
                    ManagedField::InstallDisk,
                    self.topology.cluster.install_disk.as_str(),
                ),
            ];
            for o in overrides(&base, &loaded, &config, &managed) {
                warnings.push(self.overridden(node, &o, &config, &loaded));
            }
        }
        if super::deprecated::applies_to(self.talos) {
            warnings.extend(self.deprecated(node, &loaded));
        }
        if !problems.is_empty() {
            // Within a node, in file and line order like every other stage.
            talosprov_base::diagnostics::sort(&mut problems);
            return Err(problems);
        }
        let yaml = machine_config_yaml(&config.documents);
        let mut redacted = config.documents;
        redact_secrets(&mut redacted);
        Ok(NodeConfig {
            hostname: node.hostname.clone(),
            ip: node.ip,
            role: node.role,
            schematic_id: schematic.to_string(),
            installer_image: installer,
            talos_version: self.topology.cluster.talos_version.to_string(),
            kubernetes_version: format!("v{}", self.kubernetes),
            sha256: hex::encode(Sha256::digest(yaml.as_bytes())),
            yaml: Sensitive::new(yaml),
            redacted_yaml: machine_config_yaml(&redacted),
            warnings,
        })
    }

    /// A patch that overrides a value talosprov manages, as a warning on its file and line
    /// that says what the rendered config carries: the patch's value (patches apply over the
    /// base config), while talosprov's upgrades still install its own installer.
    fn overridden(
        &self,
        node: &Node,
        o: &Override,
        config: &MachineConfig,
        loaded: &[Patch],
    ) -> Diagnostic {
        let (doc, path) = o.field.location(config);
        let field = if doc.is_v1alpha1() {
            path.to_owned()
        } else {
            format!("{}.{path}", doc.kind)
        };
        let field = field.as_str();
        let ours = &o.ours;
        let (managed, instead) = match o.field {
            ManagedField::InstallImage => (
                format!(
                    "{ours}, the installer talosprov manages (the Image Factory's nocloud \
                     installer of the node's schematic at cluster.talos_version), which \
                     talosprov's upgrades install whatever the config says"
                ),
                "change the node's schematic or cluster.talos_version instead",
            ),
            ManagedField::InstallDisk => (
                format!(
                    "{ours}, the disk talosprov manages (cluster.install_disk: the VM's system \
                     disk, scsi0 on its SCSI controller)"
                ),
                "set cluster.install_disk instead",
            ),
        };
        let message = match &o.rendered {
            Some(value) => format!(
                "the rendered config has {field}: {:?}, because this patch applies over {managed}; \
                 {instead}",
                quoted(value)
            ),
            None => format!(
                "this patch removes {field}, so the rendered config has none, instead of \
                 {managed}; {instead}"
            ),
        };
        let file = std::path::PathBuf::from(&o.source);
        let mut d = Diagnostic::warning(Code::ManagedValueOverridden, &file, message)
            .on_node(Some(&node.hostname))
            .field(field);
        let pos = match loaded.iter().find(|p| p.source == o.source) {
            Some(patch) => self
                .patches
                .locate_value(patch, &doc, config, path)
                .or_else(|| self.patches.locate(&file, path)),
            None => self.patches.locate(&file, path),
        };
        if let Some(pos) = pos {
            d = d.at(pos);
        }
        d
    }

    /// A warning for each deprecated v1alpha1 field a patch of `node` sets, on the patch
    /// file's line that sets it ([`super::deprecated`]).
    fn deprecated(&self, node: &Node, loaded: &[Patch]) -> Vec<Diagnostic> {
        let mut out = Vec::new();
        for patch in loaded {
            let file = std::path::PathBuf::from(&patch.source);
            for (field, d) in super::deprecated::set_by(patch) {
                let mut w = Diagnostic::warning(Code::DeprecatedField, &file, d.message(&field))
                    .on_node(Some(&node.hostname))
                    .field(field.as_str());
                if let Some(pos) = self.patches.locate(&file, &field) {
                    w = w.at(pos);
                }
                out.push(w);
            }
        }
        out
    }

    /// A patch that cannot be applied, as a diagnostic on its file.
    fn conflict(&self, node: &Node, e: &ApplyError) -> Diagnostic {
        let file = std::path::PathBuf::from(&e.source_name);
        let field = match &e.cause {
            ApplyCause::Strategic(MergeError::TypeMismatch { path, .. }) => {
                Some(path.replace("[]", ""))
            }
            ApplyCause::Strategic(_) | ApplyCause::Json6902(_) => None,
        };
        let mut d = Diagnostic::error(
            Code::PatchConflict,
            &file,
            format!(
                "cannot apply this patch to the {} config: {}",
                node.role, e.cause
            ),
        )
        .on_node(Some(&node.hostname));
        if let Some(field) = field {
            if let Some(pos) = self.patches.locate(&file, &field) {
                d = d.at(pos);
            }
            d = d.field(field);
        }
        d
    }

    /// A config problem as a diagnostic on the patch file that set the field (or on the
    /// topology file, when the base config did), at the line of that file that wrote it.
    fn problem(
        &self,
        node: &Node,
        problem: &ConfigProblem,
        config: &MachineConfig,
        loaded: &[Patch],
        source_of: impl Fn(&DocumentId, &str) -> Option<String>,
    ) -> Diagnostic {
        let doc = document_id(&problem.document);
        let (code, verdict) = match (problem.kind, problem.severity) {
            (ProblemKind::Validation, validate::Severity::Error) => {
                (Code::ConfigRejected, "Talos refuses this config: ")
            }
            (ProblemKind::Validation, validate::Severity::Warning) => {
                (Code::ConfigWarning, "Talos warns about this config: ")
            }
            (ProblemKind::UnknownKey, _) => (Code::UnknownConfigKey, "Talos refuses this config: "),
            (ProblemKind::WrongType, _) => (Code::ConfigWrongType, "Talos refuses this config: "),
            (ProblemKind::AddressLost, _) => (Code::NodeAddressLost, ""),
            (ProblemKind::OtherLink, _) => (Code::UnknownLink, ""),
        };
        let field = if doc.is_v1alpha1() {
            problem.field.clone()
        } else if problem.field.is_empty() {
            problem.document.clone()
        } else {
            format!("{}.{}", doc.kind, problem.field)
        };
        // A field that is missing (an empty list Talos wants filled, say) has no setter: the
        // patch that wrote its nearest parent, below the top-level section, is the one to fix.
        let mut path = problem.field.as_str();
        let mut source = source_of(&doc, path);
        while source.is_none() && path.matches('.').count() > 1 {
            path = path.rsplit_once('.').map_or("", |(parent, _)| parent);
            source = source_of(&doc, path);
        }
        let d = match source {
            Some(source) => {
                let file = std::path::PathBuf::from(&source);
                let message = format!("{verdict}{}", problem.message);
                let mut d = Diagnostic::error(code, &file, message);
                let pos = match loaded.iter().find(|p| p.source == source) {
                    Some(patch) => self.patches.locate_value(patch, &doc, config, path),
                    None => self.patches.locate(&file, path),
                };
                if let Some(pos) = pos {
                    d = d.at(pos);
                }
                d
            }
            None => {
                let message = format!(
                    "{verdict}{} (the value comes from the base config talosprov generates \
                     from this file)",
                    problem.message
                );
                Diagnostic::error(code, &self.topology.file, message)
            }
        };
        let d = match problem.severity {
            validate::Severity::Error => d,
            validate::Severity::Warning => Diagnostic {
                severity: Severity::Warning,
                ..d
            },
        };
        let d = d.on_node(Some(&node.hostname));
        if field.is_empty() { d } else { d.field(field) }
    }
}

/// Whether the dotted path `field` is `parent` or lies below it.
fn is_within(field: &str, parent: &str) -> bool {
    field == parent
        || parent.is_empty()
        || field
            .strip_prefix(parent)
            .is_some_and(|rest| rest.starts_with(['.', '[']))
}

/// The identity of a document named as [`ConfigProblem::document`] names it.
fn document_id(name: &str) -> DocumentId {
    if name == "v1alpha1" || name.is_empty() {
        return DocumentId::v1alpha1();
    }
    let mut parts = name.splitn(3, '/');
    DocumentId {
        api_version: parts.next().unwrap_or_default().to_string(),
        kind: parts.next().unwrap_or_default().to_string(),
        name: parts.next().map(str::to_owned),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn repeated_problems_are_reported_once_with_a_count() {
        let f = Path::new("p.yaml");
        let d = |node: &str| {
            Diagnostic::error(Code::TemplateError, f, "undefined value").on_node(Some(node))
        };
        let merged = merge_repeats(vec![d("a"), d("b"), d("c"), d("a")]);
        assert_eq!(merged.len(), 1);
        assert_eq!(merged[0].node.as_deref(), Some("a"));
        assert_eq!(merged[0].message, "undefined value (also on 2 other nodes)");
    }

    #[test]
    fn document_names_map_back_to_their_identity() {
        assert!(document_id("v1alpha1").is_v1alpha1());
        let id = document_id("v1alpha1/HostnameConfig");
        assert_eq!(
            (id.api_version.as_str(), id.kind.as_str()),
            ("v1alpha1", "HostnameConfig")
        );
        assert_eq!(
            document_id("v1alpha1/Link/eth0").name.as_deref(),
            Some("eth0")
        );
    }
}
