//! Node pools against fakepve (two Proxmox hosts) and the Talos simulator:
//! members get their names, IPs, vmids and hosts by the allocation rules,
//! scaling up adds members and touches nothing else, scaling down removes the
//! highest indexes, every plan after an apply shows no changes, and an edit of
//! the range that would move a member is refused at plan time.

use crate::support::cli::stderr;
use crate::support::lab::{Lab, change_lines};

fn pool(net: &str, replicas: u32, range: &str) -> String {
    format!(
        "pools:\n  workers:\n    replicas: {replicas}\n    hostname: \"{{cluster}}-wk-{{index}}\"\n    \
         ip_range: {range}\n    proxmox_nodes: [pve1, pve2]\n    cores: 2\n    memory: 2048\n    \
         disk_size: 10\n    tags: [workers]\n"
    )
    .replace("NET", net)
}

/// `(name, vmid, node)` of every VM fakepve has, sorted by vmid.
async fn vms(lab: &Lab) -> Vec<(String, u64, String)> {
    let mut out: Vec<(String, u64, String)> = lab
        .vms()
        .await
        .iter()
        .map(|v| {
            (
                v["name"].as_str().unwrap_or_default().to_owned(),
                v["vmid"].as_u64().unwrap_or_default(),
                v["node"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    out.sort_by_key(|v| v.1);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_pool_is_allocated_scaled_up_and_down_and_keeps_its_members() {
    let lab = Lab::start_for_pools("16.1", 5).await;
    let range = "127.16.1.124-127.16.1.130";
    lab.write_topology(|t| format!("{t}{}", pool("16.1", 3, range)));
    lab.import_secrets().await;

    // Three members over two hosts: the lowest IPs, vmids from their last
    // octet, the host with the fewest members (ties: list order).
    let text = lab.apply_text().await;
    assert!(
        text.contains("pool workers: 0 -> 3 (adds lab-wk-1, lab-wk-2, lab-wk-3)"),
        "{text}"
    );
    let members: Vec<(String, u64, String)> = vms(&lab)
        .await
        .into_iter()
        .filter(|v| v.0.starts_with("lab-wk-"))
        .collect();
    let expected = |list: &[(&str, u64, &str)]| -> Vec<(String, u64, String)> {
        list.iter()
            .map(|(n, id, h)| ((*n).to_owned(), *id, (*h).to_owned()))
            .collect()
    };
    assert_eq!(
        members,
        expected(&[
            ("lab-wk-1", 124, "pve1"),
            ("lab-wk-2", 125, "pve2"),
            ("lab-wk-3", 126, "pve1")
        ])
    );
    let state = lab.state();
    let recorded: Vec<String> = state.pools["workers"]
        .iter()
        .map(|m| format!("{} {} {}", m.index, m.hostname, m.ip))
        .collect();
    assert_eq!(
        recorded,
        [
            "1 lab-wk-1 127.16.1.124",
            "2 lab-wk-2 127.16.1.125",
            "3 lab-wk-3 127.16.1.126"
        ]
    );
    assert!(change_lines(&lab.plan_text().await).is_empty());

    // Scaled to 5: two members added, nothing else touched.
    lab.write_topology(|t| format!("{t}{}", pool("16.1", 5, range)));
    let text = lab.plan_text().await;
    assert!(
        text.contains("pool workers: 3 -> 5 (adds lab-wk-4, lab-wk-5)"),
        "{text}"
    );
    let lines = change_lines(&text);
    assert!(!lines.is_empty());
    assert!(
        lines
            .iter()
            .all(|l| l.contains("lab-wk-4") || l.contains("lab-wk-5")),
        "only the new members change:\n{text}"
    );
    lab.apply_text().await;
    let members: Vec<(String, u64, String)> = vms(&lab)
        .await
        .into_iter()
        .filter(|v| v.0.starts_with("lab-wk-"))
        .collect();
    assert_eq!(
        members,
        expected(&[
            ("lab-wk-1", 124, "pve1"),
            ("lab-wk-2", 125, "pve2"),
            ("lab-wk-3", 126, "pve1"),
            ("lab-wk-4", 127, "pve2"),
            ("lab-wk-5", 128, "pve1"),
        ])
    );
    assert!(change_lines(&lab.plan_text().await).is_empty());

    // Scaled to 2: the three highest indexes leave.
    lab.write_topology(|t| format!("{t}{}", pool("16.1", 2, range)));
    let text = lab.plan_text().await;
    assert!(
        text.contains("pool workers: 5 -> 2 (removes lab-wk-3, lab-wk-4, lab-wk-5)"),
        "{text}"
    );
    let lines = change_lines(&text);
    assert!(
        lines.iter().all(|l| l.starts_with("- ")
            && ["lab-wk-3", "lab-wk-4", "lab-wk-5"]
                .iter()
                .any(|h| l.contains(h))),
        "{text}"
    );
    lab.apply_text().await;
    let names: Vec<String> = vms(&lab).await.into_iter().map(|v| v.0).collect();
    assert_eq!(
        names,
        [
            "talos-controlplane-01",
            "talos-worker-01",
            "talos-gpu-01",
            "lab-wk-1",
            "lab-wk-2"
        ]
    );
    assert!(change_lines(&lab.plan_text().await).is_empty());

    // A range that leaves member 1 outside is refused, naming it.
    lab.write_topology(|t| format!("{t}{}", pool("16.1", 2, "127.16.1.125-127.16.1.130")));
    let out = lab.run(&["plan"]).await;
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("O005 pool-member-moved") && err.contains("lab-wk-1"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_plane_pool_scales_down_through_etcd_leave() {
    let lab = Lab::start_for_pools("16.3", 3).await;
    let cp_pool = |replicas: u32| {
        format!(
            "pools:\n  cp:\n    role: controlplane\n    replicas: {replicas}\n    ip_range: \
             127.16.3.124-127.16.3.126\n    proxmox_nodes: [pve1, pve2, pve3]\n    cores: 2\n    \
             memory: 4096\n    disk_size: 10\n"
        )
    };
    lab.write_topology(|t| format!("{t}{}", cp_pool(3)));
    lab.import_secrets().await;
    lab.apply_text().await;
    let first = &lab.ips[0];
    assert_eq!(
        lab.etcd_members(first).await,
        [
            "127.16.3.121",
            "127.16.3.124",
            "127.16.3.125",
            "127.16.3.126"
        ]
    );
    assert!(change_lines(&lab.plan_text().await).is_empty());

    lab.write_topology(|t| format!("{t}{}", cp_pool(1)));
    let text = lab.plan_text().await;
    assert!(
        text.contains("pool cp: 3 -> 1 (removes lab-cp-2, lab-cp-3)"),
        "{text}"
    );
    assert!(
        text.contains("Warning: 2 control planes will remain"),
        "{text}"
    );
    lab.apply_text().await;
    assert_eq!(
        lab.etcd_members(first).await,
        ["127.16.3.121", "127.16.3.124"],
        "etcd follows the pool"
    );
    assert!(change_lines(&lab.plan_text().await).is_empty());
}

/// Two control planes removed by one apply, one of which fails to reset: the
/// other's removal does not wait for it (its etcd member stays, and is in no
/// list of the other's): the apply fails at once, naming the node, with the
/// other removed; the next apply removes the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_control_plane_removal_does_not_hold_up_the_one_beside_it() {
    let lab = Lab::start_for_pools("16.7", 3).await;
    let cp_pool = |replicas: u32| {
        format!(
            "pools:\n  cp:\n    role: controlplane\n    replicas: {replicas}\n    ip_range: \
             127.16.7.124-127.16.7.126\n    proxmox_nodes: [pve1, pve2, pve3]\n    cores: 2\n    \
             memory: 4096\n    disk_size: 10\n"
        )
    };
    lab.write_topology(|t| format!("{t}{}", cp_pool(3)));
    lab.import_secrets().await;
    lab.apply_text().await;
    let first = &lab.ips[0];
    let sim = lab.sim.as_ref().expect("sim");
    sim.node("127.16.7.125".parse().expect("ip"))
        .expect("lab-cp-2")
        .fail_next_reset("reset sequence is already running");

    lab.write_topology(|t| format!("{t}{}", cp_pool(1)));
    let started = std::time::Instant::now();
    let out = lab.run(&["apply", "-auto-approve"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        started.elapsed() < std::time::Duration::from_secs(60),
        "the apply waited {:?} for the failed removal",
        started.elapsed()
    );
    let err = stderr(&out);
    assert!(
        err.contains("cannot remove lab-cp-2 from the cluster")
            && err.contains("reset sequence is already running"),
        "{err}"
    );
    assert_eq!(
        lab.etcd_members(first).await,
        ["127.16.7.121", "127.16.7.124", "127.16.7.125"],
        "lab-cp-3 left etcd; lab-cp-2 is still a member"
    );
    let names: Vec<String> = vms(&lab).await.into_iter().map(|v| v.0).collect();
    assert!(names.contains(&"lab-cp-2".to_owned()), "{names:?}");
    assert!(!names.contains(&"lab-cp-3".to_owned()), "{names:?}");

    lab.apply_text().await;
    assert_eq!(
        lab.etcd_members(first).await,
        ["127.16.7.121", "127.16.7.124"]
    );
    assert!(change_lines(&lab.plan_text().await).is_empty());
}

/// The lab topology with `talos-worker-01`'s entry edited by `edit` (given the
/// entry's text; an empty result removes the node).
fn worker_entry(t: &str, edit: impl Fn(&str) -> String) -> String {
    let start = t.find("  - hostname: talos-worker-01\n").expect("worker");
    let end = start
        + t[start..]
            .find("  - hostname: talos-gpu-01\n")
            .expect("gpu");
    format!("{}{}{}", &t[..start], edit(&t[start..end]), &t[end..])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_renamed_or_moved_into_a_pool_takes_its_vmid_once_its_old_vm_is_gone() {
    let lab = Lab::start("16.5", std::time::Duration::from_millis(100)).await;
    lab.import_secrets().await;
    lab.apply_text().await;
    let worker_ip = lab.ips[1].clone();
    // The new VM at the address boots into maintenance mode once the old one
    // is reset and gone, as the lab's `talos-sim --power-on-after` does.
    let node = lab
        .sim
        .as_ref()
        .expect("sim")
        .node(worker_ip.parse().expect("ip"))
        .expect("node");
    let powering = tokio::spawn(async move {
        loop {
            if node
                .wait_for_phase(
                    |p| p == talosprov_sim::state::Phase::Halted,
                    std::time::Duration::from_secs(3600),
                )
                .await
            {
                node.power_on();
            }
        }
    });

    // Renamed: same IP, so the same vmid (122). The old VM is deleted first,
    // then the new one created at its vmid: no conflict, one apply.
    lab.write_topology(|t| worker_entry(&t, |e| e.replace("talos-worker-01", "talos-worker-02")));
    let text = lab.plan_text().await;
    assert!(!text.contains("Conflict"), "{text}");
    assert!(
        text.contains("new worker node: VM 122 on pve1, once vm/talos-worker-01 has freed VM 122"),
        "{text}"
    );
    assert!(
        text.contains("Plan: 1 to add, 0 to change, 1 to destroy. Talos: 1 config to apply."),
        "{text}"
    );
    let plan: serde_json::Value = serde_json::from_str(&crate::support::cli::stdout(
        &lab.run(&["plan", "--json"]).await,
    ))
    .expect("plan JSON");
    let create = plan["changes"]
        .as_array()
        .expect("changes")
        .iter()
        .find(|c| c["address"] == "vm/talos-worker-02")
        .expect("the create");
    assert!(
        create["depends_on"]
            .as_array()
            .expect("depends_on")
            .iter()
            .any(|d| d == "vm/talos-worker-01"),
        "{create:#}"
    );
    lab.apply_text().await;
    let names: Vec<(String, u64, String)> = vms(&lab).await;
    assert!(
        names.contains(&("talos-worker-02".to_owned(), 122, "pve1".to_owned())),
        "{names:?}"
    );
    assert!(change_lines(&lab.plan_text().await).is_empty());

    // Moved into a pool whose range is its IP: the member takes VM 122 the
    // same way.
    lab.write_topology(|t| {
        format!(
            "{}pools:\n  workers:\n    replicas: 1\n    ip_range: {worker_ip}-{worker_ip}\n    \
             cores: 2\n    memory: 2048\n    disk_size: 10\n",
            worker_entry(&t, |_| String::new())
        )
    });
    let text = lab.plan_text().await;
    assert!(!text.contains("Conflict"), "{text}");
    assert!(
        text.contains("pool workers: 0 -> 1 (adds lab-workers-1)"),
        "{text}"
    );
    assert!(
        text.contains("once vm/talos-worker-02 has freed VM 122"),
        "{text}"
    );
    lab.apply_text().await;
    let names: Vec<(String, u64, String)> = vms(&lab).await;
    assert!(
        names.contains(&("lab-workers-1".to_owned(), 122, "pve1".to_owned())),
        "{names:?}"
    );
    assert!(change_lines(&lab.plan_text().await).is_empty());
    powering.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_members_go_where_their_memory_fits_and_none_is_placed_where_it_does_not() {
    let lab = Lab::start_for_pools("20.5", 4).await;
    const GIB: u64 = 1024 * 1024 * 1024;
    for (host, free) in [("pve1", 32), ("pve2", 16), ("pve3", 4)] {
        let cmd =
            serde_json::json!({"cmd": "set_host_memory", "node": host, "available": free * GIB});
        lab.pve.cmd(cmd).await;
    }
    let pool = |replicas: u32| {
        format!(
            "pools:\n  workers:\n    replicas: {replicas}\n    ip_range: 127.20.5.124-127.20.5.130\n    \
             proxmox_nodes: [pve1, pve2, pve3]\n    cores: 2\n    memory: 8192\n    disk_size: 10\n"
        )
    };
    lab.write_topology(|t| format!("{t}{}", pool(4)));
    lab.import_secrets().await;
    // 8 GiB each: pve3 (4 GiB free) takes none; the most memory left wins,
    // and on a tie (pve1 and pve2 both at 16 GiB) the host with fewer members.
    lab.apply_text().await;
    let placed: Vec<(String, String)> = vms(&lab)
        .await
        .into_iter()
        .filter(|v| v.0.starts_with("lab-workers-"))
        .map(|(name, _, node)| (name, node))
        .collect();
    let want: Vec<(String, String)> = [
        ("lab-workers-1", "pve1"),
        ("lab-workers-2", "pve1"),
        ("lab-workers-3", "pve2"),
        ("lab-workers-4", "pve1"),
    ]
    .iter()
    .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
    .collect();
    assert_eq!(placed, want);

    // No host with room: the plan refuses, naming each host with its free memory.
    for host in ["pve1", "pve2", "pve3"] {
        let cmd = serde_json::json!({"cmd": "set_host_memory", "node": host, "available": 4 * GIB});
        lab.pve.cmd(cmd).await;
    }
    lab.write_topology(|t| format!("{t}{}", pool(5)));
    let out = lab.run(&["plan"]).await;
    let err = stderr(&out);
    assert!(!out.status.success());
    assert!(
        err.contains(
            "pool `workers`: member 5 needs 8192 MiB of memory and 10 GiB of disk, and no host \
             has them free: pve1 has 4096 MiB of memory"
        ) && err.contains("pve2 has 4096 MiB")
            && err.contains("pve3 has 4096 MiB")
            && err.contains("O006 pool-no-capacity"),
        "{err}"
    );
    // The recorded members stay where they are; offline, validate places by count.
    let out = lab.run(&["validate"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gpu_pool_spreads_over_the_hosts_of_one_mapping() {
    let lab = Lab::start_for_pools("20.6", 3).await;
    let mapping = "\n  gpus:\n    id: \"10de:2504\"\n    subsystem_id: \"10de:2504\"\n    \
                   comment: one device per host\n    map:\n      \
                   - { node: pve2, path: \"0000:03:00\", iommu_group: 21 }\n      \
                   - { node: pve3, path: \"0000:04:00\", iommu_group: 22 }\n";
    let pool = "pools:\n  gpus:\n    replicas: 2\n    ip_range: 127.20.6.124-127.20.6.130\n    \
                proxmox_nodes: [pve1, pve2, pve3]\n    cores: 2\n    memory: 4096\n    \
                disk_size: 10\n    schematic: nvidia\n    \
                hostpci: [{ device: hostpci0, mapping: gpus }]\n";
    let with = |t: String, pool: &str| {
        let at = t.find("\nnodes:").expect("nodes");
        format!("{}{mapping}{}{pool}", &t[..at], &t[at..])
    };
    lab.write_topology(|t| with(t, pool));
    // The members load the NVIDIA modules, from the pool's own patch folder.
    let dir = lab.dir.path().join("patches/pools/gpus");
    std::fs::create_dir_all(&dir).expect("pool patches");
    std::fs::copy(
        lab.dir
            .path()
            .join("patches/nodes/talos-gpu-01/30-nvidia-modules.yaml"),
        dir.join("30-nvidia-modules.yaml"),
    )
    .expect("copy the modules patch");
    lab.import_secrets().await;
    lab.apply_text().await;
    // One member per host with a device; pve1 (no entry) takes none.
    let placed: Vec<(String, String)> = vms(&lab)
        .await
        .into_iter()
        .filter(|v| v.0.starts_with("lab-gpus-"))
        .map(|(name, _, node)| (name, node))
        .collect();
    assert_eq!(
        placed,
        [
            ("lab-gpus-1".to_owned(), "pve2".to_owned()),
            ("lab-gpus-2".to_owned(), "pve3".to_owned())
        ]
    );
    // The one mapping, with both hosts' devices, as Proxmox holds it.
    let m = lab.pve.get("/cluster/mapping/pci/gpus").await;
    let map: Vec<String> = m["map"]
        .as_array()
        .expect("map")
        .iter()
        .map(|e| e.as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(map.len(), 2, "{m}");
    assert!(
        map[0].contains("node=pve2") && map[0].contains("path=0000:03:00"),
        "{map:?}"
    );
    assert!(
        map[1].contains("node=pve3") && map[1].contains("iommugroup=22"),
        "{map:?}"
    );
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(0), "converged: {}", stderr(&out));

    // A third member has no device left: refused, naming the mapping's devices.
    lab.write_topology(|t| with(t, &pool.replace("replicas: 2", "replicas: 3")));
    let out = lab.run(&["validate"]).await;
    let err = stderr(&out);
    assert!(!out.status.success());
    assert!(
        err.contains(
            "pool `gpus` has 3 members and mapping `gpus` has 2 free device(s) on the pool's \
             hosts (pve2, pve3)"
        ),
        "{err}"
    );
}

/// The `pools:` example README.md gives to try on the running lab, as it
/// is written there.
fn readme_pool_example() -> String {
    let readme = std::fs::read_to_string(crate::support::fixtures::repo().join("README.md"))
        .expect("README.md");
    let at = readme
        .find("pool can be tried on the running lab")
        .expect("the README's pool walk-through");
    let block = &readme[at..];
    let start = block.find("```yaml\n").expect("its yaml block") + "```yaml\n".len();
    let end = block[start..].find("```").expect("the block's end");
    block[start..start + end].to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readmes_pool_walk_through_plans_and_applies_on_the_lab_as_run_sh_starts_it() {
    let lab = Lab::start_like_run_sh("16.9").await;
    lab.import_secrets().await;
    lab.apply_text().await;
    let example = readme_pool_example();
    assert!(
        example.contains("ip_range: 127.0.0.130-127.0.0.133"),
        "{example}"
    );
    let pool = example.replace("127.0.0.", "127.16.9.");
    lab.write_topology(|t| format!("{t}\n{pool}"));

    // As the README says: plan shows the pool growing, apply makes it.
    let plan = lab.run(&["plan"]).await;
    let text = crate::support::cli::stdout(&plan);
    assert!(plan.status.success(), "{text}{}", stderr(&plan));
    assert!(
        text.contains("pool workers: 0 -> 2 (adds lab-workers-1, lab-workers-2)"),
        "{text}"
    );
    let text = lab.apply_text().await;
    assert!(text.contains("Apply complete!"), "{text}");
    let names: Vec<String> = vms(&lab).await.into_iter().map(|v| v.0).collect();
    assert!(
        names.contains(&"lab-workers-1".to_owned()) && names.contains(&"lab-workers-2".to_owned()),
        "{names:?}"
    );

    // "change `replicas` to scale it".
    lab.write_topology(|t| format!("{t}\n{}", pool.replace("replicas: 2", "replicas: 1")));
    let plan = lab.run(&["plan"]).await;
    let text = crate::support::cli::stdout(&plan);
    assert!(
        text.contains("pool workers: 2 -> 1 (removes lab-workers-2)"),
        "{text}"
    );
    lab.apply_text().await;
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        crate::support::cli::stdout(&out)
    );
}
