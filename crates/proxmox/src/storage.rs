//! Version and capability checks, and Talos images on Proxmox storage: one
//! `download-url` (`content=import`) per distinct (schematic, Talos version) and per
//! host that needs it, once in all on shared storage, skipped when the volume is
//! already listed (pve-storage `API2/Storage/Status.pm`, reference/proxmox.md §3).

use crate::client::Client;
use crate::error::ProxmoxError;
use crate::lenient;
use crate::request::{Operation, Request};
use crate::task;
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};

/// The least PVE release with `import` content for qcow2 images (pve-storage 8.3.6).
pub const MIN_VERSION: (u32, u32) = (8, 4);

pub use talosprov_core::vm::Image;

/// One download to make: this image onto `storage` as seen from `node`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Download {
    /// The Proxmox node that downloads.
    pub node: String,
    /// The storage (file-based, with `import` content).
    pub storage: String,
    /// The Talos version and schematic the image is built for.
    pub image: Image,
}

/// The downloads needed for `wanted` (Proxmox node, image) pairs: one per (node,
/// image) on local storage, one per image on shared storage (from the first node
/// in name order). Deduplicated and sorted. Pure.
pub fn plan_downloads(storage: &str, shared: bool, wanted: &[(String, Image)]) -> Vec<Download> {
    let mut by_image: BTreeMap<&Image, BTreeSet<&str>> = BTreeMap::new();
    for (node, image) in wanted {
        by_image.entry(image).or_default().insert(node.as_str());
    }
    let mut out = Vec::new();
    for (image, nodes) in by_image {
        let nodes: Vec<&str> = if shared {
            nodes.into_iter().take(1).collect()
        } else {
            nodes.into_iter().collect()
        };
        for node in nodes {
            out.push(Download {
                node: node.to_string(),
                storage: storage.to_string(),
                image: image.clone(),
            });
        }
    }
    out.sort();
    out
}

/// The `download-url` request: `content=import`, the image's filename and factory
/// URL. No `compression` (qcow2 needs none; decompression is for iso content only).
pub fn download_request(d: &Download, factory: &str) -> Request {
    Request::post(
        &["nodes", &d.node, "storage", &d.storage, "download-url"],
        Operation::new(format!("download image {}", d.image.filename())).node(&d.node),
    )
    .form("content", "import")
    .form("filename", d.image.filename())
    .form("url", d.image.url(factory))
}

/// A PVE version from `GET /version`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    /// As reported, e.g. `9.0.10`.
    pub text: String,
    /// Major and minor.
    pub major_minor: (u32, u32),
}

/// Parse `9.0.10` (or `8.4`, or `8.4-1`).
pub fn parse_version(text: &str) -> Option<Version> {
    let mut parts = text.split(['.', '-']);
    let major = parts.next()?.trim().parse().ok()?;
    let minor = parts
        .next()
        .and_then(|m| m.trim().parse().ok())
        .unwrap_or(0);
    Some(Version {
        text: text.to_string(),
        major_minor: (major, minor),
    })
}

/// `GET /version`, refusing releases older than [`MIN_VERSION`].
///
/// # Errors
/// [`ProxmoxError::VersionTooOld`], or a request error.
pub async fn check_version(client: &Client) -> Result<Version, ProxmoxError> {
    let op = Operation::new("read the Proxmox VE version");
    let data = client.send(&Request::get(&["version"], op.clone())).await?;
    let text = data
        .get("version")
        .and_then(lenient::string_of)
        .ok_or_else(|| ProxmoxError::Decode {
            op: op.clone(),
            detail: "no version in the answer".into(),
        })?;
    let version = parse_version(&text).ok_or_else(|| ProxmoxError::Decode {
        op,
        detail: format!("unreadable version '{text}'"),
    })?;
    if version.major_minor < MIN_VERSION {
        return Err(ProxmoxError::VersionTooOld {
            found: text,
            needed: format!("{}.{}", MIN_VERSION.0, MIN_VERSION.1),
            feature: "downloading qcow2 images as 'import' content",
        });
    }
    Ok(version)
}

/// What a storage is, on one node.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct StorageStatus {
    /// Plugin type: `dir`, `nfs`, `lvmthin`, ...
    #[serde(rename = "type", default)]
    pub kind: String,
    /// Content types, comma-separated.
    #[serde(default)]
    pub content: String,
    /// Shared between nodes (one copy for the whole cluster).
    #[serde(default, deserialize_with = "lenient::flag")]
    pub shared: bool,
    /// Active on this node.
    #[serde(default, deserialize_with = "lenient::flag")]
    pub active: bool,
}

impl StorageStatus {
    /// True when `content` lists this type.
    pub fn has_content(&self, wanted: &str) -> bool {
        self.content
            .split([',', ';', ' '])
            .any(|c| c.trim() == wanted)
    }
}

/// `GET /nodes/{node}/storage/{storage}/status`.
///
/// # Errors
/// Request errors (a missing storage is a 400 "No such storage.").
pub async fn storage_status(
    client: &Client,
    node: &str,
    storage: &str,
) -> Result<StorageStatus, ProxmoxError> {
    let req = Request::get(
        &["nodes", node, "storage", storage, "status"],
        Operation::new(format!("read storage {storage}")).node(node),
    );
    client.send_as(&req).await
}

/// Check that `storage` takes `import` content on `node`; returns its status.
///
/// # Errors
/// [`ProxmoxError::ImportContentMissing`] saying how to add it; request errors.
pub async fn check_image_storage(
    client: &Client,
    node: &str,
    storage: &str,
) -> Result<StorageStatus, ProxmoxError> {
    let status = storage_status(client, node, storage).await?;
    if !status.has_content("import") {
        return Err(ProxmoxError::ImportContentMissing {
            storage: storage.to_string(),
            node: node.to_string(),
            content: status.content.clone(),
        });
    }
    Ok(status)
}

/// One volume of a storage listing.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Volume {
    /// `<storage>:<content>/<file>`.
    pub volid: String,
    /// Size in bytes.
    #[serde(default, deserialize_with = "lenient::opt_u64")]
    pub size: Option<u64>,
    /// `raw`, `qcow2`, ...
    #[serde(default)]
    pub format: Option<String>,
}

/// `GET /nodes/{node}/storage/{storage}/content?content=import`.
///
/// # Errors
/// Request errors.
pub async fn import_volumes(
    client: &Client,
    node: &str,
    storage: &str,
) -> Result<Vec<Volume>, ProxmoxError> {
    let req = Request::get(
        &["nodes", node, "storage", storage, "content"],
        Operation::new(format!("list images on storage {storage}")).node(node),
    )
    .query("content", "import");
    client.send_as(&req).await
}

/// What [`ensure_images`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImagesOutcome {
    /// Downloads made.
    pub downloaded: Vec<Download>,
    /// Downloads skipped because the volume was already listed.
    pub present: Vec<Download>,
    /// Warning lines of download tasks that ended `WARNINGS: N`.
    pub warnings: Vec<String>,
}

/// Make sure every (node, image) in `wanted` can import its image from `storage`:
/// check the storage (import content, shared or not) once, list each node's
/// content once, and download what is missing.
///
/// # Errors
/// [`ProxmoxError::ImportContentMissing`]; a failed download task with its text.
pub async fn ensure_images(
    client: &Client,
    storage: &str,
    factory: &str,
    wanted: &[(String, Image)],
) -> Result<ImagesOutcome, ProxmoxError> {
    let mut outcome = ImagesOutcome::default();
    let Some((first_node, _)) = wanted.iter().min_by(|a, b| a.0.cmp(&b.0)) else {
        return Ok(outcome);
    };
    let status = check_image_storage(client, first_node, storage).await?;
    let downloads = plan_downloads(storage, status.shared, wanted);
    let mut listed: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for d in downloads {
        if !listed.contains_key(&d.node) {
            if d.node != *first_node && !status.shared {
                check_image_storage(client, &d.node, storage).await?;
            }
            let volumes = import_volumes(client, &d.node, storage).await?;
            listed.insert(
                d.node.clone(),
                volumes.into_iter().map(|v| v.volid).collect(),
            );
        }
        if listed[&d.node].contains(&d.image.volid(storage)) {
            outcome.present.push(d);
            continue;
        }
        let done = task::run(client, &download_request(&d, factory)).await?;
        outcome.warnings.extend(done.warnings);
        outcome.downloaded.push(d);
    }
    Ok(outcome)
}

/// Delete a downloaded image (`DELETE .../content/<volid>`) and wait for its task.
/// Already gone is success.
///
/// # Errors
/// Request and task errors.
pub async fn delete_image(
    client: &Client,
    node: &str,
    storage: &str,
    image: &Image,
) -> Result<(), ProxmoxError> {
    let volid = image.volid(storage);
    let req = Request::delete(
        &["nodes", node, "storage", storage, "content", &volid],
        Operation::new(format!("delete image {}", image.filename())).node(node),
    );
    match client.send(&req).await {
        Ok(serde_json::Value::Null) => Ok(()),
        Ok(data) => {
            let upid = task::upid_of(&req.op, &data)?;
            task::wait(client, &req.op, &upid).await.map(|_| ())
        }
        Err(e) if e.is_not_found() => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SCHEMATIC: &str = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba";

    fn image(v: &str) -> Image {
        Image {
            talos_version: v.into(),
            schematic: SCHEMATIC.into(),
        }
    }

    #[test]
    fn image_names_follow_the_convention() {
        let i = image("v1.13.8");
        assert_eq!(i.filename(), "talos-v1.13.8-37656798-nocloud-amd64.qcow2");
        assert_eq!(
            i.volid("local"),
            "local:import/talos-v1.13.8-37656798-nocloud-amd64.qcow2"
        );
        assert_eq!(
            i.url("https://factory.talos.dev/"),
            format!("https://factory.talos.dev/image/{SCHEMATIC}/v1.13.8/nocloud-amd64.qcow2")
        );
    }

    #[test]
    fn download_request_uses_import_content_and_no_compression() {
        let d = Download {
            node: "pve1".into(),
            storage: "local".into(),
            image: image("v1.13.8"),
        };
        let r = download_request(&d, "https://factory.talos.dev");
        assert_eq!(r.path, "/nodes/pve1/storage/local/download-url");
        assert_eq!(r.form_value("content"), Some("import"));
        assert_eq!(
            r.form_value("filename"),
            Some("talos-v1.13.8-37656798-nocloud-amd64.qcow2")
        );
        assert!(r.form_value("compression").is_none());
        assert_eq!(r.form.len(), 3);
    }

    #[test]
    fn local_storage_downloads_once_per_host_and_image() {
        let wanted = vec![
            ("pve2".to_string(), image("v1.13.8")),
            ("pve1".to_string(), image("v1.13.8")),
            ("pve1".to_string(), image("v1.13.8")),
            ("pve3".to_string(), image("v1.13.8")),
            ("pve1".to_string(), image("v1.12.0")),
        ];
        let local = plan_downloads("local", false, &wanted);
        assert_eq!(local.len(), 4);
        let shared = plan_downloads("nfs", true, &wanted);
        assert_eq!(shared.len(), 2);
        assert!(shared.iter().all(|d| d.node == "pve1"));
    }

    #[test]
    fn versions_compare_by_major_and_minor() {
        assert_eq!(parse_version("9.0.10").map(|v| v.major_minor), Some((9, 0)));
        assert_eq!(parse_version("8.4").map(|v| v.major_minor), Some((8, 4)));
        assert!(parse_version("8.3.2").map(|v| v.major_minor < MIN_VERSION) == Some(true));
        assert!(parse_version("x").is_none());
    }

    #[test]
    fn storage_content_lists_are_split() {
        let s: StorageStatus = serde_json::from_value(serde_json::json!({
            "type": "dir", "content": "iso,vztmpl,import", "shared": 0, "active": 1
        }))
        .expect("decodes");
        assert!(s.has_content("import"));
        assert!(!s.has_content("images"));
        assert!(!s.shared);
    }
}
