//! The rolling upgrade itself: waves of nodes (control planes one at a time and
//! first), each upgraded between etcd health gates, and the connection and
//! gates the Kubernetes roll shares.

use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::future::join_all;

use super::events::{UpgradeError, UpgradeEvent};
use super::snapshot::{SnapshotPolicy, save_snapshot, snapshot_reason};
use crate::health::cluster::ClusterNode;
use crate::health::probe::{wait_etcd_healthy, wait_node_healthy};
use talosprov_base::schematic::{SchematicId, installer_image};
use talosprov_base::version::TalosVersion;
use talosprov_retry::Backoff;
use talosprov_talos::client::TalosClient;
use talosprov_talos::credentials::ClientCredentials;
use talosprov_talos::error::TalosError;
use talosprov_talos::types::UpgradeOptions;
use talosprov_talos::wait::retry_until;

/// What nodes are upgraded to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpgradeTarget {
    /// The installer image, `<factory host>/nocloud-installer/<schematic>:<version>`.
    pub image: String,
    /// The Talos version the nodes report afterwards, e.g. `v1.13.8`.
    pub version: String,
}

impl UpgradeTarget {
    /// The target for a schematic and version from the Image Factory at `factory`.
    pub fn from_factory(
        factory: &url::Url,
        schematic: &SchematicId,
        version: &TalosVersion,
    ) -> Self {
        UpgradeTarget {
            image: installer_image(factory, schematic, version),
            version: version.to_string(),
        }
    }
}

/// A node to upgrade.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpgradeNode {
    /// Its hostname, Talos API address and role.
    pub node: ClusterNode,
    /// The Talos version the state recorded for it. When it differs from the
    /// target, a node already reporting the target version was upgraded by an
    /// interrupted run and is skipped; when it is the same (a schematic change),
    /// the node is always upgraded.
    pub from_version: String,
}

/// How a rollout runs.
#[derive(Debug, Clone)]
pub struct RolloutOptions {
    /// Workers upgraded at once (`--max-parallel-upgrades`, default 1).
    pub max_parallel: NonZeroUsize,
    /// The etcd snapshot before each control plane (`--skip-etcd-snapshot`).
    pub etcd_snapshot: SnapshotPolicy,
    /// How long etcd may take to be healthy before and after a control plane
    /// (default 600 s).
    pub health_timeout: Duration,
    /// How long a node may take to come back from its upgrade reboot at the new
    /// version, healthy (default 900 s).
    pub reboot_timeout: Duration,
    /// Pacing of the polls.
    pub backoff: Backoff,
}

impl RolloutOptions {
    /// The defaults, with the snapshot policy given.
    pub fn new(etcd_snapshot: SnapshotPolicy) -> Self {
        RolloutOptions {
            max_parallel: NonZeroUsize::MIN,
            etcd_snapshot,
            health_timeout: Duration::from_secs(600),
            reboot_timeout: Duration::from_secs(900),
            backoff: Backoff::default(),
        }
    }
}

/// The order a rollout runs in (pure): each control plane alone, in the order
/// given, then the workers in groups of at most `max_parallel`.
pub fn rollout_waves<T>(
    nodes: &[T],
    node: impl Fn(&T) -> &ClusterNode,
    max_parallel: NonZeroUsize,
) -> Vec<Vec<&T>> {
    let mut waves: Vec<Vec<&T>> = nodes
        .iter()
        .filter(|n| node(n).is_control_plane())
        .map(|n| vec![n])
        .collect();
    let workers: Vec<&T> = nodes
        .iter()
        .filter(|n| !node(n).is_control_plane())
        .collect();
    waves.extend(workers.chunks(max_parallel.get()).map(<[&T]>::to_vec));
    waves
}

/// Upgrades `nodes` to `target`, wave by wave (see [`rollout_waves`]), and stops
/// at the first node that fails; the nodes after it keep their version. `cluster`
/// lists every node (the etcd gate asks all control planes). Call again with the
/// same nodes to continue: nodes already at the target version are skipped.
///
/// Errors: [`UpgradeError`] naming the node it stopped at.
pub async fn rolling_upgrade(
    cluster: &[ClusterNode],
    nodes: &[UpgradeNode],
    target: &UpgradeTarget,
    credentials: &ClientCredentials,
    options: &RolloutOptions,
    on_event: &(dyn Fn(UpgradeEvent) + Send + Sync),
) -> Result<(), UpgradeError> {
    for wave in rollout_waves(nodes, |n| &n.node, options.max_parallel) {
        let results = join_all(
            wave.iter()
                .map(|n| upgrade_one(cluster, n, target, credentials, options, on_event)),
        )
        .await;
        if let Some(err) = results.into_iter().find_map(Result::err) {
            return Err(err);
        }
    }
    Ok(())
}

/// Before touching a control plane: the etcd gate, then the snapshot when
/// `snapshot` names the action (and the policy does not skip it).
pub(crate) async fn before_control_plane(
    cluster: &[ClusterNode],
    node: &ClusterNode,
    client: &TalosClient,
    snapshot: Option<&str>,
    credentials: &ClientCredentials,
    options: &RolloutOptions,
    on_event: &(dyn Fn(UpgradeEvent) + Send + Sync),
) -> Result<(), UpgradeError> {
    on_event(UpgradeEvent::WaitingForEtcd {
        node: node.hostname.clone(),
    });
    wait_etcd_healthy(
        cluster,
        credentials,
        options.health_timeout,
        options.backoff,
    )
    .await
    .map_err(|source| UpgradeError::EtcdBefore {
        node: node.hostname.clone(),
        source,
    })?;
    if let (SnapshotPolicy::Archive(archiver), Some(action)) = (&options.etcd_snapshot, snapshot) {
        let reason = snapshot_reason(&node.hostname, action);
        let file = save_snapshot(client, archiver, &node.hostname, &reason)
            .await
            .map_err(|source| UpgradeError::Snapshot {
                node: node.hostname.clone(),
                source,
            })?;
        on_event(UpgradeEvent::SnapshotSaved {
            node: node.hostname.clone(),
            file,
        });
    }
    Ok(())
}

/// After a node's reboot or config change: the node healthy at `version`, and for
/// a control plane etcd healthy again.
pub(crate) async fn after_change(
    cluster: &[ClusterNode],
    node: &ClusterNode,
    version: &str,
    credentials: &ClientCredentials,
    options: &RolloutOptions,
) -> Result<(), UpgradeError> {
    wait_node_healthy(
        node,
        credentials,
        version,
        options.reboot_timeout,
        options.backoff,
    )
    .await
    .map_err(|source| UpgradeError::NodeUnhealthy {
        node: node.hostname.clone(),
        source,
    })?;
    if node.is_control_plane() {
        wait_etcd_healthy(
            cluster,
            credentials,
            options.health_timeout,
            options.backoff,
        )
        .await
        .map_err(|source| UpgradeError::EtcdAfter {
            node: node.hostname.clone(),
            source,
        })?;
    }
    Ok(())
}

pub(crate) async fn connect(
    node: &ClusterNode,
    credentials: &ClientCredentials,
) -> Result<TalosClient, UpgradeError> {
    TalosClient::connect_secure(node.ip, credentials)
        .await
        .map(|c| c.with_hostname(node.hostname.clone()))
        .map_err(|e| UpgradeError::Connect {
            node: node.hostname.clone(),
            source: e.with_hostname(Some(&node.hostname)),
        })
}

async fn upgrade_one(
    cluster: &[ClusterNode],
    item: &UpgradeNode,
    target: &UpgradeTarget,
    credentials: &ClientCredentials,
    options: &RolloutOptions,
    on_event: &(dyn Fn(UpgradeEvent) + Send + Sync),
) -> Result<(), UpgradeError> {
    let node = &item.node;
    let hostname = node.hostname.clone();
    let client = connect(node, credentials).await?;
    let running = client
        .version()
        .await
        .map_err(|source| UpgradeError::Connect {
            node: hostname.clone(),
            source,
        })?;
    if running.tag == target.version && item.from_version != target.version {
        // An interrupted run upgraded it; it must still be healthy before moving on.
        after_change(cluster, node, &target.version, credentials, options).await?;
        on_event(UpgradeEvent::AlreadyUpgraded {
            node: hostname,
            version: running.tag,
        });
        return Ok(());
    }
    if node.is_control_plane() {
        let action = format!("talos {}", target.version);
        before_control_plane(
            cluster,
            node,
            &client,
            Some(&action),
            credentials,
            options,
            on_event,
        )
        .await?;
    }
    let request = UpgradeOptions {
        image: target.image.clone(),
        stage: false,
        force: false,
    };
    let path = client
        .upgrade(&request)
        .await
        .map_err(|source| UpgradeError::Upgrade {
            node: hostname.clone(),
            image: target.image.clone(),
            source,
        })?;
    on_event(UpgradeEvent::Rebooting {
        node: hostname.clone(),
        path,
    });
    wait_back(node, credentials, target, &running.tag, options).await?;
    after_change(cluster, node, &target.version, credentials, options).await?;
    on_event(UpgradeEvent::Upgraded {
        node: hostname,
        version: target.version.clone(),
    });
    Ok(())
}

/// Waits until the node answers at the target version after its reboot. When the
/// version does not change (a schematic change), the node must first have been
/// seen down.
async fn wait_back(
    node: &ClusterNode,
    credentials: &ClientCredentials,
    target: &UpgradeTarget,
    running: &str,
    options: &RolloutOptions,
) -> Result<(), UpgradeError> {
    let name = talosprov_talos::error::NodeName {
        ip: node.ip,
        hostname: Some(node.hostname.clone()),
    };
    let seen_down = AtomicBool::new(false);
    let result = retry_until(
        &name,
        "back at the new Talos version",
        options.reboot_timeout,
        options.backoff,
        || async {
            let answer = async {
                let client = TalosClient::connect_secure(node.ip, credentials).await?;
                client.version().await
            }
            .await;
            match answer {
                Ok(v)
                    if v.tag == target.version
                        && (v.tag != running || seen_down.load(Ordering::Relaxed)) =>
                {
                    Ok(())
                }
                Ok(v) => Err(TalosError::NotReady {
                    node: name.clone(),
                    rpc: "Version",
                    message: format!("still reports {}", v.tag),
                }),
                Err(e) => {
                    seen_down.store(true, Ordering::Relaxed);
                    // Every failure while rebooting is worth another try.
                    Err(TalosError::Unreachable {
                        node: name.clone(),
                        reason: e.to_string(),
                    })
                }
            }
        },
    )
    .await;
    result.map_err(|source| UpgradeError::NotBack {
        node: node.hostname.clone(),
        version: target.version.clone(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use talosprov_base::role::Role;

    fn n(hostname: &str, role: Role) -> ClusterNode {
        ClusterNode {
            hostname: hostname.into(),
            ip: "10.0.0.1".parse().unwrap(),
            role,
        }
    }

    fn names(waves: &[Vec<&ClusterNode>]) -> Vec<Vec<String>> {
        waves
            .iter()
            .map(|w| w.iter().map(|n| n.hostname.clone()).collect())
            .collect()
    }

    #[test]
    fn control_planes_go_alone_and_first_then_workers_in_groups() {
        let nodes = [
            n("w-1", Role::Worker),
            n("cp-1", Role::Controlplane),
            n("w-2", Role::Worker),
            n("cp-2", Role::Controlplane),
            n("w-3", Role::Worker),
        ];
        let two = NonZeroUsize::new(2).unwrap();
        assert_eq!(
            names(&rollout_waves(&nodes, |n| n, two)),
            [vec!["cp-1"], vec!["cp-2"], vec!["w-1", "w-2"], vec!["w-3"]]
        );
        assert_eq!(
            names(&rollout_waves(&nodes, |n| n, NonZeroUsize::MIN)).len(),
            5
        );
    }

    #[test]
    fn target_names_the_nocloud_installer_of_the_factory() {
        let id =
            SchematicId::parse("376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba")
                .unwrap();
        let factory = url::Url::parse("https://factory.talos.dev").unwrap();
        let target = UpgradeTarget::from_factory(&factory, &id, &"v1.13.8".parse().unwrap());
        assert_eq!(target.version, "v1.13.8");
        assert_eq!(
            target.image,
            format!(
                "factory.talos.dev/nocloud-installer/{}:v1.13.8",
                id.as_str()
            )
        );
    }
}
