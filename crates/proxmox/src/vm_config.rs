//! A VM's config in plain values, from a `GET /nodes/{node}/qemu/{vmid}/config`
//! (or `.../pending`) answer: drive sizes in bytes, memory in MiB, tags as a
//! set. Pure; [`crate::observe`] and [`crate::pending`] read through it.

use crate::lenient;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

const MIB: u64 = 1024 * 1024;
const GIB: u64 = 1024 * MIB;

/// Tags split on `;`, `,` and spaces, lower-cased.
pub fn tag_set(tags: &str) -> BTreeSet<String> {
    tags.split([';', ',', ' '])
        .filter(|t| !t.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// A VM's config, read with `GET /nodes/{node}/qemu/{vmid}/config`, in plain values.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VmConfig {
    /// Cores per socket.
    pub cores: Option<u64>,
    /// Sockets.
    pub sockets: Option<u64>,
    /// Memory in MiB (`memory` is a property string `[current=]N` since PVE 8).
    pub memory_mib: Option<u64>,
    /// `balloon` (0 is off).
    pub balloon: Option<u64>,
    /// Size of `scsi0` in GiB, from its `size=`.
    pub disk_gib: Option<u64>,
    /// `hostpciN` keys and values.
    pub hostpci: BTreeMap<String, String>,
    /// `netN` keys and values.
    pub net: BTreeMap<String, String>,
    /// Data disks, `scsiN` (N from 1) keys and values as PVE shows them.
    pub data_disks: BTreeMap<String, String>,
    /// Whether `agent` is enabled (`1` or `enabled=1`); absent is off.
    pub agent: bool,
    /// `ipconfig0`.
    pub ipconfig0: Option<String>,
    /// Tags as a set.
    pub tags: BTreeSet<String>,
    /// The config digest, for a later update.
    pub digest: Option<String>,
    /// Every key as PVE returned it.
    pub raw: BTreeMap<String, String>,
}

use talosprov_base::vm::size_bytes;

/// The `size=` of a drive property string, in bytes.
pub fn drive_size(drive: &str) -> Option<u64> {
    drive
        .split(',')
        .find_map(|p| p.strip_prefix("size="))
        .and_then(size_bytes)
}

/// The keys `<prefix>N` (N from `from`, digits only) with their values.
fn keys_numbered(
    raw: &BTreeMap<String, String>,
    prefix: &str,
    from: u32,
) -> BTreeMap<String, String> {
    raw.iter()
        .filter(|(k, _)| {
            k.strip_prefix(prefix)
                .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|n| n.parse::<u32>().ok())
                .is_some_and(|n| n >= from)
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// Whether an `agent` value (`pve-qm-agent`: `[enabled=]<1|0>[,fstrim_cloned_disks=…]`)
/// enables the agent.
pub fn agent_enabled(value: &str) -> bool {
    value.split(',').any(|p| {
        let v = p
            .strip_prefix("enabled=")
            .unwrap_or(if p.contains('=') { "" } else { p });
        matches!(v.trim(), "1" | "yes" | "on" | "true")
    })
}

/// Plain values from a config answer. Pure.
pub fn parse_config(data: &Value) -> VmConfig {
    let raw: BTreeMap<String, String> = data
        .as_object()
        .map(|o| {
            o.iter()
                .filter_map(|(k, v)| lenient::string_of(v).map(|s| (k.clone(), s)))
                .collect()
        })
        .unwrap_or_default();
    let num = |k: &str| data.get(k).and_then(lenient::u64_of);
    let memory_mib = data.get("memory").and_then(|m| {
        lenient::u64_of(m).or_else(|| {
            m.as_str()?
                .split(',')
                .find_map(|p| {
                    p.strip_prefix("current=")
                        .or((!p.contains('=')).then_some(p))
                })
                .and_then(|n| n.trim().parse().ok())
        })
    });
    VmConfig {
        cores: num("cores"),
        sockets: num("sockets"),
        memory_mib,
        balloon: num("balloon"),
        disk_gib: raw
            .get("scsi0")
            .and_then(|d| drive_size(d))
            .map(|b| b / GIB),
        hostpci: raw
            .iter()
            .filter(|(k, _)| k.starts_with("hostpci"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        net: keys_numbered(&raw, "net", 0),
        data_disks: keys_numbered(&raw, "scsi", 1),
        agent: raw.get("agent").is_some_and(|a| agent_enabled(a)),
        ipconfig0: raw.get("ipconfig0").cloned(),
        tags: tag_set(raw.get("tags").map_or("", String::as_str)),
        digest: raw.get("digest").cloned(),
        raw,
    }
}
