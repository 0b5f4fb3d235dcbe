//! A simulated cluster's etcd snapshot: the [`Store`] as bytes, laid out as
//! `etcdctl snapshot save` lays out a bbolt file, data then a trailing SHA-256.
//!
//! The layout (the simulator's own format, not bbolt):
//!
//! 1. [`SNAPSHOT_MAGIC`], the line `talos-sim etcd snapshot v1\n`;
//! 2. the body's length, 8 bytes big-endian;
//! 3. the body, JSON: `{"revision": <u64>, "objects": [{"key": [group, kind,
//!    namespace, name], "object": {...}}, ...]}`;
//! 4. padding (any bytes, zeros as the simulator writes them), ignored on load: it
//!    stands in for a large database's free pages;
//! 5. [`SNAPSHOT_HASH_BYTES`] bytes: the SHA-256 of everything before them, as etcd
//!    appends to a snapshot it saves (`etcdutl snapshot restore` checks it unless
//!    `--skip-hash-check`).
//!
//! Parts 1 to 3 alone are what a copy of etcd's data directory would be: they load
//! only without the hash check.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::{Key, MAX_OBJECTS, MAX_STORE_BYTES, Store, size_of};

/// The first line of a simulated etcd snapshot.
pub const SNAPSHOT_MAGIC: &[u8] = b"talos-sim etcd snapshot v1\n";

/// The size of the trailing SHA-256, in bytes.
pub const SNAPSHOT_HASH_BYTES: usize = 32;

/// The size of the length field after [`SNAPSHOT_MAGIC`], in bytes.
const LENGTH_BYTES: usize = 8;

#[derive(Serialize)]
struct BodyRef<'a> {
    revision: u64,
    objects: Vec<EntryRef<'a>>,
}

#[derive(Serialize)]
struct EntryRef<'a> {
    key: &'a Key,
    object: &'a Value,
}

#[derive(Deserialize)]
struct Body {
    revision: u64,
    objects: Vec<Entry>,
}

#[derive(Deserialize)]
struct Entry {
    key: Key,
    object: Value,
}

impl Store {
    /// The hashed part of this store's snapshot without padding: magic line, length
    /// and JSON body (see the module's layout). This is also what a copy of etcd's
    /// data directory would hold: [`Store::from_snapshot`] loads it, but
    /// [`check_snapshot_hash`] refuses it.
    pub fn snapshot_body(&self) -> Vec<u8> {
        let body = BodyRef {
            revision: self.revision,
            objects: self
                .objects
                .iter()
                .map(|(key, object)| EntryRef { key, object })
                .collect(),
        };
        let json = serde_json::to_vec(&body).expect("JSON values serialize");
        let mut out = Vec::with_capacity(SNAPSHOT_MAGIC.len() + LENGTH_BYTES + json.len());
        out.extend_from_slice(SNAPSHOT_MAGIC);
        out.extend_from_slice(&(json.len() as u64).to_be_bytes());
        out.extend_from_slice(&json);
        out
    }

    /// This store's whole snapshot (no padding), trailing SHA-256 included, in memory.
    pub fn snapshot_bytes(&self) -> Vec<u8> {
        SnapshotChunks::new(self.snapshot_body(), 0, usize::MAX)
            .flatten()
            .collect()
    }

    /// This store's snapshot with `padding` bytes of padding, as chunks of at most
    /// `chunk_bytes` (at least 1) made one at a time: only the body is held, the
    /// padding is generated as it is read.
    pub fn snapshot_chunks(&self, padding: u64, chunk_bytes: usize) -> SnapshotChunks {
        SnapshotChunks::new(self.snapshot_body(), padding, chunk_bytes)
    }

    /// The store a snapshot holds: its objects and revision as they were saved (node
    /// count 0 until [`Store::set_node_count`]). Reads the magic line, the length and
    /// the JSON body, and ignores whatever follows (padding, the trailing hash): it
    /// does not check the hash, see [`check_snapshot_hash`].
    ///
    /// Errors: a message naming what is wrong (not a snapshot, truncated, a body that
    /// is not the expected JSON, more objects or bytes than a store holds).
    pub fn from_snapshot(bytes: &[u8]) -> Result<Store, String> {
        let rest = bytes
            .strip_prefix(SNAPSHOT_MAGIC)
            .ok_or("not an etcd snapshot: the talos-sim snapshot header is missing")?;
        let (length, rest) = rest
            .split_first_chunk::<LENGTH_BYTES>()
            .ok_or("the snapshot is truncated: no body length")?;
        let length = usize::try_from(u64::from_be_bytes(*length))
            .map_err(|_| "the snapshot's body length is too large".to_string())?;
        let json = rest.get(..length).ok_or_else(|| {
            format!(
                "the snapshot is truncated: its body has {length} bytes, {} are left",
                rest.len()
            )
        })?;
        let body: Body = serde_json::from_slice(json)
            .map_err(|e| format!("the snapshot's body does not parse: {e}"))?;
        if body.objects.len() > MAX_OBJECTS {
            return Err(format!(
                "the snapshot holds {} objects, more than {MAX_OBJECTS}",
                body.objects.len()
            ));
        }
        let mut store = Store {
            objects: std::collections::BTreeMap::new(),
            revision: body.revision,
            node_count: 0,
            bytes: 0,
        };
        for Entry { key, object } in body.objects {
            if !object.is_object() {
                return Err(format!("the snapshot's object {key:?} is not an object"));
            }
            store.bytes += size_of(&object);
            store.objects.insert(key, object);
        }
        if store.bytes > MAX_STORE_BYTES {
            return Err(format!(
                "the snapshot holds {} bytes of objects, more than {MAX_STORE_BYTES}",
                store.bytes
            ));
        }
        Ok(store)
    }
}

/// Checks a snapshot's trailing SHA-256 against everything before it, as
/// `etcdutl snapshot restore` does without `--skip-hash-check`.
///
/// Errors: "snapshot file integrity check failed: ..." with the expected and
/// found hashes (hex), or naming a snapshot too short to carry one.
pub fn check_snapshot_hash(bytes: &[u8]) -> Result<(), String> {
    let Some(split) = bytes.len().checked_sub(SNAPSHOT_HASH_BYTES) else {
        return Err(format!(
            "snapshot file integrity check failed: {} bytes cannot carry a sha256",
            bytes.len()
        ));
    };
    let (data, stored) = bytes.split_at(split);
    let computed = Sha256::digest(data);
    if computed[..] == *stored {
        return Ok(());
    }
    Err(format!(
        "snapshot file integrity check failed: expected sha256 {}, got {} \
         (a snapshot without its hash needs the hash check skipped)",
        hex::encode(stored),
        hex::encode(computed)
    ))
}

/// A snapshot as chunks, made one at a time: the body, then the padding (zeros,
/// generated as it is read), then the SHA-256 of both; every chunk but the last has
/// the chunk size given. Made by [`Store::snapshot_chunks`].
#[derive(Debug)]
pub struct SnapshotChunks {
    body: Vec<u8>,
    sent: usize,
    padding_left: u64,
    chunk_bytes: usize,
    /// The hash of what was produced so far; `None` once it is final.
    hasher: Option<Sha256>,
    /// The final hash, and how much of it went out.
    hash: Vec<u8>,
    hash_sent: usize,
}

impl SnapshotChunks {
    fn new(body: Vec<u8>, padding: u64, chunk_bytes: usize) -> SnapshotChunks {
        SnapshotChunks {
            body,
            sent: 0,
            padding_left: padding,
            chunk_bytes: chunk_bytes.max(1),
            hasher: Some(Sha256::new()),
            hash: Vec::new(),
            hash_sent: 0,
        }
    }

    /// The snapshot's whole size in bytes (body, padding and hash), as made from the
    /// start.
    pub fn total_bytes(&self) -> u64 {
        self.body.len() as u64 + self.padding_left + SNAPSHOT_HASH_BYTES as u64
    }
}

impl Iterator for SnapshotChunks {
    type Item = Vec<u8>;

    fn next(&mut self) -> Option<Vec<u8>> {
        let mut chunk = Vec::new();
        let from_body = (self.body.len() - self.sent).min(self.chunk_bytes);
        chunk.extend_from_slice(&self.body[self.sent..self.sent + from_body]);
        self.sent += from_body;
        let room = (self.chunk_bytes - chunk.len()) as u64;
        let padding = self.padding_left.min(room);
        chunk.resize(chunk.len() + padding as usize, 0);
        self.padding_left -= padding;
        if let Some(hasher) = self.hasher.as_mut() {
            hasher.update(&chunk);
            if self.sent == self.body.len() && self.padding_left == 0 {
                self.hash = self.hasher.take().expect("present").finalize().to_vec();
            }
        }
        let from_hash = (self.hash.len() - self.hash_sent).min(self.chunk_bytes - chunk.len());
        chunk.extend_from_slice(&self.hash[self.hash_sent..self.hash_sent + from_hash]);
        self.hash_sent += from_hash;
        (!chunk.is_empty()).then_some(chunk)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn store_with_a_configmap() -> Store {
        let mut store = Store::new();
        let rt = store
            .resource("", "v1", "configmaps")
            .expect("configmaps are served");
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": "keep", "namespace": "default"},
                        "data": {"a": "b"}});
        store.create(&rt, "default", cm, "test", false).unwrap();
        store
    }

    #[test]
    fn a_snapshot_loads_back_into_the_same_objects_and_revision() {
        let store = store_with_a_configmap();
        let bytes = store.snapshot_bytes();
        assert!(bytes.starts_with(SNAPSHOT_MAGIC));
        check_snapshot_hash(&bytes).unwrap();
        let loaded = Store::from_snapshot(&bytes).unwrap();
        assert_eq!(loaded.revision(), store.revision());
        assert_eq!(
            loaded.objects().collect::<Vec<_>>(),
            store.objects().collect::<Vec<_>>()
        );
        assert_eq!(loaded.bytes, store.bytes);
    }

    #[test]
    fn chunks_pad_and_hash_whatever_the_chunk_size() {
        let store = store_with_a_configmap();
        for (padding, chunk) in [(0, 7), (10_000, 4096), (5, 1), (3, 1 << 20)] {
            let chunks = store.snapshot_chunks(padding, chunk);
            let total = chunks.total_bytes();
            let parts: Vec<Vec<u8>> = chunks.collect();
            assert!(parts.iter().all(|p| p.len() <= chunk && !p.is_empty()));
            let bytes = parts.concat();
            assert_eq!(bytes.len() as u64, total);
            assert_eq!(
                bytes.len(),
                store.snapshot_body().len() + padding as usize + SNAPSHOT_HASH_BYTES
            );
            check_snapshot_hash(&bytes).unwrap();
            let loaded = Store::from_snapshot(&bytes).unwrap();
            assert_eq!(loaded.objects().count(), store.objects().count());
        }
    }

    #[test]
    fn the_body_alone_loads_but_fails_the_hash_check() {
        let store = store_with_a_configmap();
        let body = store.snapshot_body();
        Store::from_snapshot(&body).unwrap();
        let e = check_snapshot_hash(&body).unwrap_err();
        assert!(e.starts_with("snapshot file integrity check failed"), "{e}");
    }

    #[test]
    fn garbage_and_truncated_snapshots_are_refused() {
        assert!(
            Store::from_snapshot(b"hello")
                .unwrap_err()
                .contains("header")
        );
        let body = store_with_a_configmap().snapshot_body();
        let e = Store::from_snapshot(&body[..body.len() - 3]).unwrap_err();
        assert!(e.contains("truncated"), "{e}");
        let mut bad = body.clone();
        let at = SNAPSHOT_MAGIC.len() + LENGTH_BYTES;
        bad[at] = b'[';
        let e = Store::from_snapshot(&bad).unwrap_err();
        assert!(e.contains("does not parse"), "{e}");
        assert!(check_snapshot_hash(b"short").is_err());
    }
}
