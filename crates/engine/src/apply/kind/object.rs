//! The steps of an add-on's objects: server-side apply (field manager
//! `talosprov`) of the object the plan showed, recorded in the inventory once
//! the API server accepted it, then, for a workload or a CRD, a wait for its
//! rollout (`kubectl rollout status`'s rules; a CRD until `Established`);
//! and the prune of an object no add-on renders any more. Every wait has the
//! named deadline [`crate::apply::Waits::rollout`].

use std::time::Duration;

use anyhow::Context as _;

use talosprov_kube::client::KubeClient;
use talosprov_kube::objects::{ApplyError, Kind, Rollout, rollout};
use talosprov_plan::change::ObjectOp;
use talosprov_plan::kind::object::only_forgotten;
use talosprov_plan::planned::PlannedObject;
use talosprov_statefile::address::ObjectAddress;
use talosprov_statefile::format::KubeObject;

use crate::apply::context::Context;
use crate::apply::record::Record;
use crate::apply::reporter::Reporter;

/// Server-side apply the object (create or update), or prune it.
///
/// # Errors
/// The Kubernetes API's refusal, or the rollout wait's end.
pub(in crate::apply) async fn run(
    ctx: &Context,
    object: &ObjectAddress,
    op: &ObjectOp,
    r: &Reporter,
) -> anyhow::Result<()> {
    match op {
        ObjectOp::Create(planned) | ObjectOp::Update(planned) => {
            apply(ctx, object, planned, r).await
        }
        ObjectOp::Delete(planned) => prune(ctx, object, planned, r).await,
    }
}

/// The Kubernetes client, made once from the kubeconfig of the state or of
/// this run.
async fn client(ctx: &Context) -> anyhow::Result<&KubeClient> {
    ctx.kube
        .get_or_try_init(|| async {
            let text = ctx
                .kubeconfig
                .lock()
                .expect("kubeconfig poisoned")
                .clone()
                .context("no kubeconfig yet: the add-ons are applied after the bootstrap")?;
            KubeClient::from_kubeconfig(text.expose())
                .await
                .map_err(anyhow::Error::new)
        })
        .await
}

/// What a step names an object by in its messages: `DaemonSet
/// kube-system/cilium`.
fn named(o: &ObjectAddress) -> String {
    match &o.namespace {
        Some(ns) => format!("{} {ns}/{}", o.bare_kind(), o.name),
        None => format!("{} {}", o.bare_kind(), o.name),
    }
}

/// A wait bounded by the rollout deadline, named for its error.
struct Deadline {
    what: String,
    end: tokio::time::Instant,
    limit: Duration,
    backoff: talosprov_retry::Backoff,
    attempt: u32,
}

impl Deadline {
    fn new(ctx: &Context, what: String) -> Deadline {
        Deadline {
            what,
            end: tokio::time::Instant::now() + ctx.waits.rollout,
            limit: ctx.waits.rollout,
            backoff: ctx.waits.backoff,
            attempt: 0,
        }
    }

    /// Pause before the next attempt (the step's slot given back), never
    /// past the deadline; once it has passed, fail with `last`.
    async fn retry(&mut self, r: &Reporter, last: anyhow::Error) -> anyhow::Result<()> {
        let now = tokio::time::Instant::now();
        if now >= self.end {
            anyhow::bail!(
                "{}: not done within the rollout deadline of {} (last: {last:#}); \
                 TALOSPROV_ROLLOUT_WAIT sets the deadline",
                self.what,
                talosprov_retry::seconds(self.limit)
            );
        }
        let pause = self.backoff.delay(self.attempt);
        r.waiting(tokio::time::sleep(pause.min(self.end - now)))
            .await;
        self.attempt = self.attempt.saturating_add(1);
        Ok(())
    }
}

/// The served kind of the object, waiting for it (a CRD applied just before
/// may take a moment to be served).
async fn kind(
    ctx: &Context,
    r: &Reporter,
    o: &ObjectAddress,
    api_version: &str,
) -> anyhow::Result<Kind> {
    let kube = client(ctx).await?;
    let mut wait = Deadline::new(
        ctx,
        format!("{api_version} {} served by the API server", o.bare_kind()),
    );
    loop {
        match kube.kind(api_version, o.bare_kind()).await {
            Ok(Some(k)) => return Ok(k),
            Ok(None) => {
                wait.retry(r, anyhow::anyhow!("the kind is not served"))
                    .await?
            }
            Err(e) => wait.retry(r, e.into()).await?,
        }
    }
}

/// Apply the planned object and wait for its rollout.
///
/// # Errors
/// A rendering other than the plan's, a conflict or refusal from the API
/// server, or a deadline passed.
async fn apply(
    ctx: &Context,
    o: &ObjectAddress,
    want: &PlannedObject,
    r: &Reporter,
) -> anyhow::Result<()> {
    let desired = ctx
        .desired
        .objects
        .get(o)
        .with_context(|| format!("addon/{}: no add-on renders it now", o.key()))?;
    if desired.digest != want.digest {
        anyhow::bail!(
            "addon/{}: the object rendered now (sha256 {}) is not the one the plan shows (sha256 \
             {}); run `talosprov plan` again",
            o.key(),
            desired.digest,
            want.digest
        );
    }
    let kube = client(ctx).await?;
    r.progress(format!("server-side apply of {}", named(o)));
    let kind = kind(ctx, r, o, &want.api_version).await?;
    let ns = o.namespace.as_deref();
    let mut wait = Deadline::new(ctx, format!("server-side apply of {}", named(o)));
    let applied = loop {
        match kube
            .apply(&kind, ns, &o.name, &desired.body, want.force, false)
            .await
        {
            Ok(v) => break v,
            Err(ApplyError::Conflict(m)) => anyhow::bail!(
                "{} has fields another field manager owns with other values: {m}",
                named(o)
            ),
            Err(ApplyError::Refused(m)) => {
                anyhow::bail!("the API server refuses {}: {m}", named(o))
            }
            Err(ApplyError::Unreachable(e)) => wait.retry(r, e.into()).await?,
        }
    };
    r.record(Record::Object {
        key: o.key(),
        object: KubeObject {
            api_version: want.api_version.clone(),
            digest: want.digest.clone(),
        },
    });
    if rollout(o.bare_kind(), &applied) == Rollout::Done {
        return Ok(());
    }
    let mut said = String::new();
    let mut wait = Deadline::new(ctx, format!("rollout of {}", named(o)));
    loop {
        let last = match kube.get(&kind, ns, &o.name).await {
            Ok(None) => anyhow::bail!("{} was deleted during its rollout", named(o)),
            Ok(Some(now)) => match rollout(o.bare_kind(), &now) {
                Rollout::Done => return Ok(()),
                Rollout::Waiting(m) => {
                    if m != said {
                        r.progress(format!("rollout of {}: {m}", named(o)));
                        said = m.clone();
                    }
                    anyhow::anyhow!("{m}")
                }
            },
            Err(e) => e.into(),
        };
        wait.retry(r, last).await?;
    }
}

/// Delete (prune) a recorded object no add-on renders, and forget it; a
/// namespace every cluster has is only forgotten.
///
/// # Errors
/// The API server refuses the delete, or does not answer in time.
async fn prune(
    ctx: &Context,
    o: &ObjectAddress,
    want: &PlannedObject,
    r: &Reporter,
) -> anyhow::Result<()> {
    if !only_forgotten(o) {
        let kube = client(ctx).await?;
        r.progress(format!("deleting {}", named(o)));
        let mut wait = Deadline::new(ctx, format!("delete of {}", named(o)));
        let served = loop {
            match kube.kind(&want.api_version, o.bare_kind()).await {
                Ok(k) => break k,
                Err(e) => wait.retry(r, e.into()).await?,
            }
        };
        if let Some(kind) = served {
            let ns = o.namespace.as_deref();
            while let Err(e) = kube.delete(&kind, ns, &o.name).await {
                wait.retry(r, e.into()).await?;
            }
        }
    }
    r.record(Record::ObjectGone(o.key()));
    Ok(())
}
