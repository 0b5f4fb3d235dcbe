//! Refresh of the add-ons' objects through the Kubernetes API: for each
//! object an add-on renders, whether its kind is served, the live object,
//! and a server-side apply dry run of the rendered one (what the plan's
//! field diffs compare, as `kubectl diff --server-side` does); for each
//! object of the inventory no add-on renders any more, whether it is still
//! there. Requests run a few at a time.

use std::collections::BTreeMap;

use futures::StreamExt as _;
use tokio::sync::Mutex;

use talosprov_addon::object::DesiredObject;
use talosprov_kube::client::{KubeClient, KubeError};
use talosprov_kube::objects::{ApplyError, Kind};
use talosprov_plan::observed::{Observation, ObservedObjects};
use talosprov_statefile::address::ObjectAddress;
use talosprov_statefile::format::KubeObject;

/// Requests in flight at once.
const AT_ONCE: usize = 8;

/// Kinds already discovered, by `apiVersion` and kind.
type Kinds = Mutex<BTreeMap<(String, String), Option<Kind>>>;

/// Observe `desired` (dry-run applied with `force` for objects of the
/// inventory `recorded`, as apply will) and the recorded objects no longer
/// desired.
///
/// # Errors
/// [`KubeError`] when the API does not answer or fails (not for an object's
/// conflict or refusal, which are observations).
pub async fn observe_objects(
    client: &KubeClient,
    desired: &BTreeMap<ObjectAddress, DesiredObject>,
    recorded: &BTreeMap<String, KubeObject>,
) -> Result<ObservedObjects, KubeError> {
    let kinds: Kinds = Mutex::new(BTreeMap::new());
    let mut jobs: Vec<(ObjectAddress, String, Option<&DesiredObject>)> = desired
        .iter()
        .map(|(a, d)| (a.clone(), d.api_version.clone(), Some(d)))
        .collect();
    for (key, rec) in recorded {
        if let Some(a) = ObjectAddress::from_key(key)
            && !desired.contains_key(&a)
        {
            jobs.push((a, rec.api_version.clone(), None));
        }
    }
    let kinds = &kinds;
    let results: Vec<Result<(String, Observation), KubeError>> = futures::stream::iter(jobs)
        .map(|(address, api_version, want)| async move {
            let force = recorded.contains_key(&address.key());
            let seen = observe_one(client, kinds, &address, &api_version, want, force).await?;
            Ok((address.key(), seen))
        })
        .buffer_unordered(AT_ONCE)
        .collect()
        .await;
    let mut out = ObservedObjects::default();
    for r in results {
        let (key, seen) = r?;
        out.objects.insert(key, seen);
    }
    Ok(out)
}

/// The kind of `api_version`/`kind`, discovered once per refresh.
pub(crate) async fn kind_of(
    client: &KubeClient,
    kinds: &Kinds,
    api_version: &str,
    kind: &str,
) -> Result<Option<Kind>, KubeError> {
    let key = (api_version.to_owned(), kind.to_owned());
    if let Some(k) = kinds.lock().await.get(&key) {
        return Ok(k.clone());
    }
    let found = client.kind(api_version, kind).await?;
    kinds.lock().await.insert(key, found.clone());
    Ok(found)
}

async fn observe_one(
    client: &KubeClient,
    kinds: &Kinds,
    address: &ObjectAddress,
    api_version: &str,
    want: Option<&DesiredObject>,
    force: bool,
) -> Result<Observation, KubeError> {
    let Some(kind) = kind_of(client, kinds, api_version, address.bare_kind()).await? else {
        return Ok(Observation::UnknownKind);
    };
    let ns = address.namespace.as_deref();
    let Some(live) = client.get(&kind, ns, &address.name).await? else {
        return Ok(Observation::Absent);
    };
    let Some(want) = want else {
        return Ok(Observation::Present {
            applied: live.clone(),
            live,
        });
    };
    match client
        .apply(&kind, ns, &address.name, &want.body, force, true)
        .await
    {
        Ok(applied) => Ok(Observation::Present { live, applied }),
        Err(ApplyError::Conflict(m)) => Ok(Observation::Conflict(m)),
        Err(ApplyError::Refused(m)) => Ok(Observation::Refused(m)),
        Err(ApplyError::Unreachable(e)) => Err(e),
    }
}
