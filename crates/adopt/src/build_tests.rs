//! The adoption put together from sides built in the test: configs made as
//! the talos provider makes them (Talos's generator with the provider's
//! defaults, then the patches), VMs as the bpg provider records them.

use std::path::Path;

use super::build::{Source, adopt};
use super::diff::{first_difference, patches_between};
use super::proxmox::{ProxmoxSide, StateVm, VmDisk, VmNic};
use super::talos::ClusterFacts;
use super::topology::{NodeSource, Settings};
use talosprov_base::role::Role;
use talosprov_base::sensitive::Sensitive;
use talosprov_machine::config::{base_config, machine_config_yaml};
use talosprov_machine::config_parts::BaseConfigInput;
use talosprov_machine::rotation::AcceptedCas;
use talosprov_machine::secrets::SecretsBundle;
use talosprov_machine::secrets_file::secrets_yaml;
use talosprov_patch::apply::apply_patches;
use talosprov_patch::document::MachineConfig;
use talosprov_patch::load::load_patch;

fn bundle() -> SecretsBundle {
    use rand::SeedableRng as _;
    let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(11);
    SecretsBundle::generate_for_checks(&mut rng, time::OffsetDateTime::UNIX_EPOCH)
        .expect("a bundle")
}

/// `talosctl gen config`'s config for `role`, as the provider's
/// `talos_machine_configuration` data source makes it.
fn provider_input(secrets: &SecretsBundle, role: Role) -> MachineConfig {
    let none = AcceptedCas::default();
    let input = BaseConfigInput {
        cluster_name: "prod".into(),
        endpoint: "https://10.5.0.10:6443".into(),
        kubernetes_version: Some("1.36.2".into()),
        talos_version: "v1.13.8".parse().expect("version"),
        role,
        secrets,
        install_disk: None,
        install_image: None,
        additional_sans: Vec::new(),
        hostname_config: true,
        accepted_cas: &none,
    };
    MachineConfig {
        documents: base_config(&input).expect("base").documents,
    }
}

fn patched(input: &MachineConfig, patches: &[&str]) -> MachineConfig {
    let loaded: Vec<_> = patches
        .iter()
        .enumerate()
        .map(|(i, p)| load_patch(format!("p{i}"), p).expect("patch"))
        .collect();
    apply_patches(input, &loaded).expect("applies")
}

#[test]
fn patches_between_two_configs_give_the_second_under_talos_merge_rules() {
    let secrets = bundle();
    let from = provider_input(&secrets, Role::Worker);
    let cases: &[&str] = &[
        // A scalar, a key added, a list replaced, a map entry removed.
        "machine:\n  install:\n    disk: /dev/vda\n  certSANs: [a.example]\n",
        "machine:\n  kubelet:\n    extraArgs:\n      rotate-server-certificates: \"true\"\n",
        "cluster:\n  network:\n    podSubnets: [10.64.0.0/16]\n",
        "apiVersion: v1alpha1\nkind: HostnameConfig\nhostname: w1\nauto: off\n",
        "apiVersion: v1alpha1\nkind: HostnameConfig\n$patch: delete\n",
        "machine:\n  features:\n    $patch: delete\n",
        "apiVersion: v1alpha1\nkind: ResolverConfig\nnameservers:\n  - address: 1.1.1.1\n",
    ];
    for case in cases {
        let to = patched(&from, &[case]);
        for (a, b) in [(&from, &to), (&to, &from)] {
            let patches = patches_between(a, b);
            let got = patched(a, &patches.iter().map(String::as_str).collect::<Vec<_>>());
            assert_eq!(first_difference(&got, b), None, "{case}\n{patches:#?}");
        }
    }
    assert!(patches_between(&from, &from).is_empty());
}

fn vm(name: &str, vmid: u32, ip: &str, cores: u32) -> StateVm {
    StateVm {
        address: format!("module.cluster.proxmox_virtual_environment_vm.node[\"{name}\"]"),
        vmid: Some(vmid),
        node: Some("pve1".into()),
        name: Some(name.into()),
        tags: vec!["talos".into()],
        pool: None,
        cores: Some(cores),
        memory_mib: Some(4096),
        disks: vec![VmDisk {
            interface: "scsi0".into(),
            datastore: Some("local-lvm".into()),
            size_gib: Some(40),
            source: Some("local:iso/talos-v1.13.8-nocloud-amd64.img".into()),
        }],
        efi_disk: true,
        hostpci: Vec::new(),
        nics: vec![VmNic {
            bridge: Some("vmbr0".into()),
            vlan: None,
            mac: Some("BC:24:11:00:00:01".into()),
            mtu: None,
        }],
        addresses: vec![format!("{ip}/24")],
        gateway: Some("10.5.0.1".into()),
        nameservers: vec!["10.5.0.1".into()],
    }
}

/// Adopt `sources` on `side` as the bootstrapped cluster `prod` (Talos
/// v1.13.8, Kubernetes 1.36.2, behind 10.5.0.10).
fn adopt_prod(
    sources: Vec<NodeSource>,
    side: &ProxmoxSide,
    secrets: &SecretsBundle,
) -> super::build::Adopted {
    let facts = ClusterFacts {
        name: Some("prod".into()),
        endpoint: Some("https://10.5.0.10:6443".into()),
        talos_version: Some("v1.13.8".into()),
        kubernetes_version: Some("1.36.2".into()),
        ..ClusterFacts::default()
    };
    adopt(Source {
        nodes: sources,
        facts: &facts,
        proxmox: side,
        settings: &Settings::default(),
        secrets,
        secrets_yaml: &secrets_yaml(secrets),
        bootstrapped: true,
        now: "2026-12-05T00:00:00Z".into(),
        dir: Path::new("/adopted"),
        proxmox_endpoint_env: Some("https://pve.example:8006".into()),
        image_storage_shared: false,
    })
    .expect("adopts")
}

/// Adopt three nodes whose configs the provider made (`with_sources`: the
/// input and patches kept, as in a state; else only the running config, as
/// from talosctl); the files' names.
fn adopt_three(with_sources: bool) -> Vec<String> {
    let secrets = bundle();
    let common =
        "machine:\n  kubelet:\n    extraArgs:\n      rotate-server-certificates: \"true\"\n";
    let cp_patch = "machine:\n  network:\n    interfaces:\n      - interface: eth0\n        addresses: [10.5.0.11/24]\n        routes:\n          - network: 0.0.0.0/0\n            gateway: 10.5.0.1\n        vip:\n          ip: 10.5.0.10\n";
    let nodes = [
        (
            "cp-1",
            "10.5.0.11",
            Role::Controlplane,
            vec![common, cp_patch],
        ),
        ("w-1", "10.5.0.21", Role::Worker, vec![common]),
        ("w-2", "10.5.0.22", Role::Worker, vec![common]),
    ];
    let mut sources = Vec::new();
    let mut side = ProxmoxSide::default();
    let mut running = Vec::new();
    for (i, (name, ip, role, patches)) in nodes.iter().enumerate() {
        let input = provider_input(&secrets, *role);
        let config = patched(&input, patches);
        let text = machine_config_yaml(&config.documents);
        running.push(config);
        side.vms.push(vm(name, 101 + i as u32, ip, 4));
        sources.push(NodeSource {
            source: format!("talos_machine_configuration_apply.node[\"{name}\"]"),
            node: (*ip).into(),
            running: Sensitive::new(text),
            input: with_sources.then(|| Sensitive::new(machine_config_yaml(&input.documents))),
            patches: patches
                .iter()
                .filter(|_| with_sources)
                .map(|p| Sensitive::new((*p).to_owned()))
                .collect(),
        });
    }
    let adopted = adopt_prod(sources, &side, &secrets);

    // What each node runs is what talosprov renders, in meaning.
    for (i, (name, ..)) in nodes.iter().enumerate() {
        let ours = MachineConfig::parse(adopted.machineconfigs[*name].expose()).expect("parses");
        assert_eq!(first_difference(&ours, &running[i]), None, "{name}");
        let record = &adopted.resources.configs[*name];
        use sha2::Digest as _;
        let sha = hex::encode(sha2::Sha256::digest(adopted.machineconfigs[*name].expose()));
        assert_eq!(record.config_sha256, sha, "{name}");
        let vm = &adopted.resources.vms[*name];
        assert_eq!((vm.vmid, vm.cores), (101 + i as u32, 4));
    }
    assert!(
        adopted
            .resources
            .bootstrap
            .as_ref()
            .is_some_and(|b| b.node == "cp-1")
    );
    let names: Vec<String> = adopted
        .files
        .iter()
        .map(|(p, _)| p.display().to_string())
        .collect();
    let topology = &adopted.files[0].1;
    assert!(topology.contains("vip: 10.5.0.10"), "{topology}");
    for (path, text) in &adopted.files {
        for secret in [
            secrets.cluster.secret.expose().as_str(),
            secrets.trustd_token.expose().as_str(),
        ] {
            assert!(!text.contains(secret), "{} holds a secret", path.display());
        }
    }
    names
}

#[test]
fn an_adopted_cluster_renders_what_its_nodes_run_with_no_secret_in_its_files() {
    let names = adopt_three(true);
    // The shared patch went up to common/, the VIP stayed with its node, and
    // what the workers' base config differs by is the workers'.
    assert!(names.contains(&"cluster.yaml".to_owned()), "{names:?}");
    assert!(
        names.iter().any(|n| n.starts_with("patches/common/")),
        "{names:?}"
    );
    assert!(
        names.iter().any(|n| n.starts_with("patches/nodes/cp-1/")),
        "{names:?}"
    );
    assert!(
        names.contains(&"patches/worker/01-adopted-machine-install.yaml".to_owned()),
        "{names:?}"
    );
    assert!(
        !names.iter().any(|n| n.starts_with("patches/nodes/w-")),
        "{names:?}"
    );
}

#[test]
fn a_cluster_known_only_by_its_running_configs_shares_what_every_node_has() {
    let names = adopt_three(false);
    assert!(
        names.contains(&"patches/common/01-adopted-machine-install.yaml".to_owned()),
        "{names:?}"
    );
    assert!(
        names.iter().any(
            |n| n.starts_with("patches/common/") && n.ends_with("adopted-machine-kubelet.yaml")
        ),
        "{names:?}"
    );
}

#[test]
fn merge_takes_what_the_state_lacks_and_refuses_what_it_holds_otherwise() {
    use talosprov_statefile::format::{Pool, State};
    let mut target = State::new(uuid::Uuid::nil());
    target.secrets = Some(Sensitive::new("a".to_owned()));
    target
        .resources
        .pools
        .insert("TALOS".into(), Pool { comment: None });
    let mut from = State::new(uuid::Uuid::nil());
    from.secrets = Some(Sensitive::new("a".to_owned()));
    from.resources
        .pools
        .insert("TALOS".into(), Pool { comment: None });
    from.resources
        .pools
        .insert("OTHER".into(), Pool { comment: None });
    let added = super::merge::merge_state(&mut target, &from).expect("merges");
    assert_eq!(added, ["pool/OTHER"]);
    assert_eq!(target.resources.pools.len(), 2);
    from.resources.pools.insert(
        "TALOS".into(),
        Pool {
            comment: Some("else".into()),
        },
    );
    from.secrets = Some(Sensitive::new("b".to_owned()));
    let before = target.clone();
    let err = super::merge::merge_state(&mut target, &from).expect_err("conflicts");
    assert_eq!(err.problems.len(), 2, "{err}");
    assert!(err.problems[1].starts_with("pool/TALOS:"), "{err}");
    assert_eq!(target, before);
}

#[test]
fn a_node_with_over_a_thousand_patches_keeps_their_merge_order_in_its_file_names() {
    let secrets = bundle();
    // Each patch sets `order` anew: only the last one's value may survive.
    let texts: Vec<String> = (0..1005)
        .map(|i| format!("machine:\n  nodeLabels:\n    order: \"{i}\"\n    label-{i}: x\n"))
        .collect();
    let input = provider_input(&secrets, Role::Controlplane);
    let running = patched(
        &input,
        &texts.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let source = NodeSource {
        source: "talos_machine_configuration_apply.node[\"cp-1\"]".into(),
        node: "10.5.0.11".into(),
        running: Sensitive::new(machine_config_yaml(&running.documents)),
        input: Some(Sensitive::new(machine_config_yaml(&input.documents))),
        patches: texts.iter().map(|t| Sensitive::new(t.clone())).collect(),
    };
    let side = ProxmoxSide {
        vms: vec![vm("cp-1", 101, "10.5.0.11", 4)],
        ..ProxmoxSide::default()
    };
    let adopted = adopt_prod(vec![source], &side, &secrets);
    let ours = MachineConfig::parse(adopted.machineconfigs["cp-1"].expose()).expect("parses");
    assert_eq!(first_difference(&ours, &running), None);
    let own: Vec<&String> = adopted
        .files
        .iter()
        .filter(|(p, _)| p.starts_with("patches/nodes/cp-1"))
        .map(|(_, t)| t)
        .collect();
    let mut names: Vec<String> = adopted
        .files
        .iter()
        .filter(|(p, _)| p.starts_with("patches/nodes/cp-1"))
        .map(|(p, _)| p.display().to_string())
        .collect();
    assert!(own.len() >= texts.len(), "{}", own.len());
    let written = names.clone();
    names.sort();
    assert_eq!(names, written, "byte-wise order is merge order");
    assert!(names[0].contains("/0000-"), "{}", names[0]);
}
