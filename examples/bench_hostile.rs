//! Benchmark of `talosprov validate` on the worst input of each hostile kind: alias bombs
//! (quadratic and exponential), deep nesting (topology and patch), template loops (one node,
//! and every node of the largest cluster accepted), huge files (a 64 MiB patch, a value that
//! fills the 4 MiB limit quoted in an error, a 4 MiB topology of one-line nodes, the most
//! nodes accepted), out-of-range numbers (past u32, and millions of digits) and invalid
//! UTF-8 at the end of a 4 MiB file. Each input is written into its own temporary folder,
//! the binary validates it, and the wall time, the child's peak resident set (`wait4`'s
//! `ru_maxrss`), the exit code and the first diagnostic (with where it points) are printed.
//! Then the hostile corpus of `tests/fixtures/hostile/corpus.rs` (templates, add-on sources,
//! Helm values, the state file, the budgets of a node and of a command), each run with its
//! own command, against the goal of 256 MiB and 2 s.
//! Not a test: nothing is asserted; the figures go to README.md.
//!
//! Run: cargo build --release --bin talosprov && cargo run --example bench_hostile
//! [-- PATH/TO/talosprov]   (the release binary is measured; the benchmark may be a debug build)

#[path = "../tests/fixtures/hostile/corpus.rs"]
mod corpus;

use std::fmt::Write as _;
use std::io::Write as _;
use std::os::unix::process::CommandExt as _;
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A one-node cluster; the hostile part is added to it or beside it.
const BASE: &str = "cluster:\n  name: lab\n  talos_version: v1.13.8\n  gateway: 10.0.0.1\n\
proxmox:\n  endpoint: https://pve.test:8006\n  node: pve\n  datastore: local-lvm\n\
nodes:\n  - {hostname: cp-01, ip: 10.0.0.101, cores: 2, memory: 4096}\n";

/// The input file size limit (talosprov's `MAX_INPUT_BYTES`).
const LIMIT: usize = 4 * 1024 * 1024;

/// A file of the input, written piece by piece so that the benchmark itself stays small
/// (its resident set at the fork is part of what the kernel reports for the child).
struct Out(std::io::BufWriter<std::fs::File>, usize);

impl Out {
    fn create(dir: &Path, path: &str) -> std::io::Result<Out> {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().expect("a parent"))?;
        Ok(Out(
            std::io::BufWriter::new(std::fs::File::create(path)?),
            0,
        ))
    }

    fn put(&mut self, bytes: impl AsRef<[u8]>) -> std::io::Result<()> {
        let bytes = bytes.as_ref();
        self.1 += bytes.len();
        self.0.write_all(bytes)
    }

    /// `unit` repeated `count` times.
    fn repeat(&mut self, unit: &str, count: usize) -> std::io::Result<()> {
        for _ in 0..count {
            self.put(unit)?;
        }
        Ok(())
    }
}

/// One hostile input: what it is, and how to write it into an empty folder (the topology
/// is `cluster.yaml`, patches go under `patches/`); writing returns the input's description.
type Case = (&'static str, fn(&Path) -> std::io::Result<String>);

/// A topology of `n` one-line nodes (at most the size limit allows), each with its own
/// address and VM ID; returns the count written.
fn nodes_file(dir: &Path, n: usize) -> std::io::Result<usize> {
    let mut t = Out::create(dir, "cluster.yaml")?;
    t.put(
        BASE.replace(
            "  gateway: 10.0.0.1\n",
            "  gateway: 10.0.0.1\n  prefix_length: 8\n",
        )
        .replace(
            "  - {hostname: cp-01, ip: 10.0.0.101, cores: 2, memory: 4096}\n",
            "",
        ),
    )?;
    for i in 0..n {
        let role = if i == 0 { "controlplane" } else { "worker" };
        let line = format!(
            "  - {{hostname: n{i}, ip: 10.{}.{}.{}, vm_id: {}, role: {role}, cores: 1, memory: 4096}}\n",
            1 + i / 62_500,
            (i / 250) % 250,
            1 + i % 250,
            1000 + i
        );
        if t.1 + line.len() > LIMIT {
            return Ok(i);
        }
        t.put(line)?;
    }
    Ok(n)
}

fn base(dir: &Path) -> std::io::Result<()> {
    Out::create(dir, "cluster.yaml")?.put(BASE)
}

const LOOP: &str =
    "{% for i in range(100000) %}{% for j in range(100000) %}{{ i }}{% endfor %}{% endfor %}\n";

const CASES: &[Case] = &[
    // Alias bombs. Quadratic: one 100 KB anchored string, aliased as often as the size limit
    // allows. Exponential: nine levels of ten aliases to the level below.
    ("alias bomb, quadratic", |dir| {
        let mut t = Out::create(dir, "cluster.yaml")?;
        t.put(format!(
            "{BASE}x-big: &a \"{}\"\nx-refs: [",
            "x".repeat(100_000)
        ))?;
        let refs = (LIMIT - t.1 - 8) / 4;
        t.repeat("*a, ", refs)?;
        t.put("*a]\n")?;
        Ok(format!(
            "a 100 KB string aliased {} times (4 MiB)",
            refs + 1
        ))
    }),
    ("alias bomb, exponential", |dir| {
        let mut t = Out::create(dir, "cluster.yaml")?;
        t.put(format!("{BASE}x0: &a0 \"{}\"\n", "x".repeat(100)))?;
        for level in 1..=9 {
            let list = vec![format!("*a{}", level - 1); 10].join(", ");
            t.put(format!("x{level}: &a{level} [{list}]\n"))?;
        }
        Ok("9 levels of 10 aliases: 10^9 copies of 100 bytes".into())
    }),
    // Deep nesting, as deep as the size limit allows.
    ("deep nesting, topology", |dir| {
        let mut t = Out::create(dir, "cluster.yaml")?;
        t.put(format!("{BASE}x: "))?;
        let depth = (LIMIT - t.1 - 2) / 2;
        t.repeat("[", depth)?;
        t.repeat("]", depth)?;
        t.put("\n")?;
        Ok(format!("{depth} nested flow sequences (4 MiB)"))
    }),
    ("deep nesting, patch", |dir| {
        base(dir)?;
        let mut p = Out::create(dir, "patches/common/10-deep.yaml")?;
        p.put("machine:\n  sysctls:\n    a:\n      ")?;
        let depth = (LIMIT - p.1 - 2) / 2;
        p.repeat("- ", depth)?;
        p.put("x\n")?;
        Ok(format!("{depth} nested block sequences in a patch (4 MiB)"))
    }),
    // Template loops: 10^10 steps in one node's patch, and the same patch on each of the
    // most nodes a topology may have (each render has its own budget, all of them one more).
    ("template loop, one node", |dir| {
        base(dir)?;
        Out::create(dir, "patches/common/10-loop.yaml.j2")?.put(LOOP)?;
        Ok("two nested range(100000) loops".into())
    }),
    ("template loop, every node", |dir| {
        let nodes = nodes_file(dir, 1000)?;
        Out::create(dir, "patches/common/10-loop.yaml.j2")?.put(LOOP)?;
        Ok(format!("the same loop on {nodes} nodes"))
    }),
    // Huge files: a 64 MiB patch; a value that fills the limit, quoted in an error; the most
    // nodes a 4 MiB topology holds; and the most nodes talosprov accepts.
    ("huge file", |dir| {
        base(dir)?;
        let mut p = Out::create(dir, "patches/common/10-huge.yaml")?;
        p.put("machine:\n  sysctls:\n    a: \"")?;
        p.repeat(&"x".repeat(1024), 64 * 1024)?;
        p.put("\"\n")?;
        Ok("a 64 MiB patch".into())
    }),
    ("huge value in an error", |dir| {
        base(dir)?;
        let mut p = Out::create(dir, "patches/common/10-value.yaml")?;
        p.put("machine:\n  sysctls: \"")?;
        let n = LIMIT - p.1 - 2;
        p.repeat("x", n)?;
        p.put("\"\n")?;
        Ok(format!("a {n}-byte string where a mapping belongs"))
    }),
    ("huge topology", |dir| {
        let n = nodes_file(dir, usize::MAX)?;
        Ok(format!("{n} one-line nodes (4 MiB)"))
    }),
    ("most nodes", |dir| {
        let n = nodes_file(dir, 1000)?;
        Ok(format!("{n} nodes, all valid"))
    }),
    // Out-of-range numbers: past u32, and as many digits as fit.
    ("out-of-range number", |dir| {
        let t = BASE.replace("memory: 4096", "memory: 4096, vm_id: 4294967296");
        Out::create(dir, "cluster.yaml")?.put(t)?;
        Ok("vm_id: 4294967296".into())
    }),
    ("out-of-range number, long", |dir| {
        let (head, tail) = BASE.split_once("4096").expect("memory");
        let mut t = Out::create(dir, "cluster.yaml")?;
        t.put(head)?;
        let digits = LIMIT - BASE.len();
        t.repeat("9", digits)?;
        t.put(tail)?;
        Ok(format!("memory: a {digits}-digit number"))
    }),
    // Invalid UTF-8 in the last line of a file at the limit.
    ("invalid UTF-8", |dir| {
        let mut t = Out::create(dir, "cluster.yaml")?;
        t.put(format!("{BASE}# "))?;
        let n = LIMIT - t.1 - 2;
        t.repeat("x", n)?;
        t.put(b"\xff\n")?;
        Ok("a 0xff byte at the end of a 4 MiB topology".into())
    }),
];

/// What one run gave.
struct Run {
    wall: Duration,
    max_rss_kib: i64,
    exit: String,
    first: String,
}

/// Run `talosprov ARGS` in `dir` with `env` set, waiting with `wait4` for the child's own
/// peak resident set.
fn validate(
    binary: &Path,
    dir: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> std::io::Result<Run> {
    let stderr = std::fs::File::create(dir.join("stderr.txt"))?;
    let start = Instant::now();
    let mut command = Command::new(binary);
    command
        .args(args)
        .envs(env.iter().copied())
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .env_remove("PROXMOX_VE_ENDPOINT")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(stderr);
    // SAFETY: the hook does nothing. Having one makes std fork and exec rather than
    // posix_spawn (vfork): with vfork the kernel counts the benchmark's own peak resident set
    // in the child's, with fork only what the benchmark holds at the fork.
    unsafe { command.pre_exec(|| Ok(())) };
    let child = command.spawn()?;
    let pid = child.id() as libc::pid_t;
    let mut status: libc::c_int = 0;
    // SAFETY: a zeroed rusage is a valid value for wait4 to fill in.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: pid is our child, not waited for yet; both pointers are valid for writes.
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    let wall = start.elapsed();
    if waited != pid {
        return Err(std::io::Error::last_os_error());
    }
    let status = std::process::ExitStatus::from_raw(status);
    let exit = match (status.code(), status.signal()) {
        (Some(code), _) => code.to_string(),
        (None, Some(signal)) => format!("signal {signal}"),
        _ => "?".into(),
    };
    let text = std::fs::read_to_string(dir.join("stderr.txt")).unwrap_or_default();
    let mut lines = text.lines();
    let first = lines
        .by_ref()
        .find(|l| l.starts_with("error") || l.starts_with("warning"))
        .map(|l| {
            let mut l: String = l.chars().take(110).collect();
            if let Some(at) = text.lines().find(|l| l.trim_start().starts_with("-->")) {
                let _ = write!(l, " [{}]", at.trim_start().trim_start_matches("--> "));
            }
            l
        })
        .unwrap_or_else(|| {
            let all: Vec<&str> = text
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .collect();
            let all = all.join(" ");
            if all.is_empty() {
                "(no diagnostic: valid)".to_owned()
            } else {
                all.chars().take(160).collect()
            }
        });
    Ok(Run {
        wall,
        max_rss_kib: usage.ru_maxrss,
        exit,
        first,
    })
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let binary = match std::env::args().nth(1) {
        Some(p) => PathBuf::from(p),
        None => {
            // target/release/examples/bench_hostile -> target/release/talosprov
            let exe = std::env::current_exe()?;
            exe.parent()
                .and_then(Path::parent)
                .map(|d| d.join("talosprov"))
                .ok_or("no target folder")?
        }
    };
    if !binary.is_file() {
        return Err(format!(
            "{} not found: run `cargo build --release --bin talosprov` first, or pass the binary",
            binary.display()
        )
        .into());
    }
    let binary = binary.canonicalize()?;
    println!("talosprov validate, {}", binary.display());
    println!(
        "{:<27} {:>9} {:>10} {:>5}  input; first diagnostic [where]",
        "kind", "wall", "peak RSS", "exit"
    );
    for (kind, write) in CASES {
        let dir = tempfile::tempdir()?;
        let input = write(dir.path())?;
        let run = validate(
            &binary,
            dir.path(),
            &["validate", "-f", "cluster.yaml"],
            &[],
        )?;
        println!(
            "{:<27} {:>7.0}ms {:>6.1} MiB {:>5}  {}\n{:<27} {}",
            kind,
            run.wall.as_secs_f64() * 1000.0,
            run.max_rss_kib as f64 / 1024.0,
            run.exit,
            input,
            "",
            run.first
        );
    }
    println!("\nthe hostile corpus (tests/fixtures/hostile), goal: at most 256 MiB and 2 s each");
    for case in corpus::cases() {
        let dir = tempfile::tempdir()?;
        (case.write)(dir.path())?;
        let run = validate(&binary, dir.path(), case.args, case.env)?;
        let stderr = std::fs::read_to_string(dir.path().join("stderr.txt")).unwrap_or_default();
        let expected = match run.exit.as_str() {
            "0" => case.may_pass,
            "1" => stderr.contains(case.names),
            _ => false,
        };
        let over = run.wall.as_secs_f64() > 2.0 || run.max_rss_kib > 256 * 1024;
        println!(
            "{:<50} {:>7.0}ms {:>6.1} MiB {:>5}  {}{}{}\n{:<50} {}",
            case.name,
            run.wall.as_secs_f64() * 1000.0,
            run.max_rss_kib as f64 / 1024.0,
            run.exit,
            case.args[0],
            if over { " OVER THE GOAL" } else { "" },
            if expected { "" } else { " UNEXPECTED OUTCOME" },
            "",
            run.first
        );
    }
    // SAFETY: a zeroed rusage is valid; RUSAGE_SELF needs no other argument.
    let mut own: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: the pointer is valid for writes.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut own) };
    println!(
        "(the benchmark's own peak, at most part of each figure above: {:.1} MiB)",
        own.ru_maxrss as f64 / 1024.0
    );
    Ok(())
}
