//! A Kubernetes version change: the new machine configs (control-plane component
//! images, kubelet image) applied node by node with no reboot, control planes
//! first, behind the same etcd gate as a Talos upgrade. The bootstrap manifests
//! (kube-proxy, CoreDNS) are not synced through the Kubernetes API here.

use crate::health::cluster::ClusterNode;
use talosprov_machine::config::machine_config_yaml;
use talosprov_machine::effective;
use talosprov_patch::document::parse_documents;
use talosprov_talos::credentials::ClientCredentials;
use talosprov_talos::types::{ApplyMode, ApplyOptions};

use super::events::{KubernetesPhase, UpgradeError, UpgradeEvent};
use super::rolling::{RolloutOptions, after_change, before_control_plane, connect, rollout_waves};

/// One node's new machine config. The bytes hold the cluster's secrets: they are
/// sent to the node and never printed.
#[derive(Clone)]
pub struct ConfigUpdate {
    /// The node it goes to: hostname, Talos API address and role.
    pub node: ClusterNode,
    /// The whole rendered machine config (YAML, several documents allowed).
    pub config: Vec<u8>,
}

impl std::fmt::Debug for ConfigUpdate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfigUpdate")
            .field("node", &self.node)
            .field(
                "config",
                &format_args!("(sensitive, {} bytes)", self.config.len()),
            )
            .finish()
    }
}

/// The configs of a Kubernetes version change, in the two phases talosctl's
/// `upgrade-k8s` uses, so that no kubelet is ever newer than an API server it may
/// reach (Kubernetes version skew policy).
#[derive(Debug, Clone)]
pub struct KubernetesRoll {
    /// Phase 1, control planes only: configs with the new kube-apiserver,
    /// kube-controller-manager and kube-scheduler images and the old kubelet image.
    /// Empty to go straight to phase 2 (a patch release, say).
    pub control_plane_components: Vec<ConfigUpdate>,
    /// Phase 2, every node: the final configs, with the new kubelet image.
    pub kubelet: Vec<ConfigUpdate>,
}

/// Applies a Kubernetes version change with mode NO_REBOOT, one node at a time:
/// phase 1 on the control planes, then phase 2 on the control planes and then the
/// workers (each in the order given). Before each control plane etcd must be
/// healthy; an etcd snapshot is saved before the first one unless skipped. After
/// each node it must answer healthy at `talos_version`, and etcd be healthy again.
/// Stops at the first failure; the nodes after it keep their config.
///
/// Errors: [`UpgradeError`] naming the node; [`UpgradeError::Apply`] when Talos
/// refuses the config or says it would need a reboot.
pub async fn upgrade_kubernetes(
    cluster: &[ClusterNode],
    roll: &KubernetesRoll,
    talos_version: &str,
    credentials: &ClientCredentials,
    options: &RolloutOptions,
    on_event: &(dyn Fn(UpgradeEvent) + Send + Sync),
) -> Result<(), UpgradeError> {
    let one_at_a_time = std::num::NonZeroUsize::MIN;
    let components = roll
        .control_plane_components
        .iter()
        .filter(|u| u.node.is_control_plane())
        .map(|u| (u, KubernetesPhase::ControlPlaneComponents));
    let kubelet = rollout_waves(&roll.kubelet, |u| &u.node, one_at_a_time)
        .into_iter()
        .flatten()
        .map(|u| (u, KubernetesPhase::Kubelet));
    let mut snapshot_taken = false;
    for (update, phase) in components.chain(kubelet) {
        let node = &update.node;
        let client = connect(node, credentials).await?;
        if node.is_control_plane() {
            let snapshot = (!snapshot_taken).then_some("kubernetes-upgrade");
            before_control_plane(
                cluster,
                node,
                &client,
                snapshot,
                credentials,
                options,
                on_event,
            )
            .await?;
            snapshot_taken = true;
        }
        let apply = ApplyOptions {
            mode: ApplyMode::NoReboot,
            dry_run: false,
            try_mode_timeout: None,
        };
        client
            .apply_configuration(&update.config, &apply)
            .await
            .map_err(|source| UpgradeError::Apply {
                node: node.hostname.clone(),
                source,
            })?;
        after_change(cluster, node, talos_version, credentials, options).await?;
        on_event(UpgradeEvent::ConfigApplied {
            node: node.hostname.clone(),
            phase,
        });
    }
    Ok(())
}

/// Why a phase-1 config could not be made from a node's new machine config.
#[derive(Debug, thiserror::Error)]
pub enum PhaseOneError {
    /// The config text is not YAML (the position is given, never the text: it
    /// holds secrets).
    #[error("the machine config is not YAML: {0}")]
    Yaml(String),
    /// Neither a `KubeletConfig` document nor a v1alpha1 document with a `machine` section.
    #[error(
        "the machine config has neither a KubeletConfig document nor a v1alpha1 machine section"
    )]
    NoMachine,
}

/// The kubelet image a machine config runs (`KubeletConfig.image` in the v1.14 contract,
/// else `machine.kubelet.image`), e.g. `ghcr.io/siderolabs/kubelet:v1.36.2`; `None` when it
/// sets none or is not YAML.
pub fn kubelet_image(config: &str) -> Option<String> {
    let docs = parse_documents(config).ok()?;
    effective::kubelet_image(&docs)
}

/// The phase-1 config of a control plane (pure): `new_config`, its whole new
/// machine config, with its kubelet image (`KubeletConfig.image`, else
/// `machine.kubelet.image`) set back to `running_kubelet`, the image its kubelet runs now, so
/// that only the control-plane component images (kube-apiserver, kube-controller-manager,
/// kube-scheduler: `KubeAPIServerConfig` and its siblings, or under `cluster`) change.
/// Written in Talos's style ([`machine_config_yaml`]).
///
/// # Errors
/// [`PhaseOneError`] when `new_config` is not YAML, or has neither a `KubeletConfig` nor a
/// v1alpha1 `machine`.
pub fn with_kubelet_image(
    new_config: &str,
    running_kubelet: &str,
) -> Result<String, PhaseOneError> {
    let mut docs = parse_documents(new_config).map_err(|e| PhaseOneError::Yaml(e.to_string()))?;
    let has_machine = docs
        .iter()
        .any(|d| d.get("kind").is_none() && d.get("machine").is_some());
    let has_kubelet = effective::document(&docs, "KubeletConfig").is_some();
    if !has_machine && !has_kubelet {
        return Err(PhaseOneError::NoMachine);
    }
    effective::set_kubelet_image(&mut docs, running_kubelet);
    Ok(machine_config_yaml(&docs))
}

#[cfg(test)]
mod tests {
    use super::*;

    const NEW: &str = "version: v1alpha1\nmachine:\n    type: controlplane\n    token: abc.0123456789abcdef\n    kubelet:\n        image: ghcr.io/siderolabs/kubelet:v1.36.3\n        extraArgs:\n            rotate-server-certificates: \"true\"\ncluster:\n    apiServer:\n        image: registry.k8s.io/kube-apiserver:v1.36.3\n    scheduler:\n        image: registry.k8s.io/kube-scheduler:v1.36.3\n---\napiVersion: v1alpha1\nkind: HostnameConfig\nhostname: cp-1\n";

    #[test]
    fn phase_one_keeps_the_running_kubelet_and_the_new_component_images() {
        let out = with_kubelet_image(NEW, "ghcr.io/siderolabs/kubelet:v1.36.2").expect("phase 1");
        assert_eq!(
            kubelet_image(&out).as_deref(),
            Some("ghcr.io/siderolabs/kubelet:v1.36.2")
        );
        assert!(
            out.contains("image: registry.k8s.io/kube-apiserver:v1.36.3"),
            "{out}"
        );
        assert!(
            out.contains("image: registry.k8s.io/kube-scheduler:v1.36.3"),
            "{out}"
        );
        assert!(
            out.contains("rotate-server-certificates: \"true\""),
            "{out}"
        );
        assert!(
            out.contains("kind: HostnameConfig"),
            "other documents kept:\n{out}"
        );
        // Setting the image the config already has gives the config back.
        let same = with_kubelet_image(NEW, "ghcr.io/siderolabs/kubelet:v1.36.3").expect("same");
        assert_eq!(
            same,
            machine_config_yaml(&parse_documents(NEW).expect("yaml"))
        );
    }

    #[test]
    fn a_config_without_machine_is_refused_without_its_text() {
        let err =
            with_kubelet_image("cluster:\n    secret: c2VjcmV0\n", "k:1").expect_err("no machine");
        assert!(matches!(err, PhaseOneError::NoMachine));
        let err = with_kubelet_image("machine: [\n  secret", "k:1").expect_err("not YAML");
        assert!(!err.to_string().contains("secret"), "{err}");
        assert_eq!(kubelet_image("version: v1alpha1\n"), None);
    }
}
