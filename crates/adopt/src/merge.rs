//! `adopt --merge`: an adoption added to a state that already has records,
//! taking only what the state lacks. A record the state holds otherwise, or
//! another cluster's secrets bundle, is a conflict: the whole merge is
//! refused, naming each.

use std::collections::BTreeMap;

use super::topology::AdoptError;
use talosprov_statefile::format::State;

/// Add to `into` each record of `from` it lacks (keys of every resource
/// map, the bootstrap, the outputs); the addresses added.
///
/// # Errors
/// [`AdoptError`] listing every conflict: another secrets bundle, a record
/// the state holds with other values, an interrupted create. `into` is
/// unchanged then.
pub fn merge_state(into: &mut State, from: &State) -> Result<Vec<String>, AdoptError> {
    let mut problems = Vec::new();
    match (&into.secrets, &from.secrets) {
        (Some(a), Some(b)) if a.expose() != b.expose() => problems.push(
            "the state holds another secrets bundle: the source is another cluster".to_owned(),
        ),
        _ => {}
    }
    if !into.resources.creating.is_empty() {
        problems.push(format!(
            "the state records creates an interrupted apply started ({}): finish them with \
             `talosprov apply` first",
            into.resources
                .creating
                .keys()
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let mut out = into.clone();
    let mut added = Vec::new();
    let r = &from.resources;
    let o = &mut out.resources;
    take(&mut o.vms, &r.vms, "vm", &mut added, &mut problems);
    take(
        &mut o.configs,
        &r.configs,
        "config",
        &mut added,
        &mut problems,
    );
    take(&mut o.images, &r.images, "image", &mut added, &mut problems);
    take(&mut o.pools, &r.pools, "pool", &mut added, &mut problems);
    take(
        &mut o.pci_mappings,
        &r.pci_mappings,
        "pci_mapping",
        &mut added,
        &mut problems,
    );
    if o.bootstrap.is_none() && r.bootstrap.is_some() {
        o.bootstrap.clone_from(&r.bootstrap);
        added.push("bootstrap".to_owned());
    }
    if !problems.is_empty() {
        return Err(AdoptError { problems });
    }
    if out.secrets.is_none() {
        out.secrets.clone_from(&from.secrets);
    }
    let outputs = &mut out.outputs;
    if outputs.talosconfig.is_none() {
        outputs.talosconfig.clone_from(&from.outputs.talosconfig);
    }
    if outputs.kubeconfig.is_none() {
        outputs.kubeconfig.clone_from(&from.outputs.kubeconfig);
    }
    for (host, m) in &from.outputs.machineconfigs {
        outputs
            .machineconfigs
            .entry(host.clone())
            .or_insert_with(|| m.clone());
    }
    *into = out;
    Ok(added)
}

/// Each entry of `from` that `into` lacks, added; one it holds otherwise, a
/// problem.
fn take<T: Clone + PartialEq>(
    into: &mut BTreeMap<String, T>,
    from: &BTreeMap<String, T>,
    kind: &str,
    added: &mut Vec<String>,
    problems: &mut Vec<String>,
) {
    for (key, value) in from {
        match into.get(key) {
            None => {
                into.insert(key.clone(), value.clone());
                added.push(format!("{kind}/{key}"));
            }
            Some(have) if have == value => {}
            Some(_) => problems.push(format!(
                "{kind}/{key}: the state records it otherwise than the source says: adopt \
                 --merge takes only what the state lacks (`talosprov state rm {kind}/{key}` \
                 first to take the source's)"
            )),
        }
    }
}
