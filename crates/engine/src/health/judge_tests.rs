//! Unit tests of the judging: each check passes on a healthy answer set and names
//! the node and the cause when it fails.

use super::*;
use talosprov_base::role::Role;

fn node(hostname: &str, last: u8, role: Role) -> ClusterNode {
    ClusterNode {
        hostname: hostname.into(),
        ip: format!("10.0.0.{last}").parse().unwrap(),
        role,
    }
}

fn service(id: &str, state: &str, healthy: Option<bool>) -> ServiceStatus {
    ServiceStatus {
        id: id.into(),
        state: state.into(),
        healthy,
        last_message: String::new(),
    }
}

fn member(id: u64, hostname: &str, last: u8) -> EtcdMember {
    EtcdMember {
        id,
        hostname: hostname.into(),
        peer_urls: vec![format!("https://10.0.0.{last}:2380")],
        client_urls: vec![format!("https://10.0.0.{last}:2379")],
        is_learner: false,
    }
}

fn version(tag: &str) -> NodeVersion {
    NodeVersion {
        tag: tag.into(),
        sha: String::new(),
        arch: "amd64".into(),
        platform: "nocloud".into(),
        platform_mode: "cloud".into(),
    }
}

fn members() -> Vec<EtcdMember> {
    vec![member(1, "cp-1", 1), member(2, "cp-2", 2)]
}

fn healthy_cluster() -> Vec<NodeAnswers> {
    let cp = |name: &str, last: u8| NodeAnswers {
        node: node(name, last, Role::Controlplane),
        version: Ok(version("v1.13.8")),
        services: Ok(vec![
            service("apid", "Running", Some(true)),
            service("etcd", "Running", Some(true)),
            service("kubelet", "Running", Some(true)),
        ]),
        etcd_members: Some(Ok(members())),
    };
    vec![
        cp("cp-1", 1),
        cp("cp-2", 2),
        NodeAnswers {
            node: node("w-1", 3, Role::Worker),
            version: Ok(version("v1.13.8")),
            services: Ok(vec![
                service("apid", "Running", Some(true)),
                service("kubelet", "Running", Some(true)),
            ]),
            etcd_members: None,
        },
    ]
}

fn expect() -> Expectations {
    Expectations {
        talos_version: "v1.13.8".into(),
        cni: Some(Cni::None),
    }
}

fn status_of(report: &HealthReport, name: CheckName) -> (CheckStatus, String) {
    let c = report.checks.iter().find(|c| c.name == name).unwrap();
    (c.status, c.reason.clone())
}

#[test]
fn healthy_cluster_passes_and_skips_the_cni_checks_when_the_cni_is_none() {
    let report = judge(&healthy_cluster(), &expect());
    assert!(report.is_healthy(), "{report:#?}");
    let (status, reason) = status_of(&report, CheckName::KubernetesNodesReady);
    assert_eq!(status, CheckStatus::Skipped);
    assert!(reason.contains("CNI is none"), "{reason}");
    assert_eq!(
        status_of(&report, CheckName::EtcdConsistent).1,
        "2 members on every control plane: [cp-1, cp-2]"
    );
}

#[test]
fn etcd_preparing_on_one_control_plane_fails_the_etcd_check_naming_it() {
    let mut answers = healthy_cluster();
    answers[1].services = Ok(vec![service("etcd", "Preparing", None)]);
    let report = judge_etcd(&answers);
    let (status, reason) = status_of(&report, CheckName::EtcdHealthy);
    assert_eq!(status, CheckStatus::Fail);
    assert_eq!(
        reason,
        "failed on 1 of 2 nodes\ncp-2 (10.0.0.2): etcd is Preparing"
    );
    assert_eq!(report.failing_names(), "etcd to be healthy");
}

#[test]
fn member_lists_that_differ_between_control_planes_are_inconsistent() {
    let mut answers = healthy_cluster();
    answers[1].etcd_members = Some(Ok(vec![member(1, "cp-1", 1)]));
    let (status, reason) = status_of(&judge_etcd(&answers), CheckName::EtcdConsistent);
    assert_eq!(status, CheckStatus::Fail);
    assert!(
        reason.contains("cp-2 (10.0.0.2): sees [cp-1] but cp-1 sees [cp-1, cp-2]"),
        "{reason}"
    );
    // A learner flag alone is a difference too.
    let mut learner = members();
    learner[1].is_learner = true;
    answers[1].etcd_members = Some(Ok(learner));
    let (status, _) = status_of(&judge_etcd(&answers), CheckName::EtcdConsistent);
    assert_eq!(status, CheckStatus::Fail);
}

#[test]
fn a_member_outside_the_control_planes_fails_the_membership_check() {
    let mut answers = healthy_cluster();
    let mut list = members();
    list.push(member(9, "w-1", 3));
    for a in answers.iter_mut().filter(|a| a.etcd_members.is_some()) {
        a.etcd_members = Some(Ok(list.clone()));
    }
    let (status, reason) = status_of(
        &judge_etcd(&answers),
        CheckName::EtcdMembersAreControlPlanes,
    );
    assert_eq!(status, CheckStatus::Fail);
    assert!(
        reason.contains("member w-1 (9): peer URL https://10.0.0.3:2380"),
        "{reason}"
    );
}

#[test]
fn after_a_removal_a_node_still_leaving_beside_it_is_no_failure() {
    // cp-1 and cp-2 remain; cp-3, removed in the same apply, is still a
    // member (its removal is under way, or failed).
    let mut answers = healthy_cluster();
    let mut list = members();
    list.push(member(3, "cp-3", 3));
    for a in answers.iter_mut().filter(|a| a.etcd_members.is_some()) {
        a.etcd_members = Some(Ok(list.clone()));
    }
    assert!(!judge_etcd(&answers).is_healthy());
    let settled = judge_etcd_after_removal(&answers);
    assert!(settled.is_healthy(), "{settled:?}");
    // It still waits for etcd itself: not running on a remaining control plane.
    answers[0].services = Ok(vec![service("etcd", "Preparing", None)]);
    let settled = judge_etcd_after_removal(&answers);
    assert_eq!(settled.failing_names(), "etcd to be healthy");
}

#[test]
fn an_unreachable_node_fails_apid_and_version_and_services() {
    let mut answers = healthy_cluster();
    let gone = "unreachable: Connection refused".to_string();
    answers[2].version = Err(gone.clone());
    answers[2].services = Err(gone);
    let report = judge(&answers, &expect());
    assert_eq!(
        report.failing_names(),
        "apid to be ready, all nodes to run the expected Talos version, apid to be healthy, kubelet to be healthy"
    );
    assert!(judge_etcd(&answers).is_healthy());
}

#[test]
fn a_node_on_another_version_fails_the_version_check() {
    let mut answers = healthy_cluster();
    answers[0].version = Ok(version("v1.13.7"));
    let (status, reason) = status_of(&judge(&answers, &expect()), CheckName::TalosVersion);
    assert_eq!(status, CheckStatus::Fail);
    assert!(reason.contains("cp-1 (10.0.0.1): runs v1.13.7, expected v1.13.8"));
}

#[test]
fn kubelet_not_healthy_is_named_with_its_message() {
    let mut answers = healthy_cluster();
    answers[2].services = Ok(vec![
        service("apid", "Running", Some(true)),
        ServiceStatus {
            last_message: "Health check failed: connection refused".into(),
            ..service("kubelet", "Running", Some(false))
        },
    ]);
    let (status, reason) = status_of(&judge(&answers, &expect()), CheckName::KubeletHealthy);
    assert_eq!(status, CheckStatus::Fail);
    assert!(reason.ends_with(
        "w-1 (10.0.0.3): kubelet is Running but not healthy (Health check failed: connection refused)"
    ));
}

#[test]
fn kubernetes_checks_say_why_they_are_skipped_with_a_cni() {
    let flannel = Expectations {
        cni: Some(Cni::Named("flannel".into())),
        ..expect()
    };
    let (status, reason) = status_of(
        &judge(&healthy_cluster(), &flannel),
        CheckName::CorednsReady,
    );
    assert_eq!(status, CheckStatus::Skipped);
    assert!(reason.contains("Kubernetes API"), "{reason}");
}

#[test]
fn a_control_plane_missing_from_the_member_lists_is_inconsistent() {
    let mut answers = healthy_cluster();
    for a in answers.iter_mut().filter(|a| a.etcd_members.is_some()) {
        a.etcd_members = Some(Ok(vec![member(1, "cp-1", 1)]));
    }
    let (status, reason) = status_of(&judge_etcd(&answers), CheckName::EtcdConsistent);
    assert_eq!(status, CheckStatus::Fail);
    assert_eq!(
        reason,
        "failed on 1 of 2 nodes\ncp-2 (10.0.0.2): is not an etcd member"
    );
}
