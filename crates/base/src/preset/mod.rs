//! The add-on presets, one file each: everything a preset is, apart from
//! the checks it makes on the rendered configs (those need the topology and
//! the configs; `addon::checks` matches every preset). Each file gives the
//! preset's name, its default phase, namespace and namespace labels, whether
//! it carries the CNI or runs the NVIDIA device plugin (what apply's final
//! gate and `health` wait for), and its chart values for the cluster's
//! [`ClusterFacts`]. This module imports no other module of the crate, so
//! `topology` (defaults) and `addon` (values) both use it.
//!
//! A new preset: a variant of [`Preset`], a file here, and the arms the
//! compiler then asks for (`clippy::wildcard_enum_match_arm` is denied).

use serde::Serialize;
use serde_json::Value;

mod cilium;
mod nvidia_gpu_operator;
pub mod spec;
mod talos_ccm;

use crate::preset::spec::{ClusterFacts, Phase};
use spec::Spec;

/// A set of Talos's documented values and checks for a well-known add-on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Preset {
    /// Cilium as Talos documents it (`phase` defaults to `bootstrap`).
    Cilium,
    /// The NVIDIA GPU Operator with Talos's driver and toolkit extensions.
    NvidiaGpuOperator,
    /// The Talos cloud controller manager.
    TalosCcm,
}

impl Preset {
    /// Every preset, in the order documentation lists them.
    pub const ALL: [Preset; 3] = [Preset::Cilium, Preset::NvidiaGpuOperator, Preset::TalosCcm];

    fn spec(self) -> &'static Spec {
        match self {
            Preset::Cilium => &cilium::SPEC,
            Preset::NvidiaGpuOperator => &nvidia_gpu_operator::SPEC,
            Preset::TalosCcm => &talos_ccm::SPEC,
        }
    }

    /// The name written in the topology.
    pub fn name(self) -> &'static str {
        self.spec().name
    }

    /// When the add-on is installed unless its `phase` says otherwise: a
    /// CNI at bootstrap (nodes are not Ready without it), the others once
    /// the API answers.
    pub fn default_phase(self) -> Phase {
        self.spec().phase
    }

    /// The namespace the chart goes to unless `namespace` says otherwise,
    /// as each project's install guide has it.
    pub fn default_namespace(self) -> &'static str {
        self.spec().namespace
    }

    /// The labels its namespace gets before the user's (Pod Security
    /// admission levels).
    pub fn namespace_labels(self) -> &'static [(&'static str, &'static str)] {
        self.spec().namespace_labels
    }

    /// Whether the preset installs the cluster's CNI, so that nodes become
    /// Ready once it runs (apply's final gate and `health` then wait for
    /// them).
    pub fn carries_cni(self) -> bool {
        self.spec().carries_cni
    }

    /// Whether the preset runs the NVIDIA device plugin, so that GPU nodes
    /// get `nvidia.com/gpu` allocatable (the final gate waits for it).
    pub fn runs_device_plugin(self) -> bool {
        self.spec().runs_device_plugin
    }

    /// The values the preset gives before the user's, for `facts`' cluster
    /// (JSON, as Helm's values).
    pub fn values(self, facts: &ClusterFacts) -> Value {
        (self.spec().values)(facts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_kebab_case_as_serde_writes_them() {
        let mut names: Vec<&str> = Preset::ALL.iter().map(|p| p.name()).collect();
        for p in Preset::ALL {
            assert_eq!(
                serde_json::to_value(p).expect("serializes"),
                Value::String(p.name().to_owned())
            );
        }
        names.dedup();
        assert_eq!(names.len(), Preset::ALL.len());
    }
}
