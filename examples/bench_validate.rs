//! Benchmark of the offline pipeline on a large generated topology: 1000 nodes
//! (3 control planes), 10 patch files in each of common/, controlplane/,
//! worker/ and every nodes/<hostname>/. Prints the time to load and validate
//! the file, list the patch tree, and give every node its patches in order.
//!
//! Run: cargo run --release --example bench_validate [-- NODES [RUNS]]

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};
use talosprov::patch::discover;
use talosprov::topology;

const PATCHES_PER_LEVEL: usize = 10;

fn topology_text(nodes: usize) -> String {
    let mut t = String::from(
        "cluster:\n  name: bench\n  talos_version: v1.13.8\n  vip: 10.0.0.2\n  gateway: 10.0.0.1\n  prefix_length: 16\n\
         proxmox:\n  endpoint: https://pve.bench:8006\n  node: pve\n  datastore: local-lvm\n\
         schematics:\n  base:\n    extensions: [siderolabs/qemu-guest-agent]\ndefault_schematic: base\nnodes:\n",
    );
    for i in 0..nodes {
        let role = if i < 3 { "controlplane" } else { "worker" };
        let host = format!("pve{}", i % 3);
        let ip = format!("10.0.{}.{}", 1 + i / 250, 1 + i % 250);
        let _ = write!(
            t,
            "  - hostname: node-{i:04}\n    ip: {ip}\n    role: {role}\n    cores: 2\n    memory: 4096\n    vm_id: {}\n    proxmox_node: {host}\n",
            1000 + i
        );
    }
    t
}

fn write_tree(root: &Path, nodes: usize) -> std::io::Result<()> {
    let patch = "machine:\n  sysctls:\n    vm.max_map_count: \"262144\"\n";
    let mut folders = vec![
        root.join("common"),
        root.join("controlplane"),
        root.join("worker"),
    ];
    folders.extend((0..nodes).map(|i| root.join("nodes").join(format!("node-{i:04}"))));
    for dir in folders {
        std::fs::create_dir_all(&dir)?;
        for j in 0..PATCHES_PER_LEVEL {
            std::fs::write(dir.join(format!("{j:02}-patch.yaml")), patch)?;
        }
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let nodes: usize = args.next().map_or(Ok(1000), |a| a.parse())?;
    let runs: usize = args.next().map_or(Ok(10), |a| a.parse())?;
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("cluster.yaml");
    let text = topology_text(nodes);
    std::fs::write(&file, &text)?;
    write_tree(&dir.path().join("patches"), nodes)?;
    println!(
        "topology: {nodes} nodes, {} KiB; patch files: {} ({PATCHES_PER_LEVEL} per level)",
        text.len() / 1024,
        PATCHES_PER_LEVEL * (3 + nodes)
    );

    let mut load = Vec::new();
    let mut discover_times = Vec::new();
    let mut total = Vec::new();
    let mut patch_count = 0;
    for _ in 0..runs {
        let start = Instant::now();
        let loaded = topology::load(&file)?;
        let loaded_at = Instant::now();
        let t = loaded
            .topology
            .ok_or("the generated topology is not valid")?;
        let tree = discover::list_tree(&t.patches_dir)?;
        patch_count = t
            .nodes
            .iter()
            .map(|n| tree.patches_for(&n.hostname, n.role).len())
            .sum();
        let warnings = tree.check(t.nodes.iter().map(|n| n.hostname.as_str()));
        assert!(warnings.is_empty() && loaded.diagnostics.is_empty());
        let end = Instant::now();
        load.push(loaded_at - start);
        discover_times.push(end - loaded_at);
        total.push(end - start);
    }
    let median = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    println!("patches given to nodes: {patch_count}");
    println!("runs: {runs} (median)");
    println!(
        "  load + validate:              {:>8.1} ms",
        median(&mut load).as_secs_f64() * 1e3
    );
    println!(
        "  list tree + discover + check: {:>8.1} ms",
        median(&mut discover_times).as_secs_f64() * 1e3
    );
    println!(
        "  total:                        {:>8.1} ms",
        median(&mut total).as_secs_f64() * 1e3
    );
    Ok(())
}
