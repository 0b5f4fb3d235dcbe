//! Judging the nodes' answers (pure): each check of `talosctl health`'s
//! `DefaultClusterChecks` that applies to us, from Version, ServiceList and
//! EtcdMemberList answers (Talos `pkg/cluster/check/{default,service,etcd,apid}.go`).

use std::collections::BTreeSet;

use super::cluster::{ClusterNode, Cni};
use super::report::{Check, CheckName, CheckStatus, HealthReport};
use talosprov_talos::types::{EtcdMember, NodeVersion, ServiceStatus};

/// What the cluster should look like.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Expectations {
    /// The Talos version every node should report, e.g. `v1.13.8`.
    pub talos_version: String,
    /// The cluster's CNI; `None` when unknown (no machine config recorded yet).
    pub cni: Option<Cni>,
}

/// What one node answered. Errors are the client's words, one line each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeAnswers {
    /// The node asked.
    pub node: ClusterNode,
    /// The Version answer.
    pub version: Result<NodeVersion, String>,
    /// The ServiceList answer.
    pub services: Result<Vec<ServiceStatus>, String>,
    /// The EtcdMemberList answer; `None` on workers (not asked).
    pub etcd_members: Option<Result<Vec<EtcdMember>, String>>,
}

/// Every check, in order: the etcd checks, apid and versions, services, then the
/// Kubernetes checks, which are skipped (with the reason) when they cannot apply.
pub fn judge(answers: &[NodeAnswers], expect: &Expectations) -> HealthReport {
    let mut report = judge_etcd(answers);
    report.checks.push(apid_ready(answers));
    report
        .checks
        .push(talos_version(answers, &expect.talos_version));
    report
        .checks
        .push(service_healthy(answers, CheckName::ApidHealthy, "apid"));
    report.checks.push(service_healthy(
        answers,
        CheckName::KubeletHealthy,
        "kubelet",
    ));
    for name in [CheckName::KubernetesNodesReady, CheckName::CorednsReady] {
        report
            .checks
            .push(kubernetes_skipped(name, expect.cni.as_ref()));
    }
    report
}

/// The checks of one node after it rebooted: it answers in secure mode at
/// `talos_version`, and apid and kubelet are Running and healthy.
pub fn judge_node(answer: &NodeAnswers, talos_version: &str) -> HealthReport {
    let one = std::slice::from_ref(answer);
    HealthReport {
        checks: vec![
            apid_ready(one),
            self::talos_version(one, talos_version),
            service_healthy(one, CheckName::ApidHealthy, "apid"),
            service_healthy(one, CheckName::KubeletHealthy, "kubelet"),
        ],
    }
}

/// The etcd checks after one control plane left, while others of the same
/// apply may still be leaving: etcd Running and healthy on each control plane
/// of `answers`, and their member lists agreeing. Not "every member is a
/// control plane": a node removed beside this one is still a member until
/// its own removal ends, or for good when that removal fails. Workers in
/// `answers` are ignored.
pub fn judge_etcd_after_removal(answers: &[NodeAnswers]) -> HealthReport {
    let control_planes: Vec<&NodeAnswers> = answers
        .iter()
        .filter(|a| a.node.is_control_plane())
        .collect();
    HealthReport {
        checks: vec![
            etcd_healthy(&control_planes),
            etcd_consistent(&control_planes),
        ],
    }
}

/// The three etcd checks only: the gate before and after a control-plane upgrade
/// or removal. Workers in `answers` are ignored.
pub fn judge_etcd(answers: &[NodeAnswers]) -> HealthReport {
    let control_planes: Vec<&NodeAnswers> = answers
        .iter()
        .filter(|a| a.node.is_control_plane())
        .collect();
    HealthReport {
        checks: vec![
            etcd_healthy(&control_planes),
            etcd_consistent(&control_planes),
            etcd_members_are_control_planes(&control_planes),
        ],
    }
}

fn check(name: CheckName, problems: Vec<String>, total: usize, pass: String) -> Check {
    if problems.is_empty() {
        Check {
            name,
            status: CheckStatus::Pass,
            reason: pass,
        }
    } else {
        let mut reason = format!("failed on {} of {}", problems.len(), plural(total, "node"));
        for p in problems {
            reason.push('\n');
            reason.push_str(&p);
        }
        Check {
            name,
            status: CheckStatus::Fail,
            reason,
        }
    }
}

fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("{n} {word}")
    } else {
        format!("{n} {word}s")
    }
}

/// Why a service is not Running and healthy, or `None` when it is.
fn service_problem(services: &[ServiceStatus], id: &str) -> Option<String> {
    let Some(s) = services.iter().find(|s| s.id == id) else {
        return Some(format!("{id} service is absent"));
    };
    let detail = if s.last_message.is_empty() {
        String::new()
    } else {
        format!(" ({})", s.last_message)
    };
    match (s.state.as_str(), s.healthy) {
        ("Running", Some(true)) => None,
        ("Running", Some(false)) => Some(format!("{id} is Running but not healthy{detail}")),
        ("Running", None) => Some(format!("{id} is Running, health not known yet{detail}")),
        (state, _) => Some(format!("{id} is {state}{detail}")),
    }
}

fn etcd_healthy(control_planes: &[&NodeAnswers]) -> Check {
    let problems = control_planes
        .iter()
        .filter_map(|a| {
            let problem = match &a.services {
                Ok(services) => service_problem(services, "etcd")?,
                Err(e) => e.clone(),
            };
            Some(format!("{}: {problem}", a.node.label()))
        })
        .collect();
    let pass = format!(
        "etcd is Running and healthy on {}",
        plural(control_planes.len(), "control plane")
    );
    check(CheckName::EtcdHealthy, problems, control_planes.len(), pass)
}

/// A member list as compared across nodes: (id, hostname, learner), sorted.
type MemberSet = BTreeSet<(u64, String, bool)>;

fn member_set(members: &[EtcdMember]) -> MemberSet {
    members
        .iter()
        .map(|m| (m.id, m.hostname.clone(), m.is_learner))
        .collect()
}

fn describe_members(set: &MemberSet) -> String {
    let names: Vec<String> = set
        .iter()
        .map(|(_, h, learner)| {
            if *learner {
                format!("{h} (learner)")
            } else {
                h.clone()
            }
        })
        .collect();
    format!("[{}]", names.join(", "))
}

fn etcd_consistent(control_planes: &[&NodeAnswers]) -> Check {
    let mut problems = Vec::new();
    let mut reference: Option<(&NodeAnswers, MemberSet)> = None;
    for a in control_planes {
        match &a.etcd_members {
            Some(Ok(members)) => {
                let set = member_set(members);
                match &reference {
                    None => reference = Some((a, set)),
                    Some((first, expected)) if *expected != set => problems.push(format!(
                        "{}: sees {} but {} sees {}",
                        a.node.label(),
                        describe_members(&set),
                        first.node.hostname,
                        describe_members(expected)
                    )),
                    Some(_) => {}
                }
            }
            Some(Err(e)) => problems.push(format!("{}: {e}", a.node.label())),
            None => problems.push(format!("{}: member list not asked", a.node.label())),
        }
    }
    let pass = match &reference {
        Some((_, set)) => format!(
            "{} on every control plane: {}",
            plural(set.len(), "member"),
            describe_members(set)
        ),
        None => "no control plane".to_string(),
    };
    // A control plane absent from the list it answered is not a member at all.
    for a in control_planes {
        if let Some(Ok(members)) = &a.etcd_members
            && !members.iter().any(|m| is_member(m, &a.node))
        {
            problems.push(format!("{}: is not an etcd member", a.node.label()));
        }
    }
    if reference.is_none() && problems.is_empty() {
        problems.push("no control plane answered EtcdMemberList".to_string());
    }
    check(
        CheckName::EtcdConsistent,
        problems,
        control_planes.len(),
        pass,
    )
}

/// Whether `member` is `node`: the same hostname, or a peer URL on its address.
pub fn is_member(member: &EtcdMember, node: &ClusterNode) -> bool {
    let ip = node.ip.to_string();
    member.hostname == node.hostname
        || member
            .peer_urls
            .iter()
            .any(|u| url_host(u).is_some_and(|h| h == ip))
}

/// The host of a URL such as `https://10.0.0.5:2380`.
fn url_host(raw: &str) -> Option<String> {
    let url = url::Url::parse(raw).ok()?;
    let host = url.host_str()?;
    Some(
        host.trim_start_matches('[')
            .trim_end_matches(']')
            .to_string(),
    )
}

fn etcd_members_are_control_planes(control_planes: &[&NodeAnswers]) -> Check {
    let addresses: BTreeSet<String> = control_planes
        .iter()
        .map(|a| a.node.ip.to_string())
        .collect();
    let members = control_planes.iter().find_map(|a| match &a.etcd_members {
        Some(Ok(m)) => Some(m),
        _ => None,
    });
    let Some(members) = members else {
        return Check {
            name: CheckName::EtcdMembersAreControlPlanes,
            status: CheckStatus::Fail,
            reason: "no control plane answered EtcdMemberList".to_string(),
        };
    };
    let problems: Vec<String> = members
        .iter()
        .flat_map(|m| {
            m.peer_urls
                .iter()
                .filter(|u| url_host(u).is_none_or(|h| !addresses.contains(&h)))
                .map(move |u| {
                    format!(
                        "member {} ({:x}): peer URL {u} is not a control plane's address",
                        m.hostname, m.id
                    )
                })
        })
        .collect();
    let pass = format!(
        "every member's peer URL is a control plane's address ({})",
        plural(members.len(), "member")
    );
    check(
        CheckName::EtcdMembersAreControlPlanes,
        problems,
        members.len(),
        pass,
    )
}

fn apid_ready(answers: &[NodeAnswers]) -> Check {
    let problems = answers
        .iter()
        .filter_map(|a| {
            a.version
                .as_ref()
                .err()
                .map(|e| format!("{}: {e}", a.node.label()))
        })
        .collect();
    let pass = format!(
        "Version answered in secure mode on {}",
        plural(answers.len(), "node")
    );
    check(CheckName::ApidReady, problems, answers.len(), pass)
}

fn talos_version(answers: &[NodeAnswers], expected: &str) -> Check {
    let problems = answers
        .iter()
        .filter_map(|a| match &a.version {
            Ok(v) if v.tag == expected => None,
            Ok(v) => Some(format!(
                "{}: runs {}, expected {expected}",
                a.node.label(),
                v.tag
            )),
            Err(_) => Some(format!(
                "{}: did not answer Version, expected {expected}",
                a.node.label()
            )),
        })
        .collect();
    let pass = format!("{} on {}", expected, plural(answers.len(), "node"));
    check(CheckName::TalosVersion, problems, answers.len(), pass)
}

fn service_healthy(answers: &[NodeAnswers], name: CheckName, id: &str) -> Check {
    let problems = answers
        .iter()
        .filter_map(|a| {
            let problem = match &a.services {
                Ok(services) => service_problem(services, id)?,
                Err(e) => e.clone(),
            };
            Some(format!("{}: {problem}", a.node.label()))
        })
        .collect();
    let pass = format!(
        "{id} is Running and healthy on {}",
        plural(answers.len(), "node")
    );
    check(name, problems, answers.len(), pass)
}

fn kubernetes_skipped(name: CheckName, cni: Option<&Cni>) -> Check {
    let reason = match cni {
        Some(Cni::None) => {
            "the cluster's CNI is none: Kubernetes nodes stay NotReady until a CNI is deployed (talosctl health skips this check too)"
                .to_string()
        }
        _ => "needs the Kubernetes API, which talosprov health does not query; use `kubectl get nodes` and `kubectl -n kube-system get pods`"
            .to_string(),
    };
    Check {
        name,
        status: CheckStatus::Skipped,
        reason,
    }
}

#[cfg(test)]
#[path = "judge_tests.rs"]
mod tests;
