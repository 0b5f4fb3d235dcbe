//! The talosconfig step (`talosconfig`): the state's talosconfig issued again, with a new
//! admin client certificate from the OS CA in the secrets (365 days), before the one it
//! holds expires. Nothing is sent anywhere: Talos trusts any certificate its OS CA signed.

use anyhow::Context as _;

use crate::apply::context::Context;
use crate::apply::record::Record;
use crate::apply::reporter::Reporter;

/// Record the talosconfig issued for this run.
///
/// # Errors
/// When the run has no secrets bundle to issue it from.
pub(in crate::apply) async fn run(ctx: &Context, r: &Reporter) -> anyhow::Result<()> {
    let fresh = ctx.fresh_talosconfig.clone().context(
        "the state has no secrets bundle, so no talosconfig can be issued: import the \
         cluster's with `talosprov secrets import`",
    )?;
    r.progress("issuing the talosconfig's admin client certificate from the OS CA".to_owned());
    r.record(Record::Talosconfig(fresh));
    Ok(())
}
