//! Proxmox VE REST API client: requests built as plain values (`request`), apart
//! from sending them (`client`); task waits (`task`); and one file per resource
//! family, each operation idempotent (look, then act). Facts and sources:
//! reference/proxmox.md (pve-manager, qemu-server, pve-storage, pve-common).

// Errors carry the operation, node, vmid and UPID by value; they are the cold path
// of network calls, so their size does not matter.
#![allow(clippy::result_large_err)]

pub mod access;
pub mod client;
pub mod error;
pub mod ha;
pub mod lenient;
pub mod lifecycle;
pub mod mapping;
pub mod observe;
pub mod pending;
pub mod pool;
pub mod request;
pub mod settings;
pub mod storage;
pub mod task;
pub mod tls;
pub mod vm;
pub mod vm_config;
