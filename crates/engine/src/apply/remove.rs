//! Removing a node from the cluster before its VM is deleted: a control plane is
//! reset gracefully, which makes it leave etcd first; when it is unreachable its
//! member is removed from another control plane (EtcdRemoveMemberByID). An etcd
//! snapshot comes first unless skipped. The last control plane is never removed.

use std::time::Duration;

use crate::apply::upgrade::snapshot::{
    SnapshotError, SnapshotFile, SnapshotPolicy, save_snapshot, snapshot_reason,
};
use crate::backups::Archiver;
use crate::health::cluster::ClusterNode;
use crate::health::probe::{HealthError, wait_etcd_settled};
use talosprov_plan::removal::{RemovalRefused, RemovalWarning, check_removal};
use talosprov_retry::Backoff;
use talosprov_talos::client::TalosClient;
use talosprov_talos::credentials::ClientCredentials;
use talosprov_talos::error::{NodeName, TalosError};
use talosprov_talos::types::{EtcdMember, ResetOptions};
use talosprov_talos::wait::retry_until;

/// How a removal runs.
#[derive(Debug, Clone)]
pub struct RemovalOptions {
    /// The etcd snapshot before removing a control plane (`--skip-etcd-snapshot`).
    pub etcd_snapshot: SnapshotPolicy,
    /// How long the node may take to answer before it counts as unreachable
    /// (default 10 s).
    pub reach_timeout: Duration,
    /// How long etcd may take to drop the member and be healthy (default 300 s).
    pub etcd_timeout: Duration,
    /// Pacing of the polls.
    pub backoff: Backoff,
}

impl RemovalOptions {
    /// The defaults, with the snapshot policy given.
    pub fn new(etcd_snapshot: SnapshotPolicy) -> Self {
        RemovalOptions {
            etcd_snapshot,
            reach_timeout: Duration::from_secs(10),
            etcd_timeout: Duration::from_secs(300),
            backoff: Backoff::default(),
        }
    }
}

/// What was done to the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RemovalOutcome {
    /// The node was reset gracefully (a control plane left etcd first) and halts.
    Reset,
    /// The node was unreachable; its etcd member was removed from `via`.
    MemberRemoved {
        /// The member ID.
        member_id: u64,
        /// The control plane that removed it.
        via: String,
    },
    /// The node was unreachable and is not (or no longer) an etcd member.
    Unreachable,
}

/// A finished removal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Removal {
    /// What was done.
    pub outcome: RemovalOutcome,
    /// The snapshot saved first, if any.
    pub snapshot: Option<SnapshotFile>,
    /// What the operator should know about the cluster left behind.
    pub warnings: Vec<RemovalWarning>,
}

/// The removal could not be done; the node may still be in the cluster.
#[derive(Debug, thiserror::Error)]
pub enum RemoveError {
    /// Refused (the last control plane).
    #[error(transparent)]
    Refused(#[from] RemovalRefused),
    /// No control plane could give the snapshot.
    #[error("cannot save the etcd snapshot before removing {node}")]
    Snapshot {
        /// The node being removed.
        node: String,
        /// The last attempt's error.
        #[source]
        source: SnapshotError,
    },
    /// The node answered but refused the reset.
    #[error("reset of {node} failed")]
    Reset {
        /// Hostname of the node being removed.
        node: String,
        /// The client's error.
        #[source]
        source: TalosError,
    },
    /// No other control plane answered, so the member could not be removed.
    #[error("{node} is unreachable and no other control plane answered to remove its etcd member")]
    NoControlPlane {
        /// Hostname of the node being removed.
        node: String,
        /// The last error.
        #[source]
        source: TalosError,
    },
    /// EtcdRemoveMemberByID failed.
    #[error("cannot remove the etcd member of {node}")]
    RemoveMember {
        /// Hostname of the node being removed.
        node: String,
        /// The client's error.
        #[source]
        source: TalosError,
    },
    /// etcd still listed the node, or was not healthy, at the deadline.
    #[error("etcd did not settle after removing {node}")]
    Etcd {
        /// Hostname of the node being removed.
        node: String,
        /// Why.
        #[source]
        source: EtcdSettle,
    },
}

/// Why etcd did not settle after a removal.
#[derive(Debug, thiserror::Error)]
pub enum EtcdSettle {
    /// The member was still listed at the deadline.
    #[error(transparent)]
    StillMember(TalosError),
    /// The remaining members were not healthy in time.
    #[error(transparent)]
    Unhealthy(HealthError),
}

async fn reach(
    node: &ClusterNode,
    credentials: &ClientCredentials,
    limit: Duration,
) -> Result<TalosClient, TalosError> {
    let attempt = async {
        let client = TalosClient::connect_secure(node.ip, credentials).await?;
        let client = client.with_hostname(node.hostname.clone());
        client.version().await?;
        Ok(client)
    };
    match tokio::time::timeout(limit, attempt).await {
        Ok(r) => r.map_err(|e: TalosError| e.with_hostname(Some(&node.hostname))),
        Err(_) => Err(TalosError::Unreachable {
            node: NodeName {
                ip: node.ip,
                hostname: Some(node.hostname.clone()),
            },
            reason: format!("no answer within {} s", limit.as_secs()),
        }),
    }
}

/// The member that is `node`: same hostname, or a peer URL on its address.
fn member_of<'a>(members: &'a [EtcdMember], node: &ClusterNode) -> Option<&'a EtcdMember> {
    members
        .iter()
        .find(|m| crate::health::judge::is_member(m, node))
}

/// Removes `node` from the cluster (`cluster` lists every node, the one removed
/// included): checks it is not the last control plane, saves a snapshot (a
/// control plane, unless skipped), resets the node gracefully, or when it is
/// unreachable removes its etcd member from another control plane; then waits
/// until etcd on the remaining control planes no longer lists it and is healthy.
/// A worker is reset when reachable; an unreachable one needs nothing more.
///
/// Errors: [`RemoveError`].
pub async fn remove_node(
    cluster: &[ClusterNode],
    node: &ClusterNode,
    credentials: &ClientCredentials,
    options: &RemovalOptions,
) -> Result<Removal, RemoveError> {
    let hostname = node.hostname.clone();
    let reset = ResetOptions {
        graceful: true,
        reboot: false,
        system_partitions: Vec::new(),
    };
    if !node.is_control_plane() {
        return remove_worker(node, credentials, options, &reset).await;
    }
    let control_planes: Vec<&str> = cluster
        .iter()
        .filter(|n| n.is_control_plane())
        .map(|n| n.hostname.as_str())
        .collect();
    let warnings = check_removal(&control_planes, &[hostname.as_str()])?;
    let remaining: Vec<ClusterNode> = cluster
        .iter()
        .filter(|n| n.hostname != hostname)
        .cloned()
        .collect();
    let mut others = Vec::new();
    let mut last_error = None;
    for cp in remaining.iter().filter(|n| n.is_control_plane()) {
        match reach(cp, credentials, options.reach_timeout).await {
            Ok(c) => others.push((cp.clone(), c)),
            Err(e) => last_error = Some(e),
        }
    }
    let target = reach(node, credentials, options.reach_timeout).await;

    let snapshot = match &options.etcd_snapshot {
        SnapshotPolicy::Skip => None,
        SnapshotPolicy::Archive(archiver) => {
            let mut sources: Vec<(&str, &TalosClient)> = others
                .iter()
                .map(|(n, c)| (n.hostname.as_str(), c))
                .collect();
            if let Ok(c) = &target {
                sources.push((hostname.as_str(), c));
            }
            Some(save_removal_snapshot(&hostname, archiver, sources).await?)
        }
    };

    let outcome = match target {
        Ok(client) => {
            client
                .reset(&reset)
                .await
                .map_err(|source| RemoveError::Reset {
                    node: hostname.clone(),
                    source,
                })?;
            RemovalOutcome::Reset
        }
        Err(unreachable) => {
            tracing::info!(node = %node.label(), error = %unreachable, "control plane unreachable; removing its etcd member from another control plane");
            remove_member_elsewhere(node, &others, last_error.unwrap_or(unreachable)).await?
        }
    };
    settle(node, &remaining, &others, credentials, options).await?;
    Ok(Removal {
        outcome,
        snapshot,
        warnings,
    })
}

/// A worker is reset when reachable; an unreachable one needs nothing more.
async fn remove_worker(
    node: &ClusterNode,
    credentials: &ClientCredentials,
    options: &RemovalOptions,
    reset: &ResetOptions,
) -> Result<Removal, RemoveError> {
    let outcome = match reach(node, credentials, options.reach_timeout).await {
        Ok(client) => {
            client
                .reset(reset)
                .await
                .map_err(|source| RemoveError::Reset {
                    node: node.hostname.clone(),
                    source,
                })?;
            RemovalOutcome::Reset
        }
        Err(e) => {
            tracing::info!(node = %node.label(), error = %e, "worker unreachable; nothing to reset");
            RemovalOutcome::Unreachable
        }
    };
    Ok(Removal {
        outcome,
        snapshot: None,
        warnings: Vec::new(),
    })
}

/// Save the etcd snapshot taken before removing `hostname` with
/// `archiver`, from the first of `sources` (the other control planes, then
/// the node itself, by hostname) that gives one.
async fn save_removal_snapshot(
    hostname: &str,
    archiver: &Archiver,
    sources: Vec<(&str, &TalosClient)>,
) -> Result<SnapshotFile, RemoveError> {
    let reason = snapshot_reason(hostname, "removal");
    let mut failure = SnapshotError("no control plane answered".to_owned());
    for (node, client) in sources {
        match save_snapshot(client, archiver, node, &reason).await {
            Ok(file) => return Ok(file),
            Err(e) => failure = e,
        }
    }
    Err(RemoveError::Snapshot {
        node: hostname.to_owned(),
        source: failure,
    })
}

/// Remove the etcd member of an unreachable control plane through the first
/// other control plane that answered; `unreachable` is the error reported
/// when none did. A node that is no member needs nothing more.
async fn remove_member_elsewhere(
    node: &ClusterNode,
    others: &[(ClusterNode, TalosClient)],
    unreachable: TalosError,
) -> Result<RemovalOutcome, RemoveError> {
    let hostname = &node.hostname;
    let Some((via, client)) = others.first() else {
        return Err(RemoveError::NoControlPlane {
            node: hostname.clone(),
            source: unreachable,
        });
    };
    let members = client
        .etcd_member_list()
        .await
        .map_err(|source| RemoveError::RemoveMember {
            node: hostname.clone(),
            source,
        })?;
    Ok(match member_of(&members, node) {
        Some(member) => {
            client
                .etcd_remove_member_by_id(member.id)
                .await
                .map_err(|source| RemoveError::RemoveMember {
                    node: hostname.clone(),
                    source,
                })?;
            RemovalOutcome::MemberRemoved {
                member_id: member.id,
                via: via.hostname.clone(),
            }
        }
        None => RemovalOutcome::Unreachable,
    })
}

/// Waits until no remaining control plane lists the node, then for etcd healthy.
async fn settle(
    node: &ClusterNode,
    remaining: &[ClusterNode],
    others: &[(ClusterNode, TalosClient)],
    credentials: &ClientCredentials,
    options: &RemovalOptions,
) -> Result<(), RemoveError> {
    let settle_err = |source| RemoveError::Etcd {
        node: node.hostname.clone(),
        source,
    };
    if let Some((cp, client)) = others.first() {
        let name = NodeName {
            ip: cp.ip,
            hostname: Some(cp.hostname.clone()),
        };
        retry_until(
            &name,
            "without the removed etcd member",
            options.etcd_timeout,
            options.backoff,
            || async {
                let members = client.etcd_member_list().await?;
                match member_of(&members, node) {
                    None => Ok(()),
                    Some(m) => Err(TalosError::NotReady {
                        node: name.clone(),
                        rpc: "EtcdMemberList",
                        message: format!("still lists member {} ({:x})", m.hostname, m.id),
                    }),
                }
            },
        )
        .await
        .map_err(|e| settle_err(EtcdSettle::StillMember(e)))?;
    }
    // Not wait_etcd_healthy: another control plane removed in the same
    // apply is still a member until its removal ends (or for good, when it
    // fails), and is in no list of ours.
    wait_etcd_settled(
        remaining,
        credentials,
        options.etcd_timeout,
        options.backoff,
    )
    .await
    .map_err(|e| settle_err(EtcdSettle::Unhealthy(e)))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removing_the_last_control_plane_is_refused() {
        let err = check_removal(&["cp-1"], &["cp-1", "w-1"]).unwrap_err();
        assert_eq!(
            err,
            RemovalRefused::LastControlPlane {
                removing: vec!["cp-1".into()]
            }
        );
        insta::assert_snapshot!(err.to_string(), @"refusing to remove cp-1: no control plane would remain, and etcd with all of the cluster's data would be lost; keep at least one control plane (to delete the whole cluster, use `talosprov destroy`)");
        assert!(check_removal(&["cp-1", "cp-2"], &["cp-1", "cp-2"]).is_err());
    }

    #[test]
    fn an_even_number_of_remaining_control_planes_is_a_warning() {
        let warnings = check_removal(&["cp-1", "cp-2", "cp-3"], &["cp-3"]).unwrap();
        assert_eq!(
            warnings,
            [RemovalWarning::EvenControlPlanes { remaining: 2 }]
        );
        insta::assert_snapshot!(warnings[0].to_string(), @"2 control planes will remain: etcd needs a majority (2), so an even number tolerates no more failures than 1 control plane; keep an odd number");
        assert_eq!(
            check_removal(&["cp-1", "cp-2", "cp-3", "cp-4"], &["cp-4"]).unwrap(),
            []
        );
        assert_eq!(check_removal(&["cp-1"], &["w-1"]).unwrap(), []);
    }

    #[test]
    fn the_member_is_found_by_hostname_or_peer_address() {
        let node = ClusterNode {
            hostname: "cp-3".into(),
            ip: "10.0.0.3".parse().unwrap(),
            role: talosprov_base::role::Role::Controlplane,
        };
        let member = |id, host: &str, ip: &str| EtcdMember {
            id,
            hostname: host.into(),
            peer_urls: vec![format!("https://{ip}:2380")],
            client_urls: Vec::new(),
            is_learner: false,
        };
        let by_ip = [
            member(1, "cp-1", "10.0.0.1"),
            member(3, "talos-x", "10.0.0.3"),
        ];
        assert_eq!(member_of(&by_ip, &node).map(|m| m.id), Some(3));
        let by_name = [member(7, "cp-3", "10.9.9.9")];
        assert_eq!(member_of(&by_name, &node).map(|m| m.id), Some(7));
        assert!(member_of(&by_ip[..1], &node).is_none());
    }
}
