//! The manifest beside each archive: a small JSON document in clear that says
//! what the archive holds without opening it. It carries no secret: digests,
//! versions and names only.

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::keys::KeyKind;

/// The manifest format this build writes and reads.
pub const MANIFEST_FORMAT: u32 = 1;

/// The largest manifest read, bytes; a larger object is refused unread.
pub const MAX_MANIFEST_BYTES: u64 = 64 * 1024;

/// What an archive holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// [`MANIFEST_FORMAT`].
    pub format: u32,
    /// `cluster.name`.
    pub cluster: String,
    /// The state's lineage: a snapshot restores only into the cluster whose
    /// state has this lineage.
    pub lineage: Uuid,
    /// SHA-256 (hex) of the etcd CA certificate's PEM, from the cluster's
    /// secrets: a second check that the snapshot is this cluster's.
    pub etcd_ca_sha256: String,
    /// When it was taken, RFC 3339 in UTC.
    pub time: String,
    /// The etcd revision at the snapshot (the Kubernetes API's list
    /// `resourceVersion`), 0 when it could not be read.
    pub revision: u64,
    /// The control plane the snapshot was streamed from (hostname).
    pub node: String,
    /// Why it was taken: `etcd snapshot`, or the apply step it came before.
    pub reason: String,
    /// SHA-256 (hex) of the snapshot as Talos streamed it.
    pub plaintext_sha256: String,
    /// The snapshot's size, bytes.
    pub plaintext_bytes: u64,
    /// The archive's size, bytes.
    pub encrypted_bytes: u64,
    /// Which key opens the archive.
    pub key: KeyKind,
    /// The Talos version the control plane ran.
    pub talos_version: String,
    /// The Kubernetes version of the cluster.
    pub kubernetes_version: String,
}

impl Manifest {
    /// The manifest as pretty JSON with a final newline.
    pub fn to_json(&self) -> Vec<u8> {
        let mut out = serde_json::to_vec_pretty(self).expect("a manifest always serialises");
        out.push(b'\n');
        out
    }

    /// Read a manifest.
    ///
    /// # Errors
    /// The reason, for a document that is too large, not JSON, of another
    /// shape, or of a newer format.
    pub fn from_json(bytes: &[u8]) -> Result<Manifest, String> {
        if bytes.len() as u64 > MAX_MANIFEST_BYTES {
            return Err(format!("it is larger than {MAX_MANIFEST_BYTES} bytes"));
        }
        let value: serde_json::Value =
            serde_json::from_slice(bytes).map_err(|e| format!("it is not JSON ({e})"))?;
        match value.get("format").and_then(serde_json::Value::as_u64) {
            Some(f) if f == u64::from(MANIFEST_FORMAT) => {}
            Some(f) => {
                return Err(format!(
                    "its format is {f}; this talosprov reads format {MANIFEST_FORMAT}"
                ));
            }
            None => return Err("it has no format".to_owned()),
        }
        serde_json::from_value(value).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
pub(crate) fn sample() -> Manifest {
    Manifest {
        format: MANIFEST_FORMAT,
        cluster: "lab".to_owned(),
        lineage: Uuid::nil(),
        etcd_ca_sha256: "ab".repeat(32),
        time: "2026-12-05T19:15:00Z".to_owned(),
        revision: 42,
        node: "cp-1".to_owned(),
        reason: "etcd snapshot".to_owned(),
        plaintext_sha256: "00".repeat(32),
        plaintext_bytes: 10,
        encrypted_bytes: 200,
        key: KeyKind::Cluster,
        talos_version: "v1.13.8".to_owned(),
        kubernetes_version: "v1.36.2".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifests_round_trip_and_refuse_other_formats() {
        let m = sample();
        assert_eq!(Manifest::from_json(&m.to_json()).unwrap(), m);
        let mut v: serde_json::Value = serde_json::from_slice(&m.to_json()).unwrap();
        v["format"] = 2.into();
        let e = Manifest::from_json(&serde_json::to_vec(&v).unwrap()).unwrap_err();
        assert!(e.contains("format is 2"), "{e}");
        assert!(Manifest::from_json(b"{").unwrap_err().contains("not JSON"));
        assert!(
            Manifest::from_json(&vec![b' '; 70_000])
                .unwrap_err()
                .contains("larger")
        );
    }
}
