//! Benchmark: an etcd snapshot of 64 MiB streamed through `talosprov etcd
//! snapshot` (age-encrypted on the way, into a folder, then into S3), then
//! restored with `talosprov etcd restore --from latest` after the control
//! plane is lost; and the same with an etcd of a few KiB, for comparison. For each run it
//! prints the wall time, the snapshot's size, the archive's size and the
//! child's peak resident set (`wait4`'s `ru_maxrss`): memory stays bounded
//! when it does not grow with the snapshot.
//!
//! The cluster is a control plane and a worker on fakepve and the Talos
//! simulator (whose snapshot is padded to the size, chunk by chunk), applied
//! in-process first. The S3 runs go to moto's server on loopback. Needs
//! fakepve and moto[server] (tests/run.sh installs both into target/venv). Not a test: nothing is asserted; the figures go to README.md.
//!
//!     cargo build --release --bin talosprov
//!     cargo run --release --example bench_backup [-- PATH/TO/talosprov]

#[allow(dead_code)]
#[path = "../tests/it/support/factory.rs"]
mod factory;
#[allow(dead_code)]
#[path = "../tests/it/support/fakepve.rs"]
mod fakepve;
#[allow(dead_code)]
#[path = "../tests/it/support/moto.rs"]
mod moto;
#[allow(dead_code)]
#[path = "../tests/it/support/wait.rs"]
mod wait;

use std::net::IpAddr;
use std::os::unix::process::CommandExt as _;
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use clap::Parser;
use talosprov::cli::Cli;
use talosprov::cli::error::Outcome;
use talosprov_sim::Simulator;
use talosprov_sim::state::SimOptions;

/// The snapshot size measured against the small one; three times it shows
/// whether the peak grows with the snapshot (the simulator keeps at most
/// 256 MiB).
const LARGE: u64 = 64 * 1024 * 1024;

/// Where the snapshots go: the folder `snapshots` beside the topology, or
/// moto's bucket.
enum Dest<'a> {
    Folder,
    S3(&'a moto::Moto),
}

impl Dest<'_> {
    fn topology_value(&self) -> &'static str {
        match self {
            Dest::Folder => "snapshots",
            Dest::S3(_) => "s3://bench/etcd",
        }
    }

    fn label(&self) -> &'static str {
        match self {
            Dest::Folder => "folder",
            Dest::S3(_) => "S3",
        }
    }

    /// The newest archive's manifest `plaintext_bytes` and its own size.
    async fn newest(&self, dir: &Path) -> anyhow::Result<(u64, u64)> {
        match self {
            Dest::Folder => newest_archive(&dir.join("snapshots")),
            Dest::S3(moto) => {
                let objects = moto.objects("bench").await;
                let (key, size) = objects
                    .iter()
                    .filter(|(k, _)| k.ends_with(".snapshot.age"))
                    .max_by(|a, b| a.0.cmp(b.0))
                    .ok_or_else(|| anyhow::anyhow!("no archive in the bucket"))?;
                let manifest = moto
                    .get("bench", &key.replace(".snapshot.age", ".json"))
                    .await;
                let manifest: serde_json::Value = serde_json::from_slice(&manifest)?;
                Ok((manifest["plaintext_bytes"].as_u64().unwrap_or(0), *size))
            }
        }
    }
}

fn topology(net: u8, factory: &str, ca_file: &str, destination: &str) -> String {
    format!(
        "cluster:\n  name: bench\n  talos_version: v1.13.8\n  kubernetes_version: v1.36.2\n  \
         vip: 127.4.{net}.99\n  gateway: 127.0.0.1\n  prefix_length: 8\n  nameservers: [127.0.0.1]\n\
         proxmox:\n  node: pve1\n  datastore: local-lvm\n  image_storage: local\n  bridge: vmbr0\n  \
         pool: BENCH\n  ca_file: {ca_file}\nimage_factory:\n  url: {factory}\n\
         schematics:\n  base: {{ extensions: [siderolabs/qemu-guest-agent] }}\n\
         default_schematic: base\nbackup:\n  destination: {destination}\n  keep_last: 2\n  keep_daily: 0\n\
         nodes:\n\
         \x20 - {{ hostname: cp-01, ip: 127.4.{net}.100, role: controlplane, cores: 2, memory: 4096, disk_size: 20 }}\n\
         \x20 - {{ hostname: wk-01, ip: 127.4.{net}.101, role: worker, cores: 2, memory: 4096, disk_size: 20 }}\n"
    )
}

async fn cli(args: &[&str]) -> anyhow::Result<()> {
    let cli = Cli::try_parse_from(std::iter::once("talosprov").chain(args.iter().copied()))?;
    match talosprov::cli::run(cli).await {
        Ok(Outcome::Success | Outcome::Changes) => Ok(()),
        Err(e) => anyhow::bail!("talosprov {}: {e:?}", args.join(" ")),
    }
}

/// One child run.
struct Run {
    wall: Duration,
    max_rss_kib: i64,
    exit: String,
    last_line: String,
}

/// Run `binary ARGS` in `dir`, waiting with `wait4` for the child's own peak
/// resident set (on a blocking thread: the simulator serves it meanwhile).
async fn measure(binary: &Path, dir: &Path, args: &[&str]) -> anyhow::Result<Run> {
    let (binary, dir) = (binary.to_path_buf(), dir.to_path_buf());
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    tokio::task::spawn_blocking(move || -> anyhow::Result<Run> {
        let out = std::fs::File::create(dir.join("output.txt"))?;
        let err = out.try_clone()?;
        let mut command = Command::new(&binary);
        command
            .args(&args)
            .current_dir(&dir)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        // SAFETY: the hook does nothing. Having one makes std fork and exec
        // rather than posix_spawn (vfork), so the child's peak resident set
        // is its own.
        unsafe { command.pre_exec(|| Ok(())) };
        let start = Instant::now();
        let child = command.spawn()?;
        let pid = child.id() as libc::pid_t;
        let mut status: libc::c_int = 0;
        // SAFETY: a zeroed rusage is a valid value for wait4 to fill in.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: pid is our child, not waited for yet; both pointers are valid.
        let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        let wall = start.elapsed();
        anyhow::ensure!(waited == pid, "wait4: {}", std::io::Error::last_os_error());
        let status = std::process::ExitStatus::from_raw(status);
        let exit = match (status.code(), status.signal()) {
            (Some(code), _) => code.to_string(),
            (None, Some(signal)) => format!("signal {signal}"),
            _ => "?".into(),
        };
        let text = std::fs::read_to_string(dir.join("output.txt")).unwrap_or_default();
        let last_line = text
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
            .chars()
            .take(120)
            .collect();
        Ok(Run {
            wall,
            max_rss_kib: usage.ru_maxrss,
            exit,
            last_line,
        })
    })
    .await?
}

/// The newest archive in `dir` and its manifest's plaintext size.
fn newest_archive(dir: &Path) -> anyhow::Result<(u64, u64)> {
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.path()))
        .collect::<Result<_, _>>()?;
    names.retain(|p| p.to_string_lossy().ends_with(".snapshot.age"));
    names.sort();
    let archive = names.pop().ok_or_else(|| anyhow::anyhow!("no archive"))?;
    let manifest = archive.to_string_lossy().replace(".snapshot.age", ".json");
    let manifest: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(manifest)?)?;
    Ok((
        manifest["plaintext_bytes"].as_u64().unwrap_or(0),
        std::fs::metadata(&archive)?.len(),
    ))
}

/// Apply a two-node cluster, pad its snapshot to `padding` bytes, then time
/// a snapshot and a restore; rows of (what, snapshot bytes, archive bytes,
/// run).
async fn run(
    binary: &Path,
    net: u8,
    padding: u64,
    dest: &Dest<'_>,
) -> anyhow::Result<Vec<(String, u64, u64, Run)>> {
    let pve = fakepve::FakePve::start(fakepve::FakeOptions::default()).await;
    let factory = factory::Factory::start().await;
    let ips: Vec<IpAddr> = [100, 101]
        .iter()
        .map(|i| format!("127.4.{net}.{i}").parse())
        .collect::<Result<_, _>>()?;
    let sim = Simulator::start(
        &ips,
        SimOptions {
            talos_version: "v1.13.8".into(),
            reboot_delay: Duration::from_millis(200),
            ..SimOptions::default()
        },
    )
    .await?;
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("cluster.yaml");
    std::fs::create_dir_all(dir.path().join("patches"))?;
    std::fs::write(
        &file,
        topology(
            net,
            &factory.url,
            &pve.ca_file.display().to_string(),
            dest.topology_value(),
        ),
    )?;
    let file = file.display().to_string();
    let secrets = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/secrets.yaml");
    // SAFETY: set before any thread of ours reads the environment for this
    // run; runs are sequential, and the children inherit them.
    unsafe {
        std::env::set_var("PROXMOX_VE_ENDPOINT", &pve.url);
        std::env::set_var(
            "PROXMOX_VE_API_TOKEN",
            format!("{}={}", fakepve::ROOT_TOKEN_ID, fakepve::ROOT_TOKEN_SECRET),
        );
    }
    cli(&["secrets", "import", secrets, "-f", &file]).await?;
    cli(&["apply", "-f", &file, "--auto-approve"]).await?;
    let cp = sim.node(ips[0]).ok_or_else(|| anyhow::anyhow!("no node"))?;
    cp.pad_etcd_snapshot(padding);

    let mut rows = Vec::new();
    let snapshot = measure(binary, dir.path(), &["etcd", "snapshot", "-f", &file]).await?;
    let (plain, sealed) = dest.newest(dir.path()).await?;
    rows.push((
        format!("etcd snapshot, {}", dest.label()),
        plain,
        sealed,
        snapshot,
    ));

    // The control plane is lost: its VM deleted, its node reinstalled.
    let client = pve.client();
    let vms = pve.get("/cluster/resources").await;
    for vm in vms.as_array().into_iter().flatten() {
        if vm["type"] == "qemu" && vm["name"] == "cp-01" {
            let vmid = u32::try_from(vm["vmid"].as_u64().unwrap_or(0))?;
            let node = vm["node"].as_str().unwrap_or("pve1");
            talosprov_proxmox::lifecycle::destroy_vm(&client, node, vmid, 5).await?;
        }
    }
    cp.wipe();
    let restore = measure(
        binary,
        dir.path(),
        &[
            "etcd",
            "restore",
            "--from",
            "latest",
            "-auto-approve",
            "-f",
            &file,
        ],
    )
    .await?;
    rows.push((
        format!("etcd restore, {}", dest.label()),
        plain,
        sealed,
        restore,
    ));
    sim.shutdown().await;
    Ok(rows)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let binary = std::env::args().nth(1).map_or_else(
        || {
            PathBuf::from(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/target/release/talosprov"
            ))
        },
        PathBuf::from,
    );
    anyhow::ensure!(
        binary.exists(),
        "{} is missing: cargo build --release --bin talosprov",
        binary.display()
    );
    // The children run in the cluster's folder.
    let binary = binary.canonicalize()?;
    let mut rows = Vec::new();
    for (net, padding) in [(201u8, 0u64), (202, LARGE), (206, 3 * LARGE)] {
        rows.extend(run(&binary, net, padding, &Dest::Folder).await?);
    }
    let s3 = moto::Moto::start(&["bench"]).await;
    // SAFETY: set before the S3 runs; the children inherit them.
    for (key, value) in s3.env() {
        unsafe { std::env::set_var(key, value) };
    }
    for (net, padding) in [(203u8, 0u64), (204, LARGE), (205, 3 * LARGE)] {
        rows.extend(run(&binary, net, padding, &Dest::S3(&s3)).await?);
    }
    println!();
    println!("binary: {}", binary.display());
    println!(
        "{:<22} {:>14} {:>14} {:>8} {:>12} {:>5}  last line",
        "command", "snapshot B", "archive B", "wall s", "peak RSS MiB", "exit"
    );
    for (what, plain, sealed, r) in rows {
        println!(
            "{what:<22} {plain:>14} {sealed:>14} {:>8.2} {:>12.1} {:>5}  {}",
            r.wall.as_secs_f64(),
            r.max_rss_kib as f64 / 1024.0,
            r.exit,
            r.last_line
        );
    }
    Ok(())
}
