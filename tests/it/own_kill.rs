//! A kill -9 campaign during creation: apply (the real binary, against
//! fakepve and the Talos simulator) is killed at points spread through the
//! requests that create the pool, the PCI mapping, the image and the VMs.
//! fakepve holds the request after each point unanswered, so the kill lands
//! exactly there; the held request is then served (it reached Proxmox before
//! its client died) or dropped. The next apply must converge with no
//! `force-unlock`, the plan after it must have no changes, and Proxmox must
//! hold exactly the topology's VMs, as the state records them.

use std::time::Duration;

use crate::support::cli::{stderr, stdout};
use crate::support::lab::Lab;
use crate::support::wait::poll;

/// The VMs of the lab topology: (hostname, vmid, cores, memory MiB, disk GiB).
const VMS: [(&str, u32, u64, u64, u64); 3] = [
    ("talos-controlplane-01", 121, 2, 4096, 50),
    ("talos-worker-01", 122, 4, 8192, 100),
    ("talos-gpu-01", 123, 4, 12288, 100),
];

/// Kill points before the VMs are created (pool, mapping, image), spread out.
const EARLY_POINTS: usize = 4;

/// The kill points: how many requests fakepve serves before it holds the
/// next one. An uninterrupted apply is measured first: a few points before
/// its first VM create request, then one at every request from just before
/// that create to its last VM start; and the count of that phase.
async fn kill_points() -> (Vec<usize>, usize) {
    let lab = Lab::start("7.20", Duration::from_millis(100)).await;
    lab.import_secrets().await;
    let before = lab.pve.request_total().await;
    let out = lab.run(&["apply", "-auto-approve"]).await;
    assert!(out.status.success(), "the measuring apply failed");
    let requests = &lab.pve.requests().await[before..];
    let first_create = requests
        .iter()
        .position(|(m, p, _)| m == "POST" && p.ends_with("/qemu"))
        .expect("the apply created VMs");
    let last_start = requests
        .iter()
        .rposition(|(m, p, _)| m == "POST" && p.ends_with("/status/start"))
        .expect("the apply started the VMs");
    let vm_phase = first_create.saturating_sub(2);
    let mut points: Vec<usize> = (0..EARLY_POINTS)
        .map(|i| i * vm_phase / EARLY_POINTS)
        .collect();
    points.extend(vm_phase..=last_start);
    points.dedup();
    (points, last_start + 1)
}

/// Proxmox holds exactly the topology's VMs, running, at their spec, and the
/// state records what Proxmox holds, with no create intent left.
async fn assert_converged(lab: &Lab, point: &str) {
    let vms = lab.vms().await;
    assert_eq!(vms.len(), VMS.len(), "{point}: one VM per node: {vms:?}");
    let state = lab.state();
    assert!(
        state.resources.creating.is_empty(),
        "{point}: create intents left: {:?}",
        state.resources.creating
    );
    for (host, vmid, cores, memory, disk) in VMS {
        let listed = vms
            .iter()
            .find(|v| v["vmid"] == vmid)
            .unwrap_or_else(|| panic!("{point}: VM {vmid} missing"));
        assert_eq!(listed["name"], host, "{point}");
        assert_eq!(listed["status"], "running", "{point}: VM {vmid}");
        let config = lab
            .pve
            .get(&format!("/nodes/pve1/qemu/{vmid}/config"))
            .await;
        let size = config["scsi0"]
            .as_str()
            .and_then(|d| d.split(',').find_map(|p| p.strip_prefix("size=")))
            .unwrap_or_else(|| panic!("{point}: VM {vmid} has no scsi0 size: {config}"))
            .to_owned();
        assert_eq!(size, format!("{disk}G"), "{point}: VM {vmid} disk");
        assert_eq!(config["cores"].as_u64(), Some(cores), "{point}");
        assert_eq!(
            config["memory"].to_string().trim_matches('"'),
            memory.to_string(),
            "{point}"
        );
        let rec = &state.resources.vms[host];
        assert_eq!(
            (rec.vmid, u64::from(rec.cores), rec.memory_mib, rec.disk_gib),
            (vmid, cores, memory, disk),
            "{point}: the state records what Proxmox holds"
        );
    }
    assert!(state.resources.bootstrap.is_some_and(|b| b.done), "{point}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_killed_anywhere_during_creation_converges_on_the_next_run() {
    let (points, total) = kill_points().await;
    assert!(points.len() >= 10, "only {} kill points", points.len());
    for (i, after) in points.into_iter().enumerate() {
        let serve = i % 2 == 1;
        let lab = Lab::start(&format!("7.{}", 21 + i), Duration::from_millis(100)).await;
        lab.import_secrets().await;
        lab.pve.hold_after(after).await;
        let mut child = lab
            .command(&["apply", "-auto-approve"])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start apply");
        let what = format!("apply reaching request {} of {total}", after + 1);
        let held = poll(&what, Duration::from_secs(60), async || {
            let held = lab.pve.held().await;
            if !held.is_empty() {
                return Some(held);
            }
            if let Some(status) = child.try_wait().expect("poll apply") {
                panic!(
                    "apply ended ({status}) before request {} of {total}",
                    after + 1
                );
            }
            None
        })
        .await;
        child.start_kill().expect("kill -9 apply");
        let status = child.wait().await.expect("wait for the killed apply");
        assert!(!status.success());
        let point = format!(
            "killed at request {} of {total} ({}, {})",
            after + 1,
            held[0],
            if serve { "served" } else { "dropped" }
        );
        eprintln!("== {point}");
        lab.pve.release_held(serve).await;

        // The killed run's lock is taken over: no force-unlock.
        let out = lab.run(&["apply", "-auto-approve"]).await;
        assert!(out.status.success(), "{point}: the next apply failed");
        assert!(
            stderr(&out).contains("took over the state lock"),
            "{point}: {}",
            stderr(&out)
        );
        let out = lab.run(&["plan", "-detailed-exitcode"]).await;
        assert_eq!(
            out.status.code(),
            Some(0),
            "{point}: the plan after it has changes:\n{}",
            stdout(&out)
        );
        assert_converged(&lab, &point).await;
    }
}
