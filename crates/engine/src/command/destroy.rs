//! `destroy`: with the state locked, show the destroy plan (made from the
//! state alone), ask, then reset the Talos nodes that answer (gracefully for
//! control planes), shut down and delete the VMs, the pool and the PCI
//! mappings, saving after every step. Images stay unless `--purge-images`.

use std::time::Duration;

use talosprov_base::sensitive::Sensitive;
use talosprov_plan::desired::Desired;
use talosprov_plan::diff::destroy_plan;
use talosprov_plan::model::Plan;
use talosprov_plan::observed::Observed;

use super::apply::{context, interrupt_grace, run_plan};
use super::prepare as cluster;
use super::store::{StateSettings, locked};
use crate::apply::executor::Saver;
use crate::apply::session::{Question, Shown};
use crate::command::{CommandError, Ui, approve};

/// `destroy`'s flags, as parsed.
#[derive(Debug, Clone)]
pub struct DestroyRequest {
    /// Where the topology and the state are.
    pub state: StateSettings,
    /// `-lock-timeout`.
    pub lock_timeout: Duration,
    /// `-auto-approve`.
    pub auto_approve: bool,
    /// `--purge-images`: delete the downloaded Talos images too.
    pub purge_images: bool,
    /// `-parallelism`: deletions at once.
    pub parallelism: usize,
}

/// How a destroy ended, for the view to word.
#[derive(Debug)]
pub enum Destroyed {
    /// There is no state: nothing to destroy.
    NoState,
    /// The destroy plan, shown, and every change in it made (none when it
    /// was empty).
    Done(Box<Plan>),
}

/// Run `destroy`.
///
/// # Errors
/// `-parallelism 0`, topology diagnostics, a held lock, no confirmation,
/// failed deletions (listed); [`CommandError::Interrupted`].
pub async fn destroy(request: &DestroyRequest, ui: &Ui) -> Result<Destroyed, CommandError> {
    if request.parallelism == 0 {
        return Err(anyhow::anyhow!("-parallelism must be at least 1").into());
    }
    let interrupt_grace = interrupt_grace()?;
    let topology = cluster::load_topology(&request.state.file, ui)?;
    let store = request.state.open(ui)?;
    locked(
        &store,
        request.lock_timeout,
        "destroy",
        ui,
        async |cancel| {
            let Some(loaded) = store.load().await? else {
                return Ok(Destroyed::NoState);
            };
            let (mut state, encrypted) = (loaded.state, loaded.encrypted);
            let plan = destroy_plan(Some(&state), &Observed::default(), request.purge_images);
            ui.show(Shown::Plan(&plan))?;
            if plan.is_empty() {
                return Ok(Destroyed::Done(Box::new(plan)));
            }
            approve(
                ui,
                request.auto_approve,
                &Question::Destroy,
                "-auto-approve",
                "cancelled: nothing was changed",
                cancel.clone(),
            )
            .await?;
            let secrets = super::prepare::state_secrets_opt(Some(&state))?;
            let ctx = context(
                &topology,
                &state,
                secrets.as_ref(),
                Desired::default(),
                Sensitive::default(),
                interrupt_grace,
                ui,
            )?;
            let mut saver = Saver {
                store: &store,
                encrypted,
                state: &mut state,
            };
            let again = super::store::command_line(&request.state, &["destroy"]);
            run_plan(
                ctx,
                &plan,
                &mut saver,
                request.parallelism,
                &again,
                ui,
                cancel,
            )
            .await?;
            Ok(Destroyed::Done(Box::new(plan)))
        },
    )
    .await
}
