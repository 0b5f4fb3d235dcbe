//! What apply sends for a change, as typed values (pure): the VM spec, the
//! image and PCI mapping records, for a machine config its digest, its
//! Talos apply mode and its Kubernetes roll, and for an add-on's object its
//! `apiVersion` and digest. Apply takes every decision from
//! these fields, never from a change's display text, and a saved plan carries
//! them, so that `apply FILE` sends exactly what the plan showed (OpenTofu's
//! `plans.ResourceInstanceChange` carries the planned value the same way).

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use talosprov_base::vm::VmSpec;
use talosprov_statefile::format;

/// A VM change's values: `vm/<host>` create, replace and update.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlannedVm {
    /// The VM as apply creates it, or updates it to (cores, memory, disk,
    /// PCI devices, tags): every value of the create request.
    pub spec: VmSpec,
    /// For an update: restart the VM through Proxmox (`status/reboot`) once
    /// updated, behind the health gate, because the running VM does not have
    /// a value Proxmox keeps pending until its next start. `false` for a
    /// create or replace, which start the VM anyway.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub restart: bool,
}

/// An image download's values: `image/<name>` create.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlannedImage {
    /// The image as the state records it (volid, Proxmox node, storage,
    /// schematic ID, Talos version).
    pub record: format::Image,
    /// The Image Factory base URL it is downloaded from (the topology's
    /// `image_factory.url`), e.g. `https://factory.talos.dev`.
    pub factory_url: String,
}

/// How a machine config is sent (Talos `ApplyConfigurationRequest.mode`),
/// decided at plan time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ApplyMode {
    /// The node waits in maintenance mode (new, reset, or not configured
    /// yet): the config is sent without a client certificate, and the node
    /// installs Talos and reboots into secure mode.
    Maintenance,
    /// A running node takes the change at once (`NO_REBOOT`); the node said
    /// so in a dry run at plan time. Apply sends exactly this mode, so a
    /// node that now needs a reboot refuses it rather than rebooting.
    NoReboot,
    /// A running node must reboot for the change (`REBOOT`): one node at a
    /// time, each behind the health gate.
    Reboot,
    /// `--staged`: the node keeps its running config until its next reboot
    /// (`STAGED`).
    Staged,
    /// The node did not answer the dry run at plan time: apply asks it again
    /// and sends no-reboot or reboot by its answer (the plan says "unknown
    /// until apply").
    UnknownUntilApply,
}

impl ApplyMode {
    /// Whether the node reboots now: `Some(true)` for reboot, `Some(false)`
    /// for no-reboot and staged, `None` when unknown until apply or for a
    /// first apply in maintenance mode.
    pub fn reboots(self) -> Option<bool> {
        match self {
            ApplyMode::Reboot => Some(true),
            ApplyMode::NoReboot | ApplyMode::Staged => Some(false),
            ApplyMode::Maintenance | ApplyMode::UnknownUntilApply => None,
        }
    }

    /// The mode's name as the JSON format spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            ApplyMode::Maintenance => "maintenance",
            ApplyMode::NoReboot => "no-reboot",
            ApplyMode::Reboot => "reboot",
            ApplyMode::Staged => "staged",
            ApplyMode::UnknownUntilApply => "unknown-until-apply",
        }
    }
}

/// A Kubernetes version change carried by a machine config change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KubernetesChange {
    /// The version the node's config has now, e.g. `v1.36.2`.
    pub from: String,
    /// The version it gets, e.g. `v1.36.3`.
    pub to: String,
    /// `true`: rolled in talosctl `upgrade-k8s`'s two phases with no reboot,
    /// node by node behind the health gate. `false`: the change also needs a
    /// reboot, so the whole config is applied with it.
    pub rolled: bool,
    /// Phase 1, run by this change's step before its own kubelet: the control
    /// planes (in order) that first get the new kube-apiserver,
    /// kube-controller-manager and kube-scheduler images with the kubelet they
    /// run now. Set on the roll's first control plane only, so no kubelet is
    /// ever newer than an API server (Kubernetes version skew policy).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub control_plane_components: Vec<String>,
}

/// A machine config change's values: `config/<host>` apply-config and
/// upgrade.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlannedConfig {
    /// The node's Talos API address (port 50000).
    pub ip: IpAddr,
    /// Hex SHA-256 of the exact config bytes apply sends. The bytes hold the
    /// cluster's secrets, so the plan carries their digest: apply renders them
    /// again and refuses to send bytes with another digest.
    pub config_sha256: String,
    /// The Talos version the node runs afterwards (for an upgrade, the
    /// target), e.g. `v1.13.8`.
    pub talos_version: String,
    /// The installer image the config names (for an upgrade, the image the
    /// node is upgraded with), e.g. `factory.talos.dev/nocloud-installer/<id>:v1.13.8`.
    pub installer_image: String,
    /// How the config is sent. For an upgrade, how a config change planned
    /// with it is sent once the node runs the new version.
    pub mode: ApplyMode,
    /// Set when the change moves the node's Kubernetes version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<KubernetesChange>,
}

impl PlannedConfig {
    /// Whether the change rolls a Kubernetes version in talosctl
    /// `upgrade-k8s`'s two phases (no reboot).
    pub fn kubernetes_roll(&self) -> bool {
        self.kubernetes.as_ref().is_some_and(|k| k.rolled)
    }
}

/// What a change to an object sends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PlannedObject {
    /// `apiVersion` it is applied (or deleted) with.
    pub api_version: String,
    /// [`super::kind::object::digest`] of the object the plan was made with (for a delete, the
    /// recorded one): apply refuses to send anything else.
    pub digest: String,
    /// Server-side apply with `force=true`: taken only for objects of the
    /// inventory (talosprov's own, whose fields it takes back from whoever
    /// edited them); an object talosprov did not apply before is applied
    /// without force, so a field another field manager owns with another
    /// value is a conflict, not overwritten.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub force: bool,
}
