//! `talosprov health`: the `talosctl health` checks that apply to the cluster, with
//! the node list from the topology and the talosconfig from the state (read only).
//! Prints each check by name; exits 1 naming the failing checks.

use std::net::IpAddr;
use std::time::Duration;

use anyhow::{Context, anyhow};
use clap::Args;

use super::state_options::{StateOptions, no_state};
use super::{CommandError, Outcome};
use talosprov_core::machine::talosconfig::Talosconfig;
use talosprov_core::topology::{Role, Topology};
use talosprov_engine::health::{self, ClusterNode, Cni, Expectations};
use talosprov_state::State;
use talosprov_talos::{Backoff, ClientCredentials};

/// Arguments of `talosprov health`.
#[derive(Debug, Args)]
pub struct HealthArgs {
    /// Keep checking until every check passes or this long has passed, in
    /// seconds or as a duration such as `5m` or `1h30m` (0: check once).
    #[arg(long, value_name = "DURATION", default_value = "0", value_parser = talosprov_core::duration::parse)]
    wait: Duration,

    #[command(flatten)]
    state: StateOptions,
}

/// The client credentials of the talosconfig in the state: its current context's
/// `ca`, `crt` and `key`.
fn credentials(state: &State) -> anyhow::Result<ClientCredentials> {
    let output =
        state.outputs.talosconfig.as_ref().ok_or_else(|| {
            anyhow!("the state has no talosconfig yet: run `talosprov apply` first")
        })?;
    let tc = Talosconfig::parse(output.value.expose())
        .context("cannot read the talosconfig in the state")?;
    Ok(ClientCredentials::from_talosconfig(&tc))
}

/// The cluster's CNI, from the first control plane's machine config in the state.
pub(super) fn cni(topology: &Topology, state: &State) -> Option<Cni> {
    topology
        .controlplanes()
        .chain(topology.nodes.iter())
        .find_map(|n| state.outputs.machineconfigs.get(&n.hostname))
        .and_then(|c| Cni::from_machine_config(c.value.expose()))
}

/// What apply's final gate and `health` wait for on the Kubernetes side, when the
/// checks apply: the cluster has a CNI (Talos's own, or an add-on that carries one:
/// the `cilium` preset, a `manifests` add-on with a DaemonSet mounting
/// `/etc/cni/net.d`). Every node must be registered and Ready; with a GPU add-on
/// (the `nvidia-gpu-operator` preset, or a device plugin among the `manifests`
/// add-ons), every node with an NVIDIA device must have `nvidia.com/gpu`
/// allocatable. `None` when the checks do not apply. The engine's
/// [`health::wait_for_kubernetes`] does the asking.
pub(super) fn kubernetes_gate(
    topology: &Topology,
    state: &State,
    cni: Option<&Cni>,
    wait: Duration,
) -> Option<health::KubernetesGate> {
    use talosprov_core::topology::Preset;
    let (addons, _) = talosprov_files::render_addons(topology);
    let objects = || addons.iter().flat_map(|a| &a.objects);
    let cni_addon = topology
        .addons
        .values()
        .any(|a| a.preset == Some(Preset::Cilium))
        || objects().any(|o| o.carries_cni());
    if matches!(cni, Some(Cni::None)) && !cni_addon {
        return None;
    }
    let gpu_addon = topology
        .addons
        .values()
        .any(|a| a.preset == Some(Preset::NvidiaGpuOperator))
        || objects().any(|o| o.carries_device_plugin());
    let gpu_nodes: Vec<IpAddr> = topology
        .nodes
        .iter()
        .filter(|n| gpu_addon && talosprov_core::addon::checks::has_nvidia_device(topology, n))
        .map(|n| IpAddr::V4(n.ip))
        .collect();
    Some(health::KubernetesGate {
        kubeconfig: state
            .outputs
            .kubeconfig
            .as_ref()
            .map(|k| k.value.expose().to_owned()),
        nodes: cluster_nodes(topology),
        gpu_nodes,
        wait,
    })
}

/// `report` with the Kubernetes checks in place of the skipped ones, when they
/// apply ([`kubernetes_gate`], asking for up to `wait`); CoreDNS is not
/// checked, and its check says so.
async fn kubernetes_checks(
    topology: &Topology,
    state: &State,
    cni: Option<&Cni>,
    mut report: health::HealthReport,
    wait: Duration,
) -> health::HealthReport {
    let Some(gate) = kubernetes_gate(topology, state, cni, wait) else {
        return report;
    };
    let checks = health::wait_for_kubernetes(&gate, |_| {}).await.checks;
    let at = report
        .checks
        .iter()
        .position(|c| c.name == health::CheckName::KubernetesNodesReady)
        .unwrap_or(report.checks.len());
    report
        .checks
        .retain(|c| c.name != health::CheckName::KubernetesNodesReady);
    for (i, c) in checks.into_iter().enumerate() {
        report.checks.insert((at + i).min(report.checks.len()), c);
    }
    for c in &mut report.checks {
        if c.name == health::CheckName::CorednsReady {
            c.reason = "not checked by talosprov; use `kubectl -n kube-system get pods -l k8s-app=kube-dns`".to_owned();
        }
    }
    report
}

/// The cluster's nodes as `kubectl get nodes` shows them: NAME, STATUS, ROLES,
/// VERSION, INTERNAL-IP, and GPU when any node has one.
pub(super) fn node_table(nodes: &[talosprov_kube::KubeNode]) -> String {
    let gpus = nodes.iter().any(|n| n.gpus > 0);
    let mut rows = vec![
        vec!["NAME", "STATUS", "ROLES", "VERSION", "INTERNAL-IP"]
            .into_iter()
            .map(str::to_owned)
            .collect::<Vec<_>>(),
    ];
    if gpus {
        rows[0].push("GPU".to_owned());
    }
    for n in nodes {
        let mut row = vec![
            n.name.clone(),
            if n.ready { "Ready" } else { "NotReady" }.to_owned(),
            if n.control_plane {
                "control-plane"
            } else {
                "<none>"
            }
            .to_owned(),
            n.kubelet_version.clone(),
            n.internal_ip
                .map_or_else(|| "<none>".to_owned(), |ip| ip.to_string()),
        ];
        if gpus {
            row.push(n.gpus.to_string());
        }
        rows.push(row);
    }
    let widths: Vec<usize> = (0..rows[0].len())
        .map(|c| rows.iter().map(|r| r[c].len()).max().unwrap_or(0))
        .collect();
    rows.iter()
        .map(|r| {
            let cells: Vec<String> = r
                .iter()
                .zip(&widths)
                .map(|(cell, w)| format!("{cell:<w$}"))
                .collect();
            cells.join("   ").trim_end().to_owned() + "\n"
        })
        .collect()
}

/// The nodes to check, in topology order.
pub fn cluster_nodes(topology: &Topology) -> Vec<ClusterNode> {
    topology
        .nodes
        .iter()
        .map(|n| ClusterNode {
            hostname: n.hostname.clone(),
            ip: IpAddr::V4(n.ip),
            role: n.role,
        })
        .collect()
}

fn load_topology(args: &HealthArgs) -> Result<Topology, CommandError> {
    let loaded = talosprov_files::load_topology(&args.state.file)?;
    match loaded.topology {
        Some(t) => Ok(t),
        None => {
            crate::ui::write_stderr(&crate::ui::diagnostics::render_all(
                &loaded.diagnostics,
                crate::ui::diagnostics::stderr_colour(),
            ));
            Err(CommandError::Reported)
        }
    }
}

/// Run the checks and print them.
///
/// # Errors
/// A topology with errors, no state or no talosconfig in it, or a failing check.
pub async fn run(args: HealthArgs) -> Result<Outcome, CommandError> {
    let topology = load_topology(&args)?;
    let store = args.state.open()?;
    let loaded = store.load().await?.ok_or_else(|| no_state(&store))?;
    let credentials = credentials(&loaded.state).context("cannot connect to the nodes")?;
    let nodes = cluster_nodes(&topology);
    let expect = Expectations {
        talos_version: topology.cluster.talos_version.to_string(),
        cni: cni(&topology, &loaded.state),
    };
    let control_planes = nodes
        .iter()
        .filter(|n| n.role == Role::Controlplane)
        .count();
    let count = |n: usize, word: &str| {
        if n == 1 {
            format!("{n} {word}")
        } else {
            format!("{n} {word}s")
        }
    };
    crate::ui::print_line(&format!(
        "Checking cluster {} ({}, {}, Talos {}):",
        topology.cluster.name,
        count(control_planes, "control plane"),
        count(nodes.len() - control_planes, "worker"),
        expect.talos_version
    ));
    let report = if args.wait.is_zero() {
        health::run_checks(&nodes, &credentials, &expect).await
    } else {
        let wait = args.wait;
        match health::wait_healthy(&nodes, &credentials, &expect, wait, Backoff::default()).await {
            Ok(r) => r,
            Err(e) => e.report().clone(),
        }
    };
    let report = kubernetes_checks(
        &topology,
        &loaded.state,
        expect.cni.as_ref(),
        report,
        args.wait,
    )
    .await;
    crate::ui::console::print_lines(&report.render())?;
    let failing = report.failing().count();
    if failing > 0 {
        let waited = if args.wait.is_zero() {
            String::new()
        } else {
            format!(" after waiting {}", talosprov_retry::seconds(args.wait))
        };
        return Err(anyhow!(
            "the cluster is not healthy{waited}: {failing} of {} checks failed: {}",
            report.checks.len(),
            report.failing_names()
        )
        .into());
    }
    crate::ui::print_line("The cluster is healthy.");
    Ok(Outcome::Success)
}
