//! The human view of a plan, in OpenTofu's style: drift first, then one block
//! per change (mark, address, reason, fields, config diff, reboot note), the
//! warnings, and the summary line. Values in a plan are already redacted.

use std::fmt::Write;

use super::cell;

use talosprov_plan::change::{Action, Change, FieldChange};
use talosprov_plan::field::{ConfigField, Field, VmField};
use talosprov_plan::model::{Conflict, DriftKind, Plan, Summary};

/// The whole plan as text, ending with the summary line. Its values
/// (addresses, reasons, field values, diff lines, messages) are shown with
/// their control characters escaped and each line cut at
/// [`cell::MAX_LINE_CHARS`] characters (see [`cell::text`]).
pub fn render(plan: &Plan) -> String {
    let mut out = String::new();
    if !plan.refreshed && !plan.destroy {
        out.push_str("Note: planned offline (no refresh): drift is not known.\n\n");
    }
    if !plan.drift.is_empty() {
        out.push_str("Note: objects have changed outside of talosprov\n\n");
        for d in &plan.drift {
            match d.kind {
                DriftKind::Deleted => {
                    let _ = writeln!(out, "  # {} has been deleted", d.address);
                }
                DriftKind::Changed => {
                    let _ = writeln!(out, "  # {} has changed", d.address);
                    for f in &d.fields {
                        field_line(&mut out, f, false);
                    }
                    for line in d.diff.iter().flat_map(|diff| diff.lines()) {
                        let _ = writeln!(out, "      {line}");
                    }
                }
            }
        }
        out.push('\n');
    }
    if !plan.broken.is_empty() {
        out.push_str(
            "The cluster is broken in a way apply does not mend on its own (below): apply \
             refuses this plan until you choose how.\n\n",
        );
    } else if plan.changes.is_empty() && !plan.unfinished.is_empty() {
        out.push_str(
            "No changes apply would make now, but an operation is unfinished (below): the \
             command it names finishes it, so this is not a clean plan.\n\n",
        );
    } else if plan.changes.is_empty() && !plan.unknown.is_empty() {
        out.push_str(
            "No changes talosprov can see, but part of the cluster could not be read: its \
             state is unknown (below), so this is not a clean plan.\n\n",
        );
    } else if plan.changes.is_empty() && !plan.conflicts.is_empty() {
        out.push_str(
            "No changes talosprov can make: what is left waits on the conflicts below.\n\n",
        );
    } else if plan.changes.is_empty() && !plan.drift.is_empty() {
        out.push_str(
            "This is a refresh-only plan: talosprov will not undo these changes. \
             `talosprov apply -refresh-only` records them in the state.\n",
        );
    } else if plan.changes.is_empty() && !plan.warnings.is_empty() {
        // Nothing to do, but not all is as the topology says (a staged config
        // waiting for a reboot): the warnings say what.
        out.push_str(
            "No changes to make. The state matches the topology; see the warnings below.\n",
        );
    } else if plan.changes.is_empty() {
        out.push_str("No changes. The cluster matches the topology.\n");
    } else {
        out.push_str("talosprov will perform the following actions:\n\n");
        for c in &plan.changes {
            change_block(&mut out, c);
        }
    }
    for c in &plan.conflicts {
        conflict_block(&mut out, c);
    }
    notices(&mut out, "Warning", &plan.warnings);
    notices(&mut out, "Unknown", &plan.unknown);
    notices(&mut out, "Broken", &plan.broken);
    notices(&mut out, "Unfinished", &plan.unfinished);
    for p in &plan.pools {
        let _ = writeln!(out, "{p}");
    }
    if !plan.pools.is_empty() {
        out.push('\n');
    }
    if !plan.changes.is_empty() {
        addon_values(&mut out, plan);
        out.push_str(&summary_line(&plan.summary()));
        out.push('\n');
    }
    if !plan.conflicts.is_empty() {
        let n = plan.conflicts.len();
        let _ = writeln!(
            out,
            "Conflicts: {n} {} in Proxmox that talosprov does not own; apply leaves {} \
             untouched, with the changes that depend on {}.",
            if n == 1 { "object" } else { "objects" },
            if n == 1 { "it" } else { "them" },
            if n == 1 { "it" } else { "them" },
        );
    }
    // The plan itself writes no control character but its line breaks: this
    // escapes only what came from the values.
    match cell::text(&out) {
        std::borrow::Cow::Borrowed(_) => out,
        std::borrow::Cow::Owned(shown) => shown,
    }
}

/// Each Helm add-on's effective values (secrets redacted) and whether this
/// plan rendered it anew: shown with the changes, since they are what the
/// control planes' inline manifests were rendered from.
fn addon_values(out: &mut String, plan: &Plan) {
    for a in &plan.addons {
        let how = if a.rendered {
            "rendered now with helm template"
        } else {
            "the recorded rendering, its inputs unchanged"
        };
        let _ = writeln!(out, "Add-on {} ({}): {how}; values:", a.name, a.chart);
        let yaml = serde_yaml_ng::to_string(&a.values).unwrap_or_default();
        for line in yaml.lines().filter(|l| *l != "{}") {
            let _ = writeln!(out, "    {line}");
        }
        out.push('\n');
    }
}

/// A conflict: what was found, that it is left untouched, the commands that
/// take it over, and what waits for it.
fn conflict_block(out: &mut String, c: &Conflict) {
    let _ = writeln!(
        out,
        "Conflict: {}: {} already exists in Proxmox, and talosprov did not create it.",
        c.address, c.found
    );
    out.push_str("  talosprov does not change or delete it. To manage it with talosprov, run:\n");
    for command in &c.commands {
        let _ = writeln!(out, "    {command}");
    }
    out.push_str("  then plan again: the plan shows what apply changes on it.\n");
    if !c.blocked.is_empty() {
        let held: Vec<String> = c.blocked.iter().map(ToString::to_string).collect();
        let _ = writeln!(out, "  Held back until then: {}", held.join(", "));
    }
    out.push('\n');
}

fn verb(action: Action) -> &'static str {
    match action {
        Action::Create => "will be created",
        Action::Update => "will be updated in place",
        Action::Replace => "must be replaced",
        Action::Delete => "will be destroyed",
        Action::ApplyConfig => "will have its machine config applied",
        Action::Upgrade => "will be upgraded",
        Action::Bootstrap => "will be run",
    }
}

fn change_block(out: &mut String, c: &Change) {
    // A Talos upgrade to an older version (the planner's reason says so) is
    // told as what it is.
    let verb = if c.action() == Action::Upgrade && c.reason.contains(", a downgrade") {
        "will be downgraded"
    } else {
        verb(c.action())
    };
    let _ = writeln!(out, "  # {} {verb}: {}", c.address(), c.reason);
    let _ = writeln!(out, "{:>3} {}", c.action().mark(), c.address());
    if c.action() == Action::Upgrade {
        let _ = writeln!(out, "      ~ {}", upgrade_line(c));
    }
    for f in &c.fields {
        field_line(out, f, c.action() == Action::Update);
    }
    if let Some(diff) = c.config_diff.as_deref().filter(|d| !d.is_empty()) {
        for line in diff.lines() {
            let _ = writeln!(out, "      {line}");
        }
    }
    match (c.action(), c.reboot) {
        (Action::ApplyConfig, Some(true)) => {
            out.push_str("      (the node reboots)\n");
        }
        (Action::ApplyConfig, Some(false))
            if c.apply_mode() == Some(talosprov_plan::planned::ApplyMode::Staged) =>
        {
            out.push_str("      (staged: no reboot now; the node takes it at its next reboot)\n");
        }
        (Action::ApplyConfig, Some(false)) => {
            out.push_str("      (applied without a reboot)\n");
        }
        (Action::ApplyConfig, None) if c.config_diff.is_some() => {
            out.push_str("      (whether the node reboots: unknown until apply)\n");
        }
        (Action::Update, Some(true)) => {
            out.push_str("      (the VM restarts through Proxmox for the change to apply)\n");
        }
        _ => {}
    }
    out.push('\n');
}

/// `upgrade talos v1.13.7 -> v1.13.8 (reboot)`; a schematic change at the
/// same version names the installer image instead.
fn upgrade_line(c: &Change) -> String {
    let field = |name: ConfigField| c.fields.iter().find(|f| f.name == Field::Config(name));
    let what = match (
        field(ConfigField::TalosVersion),
        field(ConfigField::InstallerImage),
    ) {
        (
            Some(FieldChange {
                before: Some(b),
                after: Some(a),
                ..
            }),
            _,
        ) => format!("upgrade talos {b} -> {a}"),
        (_, Some(FieldChange { after: Some(a), .. })) => format!("upgrade talos to {a}"),
        _ => "upgrade talos".to_owned(),
    };
    format!("{what} (reboot)")
}

/// One field's line; `update`: a field of an in-place update (not drift),
/// where a data disk that goes is deleted.
fn field_line(out: &mut String, f: &FieldChange, update: bool) {
    let note = if f.pending {
        " (pending in Proxmox: taken at the VM's next start)"
    } else if update && matches!(f.name, Field::Vm(VmField::Scsi(_))) && f.after.is_none() {
        " (deleted with its volume and data: needs -allow-data-loss)"
    } else {
        ""
    };
    let _ = match (&f.before, &f.after) {
        (None, Some(a)) => writeln!(out, "      + {} = {a}{note}", f.name),
        (Some(b), None) => writeln!(out, "      - {} = {b}{note}", f.name),
        (Some(b), Some(a)) => writeln!(out, "      ~ {} = {b} -> {a}{note}", f.name),
        (None, None) => Ok(()),
    };
}

/// The Talos operations of a summary, in the plan's tense (`3 configs to
/// apply, 1 Talos upgrade, 1 bootstrap`) or, with `done`, the apply's
/// (`3 configs applied, 1 Talos upgrade, 1 bootstrap`); `None` when there are
/// none.
fn talos_operations(s: &Summary, done: bool) -> Option<String> {
    let mut talos = Vec::new();
    if s.apply_config > 0 {
        let noun = if s.apply_config == 1 {
            "config"
        } else {
            "configs"
        };
        let verb = if done { "applied" } else { "to apply" };
        talos.push(format!("{} {noun} {verb}", s.apply_config));
    }
    if s.upgrade > 0 {
        let noun = if s.upgrade == 1 {
            "upgrade"
        } else {
            "upgrades"
        };
        talos.push(format!("{} Talos {noun}", s.upgrade));
    }
    if s.bootstrap > 0 {
        talos.push("1 bootstrap".to_owned());
    }
    (!talos.is_empty()).then(|| talos.join(", "))
}

/// `Plan: 3 to add, 1 to change, 0 to destroy.`, followed by the Talos
/// operations when there are any: `Talos: 3 configs to apply, 1 bootstrap.`
pub fn summary_line(s: &Summary) -> String {
    let mut line = format!(
        "Plan: {} to add, {} to change, {} to destroy.",
        s.add, s.change, s.destroy
    );
    if let Some(talos) = talos_operations(s, false) {
        let _ = write!(line, " Talos: {talos}.");
    }
    line
}

/// What a finished apply did, counted as its plan was (`Plan:` and `Apply
/// complete!` give the same numbers): `Apply complete! Resources: 3 added, 1
/// changed, 0 destroyed.`, then `Talos: 3 configs applied, 1 bootstrap.` when
/// there were Talos operations.
pub fn apply_summary_line(s: &Summary) -> String {
    let mut line = format!(
        "Apply complete! Resources: {} added, {} changed, {} destroyed.",
        s.add, s.change, s.destroy
    );
    if let Some(talos) = talos_operations(s, true) {
        let _ = write!(line, " Talos: {talos}.");
    }
    line
}

/// `<label>: <address>: <message>` for each notice, then a blank line when
/// there was any.
fn notices(out: &mut String, label: &str, list: &[talosprov_plan::model::PlanWarning]) {
    for n in list {
        let _ = match &n.address {
            Some(a) => writeln!(out, "{label}: {a}: {}", n.message),
            None => writeln!(out, "{label}: {}", n.message),
        };
    }
    if !list.is_empty() {
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use talosprov_plan::field::VmField;
    use talosprov_plan::model::{Drift, PlanWarning};
    use talosprov_statefile::address::Address;

    /// A change with stand-in payloads and these display values.
    fn change(
        address: Address,
        action: Action,
        reason: &str,
        fields: Vec<FieldChange>,
        config_diff: Option<String>,
        reboot: Option<bool>,
    ) -> Change {
        let mut c = talosprov_plan::example::change(address, action, reason)
            .expect("a change of that kind");
        c.fields = fields;
        c.config_diff = config_diff;
        c.reboot = reboot;
        c
    }

    fn sample() -> Plan {
        Plan {
            changes: vec![
                change(
    Address::Vm("worker-01".into()),
    Action::Update,
    "memory_mib changed",
    vec![FieldChange::new(
                        VmField::MemoryMib,
                        Some("8192".into()),
                        Some("12288".into()),
                    )],
    None,
    Some(true),
),
                change(
    Address::Config("worker-01".into()),
    Action::ApplyConfig,
    "machine config changed",
    vec![],
    Some(
                        "--- recorded\n+++ desired\n@@ -1,2 +1,3 @@\n machine:\n+    nodeLabels: {}\n     token: (sensitive)\n"
                            .into(),
                    ),
    Some(false),
),
                change(
    Address::Vm("old-01".into()),
    Action::Replace,
    "moves to VM 131",
    vec![FieldChange::new(VmField::Vmid, Some("130".into()), Some("131".into()))],
    None,
    None,
),
            ],
            drift: vec![Drift {
                address: Address::Vm("cp-01".into()),
                kind: DriftKind::Changed,
                diff: None,
                fields: vec![FieldChange::new(VmField::Cores, Some("2".into()), Some("8".into()))],
            }],
            warnings: vec![PlanWarning {
                address: Some(Address::Config("worker-01".into())),
                message: "the CNI is applied only at bootstrap".into(),
            }],
            ..Plan::of_changes(Vec::new())
        }
    }

    #[test]
    fn human_plan_uses_tofu_marks_and_ends_with_the_summary() {
        insta::assert_snapshot!(render(&sample()));
    }

    #[test]
    fn upgrade_names_both_versions_and_the_reboot() {
        let mut p = sample();
        p.changes = vec![change(
            Address::Config("cp-01".into()),
            Action::Upgrade,
            "Talos v1.13.7 -> v1.13.8",
            vec![FieldChange::new(
                ConfigField::TalosVersion,
                Some("v1.13.7".into()),
                Some("v1.13.8".into()),
            )],
            None,
            Some(true),
        )];
        let text = render(&p);
        assert!(
            text.contains("  ~ config/cp-01\n      ~ upgrade talos v1.13.7 -> v1.13.8 (reboot)\n"),
            "{text}"
        );
    }

    #[test]
    fn empty_plan_says_no_changes() {
        let mut p = sample();
        p.changes.clear();
        p.drift.clear();
        p.warnings.clear();
        assert_eq!(
            render(&p),
            "No changes. The cluster matches the topology.\n"
        );
    }

    #[test]
    fn summary_counts_talos_operations_apart() {
        let s = Summary {
            add: 3,
            change: 1,
            destroy: 0,
            apply_config: 3,
            upgrade: 0,
            bootstrap: 1,
        };
        assert_eq!(
            summary_line(&s),
            "Plan: 3 to add, 1 to change, 0 to destroy. Talos: 3 configs to apply, 1 bootstrap."
        );
        assert_eq!(
            apply_summary_line(&s),
            "Apply complete! Resources: 3 added, 1 changed, 0 destroyed. Talos: 3 configs \
             applied, 1 bootstrap."
        );
        let one = Summary {
            apply_config: 1,
            upgrade: 2,
            bootstrap: 0,
            ..s
        };
        assert_eq!(
            apply_summary_line(&one),
            "Apply complete! Resources: 3 added, 1 changed, 0 destroyed. Talos: 1 config \
             applied, 2 Talos upgrades."
        );
    }
}
