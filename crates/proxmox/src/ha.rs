//! Proxmox HA (pve-ha-manager): a VM's HA resource (`/cluster/ha/resources`,
//! `API2/HA/Resources.pm`) and the resource-affinity rules of PVE 9 that keep
//! VMs on different hosts (`/cluster/ha/rules`, `API2/HA/Rules.pm`, type
//! `resource-affinity`, `affinity=negative`). Rules replaced PVE 8's HA groups;
//! on PVE 8 the rules path does not exist, and a spread group is kept apart
//! with one HA group per VM that prefers its own host (`/cluster/ha/groups`,
//! `API2/HA/Groups.pm`), named on the VM's HA resource (`group`).

use crate::client::Client;
use crate::error::ProxmoxError;
use crate::lenient;
use crate::request::{Operation, Request};
use serde_json::Value;
use std::collections::BTreeMap;
use talosprov_base::vm::HaResource;

/// The HA resource ID's vmid: `vm:123` (or a bare `123`, as PVE takes it) is
/// 123; a container (`ct:`) or anything else is `None`.
pub fn vmid_of_sid(sid: &str) -> Option<u32> {
    sid.strip_prefix("vm:").unwrap_or(sid).parse().ok()
}

/// One entry of `GET /cluster/ha/resources` as a [`HaResource`], with
/// pve-ha-manager's defaults for what the entry leaves out (`started`, 1, 1)
/// and `enabled`, PVE's old word for `started`, read as `started`.
fn resource_of(entry: &Value) -> HaResource {
    let count = |key: &str| {
        entry
            .get(key)
            .and_then(lenient::u64_of)
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(1)
    };
    let state = entry
        .get("state")
        .and_then(lenient::string_of)
        .unwrap_or_else(|| "started".to_owned());
    HaResource {
        state: if state == "enabled" {
            "started".to_owned()
        } else {
            state
        },
        max_restart: count("max_restart"),
        max_relocate: count("max_relocate"),
    }
}

/// `GET /cluster/ha/resources?type=vm` request.
pub fn list_resources_request() -> Request {
    Request::get(
        &["cluster", "ha", "resources"],
        Operation::new("list the HA resources"),
    )
    .query("type", "vm")
}

/// `list` as an array, else a decode error naming `what` (`HA rules`...).
fn entries_of<'v>(
    req: &Request,
    list: &'v Value,
    what: &str,
) -> Result<&'v Vec<Value>, ProxmoxError> {
    list.as_array().ok_or_else(|| ProxmoxError::Decode {
        op: req.op.clone(),
        detail: format!("the {what} are not a list"),
    })
}

/// Every VM's HA resource, by vmid (`Sys.Audit` on `/`).
///
/// # Errors
/// Request errors, and an answer that is not a list.
pub async fn list_resources(client: &Client) -> Result<BTreeMap<u32, HaResource>, ProxmoxError> {
    resources_by_vmid(client, |e| Some(resource_of(e))).await
}

/// Each VM resource's `pick` of its entry, by vmid; other resources (CTs)
/// and entries `pick` refuses are left out.
async fn resources_by_vmid<T>(
    client: &Client,
    pick: impl Fn(&Value) -> Option<T>,
) -> Result<BTreeMap<u32, T>, ProxmoxError> {
    let req = list_resources_request();
    let list = client.send(&req).await?;
    let entries = entries_of(&req, &list, "HA resources")?;
    Ok(entries
        .iter()
        .filter_map(|e| {
            let sid = e.get("sid").and_then(lenient::string_of)?;
            Some((vmid_of_sid(&sid)?, pick(e)?))
        })
        .collect())
}

/// The create (`POST`) or update (`PUT`) request of `vmid`'s HA resource.
pub fn resource_request(vmid: u32, want: &HaResource, create: bool) -> Request {
    let sid = HaResource::sid(vmid);
    let r = if create {
        Request::post(
            &["cluster", "ha", "resources"],
            Operation::new("make the VM an HA resource").vmid(vmid),
        )
        .form("sid", &sid)
    } else {
        Request::put(
            &["cluster", "ha", "resources", &sid],
            Operation::new("update the VM's HA resource").vmid(vmid),
        )
    };
    r.form("state", &want.state)
        .form("max_restart", want.max_restart)
        .form("max_relocate", want.max_relocate)
}

/// `DELETE /cluster/ha/resources/vm:<vmid>` request.
pub fn remove_request(vmid: u32) -> Request {
    Request::delete(
        &["cluster", "ha", "resources", &HaResource::sid(vmid)],
        Operation::new("remove the VM's HA resource").vmid(vmid),
    )
}

/// Bring `vmid`'s HA resource to `want` (`None`: not HA managed): read it,
/// then create, update or remove it. Returns what it is now.
///
/// # Errors
/// Request errors, e.g. a missing `Sys.Console` on `/` (403).
pub async fn set_resource(
    client: &Client,
    vmid: u32,
    want: Option<&HaResource>,
) -> Result<Option<HaResource>, ProxmoxError> {
    let have = list_resources(client).await?.remove(&vmid);
    match (have.as_ref(), want) {
        (None, None) => {}
        (Some(h), Some(w)) if h == w => {}
        (None, Some(w)) => {
            client.send(&resource_request(vmid, w, true)).await?;
        }
        (Some(_), Some(w)) => {
            client.send(&resource_request(vmid, w, false)).await?;
        }
        (Some(_), None) => match client.send(&remove_request(vmid)).await {
            Ok(_) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e),
        },
    }
    Ok(want.cloned())
}

/// A negative resource-affinity rule: its VMs are kept on different hosts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpreadRule {
    /// The rule ID (`pve-configid`), such as `talosprov-lab-controlplane`.
    pub id: String,
    /// The VMs, by vmid, sorted.
    pub vmids: Vec<u32>,
    /// The rule's comment.
    pub comment: Option<String>,
}

impl SpreadRule {
    /// `resources`: `vm:101,vm:102`.
    pub fn resources(&self) -> String {
        self.vmids
            .iter()
            .map(|v| HaResource::sid(*v))
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// A rule as `GET /cluster/ha/rules` lists it, reduced to what a spread rule
/// is: `None` for a rule of another kind (node affinity, positive affinity)
/// or one that names a container.
fn spread_of(entry: &Value) -> Option<SpreadRule> {
    let text = |k: &str| entry.get(k).and_then(lenient::string_of);
    if text("type")? != "resource-affinity" || text("affinity")? != "negative" {
        return None;
    }
    let mut vmids = text("resources")?
        .split(',')
        .map(|s| vmid_of_sid(s.trim()))
        .collect::<Option<Vec<u32>>>()?;
    vmids.sort_unstable();
    Some(SpreadRule {
        id: text("rule")?,
        vmids,
        comment: text("comment").filter(|c| !c.is_empty()),
    })
}

/// `GET /cluster/ha/rules?type=resource-affinity` request.
pub fn list_rules_request() -> Request {
    Request::get(
        &["cluster", "ha", "rules"],
        Operation::new("list the HA rules"),
    )
    .query("type", "resource-affinity")
}

/// The negative resource-affinity rules, by ID (`Sys.Audit` on `/`); `None`
/// on a PVE without HA rules (before 9: the path answers 404 or 501).
///
/// # Errors
/// Request errors, and an answer that is not a list.
pub async fn list_rules(
    client: &Client,
) -> Result<Option<BTreeMap<String, SpreadRule>>, ProxmoxError> {
    let req = list_rules_request();
    let list = match client.send(&req).await {
        Ok(v) => v,
        Err(e) if e.is_not_found() || matches!(e, ProxmoxError::Api { status: 501, .. }) => {
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    let entries = entries_of(&req, &list, "HA rules")?;
    Ok(Some(
        entries
            .iter()
            .filter_map(spread_of)
            .map(|r| (r.id.clone(), r))
            .collect(),
    ))
}

/// `POST /cluster/ha/<list>` with `<key>=<id>` when `create`, else
/// `PUT /cluster/ha/<list>/<id>`: the start of a rule's or a group's write.
fn write_request(list: &str, key: &str, id: &str, create: bool) -> Request {
    if create {
        Request::post(
            &["cluster", "ha", list],
            Operation::new(format!("create HA {key} {id}")),
        )
        .form(key, id)
    } else {
        Request::put(
            &["cluster", "ha", list, id],
            Operation::new(format!("update HA {key} {id}")),
        )
    }
}

/// The create (`POST`) or update (`PUT`) request of a spread rule.
pub fn rule_request(rule: &SpreadRule, create: bool) -> Request {
    let r = write_request("rules", "rule", &rule.id, create)
        .form("type", "resource-affinity")
        .form("affinity", "negative")
        .form("resources", rule.resources());
    match &rule.comment {
        Some(c) => r.form("comment", c),
        None if create => r,
        None => r.form("delete", "comment"),
    }
}

/// Make the rule exist as `rule` says: created, or updated when it differs.
///
/// # Errors
/// Request errors, e.g. a VM that is not an HA resource yet, or a missing
/// `Sys.Console` on `/` (403).
pub async fn ensure_rule(client: &Client, rule: &SpreadRule) -> Result<(), ProxmoxError> {
    let have = list_rules(client)
        .await?
        .and_then(|mut rules| rules.remove(&rule.id));
    match have {
        Some(h) if &h == rule => Ok(()),
        Some(_) => client.send(&rule_request(rule, false)).await.map(drop),
        None => client.send(&rule_request(rule, true)).await.map(drop),
    }
}

/// Delete the rule (`DELETE /cluster/ha/rules/{rule}`); already gone is
/// success.
///
/// # Errors
/// Request errors other than not-found.
pub async fn delete_rule(client: &Client, id: &str) -> Result<(), ProxmoxError> {
    let req = Request::delete(
        &["cluster", "ha", "rules", id],
        Operation::new(format!("delete HA rule {id}")),
    );
    match client.send(&req).await {
        Ok(_) => Ok(()),
        Err(e) if e.is_not_found() || e.message().is_some_and(|m| m.contains("no such")) => Ok(()),
        Err(e) => Err(e),
    }
}

/// A PVE 8 HA group that prefers one VM's host: `nodes` is
/// `<host>:2,<other host>:1,…`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreferGroup {
    /// The group ID, `<rule>-<vmid>`.
    pub id: String,
    /// `nodes`, as PVE stores it.
    pub nodes: String,
    /// The group's comment.
    pub comment: Option<String>,
}

/// The ID of the PVE 8 group of `vmid` in spread rule `rule`.
pub fn group_id(rule: &str, vmid: u32) -> String {
    format!("{rule}-{vmid}")
}

/// `nodes` normalised for comparison: entries sorted, each `node:prio`
/// with PVE's default priority written out as none.
pub fn same_nodes(a: &str, b: &str) -> bool {
    let norm = |s: &str| {
        let mut v: Vec<String> = s
            .split(',')
            .map(str::trim)
            .filter(|e| !e.is_empty())
            .map(str::to_owned)
            .collect();
        v.sort();
        v
    };
    norm(a) == norm(b)
}

/// `GET /cluster/ha/groups` request.
pub fn list_groups_request() -> Request {
    Request::get(
        &["cluster", "ha", "groups"],
        Operation::new("list the HA groups"),
    )
}

/// Every HA group, by ID (`Sys.Audit` on `/`).
///
/// # Errors
/// Request errors (PVE 9 refuses once its groups are migrated to rules),
/// and an answer that is not a list.
pub async fn list_groups(client: &Client) -> Result<BTreeMap<String, PreferGroup>, ProxmoxError> {
    let req = list_groups_request();
    let list = client.send(&req).await?;
    let entries = entries_of(&req, &list, "HA groups")?;
    Ok(entries
        .iter()
        .filter_map(|e| {
            let text = |k: &str| e.get(k).and_then(lenient::string_of);
            let id = text("group")?;
            let g = PreferGroup {
                id: id.clone(),
                nodes: text("nodes").unwrap_or_default(),
                comment: text("comment").filter(|c| !c.is_empty()),
            };
            Some((id, g))
        })
        .collect())
}

/// The HA group each VM's resource names, by vmid (`Sys.Audit` on `/`).
///
/// # Errors
/// Request errors, and an answer that is not a list.
pub async fn resource_groups(client: &Client) -> Result<BTreeMap<u32, String>, ProxmoxError> {
    resources_by_vmid(client, |e| e.get("group").and_then(lenient::string_of)).await
}

/// The create (`POST`) or update (`PUT`) request of a PVE 8 group.
pub fn group_request(group: &PreferGroup, create: bool) -> Request {
    let r = write_request("groups", "group", &group.id, create).form("nodes", &group.nodes);
    match &group.comment {
        Some(c) => r.form("comment", c),
        None => r,
    }
}

/// Set (`Some`) or clear (`None`) the group `vmid`'s HA resource names;
/// a VM that is no HA resource (any more) is left alone when clearing.
///
/// # Errors
/// Request errors.
pub async fn set_resource_group(
    client: &Client,
    vmid: u32,
    group: Option<&str>,
) -> Result<(), ProxmoxError> {
    let req = Request::put(
        &["cluster", "ha", "resources", &HaResource::sid(vmid)],
        Operation::new("set the VM's HA group").vmid(vmid),
    );
    let req = match group {
        Some(g) => req.form("group", g),
        None => req.form("delete", "group"),
    };
    match client.send(&req).await {
        Ok(_) => Ok(()),
        Err(e)
            if group.is_none()
                && (e.is_not_found() || e.message().is_some_and(|m| m.contains("no such"))) =>
        {
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// Make each of `groups` exist as given and name it on its VM's resource
/// (`vmid -> group`); groups of `rule` no longer wanted are let go and
/// deleted.
///
/// # Errors
/// Request errors, e.g. a VM that is not an HA resource.
pub async fn ensure_groups(
    client: &Client,
    rule: &str,
    groups: &BTreeMap<u32, PreferGroup>,
) -> Result<(), ProxmoxError> {
    let have = list_groups(client).await?;
    let named = resource_groups(client).await?;
    for (vmid, g) in groups {
        match have.get(&g.id) {
            Some(h) if same_nodes(&h.nodes, &g.nodes) && h.comment == g.comment => {}
            Some(_) => drop(client.send(&group_request(g, false)).await?),
            None => drop(client.send(&group_request(g, true)).await?),
        }
        if named.get(vmid) != Some(&g.id) {
            set_resource_group(client, *vmid, Some(&g.id)).await?;
        }
    }
    let prefix = format!("{rule}-");
    for id in have.keys().filter(|id| id.starts_with(&prefix)) {
        if !groups.values().any(|g| &g.id == id) {
            delete_group(client, id, &named).await?;
        }
    }
    Ok(())
}

/// A spread rule as PVE 8's groups hold it: the groups `<rule>-<vmid>`,
/// and the VMs whose HA resource names its group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupedRule {
    /// The rule ID the groups' names start with.
    pub id: String,
    /// The VMs whose resource names their group, sorted.
    pub vmids: Vec<u32>,
    /// Each group's `nodes`, by vmid.
    pub groups: BTreeMap<u32, String>,
    /// The first group's comment.
    pub comment: Option<String>,
}

/// talosprov's spread rules on PVE 8, by rule ID: every group named
/// `talosprov-…-<vmid>`, gathered by the name before its vmid.
///
/// # Errors
/// Request errors.
pub async fn list_grouped(client: &Client) -> Result<BTreeMap<String, GroupedRule>, ProxmoxError> {
    let groups = list_groups(client).await?;
    let named = resource_groups(client).await?;
    let mut out: BTreeMap<String, GroupedRule> = BTreeMap::new();
    for (id, g) in &groups {
        let Some((rule, vmid)) = id.rsplit_once('-') else {
            continue;
        };
        let Ok(vmid) = vmid.parse::<u32>() else {
            continue;
        };
        if !rule.starts_with("talosprov-") {
            continue;
        }
        let entry = out.entry(rule.to_owned()).or_insert_with(|| GroupedRule {
            id: rule.to_owned(),
            vmids: Vec::new(),
            groups: BTreeMap::new(),
            comment: g.comment.clone(),
        });
        entry.groups.insert(vmid, g.nodes.clone());
        if named.get(&vmid) == Some(id) {
            entry.vmids.push(vmid);
        }
    }
    for r in out.values_mut() {
        r.vmids.sort_unstable();
    }
    Ok(out)
}

/// Let go of and delete every group of `rule` (`<rule>-<vmid>`).
///
/// # Errors
/// Request errors.
pub async fn delete_groups(client: &Client, rule: &str) -> Result<(), ProxmoxError> {
    let have = list_groups(client).await?;
    let named = resource_groups(client).await?;
    let prefix = format!("{rule}-");
    for id in have.keys().filter(|id| id.starts_with(&prefix)) {
        delete_group(client, id, &named).await?;
    }
    Ok(())
}

/// Clear the group from the resources that name it, then delete it (PVE
/// refuses to delete a group in use).
async fn delete_group(
    client: &Client,
    id: &str,
    named: &BTreeMap<u32, String>,
) -> Result<(), ProxmoxError> {
    for (vmid, _) in named.iter().filter(|(_, g)| g.as_str() == id) {
        set_resource_group(client, *vmid, None).await?;
    }
    let req = Request::delete(
        &["cluster", "ha", "groups", id],
        Operation::new(format!("delete HA group {id}")),
    );
    match client.send(&req).await {
        Ok(_) => Ok(()),
        Err(e) if e.is_not_found() || e.message().is_some_and(|m| m.contains("no such")) => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn resources_read_with_proxmox_defaults() {
        let r = resource_of(&json!({"sid": "vm:101", "state": "enabled"}));
        assert_eq!(r.text(), "state=started,max_restart=1,max_relocate=1");
        let r = resource_of(
            &json!({"sid": "vm:101", "state": "stopped", "max_restart": "3", "max_relocate": 0}),
        );
        assert_eq!(r.text(), "state=stopped,max_restart=3,max_relocate=0");
        assert_eq!(vmid_of_sid("vm:101"), Some(101));
        assert_eq!(vmid_of_sid("102"), Some(102));
        assert_eq!(vmid_of_sid("ct:103"), None);
    }

    #[test]
    fn only_negative_resource_affinity_rules_of_vms_are_spread_rules() {
        let rule = spread_of(&json!({"rule": "r", "type": "resource-affinity",
            "affinity": "negative", "resources": "vm:102,vm:101", "digest": "x"}))
        .expect("a spread rule");
        assert_eq!(rule.vmids, [101, 102]);
        assert_eq!(rule.resources(), "vm:101,vm:102");
        assert!(
            spread_of(&json!({"rule": "r", "type": "resource-affinity",
            "affinity": "positive", "resources": "vm:1"}))
            .is_none()
        );
        assert!(
            spread_of(&json!({"rule": "r", "type": "node-affinity",
            "resources": "vm:1", "nodes": "pve1"}))
            .is_none()
        );
        assert!(
            spread_of(&json!({"rule": "r", "type": "resource-affinity",
            "affinity": "negative", "resources": "vm:1,ct:2"}))
            .is_none()
        );
    }

    #[test]
    fn group_nodes_compare_in_any_order() {
        assert!(same_nodes("pve1:2,pve2:1,pve3:1", "pve3:1, pve1:2,pve2:1"));
        assert!(!same_nodes("pve1:2,pve2:1", "pve1:1,pve2:2"));
        let g = PreferGroup {
            id: group_id("talosprov-lab-controlplane", 121),
            nodes: "pve1:2,pve2:1".into(),
            comment: None,
        };
        assert_eq!(g.id, "talosprov-lab-controlplane-121");
        let r = group_request(&g, true);
        assert_eq!(
            r.form_value("group"),
            Some("talosprov-lab-controlplane-121")
        );
        assert_eq!(r.form_value("nodes"), Some("pve1:2,pve2:1"));
    }

    #[test]
    fn requests_carry_pves_parameters() {
        let rule = SpreadRule {
            id: "talosprov-lab-controlplane".into(),
            vmids: vec![101, 102, 103],
            comment: Some("talosprov: lab controlplane".into()),
        };
        let r = rule_request(&rule, true);
        assert_eq!(r.path_and_query(), "/cluster/ha/rules");
        assert_eq!(r.form_value("type"), Some("resource-affinity"));
        assert_eq!(r.form_value("affinity"), Some("negative"));
        assert_eq!(r.form_value("resources"), Some("vm:101,vm:102,vm:103"));
        let r = rule_request(
            &SpreadRule {
                comment: None,
                ..rule
            },
            false,
        );
        assert_eq!(
            r.path_and_query(),
            "/cluster/ha/rules/talosprov-lab-controlplane"
        );
        assert_eq!(r.form_value("delete"), Some("comment"));
        let ha = HaResource {
            state: "started".into(),
            max_restart: 2,
            max_relocate: 1,
        };
        let r = resource_request(101, &ha, true);
        assert_eq!(r.form_value("sid"), Some("vm:101"));
        assert_eq!(r.form_value("max_restart"), Some("2"));
        assert_eq!(
            resource_request(101, &ha, false).path_and_query(),
            "/cluster/ha/resources/vm%3A101"
        );
    }
}
