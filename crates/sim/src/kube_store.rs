//! The simulated cluster's Kubernetes objects, without the network: what etcd holds
//! behind a kube-apiserver, and the apiserver's write rules that the simulator follows.
//!
//! - Objects are keyed by group, kind, namespace (empty for cluster-scoped kinds) and
//!   name, and carry `metadata.uid`, `metadata.resourceVersion` (a per-store counter,
//!   as a string), `metadata.generation` (1 at creation, bumped when anything outside
//!   `metadata` and `status` changes), `metadata.creationTimestamp` and
//!   `metadata.managedFields` (format `FieldsV1`).
//! - Server-side apply ([`Store::apply`]) tracks, per field manager, the leaf fields it
//!   applied: maps merge key by key, lists and scalars are atomic. A field another
//!   manager owns with a different live value is a conflict (409) unless forced, which
//!   moves the ownership; a field a manager stops applying is removed when no other
//!   manager owns it.
//! - Kinds: the built-in table ([`builtin_types`]) plus the kinds of the stored
//!   `CustomResourceDefinition`s (their served versions), which get the `Established`
//!   and `NamesAccepted` conditions when stored.
//! - Workloads (DaemonSet, Deployment, StatefulSet) get the status of a finished
//!   rollout when stored (a DaemonSet's on the nodes [`Store::set_node_count`] gives),
//!   unless annotated [`ROLLOUT_ANNOTATION`]`: stuck`. Namespaces are `Active`; a
//!   Secret's `stringData` is stored in `data`, base64-encoded.
//! - Deleting a Namespace deletes its objects, deleting a CRD the objects of its kind.
//! - Memory is bounded as etcd bounds it: objects above [`MAX_OBJECT_BYTES`] (as
//!   JSON), and writes beyond [`MAX_OBJECTS`] objects or [`MAX_STORE_BYTES`] in all,
//!   are refused with etcd's messages.
//!
//! Errors are [`StoreError`]s, which carry the `Status` a kube-apiserver answers with.

pub mod snapshot;

use std::collections::{BTreeMap, BTreeSet};

use base64::Engine as _;
use serde_json::{Map, Value, json};
use sha2::Digest;

/// The annotation that, set to `stuck`, keeps a workload's rollout from finishing: its
/// status observes the generation but reports no ready (or updated) replicas.
pub const ROLLOUT_ANNOTATION: &str = "talos-sim.talosprov.dev/rollout";

/// Most objects one store holds; beyond, creations fail as etcd does when out of space.
pub const MAX_OBJECTS: usize = 20_000;

/// The largest object stored (as JSON), etcd's request limit (1.5 MiB); beyond, a
/// write fails as on a real cluster ("etcdserver: request is too large").
pub const MAX_OBJECT_BYTES: usize = 3 << 19;

/// The most bytes (objects as JSON) one store holds; beyond, writes fail as etcd does
/// when out of space ("etcdserver: mvcc: database space exceeded").
pub const MAX_STORE_BYTES: usize = 256 << 20;

/// The namespaces every cluster starts with.
const INITIAL_NAMESPACES: [&str; 4] = ["default", "kube-system", "kube-public", "kube-node-lease"];

/// The verbs the simulated API serves for stored kinds.
const VERBS: [&str; 6] = ["create", "delete", "get", "list", "patch", "update"];

/// One served resource, as discovery (`APIResourceList`) describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceType {
    /// API group, empty for the core group.
    pub group: String,
    /// Version within the group (`v1`).
    pub version: String,
    /// The resource name in URLs (`configmaps`).
    pub plural: String,
    /// The kind of its objects (`ConfigMap`).
    pub kind: String,
    /// Whether its objects live in namespaces.
    pub namespaced: bool,
    /// The verbs discovery lists for it.
    pub verbs: Vec<String>,
    /// Its singular name (`configmap`): the lowercase kind unless a CRD names another.
    pub singular: String,
    /// The short names kubectl accepts for it (`cm`, `crd`).
    pub short_names: Vec<String>,
}

impl ResourceType {
    fn new(group: &str, version: &str, plural: &str, kind: &str, namespaced: bool) -> Self {
        ResourceType {
            group: group.to_owned(),
            version: version.to_owned(),
            plural: plural.to_owned(),
            kind: kind.to_owned(),
            namespaced,
            verbs: VERBS.iter().map(|v| (*v).to_owned()).collect(),
            singular: kind.to_lowercase(),
            short_names: Vec::new(),
        }
    }

    /// `apiVersion` of its objects: `v1` for the core group, else `<group>/<version>`.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The resource as the apiserver names it in messages: `configmaps`,
    /// `deployments.apps`.
    pub fn group_resource(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }
}

/// The kinds every simulated cluster serves (nodes included, which the HTTP layer
/// computes from the simulated machines and serves read-only).
pub fn builtin_types() -> Vec<ResourceType> {
    // (group, plural, kind, namespaced, short names), version v1 for all.
    let table: [(&str, &str, &str, bool, &[&str]); 27] = [
        ("", "namespaces", "Namespace", false, &["ns"]),
        ("", "nodes", "Node", false, &["no"]),
        ("", "serviceaccounts", "ServiceAccount", true, &["sa"]),
        ("", "configmaps", "ConfigMap", true, &["cm"]),
        ("", "secrets", "Secret", true, &[]),
        ("", "services", "Service", true, &["svc"]),
        ("apps", "daemonsets", "DaemonSet", true, &["ds"]),
        ("apps", "deployments", "Deployment", true, &["deploy"]),
        ("apps", "statefulsets", "StatefulSet", true, &["sts"]),
        (
            "rbac.authorization.k8s.io",
            "clusterroles",
            "ClusterRole",
            false,
            &[],
        ),
        (
            "rbac.authorization.k8s.io",
            "clusterrolebindings",
            "ClusterRoleBinding",
            false,
            &[],
        ),
        ("rbac.authorization.k8s.io", "roles", "Role", true, &[]),
        (
            "rbac.authorization.k8s.io",
            "rolebindings",
            "RoleBinding",
            true,
            &[],
        ),
        (
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            false,
            &["crd", "crds"],
        ),
        (
            "policy",
            "poddisruptionbudgets",
            "PodDisruptionBudget",
            true,
            &["pdb"],
        ),
        (
            "scheduling.k8s.io",
            "priorityclasses",
            "PriorityClass",
            false,
            &["pc"],
        ),
        ("node.k8s.io", "runtimeclasses", "RuntimeClass", false, &[]),
        (
            "storage.k8s.io",
            "storageclasses",
            "StorageClass",
            false,
            &["sc"],
        ),
        ("storage.k8s.io", "csidrivers", "CSIDriver", false, &[]),
        ("batch", "jobs", "Job", true, &[]),
        ("batch", "cronjobs", "CronJob", true, &["cj"]),
        (
            "networking.k8s.io",
            "networkpolicies",
            "NetworkPolicy",
            true,
            &["netpol"],
        ),
        (
            "networking.k8s.io",
            "ingressclasses",
            "IngressClass",
            false,
            &[],
        ),
        ("coordination.k8s.io", "leases", "Lease", true, &[]),
        (
            "apiregistration.k8s.io",
            "apiservices",
            "APIService",
            false,
            &[],
        ),
        (
            "admissionregistration.k8s.io",
            "mutatingwebhookconfigurations",
            "MutatingWebhookConfiguration",
            false,
            &[],
        ),
        (
            "admissionregistration.k8s.io",
            "validatingwebhookconfigurations",
            "ValidatingWebhookConfiguration",
            false,
            &[],
        ),
    ];
    table
        .iter()
        .map(|(group, plural, kind, namespaced, short)| {
            let mut t = ResourceType::new(group, "v1", plural, kind, *namespaced);
            t.short_names = short.iter().map(|s| (*s).to_owned()).collect();
            if *plural == "nodes" {
                t.verbs = vec!["get".to_owned(), "list".to_owned()];
            }
            t
        })
        .collect()
}

/// A refused request, with what a kube-apiserver answers.
#[derive(Debug, Clone, PartialEq)]
pub struct StoreError {
    /// The HTTP status code (400, 404, 409, 422, 500).
    pub code: u16,
    /// The `Status` reason (`NotFound`, `Conflict`, `AlreadyExists`, `BadRequest`,
    /// `Invalid`, `InternalError`).
    pub reason: &'static str,
    /// The `Status` message, worded as the real server words it.
    pub message: String,
    /// The `Status` details (`{name, group, kind}`, or `{causes}` for conflicts).
    pub details: Value,
}

impl StoreError {
    /// The `Status` object (`kind: Status`, `status: Failure`) of this error.
    pub fn status(&self) -> Value {
        let mut s = json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": self.message, "reason": self.reason,
            "code": self.code});
        if !self.details.is_null() {
            s["details"] = self.details.clone();
        }
        s
    }

    /// 400 BadRequest with `message`.
    pub fn bad_request(message: impl Into<String>) -> Self {
        StoreError {
            code: 400,
            reason: "BadRequest",
            message: message.into(),
            details: Value::Null,
        }
    }

    /// 404 for a path that names no served resource, worded as the real server.
    pub fn no_resource() -> Self {
        StoreError {
            code: 404,
            reason: "NotFound",
            message: "the server could not find the requested resource".to_owned(),
            details: json!({}),
        }
    }

    /// 404 `<resource> "<name>" not found`, details `{name, group, kind: <plural>}`.
    pub fn not_found(rt: &ResourceType, name: &str) -> Self {
        StoreError {
            code: 404,
            reason: "NotFound",
            message: format!("{} \"{name}\" not found", rt.group_resource()),
            details: details(rt, name),
        }
    }

    fn namespace_not_found(ns: &str) -> Self {
        StoreError {
            code: 404,
            reason: "NotFound",
            message: format!("namespaces \"{ns}\" not found"),
            details: json!({"name": ns, "kind": "namespaces"}),
        }
    }

    fn already_exists(rt: &ResourceType, name: &str) -> Self {
        StoreError {
            code: 409,
            reason: "AlreadyExists",
            message: format!("{} \"{name}\" already exists", rt.group_resource()),
            details: details(rt, name),
        }
    }

    fn invalid(rt: &ResourceType, name: &str, field: &str, message: &str) -> Self {
        let mut d = details(rt, name);
        d["kind"] = json!(rt.kind);
        d["causes"] = json!([{"reason": "FieldValueInvalid", "message": message, "field": field}]);
        StoreError {
            code: 422,
            reason: "Invalid",
            message: format!("{} \"{name}\" is invalid: {field}: {message}", rt.kind),
            details: d,
        }
    }
}

fn details(rt: &ResourceType, name: &str) -> Value {
    let mut d = json!({"name": name});
    if !rt.group.is_empty() {
        d["group"] = json!(rt.group);
    }
    d["kind"] = json!(rt.plural);
    d
}

/// How one server-side apply is made (the request's query parameters).
#[derive(Debug, Clone, Copy)]
pub struct ApplyOptions<'a> {
    /// `fieldManager`: required, the manager the applied fields belong to.
    pub manager: &'a str,
    /// `force=true`: take the conflicting fields over instead of failing.
    pub force: bool,
    /// `dryRun=All`: compute the result and store nothing.
    pub dry_run: bool,
}

/// What a write did, with the object as stored (or as it would be, on a dry run).
#[derive(Debug, Clone, PartialEq)]
pub struct Written {
    /// The object.
    pub object: Value,
    /// Whether it was created (201) rather than updated (200).
    pub created: bool,
}

/// A field path: the map keys from the object's root to a field.
type FieldPath = Vec<String>;

/// Object identity within a store.
type Key = (String, String, String, String);

/// One `managedFields` entry, with its fields as paths.
#[derive(Debug, Clone)]
struct Manager {
    manager: String,
    operation: String,
    api_version: String,
    time: String,
    fields: BTreeSet<FieldPath>,
}

/// The objects of one simulated cluster.
#[derive(Debug, Clone)]
pub struct Store {
    objects: BTreeMap<Key, Value>,
    revision: u64,
    node_count: usize,
    /// The size of the objects, as JSON.
    bytes: usize,
}

impl Default for Store {
    fn default() -> Self {
        Store::new()
    }
}

impl Store {
    /// An empty cluster: the namespaces `default`, `kube-system`, `kube-public` and
    /// `kube-node-lease`, and nothing else.
    pub fn new() -> Store {
        let mut store = Store {
            objects: BTreeMap::new(),
            revision: 0,
            node_count: 0,
            bytes: 0,
        };
        let namespaces = store.type_of("", "Namespace").expect("built-in");
        for ns in INITIAL_NAMESPACES {
            let object = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
            let _ = store.create(&namespaces, "", object, "kube-apiserver", false);
        }
        store
    }

    /// The current resourceVersion (the counter of writes), as lists report it.
    pub fn revision(&self) -> String {
        self.revision.to_string()
    }

    /// Every served kind: the built-in ones, then one per served version of each stored
    /// CustomResourceDefinition.
    pub fn resource_types(&self) -> Vec<ResourceType> {
        let mut out = builtin_types();
        for crd in self
            .objects
            .iter()
            .filter(|((g, k, _, _), _)| {
                g == "apiextensions.k8s.io" && k == "CustomResourceDefinition"
            })
            .map(|(_, o)| o)
        {
            let spec = &crd["spec"];
            let (Some(group), Some(plural), Some(kind)) = (
                spec["group"].as_str(),
                spec["names"]["plural"].as_str(),
                spec["names"]["kind"].as_str(),
            ) else {
                continue;
            };
            let namespaced = spec["scope"].as_str() != Some("Cluster");
            for v in spec["versions"].as_array().into_iter().flatten() {
                if v["served"].as_bool() == Some(true)
                    && let Some(version) = v["name"].as_str()
                {
                    let mut t = ResourceType::new(group, version, plural, kind, namespaced);
                    if let Some(singular) = spec["names"]["singular"].as_str() {
                        t.singular = singular.to_owned();
                    }
                    t.short_names = spec["names"]["shortNames"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|n| n.as_str().map(str::to_owned))
                        .collect();
                    out.push(t);
                }
            }
        }
        out
    }

    /// The served resource `plural` of `group`/`version`, if any.
    pub fn resource(&self, group: &str, version: &str, plural: &str) -> Option<ResourceType> {
        self.resource_types()
            .into_iter()
            .find(|t| t.group == group && t.version == version && t.plural == plural)
    }

    /// The first served resource of kind `kind` in `group` (any version).
    fn type_of(&self, group: &str, kind: &str) -> Option<ResourceType> {
        self.resource_types()
            .into_iter()
            .find(|t| t.group == group && t.kind == kind)
    }

    /// Every stored object, in key order (group, kind, namespace, name).
    pub fn objects(&self) -> impl Iterator<Item = &Value> {
        self.objects.values()
    }

    /// The object `name` of `rt` in `ns` (ignored for cluster-scoped kinds).
    ///
    /// Errors: 404 NotFound, with the details the real server gives.
    pub fn get(&self, rt: &ResourceType, ns: &str, name: &str) -> Result<Value, StoreError> {
        self.objects
            .get(&key(rt, ns, name))
            .cloned()
            .ok_or_else(|| StoreError::not_found(rt, name))
    }

    /// The objects of `rt`: of namespace `ns`, or of all namespaces when `None`; as a
    /// `<Kind>List` with the store's resourceVersion.
    pub fn list(&self, rt: &ResourceType, ns: Option<&str>) -> Value {
        let items: Vec<Value> = self
            .objects
            .iter()
            .filter(|((g, k, n, _), _)| {
                *g == rt.group && *k == rt.kind && (!rt.namespaced || ns.is_none_or(|ns| ns == n))
            })
            .map(|(_, o)| o.clone())
            .collect();
        json!({"kind": format!("{}List", rt.kind), "apiVersion": rt.api_version(),
               "metadata": {"resourceVersion": self.revision()}, "items": items})
    }

    /// Create `object` (POST): its fields belong to `manager` (operation `Update`).
    /// `ns` is the URL's namespace (empty for cluster-scoped kinds).
    ///
    /// Errors: 400 when the body's kind, apiVersion or namespace contradict the URL or
    /// it has no name; 404 when the namespace does not exist; 409 AlreadyExists; 422
    /// for an invalid CustomResourceDefinition.
    pub fn create(
        &mut self,
        rt: &ResourceType,
        ns: &str,
        mut object: Value,
        manager: &str,
        dry_run: bool,
    ) -> Result<Value, StoreError> {
        let name = check_body(rt, ns, None, &object)?.to_owned();
        self.check_namespace(rt, ns)?;
        if self.objects.contains_key(&key(rt, ns, &name)) {
            return Err(StoreError::already_exists(rt, &name));
        }
        strip_server_fields(&mut object);
        let entry = Manager {
            manager: manager.to_owned(),
            operation: "Update".to_owned(),
            api_version: rt.api_version(),
            time: now(),
            fields: leaves(&applied_part(&object)),
        };
        let managers = if entry.fields.is_empty() {
            Vec::new()
        } else {
            vec![entry]
        };
        self.finish_write(rt, ns, &name, None, object, managers, dry_run)
            .map(|w| w.object)
    }

    /// Server-side apply of `config` (PATCH with `application/apply-patch+yaml`) to the
    /// object `name` of `rt` in `ns`, creating it when missing.
    ///
    /// Errors: 400 without a field manager, or when the body contradicts the URL; 404
    /// when the namespace does not exist; 409 Conflict naming each field another
    /// manager owns with a different value (unless `force`); 422 for an invalid
    /// CustomResourceDefinition.
    pub fn apply(
        &mut self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        config: Value,
        opts: ApplyOptions<'_>,
    ) -> Result<Written, StoreError> {
        if opts.manager.is_empty() {
            return Err(StoreError::bad_request(
                "PATCH, application/apply-patch+yaml requests require fieldManager to be set",
            ));
        }
        check_body(rt, ns, Some(name), &config)?;
        self.check_namespace(rt, ns)?;
        let config = applied_part(&config);
        let applied = leaves(&config);
        let live = self.objects.get(&key(rt, ns, name)).cloned();
        let mut managers = live.as_ref().map(managers_of).unwrap_or_default();
        let mine = managers
            .iter()
            .position(|m| m.manager == opts.manager && m.operation == "Apply");
        let previous = mine.map(|i| managers[i].fields.clone()).unwrap_or_default();

        // Conflicts: fields another manager owns whose live value the config changes.
        let live_object = live.clone().unwrap_or(Value::Null);
        let mut conflicts: Vec<(usize, FieldPath)> = Vec::new();
        for path in &applied {
            if value_at(&live_object, path) == value_at(&config, path) {
                continue;
            }
            for (i, m) in managers.iter().enumerate() {
                if Some(i) != mine && m.fields.iter().any(|f| overlaps(f, path)) {
                    conflicts.push((i, path.clone()));
                }
            }
        }
        if !conflicts.is_empty() {
            if !opts.force {
                return Err(conflict_error(&managers, &conflicts));
            }
            for (i, path) in &conflicts {
                managers[*i].fields.retain(|f| !overlaps(f, path));
            }
        }

        // The object: the live one without the fields this manager stopped applying
        // (unless another one owns them), merged with the config.
        let mut object = live.clone().unwrap_or_else(|| json!({}));
        let others: Vec<&FieldPath> = managers
            .iter()
            .enumerate()
            .filter(|(i, _)| Some(*i) != mine)
            .flat_map(|(_, m)| m.fields.iter())
            .collect();
        for stale in previous.difference(&applied) {
            let kept = others.iter().any(|f| overlaps(f, stale))
                || applied.iter().any(|f| overlaps(f, stale));
            if !kept {
                remove_path(&mut object, stale, &others, &applied);
            }
        }
        merge(&mut object, &config);

        let now = now();
        match mine {
            Some(i) => {
                if managers[i].fields != applied || managers[i].api_version != rt.api_version() {
                    managers[i].fields = applied;
                    managers[i].api_version = rt.api_version();
                    managers[i].time = now;
                }
            }
            None => managers.push(Manager {
                manager: opts.manager.to_owned(),
                operation: "Apply".to_owned(),
                api_version: rt.api_version(),
                time: now,
                fields: applied,
            }),
        }
        // The applier keeps its entry even when it applies no field, as the real one.
        managers.retain(|m| {
            !m.fields.is_empty() || (m.manager == opts.manager && m.operation == "Apply")
        });
        self.finish_write(rt, ns, name, live.as_ref(), object, managers, opts.dry_run)
    }

    /// Replace the object `name` of `rt` in `ns` with `object` (PUT): the fields whose
    /// value it changes or adds belong to `manager` (operation `Update`) and to no one
    /// else; the fields it leaves out are gone. A `metadata.resourceVersion` in the body
    /// must be the stored one (optimistic concurrency).
    ///
    /// Errors: 400 when the body contradicts the URL; 404 NotFound when the object does
    /// not exist (these kinds are not created by PUT); 409 Conflict when the
    /// resourceVersion is not the stored one; 422 for an invalid CRD.
    pub fn replace(
        &mut self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        mut object: Value,
        manager: &str,
        dry_run: bool,
    ) -> Result<Written, StoreError> {
        check_body(rt, ns, Some(name), &object)?;
        let live = self
            .objects
            .get(&key(rt, ns, name))
            .cloned()
            .ok_or_else(|| StoreError::not_found(rt, name))?;
        if let Some(version) = object["metadata"]["resourceVersion"].as_str()
            && !version.is_empty()
            && live["metadata"]["resourceVersion"].as_str() != Some(version)
        {
            return Err(StoreError {
                code: 409,
                reason: "Conflict",
                message: format!(
                    "Operation cannot be fulfilled on {} \"{name}\": the object has been \
                     modified; please apply your changes to the latest version and try again",
                    rt.group_resource()
                ),
                details: details(rt, name),
            });
        }
        strip_server_fields(&mut object);
        if let Some(status) = live.get("status") {
            object["status"] = status.clone();
        }
        let new = applied_part(&object);
        let changed: BTreeSet<FieldPath> = leaves(&new)
            .into_iter()
            .filter(|f| value_at(&live, f) != value_at(&new, f))
            .collect();
        let managers = updated_managers(rt, &live, &object, changed, manager);
        self.finish_write(rt, ns, name, Some(&live), object, managers, dry_run)
    }

    /// A JSON merge patch (RFC 7386; PATCH with `application/merge-patch+json`, and the
    /// simulator's reading of a strategic merge patch) of the object `name` of `rt` in
    /// `ns`: the fields it sets belong to `manager` (operation `Update`) and to no one
    /// else, the fields it nulls are removed. No conflicts, as for any update.
    ///
    /// Errors: 404 NotFound when the object does not exist; 422 when it leaves an
    /// invalid CustomResourceDefinition.
    pub fn merge_patch(
        &mut self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        patch: Value,
        manager: &str,
        dry_run: bool,
    ) -> Result<Written, StoreError> {
        let live = self
            .objects
            .get(&key(rt, ns, name))
            .cloned()
            .ok_or_else(|| StoreError::not_found(rt, name))?;
        if !patch.is_object() {
            return Err(StoreError::bad_request("the patch is not a JSON object"));
        }
        let mut object = live.clone();
        json_merge_patch(&mut object, &patch);
        let set = leaves(&applied_part(&patch));
        let managers = updated_managers(rt, &live, &object, set, manager);
        self.finish_write(rt, ns, name, Some(&live), object, managers, dry_run)
    }

    /// Delete the object `name` of `rt` in `ns`, answering the object as it was. A
    /// Namespace takes its objects with it, a CustomResourceDefinition the objects of
    /// its kind (at once: the simulator has no finalizers).
    ///
    /// Errors: 404 NotFound when there is no such object.
    pub fn delete(
        &mut self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        dry_run: bool,
    ) -> Result<Value, StoreError> {
        let k = key(rt, ns, name);
        let object = self
            .objects
            .get(&k)
            .cloned()
            .ok_or_else(|| StoreError::not_found(rt, name))?;
        if dry_run {
            return Ok(object);
        }
        self.objects.remove(&k);
        self.bytes -= size_of(&object);
        let group = object["spec"]["group"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let kind = object["spec"]["names"]["kind"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let cascade = (rt.group.as_str(), rt.kind.as_str());
        let gone = |(g, k, n, _): &Key| match cascade {
            ("", "Namespace") => n == name,
            ("apiextensions.k8s.io", "CustomResourceDefinition") => *g == group && *k == kind,
            _ => false,
        };
        let mut freed = 0;
        self.objects.retain(|k, o| {
            let keep = !gone(k);
            if !keep {
                freed += size_of(o);
            }
            keep
        });
        self.bytes -= freed;
        self.revision += 1;
        Ok(object)
    }

    /// Tell the store how many nodes the cluster has: DaemonSets' statuses follow (a
    /// new resourceVersion for each that changes).
    pub fn set_node_count(&mut self, nodes: usize) {
        if nodes == self.node_count {
            return;
        }
        self.node_count = nodes;
        let keys: Vec<Key> = self
            .objects
            .keys()
            .filter(|(g, k, _, _)| g == "apps" && k == "DaemonSet")
            .cloned()
            .collect();
        for k in keys {
            if let Some(o) = self.objects.get_mut(&k) {
                let before = o["status"].clone();
                let size = size_of(o);
                set_status(o, nodes);
                if o["status"] != before {
                    self.revision += 1;
                    o["metadata"]["resourceVersion"] = json!(self.revision.to_string());
                    self.bytes = self.bytes - size + size_of(o);
                }
            }
        }
    }

    /// Server-side apply every object of the YAML stream `manifests`, as Talos applies
    /// `cluster.inlineManifests` (manager `manager`, forced); a namespaced object
    /// without a namespace goes to `default`. Objects that fail (a namespace created
    /// later in the stream, a kind a later CRD defines) are retried while others
    /// succeed; the errors left are returned, one line each.
    pub fn apply_manifests(&mut self, manifests: &str, manager: &str) -> Vec<String> {
        self.apply_manifest_objects(manifests, manager, false)
    }

    /// As [`Store::apply_manifests`], but only for the objects of `manifests` this
    /// store does not hold: those it holds are left as they are (what a cluster
    /// recovered from an etcd snapshot keeps of Talos's inline manifests).
    pub fn create_missing_from_manifests(&mut self, manifests: &str, manager: &str) -> Vec<String> {
        self.apply_manifest_objects(manifests, manager, true)
    }

    fn apply_manifest_objects(
        &mut self,
        manifests: &str,
        manager: &str,
        only_missing: bool,
    ) -> Vec<String> {
        let mut pending: Vec<Value> = Vec::new();
        for doc in serde_yaml_ng::Deserializer::from_str(manifests) {
            match <Value as serde::Deserialize>::deserialize(doc) {
                Ok(o) if o.is_object() => pending.push(o),
                Ok(_) => {}
                Err(e) => return vec![format!("the manifests are not YAML: {e}")],
            }
        }
        let opts = ApplyOptions {
            manager,
            force: true,
            dry_run: false,
        };
        loop {
            let before = pending.len();
            let mut errors = Vec::new();
            let mut left = Vec::new();
            for o in std::mem::take(&mut pending) {
                if let Err(e) = self.apply_object(&o, opts, only_missing) {
                    errors.push(e);
                    left.push(o);
                }
            }
            pending = left;
            if pending.is_empty() || pending.len() == before {
                return errors;
            }
        }
    }

    fn apply_object(
        &mut self,
        o: &Value,
        opts: ApplyOptions<'_>,
        only_missing: bool,
    ) -> Result<(), String> {
        let api_version = o["apiVersion"].as_str().unwrap_or_default();
        let kind = o["kind"].as_str().unwrap_or_default();
        let name = o["metadata"]["name"].as_str().unwrap_or_default();
        let (group, version) = split_api_version(api_version);
        let rt = self
            .resource_types()
            .into_iter()
            .find(|t| t.group == group && t.version == version && t.kind == kind)
            .ok_or_else(|| format!("{kind} {name}: no kind {kind} in {api_version}"))?;
        let ns = if rt.namespaced {
            o["metadata"]["namespace"].as_str().unwrap_or("default")
        } else {
            ""
        };
        if only_missing && self.objects.contains_key(&key(&rt, ns, name)) {
            return Ok(());
        }
        let mut o = o.clone();
        if rt.namespaced {
            o["metadata"]["namespace"] = json!(ns);
        }
        self.apply(&rt, ns, name, o, opts)
            .map(|_| ())
            .map_err(|e| format!("{kind} {name}: {}", e.message))
    }

    fn check_namespace(&self, rt: &ResourceType, ns: &str) -> Result<(), StoreError> {
        if rt.namespaced && !self.objects.contains_key(&ns_key(ns)) {
            return Err(StoreError::namespace_not_found(ns));
        }
        Ok(())
    }

    /// Stamp `object` (server fields, managed fields, kind-specific status) and store it
    /// unless nothing changed or it is a dry run.
    #[allow(clippy::too_many_arguments)]
    fn finish_write(
        &mut self,
        rt: &ResourceType,
        ns: &str,
        name: &str,
        live: Option<&Value>,
        mut object: Value,
        managers: Vec<Manager>,
        dry_run: bool,
    ) -> Result<Written, StoreError> {
        object["apiVersion"] = json!(rt.api_version());
        object["kind"] = json!(rt.kind);
        if !object["metadata"].is_object() {
            object["metadata"] = json!({});
        }
        let meta = object["metadata"].as_object_mut().expect("an object");
        meta.insert("name".to_owned(), json!(name));
        if rt.namespaced {
            meta.insert("namespace".to_owned(), json!(ns));
        } else {
            meta.remove("namespace");
        }
        match live {
            Some(live) => {
                for f in ["uid", "creationTimestamp", "generation", "resourceVersion"] {
                    meta.insert(f.to_owned(), live["metadata"][f].clone());
                }
                if spec_part(&object) != spec_part(live) {
                    let generation = live["metadata"]["generation"].as_i64().unwrap_or(1);
                    object["metadata"]["generation"] = json!(generation + 1);
                }
            }
            None => {
                meta.insert("uid".to_owned(), json!(uuid::Uuid::new_v4().to_string()));
                meta.insert("creationTimestamp".to_owned(), json!(now()));
                meta.insert("generation".to_owned(), json!(1));
            }
        }
        object["metadata"]["managedFields"] = managed_fields(&managers);
        if rt.group == "apiextensions.k8s.io" && rt.kind == "CustomResourceDefinition" {
            check_crd(rt, name, &object)?;
        }
        default_fields(&mut object);
        set_status(&mut object, self.node_count);
        // A write that changes nothing but the times of managed fields changes nothing.
        if let Some(live) = live
            && without_times(live) == without_times(&object)
        {
            return Ok(Written {
                object: live.clone(),
                created: false,
            });
        }
        let before = live.map(size_of).unwrap_or(0);
        let size = size_of(&object);
        if size > MAX_OBJECT_BYTES {
            return Err(etcd_error("etcdserver: request is too large"));
        }
        if (live.is_none() && self.objects.len() >= MAX_OBJECTS)
            || self.bytes - before + size > MAX_STORE_BYTES
        {
            return Err(etcd_error("etcdserver: mvcc: database space exceeded"));
        }
        if dry_run {
            if live.is_none() {
                object["metadata"]
                    .as_object_mut()
                    .expect("an object")
                    .remove("resourceVersion");
            }
        } else {
            self.revision += 1;
            object["metadata"]["resourceVersion"] = json!(self.revision());
            self.bytes = self.bytes - before + size_of(&object);
            self.objects.insert(key(rt, ns, name), object.clone());
        }
        Ok(Written {
            object,
            created: live.is_none(),
        })
    }
}

fn key(rt: &ResourceType, ns: &str, name: &str) -> Key {
    let ns = if rt.namespaced { ns } else { "" };
    (
        rt.group.clone(),
        rt.kind.clone(),
        ns.to_owned(),
        name.to_owned(),
    )
}

fn ns_key(ns: &str) -> Key {
    (
        String::new(),
        "Namespace".to_owned(),
        String::new(),
        ns.to_owned(),
    )
}

/// How many bytes `object` takes as JSON (what the store's limits count).
fn size_of(object: &Value) -> usize {
    serde_json::to_vec(object).map(|v| v.len()).unwrap_or(0)
}

/// A write refused as etcd refuses it (500 InternalError).
fn etcd_error(message: &str) -> StoreError {
    StoreError {
        code: 500,
        reason: "InternalError",
        message: message.to_owned(),
        details: Value::Null,
    }
}

/// `object` without the times of its managed fields.
fn without_times(object: &Value) -> Value {
    let mut o = object.clone();
    if let Some(entries) = o["metadata"]["managedFields"].as_array_mut() {
        for e in entries.iter_mut().filter_map(Value::as_object_mut) {
            e.remove("time");
        }
    }
    o
}

/// `apps/v1` → (`apps`, `v1`); `v1` → (``, `v1`).
pub fn split_api_version(api_version: &str) -> (&str, &str) {
    api_version.split_once('/').unwrap_or(("", api_version))
}

/// The body's name, after checking it against the URL: kind and apiVersion as the
/// resource's, the namespace (when set) as the URL's, the name as `name` when given.
fn check_body<'a>(
    rt: &ResourceType,
    ns: &str,
    name: Option<&str>,
    body: &'a Value,
) -> Result<&'a str, StoreError> {
    if !body.is_object() {
        return Err(StoreError::bad_request("the body is not an object"));
    }
    let kind = body["kind"].as_str().unwrap_or_default();
    let api_version = body["apiVersion"].as_str().unwrap_or_default();
    if kind.is_empty() || api_version.is_empty() {
        return Err(StoreError::bad_request(
            "Object 'Kind' is missing or 'apiVersion' is missing in the body",
        ));
    }
    if kind != rt.kind || api_version != rt.api_version() {
        return Err(StoreError::bad_request(format!(
            "the API version in the data ({api_version}) and kind ({kind}) do not match the \
             resource {} of {}",
            rt.plural,
            rt.api_version()
        )));
    }
    let body_name = body["metadata"]["name"].as_str().unwrap_or_default();
    if let Some(name) = name
        && body_name != name
    {
        return Err(StoreError::bad_request(
            "the name of the object does not match the name on the URL",
        ));
    }
    if body_name.is_empty() {
        return Err(StoreError::invalid(
            rt,
            "",
            "metadata.name",
            "Required value: name or generateName is required",
        ));
    }
    if rt.namespaced
        && let Some(body_ns) = body["metadata"]["namespace"].as_str()
        && !body_ns.is_empty()
        && body_ns != ns
    {
        return Err(StoreError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the \
             request",
        ));
    }
    Ok(body_name)
}

/// The metadata fields the server sets, which clients' fields never include.
const SERVER_METADATA: [&str; 9] = [
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "managedFields",
    "deletionTimestamp",
    "selfLink",
];

fn strip_server_fields(object: &mut Value) {
    if let Some(meta) = object["metadata"].as_object_mut() {
        for f in [
            "uid",
            "resourceVersion",
            "generation",
            "creationTimestamp",
            "managedFields",
        ] {
            meta.remove(f);
        }
    }
    if let Some(o) = object.as_object_mut() {
        o.remove("status");
    }
}

/// The part of a client's object whose fields are managed: everything but apiVersion,
/// kind, status, and the metadata the server sets (nulls dropped).
fn applied_part(object: &Value) -> Value {
    let mut out = Map::new();
    for (k, v) in object.as_object().into_iter().flatten() {
        match k.as_str() {
            "apiVersion" | "kind" | "status" => {}
            "metadata" => {
                let mut meta = Map::new();
                for (mk, mv) in v.as_object().into_iter().flatten() {
                    if !SERVER_METADATA.contains(&mk.as_str()) && !mv.is_null() {
                        meta.insert(mk.clone(), without_nulls(mv));
                    }
                }
                if !meta.is_empty() {
                    out.insert(k.clone(), Value::Object(meta));
                }
            }
            _ if v.is_null() => {}
            _ => {
                out.insert(k.clone(), without_nulls(v));
            }
        }
    }
    Value::Object(out)
}

fn without_nulls(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), without_nulls(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// Everything but metadata and status: what a generation counts.
fn spec_part(object: &Value) -> Value {
    let mut o = object.clone();
    if let Some(m) = o.as_object_mut() {
        m.remove("metadata");
        m.remove("status");
    }
    o
}

/// The leaf paths of `v`: map keys recursively; empty maps, lists and scalars are leaves.
fn leaves(v: &Value) -> BTreeSet<FieldPath> {
    fn walk(v: &Value, prefix: &mut FieldPath, out: &mut BTreeSet<FieldPath>) {
        match v {
            Value::Object(m) if !m.is_empty() => {
                for (k, c) in m {
                    prefix.push(k.clone());
                    walk(c, prefix, out);
                    prefix.pop();
                }
            }
            _ if !prefix.is_empty() => {
                out.insert(prefix.clone());
            }
            _ => {}
        }
    }
    let mut out = BTreeSet::new();
    walk(v, &mut Vec::new(), &mut out);
    out
}

/// Whether one path is the other or contains it.
fn overlaps(a: &[String], b: &[String]) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

fn value_at<'a>(v: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, k| v.as_object()?.get(k))
}

/// Remove `path` from `object`, then the maps it leaves empty that no one owns.
fn remove_path(
    object: &mut Value,
    path: &[String],
    others: &[&FieldPath],
    applied: &BTreeSet<FieldPath>,
) {
    let Some((last, parent)) = path.split_last() else {
        return;
    };
    let mut target = &mut *object;
    for k in parent {
        match target.get_mut(k) {
            Some(t) => target = t,
            None => return,
        }
    }
    let Some(map) = target.as_object_mut() else {
        return;
    };
    map.remove(last);
    if map.is_empty() && !parent.is_empty() {
        let owned = others.iter().any(|f| f.starts_with(parent))
            || applied.iter().any(|f| f.starts_with(parent));
        if !owned {
            remove_path(object, parent, others, applied);
        }
    }
}

/// The managed fields after an update (PUT or merge patch) by `manager` that set the
/// fields `set`, leaving `object`: `set` moves to `manager`'s `Update` entry, and fields
/// no longer in the object leave every entry.
fn updated_managers(
    rt: &ResourceType,
    live: &Value,
    object: &Value,
    set: BTreeSet<FieldPath>,
    manager: &str,
) -> Vec<Manager> {
    let mut managers = managers_of(live);
    for m in &mut managers {
        if !(m.manager == manager && m.operation == "Update") {
            m.fields.retain(|f| !set.iter().any(|p| overlaps(f, p)));
        }
        m.fields.retain(|f| value_at(object, f).is_some());
    }
    if !set.is_empty() {
        match managers
            .iter_mut()
            .find(|m| m.manager == manager && m.operation == "Update")
        {
            Some(m) => {
                m.fields.extend(set);
                m.time = now();
            }
            None => managers.push(Manager {
                manager: manager.to_owned(),
                operation: "Update".to_owned(),
                api_version: rt.api_version(),
                time: now(),
                fields: set,
            }),
        }
    }
    managers.retain(|m| !m.fields.is_empty());
    managers
}

/// RFC 7386: maps merge key by key, `null` removes, anything else replaces.
fn json_merge_patch(object: &mut Value, patch: &Value) {
    let Value::Object(p) = patch else {
        *object = patch.clone();
        return;
    };
    if !object.is_object() {
        *object = json!({});
    }
    let o = object.as_object_mut().expect("an object");
    for (k, v) in p {
        if v.is_null() {
            o.remove(k);
        } else {
            json_merge_patch(o.entry(k.clone()).or_insert(Value::Null), v);
        }
    }
}

/// Merge `config` into `object`: maps key by key, anything else replaced.
fn merge(object: &mut Value, config: &Value) {
    match (object, config) {
        (Value::Object(o), Value::Object(c)) => {
            for (k, v) in c {
                match o.get_mut(k) {
                    Some(existing) if existing.is_object() && v.is_object() => merge(existing, v),
                    _ => {
                        o.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (o, c) => *o = c.clone(),
    }
}

/// The `metadata.managedFields` entries of a stored object.
fn managers_of(object: &Value) -> Vec<Manager> {
    object["metadata"]["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| Manager {
            manager: e["manager"].as_str().unwrap_or_default().to_owned(),
            operation: e["operation"].as_str().unwrap_or_default().to_owned(),
            api_version: e["apiVersion"].as_str().unwrap_or_default().to_owned(),
            time: e["time"].as_str().unwrap_or_default().to_owned(),
            fields: fields_from_v1(&e["fieldsV1"]),
        })
        .collect()
}

/// `FieldsV1` (`{"f:data": {"f:key": {}}}`) as leaf paths; a map holding list-item
/// keys (`k:`, `v:`, `i:`) or only `.` is a leaf.
fn fields_from_v1(v: &Value) -> BTreeSet<FieldPath> {
    fn walk(v: &Value, prefix: &mut FieldPath, out: &mut BTreeSet<FieldPath>) {
        let children: Vec<(&String, &Value)> = v
            .as_object()
            .into_iter()
            .flatten()
            .filter(|(k, _)| k.as_str() != ".")
            .collect();
        let atomic = children.is_empty() || children.iter().any(|(k, _)| !k.starts_with("f:"));
        if atomic {
            if !prefix.is_empty() {
                out.insert(prefix.clone());
            }
            return;
        }
        for (k, c) in children {
            prefix.push(k[2..].to_owned());
            walk(c, prefix, out);
            prefix.pop();
        }
    }
    let mut out = BTreeSet::new();
    walk(v, &mut Vec::new(), &mut out);
    out
}

/// Leaf paths as `FieldsV1`.
fn fields_to_v1(fields: &BTreeSet<FieldPath>) -> Value {
    let mut root = Map::new();
    for path in fields {
        let mut node = &mut root;
        for k in path {
            node = node
                .entry(format!("f:{k}"))
                .or_insert_with(|| json!({}))
                .as_object_mut()
                .expect("fieldsV1 nodes are maps");
        }
    }
    Value::Object(root)
}

fn managed_fields(managers: &[Manager]) -> Value {
    Value::Array(
        managers
            .iter()
            .map(|m| {
                json!({"manager": m.manager, "operation": m.operation, "apiVersion": m.api_version,
                       "time": m.time, "fieldsType": "FieldsV1", "fieldsV1": fields_to_v1(&m.fields)})
            })
            .collect(),
    )
}

/// A path as the apiserver prints it: `.data.key`.
fn path_string(path: &[String]) -> String {
    path.iter().map(|k| format!(".{k}")).collect()
}

/// How a conflict names a manager: `"kubectl"`, or for an Update entry
/// `"kubectl-edit" using v1 at <time>`.
fn manager_label(m: &Manager) -> String {
    if m.operation == "Update" {
        format!("\"{}\" using {} at {}", m.manager, m.api_version, m.time)
    } else {
        format!("\"{}\"", m.manager)
    }
}

/// The 409 Conflict of a refused apply, worded as kube-apiserver's.
fn conflict_error(managers: &[Manager], conflicts: &[(usize, FieldPath)]) -> StoreError {
    let causes: Vec<Value> = conflicts
        .iter()
        .map(|(i, p)| {
            json!({"type": "FieldManagerConflict",
                   "message": format!("conflict with {}", manager_label(&managers[*i])),
                   "field": path_string(p)})
        })
        .collect();
    let message = if let [(i, p)] = conflicts {
        format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            manager_label(&managers[*i]),
            path_string(p)
        )
    } else {
        let mut by_manager: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (i, p) in conflicts {
            by_manager
                .entry(manager_label(&managers[*i]))
                .or_default()
                .push(path_string(p));
        }
        let lines: Vec<String> = by_manager
            .iter()
            .flat_map(|(m, paths)| {
                std::iter::once(format!("conflicts with {m}:"))
                    .chain(paths.iter().map(|p| format!("- {p}")))
            })
            .collect();
        format!(
            "Apply failed with {} conflicts: {}",
            conflicts.len(),
            lines.join("\n")
        )
    };
    StoreError {
        code: 409,
        reason: "Conflict",
        message,
        details: json!({"causes": causes}),
    }
}

/// A CustomResourceDefinition is named `<plural>.<group>` and defines a kind, a scope
/// and at least one version.
fn check_crd(rt: &ResourceType, name: &str, crd: &Value) -> Result<(), StoreError> {
    let spec = &crd["spec"];
    let group = spec["group"].as_str().unwrap_or_default();
    let plural = spec["names"]["plural"].as_str().unwrap_or_default();
    if name != format!("{plural}.{group}") {
        return Err(StoreError::invalid(
            rt,
            name,
            "metadata.name",
            &format!("Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group"),
        ));
    }
    if spec["names"]["kind"]
        .as_str()
        .unwrap_or_default()
        .is_empty()
    {
        return Err(StoreError::invalid(
            rt,
            name,
            "spec.names.kind",
            "Required value",
        ));
    }
    if !matches!(spec["scope"].as_str(), Some("Namespaced" | "Cluster")) {
        return Err(StoreError::invalid(
            rt,
            name,
            "spec.scope",
            "Unsupported value: supported values: \"Cluster\", \"Namespaced\"",
        ));
    }
    if spec["versions"].as_array().is_none_or(|v| v.is_empty()) {
        return Err(StoreError::invalid(
            rt,
            name,
            "spec.versions",
            "Invalid value: must have exactly one version marked as storage version",
        ));
    }
    Ok(())
}

/// What the apiserver fills in on write: a Secret's `stringData` goes into `data`
/// (base64) and its `type` defaults to `Opaque`.
fn default_fields(object: &mut Value) {
    if object["apiVersion"] != "v1" || object["kind"] != "Secret" {
        return;
    }
    let Some(o) = object.as_object_mut() else {
        return;
    };
    if let Some(Value::Object(plain)) = o.remove("stringData") {
        let data = o.entry("data").or_insert_with(|| json!({}));
        if !data.is_object() {
            *data = json!({});
        }
        for (k, v) in plain {
            let text = v
                .as_str()
                .map(str::to_owned)
                .unwrap_or_else(|| v.to_string());
            data[k.as_str()] = json!(base64::engine::general_purpose::STANDARD.encode(text));
        }
    }
    o.entry("type").or_insert_with(|| json!("Opaque"));
}

/// The status the controllers would give `object` (Namespace, CRD, workloads), with
/// `nodes` nodes in the cluster; other kinds keep theirs.
fn set_status(object: &mut Value, nodes: usize) {
    let generation = object["metadata"]["generation"].clone();
    let stuck = object["metadata"]["annotations"][ROLLOUT_ANNOTATION].as_str() == Some("stuck");
    let replicas = object["spec"]["replicas"].as_u64().unwrap_or(1);
    let time = object["metadata"]["creationTimestamp"].clone();
    let status = match (object["apiVersion"].as_str(), object["kind"].as_str()) {
        (Some("v1"), Some("Namespace")) => json!({"phase": "Active"}),
        (Some("apiextensions.k8s.io/v1"), Some("CustomResourceDefinition")) => {
            let names = &object["spec"]["names"];
            let kind = names["kind"].as_str().unwrap_or_default();
            let mut accepted = names.clone();
            if accepted["singular"].is_null() {
                accepted["singular"] = json!(kind.to_lowercase());
            }
            if accepted["listKind"].is_null() {
                accepted["listKind"] = json!(format!("{kind}List"));
            }
            let stored: Vec<Value> = object["spec"]["versions"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|v| v["storage"].as_bool() == Some(true))
                .map(|v| v["name"].clone())
                .collect();
            json!({"conditions": [
                {"type": "NamesAccepted", "status": "True", "lastTransitionTime": time,
                 "reason": "NoConflicts", "message": "no conflicts found"},
                {"type": "Established", "status": "True", "lastTransitionTime": time,
                 "reason": "InitialNamesAccepted", "message": "the initial names have been accepted"}],
                "acceptedNames": accepted, "storedVersions": stored})
        }
        (Some("apps/v1"), Some("DaemonSet")) => {
            let ready = if stuck { 0 } else { nodes };
            json!({"currentNumberScheduled": nodes, "desiredNumberScheduled": nodes,
                   "numberMisscheduled": 0, "numberReady": ready, "updatedNumberScheduled": ready,
                   "numberAvailable": ready, "numberUnavailable": nodes - ready,
                   "observedGeneration": generation})
        }
        (Some("apps/v1"), Some("Deployment")) => {
            let ready = if stuck { 0 } else { replicas };
            let (available, reason) = if ready == replicas {
                ("True", "MinimumReplicasAvailable")
            } else {
                ("False", "MinimumReplicasUnavailable")
            };
            json!({"observedGeneration": generation, "replicas": replicas,
                   "updatedReplicas": ready, "readyReplicas": ready, "availableReplicas": ready,
                   "unavailableReplicas": replicas - ready,
                   "conditions": [
                       {"type": "Available", "status": available, "reason": reason,
                        "message": if ready == replicas { "Deployment has minimum availability." }
                                   else { "Deployment does not have minimum availability." },
                        "lastTransitionTime": time, "lastUpdateTime": time},
                       {"type": "Progressing", "status": "True",
                        "reason": if stuck { "ReplicaSetUpdated" } else { "NewReplicaSetAvailable" },
                        "message": "ReplicaSet has progressed.",
                        "lastTransitionTime": time, "lastUpdateTime": time}]})
        }
        (Some("apps/v1"), Some("StatefulSet")) => {
            let name = object["metadata"]["name"].as_str().unwrap_or_default();
            let hash = hex::encode(sha2::Sha256::digest(
                object["spec"]["template"].to_string().as_bytes(),
            ));
            let revision = format!("{name}-{}", &hash[..10]);
            let ready = if stuck { 0 } else { replicas };
            let mut s = json!({"observedGeneration": generation, "replicas": replicas,
                   "readyReplicas": ready, "currentReplicas": ready, "updatedReplicas": ready,
                   "availableReplicas": ready, "updateRevision": revision, "collisionCount": 0});
            if !stuck {
                s["currentRevision"] = json!(revision);
            }
            s
        }
        _ => return,
    };
    object["status"] = status;
}

/// Now, as Kubernetes writes times (RFC 3339, seconds, UTC).
fn now() -> String {
    let t = time::OffsetDateTime::now_utc();
    let t = t.replace_nanosecond(0).unwrap_or(t);
    t.format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rt(store: &Store, group: &str, plural: &str) -> ResourceType {
        store
            .resource_types()
            .into_iter()
            .find(|t| t.group == group && t.plural == plural)
            .unwrap_or_else(|| panic!("{plural}.{group} is served"))
    }

    fn configmap(data: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "cm", "namespace": "default"}, "data": data})
    }

    fn apply(
        store: &mut Store,
        object: Value,
        manager: &str,
        force: bool,
    ) -> Result<Written, StoreError> {
        let rt = rt(store, "", "configmaps");
        let opts = ApplyOptions {
            manager,
            force,
            dry_run: false,
        };
        store.apply(&rt, "default", "cm", object, opts)
    }

    fn managers(object: &Value) -> Vec<(String, Value)> {
        object["metadata"]["managedFields"]
            .as_array()
            .expect("managedFields")
            .iter()
            .map(|e| {
                (
                    e["manager"].as_str().expect("manager").to_owned(),
                    e["fieldsV1"].clone(),
                )
            })
            .collect()
    }

    #[test]
    fn apply_creates_then_updates_and_drops_the_fields_no_longer_applied() {
        let mut store = Store::new();
        let created = apply(
            &mut store,
            configmap(json!({"a": "1", "b": "2"})),
            "m",
            false,
        )
        .expect("create");
        assert!(created.created);
        let o = &created.object;
        assert_eq!(o["metadata"]["generation"], 1);
        assert!(o["metadata"]["uid"].as_str().is_some_and(|u| !u.is_empty()));
        assert!(o["metadata"]["creationTimestamp"].is_string());
        let rv1: u64 = o["metadata"]["resourceVersion"]
            .as_str()
            .expect("rv")
            .parse()
            .expect("number");
        assert_eq!(
            managers(o),
            vec![("m".to_owned(), json!({"f:data": {"f:a": {}, "f:b": {}}}))]
        );
        assert_eq!(o["metadata"]["managedFields"][0]["operation"], "Apply");
        assert_eq!(o["metadata"]["managedFields"][0]["fieldsType"], "FieldsV1");
        assert_eq!(o["metadata"]["managedFields"][0]["apiVersion"], "v1");

        let updated = apply(&mut store, configmap(json!({"a": "1"})), "m", false).expect("update");
        assert!(!updated.created);
        let o = &updated.object;
        assert_eq!(o["data"], json!({"a": "1"}));
        assert_eq!(o["metadata"]["uid"], created.object["metadata"]["uid"]);
        let rv2: u64 = o["metadata"]["resourceVersion"]
            .as_str()
            .expect("rv")
            .parse()
            .expect("number");
        assert!(rv2 > rv1);
        assert_eq!(
            managers(o),
            vec![("m".to_owned(), json!({"f:data": {"f:a": {}}}))]
        );
        let rt = rt(&store, "", "configmaps");
        assert_eq!(store.get(&rt, "default", "cm").expect("stored"), *o);

        // The same config again changes nothing, not even the resourceVersion.
        let again = apply(&mut store, configmap(json!({"a": "1"})), "m", false).expect("no-op");
        assert_eq!(again.object, *o);
    }

    #[test]
    fn another_manager_changing_a_value_conflicts_unless_forced() {
        let mut store = Store::new();
        apply(
            &mut store,
            configmap(json!({"key": "1", "other": "x"})),
            "kubectl",
            false,
        )
        .expect("create");
        let e = apply(&mut store, configmap(json!({"key": "2"})), "other", false)
            .expect_err("conflict");
        assert_eq!(e.code, 409);
        assert_eq!(e.reason, "Conflict");
        assert_eq!(
            e.message,
            "Apply failed with 1 conflict: conflict with \"kubectl\": .data.key"
        );
        assert_eq!(
            e.details,
            json!({"causes": [{"type": "FieldManagerConflict",
                               "message": "conflict with \"kubectl\"", "field": ".data.key"}]})
        );
        assert_eq!(e.status()["code"], 409);
        // Nothing changed.
        let rt = rt(&store, "", "configmaps");
        assert_eq!(
            store.get(&rt, "default", "cm").expect("cm")["data"]["key"],
            "1"
        );

        let forced =
            apply(&mut store, configmap(json!({"key": "2"})), "other", true).expect("force");
        assert_eq!(forced.object["data"], json!({"key": "2", "other": "x"}));
        assert_eq!(
            managers(&forced.object),
            vec![
                ("kubectl".to_owned(), json!({"f:data": {"f:other": {}}})),
                ("other".to_owned(), json!({"f:data": {"f:key": {}}})),
            ]
        );
        // kubectl no longer owns .data.key: its next apply without it leaves it alone.
        let o = apply(
            &mut store,
            configmap(json!({"other": "x"})),
            "kubectl",
            false,
        )
        .expect("apply");
        assert_eq!(o.object["data"], json!({"key": "2", "other": "x"}));
    }

    #[test]
    fn the_same_value_is_shared_and_stays_while_one_owner_applies_it() {
        let mut store = Store::new();
        apply(&mut store, configmap(json!({"key": "1"})), "a", false).expect("a");
        let shared = apply(&mut store, configmap(json!({"key": "1"})), "b", false).expect("b");
        assert_eq!(
            managers(&shared.object),
            vec![
                ("a".to_owned(), json!({"f:data": {"f:key": {}}})),
                ("b".to_owned(), json!({"f:data": {"f:key": {}}})),
            ]
        );
        // a stops applying it: b still owns it, so it stays.
        let o = apply(&mut store, configmap(json!({"x": "y"})), "a", false).expect("a again");
        assert_eq!(o.object["data"], json!({"key": "1", "x": "y"}));
        // Two conflicts are listed by manager.
        let e = apply(
            &mut store,
            configmap(json!({"key": "2", "x": "z"})),
            "c",
            false,
        )
        .expect_err("409");
        assert_eq!(
            e.message,
            "Apply failed with 2 conflicts: conflicts with \"a\":\n- .data.x\nconflicts with \"b\":\n- .data.key"
        );
    }

    #[test]
    fn dry_run_stores_nothing() {
        let mut store = Store::new();
        let before = store.revision();
        let rt = rt(&store, "", "configmaps");
        let opts = ApplyOptions {
            manager: "m",
            force: false,
            dry_run: true,
        };
        let w = store
            .apply(&rt, "default", "cm", configmap(json!({"a": "1"})), opts)
            .expect("dry run");
        assert!(w.created);
        assert_eq!(w.object["data"]["a"], "1");
        assert_eq!(store.revision(), before);
        assert_eq!(
            store.get(&rt, "default", "cm").expect_err("absent").code,
            404
        );
        apply(&mut store, configmap(json!({"a": "1"})), "m", false).expect("create");
        let stored = store.get(&rt, "default", "cm").expect("cm");
        let before = store.revision();
        let w = store
            .apply(&rt, "default", "cm", configmap(json!({"a": "2"})), opts)
            .expect("dry run");
        assert_eq!(w.object["data"]["a"], "2");
        assert_eq!(store.revision(), before);
        assert_eq!(store.get(&rt, "default", "cm").expect("cm"), stored);
    }

    #[test]
    fn generation_counts_changes_outside_metadata_and_status() {
        let mut store = Store::new();
        let mut cm = configmap(json!({"a": "1"}));
        assert_eq!(
            apply(&mut store, cm.clone(), "m", false).expect("1").object["metadata"]["generation"],
            1
        );
        cm["metadata"]["labels"] = json!({"x": "y"});
        let o = apply(&mut store, cm.clone(), "m", false)
            .expect("labels")
            .object;
        assert_eq!(o["metadata"]["generation"], 1, "metadata only");
        assert_eq!(o["metadata"]["labels"]["x"], "y");
        cm["status"] = json!({"ignored": true});
        let o = apply(&mut store, cm.clone(), "m", false)
            .expect("status")
            .object;
        assert_eq!(o["metadata"]["generation"], 1, "status is not applied");
        assert!(o.get("status").is_none());
        cm["data"]["a"] = json!("2");
        let o = apply(&mut store, cm, "m", false).expect("data").object;
        assert_eq!(o["metadata"]["generation"], 2);
    }

    #[test]
    fn the_body_must_match_the_url_and_the_namespace_exist() {
        let mut store = Store::new();
        let rt = rt(&store, "", "configmaps");
        let opts = ApplyOptions {
            manager: "m",
            force: false,
            dry_run: false,
        };
        let mut cm = configmap(json!({}));
        cm["metadata"]["namespace"] = json!("missing");
        let e = store
            .apply(&rt, "missing", "cm", cm, opts)
            .expect_err("404");
        assert_eq!((e.code, e.reason), (404, "NotFound"));
        assert_eq!(e.message, "namespaces \"missing\" not found");
        let e = store
            .apply(&rt, "kube-system", "cm", configmap(json!({})), opts)
            .expect_err("400");
        assert_eq!(e.code, 400);
        let e = store
            .apply(&rt, "default", "other", configmap(json!({})), opts)
            .expect_err("400");
        assert_eq!(e.code, 400);
        let no_manager = ApplyOptions {
            manager: "",
            ..opts
        };
        let e = store
            .apply(&rt, "default", "cm", configmap(json!({})), no_manager)
            .expect_err("400");
        assert_eq!(e.code, 400);
        store
            .create(
                &rt,
                "default",
                configmap(json!({})),
                "kubectl-create",
                false,
            )
            .expect("create");
        let e = store
            .create(
                &rt,
                "default",
                configmap(json!({})),
                "kubectl-create",
                false,
            )
            .expect_err("409");
        assert_eq!((e.code, e.reason), (409, "AlreadyExists"));
        assert_eq!(e.message, "configmaps \"cm\" already exists");
        let e = store.get(&rt, "default", "nope").expect_err("404");
        assert_eq!(e.details, json!({"name": "nope", "kind": "configmaps"}));
    }

    fn crd(served: bool) -> Value {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
               "metadata": {"name": "widgets.example.com"},
               "spec": {"group": "example.com", "scope": "Namespaced",
                        "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                        "versions": [{"name": "v1", "served": served, "storage": true,
                                      "schema": {"openAPIV3Schema": {"type": "object"}}}]}})
    }

    #[test]
    fn a_crd_adds_its_kind_until_it_is_deleted() {
        let mut store = Store::new();
        assert!(store.resource("example.com", "v1", "widgets").is_none());
        let crds = rt(&store, "apiextensions.k8s.io", "customresourcedefinitions");
        let opts = ApplyOptions {
            manager: "m",
            force: false,
            dry_run: false,
        };
        let o = store
            .apply(&crds, "", "widgets.example.com", crd(true), opts)
            .expect("crd")
            .object;
        let conditions = o["status"]["conditions"].as_array().expect("conditions");
        for t in ["Established", "NamesAccepted"] {
            assert!(
                conditions
                    .iter()
                    .any(|c| c["type"] == t && c["status"] == "True"),
                "{t}"
            );
        }
        assert_eq!(o["status"]["acceptedNames"]["kind"], "Widget");
        assert_eq!(o["status"]["acceptedNames"]["listKind"], "WidgetList");
        let widgets = store
            .resource("example.com", "v1", "widgets")
            .expect("served");
        assert!(widgets.namespaced);
        assert_eq!(widgets.kind, "Widget");
        let widget = json!({"apiVersion": "example.com/v1", "kind": "Widget",
                            "metadata": {"name": "w"}, "spec": {"size": 3}});
        store
            .apply(&widgets, "default", "w", widget, opts)
            .expect("widget");
        assert_eq!(
            store.list(&widgets, None)["items"]
                .as_array()
                .expect("items")
                .len(),
            1
        );
        assert_eq!(store.list(&widgets, None)["kind"], "WidgetList");

        // Not served any more: no kind.
        store
            .apply(&crds, "", "widgets.example.com", crd(false), opts)
            .expect("crd");
        assert!(store.resource("example.com", "v1", "widgets").is_none());
        store
            .apply(&crds, "", "widgets.example.com", crd(true), opts)
            .expect("crd");
        store
            .delete(&crds, "", "widgets.example.com", false)
            .expect("delete");
        assert!(store.resource("example.com", "v1", "widgets").is_none());
        assert!(store.objects().all(|o| o["kind"] != "Widget"));
        // A badly named CRD is invalid.
        let mut bad = crd(true);
        bad["metadata"]["name"] = json!("widgets");
        let e = store
            .apply(&crds, "", "widgets", bad, opts)
            .expect_err("422");
        assert_eq!(e.code, 422);
    }

    #[test]
    fn deleting_a_namespace_deletes_its_objects() {
        let mut store = Store::new();
        let manifests = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a, namespace: team}\n---\n\
                         apiVersion: v1\nkind: Namespace\nmetadata: {name: team}\n---\n\
                         apiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\n";
        assert_eq!(
            store.apply_manifests(manifests, "talos"),
            Vec::<String>::new()
        );
        let cms = rt(&store, "", "configmaps");
        assert_eq!(
            store.list(&cms, Some("team"))["items"]
                .as_array()
                .expect("items")
                .len(),
            1
        );
        assert_eq!(
            store.list(&cms, None)["items"]
                .as_array()
                .expect("items")
                .len(),
            2
        );
        assert_eq!(
            store.get(&cms, "default", "b").expect("b")["metadata"]["managedFields"][0]["manager"],
            "talos"
        );
        let namespaces = rt(&store, "", "namespaces");
        store
            .delete(&namespaces, "", "team", false)
            .expect("delete");
        assert_eq!(store.get(&cms, "team", "a").expect_err("gone").code, 404);
        assert_eq!(
            store.get(&cms, "default", "b").expect("kept")["metadata"]["name"],
            "b"
        );
        assert_eq!(
            store
                .delete(&namespaces, "", "team", false)
                .expect_err("gone")
                .code,
            404
        );
    }

    #[test]
    fn workloads_finish_their_rollout_unless_stuck() {
        let mut store = Store::new();
        store.set_node_count(3);
        let manifests = "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: ds, namespace: kube-system}\nspec: {}\n---\n\
             apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec: {replicas: 2}\n---\n\
             apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: s}\nspec: {}\n---\n\
             apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: stuck, annotations: {talos-sim.talosprov.dev/rollout: stuck}}\nspec: {replicas: 2}\n";
        assert!(store.apply_manifests(manifests, "talos").is_empty());
        let ds = store
            .get(&rt(&store, "apps", "daemonsets"), "kube-system", "ds")
            .expect("ds");
        for f in [
            "desiredNumberScheduled",
            "currentNumberScheduled",
            "numberReady",
            "updatedNumberScheduled",
            "numberAvailable",
        ] {
            assert_eq!(ds["status"][f], 3, "{f}");
        }
        assert_eq!(ds["status"]["observedGeneration"], 1);
        store.set_node_count(4);
        let ds = store
            .get(&rt(&store, "apps", "daemonsets"), "kube-system", "ds")
            .expect("ds");
        assert_eq!(ds["status"]["numberReady"], 4);
        let deployments = rt(&store, "apps", "deployments");
        let d = store.get(&deployments, "default", "d").expect("d");
        for f in [
            "replicas",
            "updatedReplicas",
            "readyReplicas",
            "availableReplicas",
        ] {
            assert_eq!(d["status"][f], 2, "{f}");
        }
        assert_eq!(
            d["status"]["conditions"][0],
            json!({"type": "Available", "status": "True",
            "reason": "MinimumReplicasAvailable", "message": "Deployment has minimum availability.",
            "lastTransitionTime": d["metadata"]["creationTimestamp"], "lastUpdateTime": d["metadata"]["creationTimestamp"]})
        );
        let s = store
            .get(&rt(&store, "apps", "statefulsets"), "default", "s")
            .expect("s");
        for f in [
            "replicas",
            "readyReplicas",
            "currentReplicas",
            "updatedReplicas",
        ] {
            assert_eq!(s["status"][f], 1, "{f}");
        }
        assert_eq!(
            s["status"]["currentRevision"],
            s["status"]["updateRevision"]
        );
        let stuck = store.get(&deployments, "default", "stuck").expect("stuck");
        assert_eq!(stuck["status"]["observedGeneration"], 1);
        assert_eq!(stuck["status"]["readyReplicas"], 0);
        assert_eq!(stuck["status"]["availableReplicas"], 0);
        assert_eq!(stuck["status"]["conditions"][0]["status"], "False");
        let stuck = "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: ds2, annotations: {talos-sim.talosprov.dev/rollout: stuck}}\nspec: {}\n---\n\
             apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: s2, annotations: {talos-sim.talosprov.dev/rollout: stuck}}\nspec: {replicas: 2}\n";
        assert!(store.apply_manifests(stuck, "talos").is_empty());
        let ds = store
            .get(&rt(&store, "apps", "daemonsets"), "default", "ds2")
            .expect("ds2");
        assert_eq!(ds["status"]["observedGeneration"], 1);
        assert_eq!(ds["status"]["desiredNumberScheduled"], 4);
        assert_eq!(ds["status"]["numberReady"], 0);
        assert_eq!(ds["status"]["numberAvailable"], 0);
        let s = store
            .get(&rt(&store, "apps", "statefulsets"), "default", "s2")
            .expect("s2");
        assert_eq!(s["status"]["observedGeneration"], 1);
        assert_eq!(s["status"]["readyReplicas"], 0);
        assert_ne!(
            s["status"]["currentRevision"],
            s["status"]["updateRevision"]
        );
    }

    #[test]
    fn a_merge_patch_takes_the_fields_it_sets_and_removes_the_nulled_ones() {
        let mut store = Store::new();
        apply(
            &mut store,
            configmap(json!({"a": "1", "b": "2"})),
            "kubectl",
            false,
        )
        .expect("create");
        let rt = rt(&store, "", "configmaps");
        let w = store
            .merge_patch(
                &rt,
                "default",
                "cm",
                json!({"data": {"a": "9", "b": null}}),
                "editor",
                false,
            )
            .expect("patch");
        assert_eq!(w.object["data"], json!({"a": "9"}));
        assert_eq!(w.object["metadata"]["generation"], 2);
        assert_eq!(
            managers(&w.object),
            vec![("editor".to_owned(), json!({"f:data": {"f:a": {}}}))]
        );
        let e = apply(&mut store, configmap(json!({"a": "1"})), "kubectl", false).expect_err("409");
        assert!(
            e.message
                .starts_with("Apply failed with 1 conflict: conflict with \"editor\" using v1 at "),
            "{}",
            e.message
        );
    }

    #[test]
    fn a_replace_needs_the_current_resource_version_and_takes_what_it_changes() {
        let mut store = Store::new();
        let created = apply(
            &mut store,
            configmap(json!({"a": "1", "b": "2"})),
            "kubectl",
            false,
        )
        .expect("create")
        .object;
        let rt = rt(&store, "", "configmaps");
        let mut stale = created.clone();
        stale["metadata"]["resourceVersion"] = json!("1");
        let e = store
            .replace(&rt, "default", "cm", stale, "edit", false)
            .expect_err("409");
        assert_eq!((e.code, e.reason), (409, "Conflict"));
        let mut next = created.clone();
        next["data"] = json!({"a": "1", "c": "3"});
        let o = store
            .replace(&rt, "default", "cm", next, "edit", false)
            .expect("replace")
            .object;
        assert_eq!(o["data"], json!({"a": "1", "c": "3"}));
        assert_eq!(o["metadata"]["uid"], created["metadata"]["uid"]);
        assert_eq!(
            managers(&o),
            vec![
                ("kubectl".to_owned(), json!({"f:data": {"f:a": {}}})),
                ("edit".to_owned(), json!({"f:data": {"f:c": {}}})),
            ]
        );
        let missing = configmap(json!({}));
        let mut missing = missing;
        missing["metadata"]["name"] = json!("nope");
        let e = store
            .replace(&rt, "default", "nope", missing, "edit", false)
            .expect_err("404");
        assert_eq!(e.code, 404);
    }

    #[test]
    fn an_update_that_changes_nothing_keeps_the_resource_version() {
        let mut store = Store::new();
        let created = apply(&mut store, configmap(json!({"a": "1"})), "kubectl", false)
            .expect("create")
            .object;
        let rt = rt(&store, "", "configmaps");
        let patched = store
            .merge_patch(
                &rt,
                "default",
                "cm",
                json!({"data": {"a": "2"}}),
                "edit",
                false,
            )
            .expect("patch")
            .object;
        let again = store
            .merge_patch(
                &rt,
                "default",
                "cm",
                json!({"data": {"a": "2"}}),
                "edit",
                false,
            )
            .expect("patch")
            .object;
        assert_ne!(patched, created);
        assert_eq!(again, patched);
        assert_eq!(
            store.revision(),
            patched["metadata"]["resourceVersion"].as_str().expect("rv")
        );
    }

    #[test]
    fn sizes_are_bounded_and_counted() {
        let mut store = Store::new();
        let empty = store.bytes;
        assert!(empty > 0, "the initial namespaces");
        let big = "x".repeat(MAX_OBJECT_BYTES);
        let e =
            apply(&mut store, configmap(json!({"blob": big})), "m", false).expect_err("too large");
        assert_eq!(
            (e.code, e.message.as_str()),
            (500, "etcdserver: request is too large")
        );
        apply(&mut store, configmap(json!({"a": "1"})), "m", false).expect("create");
        apply(&mut store, configmap(json!({"a": "12345"})), "m", false).expect("update");
        let rt = rt(&store, "", "configmaps");
        let stored = store.get(&rt, "default", "cm").expect("cm");
        assert_eq!(store.bytes, empty + size_of(&stored));
        let namespaces = rt_of(&store, "namespaces");
        store
            .delete(&namespaces, "", "default", false)
            .expect("delete");
        let left: usize = store.objects().map(size_of).sum();
        assert_eq!(store.bytes, left);
    }

    fn rt_of(store: &Store, plural: &str) -> ResourceType {
        rt(store, "", plural)
    }

    #[test]
    fn a_secrets_string_data_is_stored_as_data() {
        let mut store = Store::new();
        let manifests = "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\nstringData: {token: abc}\ndata: {other: eHl6}\n";
        assert!(store.apply_manifests(manifests, "talos").is_empty());
        let secret = store
            .get(&rt_of(&store, "secrets"), "default", "s")
            .expect("s");
        assert_eq!(secret["data"], json!({"other": "eHl6", "token": "YWJj"}));
        assert_eq!(secret["type"], "Opaque");
        assert!(secret.get("stringData").is_none());
    }
}
