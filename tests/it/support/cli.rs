//! The binary under test: `talosprov` as Cargo built it for this test target, run
//! the ways the tests need (assert_cmd, std or tokio processes), its output as
//! text, and signals sent to a running one.

use std::ffi::OsStr;
use std::path::Path;
use std::process::Output;
use std::time::Duration;

/// Path of the `talosprov` binary Cargo built for these tests
/// (`CARGO_BIN_EXE_talosprov`), for `std::process` and `tokio::process` commands.
pub const BIN: &str = env!("CARGO_BIN_EXE_talosprov");

/// `talosprov` as an assert_cmd command with nothing set: the caller adds the
/// arguments, the folder and the environment (the test process's is inherited).
pub fn talosprov() -> assert_cmd::Command {
    assert_cmd::Command::new(BIN)
}

/// Runs `talosprov args` in `dir` to the end with an empty environment plus
/// `env` and an empty stdin: a run that sees no credentials, state keys or
/// backend settings but the ones given.
pub fn run_clean<K: AsRef<OsStr>, V: AsRef<OsStr>>(
    dir: &Path,
    args: &[&str],
    env: &[(K, V)],
) -> Output {
    let mut cmd = talosprov();
    cmd.current_dir(dir).env_clear().args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.write_stdin("").output().expect("run talosprov")
}

/// Waits for a started `talosprov` to end (at most 120 s, then the test fails)
/// and returns its output.
pub async fn finish(mut command: tokio::process::Command) -> Output {
    tokio::time::timeout(Duration::from_secs(120), command.output())
        .await
        .expect("talosprov finished within 120 s")
        .expect("run talosprov")
}

/// Sends the signal `name` (`TERM`, `INT`, ...) to process `pid` with `kill`,
/// as a CI runner cancelling a job or a user pressing Ctrl-C would.
pub fn signal(pid: u32, name: &str) {
    let sent = std::process::Command::new("kill")
        .args([format!("-{name}"), pid.to_string()])
        .status()
        .expect("run kill");
    assert!(sent.success(), "kill -{name} {pid}");
}

/// stdout as text (invalid UTF-8 replaced).
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// stderr as text (invalid UTF-8 replaced).
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}
