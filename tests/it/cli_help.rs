//! The `--help` texts users read, snapshot-tested so changes are reviewed.

use crate::support::cli::{stdout, talosprov};

fn help(args: &[&str]) -> String {
    let out = talosprov().args(args).output().expect("run talosprov");
    assert!(out.status.success());
    stdout(&out)
}

#[test]
fn top_level_help() {
    insta::assert_snapshot!("talosprov_help", help(&["--help"]));
}

#[test]
fn validate_help() {
    insta::assert_snapshot!("validate_help", help(&["validate", "--help"]));
}
