//! The hostile corpus (`tests/fixtures/hostile/corpus.rs`, one generator per class of
//! unbounded input) run through the binary, each case under an address-space limit of
//! 512 MiB and a hang guard of 120 s. A case fails on a crash, an abort, a signal, the guard,
//! or an error that does not name the input at fault. `TALOSPROV_HOSTILE_BIN` names the binary
//! to run (`tests/run.sh` passes the release build); by default it is this build's.

#[path = "../fixtures/hostile/corpus.rs"]
mod corpus;

use std::io::Read as _;
use std::os::unix::process::CommandExt as _;
use std::os::unix::process::ExitStatusExt as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The address-space limit of each run, bytes.
const ADDRESS_SPACE: u64 = 512 * 1024 * 1024;

/// How long a run may take before it counts as a hang.
const GUARD: Duration = Duration::from_secs(120);

fn binary() -> std::path::PathBuf {
    std::env::var_os("TALOSPROV_HOSTILE_BIN")
        .map_or_else(|| env!("CARGO_BIN_EXE_talosprov").into(), Into::into)
}

/// Run one case; the outcome as (exit code or signal, stderr, seconds).
fn run(case: &corpus::Case) -> Result<(i32, String, f64), String> {
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    (case.write)(dir.path()).map_err(|e| format!("writing the input: {e}"))?;
    let mut command = Command::new(binary());
    command
        .current_dir(dir.path())
        .args(case.args)
        .env_remove("PROXMOX_VE_ENDPOINT")
        .env_remove("TF_HTTP_ADDRESS")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in case.env {
        command.env(k, v);
    }
    // SAFETY: setrlimit is async-signal-safe, and nothing else runs between fork and exec.
    unsafe {
        command.pre_exec(|| {
            let limit = libc::rlimit {
                rlim_cur: ADDRESS_SPACE,
                rlim_max: ADDRESS_SPACE,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &limit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        })
    };
    let start = Instant::now();
    let mut child = command.spawn().map_err(|e| e.to_string())?;
    let mut stderr = child.stderr.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.by_ref().take(1 << 20).read_to_string(&mut text);
        text
    });
    let status = loop {
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            break status;
        }
        if start.elapsed() > GUARD {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!("still running after {} s", GUARD.as_secs()));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let seconds = start.elapsed().as_secs_f64();
    let text = reader.join().unwrap_or_default();
    match (status.code(), status.signal()) {
        (Some(code), _) => Ok((code, text, seconds)),
        (None, Some(signal)) => Err(format!("killed by signal {signal}: {text:.2000}")),
        (None, None) => Err("no exit status".into()),
    }
}

#[test]
fn every_hostile_input_stops_at_a_located_error_within_the_bounds() {
    let mut failures = Vec::new();
    for case in corpus::cases() {
        match run(&case) {
            Ok((code, text, seconds)) => {
                eprintln!("{:<55} exit {code}  {seconds:>6.2} s", case.name);
                let named = text.contains(case.names);
                let problem = if text.contains("panicked") || code == 101 {
                    Some("panicked")
                } else if code == 0 && !case.may_pass {
                    Some("accepted a hostile input")
                } else if code != 0 && code != 1 {
                    Some("exited with an unexpected code")
                } else if code == 1 && !named {
                    Some("the error does not name the input at fault")
                } else {
                    None
                };
                if let Some(p) = problem {
                    failures.push(format!(
                        "{}: {p} (exit {code}; expected `{}` in):\n{:.3000}",
                        case.name, case.names, text
                    ));
                }
            }
            Err(e) => failures.push(format!("{}: {e}", case.name)),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}
