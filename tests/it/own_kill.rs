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

/// The lab's images: one per schematic (the GPU node has its own).
const IMAGES: usize = 2;

/// Kill apply -9 as it sends its first image `download-url` request; `serve`
/// says whether Proxmox got that one (the other requests held with it are
/// dropped). Returns how many download requests were sent.
async fn killed_at_the_download(lab: &Lab, serve: bool) -> usize {
    lab.pve.hold_at("POST", "/download-url").await;
    let mut child = lab
        .command(&["apply", "-auto-approve"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start apply");
    poll(
        "apply sending download-url",
        Duration::from_secs(60),
        async || {
            let held = lab.pve.held().await;
            if let Some(status) = child.try_wait().expect("poll apply") {
                panic!("apply ended ({status}) before its download");
            }
            (!held.is_empty()).then_some(held)
        },
    )
    .await;
    child.start_kill().expect("kill -9 apply");
    child.wait().await.expect("wait for the killed apply");
    lab.pve.release_held(serve).await;
    let state = lab.state();
    let intents: Vec<&String> = state.resources.creating.keys().collect();
    assert!(
        intents.iter().any(|k| k.starts_with("image/")),
        "the download was recorded as being made before its request: {intents:?}"
    );
    assert!(state.resources.images.is_empty());
    lab.pve.count("POST", "/download-url").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_killed_at_the_image_download_waits_for_that_download_on_the_next_run() {
    let lab = Lab::start("18.1", Duration::from_millis(100)).await;
    lab.import_secrets().await;
    // The download Proxmox got runs on for 4 s after its client died.
    lab.pve
        .cmd(serde_json::json!({"cmd": "slow_task", "type": "download", "secs": 4}))
        .await;
    let sent = killed_at_the_download(&lab, true).await;

    let out = lab.run(&["plan"]).await;
    assert!(
        stdout(&out).contains("an interrupted apply started it"),
        "{}",
        stdout(&out)
    );
    let out = lab.run(&["apply", "-auto-approve"]).await;
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("waiting for the download already running on pve1"),
        "{text}"
    );
    assert_eq!(
        lab.pve.count("POST", "/download-url").await,
        sent + IMAGES - 1,
        "the served download is not requested again: a second request would end in \
         \"refusing to override existing file\""
    );
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert_converged(&lab, "killed at download-url (served)").await;
    assert_eq!(lab.state().resources.images.len(), IMAGES);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_killed_before_proxmox_got_the_download_downloads_on_the_next_run() {
    let lab = Lab::start("18.2", Duration::from_millis(100)).await;
    lab.import_secrets().await;
    let sent = killed_at_the_download(&lab, false).await;
    let out = lab.run(&["apply", "-auto-approve"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(lab.pve.count("POST", "/download-url").await, sent + IMAGES);
    assert_converged(&lab, "killed at download-url (dropped)").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_download_left_by_a_killed_apply_is_deleted_when_no_vm_needs_it() {
    let lab = Lab::start("18.3", Duration::from_millis(100)).await;
    lab.import_secrets().await;
    lab.pve
        .cmd(serde_json::json!({"cmd": "slow_task", "type": "download", "secs": 3}))
        .await;
    killed_at_the_download(&lab, true).await;
    // The cluster is destroyed before any VM was made: the download the
    // killed apply started is what it was making, so it goes too, once its
    // task has ended.
    let out = lab.run(&["destroy", "-auto-approve"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let listed = lab
        .pve
        .get("/nodes/pve1/storage/local/content?content=import")
        .await;
    assert_eq!(listed.as_array().map(Vec::len), Some(0), "{listed}");
    let state = lab.state();
    assert!(
        state.resources.creating.is_empty(),
        "{:?}",
        state.resources.creating
    );
}
