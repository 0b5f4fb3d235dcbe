//! Build facts for `talosprov version`: the git commit the binary is built
//! from, the target triple and the compiler's version. Each is passed to the
//! crate as a `TALOSPROV_BUILD_*` environment variable read with `env!`.
//!
//! The commit comes from `TALOSPROV_GIT_COMMIT` when set (a build from a
//! source archive, where there is no `.git`), else from `git rev-parse HEAD`,
//! else `unknown`. Nothing here reads the clock or an absolute path, so the
//! same commit built twice gives the same binary (see scripts/dist.sh).

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=TALOSPROV_GIT_COMMIT");
    let commit = std::env::var("TALOSPROV_GIT_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .map(|c| c.trim().to_owned())
        .or_else(git_commit)
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=TALOSPROV_BUILD_COMMIT={commit}");

    let target = std::env::var("TARGET").unwrap_or_else(|_| "unknown".to_owned());
    println!("cargo:rustc-env=TALOSPROV_BUILD_TARGET={target}");

    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned());
    let version = Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|v| v.trim().trim_start_matches("rustc ").to_owned())
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=TALOSPROV_BUILD_RUSTC={version}");
}

/// `git rev-parse HEAD` in the crate's folder, and the files whose change
/// moves HEAD (so that a new commit rebuilds the version text).
fn git_commit() -> Option<String> {
    let dir = std::env::var("CARGO_MANIFEST_DIR").ok()?;
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(&dir)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .map(|s| s.trim().to_owned())
    };
    let git_dir = git(&["rev-parse", "--absolute-git-dir"])?;
    let git_dir = Path::new(&git_dir);
    let mut watched = vec![git_dir.join("HEAD"), git_dir.join("packed-refs")];
    if let Some(reference) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(git_dir.join(reference));
    }
    // A path that does not exist would rerun this script on every build.
    for path in watched.iter().filter(|p| p.exists()) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    git(&["rev-parse", "HEAD"]).filter(|c| c.len() == 40)
}
