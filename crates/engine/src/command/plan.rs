//! `plan`: with the state locked (as OpenTofu's plan does, so that the plan
//! is made from a state no apply is writing), refuse to plan over lost
//! secrets or another cluster's nodes, make the plan, show it, and write the
//! GitLab report and the saved plan when asked.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;

use talosprov_plan::gitlab_report::GitlabReport;
use talosprov_plan::kind::resource::EtcdRecovery;
use talosprov_plan::model::Plan;
use talosprov_plan::saved::{SAVED_PLAN_FORMAT_VERSION, SavedPlan};
use talosprov_statefile::address::Address;
use talosprov_topology::model::Topology;

use super::planning::{PlanRequest as Planning, make_plan};
use super::prepare as cluster;
use super::store::{StateSettings, Store, locked};
use crate::apply::session::Shown;
use crate::command::{CommandError, Ui, guard};

/// `plan`'s flags, as parsed.
#[derive(Debug, Clone)]
pub struct PlanRequest {
    /// Where the topology and the state are.
    pub state: StateSettings,
    /// `-lock-timeout`.
    pub lock_timeout: Duration,
    /// `-out FILE`: save the plan for `apply FILE`.
    pub out: Option<PathBuf>,
    /// `--report-gitlab FILE`: the merge request's plan report.
    pub report_gitlab: Option<PathBuf>,
    /// Plan from the state alone (`-refresh=false` or `--offline`).
    pub offline: bool,
    /// `-target`s.
    pub targets: Vec<Address>,
    /// `-refresh-only`: show only what changed outside talosprov.
    pub refresh_only: bool,
    /// `--staged`.
    pub staged: bool,
    /// `-allow-new-etcd`: where etcd is gone on every control plane, plan a
    /// new, empty etcd (the Kubernetes objects are lost).
    pub allow_new_etcd: bool,
}

/// What `plan` made, beside what it showed.
#[derive(Debug)]
pub struct Planned {
    /// The plan shown (only its drift with `-refresh-only`).
    pub plan: Plan,
    /// There is something to apply (or, with `-refresh-only`, to record), or
    /// a conflict to resolve: `-detailed-exitcode`'s 2.
    pub pending: bool,
}

/// Say that a signal stopped the run while it was making its plan, before
/// anything was changed; `again` is the command line that starts it over.
pub(crate) fn warn_planning_interrupted(ui: &Ui, again: &str) {
    ui.warn(&format!(
        "{} received while making the plan: stopped before any change; nothing was \
         changed and no plan was saved; run `{again}` to start over",
        ui.interrupted_by()
    ));
}

/// Run `plan`.
///
/// # Errors
/// Topology diagnostics, a held lock, refusals (lost secrets, another
/// cluster's nodes, changes talosprov refuses to make), refresh errors, a
/// report or plan file that cannot be written, a broken plan asked to be
/// saved (`-out`; apply would refuse it); [`CommandError::Interrupted`].
pub async fn plan(request: &PlanRequest, ui: &Ui) -> Result<Planned, CommandError> {
    let topology = cluster::load_topology(&request.state.file, ui)?;
    let store = request.state.open(ui)?;
    locked(
        &store,
        request.lock_timeout,
        "plan",
        ui,
        async |mut cancel| {
            tokio::select! {
                r = plan_locked(request, &topology, &store, ui) => r,
                _ = cancel.wait_for(|c| *c) => {
                    warn_planning_interrupted(ui, &plan_command(request));
                    Err(CommandError::Interrupted)
                }
            }
        },
    )
    .await
}

/// `talosprov plan` as `request` was given: its flags that find the
/// topology and the state, `-out`, `-target`s, `--staged`, `-refresh-only`,
/// `-refresh=false` and `-allow-new-etcd`.
fn plan_command(request: &PlanRequest) -> String {
    let mut words: Vec<String> = vec!["plan".into()];
    if let Some(out) = &request.out {
        words.extend(["-out".into(), out.display().to_string()]);
    }
    for t in &request.targets {
        words.extend(["-target".into(), t.to_string()]);
    }
    let flags = [
        (request.staged, "--staged"),
        (request.refresh_only, "-refresh-only"),
        (request.offline, "-refresh=false"),
        (request.allow_new_etcd, "-allow-new-etcd"),
    ];
    words.extend(
        flags
            .iter()
            .filter(|(on, _)| *on)
            .map(|(_, f)| (*f).to_owned()),
    );
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    super::store::command_line(&request.state, &words)
}

/// Add what the plan warns about the cluster's backups
/// ([`crate::backups::plan_warnings`]): `store` says whether the state is
/// remote; `beside` is where the default folder is.
pub(super) async fn backup_warnings(
    plan: &mut Plan,
    topology: &Topology,
    store: &Store,
    beside: &std::path::Path,
    online: bool,
) {
    let remote = matches!(store.backend(), talosprov_backend::StateBackend::Http(_));
    let now = time::OffsetDateTime::now_utc();
    for message in crate::backups::plan_warnings(topology, remote, beside, online, now).await {
        plan.warnings.push(talosprov_plan::model::PlanWarning {
            address: None,
            message,
        });
    }
}

/// `plan` with the state locked.
async fn plan_locked(
    request: &PlanRequest,
    topology: &Topology,
    store: &Store,
    ui: &Ui,
) -> Result<Planned, CommandError> {
    let loaded = store.load().await?;
    let state = loaded.as_ref().map(|l| &l.state);
    guard::refuse_lost_secrets(topology, state, store)?;
    if !request.offline {
        guard::refuse_existing_cluster(topology, state, None, store).await?;
    }
    let how = Planning {
        offline: request.offline,
        targets: &request.targets,
        staged: request.staged,
        warn_targets: true,
        etcd: if request.allow_new_etcd {
            EtcdRecovery::NewEtcd
        } else {
            EtcdRecovery::Refuse
        },
    };
    let mut planned = make_plan(topology, state, None, &how, ui).await?;
    backup_warnings(
        &mut planned.plan,
        topology,
        store,
        &request.state.snapshot_folder(),
        !request.offline,
    )
    .await;
    let plan = if request.refresh_only {
        planned.plan.drift_only()
    } else {
        planned.plan.clone()
    };
    ui.show(if request.refresh_only {
        Shown::Drift(&plan)
    } else {
        Shown::Plan(&plan)
    })?;
    if let Some(report) = &request.report_gitlab {
        std::fs::write(report, GitlabReport::of(&plan).to_json() + "\n")
            .with_context(|| format!("cannot write {}", report.display()))?;
    }
    if let Some(out) = &request.out
        && !plan.broken.is_empty()
    {
        // apply refuses a broken plan: saving it would only move the failure
        // to the apply job, after the review.
        return Err(CommandError::Failed(anyhow::anyhow!(
            "the plan is not saved to {}: the cluster is broken (see Broken above), and apply \
             refuses a broken plan. Recover with `talosprov etcd restore`, or plan again with \
             -allow-new-etcd",
            out.display()
        )));
    }
    if let Some(out) = &request.out {
        cluster::write_saved_plan(
            out,
            &SavedPlan {
                format_version: SAVED_PLAN_FORMAT_VERSION,
                plan: plan.clone(),
                secrets: planned.generated.clone(),
                targets: request.targets.iter().map(ToString::to_string).collect(),
                staged: request.staged,
                allow_new_etcd: request.allow_new_etcd,
                inputs: planned.inputs.clone(),
                renderings: planned.renderings.clone(),
                renewal: Some(planned.renewal),
            },
        )?;
    }
    let pending = if request.refresh_only {
        !plan.drift.is_empty()
    } else {
        !plan.is_empty() || !plan.conflicts.is_empty()
    };
    Ok(Planned { plan, pending })
}
