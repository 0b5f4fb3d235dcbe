//! Benchmark: apply the lab at 3, 10, 30 and 100 nodes at the default
//! `-parallelism` (10) against fakepve and the Talos simulator with fixed
//! simulated delays (install reboot, etcd readiness), and print the wall time
//! against the critical path (the longest chain of waits); 30 nodes at
//! `-parallelism 30` for comparison.
//! Needs fakepve (tests/run.sh installs it into target/venv).
//!
//!     cargo run --release --example bench_apply [-- NODES PARALLELISM]
//!
//! With NODES and PARALLELISM, only that one configuration is run. Each
//! configuration runs RUNS times (5; `TALOSPROV_BENCH_RUNS`), and the median
//! wall time is printed.

#[allow(dead_code)]
#[path = "../tests/it/support/factory.rs"]
mod factory;
#[allow(dead_code)]
#[path = "../tests/it/support/fakepve.rs"]
mod fakepve;
#[allow(dead_code)]
#[path = "../tests/it/support/wait.rs"]
mod wait;

use std::net::IpAddr;
use std::time::{Duration, Instant};

use clap::Parser;
use talosprov::cli::Cli;
use talosprov::cli::error::Outcome;
use talosprov_sim::Simulator;
use talosprov_sim::state::SimOptions;

/// The install reboot each node takes before it serves secure mode.
const REBOOT: Duration = Duration::from_secs(2);
/// How long etcd stays unready after a boot (the bootstrap waits for it).
const ETCD_READY: Duration = Duration::from_secs(1);

fn topology(n: usize, net: u8, factory: &str, ca_file: &str) -> String {
    let mut t = format!(
        "cluster:\n  name: bench\n  talos_version: v1.13.8\n  kubernetes_version: v1.36.2\n  \
         vip: 127.4.{net}.99\n  gateway: 127.0.0.1\n  prefix_length: 8\n  nameservers: [127.0.0.1]\n\
         proxmox:\n  node: pve1\n  datastore: local-lvm\n  image_storage: local\n  bridge: vmbr0\n  \
         pool: BENCH\n  ca_file: {ca_file}\nimage_factory:\n  url: {factory}\n\
         schematics:\n  base: {{ extensions: [siderolabs/qemu-guest-agent] }}\n\
         default_schematic: base\nnodes:\n"
    );
    for i in 0..n {
        let role = if i == 0 { "controlplane" } else { "worker" };
        t.push_str(&format!(
            "  - {{ hostname: node-{i:02}, ip: 127.4.{net}.{}, role: {role}, cores: 2, memory: 4096, disk_size: 20 }}\n",
            100 + i
        ));
    }
    t
}

async fn cli(args: &[&str]) -> anyhow::Result<()> {
    let cli = Cli::try_parse_from(std::iter::once("talosprov").chain(args.iter().copied()))?;
    match talosprov::cli::run(cli).await {
        Ok(Outcome::Success | Outcome::Changes) => Ok(()),
        Err(e) => anyhow::bail!("talosprov {}: {e:?}", args.join(" ")),
    }
}

/// Apply an `n`-node lab with `parallelism`; the wall time of the apply.
async fn run(n: usize, net: u8, parallelism: usize) -> anyhow::Result<Duration> {
    let pve = fakepve::FakePve::start(fakepve::FakeOptions::default()).await;
    let factory = factory::Factory::start().await;
    let ips: Vec<IpAddr> = (0..n)
        .map(|i| format!("127.4.{net}.{}", 100 + i).parse())
        .collect::<Result<_, _>>()?;
    let sim = Simulator::start(
        &ips,
        SimOptions {
            talos_version: "v1.13.8".into(),
            reboot_delay: REBOOT,
            ..SimOptions::default()
        },
    )
    .await?;
    for ip in &ips {
        if let Some(node) = sim.node(*ip) {
            node.set_slow_boot(ETCD_READY);
        }
    }
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("cluster.yaml");
    std::fs::create_dir_all(dir.path().join("patches"))?;
    std::fs::write(
        &file,
        topology(n, net, &factory.url, &pve.ca_file.display().to_string()),
    )?;
    let file = file.display().to_string();
    let secrets = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/secrets.yaml");
    // SAFETY: set before any thread of ours reads the environment for this run;
    // runs are sequential.
    unsafe {
        std::env::set_var("PROXMOX_VE_ENDPOINT", &pve.url);
        std::env::set_var(
            "PROXMOX_VE_API_TOKEN",
            format!("{}={}", fakepve::ROOT_TOKEN_ID, fakepve::ROOT_TOKEN_SECRET),
        );
    }
    cli(&["secrets", "import", secrets, "-f", &file]).await?;
    let p = parallelism.to_string();
    let started = Instant::now();
    cli(&["apply", "-f", &file, "--auto-approve", "--parallelism", &p]).await?;
    let wall = started.elapsed();
    sim.shutdown().await;
    Ok(wall)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let critical = REBOOT + ETCD_READY;
    let mut rows = Vec::new();
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse())
        .collect::<Result<_, _>>()?;
    let configurations = match args.as_slice() {
        [n, p] => vec![(*n, *p)],
        _ => vec![(3, 10), (10, 10), (30, 10), (100, 10), (30, 30)],
    };
    let runs: usize = std::env::var("TALOSPROV_BENCH_RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(5)
        .max(1);
    let mut net = 0u8;
    for (n, parallelism) in configurations {
        let mut walls = Vec::new();
        for _ in 0..runs {
            net = net.wrapping_add(1).max(1);
            walls.push(run(n, net, parallelism).await?);
        }
        walls.sort();
        rows.push((n, parallelism, walls[walls.len() / 2]));
    }
    println!();
    println!("simulated delays: install reboot {REBOOT:?}, etcd ready {ETCD_READY:?} after boot");
    println!(
        "critical path (one node's chain of waits): {:.2} s",
        critical.as_secs_f64()
    );
    println!("runs per configuration: {runs} (median)");
    println!(
        "{:>5} {:>11} {:>8} {:>10}",
        "nodes", "parallelism", "wall s", "wall/path"
    );
    for (n, p, wall) in rows {
        println!(
            "{n:>5} {p:>11} {:>8.2} {:>10.2}",
            wall.as_secs_f64(),
            wall.as_secs_f64() / critical.as_secs_f64()
        );
    }
    Ok(())
}
