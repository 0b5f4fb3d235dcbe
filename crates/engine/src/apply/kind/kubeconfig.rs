//! The kubeconfig step (`kubeconfig`): the admin kubeconfig fetched from a
//! control plane through the Talos API (`Kubeconfig`), or, when none gives
//! one, signed offline by the cluster CA.

use std::net::IpAddr;

use talosprov_base::role::Role;
use talosprov_base::sensitive::Sensitive;

use crate::apply::context::{Context, credentials};
use crate::apply::record::Record;
use crate::apply::reporter::Reporter;
use crate::apply::talos_steps::secure_mode;

/// Fetch the admin kubeconfig and record it.
///
/// # Errors
/// The talosconfig's credentials cannot be read.
pub(in crate::apply) async fn run(ctx: &Context, r: &Reporter) -> anyhow::Result<()> {
    let controlplanes: Vec<(&String, IpAddr)> = ctx
        .desired
        .configs
        .iter()
        .filter(|(_, c)| c.role == Role::Controlplane)
        .map(|(h, c)| (h, c.ip))
        .collect();
    let w = &ctx.waits;
    credentials(ctx)?;
    let mut last = None;
    for (host, ip) in controlplanes {
        r.progress(format!("fetching the kubeconfig from {host}"));
        let fetched = async {
            let client = secure_mode(ctx, host, ip, w.kubeconfig, false, r).await?;
            Ok::<_, anyhow::Error>(client.kubeconfig().await?)
        }
        .await;
        match fetched {
            Ok(k) => {
                let text = Sensitive::new(String::from_utf8_lossy(k.expose()).into_owned());
                *ctx.kubeconfig.lock().expect("kubeconfig poisoned") = Some(text.clone());
                r.record(Record::Kubeconfig(text));
                return Ok(());
            }
            Err(e) => last = Some(e),
        }
    }
    r.warn(format!(
        "the Talos API gave no kubeconfig ({}); using one signed offline by the cluster CA",
        last.map_or_else(|| "no control plane".to_owned(), |e| format!("{e:#}"))
    ));
    *ctx.kubeconfig.lock().expect("kubeconfig poisoned") = Some(ctx.offline_kubeconfig.clone());
    r.record(Record::Kubeconfig(ctx.offline_kubeconfig.clone()));
    Ok(())
}
