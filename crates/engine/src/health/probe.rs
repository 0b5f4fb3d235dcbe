//! Asking the nodes (I/O): Version, ServiceList and, on control planes,
//! EtcdMemberList over mutual TLS, all nodes at once, each under a time limit; then
//! the waits that poll until the checks pass or a named deadline passes.

use std::time::Duration;

use futures::future::join_all;
use tokio::time::{Instant, timeout};

use super::cluster::ClusterNode;
use super::judge::{
    Expectations, NodeAnswers, judge, judge_etcd, judge_etcd_after_removal, judge_node,
};
use super::report::HealthReport;
use talosprov_retry::Backoff;
use talosprov_talos::client::TalosClient;
use talosprov_talos::credentials::ClientCredentials;
use talosprov_talos::error::TalosError;

/// How long one node may take to answer one question before it counts as not
/// answering.
const ANSWER_LIMIT: Duration = Duration::from_secs(10);

/// The checks did not pass in time.
#[derive(Debug, thiserror::Error)]
pub enum HealthError {
    /// Some checks still failed at the deadline.
    #[error("{scope} not healthy within {} s: {}", .waited.as_secs(), .report.failing_names())]
    Unhealthy {
        /// `the cluster was` or `etcd was`.
        scope: &'static str,
        /// The deadline, from the start of the wait.
        waited: Duration,
        /// The last run, with each failing node named.
        report: HealthReport,
    },
}

impl HealthError {
    /// The last report seen.
    pub fn report(&self) -> &HealthReport {
        match self {
            HealthError::Unhealthy { report, .. } => report,
        }
    }

    /// The failing checks' reasons, one line per node, for logs and error details.
    pub fn details(&self) -> String {
        let mut lines = Vec::new();
        for check in self.report().failing() {
            lines.push(format!(
                "{}: {}",
                check.name,
                check.reason.replace('\n', "; ")
            ));
        }
        lines.join("\n")
    }
}

/// The client's error in one line, without repeating the node (the report names it).
fn short(node: &ClusterNode, err: &TalosError) -> String {
    match err {
        TalosError::Unreachable { reason, .. } => format!("unreachable: {reason}"),
        other @ TalosError::Credentials { .. }
        | other @ TalosError::ServerCertificate { .. }
        | other @ TalosError::ClientCertificateRejected { .. }
        | other @ TalosError::MaintenanceMode { .. }
        | other @ TalosError::PermissionDenied { .. }
        | other @ TalosError::InvalidConfig { .. }
        | other @ TalosError::NotReady { .. }
        | other @ TalosError::Rpc { .. }
        | other @ TalosError::Kubeconfig { .. }
        | other @ TalosError::UpgradeFailed { .. }
        | other @ TalosError::InMaintenance { .. }
        | other @ TalosError::OtherCluster { .. }
        | other @ TalosError::Deadline { .. } => {
            let text = other.to_string();
            match other.node() {
                Some(name) => text.replacen(&format!("node {name} "), "", 1),
                None => text,
            }
            .replacen(&format!("node {} ", node.ip), "", 1)
        }
    }
}

async fn limited<T>(
    node: &ClusterNode,
    call: impl Future<Output = Result<T, TalosError>>,
) -> Result<T, String> {
    match timeout(ANSWER_LIMIT, call).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(short(node, &e)),
        Err(_) => Err(format!("no answer within {} s", ANSWER_LIMIT.as_secs())),
    }
}

async fn ask(node: &ClusterNode, credentials: &ClientCredentials) -> NodeAnswers {
    let client = limited(node, TalosClient::connect_secure(node.ip, credentials)).await;
    let client = match client {
        Ok(c) => c.with_hostname(node.hostname.clone()),
        Err(e) => {
            return NodeAnswers {
                node: node.clone(),
                version: Err(e.clone()),
                services: Err(e.clone()),
                etcd_members: node.is_control_plane().then_some(Err(e)),
            };
        }
    };
    let version = limited(node, client.version()).await;
    let services = limited(node, client.service_list()).await;
    let etcd_members = if node.is_control_plane() {
        Some(limited(node, client.etcd_member_list()).await)
    } else {
        None
    };
    NodeAnswers {
        node: node.clone(),
        version,
        services,
        etcd_members,
    }
}

/// Asks every node at once; one answer set per node, in the order given.
pub async fn observe(nodes: &[ClusterNode], credentials: &ClientCredentials) -> Vec<NodeAnswers> {
    join_all(nodes.iter().map(|n| ask(n, credentials))).await
}

/// One run of every check over `nodes`.
pub async fn run_checks(
    nodes: &[ClusterNode],
    credentials: &ClientCredentials,
    expect: &Expectations,
) -> HealthReport {
    judge(&observe(nodes, credentials).await, expect)
}

// A plain closure returning a future, not an async closure: the futures of async
// closures are not provably Send, and the engine runs these waits on spawned tasks.
async fn poll<F, Fut>(
    scope: &'static str,
    wait: Duration,
    backoff: Backoff,
    mut run: F,
) -> Result<HealthReport, HealthError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = HealthReport>,
{
    let deadline = Instant::now() + wait;
    let mut attempt = 0u32;
    loop {
        let report = run().await;
        if report.is_healthy() {
            return Ok(report);
        }
        let pause = backoff.delay(attempt);
        attempt += 1;
        if Instant::now() + pause >= deadline {
            tracing::debug!(scope, failing = %report.failing_names(), "deadline reached");
            return Err(HealthError::Unhealthy {
                scope,
                waited: wait,
                report,
            });
        }
        tracing::debug!(scope, failing = %report.failing_names(), "not healthy yet");
        tokio::time::sleep(pause).await;
    }
}

/// Runs every check until all pass or `wait` passes (zero: one run).
///
/// Errors: [`HealthError::Unhealthy`] ("the cluster was not healthy within N s")
/// with the last report.
pub async fn wait_healthy(
    nodes: &[ClusterNode],
    credentials: &ClientCredentials,
    expect: &Expectations,
    wait: Duration,
    backoff: Backoff,
) -> Result<HealthReport, HealthError> {
    poll("the cluster was", wait, backoff, || {
        run_checks(nodes, credentials, expect)
    })
    .await
}

/// The etcd gate: asks the control planes among `nodes` until etcd is Running and
/// healthy on each, their member lists agree, and every member is a control plane;
/// or `wait` passes.
///
/// Errors: [`HealthError::Unhealthy`] ("etcd was not healthy within N s").
pub async fn wait_etcd_healthy(
    nodes: &[ClusterNode],
    credentials: &ClientCredentials,
    wait: Duration,
    backoff: Backoff,
) -> Result<HealthReport, HealthError> {
    let control_planes: Vec<ClusterNode> = nodes
        .iter()
        .filter(|n| n.is_control_plane())
        .cloned()
        .collect();
    let control_planes = &control_planes;
    poll("etcd was", wait, backoff, || async move {
        judge_etcd(&observe(control_planes, credentials).await)
    })
    .await
}

/// The etcd gate after a control-plane removal ([`judge_etcd_after_removal`]):
/// asks the control planes among `nodes` until etcd is Running and healthy on
/// each and their member lists agree, or `wait` passes. Another node removed
/// in the same apply may still be a member: it is not waited for.
///
/// Errors: [`HealthError::Unhealthy`] ("etcd was not healthy within N s").
pub async fn wait_etcd_settled(
    nodes: &[ClusterNode],
    credentials: &ClientCredentials,
    wait: Duration,
    backoff: Backoff,
) -> Result<HealthReport, HealthError> {
    let control_planes: Vec<ClusterNode> = nodes
        .iter()
        .filter(|n| n.is_control_plane())
        .cloned()
        .collect();
    let control_planes = &control_planes;
    poll("etcd was", wait, backoff, || async move {
        judge_etcd_after_removal(&observe(control_planes, credentials).await)
    })
    .await
}

/// Waits until one node answers in secure mode at `talos_version` with apid and
/// kubelet Running and healthy, or `wait` passes.
///
/// Errors: [`HealthError::Unhealthy`] ("the node was not healthy within N s").
pub async fn wait_node_healthy(
    node: &ClusterNode,
    credentials: &ClientCredentials,
    talos_version: &str,
    wait: Duration,
    backoff: Backoff,
) -> Result<HealthReport, HealthError> {
    poll("the node was", wait, backoff, || async move {
        judge_node(&ask(node, credentials).await, talos_version)
    })
    .await
}
