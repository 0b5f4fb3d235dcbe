//! Benchmark: `talosprov adopt --from-tfstate --dry-run` of an OpenTofu state
//! (bpg/proxmox and siderolabs/talos, as the providers record them) whose
//! nodes each carry N config patches (a node label each), for N = 1,000,
//! 3,000 and 10,000. For each it prints the wall time and the child's peak
//! resident set (`wait4`'s `ru_maxrss`), and the time per patch: adoption is
//! linear when that stays flat.
//!
//! Needs nothing running: the state holds each node's running config, so
//! no node is asked. Not a test: nothing is asserted; the figures go to
//! README.md.
//!
//!     cargo build --release --bin talosprov
//!     cargo run --release --example bench_adopt [-- PATH/TO/talosprov [N ...]]

use std::os::unix::process::CommandExt as _;
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

#[path = "../tests/it/support/tfstate.rs"]
mod tfstate;

use tfstate::{NODES, provider_state};

/// Run `talosprov adopt --dry-run` on `file`; (seconds, peak RSS in MiB).
fn adopt(bin: &Path, file: &Path, out: &Path) -> std::io::Result<(f64, f64)> {
    let log = out.with_extension("log");
    let err = std::fs::File::create(&log)?;
    let mut command = Command::new(bin);
    command
        .args(["adopt", "--dry-run", "--from-tfstate"])
        .arg(file)
        .arg("--out")
        .arg(out)
        .args(tfstate::ADOPT_SETTINGS)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(err);
    // SAFETY: the hook does nothing. Having one makes std fork and exec
    // rather than posix_spawn (vfork), so the child's peak resident set is
    // its own.
    unsafe { command.pre_exec(|| Ok(())) };
    let started = Instant::now();
    // wait4 below reaps it (and reads its peak resident set).
    let child = command.spawn()?;
    let pid = child.id() as libc::pid_t;
    let mut status: libc::c_int = 0;
    // SAFETY: a zeroed rusage is a valid value for wait4 to fill in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: pid is our child, not waited for yet; both pointers are valid.
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let secs = started.elapsed().as_secs_f64();
    assert_eq!(waited, pid, "wait4: {}", std::io::Error::last_os_error());
    if !std::process::ExitStatus::from_raw(status).success() {
        panic!(
            "adopt failed:\n{}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    }
    Ok((secs, usage.ru_maxrss as f64 / 1024.0))
}

fn main() {
    let mut args = std::env::args().skip(1);
    let bin = PathBuf::from(
        args.next()
            .unwrap_or_else(|| "target/release/talosprov".into()),
    );
    let counts: Vec<usize> = {
        let given: Vec<usize> = args.map(|a| a.parse().expect("a count")).collect();
        if given.is_empty() {
            vec![1_000, 3_000, 10_000]
        } else {
            given
        }
    };
    let secrets_yaml = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/secrets.yaml"),
    )
    .expect("the fixture bundle");
    let temp = tempfile::tempdir().expect("temp dir");
    // BENCH_ADOPT_KEEP=DIR writes the states there instead, to profile one run.
    let kept = std::env::var_os("BENCH_ADOPT_KEEP").map(PathBuf::from);
    let dir = kept.as_deref().unwrap_or(temp.path());
    println!("| config_patches per node | nodes | adopt --dry-run | per patch | peak RSS |");
    println!("|---|---|---|---|---|");
    for n in counts {
        let file = dir.join(format!("n{n}.tfstate"));
        std::fs::write(
            &file,
            serde_json::to_vec(&provider_state(&secrets_yaml, n)).expect("JSON"),
        )
        .expect("write the state");
        let (secs, rss) = adopt(&bin, &file, &dir.join(format!("out-{n}"))).expect("run talosprov");
        println!(
            "| {n} | {} | {secs:.2} s | {:.0} µs | {rss:.1} MiB |",
            NODES.len(),
            secs * 1e6 / n as f64
        );
    }
}
