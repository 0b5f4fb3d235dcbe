//! `render`, `secrets import` and `secrets export`, run as a user would: secrets stay
//! redacted unless asked, `--out-dir` files are 0600 and hold the exact config, and a bundle
//! imported into a state comes back out byte for byte and is what `render` then uses.

use crate::support::cli::run_clean;
use crate::support::fixtures::{HELM_STAND_IN, SECRETS_FILE};
use std::path::{Path, PathBuf};
use std::process::Output;
use talosprov_machine::secrets_file::parse_secrets_yaml;
use talosprov_statefile::format::State;

const HOMELAB: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/homelab/cluster.yaml");

/// Run talosprov in `dir` with a clean environment (no state keys, no http backend), and
/// the `helm` stand-in for the homelab's charts.
fn run(dir: &Path, args: &[&str]) -> Output {
    run_clean(
        dir,
        args,
        &[("NO_COLOR", "1"), ("TALOSPROV_HELM", HELM_STAND_IN)],
    )
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn trustd_token() -> String {
    let bundle = parse_secrets_yaml(&std::fs::read_to_string(SECRETS_FILE).unwrap()).unwrap();
    bundle.trustd_token.expose().clone()
}

#[cfg(unix)]
fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

#[test]
fn render_redacts_secrets_unless_show_sensitive() {
    let dir = tempfile::tempdir().unwrap();
    let args = [
        "render",
        "talos-worker-01",
        "-f",
        HOMELAB,
        "--secrets",
        SECRETS_FILE,
    ];
    let out = run(dir.path(), &args);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let redacted = text(&out.stdout);
    assert!(redacted.starts_with("version: v1alpha1\n"), "{redacted}");
    assert!(redacted.contains("token: (sensitive)"), "{redacted}");
    assert!(!redacted.contains(&trustd_token()));

    let shown = run(dir.path(), &[&args[..], &["--show-sensitive"]].concat());
    assert!(shown.status.success());
    assert!(text(&shown.stdout).contains(&trustd_token()));
}

#[test]
fn render_several_nodes_names_each_one() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(
        dir.path(),
        &[
            "render",
            "talos-gpu-01",
            "talos-controlplane-01",
            "-f",
            HOMELAB,
            "--secrets",
            SECRETS_FILE,
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let gpu = stdout
        .find("# talos-gpu-01 (worker, 192.168.1.123)\n")
        .unwrap();
    let cp = stdout
        .find("---\n# talos-controlplane-01 (controlplane, 192.168.1.121)\n")
        .unwrap();
    assert!(gpu < cp, "nodes print in the order asked");
}

#[cfg(unix)]
#[test]
fn render_out_dir_writes_one_private_file_per_node_with_the_exact_config() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("configs");
    let out = run(
        dir.path(),
        &[
            "render",
            "-f",
            HOMELAB,
            "--secrets",
            SECRETS_FILE,
            "--out-dir",
            out_dir.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let mut names: Vec<String> = std::fs::read_dir(&out_dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "talos-controlplane-01.yaml",
            "talos-gpu-01.yaml",
            "talos-worker-01.yaml"
        ]
    );
    for name in &names {
        let path = out_dir.join(name);
        assert_eq!(mode(&path), 0o600, "{name}");
        let written = std::fs::read_to_string(&path).unwrap();
        assert!(
            written.contains(&trustd_token()),
            "{name} holds the real config"
        );
        assert!(!written.contains("(sensitive)"), "{name}");
    }
    // Rendering the same node to stdout with secrets gives the same bytes.
    let one = run(
        dir.path(),
        &[
            "render",
            "talos-gpu-01",
            "-f",
            HOMELAB,
            "--secrets",
            SECRETS_FILE,
            "--show-sensitive",
        ],
    );
    let file = std::fs::read(out_dir.join("talos-gpu-01.yaml")).unwrap();
    assert_eq!(one.stdout, file);
}

#[test]
fn render_of_an_unknown_node_suggests_the_closest() {
    let dir = tempfile::tempdir().unwrap();
    let out = run(
        dir.path(),
        &[
            "render",
            "talos-wroker-01",
            "-f",
            HOMELAB,
            "--secrets",
            SECRETS_FILE,
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr).replace(HOMELAB, "examples/homelab/cluster.yaml");
    insta::assert_snapshot!(stderr);
}

fn state_path(dir: &Path) -> PathBuf {
    dir.join("talosprov.tfstate")
}

#[cfg(unix)]
#[test]
fn secrets_import_then_export_round_trips_byte_identical() {
    let dir = tempfile::tempdir().unwrap();
    let state = state_path(dir.path());
    let state_arg = state.to_str().unwrap();
    let import = run(
        dir.path(),
        &["secrets", "import", SECRETS_FILE, "--state", state_arg],
    );
    assert!(import.status.success(), "{}", text(&import.stderr));
    assert_eq!(mode(&state), 0o600);
    let stored = State::from_json(&std::fs::read(&state).unwrap()).unwrap();
    assert_eq!(stored.serial, 1);
    assert!(stored.secrets.is_some());

    // Piped stdout (not a terminal) gets the bundle.
    let export = run(dir.path(), &["secrets", "export", "--state", state_arg]);
    assert!(export.status.success(), "{}", text(&export.stderr));
    assert_eq!(export.stdout, std::fs::read(SECRETS_FILE).unwrap());

    let file = dir.path().join("exported.yaml");
    let file_arg = file.to_str().unwrap();
    let export = run(
        dir.path(),
        &["secrets", "export", "-o", file_arg, "--state", state_arg],
    );
    assert!(export.status.success(), "{}", text(&export.stderr));
    assert_eq!(
        std::fs::read(&file).unwrap(),
        std::fs::read(SECRETS_FILE).unwrap()
    );
    assert_eq!(mode(&file), 0o600);

    let again = run(
        dir.path(),
        &["secrets", "export", "-o", file_arg, "--state", state_arg],
    );
    assert_eq!(again.status.code(), Some(1));
    assert!(text(&again.stderr).contains("already exists (use --force"));
}

#[test]
fn secrets_import_refuses_a_state_that_has_secrets() {
    let dir = tempfile::tempdir().unwrap();
    let state = state_path(dir.path());
    let state_arg = state.to_str().unwrap();
    let first = run(
        dir.path(),
        &["secrets", "import", SECRETS_FILE, "--state", state_arg],
    );
    assert!(first.status.success(), "{}", text(&first.stderr));
    let before = std::fs::read(&state).unwrap();
    let second = run(
        dir.path(),
        &["secrets", "import", SECRETS_FILE, "--state", state_arg],
    );
    assert_eq!(second.status.code(), Some(1));
    assert!(
        text(&second.stderr).contains("already has a secrets bundle"),
        "{}",
        text(&second.stderr)
    );
    assert_eq!(
        std::fs::read(&state).unwrap(),
        before,
        "the state is untouched"
    );
}

#[test]
fn render_uses_the_secrets_bundle_in_the_state() {
    let dir = tempfile::tempdir().unwrap();
    let state = state_path(dir.path());
    let state_arg = state.to_str().unwrap();
    let import = run(
        dir.path(),
        &["secrets", "import", SECRETS_FILE, "--state", state_arg],
    );
    assert!(import.status.success(), "{}", text(&import.stderr));
    let from_state = run(
        dir.path(),
        &[
            "render",
            "talos-worker-01",
            "-f",
            HOMELAB,
            "--state",
            state_arg,
            "--show-sensitive",
        ],
    );
    assert!(from_state.status.success(), "{}", text(&from_state.stderr));
    assert!(
        !text(&from_state.stderr).contains("throwaway"),
        "no throwaway warning: {}",
        text(&from_state.stderr)
    );
    let from_file = run(
        dir.path(),
        &[
            "render",
            "talos-worker-01",
            "-f",
            HOMELAB,
            "--secrets",
            SECRETS_FILE,
            "--show-sensitive",
        ],
    );
    assert_eq!(from_state.stdout, from_file.stdout);
}

#[test]
fn export_without_a_state_says_what_to_run() {
    let dir = tempfile::tempdir().unwrap();
    let state = state_path(dir.path());
    let out = run(
        dir.path(),
        &["secrets", "export", "--state", state.to_str().unwrap()],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("no state found"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn render_and_secrets_help_are_written_for_users() {
    let dir = tempfile::tempdir().unwrap();
    for (name, args) in [
        ("render_help", vec!["render", "--help"]),
        ("secrets_import_help", vec!["secrets", "import", "--help"]),
        ("secrets_export_help", vec!["secrets", "export", "--help"]),
    ] {
        let out = run(dir.path(), &args);
        assert!(out.status.success());
        insta::assert_snapshot!(name, text(&out.stdout));
    }
}
