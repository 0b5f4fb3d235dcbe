//! The result of a health run: each check with pass, fail or skipped and the reason,
//! and its plain-text form (one line per check, failures named at the end).

use std::fmt;

/// How a check came out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckStatus {
    /// The check held.
    Pass,
    /// The check did not hold; the reason says where.
    Fail,
    /// The check does not apply to this cluster; the reason says why.
    Skipped,
}

impl fmt::Display for CheckStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CheckStatus::Pass => "OK",
            CheckStatus::Fail => "FAIL",
            CheckStatus::Skipped => "SKIP",
        })
    }
}

/// One check and how it came out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// Which check.
    pub name: CheckName,
    /// Pass, fail or skipped.
    pub status: CheckStatus,
    /// What was seen: for a failure, each node and what was wrong with it.
    pub reason: String,
}

/// Every check of one run, in the order `talosctl health` runs them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HealthReport {
    /// Each check with its status and the nodes it failed on, in run order.
    pub checks: Vec<Check>,
}

impl HealthReport {
    /// True when no check failed (skipped checks do not count against health).
    pub fn is_healthy(&self) -> bool {
        self.checks.iter().all(|c| c.status != CheckStatus::Fail)
    }

    /// The failed checks.
    pub fn failing(&self) -> impl Iterator<Item = &Check> {
        self.checks.iter().filter(|c| c.status == CheckStatus::Fail)
    }

    /// The names of the failed checks, joined with `, `.
    pub fn failing_names(&self) -> String {
        self.failing()
            .map(|c| c.name.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// One line per check: `[ OK ] etcd to be healthy: ...`; failure reasons that
    /// list several nodes go on indented lines below.
    pub fn render(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for check in &self.checks {
            let mark = format!("[{:^4}]", check.status.to_string());
            let mut reason = check.reason.lines();
            let first = reason.next().unwrap_or_default();
            lines.push(format!("{mark} {}: {first}", check.name));
            for more in reason {
                lines.push(format!("       {more}"));
            }
        }
        lines
    }
}

/// The checks, in the order they run. Names follow `talosctl health`'s wording.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CheckName {
    /// ServiceList on every control plane shows `etcd` Running and healthy.
    EtcdHealthy,
    /// EtcdMemberList gives the same ids, hostnames and learner flags on every
    /// control plane.
    EtcdConsistent,
    /// Every etcd member's peer URLs point at a control plane's address.
    EtcdMembersAreControlPlanes,
    /// Version answers on every node in secure mode (mutual TLS).
    ApidReady,
    /// Every node reports the expected Talos version.
    TalosVersion,
    /// The CAs in the state's secrets and the client certificates of its talosconfig and
    /// kubeconfig have not expired; the reason gives each expiry date, and names a CA that
    /// expires within a year.
    Certificates,
    /// ServiceList on every node shows `apid` Running and healthy.
    ApidHealthy,
    /// ServiceList on every node shows `kubelet` Running and healthy.
    KubeletHealthy,
    /// Every Kubernetes node reports Ready (needs a CNI).
    KubernetesNodesReady,
    /// CoreDNS (`k8s-app=kube-dns`) reports ready (needs a CNI).
    CorednsReady,
    /// `nvidia.com/gpu` is allocatable on every node with an NVIDIA device (when
    /// a GPU add-on is declared).
    GpuAllocatable,
}

impl fmt::Display for CheckName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CheckName::EtcdHealthy => "etcd to be healthy",
            CheckName::EtcdConsistent => "etcd members to be consistent across nodes",
            CheckName::EtcdMembersAreControlPlanes => "etcd members to be control plane nodes",
            CheckName::ApidReady => "apid to be ready",
            CheckName::TalosVersion => "all nodes to run the expected Talos version",
            CheckName::Certificates => "the cluster's certificates to be valid",
            CheckName::ApidHealthy => "apid to be healthy",
            CheckName::KubeletHealthy => "kubelet to be healthy",
            CheckName::KubernetesNodesReady => "all k8s nodes to report ready",
            CheckName::CorednsReady => "coredns to report ready",
            CheckName::GpuAllocatable => "GPU nodes to have nvidia.com/gpu allocatable",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skipped_checks_do_not_make_a_cluster_unhealthy() {
        let report = HealthReport {
            checks: vec![
                Check {
                    name: CheckName::EtcdHealthy,
                    status: CheckStatus::Pass,
                    reason: "1 control plane".into(),
                },
                Check {
                    name: CheckName::KubernetesNodesReady,
                    status: CheckStatus::Skipped,
                    reason: "CNI is none".into(),
                },
            ],
        };
        assert!(report.is_healthy());
        assert_eq!(report.failing_names(), "");
    }

    #[test]
    fn rendering_puts_each_failing_node_on_its_own_line() {
        let report = HealthReport {
            checks: vec![Check {
                name: CheckName::ApidReady,
                status: CheckStatus::Fail,
                reason: "1 of 2 nodes do not answer\ncp-2 (10.0.0.2): refused".into(),
            }],
        };
        assert_eq!(
            report.render(),
            [
                "[FAIL] apid to be ready: 1 of 2 nodes do not answer",
                "       cp-2 (10.0.0.2): refused"
            ]
        );
        assert_eq!(report.failing_names(), "apid to be ready");
    }
}
