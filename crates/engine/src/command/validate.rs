//! `validate`: every check that needs no network, on the topology file, the
//! patch tree and each node's final machine config, with all problems
//! reported together. Each stage returns diagnostics and the next appends its
//! own.

use std::path::{Path, PathBuf};

use anyhow::Context as _;

use talosprov_base::diagnostics::Diagnostic;
use talosprov_machine::node;
use talosprov_machine::node::node_configs;
use talosprov_machine::secrets::SecretsBundle;
use talosprov_patch::discover::PatchFile;
use talosprov_topology::model::Topology;

/// Each node's patch files in merge order, by hostname, in node order.
pub type NodePatches = Vec<(String, Vec<PatchFile>)>;

/// What `validate` found: the model, the patch tree and every diagnostic.
#[derive(Debug, Clone)]
pub struct Validation {
    /// The topology, when it has no error.
    pub topology: Option<Topology>,
    /// Each node's patches in merge order, by hostname, in node order.
    pub patches: NodePatches,
    /// Files in the patch tree that are not patches.
    pub ignored: Vec<PathBuf>,
    /// Every diagnostic of every stage, each stage's sorted by file and line.
    pub diagnostics: Vec<Diagnostic>,
}

/// Run every stage on `file`: the topology, then (when it has no error) the patch tree and
/// every node's final machine config, so template errors, patches that cannot apply and
/// configs Talos would refuse are reported with the topology's problems.
///
/// The configs are built with a secrets bundle made for the purpose
/// ([`SecretsBundle::generate_for_checks`]: real keys, no RSA): no check depends on the
/// secret values, and nothing is printed or kept.
///
/// # Errors
/// When the topology file cannot be read at all, or the throwaway bundle cannot be made.
pub fn check(file: &Path) -> anyhow::Result<Validation> {
    let mut loaded = talosprov_files::load_topology(file)?;
    if let Some(recorded) = loaded.topology.as_ref().and_then(recorded_pools) {
        loaded = talosprov_files::load_topology_with(file, recorded)?;
    }
    let mut v = Validation {
        topology: loaded.topology,
        patches: Vec::new(),
        ignored: Vec::new(),
        diagnostics: loaded.diagnostics,
    };
    let Some(t) = &v.topology else {
        return Ok(v);
    };
    let set = match talosprov_files::load_patches(t) {
        Ok(set) => set,
        Err(diagnostics) => {
            v.diagnostics.extend(diagnostics);
            return Ok(v);
        }
    };
    v.patches = set.node_patches().to_vec();
    v.ignored = set.ignored().to_vec();
    v.diagnostics.extend(set.warnings().iter().cloned());
    let secrets =
        SecretsBundle::generate_for_checks(&mut rand::rngs::OsRng, time::OffsetDateTime::now_utc())
            .context("cannot make the secrets bundle for checking the machine configs")?;
    let (addons, problems) = talosprov_files::render_addons(t);
    v.diagnostics.extend(problems);
    v.diagnostics.extend(helm_problems(t));
    v.diagnostics.extend(values_file_problems(t));
    let inline = talosprov_addon::manifests::inline_manifests(t, &addons);
    match node_configs(t, &secrets, &set, &inline) {
        Ok(configs) => {
            v.diagnostics.extend(node::warnings(&configs));
            v.diagnostics
                .extend(talosprov_addon::checks::check(t, &configs));
            let facts = talosprov_addon::facts::cluster_facts(&configs);
            v.diagnostics
                .extend(talosprov_addon::manifests::object_checks(
                    t,
                    &addons,
                    facts.as_ref(),
                ));
        }
        Err(diagnostics) => v.diagnostics.extend(diagnostics),
    }
    Ok(v)
}

/// The pools' allocation a local, unencrypted state beside the topology
/// records, so that `validate` lists the members as `plan` will (offline: a
/// remote or encrypted state is not read, and members are listed as a first
/// apply would allocate them).
fn recorded_pools(
    t: &Topology,
) -> Option<std::collections::BTreeMap<String, Vec<talosprov_statefile::format::RecordedMember>>> {
    if t.pools.is_empty() {
        return None;
    }
    let talosprov_topology::model::StateSettings::Local { path } = &t.state else {
        return None;
    };
    let path = path.clone().unwrap_or_else(|| {
        talosprov_base::paths::folder_of(&t.file)
            .join(talosprov_statefile::config::DEFAULT_STATE_FILE)
    });
    let bytes = talosprov_backend::bounded::read_file(
        &path,
        "the state file",
        talosprov_backend::bounded::MAX_STATE_BYTES,
    )
    .ok()?;
    talosprov_statefile::format::check_bounds(&bytes).ok()?;
    let value: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    serde_json::from_value(value.get("pools")?.clone()).ok()
}

/// The problems of every `helm` add-on's `values_files`, read and parsed
/// offline through the bounded loader (`A009`, at the line of the values file,
/// or at the add-on's entry for a file that cannot be read), as `plan` and
/// `render` would refuse them.
fn values_file_problems(t: &Topology) -> Vec<Diagnostic> {
    t.addons
        .values()
        .flat_map(|a| talosprov_addon::helm::values_files(t, a, &talosprov_files::Disk).1)
        .collect()
}

/// `A011` for each `helm` add-on when no `helm` program can be found
/// (`TALOSPROV_HELM`, else `helm` on `PATH`): `plan` would need it.
fn helm_problems(t: &Topology) -> Vec<Diagnostic> {
    let charts: Vec<&talosprov_topology::model::Addon> = t
        .addons
        .values()
        .filter(|a| {
            matches!(
                a.source,
                talosprov_topology::model::AddonSource::Helm { .. }
            )
        })
        .collect();
    if charts.is_empty() {
        return Vec::new();
    }
    let found = talosprov_sources::helm::find_helm(
        std::env::var(talosprov_sources::helm::HELM_ENV)
            .ok()
            .as_deref(),
        std::env::var("PATH").ok().as_deref(),
    );
    let Err(e) = found else {
        return Vec::new();
    };
    charts
        .into_iter()
        .map(|a| {
            let msg = format!("add-on `{}` is a Helm chart: {e}", a.name);
            talosprov_addon::manifests::at(
                t,
                a,
                talosprov_base::diagnostics::Code::HelmNotFound,
                msg,
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use talosprov_base::diagnostics::{Code, Pos};

    #[test]
    fn values_files_are_read_offline_and_each_problem_is_located() {
        let dir = tempfile::tempdir().expect("dir");
        let root = dir.path();
        let topology = "cluster:\n  name: lab\n  talos_version: v1.13.8\n  gateway: 10.0.0.1\n\
            proxmox:\n  endpoint: https://pve.test:8006\n  node: pve\n  datastore: local-lvm\n\
            nodes:\n  - {hostname: cp-01, ip: 10.0.0.101, cores: 2, memory: 4096}\n\
            addons:\n  c:\n    helm:\n      repo: https://charts.test\n      chart: c\n      version: 1.0.0\n\
            \x20     values_files: [missing.yaml, bomb.yaml, deep.yaml, ok.yaml]\n";
        std::fs::write(root.join("cluster.yaml"), topology).expect("write");
        let mut bomb = String::from("a0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n");
        for i in 1..9 {
            let refs = vec![format!("*a{}", i - 1); 10].join(", ");
            bomb.push_str(&format!("a{i}: &a{i} [{refs}]\n"));
        }
        std::fs::write(root.join("bomb.yaml"), bomb).expect("write");
        let deep = format!("a: 1\nb: {}\n", "[".repeat(100_000));
        std::fs::write(root.join("deep.yaml"), deep).expect("write");
        std::fs::write(root.join("ok.yaml"), "replicas: 1\n").expect("write");
        let v = check(&root.join("cluster.yaml")).expect("validate");
        let found: Vec<(PathBuf, Option<Pos>, &str)> = v
            .diagnostics
            .iter()
            .filter(|d| d.code == Code::InvalidAddonManifest)
            .map(|d| {
                let file = d.file.strip_prefix(root).unwrap_or(&d.file).to_path_buf();
                (file, d.pos, d.message.as_str())
            })
            .collect();
        assert_eq!(found.len(), 3, "{:#?}", v.diagnostics);
        assert_eq!(found[0].0, Path::new("cluster.yaml"));
        assert_eq!(found[0].1, Some(Pos::new(12, 3)));
        assert!(
            found[0].2.contains("cannot read the values file"),
            "{}",
            found[0].2
        );
        assert_eq!(
            (found[1].0.as_path(), found[1].1),
            (Path::new("bomb.yaml"), Some(Pos::new(6, 10)))
        );
        assert!(found[1].2.contains("excessive aliasing"), "{}", found[1].2);
        assert_eq!(
            (found[2].0.as_path(), found[2].1),
            (Path::new("deep.yaml"), Some(Pos::new(2, 68)))
        );
        assert!(found[2].2.contains("deeper than 64"), "{}", found[2].2);
    }
}
