//! The `validate` report: a one-screen text summary of a valid topology (cluster,
//! schematics, nodes, each node's patches in merge order), and the JSON view of
//! the same report.

use super::cell::{self, cell_of};
use super::diagnostics::{JsonDiagnostic, count_line};
use serde::Serialize;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use talosprov_base::diagnostics::Diagnostic;
use talosprov_base::role::Role;
use talosprov_patch::discover::PatchFile;
use talosprov_topology::model::{AddonSource, SchematicSpec, Topology};

/// Everything `validate` found, ready to show.
#[derive(Debug, Clone, Copy)]
pub struct ValidateReport<'a> {
    /// The topology file, as given.
    pub file: &'a Path,
    /// The model, when the topology has no error.
    pub topology: Option<&'a Topology>,
    /// Each node's patch files in merge order, by hostname, in node order.
    pub patches: &'a [(String, Vec<PatchFile>)],
    /// Files in the patch tree that are not patches.
    pub ignored: &'a [PathBuf],
    /// Every diagnostic of every stage.
    pub diagnostics: &'a [Diagnostic],
}

/// The rows as a table, two spaces between columns (see [`cell::table`]).
fn table(rows: &[Vec<String>], indent: &str) -> String {
    cell::table(rows, indent, "  ")
}

/// The text summary of a valid topology (stdout of `validate`). Paths of
/// patches are shown relative to `patches_dir`.
pub fn summary_text(report: &ValidateReport<'_>) -> String {
    let Some(t) = report.topology else {
        return String::new();
    };
    let mut out = String::new();
    write_settings(&mut out, t);
    write_schematics(&mut out, t);
    write_nodes(&mut out, t);
    write_pools(&mut out, t);
    write_addons(&mut out, t);
    write_patches(&mut out, report, t);
    let cps = t
        .nodes
        .iter()
        .filter(|n| n.role == Role::Controlplane)
        .count();
    let _ = writeln!(
        out,
        "\n{} is valid: {} node(s), {cps} control plane(s), {} worker(s); {}",
        cell_of(report.file.display()),
        t.nodes.len(),
        t.nodes.len() - cps,
        count_line(report.diagnostics)
    );
    out
}

/// The cluster and Proxmox settings: versions, endpoint, network, install
/// disk, and where VMs and images go.
fn write_settings(out: &mut String, t: &Topology) {
    let c = &t.cluster;
    let p = &t.proxmox;
    let k8s = c.kubernetes_version.map_or_else(
        || format!("the default for Talos {}", cell_of(c.talos_version)),
        cell_of,
    );
    let _ = writeln!(
        out,
        "cluster {}: Talos {}, Kubernetes {k8s}",
        cell_of(&c.name),
        cell_of(c.talos_version)
    );
    let _ = writeln!(
        out,
        "  endpoint {}{}",
        cell_of(&c.endpoint),
        c.vip
            .map_or(String::new(), |v| format!(" (VIP {})", cell_of(v)))
    );
    let dns = if c.nameservers.is_empty() {
        "Talos's default nameservers".to_owned()
    } else {
        format!(
            "nameservers {}",
            c.nameservers
                .iter()
                .map(cell_of)
                .collect::<Vec<_>>()
                .join(", ")
        )
    };
    let _ = writeln!(
        out,
        "  network /{} via {}, {dns}; install disk {}",
        c.prefix_length,
        cell_of(c.gateway),
        cell_of(&c.install_disk)
    );
    let pool = p
        .pool
        .as_ref()
        .map_or(String::new(), |pool| format!(", pool {}", cell_of(pool)));
    let _ = writeln!(
        out,
        "proxmox {}: node {}, datastore {}, images on {}, bridge {}{pool}",
        cell_of(&p.endpoint),
        cell_of(&p.node),
        cell_of(&p.datastore),
        cell_of(&p.image_storage),
        cell_of(&p.bridge)
    );
}

/// The schematics table: each name with its ID, or its extensions and
/// kernel arguments.
fn write_schematics(out: &mut String, t: &Topology) {
    out.push_str("\nschematics:\n");
    if t.schematics.is_empty() {
        out.push_str("  (none: nodes boot Talos without extensions)\n");
    }
    let rows: Vec<Vec<String>> = t
        .schematics
        .iter()
        .map(|(name, s)| {
            let what = match s {
                SchematicSpec::Id(id) => format!("id {id}"),
                SchematicSpec::Customization {
                    extensions,
                    kernel_args,
                } => {
                    let mut w = if extensions.is_empty() {
                        "no extensions".to_owned()
                    } else {
                        extensions.join(", ")
                    };
                    if !kernel_args.is_empty() {
                        let _ = write!(w, "; kernel args: {}", kernel_args.join(" "));
                    }
                    w
                }
            };
            vec![name.clone(), what]
        })
        .collect();
    out.push_str(&table(&rows, "  "));
}

/// The nodes table, one row per node in file order.
fn write_nodes(out: &mut String, t: &Topology) {
    out.push_str("\nnodes:\n");
    let mut rows = vec![
        [
            "HOSTNAME",
            "ROLE",
            "IP",
            "VMID",
            "PROXMOX",
            "SCHEMATIC",
            "CORES",
            "MEMORY",
            "DISK",
            "PCI",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for n in &t.nodes {
        let pci: Vec<String> = n
            .hostpci
            .iter()
            .map(|h| format!("{}={}", h.device(), h.mapping))
            .collect();
        rows.push(vec![
            n.hostname.clone(),
            n.role.to_string(),
            n.ip.to_string(),
            n.vm_id.to_string(),
            n.proxmox_node.clone(),
            n.schematic.clone().unwrap_or_else(|| "-".into()),
            n.cores.to_string(),
            format!("{} MiB", n.memory),
            format!("{} GiB", n.disk_size),
            if pci.is_empty() {
                "-".into()
            } else {
                pci.join(",")
            },
        ]);
    }
    out.push_str(&table(&rows, "  "));
}

/// Each pool's members with their allocation (the state's, when a command
/// read one; else as a first apply would allocate them).
fn write_pools(out: &mut String, t: &Topology) {
    for p in &t.pools {
        let _ = writeln!(
            out,
            "\npool {} ({} replicas):",
            cell_of(&p.name),
            p.replicas
        );
        for m in &p.members {
            let _ = writeln!(
                out,
                "  {}  {} {} vmid {} on {}",
                cell::pad_left(&cell_of(m.index), 3),
                cell::pad(&cell_of(&m.hostname), 24),
                cell::pad(&cell_of(m.ip), 15),
                cell::pad(&cell_of(m.vmid), 6),
                cell_of(&m.proxmox_node)
            );
        }
    }
}

/// The add-ons in apply order, with their phase, source and namespace
/// (nothing when there are none).
fn write_addons(out: &mut String, t: &Topology) {
    if t.addons.is_empty() {
        return;
    }
    out.push_str("\naddons (apply order):\n");
    let mut rows = vec![
        [
            "NAME",
            "PHASE",
            "PRESET",
            "SOURCE",
            "NAMESPACE",
            "DEPENDS ON",
        ]
        .map(String::from)
        .to_vec(),
    ];
    for a in talosprov_addon::order::apply_order(&t.addons) {
        let source = match &a.source {
            AddonSource::Helm {
                repo,
                chart,
                version,
                ..
            } if chart.is_empty() => format!("helm {repo} {version}"),
            AddonSource::Helm {
                repo,
                chart,
                version,
                ..
            } => format!("helm {chart} {version} from {repo}"),
            AddonSource::Manifests(files) => format!("{} manifest pattern(s)", files.len()),
            AddonSource::Url { url, .. } => format!("url {url}"),
        };
        rows.push(vec![
            a.name.clone(),
            serde_plain(&a.phase),
            a.preset.map_or_else(|| "-".into(), |p| p.name().to_owned()),
            source,
            a.namespace.clone(),
            if a.depends_on.is_empty() {
                "-".into()
            } else {
                a.depends_on.join(",")
            },
        ]);
    }
    out.push_str(&table(&rows, "  "));
}

/// Each node's patch files in merge order, relative to the patch folder,
/// then the files there that are not patches.
fn write_patches(out: &mut String, report: &ValidateReport<'_>, t: &Topology) {
    let roots: Vec<String> = t
        .patches_dirs
        .iter()
        .map(|d| cell_of(d.display()))
        .collect();
    let _ = writeln!(out, "\npatches from {} (merge order):", roots.join(", "));
    // With one folder, paths are shown within it; with several, the folder
    // a file comes from is part of what the reader needs.
    let strip = |p: &std::path::Path| -> String {
        match t.patches_dirs.as_slice() {
            [one] => p.strip_prefix(one).unwrap_or(p).display().to_string(),
            _ => p.display().to_string(),
        }
    };
    for (hostname, files) in report.patches {
        let _ = writeln!(out, "  {}:", cell_of(hostname));
        if files.is_empty() {
            out.push_str("    (none)\n");
        }
        let rows: Vec<Vec<String>> = files
            .iter()
            .map(|f| vec![strip(&f.path), serde_plain(&f.kind)])
            .collect();
        out.push_str(&table(&rows, "    "));
    }
    if !report.ignored.is_empty() {
        out.push_str("ignored (not patches):\n");
        for i in report.ignored {
            let _ = writeln!(out, "  {}", cell_of(i.display()));
        }
    }
}

fn serde_plain<T: Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(serde_json::Value::String(s)) => s,
        Ok(other) => other.to_string(),
        Err(_) => String::new(),
    }
}

/// The JSON view of a report (`validate --json`), one object:
///
/// ```text
/// { "file": str, "valid": bool, "errors": int, "warnings": int,
///   "diagnostics": [JsonDiagnostic...],
///   "topology": <the validated model> | null,
///   "patches": { "<hostname>": [{"path": str, "kind": "literal"|"jinja"|"templatefile",
///                                "level": "common"|"role"|"node"}...] },
///   "ignored": [str...] }
/// ```
///
/// `topology` is the model with every default applied (`Topology` serialized:
/// `cluster`, `proxmox`, `image_factory_url`, `schematics`, `pci_mappings`,
/// `nodes`, `patches_dir`, `state`); `patches` keeps node order.
pub fn json(report: &ValidateReport<'_>) -> String {
    #[derive(Serialize)]
    struct View<'a> {
        file: String,
        valid: bool,
        errors: usize,
        warnings: usize,
        diagnostics: Vec<JsonDiagnostic<'a>>,
        topology: Option<&'a Topology>,
        patches: indexmap::IndexMap<&'a str, &'a [PatchFile]>,
        ignored: &'a [PathBuf],
    }
    let errors = report.diagnostics.iter().filter(|d| d.is_error()).count();
    let view = View {
        file: report.file.display().to_string(),
        valid: errors == 0,
        errors,
        warnings: report.diagnostics.len() - errors,
        diagnostics: report
            .diagnostics
            .iter()
            .map(JsonDiagnostic::from)
            .collect(),
        topology: report.topology,
        patches: report
            .patches
            .iter()
            .map(|(h, f)| (h.as_str(), f.as_slice()))
            .collect(),
        ignored: report.ignored,
    };
    serde_json::to_string_pretty(&view).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}
