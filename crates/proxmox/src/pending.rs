//! A VM's pending changes (`GET /nodes/{node}/qemu/{vmid}/pending`): the config
//! it gets at its next start, the one it was started with, and the settings a
//! running VM takes only when it starts again (qemu-server `vmconfig_hotplug_pending`;
//! reference/proxmox.md, "pending").

use std::collections::BTreeSet;

use serde_json::Value;

use super::client::Client;
use super::error::ProxmoxError;
use super::lenient;
use super::request::{Operation, Request};
use super::vm_config::{VmConfig, parse_config};

/// A VM's config as `GET /nodes/{node}/qemu/{vmid}/pending` lists it: each key
/// with its current `value`, and a `pending` value or a `delete` (1, or 2 for a
/// forced delete) that the VM takes at its next start.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VmPending {
    /// The config with the pending values applied: what the VM gets at its next
    /// start, and what `GET .../config` shows by default (`current=0`).
    pub next_start: VmConfig,
    /// The config without them: what a running VM was started with.
    pub current: VmConfig,
    /// Keys whose pending value or pending delete differs from the current
    /// value. An entry equal to the current value is not pending (PVE's
    /// `cleanup_pending` drops those; fakepve keeps them).
    pub keys: BTreeSet<String>,
}

impl VmPending {
    /// The settings a running VM takes only at its next start whose next-start
    /// value differs from the current one, in key order.
    pub fn awaiting_restart(&self) -> Vec<RestartSetting> {
        awaiting_restart(&self.current, &self.next_start)
    }
}

/// A setting a running VM takes only when it starts again (no CPU or memory
/// hotplug in our VMs; a PCI passthrough device needs a new QEMU process).
/// Tags apply at once and a disk grows through `resize`, so neither is one.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum RestartSetting {
    /// `cores`.
    Cores,
    /// `memory`.
    Memory,
    /// `hostpciN`, by key.
    HostPci(String),
}

impl RestartSetting {
    /// The PVE config key.
    pub fn key(&self) -> &str {
        match self {
            RestartSetting::Cores => "cores",
            RestartSetting::Memory => "memory",
            RestartSetting::HostPci(k) => k,
        }
    }
}

/// The restart settings whose value in `next` differs from `current`,
/// compared as values (`memory` `4096` and `current=4096` are equal). Pure.
pub fn awaiting_restart(current: &VmConfig, next: &VmConfig) -> Vec<RestartSetting> {
    let mut out = Vec::new();
    if current.cores != next.cores {
        out.push(RestartSetting::Cores);
    }
    if current.memory_mib != next.memory_mib {
        out.push(RestartSetting::Memory);
    }
    let keys: BTreeSet<&String> = current.hostpci.keys().chain(next.hostpci.keys()).collect();
    out.extend(
        keys.into_iter()
            .filter(|k| current.hostpci.get(*k) != next.hostpci.get(*k))
            .map(|k| RestartSetting::HostPci(k.clone())),
    );
    out
}

/// Both views of a `GET .../pending` answer (an array of `{key, value?,
/// pending?, delete?}`). Values arrive as strings or numbers. Pure.
pub fn parse_pending(data: &Value) -> VmPending {
    let mut current = serde_json::Map::new();
    let mut next = serde_json::Map::new();
    let mut keys = BTreeSet::new();
    for item in data.as_array().map(Vec::as_slice).unwrap_or_default() {
        let Some(key) = item.get("key").and_then(Value::as_str) else {
            continue;
        };
        let value = item.get("value").filter(|v| !v.is_null());
        let pending = item.get("pending").filter(|v| !v.is_null());
        let delete = item
            .get("delete")
            .and_then(lenient::bool_of)
            .unwrap_or(false);
        if let Some(v) = value {
            current.insert(key.to_owned(), v.clone());
        }
        let text = |v: Option<&Value>| v.and_then(lenient::string_of);
        let after = if delete { None } else { pending.or(value) };
        if text(after) != text(value) {
            keys.insert(key.to_owned());
        }
        if let Some(v) = after {
            next.insert(key.to_owned(), v.clone());
        }
    }
    VmPending {
        next_start: parse_config(&Value::Object(next)),
        current: parse_config(&Value::Object(current)),
        keys,
    }
}

/// `GET /nodes/{node}/qemu/{vmid}/pending` request.
pub fn pending_request(node: &str, vmid: u32) -> Request {
    Request::get(
        &["nodes", node, "qemu", &vmid.to_string(), "pending"],
        Operation::new("read pending VM changes")
            .node(node)
            .vmid(vmid),
    )
}

/// A VM's config with what is pending, in one request.
///
/// # Errors
/// Request errors; not-found when the VM is gone.
pub async fn vm_pending(client: &Client, node: &str, vmid: u32) -> Result<VmPending, ProxmoxError> {
    Ok(parse_pending(
        &client.send(&pending_request(node, vmid)).await?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vm_config::tag_set;
    use serde_json::json;

    #[test]
    fn pending_answer_gives_next_start_and_current_values() {
        // As PVE lists it: strings, a forced delete, a key only pending.
        let p = parse_pending(&json!([
            {"key": "cores", "value": "2", "pending": "4"},
            {"key": "memory", "value": 4096, "pending": "8192"},
            {"key": "hostpci0", "value": "mapping=gpu,pcie=1", "delete": 2},
            {"key": "hostpci1", "pending": "mapping=nic,pcie=1"},
            {"key": "tags", "value": "talos;worker"},
            {"key": "digest", "value": "d1"}
        ]));
        assert_eq!(p.next_start.cores, Some(4));
        assert_eq!(p.current.cores, Some(2));
        assert_eq!(p.next_start.memory_mib, Some(8192));
        assert_eq!(p.current.memory_mib, Some(4096));
        assert_eq!(
            p.next_start.hostpci.keys().collect::<Vec<_>>(),
            vec!["hostpci1"]
        );
        assert_eq!(
            p.current.hostpci.keys().collect::<Vec<_>>(),
            vec!["hostpci0"]
        );
        assert_eq!(p.next_start.tags, tag_set("talos;worker"));
        assert_eq!(p.next_start.digest.as_deref(), Some("d1"));
        assert_eq!(
            p.keys.iter().map(String::as_str).collect::<Vec<_>>(),
            vec!["cores", "hostpci0", "hostpci1", "memory"]
        );
        assert_eq!(
            p.awaiting_restart(),
            vec![
                RestartSetting::Cores,
                RestartSetting::Memory,
                RestartSetting::HostPci("hostpci0".into()),
                RestartSetting::HostPci("hostpci1".into()),
            ]
        );
    }

    #[test]
    fn pending_entry_equal_to_the_current_value_is_not_pending() {
        // fakepve keeps `memory` pending after it is set back to its value;
        // PVE's cleanup_pending drops such an entry.
        let p = parse_pending(&json!([
            {"key": "memory", "value": 4096, "pending": "4096"},
            {"key": "cores", "value": 2},
            {"key": "balloon", "delete": 1}
        ]));
        assert!(p.keys.is_empty(), "{:?}", p.keys);
        assert!(p.awaiting_restart().is_empty());
        assert_eq!(p.next_start, p.current);
    }

    #[test]
    fn memory_written_as_a_property_string_is_the_same_value() {
        let p = parse_pending(&json!([
            {"key": "memory", "value": "current=4096", "pending": "4096"}
        ]));
        assert!(p.awaiting_restart().is_empty());
        assert!(parse_pending(&json!(null)).keys.is_empty());
    }
}
