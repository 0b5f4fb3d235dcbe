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

/// Every command under the top level, as the words that invoke it
/// (`["plan"]`, `["state", "list"]`, ...), from clap's own description.
fn every_command() -> Vec<Vec<String>> {
    fn walk(cmd: &clap::Command, path: &[String], out: &mut Vec<Vec<String>>) {
        for sub in cmd.get_subcommands() {
            let mut p = path.to_vec();
            p.push(sub.get_name().to_owned());
            out.push(p.clone());
            walk(sub, &p, out);
        }
    }
    let mut out = Vec::new();
    walk(
        &<talosprov::cli::Cli as clap::CommandFactory>::command(),
        &[],
        &mut out,
    );
    out
}

/// `talosprov <path> --help`, its words joined by single spaces (clap wraps
/// at the terminal's width).
fn help_words(path: &[String]) -> String {
    let mut args: Vec<&str> = path.iter().map(String::as_str).collect();
    args.push("--help");
    help(&args).split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn only_the_top_level_offers_version() {
    assert!(help(&["--help"]).contains("-V, --version"));
    let commands = every_command();
    assert!(commands.len() > 20, "{commands:?}");
    for path in &commands {
        let text = help_words(path);
        assert!(!text.contains("--version"), "{path:?}: {text}");
    }
    let out = talosprov()
        .args(["plan", "--version"])
        .output()
        .expect("run talosprov");
    assert_eq!(out.status.code(), Some(2), "plan --version is no flag");
}

#[test]
fn helps_name_no_internal_rust_type_and_plan_json_points_to_the_readme() {
    for path in every_command() {
        let text = help_words(&path);
        assert!(!text.contains("talosprov::"), "{path:?}: {text}");
    }
    let plan = help_words(&["plan".to_owned()]);
    assert!(
        plan.contains("--json Print the plan as JSON (format_version 3; its keys are described under \"Plan JSON\" in talosprov's README.md)"),
        "{plan}"
    );
    let readme = std::fs::read_to_string(crate::support::fixtures::repo().join("README.md"))
        .expect("README.md");
    assert!(readme.contains("**Plan JSON** (`plan -json`, `format_version` 3)"));
}

#[test]
fn each_command_of_the_usual_flow_has_a_description_and_an_example() {
    for name in [
        "init",
        "validate",
        "render",
        "plan",
        "apply",
        "show",
        "output",
        "import",
        "destroy",
        "health",
        "schema",
        "completion",
    ] {
        let text = help(&[name, "--help"]);
        let (summary, rest) = text.split_once("\n\n").expect("a summary line");
        assert!(!summary.contains('\n'), "{name}: {text}");
        assert!(
            format!("\n{rest}").contains(&format!("\nExample: talosprov {name} ")),
            "{name} has no long description with an example:\n{text}"
        );
    }
}

#[test]
fn version_names_the_build_as_text_and_as_one_json_object() {
    let text = help(&["version"]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[0],
        concat!("talosprov ", env!("CARGO_PKG_VERSION")),
        "{text}"
    );
    assert!(lines[1].starts_with("commit: "), "{text}");
    assert!(lines[2].starts_with("target: "), "{text}");
    assert!(lines[3].starts_with("rustc: 1."), "{text}");

    // `-json` (OpenTofu's spelling) and `--json` print the same object.
    for flag in ["--json", "-json"] {
        let json: serde_json::Value =
            serde_json::from_str(&help(&["version", flag])).expect("one JSON object");
        assert_eq!(json["version"], env!("CARGO_PKG_VERSION"));
        let target = json["target"].as_str().expect("target");
        assert_eq!(lines[2], format!("target: {target}"));
        assert!(
            target.contains("-linux-") || target.contains("-apple-"),
            "{target}"
        );
        let commit = json["commit"].as_str().expect("commit");
        assert!(
            commit == "unknown"
                || (commit.len() == 40 && commit.bytes().all(|b| b.is_ascii_hexdigit())),
            "{commit}"
        );
        assert_eq!(lines[1], format!("commit: {commit}"));
        assert!(json["rustc"].as_str().expect("rustc").starts_with("1."));
        assert_eq!(json["default_contract"], "v1.13");
    }
}
