//! `patches migrate --to v1.14` (pure): a strategic-merge patch file rewritten from the
//! v1alpha1 fields Talos 1.14 deprecates to the documents that replace them, so that it
//! applies over a v1.14 base config (where the legacy field beside its document is refused:
//! [`super::conflicts`]). The map follows Talos v1.14.0-rc.1 (commit 7a84d742b3d5):
//! the `Deprecated:` comments of `types/v1alpha1/v1alpha1_types.go`, the document types of
//! `types/{k8s,network,runtime,cluster}` and the legacy bridge `v1alpha1_k8s_bridge.go`.
//!
//! A field is moved only where the new document says the same thing. What has no
//! equivalent (`install.extraKernelArgs`, `kubelet.extraMounts`, ...), or cannot be moved
//! safely (a template expression where a list of objects is needed, a network interface
//! that is not the node's link), stays as written and is listed with the reason. A file that
//! is not YAML before templating (`%{ for }` directives between lines, say) or is a JSON 6902
//! patch is left whole. Documents are written in Talos's style; the file's leading comment
//! block is kept, comments inside the documents are not.

use serde_yaml_ng::{Mapping, Value};

use super::effective::dev_path_selector;
use super::link::{NOCLOUD_DRIVER, NOCLOUD_LINK};

/// A field moved to a document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Moved {
    /// The v1alpha1 field, dotted (`machine.kubelet.extraArgs`).
    pub from: String,
    /// Where it went: `Kind[/name].path`, or what happened (`KubeFlannelCNIConfig deleted`).
    pub to: String,
}

/// A deprecated field left as written, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Left {
    /// The v1alpha1 field, dotted.
    pub field: String,
    /// Why it was not moved, and what to do instead.
    pub reason: String,
}

/// The migration of one patch file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Migration {
    /// The new text of the file; equal to the input when nothing moved.
    pub text: String,
    /// The fields moved, in file order.
    pub moved: Vec<Moved>,
    /// The deprecated fields left, in file order.
    pub left: Vec<Left>,
}

/// Where a patch file applies: the roles of the nodes that use it. Control-plane-only
/// documents ([`super::conflicts::CONTROL_PLANE_ONLY`]: `KubeProxyConfig`,
/// `KubeAPIServerConfig`, ...) are refused on workers, so their fields are not moved out of
/// a file that workers use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Scope {
    /// Some worker uses the file.
    pub workers: bool,
}

/// How a value changes on its way.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// As it is.
    Same,
    /// A boolean inverted (`disabled: true` becomes `enabled: false`).
    Not,
    /// A list of addresses becomes a list of `{address: …}`.
    Addresses,
    /// An install disk path becomes the CEL selector on it.
    DiskSelector,
}

/// One move: the legacy field, the document kind and the path in it.
struct Rule {
    from: &'static str,
    kind: &'static str,
    to: &'static str,
    shape: Shape,
}

const fn m(from: &'static str, kind: &'static str, to: &'static str, shape: Shape) -> Rule {
    Rule {
        from,
        kind,
        to,
        shape,
    }
}

use Shape::{Addresses, DiskSelector, Not, Same};

/// The one-to-one moves, in the order fields are looked at.
#[rustfmt::skip]
const RULES: &[Rule] = &[
    m("machine.kubelet.image", "KubeletConfig", "image", Same),
    m("machine.kubelet.extraArgs", "KubeletConfig", "extraArgs", Same),
    m("machine.kubelet.extraConfig", "KubeletConfig", "config", Same),
    m("machine.kubelet.clusterDNS", "KubeletConfig", "clusterDNS", Same),
    m("machine.kubelet.defaultRuntimeSeccompProfileEnabled", "KubeletConfig", "defaultRuntimeSeccompProfileEnabled", Same),
    m("machine.kubelet.nodeIP.validSubnets", "KubeNodeConfig", "nodeIP.validSubnets", Same),
    m("machine.kubelet.registerWithFQDN", "KubeNodeConfig", "registerWithFQDN", Same),
    m("machine.kubelet.skipNodeRegistration", "KubeNodeConfig", "skipNodeRegistration", Same),
    m("machine.kubelet.credentialProviderConfig", "KubeCredentialProviderConfig", "configuration", Same),
    m("machine.nodeLabels", "KubeNodeConfig", "labels", Same),
    m("machine.nodeAnnotations", "KubeNodeConfig", "annotations", Same),
    m("machine.nodeTaints", "KubeNodeConfig", "taints", Same),
    m("machine.sysctls", "SysctlConfig", "params", Same),
    m("machine.sysfs", "SysfsConfig", "params", Same),
    m("machine.udev.rules", "UdevRulesConfig", "rules", Same),
    m("machine.network.nameservers", "ResolverConfig", "nameservers", Addresses),
    m("machine.network.searchDomains", "ResolverConfig", "searchDomains.domains", Same),
    m("machine.network.disableSearchDomain", "ResolverConfig", "searchDomains.disableDefault", Same),
    m("machine.features.hostDNS.enabled", "ResolverConfig", "hostDNS.enabled", Same),
    m("machine.features.hostDNS.forwardKubeDNSToHost", "ResolverConfig", "hostDNS.forwardKubeDNSToHost", Same),
    m("machine.features.hostDNS.resolveMemberNames", "ResolverConfig", "hostDNS.resolveMemberNames", Same),
    m("machine.features.kubePrism.port", "KubePrismConfig", "port", Same),
    m("machine.time.disabled", "TimeSyncConfig", "enabled", Not),
    m("machine.time.servers", "TimeSyncConfig", "ntp.servers", Same),
    m("machine.time.bootTimeout", "TimeSyncConfig", "bootTimeout", Same),
    m("machine.install.image", "UnattendedInstallConfig", "installer.image", Same),
    m("machine.install.disk", "UnattendedInstallConfig", "provisioning.diskSelector.match", DiskSelector),
    m("machine.install.wipe", "UnattendedInstallConfig", "provisioning.wipe", Same),
    m("cluster.clusterName", "KubeClusterConfig", "clusterName", Same),
    m("cluster.controlPlane.endpoint", "KubeClusterConfig", "endpoint", Same),
    m("cluster.controlPlane.localAPIServerPort", "KubeAPIServerConfig", "apiPort", Same),
    m("cluster.network.dnsDomain", "KubeNetworkConfig", "dnsDomain", Same),
    m("cluster.network.podSubnets", "KubeNetworkConfig", "podSubnets", Same),
    m("cluster.network.serviceSubnets", "KubeNetworkConfig", "serviceSubnets", Same),
    m("cluster.network.cni.flannel.extraArgs", "KubeFlannelCNIConfig", "extraArgs", Same),
    m("cluster.network.cni.flannel.kubeNetworkPoliciesEnabled", "KubeFlannelCNIConfig", "kubeNetworkPoliciesEnabled", Same),
    m("cluster.proxy.disabled", "KubeProxyConfig", "enabled", Not),
    m("cluster.proxy.image", "KubeProxyConfig", "image", Same),
    m("cluster.proxy.mode", "KubeProxyConfig", "mode", Same),
    m("cluster.proxy.extraArgs", "KubeProxyConfig", "extraArgs", Same),
    m("cluster.coreDNS.disabled", "KubeCoreDNSConfig", "enabled", Not),
    m("cluster.coreDNS.image", "KubeCoreDNSConfig", "image", Same),
    m("cluster.apiServer.image", "KubeAPIServerConfig", "image", Same),
    m("cluster.apiServer.extraArgs", "KubeAPIServerConfig", "extraArgs", Same),
    m("cluster.apiServer.env", "KubeAPIServerConfig", "env", Same),
    m("cluster.apiServer.resources", "KubeAPIServerConfig", "resources", Same),
    m("cluster.apiServer.certSANs", "KubeAPIServerConfig", "certExtraSANs", Same),
    m("cluster.controllerManager.image", "KubeControllerManagerConfig", "image", Same),
    m("cluster.controllerManager.extraArgs", "KubeControllerManagerConfig", "extraArgs", Same),
    m("cluster.controllerManager.env", "KubeControllerManagerConfig", "env", Same),
    m("cluster.controllerManager.resources", "KubeControllerManagerConfig", "resources", Same),
    m("cluster.scheduler.image", "KubeSchedulerConfig", "image", Same),
    m("cluster.scheduler.extraArgs", "KubeSchedulerConfig", "extraArgs", Same),
    m("cluster.scheduler.env", "KubeSchedulerConfig", "env", Same),
    m("cluster.scheduler.resources", "KubeSchedulerConfig", "resources", Same),
    m("cluster.scheduler.config", "KubeSchedulerConfig", "config", Same),
];

/// Why a file was left whole.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unmigratable {
    /// The text is not YAML before templating.
    #[error("not YAML before templating (line {line}): migrate it by hand")]
    NotYaml {
        /// 1-based line of the YAML error.
        line: usize,
    },
    /// A JSON 6902 patch (a list of operations).
    #[error(
        "a JSON 6902 patch: its paths name v1alpha1 fields; rewrite it as a strategic-merge patch of the new documents"
    )]
    Json6902,
}

/// The migration of one patch file's text to the v1.14 documents; `name` is the file's name
/// (a `.tftpl` template gets `%{ for }` blocks where a list must be rebuilt).
///
/// # Errors
/// [`Unmigratable`] when the file cannot be read as documents; it is then left whole.
pub fn migrate_to_v1_14(name: &str, text: &str, scope: Scope) -> Result<Migration, Unmigratable> {
    let docs = match talosprov_base::load::yaml_documents(text, talosprov_base::load::Budget::INPUT)
    {
        Ok(docs) => docs,
        // A template with no v1alpha1 section at the start of a line has nothing to move
        // (one this command wrote, say, with its `%{ for }` lines).
        Err(_)
            if !text
                .lines()
                .any(|l| l.starts_with("machine:") || l.starts_with("cluster:")) =>
        {
            return Ok(Migration {
                text: text.to_owned(),
                moved: Vec::new(),
                left: Vec::new(),
            });
        }
        Err(e) => {
            return Err(Unmigratable::NotYaml {
                line: e.pos.line as usize,
            });
        }
    };
    if docs.iter().any(Value::is_sequence) {
        return Err(Unmigratable::Json6902);
    }
    let mut run = Run {
        tftpl: name.ends_with(".tftpl"),
        scope,
        moved: Vec::new(),
        left: Vec::new(),
        added: Vec::new(),
        loops: Vec::new(),
    };
    let mut out: Vec<Value> = Vec::with_capacity(docs.len());
    for mut doc in docs {
        if doc.is_mapping() && doc.get("kind").is_none() {
            run.legacy(&mut doc);
            if !is_empty_legacy(&doc) {
                out.push(doc);
            }
        } else if !doc.is_null() {
            out.push(doc);
        }
    }
    if run.moved.is_empty() {
        return Ok(Migration {
            text: text.to_owned(),
            moved: Vec::new(),
            left: run.left,
        });
    }
    for added in std::mem::take(&mut run.added) {
        merge_into(&mut out, added);
    }
    // `yaml.Marshal`'s quoting: `yes`, `on` and the like stay strings for every YAML reader.
    let mut body =
        talosprov_base::yaml::documents_to_string(&out, talosprov_base::yaml::Flavour::Marshal);
    for (placeholder, block) in &run.loops {
        body = expand_loop(&body, placeholder, block);
    }
    Ok(Migration {
        text: format!("{}{body}", leading_comments(text)),
        moved: run.moved,
        left: run.left,
    })
}

/// The state of one file's migration.
struct Run {
    tftpl: bool,
    scope: Scope,
    moved: Vec<Moved>,
    left: Vec<Left>,
    /// New documents, merged into the file's own documents of the same identity at the end.
    added: Vec<Value>,
    /// `%{ for }` blocks to put in place of placeholder scalars: (placeholder, the list's
    /// template expression).
    loops: Vec<(String, String)>,
}

impl Run {
    fn legacy(&mut self, doc: &mut Value) {
        for rule in RULES {
            self.rule(doc, rule);
        }
        self.kernel_modules(doc);
        self.cni(doc);
        self.manifests(doc);
        self.kube_prism(doc);
        self.interfaces(doc);
        prune(doc);
        // What is still there and deprecated, with the reason.
        for (field, d) in super::deprecated::in_document(doc) {
            let related = |a: &str, b: &str| a == b || a.starts_with(&format!("{b}."));
            if !self
                .left
                .iter()
                .any(|l| related(&field, &l.field) || related(&l.field, &field))
            {
                self.left.push(Left {
                    field: field.clone(),
                    reason: d.message(&field),
                });
            }
        }
    }

    fn control_plane_only(&mut self, kind: &str, field: &str) -> bool {
        if self.scope.workers && super::conflicts::CONTROL_PLANE_ONLY.contains(&kind) {
            self.left.push(Left {
                field: field.to_owned(),
                reason: format!(
                    "workers use this file, and Talos allows {kind} only on control planes: \
                     move the field to a patch under controlplane/ first"
                ),
            });
            return true;
        }
        false
    }

    fn rule(&mut self, doc: &mut Value, rule: &Rule) {
        let Some(value) = get(doc, rule.from).cloned() else {
            return;
        };
        if self.control_plane_only(rule.kind, rule.from) {
            return;
        }
        let new = match rule.shape {
            Same => value,
            Not => match value.as_bool() {
                Some(b) => Value::Bool(!b),
                None => return self.keep(rule.from, "not a boolean"),
            },
            DiskSelector => match value.as_str() {
                Some(disk) if !disk.contains("${") && !disk.contains("{{") => {
                    Value::from(dev_path_selector(disk))
                }
                _ => return self.keep(rule.from, "a template expression, not a device path"),
            },
            Addresses => match self.addresses(&value) {
                Some(v) => v,
                None => {
                    return self.keep(
                        rule.from,
                        "a template expression that is not `${jsonencode(LIST)}` in a .tftpl \
                         file: write ResolverConfig nameservers (`- address: …`) by hand",
                    );
                }
            },
        };
        let mut target = new_document(rule.kind, None);
        set(&mut target, rule.to, new);
        self.added.push(target);
        take(doc, rule.from);
        self.moved.push(Moved {
            from: rule.from.to_owned(),
            to: format!("{}.{}", rule.kind, rule.to),
        });
    }

    fn keep(&mut self, field: &str, reason: &str) {
        self.left.push(Left {
            field: field.to_owned(),
            reason: reason.to_owned(),
        });
    }

    /// A list of addresses as `[{address: …}]`; a `.tftpl` `${jsonencode(LIST)}` becomes a
    /// placeholder that [`expand_loop`] turns into a `%{ for }` block.
    fn addresses(&mut self, value: &Value) -> Option<Value> {
        match value {
            Value::Sequence(items) => Some(Value::Sequence(
                items
                    .iter()
                    .map(|a| {
                        let mut m = Mapping::new();
                        m.insert("address".into(), a.clone());
                        Value::Mapping(m)
                    })
                    .collect(),
            )),
            Value::String(s) if self.tftpl => {
                let inner = s
                    .trim()
                    .strip_prefix("${jsonencode(")?
                    .strip_suffix(")}")?
                    .trim();
                if inner.is_empty() || inner.contains(['{', '}']) {
                    return None;
                }
                let placeholder = format!("talosprov-migrate-loop-{}", self.loops.len());
                self.loops.push((placeholder.clone(), inner.to_owned()));
                Some(Value::from(placeholder))
            }
            Value::Null
            | Value::Bool(_)
            | Value::Number(_)
            | Value::String(_)
            | Value::Mapping(_)
            | Value::Tagged(_) => None,
        }
    }

    /// `machine.kernel.modules`: one `KernelModuleConfig` per module, named by it.
    fn kernel_modules(&mut self, doc: &mut Value) {
        let Some(Value::Sequence(mods)) = get(doc, "machine.kernel.modules").cloned() else {
            return;
        };
        let mut docs = Vec::new();
        for module in &mods {
            let Some(name) = module.get("name").and_then(Value::as_str) else {
                return self.keep("machine.kernel.modules", "a module without a name");
            };
            let mut d = new_document("KernelModuleConfig", Some(name));
            if let Some(params) = module.get("parameters") {
                set(&mut d, "parameters", params.clone());
            }
            docs.push(d);
        }
        self.added.extend(docs);
        take(doc, "machine.kernel.modules");
        self.moved.push(Moved {
            from: "machine.kernel.modules".into(),
            to: format!("KernelModuleConfig × {}", mods.len()),
        });
    }

    /// `cluster.network.cni`: `none` and `custom` delete the base config's Flannel
    /// document (a `custom` CNI's URLs become `KubeExternalManifestConfig`s); `flannel` is the
    /// default the base config already has.
    fn cni(&mut self, doc: &mut Value) {
        let Some(cni) = get(doc, "cluster.network.cni").cloned() else {
            return;
        };
        if self.control_plane_only("KubeFlannelCNIConfig", "cluster.network.cni") {
            return;
        }
        let name = cni.get("name").and_then(Value::as_str).unwrap_or("flannel");
        match name {
            "flannel" => {}
            "none" | "custom" => {
                let mut delete = new_document("KubeFlannelCNIConfig", None);
                set(&mut delete, "$patch", "delete".into());
                self.added.push(delete);
                let urls = cni.get("urls").and_then(Value::as_sequence).cloned();
                for (i, url) in urls.iter().flatten().enumerate() {
                    let name = if i == 0 {
                        "custom-cni".to_owned()
                    } else {
                        format!("custom-cni-{i}")
                    };
                    let mut d = new_document("KubeExternalManifestConfig", Some(&name));
                    set(&mut d, "url", url.clone());
                    self.added.push(d);
                }
            }
            other => {
                return self.keep(
                    "cluster.network.cni.name",
                    &format!("{other:?} is not a CNI Talos knows"),
                );
            }
        }
        for key in ["name", "urls"] {
            take(doc, &format!("cluster.network.cni.{key}"));
        }
        let to = match name {
            "flannel" => "the base config's KubeFlannelCNIConfig".to_owned(),
            _ => "KubeFlannelCNIConfig deleted".to_owned(),
        };
        self.moved.push(Moved {
            from: "cluster.network.cni".into(),
            to,
        });
    }

    /// `cluster.extraManifests` (with `extraManifestHeaders`) and `cluster.inlineManifests`:
    /// a document each.
    fn manifests(&mut self, doc: &mut Value) {
        if let Some(Value::Sequence(urls)) = get(doc, "cluster.extraManifests").cloned()
            && !self.control_plane_only("KubeExternalManifestConfig", "cluster.extraManifests")
        {
            let headers = get(doc, "cluster.extraManifestHeaders").cloned();
            for url in &urls {
                let name = manifest_name(url.as_str().unwrap_or_default());
                let mut d = new_document("KubeExternalManifestConfig", Some(&name));
                set(&mut d, "url", url.clone());
                if let Some(h) = &headers {
                    set(&mut d, "headers", h.clone());
                }
                self.added.push(d);
            }
            take(doc, "cluster.extraManifests");
            take(doc, "cluster.extraManifestHeaders");
            self.moved.push(Moved {
                from: "cluster.extraManifests".into(),
                to: format!("KubeExternalManifestConfig × {}", urls.len()),
            });
        }
        if let Some(Value::Sequence(list)) = get(doc, "cluster.inlineManifests").cloned()
            && !self.control_plane_only("KubeInlineManifestConfig", "cluster.inlineManifests")
        {
            for entry in &list {
                let name = entry
                    .get("name")
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                let mut d = new_document("KubeInlineManifestConfig", Some(name));
                if let Some(contents) = entry.get("contents") {
                    set(&mut d, "manifest", contents.clone());
                }
                self.added.push(d);
            }
            take(doc, "cluster.inlineManifests");
            self.moved.push(Moved {
                from: "cluster.inlineManifests".into(),
                to: format!("KubeInlineManifestConfig × {}", list.len()),
            });
        }
    }

    /// `machine.features.kubePrism.enabled: false` deletes the base config's KubePrism
    /// document (its absence turns KubePrism off); `true` is what the base config has.
    fn kube_prism(&mut self, doc: &mut Value) {
        let Some(enabled) = get(doc, "machine.features.kubePrism.enabled").cloned() else {
            return;
        };
        if enabled.as_bool() == Some(false) {
            let mut delete = new_document("KubePrismConfig", None);
            set(&mut delete, "$patch", "delete".into());
            self.added.push(delete);
        }
        take(doc, "machine.features.kubePrism.enabled");
        self.moved.push(Moved {
            from: "machine.features.kubePrism.enabled".into(),
            to: if enabled.as_bool() == Some(false) {
                "KubePrismConfig deleted".into()
            } else {
                "the base config's KubePrismConfig".into()
            },
        });
    }

    /// `machine.network.interfaces`: each entry for the node's own link (`interface: eth0`,
    /// or a `deviceSelector` a talosprov VM's link matches) with static addresses, routes
    /// and a VIP becomes a `LinkConfig` (and a `Layer2VIPConfig`, a `DHCPv4Config`). Other
    /// entries stay.
    fn interfaces(&mut self, doc: &mut Value) {
        let Some(Value::Sequence(entries)) = get(doc, "machine.network.interfaces").cloned() else {
            return;
        };
        let mut kept = Vec::new();
        let mut count = 0;
        for entry in entries {
            match interface_documents(&entry) {
                Ok(docs) => {
                    self.added.extend(docs);
                    count += 1;
                }
                Err(reason) => {
                    self.keep("machine.network.interfaces", &reason);
                    kept.push(entry);
                }
            }
        }
        if count == 0 {
            return;
        }
        if kept.is_empty() {
            take(doc, "machine.network.interfaces");
        } else {
            set(doc, "machine.network.interfaces", Value::Sequence(kept));
        }
        self.moved.push(Moved {
            from: "machine.network.interfaces".into(),
            to: format!("LinkConfig {NOCLOUD_LINK}"),
        });
    }
}

/// The documents of one `machine.network.interfaces` entry for the node's link, or why it
/// cannot be moved.
fn interface_documents(entry: &Value) -> Result<Vec<Value>, String> {
    const MOVABLE: &[&str] = &[
        "interface",
        "deviceSelector",
        "dhcp",
        "addresses",
        "routes",
        "vip",
        "mtu",
    ];
    let Some(map) = entry.as_mapping() else {
        return Err("an entry that is not a mapping".into());
    };
    if let Some(other) = map
        .keys()
        .filter_map(Value::as_str)
        .find(|k| !MOVABLE.contains(k))
    {
        return Err(format!(
            "an entry with `{other}`: write its LinkConfig (BondConfig, VLANConfig, …) by hand"
        ));
    }
    let ours = match (entry.get("interface"), entry.get("deviceSelector")) {
        (Some(name), None) => name.as_str() == Some(NOCLOUD_LINK),
        (None, Some(selector)) => selects_nocloud_link(selector),
        _ => false,
    };
    if !ours {
        return Err(format!(
            "an entry for a link other than the node's ({NOCLOUD_LINK}, driver {NOCLOUD_DRIVER}): \
             write its LinkAliasConfig and LinkConfig by hand"
        ));
    }
    let mut docs = Vec::new();
    let mut link = new_document("LinkConfig", Some(NOCLOUD_LINK));
    if let Some(mtu) = entry.get("mtu") {
        set(&mut link, "mtu", mtu.clone());
    }
    if let Some(Value::Sequence(addresses)) = entry.get("addresses") {
        let list = addresses
            .iter()
            .map(|a| {
                let mut m = Mapping::new();
                m.insert("address".into(), a.clone());
                Value::Mapping(m)
            })
            .collect();
        set(&mut link, "addresses", Value::Sequence(list));
    }
    if let Some(Value::Sequence(routes)) = entry.get("routes") {
        let mut list = Vec::new();
        for r in routes {
            list.push(route(r)?);
        }
        set(&mut link, "routes", Value::Sequence(list));
    }
    docs.push(link);
    if entry.get("dhcp").and_then(Value::as_bool) == Some(true) {
        docs.push(new_document("DHCPv4Config", Some(NOCLOUD_LINK)));
    }
    if let Some(vip) = entry.get("vip") {
        let Some(ip) = vip.get("ip") else {
            return Err("a VIP without `ip`".into());
        };
        if vip.as_mapping().is_some_and(|m| m.len() > 1) {
            return Err("a VIP with more than `ip` (a cloud VIP): write it by hand".into());
        }
        let name = ip.as_str().unwrap_or_default();
        let mut d = new_document("Layer2VIPConfig", Some(name));
        set(&mut d, "link", NOCLOUD_LINK.into());
        docs.push(d);
    }
    Ok(docs)
}

/// A legacy route (`network`, `gateway`, `source`, `metric`, `mtu`) as a `LinkConfig` route
/// (`destination`, the default route without one).
fn route(r: &Value) -> Result<Value, String> {
    let mut out = Mapping::new();
    for (key, value) in r.as_mapping().into_iter().flatten() {
        let key = key.as_str().unwrap_or_default();
        let to = match key {
            "network" => {
                if matches!(value.as_str(), Some("0.0.0.0/0" | "::/0")) {
                    continue;
                }
                "destination"
            }
            "gateway" | "source" | "metric" | "mtu" => key,
            other => return Err(format!("a route with `{other}`: write it by hand")),
        };
        out.insert(to.into(), value.clone());
    }
    Ok(Value::Mapping(out))
}

/// Whether a `deviceSelector` matches a talosprov VM's one link: its keys are only
/// `physical: true` and `driver: virtio_net` (a VM's NIC is both).
fn selects_nocloud_link(selector: &Value) -> bool {
    let Some(map) = selector.as_mapping() else {
        return false;
    };
    !map.is_empty()
        && map.iter().all(|(k, v)| match k.as_str() {
            Some("physical") => v.as_bool() == Some(true),
            Some("driver") => v.as_str() == Some(NOCLOUD_DRIVER),
            _ => false,
        })
}

/// A DNS-1123 name for an extra manifest, from its URL's file name (`components` for
/// `…/components.yaml`), else `manifest`.
fn manifest_name(url: &str) -> String {
    let path = url.split(['?', '#']).next().unwrap_or_default();
    let file = path.rsplit('/').find(|s| !s.is_empty()).unwrap_or_default();
    let stem = file
        .strip_suffix(".yaml")
        .or_else(|| file.strip_suffix(".yml"))
        .unwrap_or(file);
    let mut name = String::new();
    for c in stem.chars().flat_map(char::to_lowercase) {
        if c.is_ascii_alphanumeric() {
            name.push(c);
        } else if !name.ends_with('-') {
            name.push('-');
        }
    }
    let name = name.trim_matches('-');
    let name: String = name.chars().take(63).collect();
    let name = name.trim_end_matches('-');
    if name.is_empty() {
        "manifest".into()
    } else {
        name.into()
    }
}

/// A new document of `kind` (`name` for named kinds).
fn new_document(kind: &str, name: Option<&str>) -> Value {
    let mut m = Mapping::new();
    m.insert("apiVersion".into(), "v1alpha1".into());
    m.insert("kind".into(), kind.into());
    if let Some(name) = name {
        m.insert("name".into(), name.into());
    }
    Value::Mapping(m)
}

/// Merge `doc` into the file's document of the same kind and name (its keys win), or add it.
/// Two names for extra manifests that would collide get a number.
fn merge_into(out: &mut Vec<Value>, mut doc: Value) {
    let id = |d: &Value| {
        (
            d.get("kind").and_then(Value::as_str).map(str::to_owned),
            d.get("name").and_then(Value::as_str).map(str::to_owned),
        )
    };
    if doc.get("kind").and_then(Value::as_str) == Some("KubeExternalManifestConfig") {
        let base = doc
            .get("name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let mut n = 1;
        while out.iter().any(|d| id(d) == id(&doc)) {
            n += 1;
            set(&mut doc, "name", format!("{base}-{n}").into());
        }
    }
    match out.iter_mut().find(|d| id(d) == id(&doc)) {
        Some(existing) => deep_merge(existing, doc),
        None => out.push(doc),
    }
}

fn deep_merge(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Mapping(a), Value::Mapping(b)) => {
            for (k, v) in b {
                match a.get_mut(&k) {
                    Some(existing) => deep_merge(existing, v),
                    None => {
                        a.insert(k, v);
                    }
                }
            }
        }
        (into, from) => *into = from,
    }
}

fn get<'a>(doc: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.')
        .try_fold(doc, |v, k| v.get(k))
        .filter(|v| !v.is_null())
}

/// Set `path` in `doc`, making the mappings on the way.
fn set(doc: &mut Value, path: &str, value: Value) {
    let mut node = doc;
    let mut keys = path.split('.').peekable();
    while let Some(key) = keys.next() {
        if !node.is_mapping() {
            *node = Value::Mapping(Mapping::new());
        }
        let Some(map) = node.as_mapping_mut() else {
            return;
        };
        if keys.peek().is_none() {
            map.insert(key.into(), value);
            return;
        }
        node = map
            .entry(key.into())
            .or_insert_with(|| Value::Mapping(Mapping::new()));
    }
}

/// Remove `path` from `doc`.
fn take(doc: &mut Value, path: &str) {
    let (parent, last) = match path.rsplit_once('.') {
        Some((p, l)) => (Some(p), l),
        None => (None, path),
    };
    let node = match parent {
        Some(p) => p.split('.').try_fold(&mut *doc, |v, k| v.get_mut(k)),
        None => Some(doc),
    };
    if let Some(map) = node.and_then(Value::as_mapping_mut) {
        map.remove(last);
    }
}

/// Remove the empty mappings of a legacy document (`machine.kubelet: {}` merges nothing,
/// but beside a `KubeletConfig` Talos refuses it).
fn prune(doc: &mut Value) {
    if let Value::Mapping(map) = doc {
        let keys: Vec<Value> = map.keys().cloned().collect();
        for k in keys {
            if let Some(child) = map.get_mut(&k)
                && child.is_mapping()
            {
                prune(child);
                if child.as_mapping().is_some_and(Mapping::is_empty) {
                    map.remove(&k);
                }
            }
        }
    }
}

/// Whether a v1alpha1 patch document has nothing left to say.
fn is_empty_legacy(doc: &Value) -> bool {
    doc.as_mapping().is_some_and(|m| {
        m.iter().all(|(k, v)| {
            matches!(k.as_str(), Some("version"))
                || v.is_null()
                || v.as_mapping().is_some_and(Mapping::is_empty)
        })
    })
}

/// The file's leading comment lines (and blank lines between them).
fn leading_comments(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        let t = line.trim_start();
        if t.starts_with('#') || (t.is_empty() && !out.is_empty()) {
            out.push_str(line);
            out.push('\n');
        } else {
            break;
        }
    }
    out
}

/// Replace the line `<indent>key: <placeholder>` with a templatefile loop over `list` that
/// writes one `- address: ${address}` item per element. The loop's tags open their lines,
/// without strip markers (which would also strip the next line's indentation), so the
/// rendered list ends with one blank line.
fn expand_loop(body: &str, placeholder: &str, list: &str) -> String {
    let mut out = String::with_capacity(body.len());
    for line in body.split_inclusive('\n') {
        let content = line.trim_end_matches('\n');
        match content.strip_suffix(placeholder) {
            Some(head) if head.trim_end().ends_with(':') => {
                let indent = head.len() - head.trim_start().len();
                let pad = " ".repeat(indent + 4);
                out.push_str(head.trim_end());
                out.push('\n');
                out.push_str(&format!(
                    "%{{ for address in {list} }}{pad}- address: ${{address}}\n%{{ endfor }}\n"
                ));
            }
            _ => out.push_str(line),
        }
    }
    out
}

#[cfg(test)]
#[path = "migrate_tests.rs"]
mod tests;
