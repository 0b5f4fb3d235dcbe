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
    /// `ipconfig0`.
    pub ipconfig0: Option<String>,
    /// Tags as a set.
    pub tags: BTreeSet<String>,
    /// The config digest, for a later update.
    pub digest: Option<String>,
    /// Every key as PVE returned it.
    pub raw: BTreeMap<String, String>,
}

/// A drive size (`528K`, `50G`, `1T`, plain bytes) in bytes.
pub fn size_bytes(text: &str) -> Option<u64> {
    let text = text.trim();
    let (num, unit) = match text.char_indices().last()? {
        (i, c) if c.is_ascii_alphabetic() => (&text[..i], c.to_ascii_uppercase()),
        _ => (text, 'B'),
    };
    let n: f64 = num.parse().ok()?;
    let factor = match unit {
        'B' => 1.0,
        'K' => 1024.0,
        'M' => MIB as f64,
        'G' => GIB as f64,
        'T' => (GIB * 1024) as f64,
        _ => return None,
    };
    Some((n * factor) as u64)
}

/// The `size=` of a drive property string, in bytes.
pub fn drive_size(drive: &str) -> Option<u64> {
    drive
        .split(',')
        .find_map(|p| p.strip_prefix("size="))
        .and_then(size_bytes)
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
        ipconfig0: raw.get("ipconfig0").cloned(),
        tags: tag_set(raw.get("tags").map_or("", String::as_str)),
        digest: raw.get("digest").cloned(),
        raw,
    }
}
