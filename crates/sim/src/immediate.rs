//! Whether a running simulated node applies a new machine config without a
//! reboot. Written from Talos's `Runtime.CanApplyImmediate` (machined,
//! `internal/app/machined/pkg/runtime/v1alpha1/v1alpha1_runtime.go`): take the new
//! v1alpha1 document, copy into it the running document's `debug`, `cluster` and
//! the `machine` settings Talos applies at once, and require the result to equal
//! the running document. Other documents (HostnameConfig, ...) never need a reboot.
//!
//! The planner has its own rule in `talosprov_machine::immediate`; this one is
//! written separately so that a mistake in either shows up in the tests.

use serde::Deserialize as _;
use serde_yaml_ng::{Mapping, Value};

/// The `machine` fields Talos copies over before comparing (the comment and code of
/// `CanApplyImmediate`, Talos v1.13).
const MACHINE_FIELDS: [&str; 18] = [
    "ca",
    "acceptedCAs",
    "time",
    "certSANs",
    "install",
    "network",
    "nodeLabels",
    "nodeAnnotations",
    "nodeTaints",
    "sysfs",
    "sysctls",
    "logging",
    "controlPlane",
    "kubelet",
    "kernel",
    "registries",
    "pods",
    "seccompProfiles",
];

/// The `machine.features` fields Talos copies over before comparing.
const FEATURE_FIELDS: [&str; 5] = [
    "kubernetesTalosAPIAccess",
    "kubePrism",
    "hostDNS",
    "imageCache",
    "nodeAddressSortAlgorithm",
];

/// The v1alpha1 document of a multi-document config: the one without `kind`.
fn v1alpha1(raw: &[u8]) -> Option<Mapping> {
    serde_yaml_ng::Deserializer::from_slice(raw)
        .filter_map(|d| Value::deserialize(d).ok())
        .filter_map(|v| match v {
            Value::Mapping(m) => Some(m),
            _ => None,
        })
        .find(|m| !m.contains_key("kind"))
}

/// Sets `to[key]` to `from[key]`, or removes it when `from` has none.
fn copy(from: &Mapping, to: &mut Mapping, key: &str) {
    match from.get(key) {
        Some(v) => {
            to.insert(Value::from(key), v.clone());
        }
        None => {
            to.remove(key);
        }
    }
}

/// Whether the config `new` can replace the running config `current` without a
/// reboot. A config whose v1alpha1 document can't be found or parsed needs one.
pub fn can_apply_immediate(current: &[u8], new: &[u8]) -> bool {
    let (Some(current), Some(mut new)) = (v1alpha1(current), v1alpha1(new)) else {
        return false;
    };
    copy(&current, &mut new, "debug");
    copy(&current, &mut new, "cluster");
    if let (Some(Value::Mapping(cur_machine)), Some(Value::Mapping(new_machine))) =
        (current.get("machine"), new.get_mut("machine"))
    {
        for field in MACHINE_FIELDS {
            copy(cur_machine, new_machine, field);
        }
        if let (Some(Value::Mapping(cur_f)), Some(Value::Mapping(new_f))) =
            (cur_machine.get("features"), new_machine.get_mut("features"))
        {
            for field in FEATURE_FIELDS {
                copy(cur_f, new_f, field);
            }
        }
    }
    current == new
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "version: v1alpha1\nmachine:\n  type: worker\n  install:\n    disk: /dev/sda\n  features:\n    kubePrism:\n      enabled: true\n    rbac: true\ncluster:\n  clusterName: a\n";

    #[test]
    fn settings_talos_applies_at_once_need_no_reboot() {
        let changed = BASE
            .replace("/dev/sda", "/dev/vda")
            .replace("clusterName: a", "clusterName: b")
            .replace("enabled: true", "enabled: false");
        assert!(can_apply_immediate(BASE.as_bytes(), changed.as_bytes()));
        let labels = format!("{BASE}debug: true\n").replace(
            "  type: worker\n",
            "  type: worker\n  nodeLabels:\n    a: b\n",
        );
        assert!(can_apply_immediate(BASE.as_bytes(), labels.as_bytes()));
    }

    #[test]
    fn a_ca_rotation_needs_no_reboot() {
        let rotated = BASE.replace(
            "  type: worker\n",
            "  type: worker\n  ca:\n    crt: bmV3\n  acceptedCAs:\n    - crt: b2xk\n",
        );
        assert!(can_apply_immediate(BASE.as_bytes(), rotated.as_bytes()));
    }

    #[test]
    fn other_settings_need_a_reboot() {
        let rbac = BASE.replace("rbac: true", "rbac: false");
        assert!(!can_apply_immediate(BASE.as_bytes(), rbac.as_bytes()));
        let files = BASE.replace("  type: worker\n", "  type: worker\n  files: []\n");
        assert!(!can_apply_immediate(BASE.as_bytes(), files.as_bytes()));
        assert!(!can_apply_immediate(
            BASE.as_bytes(),
            b"kind: HostnameConfig\n"
        ));
    }

    #[test]
    fn other_documents_never_need_a_reboot() {
        let with_doc =
            format!("{BASE}---\napiVersion: v1alpha1\nkind: HostnameConfig\nauto: stable\n");
        assert!(can_apply_immediate(BASE.as_bytes(), with_doc.as_bytes()));
    }
}
