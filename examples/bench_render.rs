//! Benchmark: machine configs for a 100-node cluster, in configs per second: the base config
//! plus serialisation alone, then the whole per-node pipeline (`node_configs`: schematic,
//! installer image, base config, the repository's reference patches rendered and merged,
//! Talos's checks, YAML, SHA-256, redaction). The per-cluster secrets bundle (RSA 4096) is
//! timed apart. Run: `cargo run --release --example bench_render`.

use rand::SeedableRng;
use std::fmt::Write as _;
use std::path::Path;
use std::time::Instant;
use talosprov_base::role::Role;
use talosprov_machine::config::base_config;
use talosprov_machine::config_parts::BaseConfigInput;
use talosprov_machine::node::node_configs;
use talosprov_machine::secrets::SecretsBundle;
use talosprov_topology as topology;
use talosprov_topology::model::Environment;

const NODES: usize = 100;
const CONTROL_PLANES: usize = 3;
const ROUNDS: usize = 20;

fn main() {
    let now = time::OffsetDateTime::now_utc();
    let started = Instant::now();
    let mut rng = rand_chacha::ChaCha20Rng::from_entropy();
    let secrets = SecretsBundle::generate(&mut rng, now).expect("secrets bundle");
    let keygen = started.elapsed();
    println!(
        "secrets bundle (once per cluster, incl. RSA 4096): {:.1} ms",
        keygen.as_secs_f64() * 1e3
    );

    let talos: talosprov_base::version::TalosVersion = "v1.13.9".parse().expect("version");
    let inputs: Vec<BaseConfigInput<'_>> = (0..NODES)
        .map(|i| BaseConfigInput {
            cluster_name: "bench".into(),
            endpoint: "https://10.0.0.10:6443".into(),
            kubernetes_version: None,
            talos_version: talos.clone(),
            role: if i < CONTROL_PLANES {
                Role::Controlplane
            } else {
                Role::Worker
            },
            secrets: &secrets,
            install_disk: Some("/dev/sda".into()),
            install_image: Some(format!(
                "factory.talos.dev/nocloud-installer/{:064x}:v1.13.9",
                i % 2
            )),
            additional_sans: vec!["10.0.0.10".into()],
            hostname_config: true,
            accepted_cas: &talosprov_machine::rotation::NO_ACCEPTED_CAS,
        })
        .collect();

    let mut bytes = 0usize;
    let started = Instant::now();
    for _ in 0..ROUNDS {
        for input in &inputs {
            let config = base_config(input).expect("base config");
            bytes += config.to_yaml().len();
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    let configs = (NODES * ROUNDS) as f64;
    println!(
        "base config + YAML for {NODES} nodes ({CONTROL_PLANES} control planes), {ROUNDS} rounds: \
         {:.0} configs/s ({:.1} µs per config, {:.1} ms per {NODES}-node cluster, {} KiB written)",
        configs / elapsed,
        elapsed / configs * 1e6,
        elapsed / ROUNDS as f64 * 1e3,
        bytes / 1024
    );

    pipeline(&secrets);
}

/// A 100-node topology (3 control planes behind a VIP) over the repository's `patches/`.
fn topology_text() -> String {
    let patches = Path::new(env!("CARGO_MANIFEST_DIR")).join("patches");
    let mut t = format!(
        "cluster:\n  name: bench\n  talos_version: v1.13.8\n  vip: 10.0.0.2\n  gateway: 10.0.0.1\n  \
         prefix_length: 16\n  nameservers: [10.0.0.1]\nproxmox:\n  endpoint: https://pve.bench:8006\n  \
         node: pve\n  datastore: local-lvm\nschematics:\n  base:\n    extensions: \
         [siderolabs/qemu-guest-agent]\ndefault_schematic: base\npatches_dir: {}\nnodes:\n",
        patches.display()
    );
    for i in 0..NODES {
        let role = if i < CONTROL_PLANES {
            "controlplane"
        } else {
            "worker"
        };
        let _ = writeln!(
            t,
            "  - {{hostname: node-{i:03}, ip: 10.0.1.{}, role: {role}, cores: 2, memory: 4096, \
             vm_id: {}, proxmox_node: pve{}}}",
            10 + i,
            1000 + i,
            i % 3
        );
    }
    t
}

fn pipeline(secrets: &SecretsBundle) {
    let loaded = topology::parse(
        &topology_text(),
        Path::new("bench.yaml"),
        &Environment::default(),
    );
    let t = loaded.topology.expect("the generated topology is valid");
    let set = talosprov_files::load_patches(&t).expect("the reference patch tree");
    let mut bytes = 0usize;
    let started = Instant::now();
    for _ in 0..ROUNDS {
        let configs = node_configs(&t, secrets, &set, &[]).expect("node configs");
        bytes += configs.iter().map(|c| c.yaml.expose().len()).sum::<usize>();
    }
    let elapsed = started.elapsed().as_secs_f64();
    let configs = (NODES * ROUNDS) as f64;
    println!(
        "node_configs for {NODES} nodes (reference patches, checks, YAML, SHA-256, redaction), \
         {ROUNDS} rounds: {:.0} configs/s ({:.1} µs per config, {:.1} ms per {NODES}-node \
         cluster, {} KiB written)",
        configs / elapsed,
        elapsed / configs * 1e6,
        elapsed / ROUNDS as f64 * 1e3,
        bytes / 1024
    );
}
