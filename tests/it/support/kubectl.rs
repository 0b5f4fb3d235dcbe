//! Real kubectl, the independent client of the simulated clusters' Kubernetes
//! API, with the kubeconfig `talosprov output kubeconfig` gives. A missing
//! kubectl fails the test with how to install it (tests/run.sh checks for it).

use std::path::{Path, PathBuf};
use std::process::Output;

use super::cli::stdout;
use super::lab::Lab;

/// `kubectl --kubeconfig <file> <args>`, with its discovery cache next to the
/// kubeconfig (not the user's, which another cluster at the same address may
/// have filled): however it ends.
pub fn kubectl_output(kubeconfig: &Path, args: &[&str]) -> Output {
    std::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--cache-dir")
        .arg(kubeconfig.with_file_name("kube-cache"))
        .args(args)
        .env_remove("KUBECONFIG")
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run kubectl ({e}): install it (https://kubernetes.io/docs/tasks/tools/, \
                 or your distribution's kubernetes-client package); tests/run.sh checks for it"
            )
        })
}

/// `kubectl --kubeconfig <file> <args>`: its standard output, after checking
/// it ran.
pub fn kubectl(kubeconfig: &Path, args: &[&str]) -> String {
    let out = kubectl_output(kubeconfig, args);
    assert!(
        out.status.success(),
        "kubectl {args:?} failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8")
}

/// The lab's admin kubeconfig, as `talosprov output kubeconfig -raw` gives
/// it, written next to its topology.
pub async fn lab_kubeconfig(lab: &Lab) -> PathBuf {
    let path = lab.dir.path().join("kubeconfig");
    let text = stdout(&lab.run(&["output", "kubeconfig", "-raw"]).await);
    std::fs::write(&path, text).expect("write kubeconfig");
    path
}
