//! The whole life of a three-node cluster (two control planes, one worker) driven by
//! the Talos client against the simulator: apply in maintenance mode, the install
//! reboot, secure mode, bootstrap (twice), kubeconfig, etcd members, upgrade through
//! both paths, and reset.

use crate::support::talos::{FAST, WAIT, ip, sim_options};
use crate::support::talos_pki;

use base64::Engine as _;
use std::time::Duration;

use talos_pki::ClusterPki;
use talosprov_sim::Simulator;
use talosprov_sim::state::{Phase, SimOptions};
use talosprov_talos::client::TalosClient;
use talosprov_talos::error::TalosError;
use talosprov_talos::types::{
    ApplyMode, ApplyOptions, BootstrapOutcome, ResetOptions, UpgradeOptions, UpgradePath,
};
use talosprov_talos::wait::{bootstrap_when_ready, wait_etcd_ready, wait_maintenance, wait_secure};

#[tokio::test]
async fn three_node_cluster_from_maintenance_mode_to_reset() {
    let (cp1, cp2, w1) = (ip("127.77.1.1"), ip("127.77.1.2"), ip("127.77.1.3"));
    let options = sim_options(Duration::from_millis(300));
    let sim = Simulator::start(&[cp1, cp2, w1], options).await.unwrap();
    let pki = ClusterPki::new("lifecycle");

    // Maintenance mode: reachable without credentials, Version works, secure-only RPCs
    // are refused as "still in maintenance mode".
    let maintenance = wait_maintenance(cp1, Some("cp-1"), WAIT, FAST)
        .await
        .unwrap();
    let version = maintenance.version().await.unwrap();
    assert_eq!(
        (version.tag.as_str(), version.platform.as_str()),
        ("v1.13.8", "nocloud")
    );
    let refused = maintenance.bootstrap().await.unwrap_err();
    assert!(
        matches!(
            refused,
            TalosError::MaintenanceMode {
                code: tonic::Code::PermissionDenied,
                ..
            }
        ),
        "{refused:?}"
    );

    // Apply every config in maintenance mode; the node answers NoReboot, then installs
    // and reboots by itself.
    for (addr, role, hostname) in [
        (cp1, "controlplane", "cp-1"),
        (cp2, "controlplane", "cp-2"),
        (w1, "worker", "w-1"),
    ] {
        let client = wait_maintenance(addr, Some(hostname), WAIT, FAST)
            .await
            .unwrap();
        let config = pki.machine_config(role, hostname, cp1);
        let outcome = client
            .apply_configuration(config.as_bytes(), &ApplyOptions::default())
            .await
            .unwrap();
        assert_eq!(outcome.mode, ApplyMode::NoReboot);
    }

    // Secure mode after the reboot, with the admin talosconfig.
    let c1 = wait_secure(cp1, Some("cp-1"), &pki.admin, WAIT, FAST)
        .await
        .unwrap();
    let c2 = wait_secure(cp2, Some("cp-2"), &pki.admin, WAIT, FAST)
        .await
        .unwrap();
    let worker = wait_secure(w1, Some("w-1"), &pki.admin, WAIT, FAST)
        .await
        .unwrap();
    assert_eq!(sim.node(cp1).unwrap().phase(), Phase::Secure);

    // Bootstrap once; the second call (another control plane) is AlreadyExists with
    // healthy members, which counts as success.
    wait_etcd_ready(&c1, WAIT, FAST).await.unwrap();
    assert_eq!(
        bootstrap_when_ready(&c1, WAIT, FAST).await.unwrap(),
        BootstrapOutcome::Bootstrapped
    );
    match c2.bootstrap().await.unwrap() {
        BootstrapOutcome::AlreadyBootstrapped { members } => assert_eq!(members.len(), 2),
        other => panic!("second bootstrap: {other:?}"),
    }
    let bootstrap_codes: Vec<_> = sim
        .node(cp2)
        .unwrap()
        .served()
        .into_iter()
        .filter(|s| s.rpc == "Bootstrap")
        .map(|s| s.code)
        .collect();
    assert_eq!(bootstrap_codes, [tonic::Code::AlreadyExists]);

    // etcd members: both control planes, not the worker.
    let mut members: Vec<_> = c1
        .etcd_member_list()
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.hostname)
        .collect();
    members.sort();
    assert_eq!(members, ["cp-1", "cp-2"]);

    // Kubeconfig from a control plane; Unimplemented on the worker.
    let kubeconfig = c1.kubeconfig().await.unwrap();
    let yaml: serde_yaml_ng::Value = serde_yaml_ng::from_slice(kubeconfig.expose()).unwrap();
    assert_eq!(
        yaml["clusters"][0]["cluster"]["server"].as_str(),
        Some(format!("https://{cp1}:6443").as_str())
    );
    assert_eq!(yaml["current-context"].as_str(), Some("admin@demo"));
    // The admin client certificate is issued by the cluster's Kubernetes CA.
    let crt = yaml["users"][0]["user"]["client-certificate-data"]
        .as_str()
        .unwrap();
    let crt = base64::engine::general_purpose::STANDARD
        .decode(crt)
        .unwrap();
    let (_, pem) = x509_parser::pem::parse_x509_pem(&crt).unwrap();
    let cert = pem.parse_x509().unwrap();
    assert_eq!(cert.subject().to_string(), "CN=admin, O=system:masters");
    assert_eq!(cert.issuer().to_string(), "O=kubernetes");
    assert!(!format!("{kubeconfig:?}").contains("client-key-data"));
    let err = worker.kubeconfig().await.unwrap_err();
    assert_eq!(err.code(), Some(tonic::Code::Unimplemented), "{err}");

    // Upgrade: the 1.13 path on a control plane (pull, lifecycle upgrade, reboot), the
    // legacy RPC on the worker. Both come back with the new version.
    let image = "ghcr.io/siderolabs/installer:v1.13.9".to_string();
    let path = c1
        .upgrade(&UpgradeOptions {
            image: image.clone(),
            stage: false,
            force: false,
        })
        .await
        .unwrap();
    assert_eq!(path, UpgradePath::Lifecycle);
    worker
        .upgrade_legacy(&UpgradeOptions {
            image: image.clone(),
            stage: false,
            force: false,
        })
        .await
        .unwrap();
    for (addr, name) in [(cp1, "cp-1"), (w1, "w-1")] {
        let node = sim.node(addr).unwrap();
        assert!(
            node.wait_for_phase(
                |p| p == Phase::Secure && node.talos_tag() == "v1.13.9",
                WAIT
            )
            .await
        );
        let client = wait_secure(addr, Some(name), &pki.admin, WAIT, FAST)
            .await
            .unwrap();
        assert_eq!(client.version().await.unwrap().tag, "v1.13.9");
        assert_eq!(node.upgrades(), std::slice::from_ref(&image));
    }
    // cp-1 rejoined etcd after its reboot.
    assert_eq!(c2.etcd_member_list().await.unwrap().len(), 2);

    // Reset the worker: it comes back in maintenance mode, without a config.
    worker.reset(&ResetOptions::default()).await.unwrap();
    let node = sim.node(w1).unwrap();
    assert!(node.wait_for_phase(|p| p == Phase::Maintenance, WAIT).await);
    let again = wait_maintenance(w1, Some("w-1"), WAIT, FAST).await.unwrap();
    assert_eq!(again.version().await.unwrap().platform, "nocloud");

    sim.shutdown().await;
}

#[tokio::test]
async fn talos_before_1_13_refuses_with_unimplemented_and_upgrades_through_the_legacy_rpc() {
    let (cp, other) = (ip("127.77.2.1"), ip("127.77.2.2"));
    let options = SimOptions {
        talos_version: "v1.12.6".into(),
        reboot_delay: Duration::ZERO,
        ..SimOptions::default()
    };
    let sim = Simulator::start(&[cp, other], options).await.unwrap();
    let pki = ClusterPki::new("legacy");

    let maintenance = wait_maintenance(cp, None, WAIT, FAST).await.unwrap();
    let refused = maintenance.kubeconfig().await.unwrap_err();
    assert!(
        matches!(
            refused,
            TalosError::MaintenanceMode {
                code: tonic::Code::Unimplemented,
                ..
            }
        ),
        "{refused:?}"
    );

    let config = pki.machine_config("controlplane", "cp-old", cp);
    maintenance
        .apply_configuration(config.as_bytes(), &ApplyOptions::default())
        .await
        .unwrap();
    let client = wait_secure(cp, Some("cp-old"), &pki.admin, WAIT, FAST)
        .await
        .unwrap();
    let path = client
        .upgrade(&UpgradeOptions {
            image: "ghcr.io/siderolabs/installer:v1.13.9".into(),
            stage: false,
            force: false,
        })
        .await
        .unwrap();
    assert_eq!(path, UpgradePath::Legacy);
    let node = sim.node(cp).unwrap();
    assert!(
        node.wait_for_phase(
            |p| p == Phase::Secure && node.talos_tag() == "v1.13.9",
            WAIT
        )
        .await
    );
    sim.shutdown().await;
    // A stopped simulator no longer listens.
    let gone = TalosClient::connect_maintenance(other).await;
    assert!(
        matches!(gone, Err(TalosError::Unreachable { .. })),
        "{gone:?}"
    );
}

#[tokio::test]
async fn apply_modes_dry_run_and_reboot_in_secure_mode() {
    let cp = ip("127.77.2.5");
    let options = sim_options(Duration::from_millis(200));
    let sim = Simulator::start(&[cp], options).await.unwrap();
    let pki = ClusterPki::new("apply-modes");
    let config = pki.machine_config("controlplane", "cp-1", cp);

    // A dry run in maintenance mode changes nothing.
    let maintenance = wait_maintenance(cp, None, WAIT, FAST).await.unwrap();
    let dry = ApplyOptions {
        dry_run: true,
        ..ApplyOptions::default()
    };
    let outcome = maintenance
        .apply_configuration(config.as_bytes(), &dry)
        .await
        .unwrap();
    assert!(
        outcome.mode_details.starts_with("Dry run summary:"),
        "{outcome:?}"
    );
    assert_eq!(sim.node(cp).unwrap().phase(), Phase::Maintenance);

    maintenance
        .apply_configuration(config.as_bytes(), &ApplyOptions::default())
        .await
        .unwrap();
    let client = wait_secure(cp, Some("cp-1"), &pki.admin, WAIT, FAST)
        .await
        .unwrap();

    // AUTO resolves to NO_REBOOT; STAGED and TRY are echoed; REBOOT reboots.
    for (mode, expected) in [
        (ApplyMode::Auto, ApplyMode::NoReboot),
        (ApplyMode::Staged, ApplyMode::Staged),
        (ApplyMode::Try, ApplyMode::Try),
    ] {
        let options = ApplyOptions {
            mode,
            dry_run: false,
            try_mode_timeout: Some(Duration::from_secs(60)),
        };
        let outcome = client
            .apply_configuration(config.as_bytes(), &options)
            .await
            .unwrap();
        assert_eq!(outcome.mode, expected);
        assert_eq!(sim.node(cp).unwrap().phase(), Phase::Secure);
    }
    let reboot = ApplyOptions {
        mode: ApplyMode::Reboot,
        ..ApplyOptions::default()
    };
    client
        .apply_configuration(config.as_bytes(), &reboot)
        .await
        .unwrap();
    let node = sim.node(cp).unwrap();
    assert!(
        matches!(node.phase(), Phase::Down { .. }),
        "{:?}",
        node.phase()
    );
    let back = wait_secure(cp, Some("cp-1"), &pki.admin, WAIT, FAST)
        .await
        .unwrap();
    // A worker config cannot replace a control-plane one.
    let worker = pki.machine_config("worker", "cp-1", cp);
    let err = back
        .apply_configuration(worker.as_bytes(), &ApplyOptions::default())
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("machine type can't be changed"),
        "{err}"
    );
    sim.shutdown().await;
}
