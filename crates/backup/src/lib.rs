//! etcd snapshot archives: what `talosprov etcd snapshot`, apply's automatic
//! snapshots and `talosprov etcd restore` write and read.
//!
//! An archive is two objects side by side in a destination (a local folder or
//! an S3-compatible bucket and prefix):
//! - `etcd-<UTC time>-<cluster>-r<revision>.snapshot.age`: the snapshot as
//!   Talos's `EtcdSnapshot` streams it, age-encrypted before it leaves the
//!   process ([`archive`]);
//! - `etcd-<UTC time>-<cluster>-r<revision>.json`: its [`manifest::Manifest`]
//!   in clear (cluster, lineage, time, revision, SHA-256 of the plaintext,
//!   versions), written last, so a manifest names a complete archive.
//!
//! The names sort by time ([`name`]); [`retention`] decides, without I/O,
//! which archives a `backup:` section keeps; [`keys`] holds the age keys
//! (a passphrase, recipients and identities, or the cluster's own key derived
//! from its secrets-at-rest key); [`destination`] lists, reads, writes and
//! deletes through `object_store`.

#![warn(missing_docs)]

pub mod archive;
pub mod destination;
pub mod error;
pub mod keys;
pub mod manifest;
pub mod name;
pub mod retention;
pub mod upload;
