//! Files of the repository the tests read: the root, the fixture secrets bundle
//! (`tests/fixtures/secrets.yaml`, a `talosctl gen secrets` bundle shared by
//! every test that renders or imports secrets) and the other fixtures.

use std::path::{Path, PathBuf};

/// The fixture secrets bundle's text, compiled in.
pub const SECRETS: &str = include_str!("../../fixtures/secrets.yaml");

/// The `helm` stand-in the tests put on `TALOSPROV_HELM` (Helm cannot be installed
/// from this project's package sources): it checks its arguments when asked and prints
/// the fixture rendering of the chart (tests/fixtures/helm).
pub const HELM_STAND_IN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/helm/helm");

/// The fixture secrets bundle's absolute path, for `--secrets` and `secrets import`.
pub const SECRETS_FILE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/secrets.yaml");

/// The repository root (`CARGO_MANIFEST_DIR` of the `talosprov` package): the
/// base of `examples/`, `patches/` and `tests/fixtures/`.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `tests/fixtures/<name>` under the repository root.
pub fn fixture(name: &str) -> PathBuf {
    repo().join("tests/fixtures").join(name)
}

/// Copies the tree under `from` into `to` (created), files and folders alike:
/// how a test gives its temporary cluster folder the repository's `patches/`.
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read the tree") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}
