//! `health`: the `talosctl health` checks that apply to the cluster, with the
//! node list from the topology and the talosconfig from the state (read only,
//! no lock), then the Kubernetes checks when the cluster has a CNI.

use std::time::Duration;

use anyhow::{Context as _, anyhow};

use talosprov_base::role::Role;
use talosprov_base::talosconfig::Talosconfig;
use talosprov_retry::Backoff;
use talosprov_statefile::format::State;
use talosprov_talos::credentials::ClientCredentials;
use talosprov_topology::model::Topology;

use super::gate::{cluster_nodes, cni, kubernetes_gate};
use super::store::{StateSettings, no_state};
use super::{CommandError, Ui};
use crate::health;
use crate::health::cluster::ClusterNode;
use crate::health::judge::Expectations;
use crate::health::report::HealthReport;

/// A health check about to run: what the view says before the checks (the
/// cluster, its nodes by role, the Talos version), and what it needs.
#[derive(Debug)]
pub struct HealthRun {
    /// The cluster's name.
    pub cluster: String,
    /// Control planes in the topology.
    pub control_planes: usize,
    /// Workers in the topology.
    pub workers: usize,
    /// The Talos version every node must run.
    pub talos_version: String,
    topology: Topology,
    state: State,
    credentials: ClientCredentials,
    nodes: Vec<ClusterNode>,
    expect: Expectations,
}

/// The client credentials of the talosconfig in the state (its current context's `ca`,
/// `crt` and `key`), or, when its certificate has expired or is about to, of one issued for
/// the run from the OS CA in the state's secrets (see
/// [`super::prepare::connection_credentials`]).
pub(super) fn credentials(topology: &Topology, state: &State) -> anyhow::Result<ClientCredentials> {
    let output =
        state.outputs.talosconfig.as_ref().ok_or_else(|| {
            anyhow!("the state has no talosconfig yet: run `talosprov apply` first")
        })?;
    Talosconfig::parse(output.value.expose())
        .context("cannot read the talosconfig in the state")?;
    let fresh = super::prepare::state_secrets(state)?
        .map(|s| super::prepare::new_talosconfig(topology, &s).map(|t| t.to_yaml()))
        .transpose()?;
    super::prepare::connection_credentials(
        Some(output.value.expose().as_str()),
        fresh.as_deref(),
        time::OffsetDateTime::now_utc(),
    )?
    .context("the state has no talosconfig yet: run `talosprov apply` first")
}

/// The certificates check: each CA of the state's secrets and the client certificates of
/// its talosconfig and kubeconfig, with their expiry dates. It fails when one has expired;
/// a CA that expires within a year is named in the reason.
fn certificates_check(state: &State, now: time::OffsetDateTime) -> health::report::Check {
    use talosprov_machine::expiry::{
        certificate_not_after, kubeconfig_not_after, talosconfig_not_after,
    };
    use talosprov_plan::renewal::{CA_WARN_WITHIN, cas};
    let mut seen: Vec<(String, time::OffsetDateTime, bool)> = Vec::new();
    if let Ok(Some(secrets)) = super::prepare::state_secrets(state) {
        for (name, _, pem) in cas(&secrets) {
            if let Some(t) = certificate_not_after(pem) {
                seen.push((format!("{name} CA"), t, true));
            }
        }
    }
    let outputs = &state.outputs;
    if let Some(t) = outputs
        .talosconfig
        .as_ref()
        .and_then(|o| talosconfig_not_after(o.value.expose()))
    {
        seen.push(("talosconfig".to_owned(), t, false));
    }
    if let Some(t) = outputs
        .kubeconfig
        .as_ref()
        .and_then(|o| kubeconfig_not_after(o.value.expose()))
    {
        seen.push(("kubeconfig".to_owned(), t, false));
    }
    let expired: Vec<&str> = seen
        .iter()
        .filter(|(_, t, _)| *t <= now)
        .map(|(n, _, _)| n.as_str())
        .collect();
    let soon: Vec<&str> = seen
        .iter()
        .filter(|(_, t, ca)| *ca && *t > now && *t - now < CA_WARN_WITHIN)
        .map(|(n, _, _)| n.as_str())
        .collect();
    let mut reason = seen
        .iter()
        .map(|(n, t, _)| format!("{n} until {}", t.date()))
        .collect::<Vec<_>>()
        .join(", ");
    if !expired.is_empty() {
        reason = format!(
            "expired: {} (run `talosprov plan` to renew a client certificate); {reason}",
            expired.join(", ")
        );
    } else if !soon.is_empty() {
        reason = format!(
            "expires within a year, rotate it: {}; {reason}",
            soon.join(", ")
        );
    }
    health::report::Check {
        name: health::report::CheckName::Certificates,
        status: if expired.is_empty() {
            health::report::CheckStatus::Pass
        } else {
            health::report::CheckStatus::Fail
        },
        reason,
    }
}

/// Load the topology (its problems given to the frontend; a warning-free
/// topology is not required to check a running cluster) and the state.
///
/// # Errors
/// A topology with errors ([`CommandError::Reported`]), no state, or no
/// talosconfig in it.
pub async fn prepare(settings: &StateSettings, ui: &Ui) -> Result<HealthRun, CommandError> {
    let loaded = talosprov_files::load_topology(&settings.file)?;
    let Some(topology) = loaded.topology else {
        ui.diagnostics(&loaded.diagnostics);
        return Err(CommandError::Reported);
    };
    let store = settings.open(ui)?;
    let state = store.load().await?.ok_or_else(|| no_state(&store))?.state;
    let credentials = credentials(&topology, &state).context("cannot connect to the nodes")?;
    let nodes = cluster_nodes(&topology);
    let expect = Expectations {
        talos_version: topology.cluster.talos_version.to_string(),
        cni: cni(&topology, &state),
    };
    let control_planes = nodes
        .iter()
        .filter(|n| n.role == Role::Controlplane)
        .count();
    Ok(HealthRun {
        cluster: topology.cluster.name.clone(),
        control_planes,
        workers: nodes.len() - control_planes,
        talos_version: expect.talos_version.clone(),
        topology,
        state,
        credentials,
        nodes,
        expect,
    })
}

impl HealthRun {
    /// Run the checks, once (`wait` zero) or until they all pass or `wait`
    /// has passed, then the Kubernetes checks where they apply (asking for
    /// up to `wait`); CoreDNS is not checked, and its check says so.
    pub async fn check(self, wait: Duration) -> HealthReport {
        let mut report = if wait.is_zero() {
            health::probe::run_checks(&self.nodes, &self.credentials, &self.expect).await
        } else {
            match health::probe::wait_healthy(
                &self.nodes,
                &self.credentials,
                &self.expect,
                wait,
                Backoff::default(),
            )
            .await
            {
                Ok(r) => r,
                Err(e) => e.report().clone(),
            }
        };
        report.checks.insert(
            0,
            certificates_check(&self.state, time::OffsetDateTime::now_utc()),
        );
        let gate = kubernetes_gate(&self.topology, &self.state, self.expect.cni.as_ref(), wait);
        let Some(gate) = gate else {
            return report;
        };
        let checks = health::gate::wait_for_kubernetes(&gate, |_| {})
            .await
            .checks;
        let at = report
            .checks
            .iter()
            .position(|c| c.name == health::report::CheckName::KubernetesNodesReady)
            .unwrap_or(report.checks.len());
        report
            .checks
            .retain(|c| c.name != health::report::CheckName::KubernetesNodesReady);
        for (i, c) in checks.into_iter().enumerate() {
            report.checks.insert((at + i).min(report.checks.len()), c);
        }
        for c in &mut report.checks {
            if c.name == health::report::CheckName::CorednsReady {
                c.reason = "not checked by talosprov; use `kubectl -n kube-system get pods -l k8s-app=kube-dns`".to_owned();
            }
        }
        report
    }
}
