//! The files `init` writes beside the topology: the JSON Schema, a
//! `.gitignore`, the reference patch tree (embedded byte for byte), the GPU
//! nodes' module patch and the GitLab pipeline; and how they are written
//! (never over an existing file).

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};

use super::scaffold::{Kind, Scaffold};

/// The reference patch tree (the repository's `patches/`), embedded so the
/// scaffold's copy is byte for byte the reference: (path under `patches/`, text).
const SHARED_PATCHES: [(&str, &str); 4] = [
    (
        "common/40-kubelet.yaml",
        include_str!("../../../../../patches/common/40-kubelet.yaml"),
    ),
    (
        "controlplane/10-network-vip.yaml.tftpl",
        include_str!("../../../../../patches/controlplane/10-network-vip.yaml.tftpl"),
    ),
    (
        "controlplane/20-cluster-cni-proxy.yaml",
        include_str!("../../../../../patches/controlplane/20-cluster-cni-proxy.yaml"),
    ),
    (
        "controlplane/30-extra-manifests.yaml",
        include_str!("../../../../../patches/controlplane/30-extra-manifests.yaml"),
    ),
];

/// The reference GPU node's patch (loads the NVIDIA modules): the scaffold
/// writes it under `nodes/<hostname>/` for each GPU node.
const NVIDIA_MODULES_PATCH: (&str, &str) = (
    "30-nvidia-modules.yaml",
    include_str!("../../../../../patches/nodes/talos-gpu-01/30-nvidia-modules.yaml"),
);

/// The GitLab pipeline of `examples/gitlab-ci`, which already runs on
/// `cluster.yaml` and `patches/` at the repository root, as the scaffold lays
/// them out.
const GITLAB_CI: &str = include_str!("../../../../../examples/gitlab-ci/.gitlab-ci.yml");

/// The files of the scaffold, as (path relative to DIR, content), in the
/// order they are written and listed.
pub(super) fn files(s: &Scaffold, dir: &Path) -> Vec<(PathBuf, String)> {
    let mut schema = serde_json::to_string_pretty(&talosprov_topology::schema::cluster_schema())
        .unwrap_or_default();
    schema.push('\n');
    let mut out = vec![
        (
            PathBuf::from("cluster.yaml"),
            super::topology::topology(s, dir),
        ),
        (PathBuf::from("cluster.schema.json"), schema),
        (PathBuf::from(".gitignore"), GITIGNORE.to_owned()),
    ];
    for (path, text) in SHARED_PATCHES {
        out.push((Path::new("patches").join(path), text.to_owned()));
    }
    for n in s.nodes.iter().filter(|n| matches!(n.kind, Kind::Gpu(_))) {
        let path = Path::new("patches/nodes")
            .join(&n.hostname)
            .join(NVIDIA_MODULES_PATCH.0);
        out.push((path, NVIDIA_MODULES_PATCH.1.to_owned()));
    }
    if s.gitlab {
        out.push((PathBuf::from(".gitlab-ci.yml"), gitlab_ci(&s.name)));
    }
    out
}

/// The example pipeline for this cluster: its own GitLab-managed state name
/// and apply resource group (so several clusters can share a GitLab
/// instance, or a project with `STATE_NAME` changed), the image of this
/// talosprov's release, and a header saying what to set.
fn gitlab_ci(cluster: &str) -> String {
    let header = format!(
        "# The pipeline of the cluster {cluster}, as written by `talosprov init --gitlab`
# (talosprov's examples/gitlab-ci; its README explains each job). The jobs
# run the published image of TALOSPROV_VERSION below, the release that wrote
# this file; set the CI/CD variables listed next.
#
"
    );
    let pipeline: String = GITLAB_CI
        .lines()
        .map(|line| {
            if line.starts_with("  TALOSPROV_VERSION: ") {
                format!("  TALOSPROV_VERSION: \"{}\"\n", env!("CARGO_PKG_VERSION"))
            } else {
                format!("{line}\n")
            }
        })
        .collect();
    header
        + &pipeline
            .replace("STATE_NAME: cluster\n", &format!("STATE_NAME: {cluster}\n"))
            .replace(
                "resource_group: talosprov-cluster\n",
                &format!("resource_group: talosprov-{cluster}\n"),
            )
}

/// What talosprov and its users write beside the topology that must not be
/// committed: the state and its backup, lock and temporary files, saved plans
/// (they hold the cluster's secrets), the outputs, and etcd snapshots.
const GITIGNORE: &str = "\
# Written by talosprov beside cluster.yaml; none of it belongs in Git.

# The local state (it holds the cluster's CA keys), the copy kept before each
# run that changes it, its lock file, and atomic-write temporaries.
talosprov.tfstate
*.tfstate
*.tfstate.backup
.*.tfstate.lock.info
*.lock.info
.talosprov-*.tmp

# Saved plans (`talosprov plan -out ...`): they hold the cluster's secrets.
*.plan
plan.cache
# The pipeline's merge-request report, logs and lock IDs.
plan.json
plan.log
apply.log
lock.env

# Outputs: credentials and rendered machine configs (secrets included).
kubeconfig
*.kubeconfig
talosconfig
*.talosconfig
secrets.yaml
rendered/

# The etcd snapshots `talosprov etcd snapshot` and apply (before a control
# plane's upgrade or removal) save beside the state when the topology has no
# backup: section: encrypted, but they hold every Kubernetes secret.
etcd-snapshots/
";

/// Write `files` under `dir`, refusing (before writing anything) when any
/// of them exists.
pub(super) fn write_all(dir: &Path, files: &[(PathBuf, String)]) -> anyhow::Result<()> {
    let existing: Vec<String> = files
        .iter()
        .map(|(p, _)| dir.join(p))
        .filter(|p| p.symlink_metadata().is_ok())
        .map(|p| format!("  {}", p.display()))
        .collect();
    if !existing.is_empty() {
        bail!(
            "{} already exist{}, so nothing was written (talosprov init never overwrites):\n{}",
            if existing.len() == 1 {
                "this file"
            } else {
                "these files"
            },
            if existing.len() == 1 { "s" } else { "" },
            existing.join("\n")
        );
    }
    for (path, text) in files {
        let path = dir.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .and_then(|mut f| std::io::Write::write_all(&mut f, text.as_bytes()))
            .with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pipeline_keeps_its_state_and_applies_under_the_cluster_name() {
        let ci = gitlab_ci("lab");
        assert!(ci.contains("\n  STATE_NAME: lab\n"), "{ci}");
        assert!(ci.contains("\n  resource_group: talosprov-lab\n"), "{ci}");
        assert!(!ci.contains("talosprov-cluster"));
    }
    #[test]
    fn the_pipeline_runs_the_published_image_and_builds_nothing() {
        let ci = gitlab_ci("lab");
        let version = format!("\n  TALOSPROV_VERSION: \"{}\"\n", env!("CARGO_PKG_VERSION"));
        assert!(ci.contains(&version), "{ci}");
        assert!(
            ci.contains(
                "\n  image: registry.gitlab.com/talosprov/talosprov:${TALOSPROV_VERSION}\n"
            ),
            "{ci}"
        );
        assert!(!ci.contains("cargo"), "{ci}");
        assert!(!ci.contains("TALOSPROV_REPO"), "{ci}");
    }
}
