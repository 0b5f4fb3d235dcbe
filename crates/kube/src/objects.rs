//! Any Kubernetes object by `apiVersion` and `kind`: discovery finds its
//! resource (plural, scope) as `kubectl` does (`/api/v1` or
//! `/apis/<group>/<version>`, the APIResourceList), then get, server-side
//! apply (`PATCH` with `application/apply-patch+yaml`, field manager
//! [`crate::FIELD_MANAGER`], optionally `force` and `dryRun=All`) and delete.
//! [`rollout`] judges a workload's status as `kubectl rollout status` does.

use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::{ApiResource, Scope};
use serde_json::Value;

use crate::client::{FIELD_MANAGER, KubeClient, KubeError};

/// A kind the API server serves: its resource and scope.
#[derive(Debug, Clone)]
pub struct Kind {
    resource: ApiResource,
    namespaced: bool,
}

impl Kind {
    /// Whether objects of the kind live in a namespace.
    pub fn namespaced(&self) -> bool {
        self.namespaced
    }

    /// The resource's plural name, such as `daemonsets`.
    pub fn plural(&self) -> &str {
        &self.resource.plural
    }
}

/// Why a server-side apply did not happen.
#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// HTTP 409: another field manager owns fields with other values (the
    /// server's message names them).
    #[error("{0}")]
    Conflict(String),
    /// Another 4xx: the object is invalid, or its namespace does not exist.
    #[error("{0}")]
    Refused(String),
    /// The API did not answer, or failed (5xx): worth a retry.
    #[error(transparent)]
    Unreachable(#[from] KubeError),
}

/// Where a workload's rollout is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rollout {
    /// Every replica runs the current spec (or the kind has no rollout).
    Done,
    /// Still rolling out: what is missing, in `kubectl rollout status`'s words.
    Waiting(String),
}

impl KubeClient {
    /// The kind `kind` of `api_version` (`v1`, `apps/v1`) as the API server
    /// serves it; `None` when it does not (yet: a CRD may add it).
    ///
    /// # Errors
    /// [`KubeError::Api`] when discovery fails otherwise.
    pub async fn kind(&self, api_version: &str, kind: &str) -> Result<Option<Kind>, KubeError> {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let gvk = GroupVersionKind::gvk(group, version, kind);
        match kube::discovery::pinned_kind(&self.client, &gvk).await {
            Ok((resource, caps)) => Ok(Some(Kind {
                resource,
                namespaced: caps.scope == Scope::Namespaced,
            })),
            Err(kube::Error::Discovery(_)) => Ok(None),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
            Err(e) => Err(KubeError::Api(e.to_string())),
        }
    }

    fn api(&self, kind: &Kind, namespace: Option<&str>) -> Api<DynamicObject> {
        match (kind.namespaced, namespace) {
            (true, Some(ns)) => Api::namespaced_with(self.client.clone(), ns, &kind.resource),
            (true, None) => Api::default_namespaced_with(self.client.clone(), &kind.resource),
            (false, _) => Api::all_with(self.client.clone(), &kind.resource),
        }
    }

    /// The object as JSON; `None` when there is none (HTTP 404).
    ///
    /// # Errors
    /// [`KubeError::Api`] for any other failure.
    pub async fn get(
        &self,
        kind: &Kind,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<Value>, KubeError> {
        match self.api(kind, namespace).get_opt(name).await {
            Ok(o) => o.map(|o| to_json(&o)).transpose(),
            Err(e) => Err(KubeError::Api(e.to_string())),
        }
    }

    /// Server-side apply `body` (the whole object) with field manager
    /// [`FIELD_MANAGER`]: the object as the API server left it (with
    /// `dry_run`, as it would, storing nothing). `force` takes fields other
    /// managers own.
    ///
    /// # Errors
    /// [`ApplyError`], telling a conflict and a refusal from a failure to
    /// reach the API.
    pub async fn apply(
        &self,
        kind: &Kind,
        namespace: Option<&str>,
        name: &str,
        body: &Value,
        force: bool,
        dry_run: bool,
    ) -> Result<Value, ApplyError> {
        let mut params = PatchParams::apply(FIELD_MANAGER);
        params.force = force;
        params.dry_run = dry_run;
        match self
            .api(kind, namespace)
            .patch(name, &params, &Patch::Apply(body))
            .await
        {
            Ok(o) => Ok(to_json(&o)?),
            Err(kube::Error::Api(s)) if s.code == 409 => Err(ApplyError::Conflict(s.message)),
            Err(kube::Error::Api(s)) if (400..500).contains(&s.code) => {
                Err(ApplyError::Refused(s.message))
            }
            Err(e) => Err(ApplyError::Unreachable(KubeError::Api(e.to_string()))),
        }
    }

    /// Delete the object (foreground: its dependents first); `false` when
    /// there was none.
    ///
    /// # Errors
    /// [`KubeError::Api`] for any other failure.
    pub async fn delete(
        &self,
        kind: &Kind,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<bool, KubeError> {
        match self
            .api(kind, namespace)
            .delete(name, &DeleteParams::foreground())
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
            Err(e) => Err(KubeError::Api(e.to_string())),
        }
    }
}

fn to_json(o: &DynamicObject) -> Result<Value, KubeError> {
    serde_json::to_value(o).map_err(|e| KubeError::Api(format!("an object is not JSON: {e}")))
}

/// Where the rollout of `object` (of `kind`, as the API server returned it)
/// is, by the rules of `kubectl rollout status`: the status describes the
/// current generation (`observedGeneration`), and every replica is updated and
/// available (Deployment), scheduled, updated and available (DaemonSet), or
/// ready and on the update revision (StatefulSet). A CRD is done once
/// `Established`. Other kinds have no rollout.
pub fn rollout(kind: &str, object: &Value) -> Rollout {
    let status = &object["status"];
    let int = |v: &Value| v.as_i64().unwrap_or(0);
    let generation = int(&object["metadata"]["generation"]);
    let observed = int(&status["observedGeneration"]);
    let waiting = |m: String| Rollout::Waiting(m);
    if matches!(kind, "Deployment" | "DaemonSet" | "StatefulSet") && observed < generation {
        return waiting("waiting for the rollout to be observed".to_owned());
    }
    match kind {
        "Deployment" => {
            let want = object["spec"]["replicas"].as_i64().unwrap_or(1);
            let updated = int(&status["updatedReplicas"]);
            let available = int(&status["availableReplicas"]);
            let total = int(&status["replicas"]);
            if updated < want {
                waiting(format!(
                    "{updated} of {want} updated replicas are available"
                ))
            } else if total > updated {
                waiting(format!(
                    "{} old replicas are pending termination",
                    total - updated
                ))
            } else if available < updated {
                waiting(format!(
                    "{available} of {updated} updated replicas are available"
                ))
            } else {
                Rollout::Done
            }
        }
        "DaemonSet" => {
            let want = int(&status["desiredNumberScheduled"]);
            let updated = int(&status["updatedNumberScheduled"]);
            let available = int(&status["numberAvailable"]);
            if updated < want {
                waiting(format!(
                    "{updated} out of {want} new pods have been updated"
                ))
            } else if available < want {
                waiting(format!("{available} of {want} updated pods are available"))
            } else {
                Rollout::Done
            }
        }
        "StatefulSet" => {
            let want = object["spec"]["replicas"].as_i64().unwrap_or(1);
            let ready = int(&status["readyReplicas"]);
            if ready < want {
                waiting(format!("{ready} of {want} pods are ready"))
            } else if status["updateRevision"] != status["currentRevision"] {
                waiting("the pods are not all on the update revision".to_owned())
            } else {
                Rollout::Done
            }
        }
        "CustomResourceDefinition" => {
            let established = status["conditions"].as_array().is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Established" && c["status"] == "True")
            });
            if established {
                Rollout::Done
            } else {
                waiting("the CRD is not Established".to_owned())
            }
        }
        _ => Rollout::Done,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rollouts_follow_kubectl_rollout_status() {
        let ds = |observed: i64, ready: i64| {
            json!({"metadata": {"generation": 2}, "status": {"observedGeneration": observed,
                "desiredNumberScheduled": 3, "updatedNumberScheduled": ready,
                "numberAvailable": ready}})
        };
        assert!(matches!(
            rollout("DaemonSet", &ds(1, 3)),
            Rollout::Waiting(_)
        ));
        assert_eq!(
            rollout("DaemonSet", &ds(2, 1)),
            Rollout::Waiting("1 out of 3 new pods have been updated".into())
        );
        assert_eq!(rollout("DaemonSet", &ds(2, 3)), Rollout::Done);
        let deploy = json!({"metadata": {"generation": 1}, "spec": {"replicas": 2},
            "status": {"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2,
                       "availableReplicas": 1}});
        assert!(matches!(
            rollout("Deployment", &deploy),
            Rollout::Waiting(_)
        ));
        let sts = json!({"metadata": {"generation": 1}, "status": {"observedGeneration": 1,
            "readyReplicas": 1, "currentRevision": "a", "updateRevision": "a"}});
        assert_eq!(rollout("StatefulSet", &sts), Rollout::Done);
        let crd = json!({"status": {"conditions": [{"type": "Established", "status": "True"}]}});
        assert_eq!(rollout("CustomResourceDefinition", &crd), Rollout::Done);
        assert!(matches!(
            rollout("CustomResourceDefinition", &json!({})),
            Rollout::Waiting(_)
        ));
        assert_eq!(rollout("ConfigMap", &json!({})), Rollout::Done);
    }
}
