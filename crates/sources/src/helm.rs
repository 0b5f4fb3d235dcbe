//! Running `helm template`: the program is `TALOSPROV_HELM`, else `helm` on
//! `PATH`; the values go in a private temporary file passed with `--values`;
//! the output is bounded and the run has a deadline ([`SourceLimits::deadline`]),
//! after which its whole process group is killed. Helm fetches the chart
//! itself (from the repository or the OCI registry), so this needs the
//! network the chart lives on; nothing else in talosprov runs `helm`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use talosprov_retry::seconds;
use tokio::io::AsyncReadExt as _;

#[cfg(doc)]
use crate::limits::SourceLimits;
use crate::limits::raise_hint;

/// The variable that names the `helm` program to run.
pub const HELM_ENV: &str = "TALOSPROV_HELM";

/// The most `helm template` may print, bytes (64 MiB: a chart with every
/// CRD is a few MiB).
pub const MAX_OUTPUT_BYTES: u64 = 64 * 1024 * 1024;

/// The most of its error output kept for the message, bytes.
pub const MAX_STDERR_BYTES: u64 = 16 * 1024;

/// Why `helm template` gave no manifests.
#[derive(Debug, thiserror::Error)]
pub enum HelmError {
    /// No program to run.
    #[error(
        "no helm program: install Helm 3 (https://helm.sh/docs/intro/install/) so that `helm` \
         is on PATH, or set {HELM_ENV} to the program{}",
        match given { Some(p) => format!(" ({HELM_ENV}={} does not exist)", p.display()), None => String::new() }
    )]
    NotFound {
        /// `TALOSPROV_HELM` when it names a file that does not exist.
        given: Option<PathBuf>,
    },
    /// The program could not be started, or its output read.
    #[error("cannot run {}", program.display())]
    Io {
        /// The program.
        program: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// It exited with an error.
    #[error("`{}` failed ({status}): {stderr}", command)]
    Failed {
        /// The command line, values file left out.
        command: String,
        /// Its exit status.
        status: std::process::ExitStatus,
        /// The start of its error output.
        stderr: String,
    },
    /// It printed more than [`MAX_OUTPUT_BYTES`].
    #[error("`{command}` printed more than {} MiB", MAX_OUTPUT_BYTES / (1024 * 1024))]
    TooLarge {
        /// The command line.
        command: String,
    },
    /// It ran past its deadline ([`SourceLimits::deadline`]), and was
    /// killed with its process group.
    #[error(
        "`{command}` ran for more than the deadline of {} for a helm run, and was killed; {}",
        seconds(*deadline),
        raise_hint()
    )]
    Timeout {
        /// The command line.
        command: String,
        /// The deadline that passed.
        deadline: Duration,
    },
    /// Its output is not UTF-8.
    #[error("`{command}` printed something that is not UTF-8 text")]
    NotUtf8 {
        /// The command line.
        command: String,
    },
}

/// The `helm` program: `helm_env` (the value of [`HELM_ENV`]) when set and
/// not empty, else the first `helm` in the folders of `path` (the value of
/// `PATH`) that is a file.
///
/// # Errors
/// [`HelmError::NotFound`], naming `helm_env` when it is set to a path that
/// does not exist.
pub fn find_helm(helm_env: Option<&str>, path: Option<&str>) -> Result<PathBuf, HelmError> {
    if let Some(given) = helm_env.filter(|v| !v.trim().is_empty()) {
        let p = PathBuf::from(given);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(HelmError::NotFound { given: Some(p) })
        };
    }
    path.into_iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join("helm"))
        .find(|p| p.is_file())
        .ok_or(HelmError::NotFound { given: None })
}

/// Run `program` with `args` and `--values <file>` holding `values_yaml`, in
/// a process group of its own; its standard output. When `deadline` passes
/// first, the whole group (helm and anything it started) is killed with
/// SIGKILL, and so it is when this future is dropped before the end.
///
/// # Errors
/// [`HelmError`]: the program cannot start, exits with an error (its error
/// output in the message), prints too much, runs past `deadline`, or prints
/// something that is not text.
pub async fn template(
    program: &Path,
    args: &[String],
    values_yaml: &str,
    deadline: Duration,
) -> Result<String, HelmError> {
    let io = |source| HelmError::Io {
        program: program.to_path_buf(),
        source,
    };
    let command = std::iter::once(program.display().to_string())
        .chain(args.iter().cloned())
        .collect::<Vec<_>>()
        .join(" ");
    // tempfile creates the file with mode 0600: values may hold secrets.
    let mut values = tempfile::Builder::new()
        .prefix("talosprov-values-")
        .suffix(".yaml")
        .tempfile()
        .map_err(io)?;
    std::io::Write::write_all(&mut values, values_yaml.as_bytes()).map_err(io)?;
    let mut command_line = tokio::process::Command::new(program);
    command_line
        .args(args)
        .arg("--values")
        .arg(values.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    #[cfg(unix)]
    command_line.process_group(0);
    let mut child = command_line.spawn().map_err(io)?;
    // Kills the group on every way out until the child is reaped.
    let mut group = Group(child.id());
    let mut stdout = child.stdout.take().expect("piped stdout");
    let stderr = child.stderr.take().expect("piped stderr");
    // Both pipes at once (a program that fills one while talosprov waits on
    // the other would otherwise wait forever), each bounded; stderr on its own
    // task, so that stdout past its bound ends the run at once.
    let errors = tokio::spawn(async move {
        let mut stderr = stderr;
        let kept = read_bounded(&mut stderr, MAX_STDERR_BYTES).await?.join();
        // The rest is drained, not kept: a full pipe would stop the program.
        tokio::io::copy(&mut stderr, &mut tokio::io::sink()).await?;
        Ok::<_, std::io::Error>(kept)
    });
    let run = async {
        read_bounded(&mut stdout, MAX_OUTPUT_BYTES + 1)
            .await
            .map_err(io)
    };
    let start = tokio::time::Instant::now();
    let timeout = |group: &mut Group| {
        group.kill();
        HelmError::Timeout {
            command: command.clone(),
            deadline,
        }
    };
    let out = match tokio::time::timeout_at(start + deadline, run).await {
        Ok(r) => r?,
        Err(_) => {
            let e = timeout(&mut group);
            let _ = child.wait().await;
            return Err(e);
        }
    };
    if out.1 as u64 > MAX_OUTPUT_BYTES {
        // Still writing: stopped now, not at the deadline. What was read is
        // dropped without being joined.
        drop(out);
        group.kill();
        let _ = child.wait().await;
        return Err(HelmError::TooLarge { command });
    }
    let out = out.join();
    let mut err = match tokio::time::timeout_at(start + deadline, errors).await {
        Ok(Ok(read)) => read.map_err(io)?,
        Ok(Err(_)) => Vec::new(),
        Err(_) => {
            let e = timeout(&mut group);
            let _ = child.wait().await;
            return Err(e);
        }
    };
    err.truncate(MAX_STDERR_BYTES as usize);
    // Both pipes closed: it may still run (a child of it holding them was
    // killed, or it closed them itself), so the deadline holds here too.
    let status = match tokio::time::timeout_at(start + deadline, child.wait()).await {
        Ok(status) => status.map_err(io)?,
        Err(_) => return Err(HelmError::Timeout { command, deadline }),
    };
    // Reaped: its process group ID may be reused from now on.
    group.0 = None;
    if !status.success() {
        return Err(HelmError::Failed {
            command,
            status,
            stderr: String::from_utf8_lossy(&err).trim().to_owned(),
        });
    }
    String::from_utf8(out).map_err(|_| HelmError::NotUtf8 { command })
}

/// The pieces [`read_bounded`] reads into, bytes.
const READ_PIECE_BYTES: usize = 1024 * 1024;

/// What [`read_bounded`] read: pieces of at most [`READ_PIECE_BYTES`], and
/// their total length.
struct Pieces(Vec<Vec<u8>>, usize);

impl Pieces {
    /// The bytes read, joined into one buffer of the exact size (the
    /// pieces are freed as they are copied).
    fn join(self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.1);
        for piece in self.0 {
            out.extend_from_slice(&piece);
        }
        out
    }
}

/// Read `reader` to its end or to `limit` bytes, whichever comes first, into
/// pieces of at most [`READ_PIECE_BYTES`]: no buffer larger than a piece is
/// made before the size is known, and a caller that finds the output too
/// large drops it without ever joining it (a `Vec` grown by doubling would
/// reallocate tens of MiB at each step, holding the old and the new buffer
/// at once).
async fn read_bounded(
    reader: &mut (impl tokio::io::AsyncRead + Unpin),
    limit: u64,
) -> std::io::Result<Pieces> {
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    let mut pieces: Vec<Vec<u8>> = Vec::new();
    let mut total = 0usize;
    let mut ended = false;
    while total < limit && !ended {
        let mut piece = vec![0u8; READ_PIECE_BYTES.min(limit - total)];
        let mut filled = 0;
        while filled < piece.len() {
            let n = reader.read(&mut piece[filled..]).await?;
            if n == 0 {
                ended = true;
                break;
            }
            filled += n;
        }
        piece.truncate(filled);
        total += filled;
        pieces.push(piece);
    }
    Ok(Pieces(pieces, total))
}

/// A `helm` run's process group, killed with SIGKILL when dropped while the
/// run's leader is not yet reaped (its ID cannot be reused until then).
struct Group(Option<u32>);

impl Group {
    /// Kill every process of the group, once.
    fn kill(&mut self) {
        #[cfg(unix)]
        if let Some(pid) = self
            .0
            .take()
            .and_then(|id| i32::try_from(id).ok())
            .and_then(rustix::process::Pid::from_raw)
        {
            // ESRCH (all gone) is fine.
            let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
        }
        #[cfg(not(unix))]
        {
            self.0 = None;
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        self.kill();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    #[tokio::test]
    async fn reads_are_bounded_in_pieces_and_joined_only_when_asked() {
        let input: Vec<u8> = (0..3 * READ_PIECE_BYTES + 5).map(|i| i as u8).collect();
        let read = read_bounded(&mut &input[..], 2 * READ_PIECE_BYTES as u64 + 1)
            .await
            .unwrap();
        assert_eq!(read.1, 2 * READ_PIECE_BYTES + 1, "stops at the limit");
        assert!(read.0.iter().all(|p| p.len() <= READ_PIECE_BYTES));
        assert_eq!(read.join(), input[..2 * READ_PIECE_BYTES + 1]);
        let short = read_bounded(&mut &input[..10], 100).await.unwrap();
        assert_eq!((short.1, short.join()), (10, input[..10].to_vec()));
    }

    /// A stand-in program in `dir` running `script` with `sh`.
    fn program(dir: &Path, script: &str) -> PathBuf {
        let p = dir.join("helm");
        std::fs::write(&p, format!("#!/bin/sh\n{script}\n")).expect("write");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        p
    }

    #[test]
    fn the_variable_wins_over_path_and_a_missing_one_is_named() {
        let dir = tempfile::tempdir().expect("dir");
        let on_path = program(dir.path(), "true");
        let path = dir.path().display().to_string();
        assert_eq!(find_helm(None, Some(&path)).expect("found"), on_path);
        assert_eq!(find_helm(Some(""), Some(&path)).expect("found"), on_path);
        let e = find_helm(Some("/nonexistent/helm"), Some(&path)).expect_err("missing");
        assert!(
            e.to_string()
                .contains("TALOSPROV_HELM=/nonexistent/helm does not exist"),
            "{e}"
        );
        let e = find_helm(None, Some("/nonexistent")).expect_err("none");
        assert!(
            e.to_string()
                .contains("https://helm.sh/docs/intro/install/"),
            "{e}"
        );
    }

    #[tokio::test]
    async fn the_values_file_and_the_arguments_reach_the_program() {
        let dir = tempfile::tempdir().expect("dir");
        // Prints its arguments (the values file's path replaced) and the values.
        let helm = program(
            dir.path(),
            r#"for a in "$@"; do case "$a" in */talosprov-values-*) echo VALUES;; *) echo "$a";; esac; done
               while [ "$1" != --values ]; do shift; done; cat "$2""#,
        );
        let args = vec!["template".to_owned(), "cni".to_owned()];
        let out = template(&helm, &args, "a: 1\n", crate::limits::DEFAULT_DEADLINE)
            .await
            .expect("ran");
        assert_eq!(out, "template\ncni\n--values\nVALUES\na: 1\n");
    }

    #[tokio::test]
    async fn a_failing_program_gives_its_error_output() {
        let dir = tempfile::tempdir().expect("dir");
        let helm = program(
            dir.path(),
            "echo 'Error: chart \"nope\" not found' >&2; exit 1",
        );
        let e = template(
            &helm,
            &["template".to_owned()],
            "",
            crate::limits::DEFAULT_DEADLINE,
        )
        .await
        .expect_err("failed");
        assert!(e.to_string().contains("chart \"nope\" not found"), "{e}");
    }

    /// Whether process `pid` is gone (or a zombie waiting for its parent).
    fn gone(pid: &str) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => true,
            Ok(stat) => stat
                .rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z')),
        }
    }

    #[tokio::test]
    async fn output_past_its_bound_ends_the_run_at_once_not_at_the_deadline() {
        let dir = tempfile::tempdir().expect("dir");
        // Endless output, and stderr held open while it lasts.
        let helm = program(dir.path(), "exec cat /dev/zero");
        let started = std::time::Instant::now();
        let e = template(
            &helm,
            &["template".to_owned()],
            "",
            Duration::from_secs(300),
        )
        .await
        .expect_err("too large");
        assert!(matches!(e, HelmError::TooLarge { .. }), "{e}");
        assert!(started.elapsed() < Duration::from_secs(60), "{e}");
    }

    #[tokio::test]
    async fn a_program_past_its_deadline_is_killed_with_its_process_group() {
        let dir = tempfile::tempdir().expect("dir");
        let pids = dir.path().join("pids");
        // A helm that starts a child of its own, then hangs.
        let helm = program(
            dir.path(),
            &format!(
                "sleep 300 &\necho \"$$ $!\" > {}\nsleep 300",
                pids.display()
            ),
        );
        let started = std::time::Instant::now();
        let e = template(&helm, &["template".to_owned()], "", Duration::from_secs(1))
            .await
            .expect_err("killed");
        assert!(started.elapsed() < Duration::from_secs(20), "{e}");
        assert!(matches!(e, HelmError::Timeout { .. }), "{e}");
        let text = e.to_string();
        assert!(text.contains(&helm.display().to_string()), "{text}");
        assert!(text.contains("deadline of 1 s"), "{text}");
        assert!(text.contains("TALOSPROV_SOURCE_TIMEOUT"), "{text}");
        let pids = std::fs::read_to_string(&pids).expect("pids written");
        for pid in pids.split_whitespace() {
            let until = std::time::Instant::now() + Duration::from_secs(20);
            while !gone(pid) {
                assert!(
                    std::time::Instant::now() < until,
                    "process {pid} still runs"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}
