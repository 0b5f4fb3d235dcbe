//! Proxmox HA end to end, against fakepve's HA routes (each parameter checked
//! against PVE 9's schema by the tests' launcher): `ha:` makes a VM an HA
//! resource, `proxmox.spread: [controlplane]` makes one negative
//! resource-affinity rule over the control planes' VMs, spread over three
//! hosts; a rule deleted outside talosprov is drift and made again; leaving
//! `proxmox.spread` deletes the rule and the HA resources it implied; on PVE 8,
//! without HA rules, each VM gets an HA group that prefers its host.

use serde_json::Value;

use crate::support::cli::{stderr, stdout};
use crate::support::lab::Lab;

/// The lab's three control planes on three hosts, the control planes
/// spread, and `talos-worker-01` an HA resource of its own.
fn spread(text: String) -> String {
    text.replace(
        "{ hostname: talos-cp-02,",
        "{ hostname: talos-cp-02, proxmox_node: pve2,",
    )
    .replace(
        "{ hostname: talos-cp-03,",
        "{ hostname: talos-cp-03, proxmox_node: pve3,",
    )
    .replace(
        "{ hostname: talos-worker-01,",
        "{ hostname: talos-worker-01, ha: { max_restart: 2 },",
    )
    .replacen("proxmox:\n", "proxmox:\n  spread: [controlplane]\n", 1)
}

/// The HA resources as Proxmox lists them, `sid` to the whole entry.
async fn resources(lab: &Lab) -> Vec<(String, Value)> {
    let list = lab.pve.get("/cluster/ha/resources").await;
    let mut out: Vec<(String, Value)> = list
        .as_array()
        .expect("a list")
        .iter()
        .map(|r| (r["sid"].as_str().unwrap_or_default().to_owned(), r.clone()))
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spread_control_planes_get_one_anti_affinity_rule_that_talosprov_keeps() {
    let lab = Lab::start_ha_on_three_hosts("20.7").await;
    lab.write_topology(spread);
    lab.import_secrets().await;
    let out = lab.run(&["plan"]).await;
    let text = stdout(&out);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(text.contains("+ ha_rule/controlplane"), "{text}");
    assert!(
        text.contains("+ resources = vm:121,vm:122,vm:123"),
        "{text}"
    );
    assert!(
        text.contains("+ ha = state=started,max_restart=2,max_relocate=1"),
        "{text}"
    );
    lab.apply_text().await;

    // The rule, as Proxmox holds it.
    let rules = lab.pve.get("/cluster/ha/rules").await;
    let rules = rules.as_array().expect("rules");
    assert_eq!(rules.len(), 1, "{rules:?}");
    let rule = &rules[0];
    assert_eq!(rule["rule"], "talosprov-lab-controlplane");
    assert_eq!(rule["type"], "resource-affinity");
    assert_eq!(rule["affinity"], "negative");
    assert_eq!(rule["resources"], "vm:121,vm:122,vm:123");
    // Each control plane is an HA resource (Proxmox's defaults), and so is
    // the worker with its own settings; the other worker is not.
    let res = resources(&lab).await;
    let sids: Vec<&str> = res.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(sids, ["vm:121", "vm:122", "vm:123", "vm:124"]);
    assert_eq!(res[3].1["max_restart"].as_u64(), Some(2), "{res:?}");
    assert_eq!(res[0].1["state"], "started");
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(0), "converged: {}", stdout(&out));

    // Deleted in the web UI: drift, made again.
    lab.pve
        .delete("/cluster/ha/rules/talosprov-lab-controlplane")
        .await;
    let out = lab.run(&["plan"]).await;
    let text = stdout(&out);
    assert!(
        text.contains("deleted outside talosprov: created again"),
        "{text}"
    );
    lab.apply_text().await;
    let rules = lab.pve.get("/cluster/ha/rules").await;
    assert_eq!(rules.as_array().map(Vec::len), Some(1), "{rules}");

    // Out of proxmox.spread: the rule and the control planes' HA resources go.
    lab.write_topology(|t| spread(t).replace("  spread: [controlplane]\n", ""));
    let out = lab.run(&["plan"]).await;
    let text = stdout(&out);
    assert!(text.contains("- ha_rule/controlplane"), "{text}");
    lab.apply_text().await;
    let rules = lab.pve.get("/cluster/ha/rules").await;
    assert_eq!(rules.as_array().map(Vec::len), Some(0), "{rules}");
    let res = resources(&lab).await;
    let sids: Vec<&str> = res.iter().map(|(s, _)| s.as_str()).collect();
    assert_eq!(sids, ["vm:124"]);

    // PVE 8 has no HA rules: each control plane gets an HA group of its own
    // that prefers its host, named on its HA resource.
    lab.pve
        .cmd(serde_json::json!({"cmd": "set_version", "version": "8.4.1"}))
        .await;
    lab.write_topology(spread);
    let out = lab.run(&["plan"]).await;
    let text = stdout(&out);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(text.contains("(PVE 8 HA groups)"), "{text}");
    assert!(
        text.contains("+ groups = 121=pve1:2,pve2:1,pve3:1; 122=pve2:2,pve1:1,pve3:1; 123=pve3:2,pve1:1,pve2:1"),
        "{text}"
    );
    lab.apply_text().await;
    let groups = lab.pve.get("/cluster/ha/groups").await;
    let mut groups: Vec<(String, String)> = groups
        .as_array()
        .expect("groups")
        .iter()
        .map(|g| {
            (
                g["group"].as_str().unwrap_or_default().to_owned(),
                g["nodes"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    groups.sort();
    assert_eq!(
        groups,
        [
            (
                "talosprov-lab-controlplane-121".to_owned(),
                "pve1:2,pve2:1,pve3:1".to_owned()
            ),
            (
                "talosprov-lab-controlplane-122".to_owned(),
                "pve2:2,pve1:1,pve3:1".to_owned()
            ),
            (
                "talosprov-lab-controlplane-123".to_owned(),
                "pve3:2,pve1:1,pve2:1".to_owned()
            ),
        ]
    );
    let res = resources(&lab).await;
    assert_eq!(
        res[1].1["group"], "talosprov-lab-controlplane-122",
        "{res:?}"
    );
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(0), "converged: {}", stdout(&out));
    // And gone with the entry: groups deleted after their resources let go.
    lab.write_topology(|t| spread(t).replace("  spread: [controlplane]\n", ""));
    lab.apply_text().await;
    let groups = lab.pve.get("/cluster/ha/groups").await;
    assert_eq!(groups.as_array().map(Vec::len), Some(0), "{groups}");
}
