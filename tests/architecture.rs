//! The workspace's architecture, checked: the core crate depends on no async
//! runtime, HTTP or gRPC stack and does no I/O of its own, and the `talosprov`
//! binary does not link the simulator.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// A TOML file of the workspace, parsed.
fn read_toml(path: &Path) -> toml::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The normal (linked) dependency names of each workspace member, by package
/// name, from its `Cargo.toml`: `[dependencies]` and
/// `[target.*.dependencies]`, not dev- or build-dependencies.
fn members() -> BTreeMap<String, BTreeSet<String>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut dirs = vec![root.to_path_buf()];
    for entry in std::fs::read_dir(root.join("crates")).unwrap() {
        dirs.push(entry.unwrap().path());
    }
    let mut out = BTreeMap::new();
    for dir in dirs {
        let manifest = read_toml(&dir.join("Cargo.toml"));
        let Some(name) = manifest
            .get("package")
            .and_then(|p| p.get("name"))
            .and_then(|n| n.as_str())
        else {
            continue;
        };
        let mut deps = BTreeSet::new();
        let mut tables = vec![manifest.get("dependencies")];
        if let Some(targets) = manifest.get("target").and_then(|t| t.as_table()) {
            tables.extend(targets.values().map(|t| t.get("dependencies")));
        }
        for table in tables.into_iter().flatten() {
            deps.extend(table.as_table().unwrap().keys().cloned());
        }
        out.insert(name.to_owned(), deps);
    }
    out
}

/// The names of every package `package` links, through normal dependencies
/// only. Workspace members are read from their manifests (so a member's
/// dev-dependencies don't count); everything else from `Cargo.lock`, which
/// lists every platform's dependencies, so the answer is a superset of what
/// any one target links. Reads files only: no `cargo` call, no network.
fn linked(package: &str) -> BTreeSet<String> {
    let members = members();
    let lock = read_toml(&Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.lock"));
    let mut locked: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for entry in lock["package"]
        .as_array()
        .expect("[[package]] in Cargo.lock")
    {
        let deps = locked
            .entry(entry["name"].as_str().unwrap().to_owned())
            .or_default();
        for dep in entry
            .get("dependencies")
            .and_then(|d| d.as_array())
            .into_iter()
            .flatten()
        {
            let dep = dep.as_str().unwrap();
            deps.insert(dep.split(' ').next().unwrap().to_owned());
        }
    }
    assert!(
        members.contains_key(package),
        "no workspace member {package}"
    );
    let mut seen = BTreeSet::new();
    let mut todo = vec![package.to_owned()];
    while let Some(name) = todo.pop() {
        if !seen.insert(name.clone()) {
            continue;
        }
        let deps = members.get(&name).or_else(|| locked.get(&name));
        todo.extend(deps.into_iter().flatten().cloned());
    }
    seen.remove(package);
    seen
}

#[test]
fn the_core_crate_links_no_runtime_http_or_grpc_stack() {
    let core = linked("talosprov-core");
    let forbidden: Vec<&str> = ["tokio", "reqwest", "hyper", "tonic"]
        .into_iter()
        .filter(|f| core.contains(*f))
        .collect();
    assert!(
        forbidden.is_empty(),
        "talosprov-core must stay free of I/O stacks, but links {forbidden:?}"
    );
    assert!(
        core.contains("serde_yaml_ng"),
        "the graph walk found the core's own dependencies"
    );
}

#[test]
fn the_talosprov_binary_does_not_link_the_simulator() {
    let root = linked("talosprov");
    assert!(root.contains("talosprov-engine"));
    assert!(
        !root.contains("talosprov-sim"),
        "the simulator is a dev-dependency only"
    );
    let engine = linked("talosprov-engine");
    assert!(!engine.contains("talosprov-sim"));
}

/// The `.rs` files under `dir`, recursively, sorted.
fn rust_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("source folder") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

#[test]
fn the_core_crate_reads_no_file_environment_clock_or_entropy() {
    // Its unit tests may (tempfile, say): only the code before a file's first
    // `#[cfg(test)]` is checked, without its comments.
    const FORBIDDEN: [&str; 14] = [
        "std::fs",
        "std::env",
        "TcpStream",
        "TcpListener",
        "UdpSocket",
        "std::process",
        "File::open",
        "SystemTime::now",
        "Instant::now",
        "now_utc",
        "thread_rng",
        "OsRng",
        "from_entropy",
        "tokio::",
    ];
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/core/src");
    let mut found = Vec::new();
    for file in rust_files(&root) {
        let text = std::fs::read_to_string(&file).expect("source");
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for (n, line) in code.lines().enumerate() {
            let line = line.trim_start();
            if line.starts_with("//") {
                continue;
            }
            for f in FORBIDDEN.iter().filter(|f| line.contains(**f)) {
                found.push(format!("{}:{}: {f}", file.display(), n + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "the core takes files, the environment, the clock and randomness from its caller:\n{}",
        found.join("\n")
    );
    assert!(
        rust_files(&root).len() > 20,
        "the walk found the core's files"
    );
}
