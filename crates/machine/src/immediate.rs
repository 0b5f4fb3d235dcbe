//! Whether a running node can apply a new machine config without a reboot, as
//! Talos's `CanApplyImmediate` decides (machined's v1alpha1 runtime): only the
//! v1alpha1 document counts, and it may differ only in `debug`, `cluster` and
//! the listed `machine` settings.

use serde::Deserialize as _;
use serde_yaml_ng::Value;

/// `machine` settings Talos applies at once (its list in `CanApplyImmediate`).
const MACHINE_IMMEDIATE: &[&str] = &[
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

/// `machine.features` settings Talos applies at once.
const FEATURES_IMMEDIATE: &[&str] = &[
    "kubernetesTalosAPIAccess",
    "kubePrism",
    "hostDNS",
    "imageCache",
    "nodeAddressSortAlgorithm",
];

/// The v1alpha1 document of `raw` with every immediately applicable setting
/// taken out; `None` when it has none or does not parse.
fn reboot_relevant(raw: &[u8]) -> Option<Value> {
    let doc = serde_yaml_ng::Deserializer::from_slice(raw)
        .filter_map(|d| Value::deserialize(d).ok())
        .find(|d| d.is_mapping() && d.get("kind").is_none())?;
    let mut doc = doc;
    let map = doc.as_mapping_mut()?;
    map.remove("debug");
    map.remove("cluster");
    if let Some(Value::Mapping(machine)) = map.get_mut("machine") {
        for key in MACHINE_IMMEDIATE {
            machine.remove(*key);
        }
        if let Some(Value::Mapping(features)) = machine.get_mut("features") {
            for key in FEATURES_IMMEDIATE {
                features.remove(*key);
            }
        }
    }
    Some(doc)
}

/// True when `after` can replace `before` on a running node without a reboot:
/// the plan's reboot hint and the simulator's `auto` mode both use this rule.
/// Inputs are whole machine configs (YAML, several documents allowed).
pub fn can_apply_immediate(before: &[u8], after: &[u8]) -> bool {
    reboot_relevant(before) == reboot_relevant(after)
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = "version: v1alpha1\nmachine:\n  type: worker\n  env: {}\n  network:\n    hostname: w-1\n  features:\n    kubePrism: { enabled: true }\n    rbac: true\ncluster:\n  clusterName: lab\n";

    #[test]
    fn network_cluster_and_listed_features_apply_at_once() {
        let after = BASE
            .replace("hostname: w-1", "hostname: w-2")
            .replace("clusterName: lab", "clusterName: lab2")
            .replace(
                "kubePrism: { enabled: true }",
                "kubePrism: { enabled: false }",
            );
        assert!(can_apply_immediate(BASE.as_bytes(), after.as_bytes()));
    }

    #[test]
    fn the_os_ca_and_its_accepted_cas_apply_at_once() {
        // What a CA rotation changes (Talos copies `machine.ca` and `machine.acceptedCAs`).
        let rotated = BASE.replace(
            "  env: {}\n",
            "  env: {}\n  ca: { crt: bmV3 }\n  acceptedCAs: [{ crt: b2xk }]\n",
        );
        assert!(can_apply_immediate(BASE.as_bytes(), rotated.as_bytes()));
    }

    #[test]
    fn other_machine_settings_need_a_reboot() {
        let env = BASE.replace("env: {}", "env: { A: b }");
        assert!(!can_apply_immediate(BASE.as_bytes(), env.as_bytes()));
        let rbac = BASE.replace("rbac: true", "rbac: false");
        assert!(!can_apply_immediate(BASE.as_bytes(), rbac.as_bytes()));
    }
}
