//! The add-ons' Kubernetes objects in a plan (pure): each rendered object
//! against the state's inventory and, when the Kubernetes API was read, the
//! live object and the API server's answer to a server-side apply dry run of
//! it (what `kubectl diff --server-side` compares). An object not in the
//! cluster is created (`+`), one whose dry run differs from the live object is
//! updated (`~`, field by field), one in the inventory that no add-on renders
//! any more is pruned (`-`). An object of the inventory deleted or edited by
//! hand is drift, and the change repairs it.

use std::collections::BTreeMap;

use serde_json::Value;

use talosprov_statefile::address::{Address, ObjectAddress};
use talosprov_statefile::format::{KubeObject, State};

use talosprov_addon::object::DesiredObject;

use crate::change::{Action, Change, FieldChange, ObjectOp};
use crate::field::Field;
use crate::model::{Drift, DriftKind, PlanError, PlanWarning};
use crate::observed::{Observation, ObservedObjects};
use crate::planned::PlannedObject;

use super::resource::{Destroying, Phase, Planning, ResourceKind};

/// The most field changes one object shows; more are summed up in one line.
const MAX_FIELDS: usize = 100;

/// Namespaces every cluster has: an add-on may declare one, but talosprov
/// never deletes it (a prune forgets it).
const SYSTEM_NAMESPACES: [&str; 4] = ["default", "kube-system", "kube-public", "kube-node-lease"];

/// The `addon/<addon>/<kind>/<namespace>/<name>` kind: an add-on's object,
/// server-side applied through the Kubernetes API.
#[derive(Debug, Clone, Copy)]
pub struct Object;

impl ResourceKind for Object {
    type Op = ObjectOp;

    fn action(op: &ObjectOp) -> Action {
        match op {
            ObjectOp::Create(_) => Action::Create,
            ObjectOp::Update(_) => Action::Update,
            ObjectOp::Delete(_) => Action::Delete,
        }
    }

    /// Within the phase, `order` runs namespaces, then CRDs, then the
    /// rest (prunes the other way round).
    fn phase(op: &ObjectOp) -> Phase {
        match op {
            ObjectOp::Create(_) | ObjectOp::Update(_) | ObjectOp::Delete(_) => Phase::Objects,
        }
    }

    fn plan(p: &mut Planning<'_>) {
        plan_objects(
            &p.desired.objects,
            p.state,
            p.observed.kubernetes.as_ref(),
            Found {
                changes: &mut p.changes,
                drift: &mut p.drift,
                warnings: &mut p.warnings,
                errors: &mut p.errors,
            },
        );
    }

    /// The objects go with the cluster's VMs.
    fn destroy(_: &Destroying<'_>, _: &mut Vec<Change>) {}
}

/// Where plan_objects puts what it finds.
pub(super) struct Found<'a> {
    pub changes: &'a mut Vec<Change>,
    pub drift: &'a mut Vec<Drift>,
    pub warnings: &'a mut Vec<PlanWarning>,
    pub errors: &'a mut Vec<PlanError>,
}

/// The object changes: `desired` against the state's inventory and, when
/// read (`observed`), the cluster.
pub(super) fn plan_objects(
    desired: &BTreeMap<ObjectAddress, DesiredObject>,
    state: &State,
    observed: Option<&ObservedObjects>,
    out: Found<'_>,
) {
    let recorded = &state.resources.objects;
    let from_crds = crd_kinds(desired);
    for (address, want) in desired {
        let key = address.key();
        let rec = recorded.get(&key);
        let seen = observed.map(|o| o.objects.get(&key).unwrap_or(&Observation::Absent));
        let planned = |force: bool| PlannedObject {
            api_version: want.api_version.clone(),
            digest: want.digest.clone(),
            force,
        };
        let at = Address::Object(Box::new(address.clone()));
        let (action, reason, fields): (Make, String, Vec<FieldChange>) = match seen {
            None => match rec {
                None => (ObjectOp::Create, "server-side apply".to_owned(), Vec::new()),
                Some(r) if r.digest != want.digest => (
                    ObjectOp::Update,
                    "the manifest changed (the Kubernetes API was not read: the fields are known \
                     after apply)"
                        .to_owned(),
                    Vec::new(),
                ),
                Some(_) => continue,
            },
            Some(Observation::UnknownKind) if !from_crds.contains(&address.kind) => {
                out.errors.push(PlanError::Refused(format!(
                    "{at}: the API server does not serve {} ({}), and no add-on's CRD defines it",
                    address.bare_kind(),
                    want.api_version
                )));
                continue;
            }
            Some(Observation::Absent | Observation::UnknownKind) => {
                let crd = matches!(seen, Some(Observation::UnknownKind));
                let mut reason = if rec.is_some() {
                    out.drift.push(Drift {
                        address: at.clone(),
                        kind: DriftKind::Deleted,
                        diff: None,
                        fields: Vec::new(),
                    });
                    "deleted outside talosprov: applied again".to_owned()
                } else {
                    "server-side apply".to_owned()
                };
                if crd {
                    reason.push_str(" (its kind comes from a CRD applied first)");
                }
                (ObjectOp::Create, reason, Vec::new())
            }
            Some(Observation::Present { live, applied }) => {
                let Some(c) = present(address, want, rec, live, applied, out.drift) else {
                    continue;
                };
                c
            }
            Some(Observation::Conflict(message)) => {
                out.warnings.push(PlanWarning {
                    address: Some(at.clone()),
                    message: format!(
                        "not applied: another field manager owns fields of it with other values \
                         ({message}); talosprov changes only what it applied. Delete the object, \
                         or give up those fields, to let the add-on apply it"
                    ),
                });
                continue;
            }
            Some(Observation::Refused(message)) => {
                out.errors.push(PlanError::Refused(format!(
                    "{at}: the API server refuses it: {message}"
                )));
                continue;
            }
        };
        let op = action(planned(rec.is_some()));
        out.changes
            .push(Change::object(address.clone(), op, reason).with_fields(fields));
    }
    for (key, rec) in recorded {
        let Some(address) = ObjectAddress::from_key(key) else {
            continue;
        };
        if desired.contains_key(&address) {
            continue;
        }
        out.changes.push(prune(address, rec, observed));
    }
}

/// An object op's constructor: a create or an update, given what it sends.
type Make = fn(PlannedObject) -> ObjectOp;

/// The change of an object that is in the cluster: none when the dry run
/// leaves it as it is and the inventory has it as rendered; an edit by hand
/// (the inventory's digest is the rendered one) is also drift.
fn present(
    address: &ObjectAddress,
    want: &DesiredObject,
    rec: Option<&KubeObject>,
    live: &Value,
    applied: &Value,
    drift: &mut Vec<Drift>,
) -> Option<(Make, String, Vec<FieldChange>)> {
    let fields = field_changes(address.bare_kind(), live, applied);
    let same_digest = rec.is_some_and(|r| r.digest == want.digest);
    let reason = match (rec.is_some(), fields.is_empty()) {
        (true, true) if same_digest => return None,
        (true, true) => "the manifest changed; the API server keeps the same object",
        (false, true) => {
            "already in the cluster with these values: recorded as applied by field manager \
             talosprov"
        }
        (true, false) if same_digest => {
            drift.push(Drift {
                address: Address::Object(Box::new(address.clone())),
                kind: DriftKind::Changed,
                diff: None,
                fields: fields
                    .iter()
                    .map(|f| FieldChange::new(f.name.clone(), f.after.clone(), f.before.clone()))
                    .collect(),
            });
            "edited outside talosprov: applied again"
        }
        (true, false) => "the manifest changed",
        (false, false) => "in the cluster with other values: server-side apply takes the fields",
    };
    Some((ObjectOp::Update, reason.to_owned(), fields))
}

/// The kinds the desired CRDs define, as addresses name them
/// (`ClusterPolicy.nvidia.com`).
fn crd_kinds(desired: &BTreeMap<ObjectAddress, DesiredObject>) -> Vec<String> {
    desired
        .iter()
        .filter(|(a, _)| a.kind == "CustomResourceDefinition.apiextensions.k8s.io")
        .filter_map(|(_, d)| {
            let spec = &d.body["spec"];
            Some(format!(
                "{}.{}",
                spec["names"]["kind"].as_str()?,
                spec["group"].as_str()?
            ))
        })
        .collect()
}

/// The change that prunes a recorded object no add-on renders any more.
fn prune(address: ObjectAddress, rec: &KubeObject, observed: Option<&ObservedObjects>) -> Change {
    let gone = observed
        .and_then(|o| o.objects.get(&address.key()))
        .is_some_and(|o| matches!(o, Observation::Absent | Observation::UnknownKind));
    let system = address.bare_kind() == "Namespace"
        && address.namespace.is_none()
        && SYSTEM_NAMESPACES.contains(&address.name.as_str());
    let reason = if gone {
        "pruned: no add-on renders it; already deleted, so only forgotten".to_owned()
    } else if system {
        format!(
            "no add-on renders it; namespace {} is the cluster's own, so it is only forgotten",
            address.name
        )
    } else {
        format!(
            "pruned: add-on {} no longer renders it (or was removed)",
            address.addon
        )
    };
    let planned = PlannedObject {
        api_version: rec.api_version.clone(),
        digest: rec.digest.clone(),
        force: false,
    };
    Change::object(address, ObjectOp::Delete(planned), reason)
}

/// Whether a prune of `address` only forgets it: a namespace every cluster
/// has is never deleted.
pub fn only_forgotten(address: &ObjectAddress) -> bool {
    address.bare_kind() == "Namespace"
        && address.namespace.is_none()
        && SYSTEM_NAMESPACES.contains(&address.name.as_str())
}

/// The fields that differ between the live object and the dry run's result,
/// by path (`spec.template.spec.containers[0].image`), what the API server
/// manages itself left out (`status`, `metadata.resourceVersion`,
/// `managedFields`, ...). A Secret's `data` and `stringData`, and any PEM
/// private key, show as `(sensitive)`.
pub fn field_changes(kind: &str, live: &Value, applied: &Value) -> Vec<FieldChange> {
    let mut before = BTreeMap::new();
    let mut after = BTreeMap::new();
    flatten("", &comparable(live), &mut before);
    flatten("", &comparable(applied), &mut after);
    let mut names: Vec<&String> = before.keys().chain(after.keys()).collect();
    names.sort();
    names.dedup();
    let secret = kind == "Secret";
    let shown = |name: &str, v: Option<&String>| -> Option<String> {
        let v = v?;
        let hidden = (secret && (name.starts_with("data.") || name.starts_with("stringData.")))
            || (v.contains("-----BEGIN") && v.contains("PRIVATE KEY"));
        Some(if hidden {
            talosprov_base::sensitive::REDACTED.to_owned()
        } else {
            v.clone()
        })
    };
    let mut out: Vec<FieldChange> = names
        .into_iter()
        .filter(|n| before.get(*n) != after.get(*n))
        .map(|n| {
            FieldChange::new(
                Field::Object(n.to_owned()),
                shown(n, before.get(n)),
                shown(n, after.get(n)),
            )
        })
        .collect();
    if out.len() > MAX_FIELDS {
        let more = out.len() - MAX_FIELDS;
        out.truncate(MAX_FIELDS);
        out.push(FieldChange::new(
            Field::Object("…".to_owned()),
            None,
            Some(format!("{more} more fields differ")),
        ));
    }
    out
}

/// `object` without what the API server manages.
fn comparable(object: &Value) -> Value {
    let mut v = object.clone();
    if let Some(map) = v.as_object_mut() {
        map.remove("status");
        if let Some(meta) = map.get_mut("metadata").and_then(Value::as_object_mut) {
            for k in [
                "uid",
                "resourceVersion",
                "generation",
                "creationTimestamp",
                "managedFields",
                "selfLink",
            ] {
                meta.remove(k);
            }
        }
    }
    v
}

/// Every leaf of `v` by path; an empty map or list is a leaf.
fn flatten(path: &str, v: &Value, out: &mut BTreeMap<String, String>) {
    match v {
        Value::Object(map) if !map.is_empty() || path.is_empty() => {
            for (k, item) in map {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                flatten(&p, item, out);
            }
        }
        Value::Array(items) if !items.is_empty() => {
            for (i, item) in items.iter().enumerate() {
                flatten(&format!("{path}[{i}]"), item, out);
            }
        }
        Value::String(s) => {
            out.insert(path.to_owned(), s.clone());
        }
        other @ Value::Null
        | other @ Value::Bool(_)
        | other @ Value::Number(_)
        | other @ Value::Array(_)
        | other @ Value::Object(_) => {
            out.insert(path.to_owned(), other.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::change::{Action, Op};
    use serde_json::json;
    use talosprov_addon::object::digest;

    fn addr(name: &str) -> ObjectAddress {
        ObjectAddress::new("cni", "apps/v1", "DaemonSet", Some("kube-system"), name)
    }

    fn ds(image: &str) -> Value {
        json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
               "metadata": {"name": "cni", "namespace": "kube-system"},
               "spec": {"template": {"spec": {"containers": [{"name": "c", "image": image}]}}}})
    }

    fn live(v: &Value) -> Value {
        let mut v = v.clone();
        v["metadata"]["resourceVersion"] = json!("7");
        v["metadata"]["managedFields"] = json!([{"manager": "talosprov"}]);
        v["status"] = json!({"numberReady": 3});
        v
    }

    struct Out {
        changes: Vec<Change>,
        drift: Vec<Drift>,
        warnings: Vec<PlanWarning>,
        errors: Vec<PlanError>,
    }

    fn run(
        desired: &BTreeMap<ObjectAddress, DesiredObject>,
        state: &State,
        observed: Option<&ObservedObjects>,
    ) -> Out {
        let mut o = Out {
            changes: Vec::new(),
            drift: Vec::new(),
            warnings: Vec::new(),
            errors: Vec::new(),
        };
        plan_objects(
            desired,
            state,
            observed,
            Found {
                changes: &mut o.changes,
                drift: &mut o.drift,
                warnings: &mut o.warnings,
                errors: &mut o.errors,
            },
        );
        o
    }

    fn recorded(state: &mut State, a: &ObjectAddress, body: &Value) {
        state.resources.objects.insert(
            a.key(),
            KubeObject {
                api_version: "apps/v1".into(),
                digest: digest(body),
            },
        );
    }

    fn observed(a: &ObjectAddress, o: Observation) -> ObservedObjects {
        ObservedObjects {
            objects: [(a.key(), o)].into_iter().collect(),
        }
    }

    #[test]
    fn the_digest_ignores_key_order() {
        assert_eq!(
            digest(&json!({"a": 1, "b": {"c": 2, "d": 3}})),
            digest(&json!({"b": {"d": 3, "c": 2}, "a": 1}))
        );
        assert_ne!(digest(&json!({"a": 1})), digest(&json!({"a": 2})));
    }

    #[test]
    fn offline_objects_are_compared_with_the_inventory() {
        let a = addr("cni");
        let desired: BTreeMap<_, _> =
            [(a.clone(), DesiredObject::new("apps/v1", ds("v2"), vec![]))]
                .into_iter()
                .collect();
        let mut state = State::new(uuid::Uuid::nil());
        let out = run(&desired, &state, None);
        assert_eq!(out.changes[0].action(), Action::Create);
        recorded(&mut state, &a, &ds("v2"));
        assert!(run(&desired, &state, None).changes.is_empty());
        recorded(&mut state, &a, &ds("v1"));
        let out = run(&desired, &state, None);
        assert_eq!(out.changes[0].action(), Action::Update);
        assert!(matches!(
            out.changes[0].op(),
            Op::Object {
                op: ObjectOp::Update(PlannedObject { force: true, .. }),
                ..
            }
        ));
    }

    #[test]
    fn a_changed_manifest_shows_the_fields_the_dry_run_changes() {
        let a = addr("cni");
        let desired: BTreeMap<_, _> =
            [(a.clone(), DesiredObject::new("apps/v1", ds("v2"), vec![]))]
                .into_iter()
                .collect();
        let mut state = State::new(uuid::Uuid::nil());
        recorded(&mut state, &a, &ds("v1"));
        let seen = observed(
            &a,
            Observation::Present {
                live: live(&ds("v1")),
                applied: live(&ds("v2")),
            },
        );
        let out = run(&desired, &state, Some(&seen));
        assert!(out.drift.is_empty());
        let c = &out.changes[0];
        assert_eq!(
            (c.action(), c.reason.as_str()),
            (Action::Update, "the manifest changed")
        );
        assert_eq!(
            c.fields,
            vec![FieldChange::new(
                Field::Object("spec.template.spec.containers[0].image".into()),
                Some("v1".into()),
                Some("v2".into()),
            )]
        );
    }

    #[test]
    fn an_object_edited_or_deleted_by_hand_is_drift_and_applied_again() {
        let a = addr("cni");
        let desired: BTreeMap<_, _> =
            [(a.clone(), DesiredObject::new("apps/v1", ds("v2"), vec![]))]
                .into_iter()
                .collect();
        let mut state = State::new(uuid::Uuid::nil());
        recorded(&mut state, &a, &ds("v2"));
        let edited = observed(
            &a,
            Observation::Present {
                live: live(&ds("hand")),
                applied: live(&ds("v2")),
            },
        );
        let out = run(&desired, &state, Some(&edited));
        assert_eq!(out.drift[0].kind, DriftKind::Changed);
        assert_eq!(out.drift[0].fields[0].after.as_deref(), Some("hand"));
        assert_eq!(
            out.changes[0].reason,
            "edited outside talosprov: applied again"
        );
        let deleted = observed(&a, Observation::Absent);
        let out = run(&desired, &state, Some(&deleted));
        assert_eq!(out.drift[0].kind, DriftKind::Deleted);
        assert_eq!(out.changes[0].action(), Action::Create);
        // Live and dry run agree, and the inventory has it: nothing to do.
        let same = observed(
            &a,
            Observation::Present {
                live: live(&ds("v2")),
                applied: live(&ds("v2")),
            },
        );
        let out = run(&desired, &state, Some(&same));
        assert!(out.changes.is_empty() && out.drift.is_empty());
    }

    #[test]
    fn objects_no_add_on_renders_are_pruned_but_system_namespaces_only_forgotten() {
        let mut state = State::new(uuid::Uuid::nil());
        recorded(&mut state, &addr("old"), &ds("v1"));
        let ks = ObjectAddress::new("cni", "v1", "Namespace", None, "kube-system");
        recorded(&mut state, &ks, &json!({}));
        let out = run(&BTreeMap::new(), &state, None);
        let reasons: Vec<(String, Action)> = out
            .changes
            .iter()
            .map(|c| (c.address().to_string(), c.action()))
            .collect();
        assert_eq!(
            reasons,
            vec![
                (
                    "addon/cni/DaemonSet.apps/kube-system/old".into(),
                    Action::Delete
                ),
                ("addon/cni/Namespace/kube-system".into(), Action::Delete),
            ]
        );
        assert!(out.changes[1].reason.contains("only forgotten"));
        assert!(only_forgotten(&ks));
    }

    #[test]
    fn conflicts_hold_an_object_back_and_refusals_are_errors() {
        let a = addr("cni");
        let desired: BTreeMap<_, _> =
            [(a.clone(), DesiredObject::new("apps/v1", ds("v2"), vec![]))]
                .into_iter()
                .collect();
        let state = State::new(uuid::Uuid::nil());
        let out = run(
            &desired,
            &state,
            Some(&observed(
                &a,
                Observation::Conflict("conflict with \"kubectl\"".into()),
            )),
        );
        assert!(out.changes.is_empty());
        assert!(out.warnings[0].message.contains("kubectl"));
        let out = run(
            &desired,
            &state,
            Some(&observed(&a, Observation::Refused("spec: Invalid".into()))),
        );
        assert_eq!(out.errors.len(), 1);
    }

    #[test]
    fn an_unserved_kind_is_planned_only_when_a_crd_of_the_plan_defines_it() {
        let policy = ObjectAddress::new(
            "gpu",
            "nvidia.com/v1",
            "ClusterPolicy",
            None,
            "cluster-policy",
        );
        let crd = ObjectAddress::new(
            "gpu",
            "apiextensions.k8s.io/v1",
            "CustomResourceDefinition",
            None,
            "clusterpolicies.nvidia.com",
        );
        let crd_body = json!({"spec": {"group": "nvidia.com", "names": {"kind": "ClusterPolicy"}}});
        let mut desired: BTreeMap<_, _> = [(
            policy.clone(),
            DesiredObject::new("nvidia.com/v1", json!({"kind": "ClusterPolicy"}), vec![]),
        )]
        .into_iter()
        .collect();
        let state = State::new(uuid::Uuid::nil());
        let seen = ObservedObjects {
            objects: [
                (policy.key(), Observation::UnknownKind),
                (crd.key(), Observation::Absent),
            ]
            .into_iter()
            .collect(),
        };
        let out = run(&desired, &state, Some(&seen));
        assert!(out.changes.is_empty());
        assert!(
            out.errors[0]
                .to_string()
                .contains("no add-on's CRD defines it")
        );
        desired.insert(
            crd.clone(),
            DesiredObject::new("apiextensions.k8s.io/v1", crd_body, vec![]),
        );
        let out = run(&desired, &state, Some(&seen));
        assert!(out.errors.is_empty());
        assert_eq!(out.changes.len(), 2);
        assert!(
            out.changes
                .iter()
                .any(|c| c.reason.contains("CRD applied first"))
        );
    }

    #[test]
    fn secret_data_and_private_keys_are_redacted() {
        let before =
            json!({"kind": "Secret", "data": {"tls.key": "b2xk"}, "metadata": {"name": "s"}});
        let after =
            json!({"kind": "Secret", "data": {"tls.key": "bmV3"}, "metadata": {"name": "s"}});
        let f = field_changes("Secret", &before, &after);
        assert_eq!(f[0].before.as_deref(), Some("(sensitive)"));
        assert_eq!(f[0].after.as_deref(), Some("(sensitive)"));
        let pem = json!({"data": {"k": "-----BEGIN EC PRIVATE KEY-----\nx"}});
        let f = field_changes("ConfigMap", &json!({}), &pem);
        assert_eq!(f[0].after.as_deref(), Some("(sensitive)"));
    }
}
