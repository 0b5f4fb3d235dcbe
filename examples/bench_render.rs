//! Benchmark: base machine config generation plus serialisation for a 100-node cluster, in
//! configs per second; the per-cluster secrets bundle generation (RSA 4096) is timed apart.
//! Run: `cargo run --release --example bench_render`.

use rand::SeedableRng;
use std::time::Instant;
use talosprov::machine::{BaseConfigInput, Role, SecretsBundle, base_config};

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

    let talos: talosprov::machine::TalosVersion = "v1.13.9".parse().expect("version");
    let inputs: Vec<BaseConfigInput<'_>> = (0..NODES)
        .map(|i| BaseConfigInput {
            cluster_name: "bench".into(),
            endpoint: "https://10.0.0.10:6443".into(),
            kubernetes_version: None,
            talos_version: talos.clone(),
            role: if i < CONTROL_PLANES {
                Role::ControlPlane
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
}
