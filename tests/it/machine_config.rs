//! Base machine configs per role and contract, and the offline checks Talos makes on a final
//! config. Uses the hand-written fixture bundle, so no key is generated here.

use crate::support::fixtures::SECRETS;
use serde_yaml_ng::Value;
use talosprov_base::role::Role;
use talosprov_base::version::Contract;
use talosprov_machine::config::{base_config, machine_config_yaml};
use talosprov_machine::config_parts::BaseConfigInput;
use talosprov_machine::redact::redact_secrets;
use talosprov_machine::secrets::SecretsBundle;
use talosprov_machine::secrets_file::parse_secrets_yaml;
use talosprov_machine::validate::{Severity, check_config};

const VIP: &str = "192.168.1.120";

fn bundle() -> SecretsBundle {
    parse_secrets_yaml(SECRETS).unwrap()
}

fn input<'a>(bundle: &'a SecretsBundle, role: Role, talos: &str) -> BaseConfigInput<'a> {
    BaseConfigInput {
        cluster_name: "homelab".into(),
        endpoint: format!("https://{VIP}:6443"),
        kubernetes_version: None,
        talos_version: talos.parse().unwrap(),
        role,
        secrets: bundle,
        install_disk: Some("/dev/sda".into()),
        install_image: Some(
            "factory.talos.dev/nocloud-installer/ce4c980550dd2ab1b17bbf2b08801c7eb59418eafe8f279833297925d67c7515:v1.13.9"
                .into(),
        ),
        additional_sans: vec![VIP.into()],
        hostname_config: true,
        accepted_cas: &talosprov_machine::rotation::NO_ACCEPTED_CAS,
    }
}

fn at<'a>(doc: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(doc, |v, k| v.get(k))
}

#[test]
fn control_plane_and_worker_differ_as_in_talos() {
    let b = bundle();
    let cp = base_config(&input(&b, Role::Controlplane, "v1.13.9")).unwrap();
    let worker = base_config(&input(&b, Role::Worker, "v1.13.9")).unwrap();
    let (cp, w) = (&cp.documents[0], &worker.documents[0]);
    assert_eq!(at(cp, "machine.type").unwrap(), "controlplane");
    assert_eq!(at(w, "machine.type").unwrap(), "worker");
    // Workers get the CA certificates without keys.
    assert_eq!(at(w, "machine.ca.key").unwrap(), "");
    assert_eq!(at(w, "cluster.ca.key").unwrap(), "");
    assert_eq!(at(w, "machine.ca.crt"), at(cp, "machine.ca.crt"));
    assert_ne!(at(cp, "machine.ca.key").unwrap(), "");
    for section in [
        "cluster.apiServer",
        "cluster.controllerManager",
        "cluster.proxy",
        "cluster.scheduler",
        "cluster.etcd",
        "cluster.aggregatorCA",
        "cluster.serviceAccount",
        "cluster.secretboxEncryptionSecret",
        "machine.nodeLabels",
    ] {
        assert!(at(cp, section).is_some(), "control plane lacks {section}");
        assert!(at(w, section).is_none(), "worker has {section}");
    }
    assert_eq!(at(w, "cluster.clusterName").unwrap(), "homelab");
    assert_eq!(at(w, "cluster.token"), at(cp, "cluster.token"));
}

#[test]
fn vip_is_in_both_cert_san_lists() {
    let b = bundle();
    let cp = base_config(&input(&b, Role::Controlplane, "v1.13.9")).unwrap();
    let doc = &cp.documents[0];
    let vip = Value::Sequence(vec![VIP.into()]);
    assert_eq!(at(doc, "machine.certSANs"), Some(&vip));
    assert_eq!(at(doc, "cluster.apiServer.certSANs"), Some(&vip));
    assert_eq!(
        at(doc, "cluster.controlPlane.endpoint").unwrap(),
        "https://192.168.1.120:6443"
    );
}

#[test]
fn install_disk_and_image_are_written_only_when_given() {
    let b = bundle();
    let with = base_config(&input(&b, Role::Worker, "v1.13.9")).unwrap();
    assert_eq!(
        at(&with.documents[0], "machine.install.disk").unwrap(),
        "/dev/sda"
    );
    assert!(
        at(&with.documents[0], "machine.install.image")
            .unwrap()
            .as_str()
            .unwrap()
            .starts_with("factory.talos.dev/nocloud-installer/")
    );
    let mut bare = input(&b, Role::Worker, "v1.13.9");
    bare.install_disk = None;
    bare.install_image = None;
    let without = base_config(&bare).unwrap();
    let install = at(&without.documents[0], "machine.install").unwrap();
    assert!(install.get("disk").is_none() && install.get("image").is_none());
    assert_eq!(install.get("wipe").unwrap(), &Value::Bool(false));
}

#[test]
fn hostname_config_document_is_emitted_for_1_12_and_later_when_asked() {
    let b = bundle();
    for talos in ["v1.12.0", "v1.13.9"] {
        let cfg = base_config(&input(&b, Role::Worker, talos)).unwrap();
        assert_eq!(cfg.documents.len(), 2);
        assert_eq!(cfg.documents[1].get("kind").unwrap(), "HostnameConfig");
        assert_eq!(cfg.documents[1].get("auto").unwrap(), "stable");
    }
    let mut no_hostname = input(&b, Role::Worker, "v1.13.9");
    no_hostname.hostname_config = false;
    assert_eq!(base_config(&no_hostname).unwrap().documents.len(), 1);
}

#[test]
fn contract_1_12_keeps_the_empty_machine_network() {
    let b = bundle();
    let v112 = base_config(&input(&b, Role::Worker, "v1.12.11")).unwrap();
    let v113 = base_config(&input(&b, Role::Worker, "v1.13.9")).unwrap();
    assert_eq!(v112.contract, Contract::V1_12);
    assert_eq!(v113.contract, Contract::V1_13);
    assert!(at(&v112.documents[0], "machine.network").is_some());
    assert!(at(&v113.documents[0], "machine.network").is_none());
}

#[test]
fn kubernetes_images_follow_the_talos_default_or_the_given_version() {
    let b = bundle();
    let cfg = base_config(&input(&b, Role::Controlplane, "v1.13.9")).unwrap();
    assert_eq!(cfg.kubernetes_version, "1.36.3");
    let doc = &cfg.documents[0];
    assert_eq!(
        at(doc, "machine.kubelet.image").unwrap(),
        "ghcr.io/siderolabs/kubelet:v1.36.3"
    );
    assert_eq!(
        at(doc, "cluster.apiServer.image").unwrap(),
        "registry.k8s.io/kube-apiserver:v1.36.3"
    );
    let mut pinned = input(&b, Role::Controlplane, "v1.12.0");
    pinned.kubernetes_version = Some("v1.35.1".into());
    let cfg = base_config(&pinned).unwrap();
    assert_eq!(
        at(&cfg.documents[0], "cluster.scheduler.image").unwrap(),
        "registry.k8s.io/kube-scheduler:v1.35.1"
    );
}

#[test]
fn talos_version_outside_the_contracts_generates_the_nearest_with_a_warning() {
    let b = bundle();
    let mut i = input(&b, Role::Worker, "v1.15.0");
    i.kubernetes_version = Some("1.38.0".into());
    let cfg = base_config(&i).unwrap();
    assert_eq!(cfg.contract, Contract::V1_14);
    assert_eq!(cfg.warnings.len(), 1);
    assert!(
        cfg.warnings[0].contains("generating the v1.14 config"),
        "{:?}",
        cfg.warnings
    );
}

#[test]
fn endpoint_without_https_is_refused_in_talos_words() {
    let b = bundle();
    let mut i = input(&b, Role::Worker, "v1.13.9");
    i.endpoint = "http://192.168.1.120:6443".into();
    insta::assert_snapshot!(base_config(&i).unwrap_err().to_string());
    i.endpoint = "192.168.1.120".into();
    insta::assert_snapshot!(
        "endpoint_without_scheme",
        base_config(&i).unwrap_err().to_string()
    );
}

#[test]
fn rendered_control_plane_config_with_secrets_redacted() {
    let b = bundle();
    let mut cfg = base_config(&input(&b, Role::Controlplane, "v1.13.9")).unwrap();
    redact_secrets(&mut cfg.documents);
    insta::assert_snapshot!(machine_config_yaml(&cfg.documents));
}

#[test]
fn generated_configs_pass_the_offline_checks() {
    let b = bundle();
    for role in [Role::Controlplane, Role::Worker] {
        let cfg = base_config(&input(&b, role, "v1.13.9")).unwrap();
        assert_eq!(check_config(&cfg.documents), vec![], "{role}");
    }
}

fn problems(documents: &[Value]) -> Vec<String> {
    check_config(documents)
        .into_iter()
        .filter(|p| p.severity == Severity::Error)
        .map(|p| p.to_string())
        .collect()
}

#[test]
fn static_hostname_beside_hostname_config_is_refused_as_talos_refuses_it() {
    let b = bundle();
    let mut cfg = base_config(&input(&b, Role::Worker, "v1.13.9")).unwrap();
    let machine = cfg.documents[0]
        .get_mut("machine")
        .unwrap()
        .as_mapping_mut()
        .unwrap();
    machine.insert(
        "network".into(),
        serde_yaml_ng::from_str("hostname: talos-worker-01").unwrap(),
    );
    assert_eq!(
        problems(&cfg.documents),
        vec![
            "v1alpha1 machine.network.hostname: static hostname is already set in v1alpha1 config"
        ]
    );
}

#[test]
fn broken_configs_report_every_problem() {
    let docs: Vec<Value> = vec![
        serde_yaml_ng::from_str(
            "version: v1alpha1\nmachine:\n  type: wrker\n  install:\n    disk: sda\ncluster:\n  controlPlane:\n    endpoint: http://10.0.0.1:6443\n",
        )
        .unwrap(),
        serde_yaml_ng::from_str("apiVersion: v1alpha1\nkind: HostnameConfig\nauto: stable\nhostname: a\n").unwrap(),
        serde_yaml_ng::from_str("apiVersion: v1alpha1\nkind: HostnameConfig\nauto: stable\n").unwrap(),
    ];
    insta::assert_snapshot!(problems(&docs).join("\n"));
}

#[test]
fn worker_with_a_vip_or_ca_key_is_refused() {
    let b = bundle();
    let mut cfg = base_config(&input(&b, Role::Worker, "v1.13.9")).unwrap();
    let machine = cfg.documents[0]
        .get_mut("machine")
        .unwrap()
        .as_mapping_mut()
        .unwrap();
    machine.insert(
        "network".into(),
        serde_yaml_ng::from_str("interfaces:\n- interface: eth0\n  vip: {ip: 192.168.1.120}\n")
            .unwrap(),
    );
    machine
        .get_mut("ca")
        .unwrap()
        .as_mapping_mut()
        .unwrap()
        .insert("key".into(), "a2V5".into());
    insta::assert_snapshot!(problems(&cfg.documents).join("\n"));
}

/// The `kind` of each document (`v1alpha1` for the legacy one), in order.
fn kinds(docs: &[Value]) -> Vec<String> {
    docs.iter()
        .map(|d| {
            d.get("kind")
                .and_then(Value::as_str)
                .unwrap_or("v1alpha1")
                .to_owned()
        })
        .collect()
}

/// The keys of the mapping at `path`, in order.
fn keys(doc: &Value, path: &str) -> Vec<String> {
    at(doc, path)
        .and_then(Value::as_mapping)
        .map(|m| {
            m.keys()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// The first document of `kind`.
fn document<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    docs.iter()
        .find(|d| d.get("kind").and_then(Value::as_str) == Some(kind))
        .unwrap_or_else(|| panic!("no {kind} document"))
}

// Expectations from Talos v1.14.0-rc.1 (commit 7a84d742b3d5): `generate/{init,worker,
// kubernetes}.go` and the stability golden files `testdata/stability/v1.14/base-*.yaml`,
// written out here by hand.
const V1_14_COMMON: [&str; 15] = [
    "v1alpha1",
    "DiscoveryServiceConfig",
    "DiscoveryIdentityConfig",
    "UnattendedInstallConfig",
    "ResolverConfig",
    "VolumeConfig",
    "FilesystemTrimConfig",
    "SecurityProfileConfig",
    "HostnameConfig",
    "KubeClusterConfig",
    "KubeNodeConfig",
    "KubeletConfig",
    "KubeNetworkConfig",
    "KubeAPIServerCAConfig",
    "KubePrismConfig",
];
const V1_14_CONTROL_PLANE: [&str; 14] = [
    "KubeAggregatorCAConfig",
    "KubeAdmissionControlConfig",
    "KubeAuditPolicyConfig",
    "KubeAuthenticationConfig",
    "KubeAuthorizerConfig",
    "KubeAuthorizerConfig",
    "KubeEtcdEncryptionConfig",
    "KubeServiceAccountConfig",
    "KubeAPIServerConfig",
    "KubeControllerManagerConfig",
    "KubeSchedulerConfig",
    "KubeProxyConfig",
    "KubeFlannelCNIConfig",
    "KubeCoreDNSConfig",
];

#[test]
fn talos_1_14_gets_the_documents_gen_config_writes_in_its_order() {
    let b = bundle();
    let cp = base_config(&input(&b, Role::Controlplane, "v1.14.0")).unwrap();
    let worker = base_config(&input(&b, Role::Worker, "v1.14.0")).unwrap();
    assert_eq!(cp.contract, Contract::V1_14);
    assert!(cp.warnings.is_empty(), "{:?}", cp.warnings);
    assert_eq!(cp.kubernetes_version, "1.37.0");
    let mut expected: Vec<&str> = V1_14_COMMON.to_vec();
    assert_eq!(kinds(&worker.documents), expected);
    expected.extend(V1_14_CONTROL_PLANE);
    assert_eq!(kinds(&cp.documents), expected);

    // The v1alpha1 document keeps the machine's identity, CAs and tokens only.
    let (c, w) = (&cp.documents[0], &worker.documents[0]);
    assert_eq!(
        keys(c, "machine"),
        ["type", "token", "ca", "certSANs", "features"]
    );
    assert_eq!(keys(c, "machine.features"), ["diskQuotaSupport"]);
    assert_eq!(keys(c, "cluster"), ["token", "etcd"]);
    assert_eq!(keys(w, "cluster"), ["token"]);
    assert_eq!(at(w, "machine.ca.key").unwrap(), "");

    // The Kubernetes CA and the keys are PEM text in the new documents.
    let ca = document(&cp.documents, "KubeAPIServerCAConfig");
    assert_eq!(
        at(ca, "issuingCA.cert").unwrap().as_str().unwrap(),
        b.certs.k8s.crt
    );
    let wca = document(&worker.documents, "KubeAPIServerCAConfig");
    assert_eq!(
        wca.get("acceptedCAs").unwrap()[0].as_str().unwrap(),
        b.certs.k8s.crt
    );
    assert!(wca.get("issuingCA").is_none());
    let sa = document(&cp.documents, "KubeServiceAccountConfig");
    assert!(
        at(sa, "issuer.privateKey")
            .unwrap()
            .as_str()
            .unwrap()
            .starts_with("-----BEGIN")
    );
    assert_eq!(
        at(sa, "issuer.issuerURL").unwrap(),
        &input(&b, Role::Controlplane, "v1.14.0").endpoint
    );
    let identity = document(&worker.documents, "DiscoveryIdentityConfig");
    assert_eq!(identity.get("clusterID").unwrap(), b.cluster.id.as_str());

    // The install disk and image go into UnattendedInstallConfig, not machine.install.
    let install = document(&cp.documents, "UnattendedInstallConfig");
    assert_eq!(
        at(install, "provisioning.diskSelector.match").unwrap(),
        "disk.dev_path == \"/dev/sda\""
    );
    assert_eq!(
        at(install, "provisioning.wipe").unwrap(),
        &Value::Bool(false)
    );
    assert!(
        at(install, "installer.image")
            .unwrap()
            .as_str()
            .unwrap()
            .contains("nocloud-installer")
    );
    assert!(at(c, "machine.install").is_none());

    // Control-plane label and taint are written out; the API server carries the extra SANs.
    let node = document(&cp.documents, "KubeNodeConfig");
    assert_eq!(
        keys(node, "labels"),
        [
            "node-role.kubernetes.io/control-plane",
            "node.kubernetes.io/exclude-from-external-load-balancers"
        ]
    );
    assert_eq!(
        at(node, "taints")
            .unwrap()
            .get("node-role.kubernetes.io/control-plane")
            .unwrap(),
        "NoSchedule"
    );
    assert!(
        document(&worker.documents, "KubeNodeConfig")
            .get("labels")
            .is_none()
    );
    let api = document(&cp.documents, "KubeAPIServerConfig");
    assert_eq!(
        api.get("image").unwrap(),
        "registry.k8s.io/kube-apiserver:v1.37.0"
    );
    assert_eq!(api.get("certExtraSANs").unwrap()[0], VIP);
    let text = machine_config_yaml(&cp.documents);
    assert!(
        text.contains("    cert: |\n        -----BEGIN CERTIFICATE-----\n"),
        "{text}"
    );
}

#[test]
fn v1_14_configs_decode_in_their_contract_and_hide_their_secrets() {
    use talosprov_machine::decode::decode_config;
    let b = bundle();
    for role in [Role::Controlplane, Role::Worker] {
        let mut cfg = base_config(&input(&b, role, "v1.14.0")).unwrap();
        let found = decode_config(&cfg.documents, Contract::V1_14);
        assert!(found.is_empty(), "{role}: {found:?}");
        // The v1.13 decoder knows none of the new kinds.
        let old = decode_config(&cfg.documents, Contract::V1_13);
        assert!(
            old.iter().any(|p| p.message.contains("KubeletConfig")),
            "{old:?}"
        );
        redact_secrets(&mut cfg.documents);
        let text = machine_config_yaml(&cfg.documents);
        for secret in [
            b.certs.k8s.key.expose().lines().nth(1).unwrap(),
            b.certs.k8s_aggregator.key.expose().lines().nth(1).unwrap(),
            b.certs.k8s_service_account.expose().lines().nth(1).unwrap(),
            b.cluster.secret.expose().as_str(),
            b.trustd_token.expose().as_str(),
        ] {
            assert!(!text.contains(secret), "{role}: {secret} shown");
        }
        if role == Role::Controlplane {
            let secretbox = match &b.encryption {
                talosprov_machine::secrets::EncryptionSecret::Secretbox(v)
                | talosprov_machine::secrets::EncryptionSecret::AesCbc(v) => v.expose().clone(),
            };
            assert!(!text.contains(&secretbox), "the etcd encryption key shown");
            assert!(text.contains("secret: (sensitive)"), "{text}");
        }
    }
}
