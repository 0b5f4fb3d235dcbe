//! Running `helm template`: the program is `TALOSPROV_HELM`, else `helm` on
//! `PATH`; the values go in a private temporary file passed with `--values`;
//! the output is bounded and the run has a deadline. Helm fetches the chart
//! itself (from the repository or the OCI registry), so this needs the
//! network the chart lives on; nothing else in talosprov runs `helm`.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncReadExt as _;

/// The variable that names the `helm` program to run.
pub const HELM_ENV: &str = "TALOSPROV_HELM";

/// The most `helm template` may print, bytes (64 MiB: a chart with every
/// CRD is a few MiB).
pub const MAX_OUTPUT_BYTES: u64 = 64 * 1024 * 1024;

/// The most of its error output kept for the message, bytes.
pub const MAX_STDERR_BYTES: u64 = 16 * 1024;

/// How long one `helm template` may run, chart download included.
pub const DEADLINE: Duration = Duration::from_secs(600);

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
    /// It ran past [`DEADLINE`], and was stopped.
    #[error("`{command}` ran for more than {} s, and was stopped", DEADLINE.as_secs())]
    Timeout {
        /// The command line.
        command: String,
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

/// Run `program` with `args` and `--values <file>` holding `values_yaml`;
/// its standard output.
///
/// # Errors
/// [`HelmError`]: the program cannot start, exits with an error (its error
/// output in the message), prints too much, runs too long, or prints
/// something that is not text.
pub async fn template(
    program: &Path,
    args: &[String],
    values_yaml: &str,
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
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .arg("--values")
        .arg(values.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(io)?;
    let mut stdout = child.stdout.take().expect("piped stdout");
    let stderr = child.stderr.take().expect("piped stderr");
    // Both pipes at once: a program that fills one while talosprov waits on
    // the other would otherwise wait forever. Each is bounded.
    let run = async {
        let mut out = Vec::new();
        let mut err = Vec::new();
        let mut out_reader = (&mut stdout).take(MAX_OUTPUT_BYTES + 1);
        let mut err_reader = stderr.take(MAX_OUTPUT_BYTES);
        let (o, e) = tokio::join!(
            out_reader.read_to_end(&mut out),
            err_reader.read_to_end(&mut err)
        );
        o.map_err(io)?;
        e.map_err(io)?;
        err.truncate(MAX_STDERR_BYTES as usize);
        Ok::<_, HelmError>((out, err))
    };
    let (out, err) = match tokio::time::timeout(DEADLINE, run).await {
        Ok(r) => r?,
        Err(_) => return Err(HelmError::Timeout { command }),
    };
    if out.len() as u64 > MAX_OUTPUT_BYTES {
        return Err(HelmError::TooLarge { command });
    }
    let status = child.wait().await.map_err(io)?;
    if !status.success() {
        return Err(HelmError::Failed {
            command,
            status,
            stderr: String::from_utf8_lossy(&err).trim().to_owned(),
        });
    }
    String::from_utf8(out).map_err(|_| HelmError::NotUtf8 { command })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

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
        let out = template(&helm, &args, "a: 1\n").await.expect("ran");
        assert_eq!(out, "template\ncni\n--values\nVALUES\na: 1\n");
    }

    #[tokio::test]
    async fn a_failing_program_gives_its_error_output() {
        let dir = tempfile::tempdir().expect("dir");
        let helm = program(
            dir.path(),
            "echo 'Error: chart \"nope\" not found' >&2; exit 1",
        );
        let e = template(&helm, &["template".to_owned()], "")
            .await
            .expect_err("failed");
        assert!(e.to_string().contains("chart \"nope\" not found"), "{e}");
    }
}
