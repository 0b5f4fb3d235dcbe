//! The bootstrap step (`bootstrap`): once the first control plane is in
//! secure mode and its etcd ready to start, Talos `Bootstrap` on it; for
//! `etcd restore`, the snapshot uploaded first (`EtcdRecover`) and `Bootstrap`
//! with `recover_etcd`.

use anyhow::Context as _;

use talosprov_statefile::format;
use talosprov_talos as talos;

use crate::apply::context::Context;
use crate::apply::record::Record;
use crate::apply::reporter::Reporter;
use crate::apply::talos_steps::secure_mode;

/// Bootstrap etcd on the topology's first control plane.
///
/// # Errors
/// No control plane, no address for it, or the Talos error once the
/// bootstrap wait ends.
pub(in crate::apply) async fn run(ctx: &Context, r: &Reporter) -> anyhow::Result<()> {
    let host = ctx
        .desired
        .bootstrap_node
        .as_deref()
        .context("the topology has no control plane to bootstrap")?;
    let ip = *ctx
        .ips
        .get(host)
        .with_context(|| format!("no address for {host}"))?;
    let w = &ctx.waits;
    r.progress(format!("waiting for {host} in secure mode"));
    let client = secure_mode(ctx, host, ip, w.secure, false, r).await?;
    r.progress(format!("waiting for etcd on {host}"));
    let on_cause = |cause: &str| r.progress(format!("waiting for etcd on {host}: {cause}"));
    r.waiting(talos::wait::wait_etcd_ready_explained(
        &client,
        w.bootstrap,
        w.backoff,
        &on_cause,
    ))
    .await?;
    match &ctx.recovery {
        Some(recovery) => {
            r.progress(format!(
                "uploading the etcd snapshot {} to {host}",
                recovery.name.archive()
            ));
            let sent = r.waiting(recovery.upload(&client)).await?;
            r.progress(format!(
                "bootstrapping etcd on {host} from the snapshot ({sent} bytes, revision {})",
                recovery.manifest.revision
            ));
            client
                .bootstrap_recover(recovery.skip_hash_check)
                .await
                .with_context(|| {
                    let hint = if recovery.skip_hash_check {
                        ""
                    } else {
                        " (a database copied from a data directory has no hash: \
                         --skip-hash-check)"
                    };
                    format!("etcd could not be recovered on {host}{hint}")
                })?;
        }
        None => {
            r.progress(format!("bootstrapping etcd on {host}"));
            let on_cause =
                |cause: &str| r.progress(format!("bootstrapping etcd on {host}: {cause}"));
            talos::wait::bootstrap_when_ready_explained(&client, w.bootstrap, w.backoff, &on_cause)
                .await?;
        }
    }
    r.record(Record::Bootstrap(format::Bootstrap {
        done: true,
        node: host.to_owned(),
        at: ctx.started_at.clone(),
    }));
    Ok(())
}
