//! The HA rule step (`ha_rule/<entry>`): a `proxmox.spread` group's negative
//! resource-affinity rule (PVE 9) written with the VMs the plan showed, after
//! their HA resources exist, or on PVE 8 one HA group per VM that prefers its
//! host, named on its resource; or either deleted. A rule or group at the ID
//! that talosprov neither recorded nor was creating is refused, never
//! changed.

use std::collections::BTreeMap;

use anyhow::Context as _;

use talosprov_plan::change::HaRuleOp;
use talosprov_plan::model::Conflict;
use talosprov_proxmox::ha;
use talosprov_statefile::address::Address;
use talosprov_statefile::format;
use talosprov_statefile::intent::CreateIntent;

use crate::apply::context::Context;
use crate::apply::record::Record;
use crate::apply::reporter::Reporter;

/// Create, update or delete the rule of spread entry `entry`.
///
/// # Errors
/// The Proxmox error, naming the rule; a rule talosprov does not own.
pub(in crate::apply) async fn run(
    ctx: &Context,
    entry: &str,
    op: &HaRuleOp,
    r: &Reporter,
) -> anyhow::Result<()> {
    match op {
        HaRuleOp::Create(want) | HaRuleOp::Update(want) => r
            .proxmox(write(ctx, entry, want, r))
            .await
            .with_context(|| format!("cannot write HA rule {}", want.rule)),
        HaRuleOp::Delete => r.proxmox(delete(ctx, entry, r)).await,
    }
}

async fn delete(ctx: &Context, entry: &str, r: &Reporter) -> anyhow::Result<()> {
    let address = Address::HaRule(entry.to_owned());
    let id = ctx
        .owned
        .ha_rules
        .get(entry)
        .cloned()
        .or_else(|| ctx.owned.intent(&address).map(|i| i.id.clone()));
    if let Some(id) = id {
        r.progress(format!("deleting HA rule {id}"));
        let client = &ctx.proxmox;
        if ha::list_rules(client).await?.is_some() {
            ha::delete_rule(client, &id).await
        } else {
            ha::delete_groups(client, &id).await
        }
        .with_context(|| format!("cannot delete HA rule {id}"))?;
    }
    r.record(Record::HaRuleGone(entry.to_owned()));
    Ok(())
}

/// Refuse a rule at the ID that talosprov does not own, or save the create
/// intent before the first write of one it does not have yet.
async fn claim(
    ctx: &Context,
    entry: &str,
    want: &format::HaRule,
    found: Option<String>,
    r: &Reporter,
) -> anyhow::Result<()> {
    let address = &Address::HaRule(entry.to_owned());
    let owned = ctx.owned.ha_rules.get(entry) == Some(&want.rule)
        || ctx.owned.intent(address).is_some_and(|i| i.id == want.rule);
    match found {
        Some(text) if !owned => Err(anyhow::anyhow!(
            "{}",
            Conflict::at(address, &want.rule, text).reason()
        )),
        Some(_) => {
            r.progress(format!("updating HA rule {}", want.rule));
            Ok(())
        }
        None => {
            r.record_saved(Record::Intent {
                address: address.clone(),
                intent: CreateIntent::named(&want.rule),
            })
            .await?;
            r.progress(format!("creating HA rule {}", want.rule));
            Ok(())
        }
    }
}

async fn write(
    ctx: &Context,
    entry: &str,
    want: &format::HaRule,
    r: &Reporter,
) -> anyhow::Result<()> {
    if !want.groups.is_empty() {
        return write_groups(ctx, entry, want, r).await;
    }
    let client = &ctx.proxmox;
    let spec = ha::SpreadRule {
        id: want.rule.clone(),
        vmids: want.vmids.clone(),
        comment: want.comment.clone(),
    };
    let rules = ha::list_rules(client)
        .await?
        .context("this Proxmox VE has no HA rules (/cluster/ha/rules): PVE 9 is needed")?;
    let found = rules
        .get(&want.rule)
        .map(|f| format!("HA rule {} ({})", f.id, f.resources()));
    claim(ctx, entry, want, found, r).await?;
    ha::ensure_rule(client, &spec).await?;
    let confirmed = ha::list_rules(client)
        .await?
        .and_then(|mut l| l.remove(&want.rule))
        .with_context(|| format!("HA rule {} is not in Proxmox after its write", want.rule))?;
    r.record(Record::HaRule {
        entry: entry.to_owned(),
        rule: format::HaRule {
            rule: confirmed.id,
            vmids: confirmed.vmids,
            comment: confirmed.comment,
            groups: BTreeMap::new(),
        },
    });
    Ok(())
}

/// PVE 8: the rule's groups, one per VM, each named on its VM's resource.
async fn write_groups(
    ctx: &Context,
    entry: &str,
    want: &format::HaRule,
    r: &Reporter,
) -> anyhow::Result<()> {
    let client = &ctx.proxmox;
    let found = ha::list_grouped(client)
        .await?
        .remove(&want.rule)
        .map(|g| format!("HA groups {}-<vmid> ({} groups)", g.id, g.groups.len()));
    claim(ctx, entry, want, found, r).await?;
    let groups: BTreeMap<u32, ha::PreferGroup> = want
        .groups
        .iter()
        .map(|(vmid, nodes)| {
            let g = ha::PreferGroup {
                id: ha::group_id(&want.rule, *vmid),
                nodes: nodes.clone(),
                comment: want.comment.clone(),
            };
            (*vmid, g)
        })
        .collect();
    ha::ensure_groups(client, &want.rule, &groups).await?;
    let confirmed = ha::list_grouped(client)
        .await?
        .remove(&want.rule)
        .with_context(|| {
            format!(
                "HA groups of {} are not in Proxmox after their write",
                want.rule
            )
        })?;
    r.record(Record::HaRule {
        entry: entry.to_owned(),
        rule: format::HaRule {
            rule: confirmed.id,
            vmids: confirmed.vmids,
            comment: confirmed.comment,
            groups: confirmed.groups,
        },
    });
    Ok(())
}
