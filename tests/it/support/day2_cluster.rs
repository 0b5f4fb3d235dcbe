//! A running simulated cluster for the day-two tests: control planes and workers
//! configured through the Talos client, bootstrapped, with every control plane an
//! etcd member, on the loopback addresses a test chooses.

use std::net::IpAddr;
use std::time::Duration;

use talosprov_base::role::Role;
use talosprov_engine::health::cluster::ClusterNode;
use talosprov_sim::Simulator;
use talosprov_sim::state::SimOptions;
use talosprov_talos::types::ApplyOptions;
use talosprov_talos::wait::{bootstrap_when_ready, wait_etcd_ready, wait_maintenance, wait_secure};

use super::talos::{FAST, WAIT};
use super::talos_pki::ClusterPki;

/// The simulator, the cluster's secrets and its nodes.
pub struct TestCluster {
    pub sim: Simulator,
    pub pki: ClusterPki,
    pub nodes: Vec<ClusterNode>,
}

impl TestCluster {
    /// Starts `control_planes` control planes `cp-1..` and `workers` workers `w-1..`
    /// on `<prefix>.1`, `<prefix>.2`, ... (e.g. prefix `127.78.1`), at Talos `version`,
    /// and bootstraps etcd on `cp-1`.
    pub async fn start(
        prefix: &str,
        control_planes: usize,
        workers: usize,
        version: &str,
    ) -> TestCluster {
        Self::start_from(prefix, 1, control_planes, workers, version).await
    }

    /// As [`TestCluster::start`], with the first node at `<prefix>.<first>`.
    pub async fn start_from(
        prefix: &str,
        first: usize,
        control_planes: usize,
        workers: usize,
        version: &str,
    ) -> TestCluster {
        let mut nodes = Vec::new();
        for i in 0..control_planes + workers {
            let ip: IpAddr = format!("{prefix}.{}", first + i).parse().unwrap();
            let (hostname, role) = if i < control_planes {
                (format!("cp-{}", i + 1), Role::Controlplane)
            } else {
                (format!("w-{}", i + 1 - control_planes), Role::Worker)
            };
            nodes.push(ClusterNode { hostname, ip, role });
        }
        let ips: Vec<IpAddr> = nodes.iter().map(|n| n.ip).collect();
        let options = SimOptions {
            talos_version: version.to_string(),
            reboot_delay: Duration::from_millis(150),
            ..SimOptions::default()
        };
        let sim = Simulator::start(&ips, options).await.unwrap();
        let pki = ClusterPki::new(prefix);
        let endpoint = nodes[0].ip;
        for node in &nodes {
            let client = wait_maintenance(node.ip, Some(&node.hostname), WAIT, FAST)
                .await
                .unwrap();
            let config = pki.machine_config(node.role.as_str(), &node.hostname, endpoint);
            client
                .apply_configuration(config.as_bytes(), &ApplyOptions::default())
                .await
                .unwrap();
        }
        let mut first = None;
        for node in &nodes {
            let client = wait_secure(node.ip, Some(&node.hostname), &pki.admin, WAIT, FAST)
                .await
                .unwrap();
            if node.role == Role::Controlplane {
                wait_etcd_ready(&client, WAIT, FAST).await.unwrap();
                first.get_or_insert(client);
            }
        }
        bootstrap_when_ready(&first.unwrap(), WAIT, FAST)
            .await
            .unwrap();
        TestCluster { sim, pki, nodes }
    }

    /// The node with this hostname.
    pub fn node(&self, hostname: &str) -> &ClusterNode {
        self.nodes.iter().find(|n| n.hostname == hostname).unwrap()
    }

    /// The hostname of the node at `ip`.
    pub fn hostname_of(&self, ip: IpAddr) -> String {
        self.nodes
            .iter()
            .find(|n| n.ip == ip)
            .map(|n| n.hostname.clone())
            .unwrap()
    }
}

/// A snapshot policy that archives into `dir`, sealed to a new age identity
/// (returned, to open the archives), for cluster `lab`.
pub fn archive_into(
    dir: &std::path::Path,
) -> (
    talosprov_engine::apply::upgrade::snapshot::SnapshotPolicy,
    age::x25519::Identity,
) {
    let identity = age::x25519::Identity::generate();
    let archiver = talosprov_engine::backups::Archiver::from_parts(
        talosprov_base::backup::Location::Folder(dir.to_path_buf()),
        None,
        talosprov_backup::keys::Keys::age(vec![identity.to_public()], Vec::new()),
        talosprov_engine::backups::ArchivedCluster {
            name: "lab".to_owned(),
            lineage: uuid::Uuid::nil(),
            etcd_ca_sha256: "00".repeat(32),
            kubernetes_version: "v1.36.2".to_owned(),
            kubeconfig: None,
            access: talosprov_backup::destination::S3Access::default(),
        },
    )
    .expect("an archiver into the folder");
    (
        talosprov_engine::apply::upgrade::snapshot::SnapshotPolicy::Archive(std::sync::Arc::new(
            archiver,
        )),
        identity,
    )
}

/// The manifests of the archives in `dir` (each archive present beside its
/// manifest), by archive name.
pub fn archived(dir: &std::path::Path) -> Vec<(String, serde_json::Value)> {
    let mut out: Vec<(String, serde_json::Value)> = std::fs::read_dir(dir)
        .map(|d| {
            d.map(|e| e.expect("entry").path())
                .filter(|p| p.to_string_lossy().ends_with(".json"))
                .map(|p| {
                    let archive = p.to_string_lossy().replace(".json", ".snapshot.age");
                    assert!(std::path::Path::new(&archive).exists(), "{archive}");
                    let text = std::fs::read_to_string(&p).expect("read the manifest");
                    let name = std::path::Path::new(&archive)
                        .file_name()
                        .expect("name")
                        .to_string_lossy()
                        .into_owned();
                    (name, serde_json::from_str(&text).expect("JSON"))
                })
                .collect()
        })
        .unwrap_or_default();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}
