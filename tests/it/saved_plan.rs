//! A saved plan is applied exactly, or refused before the first change, end
//! to end against fakepve and the Talos simulator: an edited topology, an
//! edited patch file, drift in Proxmox and a plan of an older format are each
//! refused with the first difference named, changing nothing in Proxmox, on
//! the nodes or in the state; a file that changes nothing does not block.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::support::cli::{stderr, stdout};
use crate::support::lab::Lab;

/// A worker patch raising the kubelet's pod limit to `max_pods`, plus `extra`
/// lines under `extraArgs`.
fn max_pods_patch(max_pods: &str, extra: &str) -> String {
    format!("machine:\n  kubelet:\n    extraArgs:\n      max-pods: \"{max_pods}\"\n{extra}")
}

/// What must stay untouched by a refused apply.
struct Untouched {
    state: Vec<u8>,
    backup: Option<Vec<u8>>,
    pve_writes: usize,
    nodes: Vec<NodeSeen>,
}

/// What a simulated node runs: its config, a staged one, its reboots.
#[derive(Debug, PartialEq, Eq)]
struct NodeSeen {
    running: Option<Vec<u8>>,
    staged: Option<Vec<u8>>,
    reboots: u32,
}

/// Requests that change something in fakepve (anything but a GET).
async fn pve_writes(lab: &Lab) -> usize {
    lab.pve
        .requests()
        .await
        .iter()
        .filter(|(method, _, _)| method != "GET")
        .count()
}

/// What each simulated node runs (a plan's dry runs change none of it).
fn nodes_seen(lab: &Lab) -> Vec<NodeSeen> {
    let sim = lab.sim.as_ref().expect("simulator");
    lab.ips
        .iter()
        .map(|ip| {
            let node = sim.node(ip.parse().expect("ip")).expect("node");
            NodeSeen {
                running: node.running_config(),
                staged: node.staged_config(),
                reboots: node.reboots(),
            }
        })
        .collect()
}

impl Untouched {
    async fn now(lab: &Lab) -> Untouched {
        let backup = lab.dir.path().join("talosprov.tfstate.backup");
        Untouched {
            state: std::fs::read(lab.state_file()).expect("state"),
            backup: std::fs::read(backup).ok(),
            pve_writes: pve_writes(lab).await,
            nodes: nodes_seen(lab),
        }
    }

    /// Nothing was written to Proxmox, sent to a node, or saved since.
    async fn still(&self, lab: &Lab) {
        let now = Untouched::now(lab).await;
        assert_eq!(now.pve_writes, self.pve_writes, "a Proxmox write");
        assert!(now.nodes == self.nodes, "a node's config changed");
        assert!(now.state == self.state, "the state changed");
        assert!(now.backup == self.backup, "the state backup changed");
    }
}

/// A lab applied once, with the worker's patch folder ready.
async fn applied_lab(net: &str) -> Lab {
    let lab = Lab::start(net, Duration::from_millis(100)).await;
    lab.import_secrets().await;
    assert!(lab.run(&["apply", "-auto-approve"]).await.status.success());
    std::fs::create_dir_all(worker_patches(&lab)).expect("mkdir");
    lab
}

fn worker_patches(lab: &Lab) -> PathBuf {
    lab.dir.path().join("patches/worker")
}

/// The error as a user sees it, the lab's folder shown as `[lab]`.
fn refusal(lab: &Lab, out: &std::process::Output) -> String {
    assert_eq!(out.status.code(), Some(1), "apply must refuse");
    let dir = lab.dir.path().display().to_string();
    stderr(out).replace(&dir, "[lab]")
}

fn path_arg(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saved_plan_is_refused_when_the_topology_or_a_patch_changed_since() {
    let lab = applied_lab("6.1").await;
    let patch = worker_patches(&lab).join("10-max-pods.yaml");
    let plan_file = lab.dir.path().join("p.plan");

    // The reviewed plan: memory 8192 -> 9000, and max-pods "150".
    lab.write_topology(|t| t.replace("memory: 8192", "memory: 9000"));
    std::fs::write(&patch, max_pods_patch("150", "")).expect("patch");
    let out = lab.run(&["plan", "-out", path_arg(&plan_file)]).await;
    assert!(out.status.success());
    let shown = stdout(&out);
    assert!(
        shown.contains("memory_mib") && shown.contains("8192 -> 9000"),
        "{shown}"
    );
    assert!(shown.contains("max-pods: \"150\""), "{shown}");
    let before = Untouched::now(&lab).await;

    // Both edited afterwards: the VM's value is the first difference.
    lab.write_topology(|t| t.replace("memory: 8192", "memory: 65536"));
    std::fs::write(
        &patch,
        max_pods_patch("7", "      kube-reserved: cpu=100m\n"),
    )
    .expect("patch");
    let out = lab.run(&["apply", path_arg(&plan_file)]).await;
    insta::assert_snapshot!("topology_edited", refusal(&lab, &out));
    before.still(&lab).await;

    // Only the patch edited: the patch file is named, with the config it changes.
    lab.write_topology(|t| t.replace("memory: 8192", "memory: 9000"));
    let out = lab.run(&["apply", path_arg(&plan_file)]).await;
    insta::assert_snapshot!("patch_edited", refusal(&lab, &out));
    before.still(&lab).await;

    // A new patch file the worker reads is a difference too.
    std::fs::write(&patch, max_pods_patch("150", "")).expect("patch");
    let extra = worker_patches(&lab).join("20-labels.yaml");
    std::fs::write(&extra, "machine:\n  nodeLabels:\n    tier: batch\n").expect("patch");
    let out = lab.run(&["apply", path_arg(&plan_file)]).await;
    let err = refusal(&lab, &out);
    assert!(
        err.contains(
            "[lab]/patches/worker/20-labels.yaml is new since the plan was saved (it changes \
             config/talos-gpu-01, config/talos-worker-01)"
        ),
        "{err}"
    );
    before.still(&lab).await;
    std::fs::remove_file(&extra).expect("rm");

    // Files that change nothing do not block: a README beside the patches,
    // and a comment in a patch the worker reads.
    std::fs::write(lab.dir.path().join("patches/README.md"), "notes\n").expect("readme");
    std::fs::write(&patch, max_pods_patch("150", "# reviewed\n")).expect("patch");
    let out = lab.run(&["apply", path_arg(&plan_file)]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let worker = lab.state().resources.vms["talos-worker-01"].clone();
    assert_eq!(worker.memory_mib, 9000);
    let config = lab
        .pve
        .get(&format!(
            "/nodes/{}/qemu/{}/config",
            worker.node, worker.vmid
        ))
        .await;
    assert_eq!(config["memory"].to_string().trim_matches('"'), "9000");
    let node = lab
        .sim
        .as_ref()
        .expect("simulator")
        .node(lab.ips[1].parse().expect("ip"))
        .expect("worker node");
    let running = String::from_utf8(node.running_config().expect("config")).expect("utf-8");
    assert!(running.contains("max-pods: \"150\""), "{running}");
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saved_plan_is_refused_when_the_cluster_drifted_since() {
    let lab = applied_lab("6.2").await;
    let plan_file = lab.dir.path().join("p.plan");
    lab.write_topology(|t| t.replace("memory: 8192", "memory: 9000"));
    let out = lab.run(&["plan", "-out", path_arg(&plan_file)]).await;
    assert!(out.status.success());

    // The worker's memory edited by hand in Proxmox after the review.
    let worker = lab.state().resources.vms["talos-worker-01"].clone();
    let set = std::collections::BTreeMap::from([("memory".to_owned(), "6144".to_owned())]);
    let put =
        talosprov_proxmox::lifecycle::config_request(&worker.node, worker.vmid, &set, &[], None);
    lab.pve
        .client()
        .send(&put)
        .await
        .expect("PUT config by hand");
    let before = Untouched::now(&lab).await;
    let out = lab.run(&["apply", path_arg(&plan_file)]).await;
    insta::assert_snapshot!("cluster_drifted", refusal(&lab, &out));
    before.still(&lab).await;

    // Another VM edited by hand: a change the plan did not have.
    let set = std::collections::BTreeMap::from([("memory".to_owned(), "8192".to_owned())]);
    let put =
        talosprov_proxmox::lifecycle::config_request(&worker.node, worker.vmid, &set, &[], None);
    lab.pve.client().send(&put).await.expect("PUT config back");
    let gpu = lab.state().resources.vms["talos-gpu-01"].clone();
    let set = std::collections::BTreeMap::from([("cores".to_owned(), "2".to_owned())]);
    let put = talosprov_proxmox::lifecycle::config_request(&gpu.node, gpu.vmid, &set, &[], None);
    lab.pve
        .client()
        .send(&put)
        .await
        .expect("PUT config by hand");
    let before = Untouched::now(&lab).await;
    let out = lab.run(&["apply", path_arg(&plan_file)]).await;
    let err = refusal(&lab, &out);
    assert!(
        err.contains("vm/talos-gpu-01: the cluster changed since the plan was saved"),
        "{err}"
    );
    before.still(&lab).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saved_plan_of_an_older_format_or_flags_it_was_not_made_with_is_refused() {
    let lab = applied_lab("6.3").await;
    let plan_file = lab.dir.path().join("p.plan");
    lab.write_topology(|t| t.replace("memory: 8192", "memory: 9000"));
    let out = lab.run(&["plan", "-out", path_arg(&plan_file)]).await;
    assert!(out.status.success());
    let before = Untouched::now(&lab).await;

    let out = lab.run(&["apply", "--staged", path_arg(&plan_file)]).await;
    let err = refusal(&lab, &out);
    assert!(err.contains("plan --staged -out FILE"), "{err}");

    let text = std::fs::read_to_string(&plan_file).expect("plan");
    let older = lab.dir.path().join("old.plan");
    std::fs::write(
        &older,
        text.replacen("\"format_version\": 4", "\"format_version\": 3", 1),
    )
    .expect("write");
    let out = lab.run(&["apply", path_arg(&older)]).await;
    insta::assert_snapshot!("older_format", refusal(&lab, &out));
    before.still(&lab).await;
}
