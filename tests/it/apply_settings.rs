//! `apply` and `destroy` resolve their settings before anything else: flags
//! that cannot go together, a malformed environment variable or `-parallelism
//! 0` are refused before the topology is read, a state is touched or a lock is
//! taken.

use crate::support::cli::run_clean;

/// One refused run: its arguments, its environment, and what stderr must say.
type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)], &'a str);

/// Runs `talosprov args` in an empty folder (no topology, no state) and
/// returns its exit code and stderr.
fn refused(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String, Vec<String>) {
    let dir = tempfile::tempdir().expect("dir");
    let out = run_clean(dir.path(), args, env);
    let left: Vec<String> = std::fs::read_dir(dir.path())
        .expect("list")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        left,
    )
}

#[test]
fn flags_that_cannot_go_together_are_refused_before_the_topology_or_the_lock() {
    let cases: [Case<'_>; 5] = [
        (
            &["apply", "-refresh-only", "-refresh=false"],
            &[],
            "-refresh-only reads the cluster back: it cannot be used with -refresh=false",
        ),
        (
            &["apply", "p.plan", "-target", "vm/a"],
            &[],
            "a saved plan keeps the targets it was made with",
        ),
        (
            &["apply", "-parallelism", "0"],
            &[],
            "-parallelism must be at least 1",
        ),
        (
            &["destroy", "-parallelism", "0"],
            &[],
            "-parallelism must be at least 1",
        ),
        (
            &["apply"],
            &[("TALOSPROV_INTERRUPT_GRACE", "soon")],
            "TALOSPROV_INTERRUPT_GRACE=\"soon\" is not a number of seconds",
        ),
    ];
    for (args, env, want) in cases {
        let (code, stderr, left) = refused(args, env);
        assert_eq!(code, Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(want), "{args:?}: {stderr}");
        assert!(
            !stderr.contains("cluster.yaml"),
            "{args:?} read the topology first: {stderr}"
        );
        assert!(left.is_empty(), "{args:?} left {left:?}");
    }
}

#[test]
fn a_missing_topology_is_the_first_error_when_the_flags_agree() {
    let (code, stderr, _) = refused(&["apply", "-parallelism", "3"], &[]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("cluster.yaml"), "{stderr}");
}
