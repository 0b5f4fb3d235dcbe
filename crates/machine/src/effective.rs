//! Where a setting lives in a machine config of either contract, read (and for a few, written)
//! the way Talos resolves it: from the Talos 1.14 document that carries it when the config has
//! one, else from the legacy v1alpha1 field. Source: Talos v1.14.0-rc.1 (commit 7a84d742b3d5)
//! `pkg/machinery/config/container/container.go` (each `K8s*Config()` takes the first
//! matching document, then falls back to `v1alpha1Config`) and
//! `types/v1alpha1/v1alpha1_k8s_bridge.go` (the legacy side: no `cluster.network` section
//! means no Flannel; a CNI other than `flannel` means none).
//!
//! Every function takes the config's documents in order (the v1alpha1 document is the one
//! without `kind`). Certificates come back as PEM text whichever contract carried them (the
//! v1alpha1 document holds the base64 of the PEM; the 1.14 documents the PEM itself).

use serde_yaml_ng::{Mapping, Value};

/// Talos's CNI when the config names none (v1alpha1 `CNIConfig`: `flannel`).
pub const DEFAULT_CNI: &str = "flannel";

/// The v1alpha1 document: the first mapping without `kind`.
pub fn v1alpha1(docs: &[Value]) -> Option<&Value> {
    docs.iter()
        .find(|d| d.is_mapping() && d.get("kind").is_none())
}

/// The documents of `kind`, in order.
pub fn documents_of<'a>(docs: &'a [Value], kind: &'a str) -> impl Iterator<Item = &'a Value> {
    docs.iter()
        .filter(move |d| d.get("kind").and_then(Value::as_str) == Some(kind))
}

/// The first document of `kind`.
pub fn document<'a>(docs: &'a [Value], kind: &str) -> Option<&'a Value> {
    docs.iter()
        .find(|d| d.get("kind").and_then(Value::as_str) == Some(kind))
}

/// Whether the config carries Kubernetes in the 1.14 documents (it has a `KubeClusterConfig`,
/// which every 1.14 base config has and no older one can).
pub fn is_multidoc_kubernetes(docs: &[Value]) -> bool {
    document(docs, "KubeClusterConfig").is_some()
}

/// The value at a dotted path (`cluster.network.cni.name`) of one document.
pub fn at<'a>(doc: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(doc, |v, key| v.get(key))
}

fn text_at(doc: Option<&Value>, path: &str) -> Option<String> {
    doc.and_then(|d| at(d, path))
        .and_then(Value::as_str)
        .map(str::to_owned)
}

fn legacy_text(docs: &[Value], path: &str) -> Option<String> {
    text_at(v1alpha1(docs), path)
}

/// The cluster's CNI: `flannel` with a `KubeFlannelCNIConfig`; else the legacy
/// `cluster.network.cni.name` (default `flannel`) when the v1alpha1 document has a
/// `cluster.network`; else `custom` when a `KubeExternalManifestConfig` named `custom-cni`
/// brings one, and `none` otherwise (a 1.14 config without the Flannel document).
pub fn cni_name(docs: &[Value]) -> String {
    if document(docs, "KubeFlannelCNIConfig").is_some() {
        return DEFAULT_CNI.to_owned();
    }
    let legacy_network = v1alpha1(docs).and_then(|d| at(d, "cluster.network"));
    if legacy_network.is_some() || !is_multidoc_kubernetes(docs) {
        return legacy_text(docs, "cluster.network.cni.name")
            .unwrap_or_else(|| DEFAULT_CNI.to_owned());
    }
    let custom = documents_of(docs, "KubeExternalManifestConfig")
        .any(|d| d.get("name").and_then(Value::as_str) == Some("custom-cni"));
    if custom { "custom" } else { "none" }.to_owned()
}

/// A `custom` CNI's manifest URLs: the legacy `cluster.network.cni.urls`, else the URLs of
/// the `KubeExternalManifestConfig` documents named `custom-cni` (and `custom-cni-N`).
pub fn custom_cni_urls(docs: &[Value]) -> Vec<String> {
    if let Some(urls) = v1alpha1(docs).and_then(|d| at(d, "cluster.network.cni.urls")) {
        return strings(urls);
    }
    documents_of(docs, "KubeExternalManifestConfig")
        .filter(|d| is_custom_cni(d))
        .filter_map(|d| text_at(Some(d), "url"))
        .collect()
}

/// The extra manifests' URLs, in order: `cluster.extraManifests`, then the
/// `KubeExternalManifestConfig` documents that are not a custom CNI's.
pub fn extra_manifest_urls(docs: &[Value]) -> Vec<String> {
    let mut urls = v1alpha1(docs)
        .and_then(|d| at(d, "cluster.extraManifests"))
        .map(strings)
        .unwrap_or_default();
    urls.extend(
        documents_of(docs, "KubeExternalManifestConfig")
            .filter(|d| !is_custom_cni(d))
            .filter_map(|d| text_at(Some(d), "url")),
    );
    urls
}

/// Whether CoreDNS is off: `KubeCoreDNSConfig.enabled: false`, else
/// `cluster.coreDNS.disabled: true`.
pub fn coredns_disabled(docs: &[Value]) -> bool {
    if let Some(doc) = document(docs, "KubeCoreDNSConfig") {
        return doc.get("enabled").and_then(Value::as_bool) == Some(false);
    }
    v1alpha1(docs)
        .and_then(|d| at(d, "cluster.coreDNS.disabled"))
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

fn is_custom_cni(doc: &Value) -> bool {
    doc.get("name")
        .and_then(Value::as_str)
        .is_some_and(|n| n == "custom-cni" || n.starts_with("custom-cni-"))
}

fn strings(list: &Value) -> Vec<String> {
    list.as_sequence()
        .map(|l| {
            l.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// Whether kube-proxy is off: `KubeProxyConfig.enabled: false`, else the legacy
/// `cluster.proxy.disabled: true`.
pub fn kube_proxy_disabled(docs: &[Value]) -> bool {
    if let Some(doc) = document(docs, "KubeProxyConfig") {
        return doc.get("enabled").and_then(Value::as_bool) == Some(false);
    }
    v1alpha1(docs)
        .and_then(|d| at(d, "cluster.proxy.disabled"))
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// The kubelet image (`ghcr.io/siderolabs/kubelet:v1.36.2`): `KubeletConfig.image`, else
/// `machine.kubelet.image`.
pub fn kubelet_image(docs: &[Value]) -> Option<String> {
    match document(docs, "KubeletConfig") {
        Some(doc) => text_at(Some(doc), "image"),
        None => legacy_text(docs, "machine.kubelet.image"),
    }
}

/// One of the kubelet's extra arguments (`KubeletConfig.extraArgs`, else
/// `machine.kubelet.extraArgs`); a list's values joined by `,`.
pub fn kubelet_arg(docs: &[Value], name: &str) -> Option<String> {
    let args = match document(docs, "KubeletConfig") {
        Some(doc) => doc.get("extraArgs"),
        None => v1alpha1(docs).and_then(|d| at(d, "machine.kubelet.extraArgs")),
    }?;
    match args.get(name)? {
        Value::String(s) => Some(s.clone()),
        Value::Sequence(items) => Some(
            items
                .iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join(","),
        ),
        Value::Null | Value::Bool(_) | Value::Number(_) | Value::Mapping(_) | Value::Tagged(_) => {
            None
        }
    }
}

/// The kernel modules a node loads, by name in order: `machine.kernel.modules`, then each
/// `KernelModuleConfig` not already listed (Talos merges the two; a document wins by name).
pub fn kernel_modules(docs: &[Value]) -> Vec<String> {
    let mut names: Vec<String> = v1alpha1(docs)
        .and_then(|d| at(d, "machine.kernel.modules"))
        .and_then(Value::as_sequence)
        .map(|mods| {
            mods.iter()
                .filter_map(|m| m.get("name").and_then(Value::as_str))
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    for doc in documents_of(docs, "KernelModuleConfig") {
        if let Some(name) = doc.get("name").and_then(Value::as_str)
            && !names.iter().any(|n| n == name)
        {
            names.push(name.to_owned());
        }
    }
    names
}

/// The cluster's ID: `DiscoveryIdentityConfig.clusterID`, else `cluster.id`.
pub fn cluster_id(docs: &[Value]) -> Option<String> {
    text_at(document(docs, "DiscoveryIdentityConfig"), "clusterID")
        .or_else(|| legacy_text(docs, "cluster.id"))
}

/// The cluster's name: `KubeClusterConfig.clusterName`, else `cluster.clusterName`.
pub fn cluster_name(docs: &[Value]) -> Option<String> {
    text_at(document(docs, "KubeClusterConfig"), "clusterName")
        .or_else(|| legacy_text(docs, "cluster.clusterName"))
}

/// The control-plane endpoint URL: `KubeClusterConfig.endpoint`, else
/// `cluster.controlPlane.endpoint`.
pub fn endpoint(docs: &[Value]) -> Option<String> {
    text_at(document(docs, "KubeClusterConfig"), "endpoint")
        .or_else(|| legacy_text(docs, "cluster.controlPlane.endpoint"))
}

/// The installer image: `UnattendedInstallConfig.installer.image`, else
/// `machine.install.image`.
pub fn install_image(docs: &[Value]) -> Option<String> {
    match document(docs, "UnattendedInstallConfig") {
        Some(doc) => text_at(Some(doc), "installer.image"),
        None => legacy_text(docs, "machine.install.image"),
    }
}

/// The install disk's path: the path of `UnattendedInstallConfig`'s selector when it is the
/// `disk.dev_path == "<path>"` Talos's generator writes, else `machine.install.disk`.
pub fn install_disk(docs: &[Value]) -> Option<String> {
    match document(docs, "UnattendedInstallConfig") {
        Some(doc) => {
            text_at(Some(doc), "provisioning.diskSelector.match").and_then(|m| dev_path_of(&m))
        }
        None => legacy_text(docs, "machine.install.disk"),
    }
}

/// The CEL selector Talos's generator writes for an install disk (`disk.dev_path == %q`).
pub fn dev_path_selector(disk: &str) -> String {
    format!(
        "disk.dev_path == \"{}\"",
        disk.replace('\\', "\\\\").replace('"', "\\\"")
    )
}

/// The path of a `disk.dev_path == "<path>"` selector; `None` for any other expression.
pub fn dev_path_of(selector: &str) -> Option<String> {
    let rest = selector.trim().strip_prefix("disk.dev_path")?.trim_start();
    let quoted = rest.strip_prefix("==")?.trim();
    let inner = quoted.strip_prefix('"')?.strip_suffix('"')?;
    if inner
        .replace("\\\\", "")
        .replace("\\\"", "")
        .contains(['"', '\\'])
    {
        return None;
    }
    Some(inner.replace("\\\"", "\"").replace("\\\\", "\\"))
}

/// The Kubernetes CA certificate and key as PEM text: `KubeAPIServerCAConfig.issuingCA`, else
/// `cluster.ca` (base64 of PEM; a worker's has no key).
pub fn kubernetes_ca(docs: &[Value]) -> (Option<String>, Option<String>) {
    if let Some(doc) = document(docs, "KubeAPIServerCAConfig") {
        let pem = |p| text_at(Some(doc), p).filter(|s| !s.is_empty());
        return (pem("issuingCA.cert"), pem("issuingCA.key"));
    }
    let legacy = |p| legacy_text(docs, p).and_then(|b| pem_of_base64(&b));
    (legacy("cluster.ca.crt"), legacy("cluster.ca.key"))
}

/// The Kubernetes CAs accepted beside the issuing one, as PEM text:
/// `KubeAPIServerCAConfig.acceptedCAs`, else `cluster.acceptedCAs[].crt`.
pub fn kubernetes_accepted(docs: &[Value]) -> Vec<String> {
    if let Some(doc) = document(docs, "KubeAPIServerCAConfig") {
        return doc
            .get("acceptedCAs")
            .and_then(Value::as_sequence)
            .map(|l| {
                l.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default();
    }
    v1alpha1(docs)
        .and_then(|d| at(d, "cluster.acceptedCAs"))
        .and_then(Value::as_sequence)
        .map(|l| {
            l.iter()
                .filter_map(|e| e.get("crt").and_then(Value::as_str))
                .filter_map(pem_of_base64)
                .collect()
        })
        .unwrap_or_default()
}

/// Base64 text of a PEM block, decoded; `None` when it is not.
fn pem_of_base64(text: &str) -> Option<String> {
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .ok()?;
    String::from_utf8(bytes)
        .ok()
        .filter(|p| p.contains("-----BEGIN"))
}

/// The inline manifests, as (name, contents) in order: `cluster.inlineManifests`, then each
/// `KubeInlineManifestConfig` (`name`, `manifest`); Talos applies both lists.
pub fn inline_manifests(docs: &[Value]) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = v1alpha1(docs)
        .and_then(|d| at(d, "cluster.inlineManifests"))
        .and_then(Value::as_sequence)
        .map(|l| {
            l.iter()
                .filter_map(|m| {
                    Some((
                        m.get("name")?.as_str()?.to_owned(),
                        m.get("contents")?.as_str()?.to_owned(),
                    ))
                })
                .collect()
        })
        .unwrap_or_default();
    out.extend(
        documents_of(docs, "KubeInlineManifestConfig").filter_map(|d| {
            Some((
                d.get("name")?.as_str()?.to_owned(),
                d.get("manifest")?.as_str()?.to_owned(),
            ))
        }),
    );
    out
}

/// Set the kubelet image where the config carries it: `KubeletConfig.image` when there is a
/// `KubeletConfig`, else `machine.kubelet.image` (created when missing). `false` when the
/// config has neither document to hold it.
pub fn set_kubelet_image(docs: &mut [Value], image: &str) -> bool {
    if let Some(doc) = docs
        .iter_mut()
        .find(|d| d.get("kind").and_then(Value::as_str) == Some("KubeletConfig"))
        && let Some(map) = doc.as_mapping_mut()
    {
        map.insert(Value::from("image"), Value::from(image));
        return true;
    }
    let Some(machine) = docs
        .iter_mut()
        .find(|d| d.is_mapping() && d.get("kind").is_none())
        .and_then(|d| d.get_mut("machine"))
        .and_then(Value::as_mapping_mut)
    else {
        return false;
    };
    let kubelet = machine
        .entry(Value::from("kubelet"))
        .or_insert_with(|| Value::Mapping(Mapping::new()));
    if !kubelet.is_mapping() {
        *kubelet = Value::Mapping(Mapping::new());
    }
    if let Some(k) = kubelet.as_mapping_mut() {
        k.insert(Value::from("image"), Value::from(image));
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn docs(text: &str) -> Vec<Value> {
        talosprov_patch::document::parse_documents(text).unwrap()
    }

    const LEGACY: &str = "machine:\n  kubelet:\n    image: k:v1.36.2\n    extraArgs:\n      cloud-provider: [external, x]\n  install:\n    disk: /dev/sda\n    image: inst:v1\n  kernel:\n    modules: [{name: nvidia}]\ncluster:\n  id: legacy-id\n  clusterName: legacy\n  controlPlane:\n    endpoint: https://l:6443\n  network:\n    cni:\n      name: none\n  proxy:\n    disabled: true\n  inlineManifests: [{name: a, contents: x}]\n";

    const MULTIDOC: &str = "machine:\n  type: worker\n---\napiVersion: v1alpha1\nkind: DiscoveryIdentityConfig\nclusterID: doc-id\n---\napiVersion: v1alpha1\nkind: UnattendedInstallConfig\ninstaller:\n  image: inst:v2\nprovisioning:\n  diskSelector:\n    match: disk.dev_path == \"/dev/vda\"\n---\napiVersion: v1alpha1\nkind: KubeClusterConfig\nclusterName: docs\nendpoint: https://d:6443\n---\napiVersion: v1alpha1\nkind: KubeletConfig\nimage: k:v1.37.0\nextraArgs:\n  cloud-provider: external\n---\napiVersion: v1alpha1\nkind: KubeProxyConfig\nenabled: false\n---\napiVersion: v1alpha1\nkind: KernelModuleConfig\nname: nvidia_uvm\n---\napiVersion: v1alpha1\nkind: KubeInlineManifestConfig\nname: b\nmanifest: y\n";

    #[test]
    fn legacy_fields_are_read_where_the_v1alpha1_document_has_them() {
        let d = docs(LEGACY);
        assert_eq!(cni_name(&d), "none");
        assert!(kube_proxy_disabled(&d));
        assert_eq!(kubelet_image(&d).as_deref(), Some("k:v1.36.2"));
        assert_eq!(
            kubelet_arg(&d, "cloud-provider").as_deref(),
            Some("external,x")
        );
        assert_eq!(install_disk(&d).as_deref(), Some("/dev/sda"));
        assert_eq!(install_image(&d).as_deref(), Some("inst:v1"));
        assert_eq!(kernel_modules(&d), ["nvidia"]);
        assert_eq!(cluster_id(&d).as_deref(), Some("legacy-id"));
        assert_eq!(cluster_name(&d).as_deref(), Some("legacy"));
        assert_eq!(endpoint(&d).as_deref(), Some("https://l:6443"));
        assert_eq!(inline_manifests(&d), [("a".into(), "x".into())]);
        assert!(!is_multidoc_kubernetes(&d));
    }

    #[test]
    fn the_1_14_documents_win_and_their_absence_means_what_it_means_in_talos() {
        let d = docs(MULTIDOC);
        // No KubeFlannelCNIConfig in a 1.14 config: no Flannel.
        assert_eq!(cni_name(&d), "none");
        assert!(kube_proxy_disabled(&d));
        assert_eq!(kubelet_image(&d).as_deref(), Some("k:v1.37.0"));
        assert_eq!(
            kubelet_arg(&d, "cloud-provider").as_deref(),
            Some("external")
        );
        assert_eq!(install_disk(&d).as_deref(), Some("/dev/vda"));
        assert_eq!(install_image(&d).as_deref(), Some("inst:v2"));
        assert_eq!(kernel_modules(&d), ["nvidia_uvm"]);
        assert_eq!(cluster_id(&d).as_deref(), Some("doc-id"));
        assert_eq!(cluster_name(&d).as_deref(), Some("docs"));
        assert_eq!(endpoint(&d).as_deref(), Some("https://d:6443"));
        assert_eq!(inline_manifests(&d), [("b".into(), "y".into())]);
        assert!(is_multidoc_kubernetes(&d));
        let mut with_flannel = d.clone();
        with_flannel.extend(docs("apiVersion: v1alpha1\nkind: KubeFlannelCNIConfig\n"));
        assert_eq!(cni_name(&with_flannel), "flannel");
        // A legacy config without any network section runs Talos's default.
        assert_eq!(cni_name(&docs("machine:\n  type: worker\n")), "flannel");
        assert!(!kube_proxy_disabled(&docs(
            "machine: {}\n---\napiVersion: v1alpha1\nkind: KubeProxyConfig\n"
        )));
    }

    #[test]
    fn manifests_and_the_custom_cni_read_alike_in_both_layouts() {
        let legacy = docs(
            "cluster:\n  network:\n    cni: {name: custom, urls: [https://c/cni.yaml]}\n  coreDNS: {disabled: true}\n  extraManifests: [https://m/a.yaml]\n",
        );
        let multidoc = docs(
            "cluster: {}\n---\napiVersion: v1alpha1\nkind: KubeClusterConfig\n---\napiVersion: v1alpha1\nkind: KubeCoreDNSConfig\nenabled: false\n---\napiVersion: v1alpha1\nkind: KubeExternalManifestConfig\nname: custom-cni\nurl: https://c/cni.yaml\n---\napiVersion: v1alpha1\nkind: KubeExternalManifestConfig\nname: a\nurl: https://m/a.yaml\n",
        );
        for d in [&legacy, &multidoc] {
            assert_eq!(cni_name(d), "custom");
            assert_eq!(custom_cni_urls(d), ["https://c/cni.yaml"]);
            assert_eq!(extra_manifest_urls(d), ["https://m/a.yaml"]);
            assert!(coredns_disabled(d));
        }
    }

    #[test]
    fn the_kubelet_image_is_set_in_the_document_that_carries_it() {
        let mut d = docs(MULTIDOC);
        assert!(set_kubelet_image(&mut d, "k:v1.37.1"));
        assert_eq!(kubelet_image(&d).as_deref(), Some("k:v1.37.1"));
        assert!(
            v1alpha1(&d)
                .unwrap()
                .get("machine")
                .unwrap()
                .get("kubelet")
                .is_none()
        );
        let mut l = docs("machine:\n  type: worker\n");
        assert!(set_kubelet_image(&mut l, "k:v1"));
        assert_eq!(kubelet_image(&l).as_deref(), Some("k:v1"));
        assert!(!set_kubelet_image(
            &mut docs("apiVersion: v1alpha1\nkind: X\n"),
            "k"
        ));
    }

    #[test]
    fn an_install_disk_selector_is_read_back_only_in_the_generators_form() {
        for disk in ["/dev/sda", "/dev/disk/by-id/a\"b", "/dev/x\\y"] {
            assert_eq!(dev_path_of(&dev_path_selector(disk)).as_deref(), Some(disk));
        }
        assert_eq!(dev_path_of("disk.size > 10u * GB"), None);
        assert_eq!(dev_path_of("disk.dev_path == \"/dev/a\" || true"), None);
    }
}
