//! Benchmark of the offline pipeline `validate` runs, on a large generated topology: 1000
//! nodes (3 control planes), 10 patch files in each of common/, controlplane/, worker/ and
//! every nodes/<hostname>/ (literal, Jinja and templatefile). Prints the time to load and
//! validate the file, list and read the patch tree, and render, merge and check every
//! node's machine config. The secrets bundle is made once, as `validate` makes it.
//!
//! Then, when the `talosprov` binary of the same build is there (next to the
//! `examples` folder, or at `TALOSPROV_BIN`), the whole process: `talosprov
//! validate -f cluster.yaml` on that tree, its output to /dev/null, wall time
//! from spawn to exit (the measure: the parse, the threads' start, the
//! secrets made for the checks, the summary printed).
//!
//! With COMMON, `common/` holds that many patch files instead of 10 (`1000 5 200` is the
//! 1,000 nodes × 200 shared patches the patch byte budgets are sized to let through).
//!
//! Run: cargo build --release --bin talosprov --example bench_validate &&
//! target/release/examples/bench_validate [NODES [RUNS [COMMON]]]

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};
use talosprov_machine::node::node_configs;
use talosprov_machine::secrets::SecretsBundle;

const PATCHES_PER_LEVEL: usize = 10;

/// The allocator the `talosprov` binary uses, so that the in-process figures
/// match it.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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

/// Patch `j` of a folder: mostly literal files, one Jinja and one templatefile template, each
/// setting its own sysctl so every merge changes the config.
fn patch(level: &str, j: usize) -> (String, String) {
    match j {
        8 => (
            format!("{j:03}-patch.yaml.j2"),
            format!(
                "machine:\n  sysctls:\n    bench.{level}.{j}: \"{{{{ hostname }}}}-{{{{ node_ip }}}}\"\n"
            ),
        ),
        9 => (
            format!("{j:03}-patch.yaml.tftpl"),
            format!("machine:\n  nodeLabels:\n    bench.{level}/{j}: \"${{cluster_name}}\"\n"),
        ),
        _ => (
            format!("{j:03}-patch.yaml"),
            format!("machine:\n  sysctls:\n    bench.{level}.{j}: \"262144\"\n"),
        ),
    }
}

fn write_tree(root: &Path, nodes: usize, common: usize) -> std::io::Result<()> {
    let mut folders = vec![
        ("common".to_string(), root.join("common")),
        ("controlplane".to_string(), root.join("controlplane")),
        ("worker".to_string(), root.join("worker")),
    ];
    folders.extend((0..nodes).map(|i| {
        let name = format!("node-{i:04}");
        let dir = root.join("nodes").join(&name);
        (name, dir)
    }));
    for (level, dir) in folders {
        std::fs::create_dir_all(&dir)?;
        let count = if level == "common" {
            common
        } else {
            PATCHES_PER_LEVEL
        };
        for j in 0..count {
            let (name, text) = patch(&level, j);
            std::fs::write(dir.join(name), text)?;
        }
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let nodes: usize = args.next().map_or(Ok(1000), |a| a.parse())?;
    let runs: usize = args.next().map_or(Ok(10), |a| a.parse())?;
    let common: usize = args.next().map_or(Ok(PATCHES_PER_LEVEL), |a| a.parse())?;
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("cluster.yaml");
    let text = topology_text(nodes);
    std::fs::write(&file, &text)?;
    write_tree(&dir.path().join("patches"), nodes, common)?;
    println!(
        "topology: {nodes} nodes, {} KiB; patch files: {} ({common} in common/, \
         {PATCHES_PER_LEVEL} in each other folder)",
        text.len() / 1024,
        common + PATCHES_PER_LEVEL * (2 + nodes)
    );

    let secrets = SecretsBundle::generate_for_checks(
        &mut rand::rngs::OsRng,
        time::OffsetDateTime::now_utc(),
    )?;
    let mut load = Vec::new();
    let mut read = Vec::new();
    let mut build = Vec::new();
    let mut total = Vec::new();
    let mut patch_count = 0;
    let mut bytes = 0;
    for _ in 0..runs {
        let start = Instant::now();
        let loaded = talosprov_files::load_topology(&file)?;
        let loaded_at = Instant::now();
        let t = loaded
            .topology
            .ok_or("the generated topology is not valid")?;
        let set = talosprov_files::load_patches(&t).map_err(|d| format!("{d:?}"))?;
        let read_at = Instant::now();
        patch_count = set.node_patches().iter().map(|(_, p)| p.len()).sum();
        assert!(set.warnings().is_empty() && loaded.diagnostics.is_empty());
        let configs = node_configs(&t, &secrets, &set, &[]).map_err(|d| format!("{d:?}"))?;
        bytes = configs.iter().map(|c| c.yaml.expose().len()).sum::<usize>();
        let end = Instant::now();
        load.push(loaded_at - start);
        read.push(read_at - loaded_at);
        build.push(end - read_at);
        total.push(end - start);
    }
    let median = |v: &mut Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "patches given to nodes: {patch_count}; configs: {nodes} ({} KiB)",
        bytes / 1024
    );
    println!("runs: {runs} (median)");
    println!(
        "  load + validate topology:          {:>8.1} ms",
        ms(median(&mut load))
    );
    println!(
        "  list + read + compile patch tree:  {:>8.1} ms",
        ms(median(&mut read))
    );
    println!(
        "  render + merge + check + write:    {:>8.1} ms",
        ms(median(&mut build))
    );
    println!(
        "  total:                             {:>8.1} ms",
        ms(median(&mut total))
    );
    whole_process(&file, runs, &median)?;
    Ok(())
}

/// The `talosprov` binary of this build: `TALOSPROV_BIN`, else the one next
/// to this example's folder (`target/<profile>/talosprov`).
fn talosprov_binary() -> Option<std::path::PathBuf> {
    if let Some(path) = std::env::var_os("TALOSPROV_BIN") {
        return Some(path.into());
    }
    let exe = std::env::current_exe().ok()?;
    let bin = exe.parent()?.parent()?.join("talosprov");
    bin.is_file().then_some(bin)
}

/// `talosprov validate -f FILE` run `runs` times as a whole process, stdout
/// and stderr to /dev/null: the median wall time, printed (or why not).
fn whole_process(
    file: &Path,
    runs: usize,
    median: &dyn Fn(&mut Vec<Duration>) -> Duration,
) -> Result<(), Box<dyn std::error::Error>> {
    let Some(bin) = talosprov_binary() else {
        println!("  whole process: no talosprov binary (build it, or set TALOSPROV_BIN)");
        return Ok(());
    };
    let mut walls = Vec::new();
    for _ in 0..runs {
        let start = Instant::now();
        let status = std::process::Command::new(&bin)
            .args(["validate", "-f"])
            .arg(file)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()?;
        walls.push(start.elapsed());
        if !status.success() {
            return Err(format!("{} validate exited {status}", bin.display()).into());
        }
    }
    println!(
        "  whole process (talosprov validate): {:>7.1} ms ({})",
        median(&mut walls).as_secs_f64() * 1e3,
        bin.display()
    );
    Ok(())
}
