//! The `--help` texts users read, snapshot-tested so changes are reviewed.

use assert_cmd::Command;

fn help(args: &[&str]) -> String {
    let out = Command::cargo_bin("talosprov")
        .expect("binary")
        .args(args)
        .output()
        .expect("run talosprov");
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn top_level_help() {
    insta::assert_snapshot!("talosprov_help", help(&["--help"]));
}

#[test]
fn validate_help() {
    insta::assert_snapshot!("validate_help", help(&["validate", "--help"]));
}
