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

use talosprov_base::vm::Image;

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
    /// Free space, bytes; `None` when not reported.
    #[serde(default, deserialize_with = "lenient::opt_u64")]
    pub avail: Option<u64>,
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
        if let Some(upid) = running_download(client, &d.node, &d.image.filename()).await? {
            let op = Operation::new(format!("download image {}", d.image.filename())).node(&d.node);
            let waited = task::wait(client, &op, &upid).await;
            let volumes = import_volumes(client, &d.node, storage).await?;
            if volumes.iter().any(|v| v.volid == d.image.volid(storage)) {
                if let Ok(done) = waited {
                    outcome.warnings.extend(done.warnings);
                }
                outcome.present.push(d);
                continue;
            }
        }
        let done = download(client, &d, factory).await?;
        outcome.warnings.extend(done.warnings);
        outcome.downloaded.push(d);
    }
    Ok(outcome)
}

/// Send `d`'s `download-url` request and wait for its task.
///
/// # Errors
/// Request errors; [`ProxmoxError::TaskFailed`] with the task's text (for
/// example PVE's `refusing to override existing file '…'` when the file
/// appeared in the meantime).
pub async fn download(
    client: &Client,
    d: &Download,
    factory: &str,
) -> Result<task::TaskDone, ProxmoxError> {
    task::run(client, &download_request(d, factory)).await
}

/// Where one image stands on a node's storage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageOnStorage {
    /// The storage lists the volume.
    Present,
    /// Not listed yet, but a `download` task for its file is running on the
    /// node (started by an earlier, interrupted run or by someone else):
    /// wait for it rather than start a second one, which PVE would refuse
    /// at its end with "refusing to override existing file".
    Downloading(task::Upid),
    /// Neither listed nor being downloaded.
    Missing,
}

/// Whether `image` is on `storage` as `node` sees it: the storage's
/// `import` listing, then the node's running `download` tasks.
///
/// # Errors
/// [`ProxmoxError::ImportContentMissing`]; request errors.
pub async fn image_on_storage(
    client: &Client,
    node: &str,
    storage: &str,
    image: &Image,
) -> Result<ImageOnStorage, ProxmoxError> {
    check_image_storage(client, node, storage).await?;
    let volid = image.volid(storage);
    let volumes = import_volumes(client, node, storage).await?;
    if volumes.iter().any(|v| v.volid == volid) {
        return Ok(ImageOnStorage::Present);
    }
    Ok(
        match running_download(client, node, &image.filename()).await? {
            Some(upid) => ImageOnStorage::Downloading(upid),
            None => ImageOnStorage::Missing,
        },
    )
}

/// One entry of `GET /nodes/{node}/tasks`: a running task has no `status`
/// (a finished one carries its exit text there) and no `endtime`.
#[derive(Debug, Deserialize)]
struct ListedTask {
    upid: String,
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    id: String,
    #[serde(default)]
    status: Option<serde_json::Value>,
    #[serde(default)]
    endtime: Option<serde_json::Value>,
}

impl ListedTask {
    fn running(&self) -> bool {
        self.endtime.is_none()
            && self
                .status
                .as_ref()
                .is_none_or(|s| s.as_str() == Some("running"))
    }
}

/// The running `download` task on `node` that writes `filename`, if any:
/// `GET /nodes/{node}/tasks?typefilter=download&source=active`, then a task
/// whose ID is the file name (pve-manager `download_url` names its worker
/// after the encoded file name) or whose log's first lines say
/// `downloading <url> to <…/filename>`.
///
/// # Errors
/// Request errors.
pub async fn running_download(
    client: &Client,
    node: &str,
    filename: &str,
) -> Result<Option<task::Upid>, ProxmoxError> {
    let op = Operation::new(format!("look for a running download of {filename}")).node(node);
    let req = Request::get(&["nodes", node, "tasks"], op.clone())
        .query("typefilter", "download")
        .query("source", "active");
    let listed: Vec<ListedTask> = client.send_as(&req).await?;
    for t in listed
        .into_iter()
        .filter(|t| t.kind == "download" && t.running())
    {
        let Ok(upid) = task::Upid::parse(&t.upid) else {
            continue;
        };
        if t.id == filename {
            return Ok(Some(upid));
        }
        let log = task::first_log_lines(client, &op, &upid, 5).await?;
        if log.iter().any(|l| names_download_of(l, filename)) {
            return Ok(Some(upid));
        }
    }
    Ok(None)
}

/// Whether a task log line is `downloading <url> to <dest>` with `dest`
/// the file `filename` (a bare name or a path ending in `/filename`).
fn names_download_of(line: &str, filename: &str) -> bool {
    let Some(rest) = line.trim().strip_prefix("downloading ") else {
        return false;
    };
    let Some((_, dest)) = rest.rsplit_once(" to ") else {
        return false;
    };
    let dest = dest.trim().trim_matches('\'');
    dest == filename || dest.rsplit_once('/').is_some_and(|(_, f)| f == filename)
}

/// Delete the volume `volid` (`<storage>:<content>/<file>`) as `node` sees
/// it and wait for its task. Already gone is success.
///
/// # Errors
/// Request and task errors; [`ProxmoxError::Decode`] for a volid without
/// a storage.
pub async fn delete_volume(client: &Client, node: &str, volid: &str) -> Result<(), ProxmoxError> {
    let file = volid.rsplit('/').next().unwrap_or(volid);
    let op = Operation::new(format!("delete image {file}")).node(node);
    let Some((storage, _)) = volid.split_once(':') else {
        return Err(ProxmoxError::Decode {
            op,
            detail: format!("'{volid}' is not a volume ID"),
        });
    };
    let req = Request::delete(&["nodes", node, "storage", storage, "content", volid], op);
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
    delete_volume(client, node, &image.volid(storage)).await
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
    fn download_logs_name_their_file_as_pve_and_fakepve_write_it() {
        let f = "talos-v1.13.8-37656798-nocloud-amd64.qcow2";
        let url = "https://factory.talos.dev/image/x/v1.13.8/nocloud-amd64.qcow2";
        assert!(names_download_of(
            &format!("downloading {url} to /var/lib/vz/import/{f}"),
            f
        ));
        assert!(names_download_of(&format!("downloading {url} to {f}"), f));
        assert!(!names_download_of(
            &format!("downloading {url} to /var/lib/vz/import/x{f}"),
            f
        ));
        assert!(!names_download_of(
            &format!("download of '{url}' to '{f}' finished"),
            f
        ));
        assert!(!names_download_of("TASK OK", f));
    }

    #[test]
    fn listed_tasks_run_until_they_have_an_exit_status() {
        let t =
            |v: serde_json::Value| -> ListedTask { serde_json::from_value(v).expect("decodes") };
        assert!(t(serde_json::json!({"upid": "u", "type": "download"})).running());
        assert!(t(serde_json::json!({"upid": "u", "status": "running"})).running());
        assert!(!t(serde_json::json!({"upid": "u", "status": "OK", "endtime": 5})).running());
        assert!(!t(serde_json::json!({"upid": "u", "status": "some error"})).running());
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
