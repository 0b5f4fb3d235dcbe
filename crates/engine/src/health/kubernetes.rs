//! The Kubernetes checks (pure): every node of the topology registered and Ready,
//! matched by its `InternalIP`; and `nvidia.com/gpu` allocatable on the nodes with an
//! NVIDIA device when a GPU add-on is declared.

use std::net::IpAddr;

use talosprov_base::kube_node::KubeNode;

use super::cluster::ClusterNode;
use super::report::{Check, CheckName, CheckStatus};

/// The checks for `answer` (the API's nodes, or why it did not answer): all
/// nodes Ready; then, when `gpu_nodes` is not empty, the GPU check on them.
pub fn judge_kubernetes(
    nodes: &[ClusterNode],
    gpu_nodes: &[IpAddr],
    answer: &Result<Vec<KubeNode>, String>,
) -> Vec<Check> {
    let mut out = Vec::new();
    let found = match answer {
        Ok(found) => found,
        Err(e) => {
            out.push(fail(
                CheckName::KubernetesNodesReady,
                format!("the Kubernetes API: {e}"),
            ));
            if !gpu_nodes.is_empty() {
                out.push(fail(
                    CheckName::GpuAllocatable,
                    format!("the Kubernetes API: {e}"),
                ));
            }
            return out;
        }
    };
    let of = |n: &ClusterNode| found.iter().find(|k| k.internal_ip == Some(n.ip));
    let problems: Vec<String> = nodes
        .iter()
        .filter_map(|n| match of(n) {
            None => Some(format!("{}: not registered", n.label())),
            Some(k) if !k.ready => Some(format!(
                "{}: {}NotReady: {}",
                n.label(),
                registered_as(n, k),
                k.reason
            )),
            Some(_) => None,
        })
        .collect();
    out.push(verdict(
        CheckName::KubernetesNodesReady,
        problems,
        nodes.len(),
        format!("{} registered and Ready", count(nodes.len())),
    ));
    if !gpu_nodes.is_empty() {
        let gpu: Vec<&ClusterNode> = nodes.iter().filter(|n| gpu_nodes.contains(&n.ip)).collect();
        let problems: Vec<String> = gpu
            .iter()
            .filter_map(|n| match of(n) {
                Some(k) if k.gpus > 0 => None,
                Some(k) => Some(format!(
                    "{}: {}no nvidia.com/gpu allocatable",
                    n.label(),
                    registered_as(n, k)
                )),
                None => Some(format!("{}: not registered", n.label())),
            })
            .collect();
        out.push(verdict(
            CheckName::GpuAllocatable,
            problems,
            gpu.len(),
            format!("nvidia.com/gpu allocatable on {}", count(gpu.len())),
        ));
    }
    out
}

/// `registered as <name>, ` when the Kubernetes node's name is not the topology's
/// hostname (a machine config that sets another, or a platform that names nodes
/// otherwise), else nothing: the hostname already names it.
fn registered_as(n: &ClusterNode, k: &KubeNode) -> String {
    if k.name == n.hostname {
        String::new()
    } else {
        format!("registered as {}, ", k.name)
    }
}

fn count(n: usize) -> String {
    if n == 1 {
        "1 node".to_owned()
    } else {
        format!("{n} nodes")
    }
}

fn fail(name: CheckName, reason: String) -> Check {
    Check {
        name,
        status: CheckStatus::Fail,
        reason,
    }
}

fn verdict(name: CheckName, problems: Vec<String>, total: usize, pass: String) -> Check {
    if problems.is_empty() {
        return Check {
            name,
            status: CheckStatus::Pass,
            reason: pass,
        };
    }
    let mut reason = format!("failed on {} of {}", problems.len(), count(total));
    for p in problems {
        reason.push('\n');
        reason.push_str(&p);
    }
    fail(name, reason)
}

#[cfg(test)]
mod tests {
    use super::*;
    use talosprov_base::role::Role;

    fn cluster() -> Vec<ClusterNode> {
        ["10.0.0.1", "10.0.0.2", "10.0.0.3"]
            .iter()
            .enumerate()
            .map(|(i, ip)| ClusterNode {
                hostname: format!("n{i}"),
                ip: ip.parse().expect("ip"),
                role: if i == 0 {
                    Role::Controlplane
                } else {
                    Role::Worker
                },
            })
            .collect()
    }

    fn kube(ip: &str, ready: bool, gpus: u64) -> KubeNode {
        KubeNode {
            name: format!("k-{ip}"),
            internal_ip: ip.parse().ok(),
            ready,
            reason: if ready {
                String::new()
            } else {
                "cni plugin not initialized".into()
            },
            control_plane: false,
            kubelet_version: "v1.36.2".into(),
            gpus,
        }
    }

    #[test]
    fn every_node_must_be_registered_and_ready_and_gpus_allocatable() {
        let gpu: Vec<IpAddr> = vec!["10.0.0.3".parse().expect("ip")];
        let all = Ok(vec![
            kube("10.0.0.1", true, 0),
            kube("10.0.0.2", true, 0),
            kube("10.0.0.3", true, 1),
        ]);
        let checks = judge_kubernetes(&cluster(), &gpu, &all);
        assert!(
            checks.iter().all(|c| c.status == CheckStatus::Pass),
            "{checks:?}"
        );
        assert_eq!(checks[1].reason, "nvidia.com/gpu allocatable on 1 node");

        let some = Ok(vec![kube("10.0.0.1", true, 0), kube("10.0.0.3", false, 0)]);
        let checks = judge_kubernetes(&cluster(), &gpu, &some);
        assert_eq!(checks[0].status, CheckStatus::Fail);
        assert_eq!(
            checks[0].reason,
            "failed on 2 of 3 nodes\nn1 (10.0.0.2): not registered\nn2 (10.0.0.3): registered as k-10.0.0.3, NotReady: cni plugin not initialized"
        );
        assert_eq!(
            checks[1].reason,
            "failed on 1 of 1 node\nn2 (10.0.0.3): registered as k-10.0.0.3, no nvidia.com/gpu allocatable"
        );
        // A node registered under its topology hostname is not named twice.
        let named = Ok(vec![KubeNode {
            name: "n2".to_owned(),
            ..kube("10.0.0.3", false, 0)
        }]);
        let checks = judge_kubernetes(&cluster()[2..], &gpu, &named);
        assert_eq!(
            checks[0].reason,
            "failed on 1 of 1 node\nn2 (10.0.0.3): NotReady: cni plugin not initialized"
        );
        assert_eq!(
            checks[1].reason,
            "failed on 1 of 1 node\nn2 (10.0.0.3): no nvidia.com/gpu allocatable"
        );
        assert_eq!(
            judge_kubernetes(&cluster(), &[], &some).len(),
            1,
            "no GPU check without GPU nodes"
        );
    }

    #[test]
    fn an_api_that_does_not_answer_fails_the_checks_with_why() {
        let checks = judge_kubernetes(&cluster(), &[], &Err("connection refused".into()));
        assert_eq!(checks.len(), 1);
        assert_eq!(checks[0].reason, "the Kubernetes API: connection refused");
    }
}
