//! What apply records in the state before the plan's first change, and in
//! which order (OpenTofu's apply saves its refreshed state the same way before
//! it changes anything):
//! 1. the cluster's secrets, once per lineage, before anything uses them;
//! 2. staged configs a reboot has taken (refresh saw them; no change undoes
//!    them);
//! 3. the talosconfig the Talos steps authenticate with.
//!
//! [`before_changes`] decides (pure, from the state, the plan and what
//! refresh saw); [`save_before_changes`] saves each part as soon as it is
//! known, so that an interruption between two saves loses nothing.

use std::collections::BTreeMap;

use talosprov_backend::backend::Backend;
use talosprov_base::sensitive::Sensitive;
use talosprov_machine::secrets::SecretsBundle;
use talosprov_machine::secrets_file::secrets_yaml;
use talosprov_plan::model::Plan;
use talosprov_plan::observed::Observed;
use talosprov_statefile::format::RecordedMember;
use talosprov_statefile::format::{Rendering, State};

use super::executor::Saver;
use super::record::{self, Record};
use super::refresh_only::observed_records;

/// What to record before the first change.
#[derive(Debug, Default)]
pub struct BeforeChanges {
    /// The secrets bundle text to record: `Some` when the state has none yet
    /// and this apply makes something (an empty plan on no state starts no
    /// state).
    pub secrets: Option<Sensitive>,
    /// Records of what refresh saw that no change undoes: staged configs taken
    /// at a reboot. Only for a state that exists.
    pub taken: Vec<Record>,
    /// Whether a talosconfig must be made: the state has none and the plan
    /// changes something.
    pub talosconfig: bool,
    /// The Helm renderings to record, when they differ from the state's.
    pub renderings: Option<BTreeMap<String, Rendering>>,
    /// The pools' allocation to record, when it differs from the state's:
    /// each member keeps it for life, so it is saved before any member's VM
    /// is made.
    pub pools: Option<BTreeMap<String, Vec<RecordedMember>>>,
    /// The `etcd restore` the run is part of, recorded before its first
    /// change.
    pub etcd_restore: Option<talosprov_statefile::format::EtcdRestore>,
}

/// The pools' allocation a run records: `planned` when it differs from the
/// state's and the run records anything (as for renderings).
pub fn pools_to_record(
    state: &State,
    had_state: bool,
    plan: &Plan,
    planned: BTreeMap<String, Vec<RecordedMember>>,
) -> Option<BTreeMap<String, Vec<RecordedMember>>> {
    let records = had_state || !plan.is_empty();
    (records && planned != state.pools).then_some(planned)
}

/// The Helm renderings a run records: `planned` (every Helm add-on's, those
/// of removed add-ons gone) when it differs from the state's, and the run
/// records anything (a state that exists, or a plan with changes).
pub fn renderings_to_record(
    state: &State,
    had_state: bool,
    plan: &Plan,
    planned: BTreeMap<String, Rendering>,
) -> Option<BTreeMap<String, Rendering>> {
    let records = had_state || !plan.is_empty();
    (records && planned != state.renderings).then_some(planned)
}

/// The secrets text a first apply records: the one generated for the plan,
/// else the one the saved plan carries, else the bundle written out (secrets
/// imported with `talosprov secrets import` before the first apply).
pub fn secrets_to_record(
    generated: Option<&Sensitive>,
    saved: Option<&Sensitive>,
    bundle: &SecretsBundle,
) -> Sensitive {
    generated
        .or(saved)
        .cloned()
        .unwrap_or_else(|| Sensitive::new(secrets_yaml(bundle)))
}

/// Decide what to record before `plan`'s first change. `had_state`: a state
/// was loaded (rather than started for this run); `secrets`: what
/// [`secrets_to_record`] gives.
pub fn before_changes(
    state: &State,
    had_state: bool,
    plan: &Plan,
    observed: &Observed,
    secrets: Sensitive,
) -> BeforeChanges {
    let makes_something = !plan.is_empty() || had_state;
    BeforeChanges {
        secrets: (state.secrets.is_none() && makes_something).then_some(secrets),
        taken: if had_state {
            observed_records(state, observed)
                .into_iter()
                .filter(|r| matches!(r, Record::StagedTaken(_)))
                .collect()
        } else {
            Vec::new()
        },
        talosconfig: state.outputs.talosconfig.is_none() && !plan.is_empty(),
        renderings: None,
        pools: None,
        etcd_restore: None,
    }
}

/// Save what [`before_changes`] decided, each part as soon as it is known;
/// `talosconfig` makes the talosconfig when one is needed.
///
/// # Errors
/// A failed save, or `talosconfig`'s error; what was saved before stays.
pub async fn save_before_changes<B: Backend>(
    saver: &mut Saver<'_, B>,
    before: BeforeChanges,
    talosconfig: impl FnOnce() -> anyhow::Result<Sensitive>,
) -> anyhow::Result<()> {
    if let Some(secrets) = before.secrets {
        saver.state.secrets = Some(secrets);
        saver.save().await?;
    }
    if let Some(pools) = before.pools {
        saver.state.pools = pools;
        saver.save().await?;
    }
    if let Some(renderings) = before.renderings {
        // Before the configs that carry them are applied, so that the next
        // plan finds them and renders nothing anew.
        saver.state.renderings = renderings;
        saver.save().await?;
    }
    if !before.taken.is_empty() {
        for r in before.taken {
            record::apply(saver.state, r);
        }
        saver.save().await?;
    }
    if let Some(restore) = before.etcd_restore {
        saver.state.etcd_restore = Some(restore);
        saver.save().await?;
    }
    if before.talosconfig {
        let text = talosconfig()?;
        saver.record(Record::Talosconfig(text)).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use talosprov_plan::change::Action;
    use talosprov_statefile::address::Address;

    fn plan_with_a_change() -> Plan {
        Plan::of_changes(vec![
            talosprov_plan::example::change(
                "vm/cp-1".parse::<Address>().expect("address"),
                Action::Create,
                "not in the state",
            )
            .expect("a change of that kind"),
        ])
    }

    fn secrets() -> Sensitive {
        Sensitive::new("cluster:\n  id: x\n")
    }

    #[test]
    fn an_empty_plan_on_no_state_records_nothing() {
        let state = State::new(uuid::Uuid::nil());
        let b = before_changes(
            &state,
            false,
            &Plan::of_changes(Vec::new()),
            &Observed::default(),
            secrets(),
        );
        assert!(
            b.secrets.is_none() && b.taken.is_empty() && !b.talosconfig,
            "{b:?}"
        );
    }

    #[test]
    fn a_first_apply_records_secrets_then_a_talosconfig() {
        let state = State::new(uuid::Uuid::nil());
        let b = before_changes(
            &state,
            false,
            &plan_with_a_change(),
            &Observed::default(),
            secrets(),
        );
        assert_eq!(
            b.secrets.as_ref().map(Sensitive::as_str),
            Some(secrets().as_str())
        );
        assert!(b.talosconfig);
    }

    #[test]
    fn recorded_secrets_and_talosconfig_are_never_replaced() {
        let mut state = State::new(uuid::Uuid::nil());
        state.secrets = Some(Sensitive::new("the cluster's own"));
        state.outputs.talosconfig =
            Some(talosprov_statefile::format::Output::sensitive("context: x"));
        let b = before_changes(
            &state,
            true,
            &plan_with_a_change(),
            &Observed::default(),
            secrets(),
        );
        assert!(b.secrets.is_none() && !b.talosconfig, "{b:?}");
    }

    #[test]
    fn the_secrets_recorded_come_from_the_plan_first() {
        let bundle = talosprov_machine::secrets_file::parse_secrets_yaml(include_str!(
            "../../../../tests/fixtures/secrets.yaml"
        ))
        .expect("fixture");
        let generated = Sensitive::new("generated");
        let saved = Sensitive::new("saved");
        assert_eq!(
            secrets_to_record(Some(&generated), Some(&saved), &bundle).as_str(),
            "generated"
        );
        assert_eq!(
            secrets_to_record(None, Some(&saved), &bundle).as_str(),
            "saved"
        );
        assert_eq!(
            secrets_to_record(None, None, &bundle).as_str(),
            secrets_yaml(&bundle).as_str()
        );
    }
}
