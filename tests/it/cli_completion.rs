//! `talosprov completion SHELL`: a script for each shell clap_complete supports
//! here, naming the binary and its commands; bash's parses.

use crate::support::cli::{stdout, talosprov};

fn script(shell: &str) -> String {
    let out = talosprov()
        .args(["completion", shell])
        .output()
        .expect("run talosprov");
    assert!(out.status.success(), "completion {shell}: {out:?}");
    stdout(&out)
}

#[test]
fn every_shell_gets_a_script_naming_the_commands() {
    for shell in ["bash", "zsh", "fish", "powershell"] {
        let text = script(shell);
        for word in ["talosprov", "plan", "apply", "validate", "schema"] {
            assert!(text.contains(word), "{shell} script lacks {word}");
        }
    }
}

#[test]
fn bash_script_parses() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("talosprov.bash");
    std::fs::write(&file, script("bash")).expect("write the script");
    let out = std::process::Command::new("bash")
        .arg("-n")
        .arg(&file)
        .output()
        .expect("run bash -n");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn an_unknown_shell_is_refused() {
    let out = talosprov()
        .args(["completion", "tcsh"])
        .output()
        .expect("run talosprov");
    assert!(!out.status.success());
}
