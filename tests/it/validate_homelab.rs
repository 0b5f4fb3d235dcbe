//! `talosprov validate` on the reference cluster in examples/homelab: it is
//! valid, and each node lists its patches in merge order.

use crate::support::cli::talosprov;
use crate::support::fixtures::{HELM_STAND_IN, repo};

fn run(args: &[&str]) -> std::process::Output {
    talosprov()
        .current_dir(repo())
        .env_remove("PROXMOX_VE_ENDPOINT")
        .env("NO_COLOR", "1")
        // The homelab's add-ons are Helm charts: validate checks there is a helm.
        .env("TALOSPROV_HELM", HELM_STAND_IN)
        .args(args)
        .output()
        .expect("run talosprov")
}

/// The lines of the summary's patch list for one node.
fn patches_of<'a>(stdout: &'a str, hostname: &str) -> Vec<&'a str> {
    let header = format!("  {hostname}:");
    stdout
        .lines()
        .skip_while(|l| *l != header)
        .skip(1)
        .take_while(|l| l.starts_with("    "))
        .map(|l| l.split_whitespace().next().unwrap_or(""))
        .collect()
}

#[test]
fn homelab_example_is_valid_and_lists_patches_in_merge_order() {
    let out = run(&["validate", "-f", "examples/homelab/cluster.yaml"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stderr:\n{stderr}\nstdout:\n{stdout}"
    );
    assert!(stderr.is_empty(), "no warnings expected:\n{stderr}");
    assert_eq!(
        patches_of(&stdout, "talos-controlplane-01"),
        [
            "common/40-kubelet.yaml",
            "controlplane/10-network-vip.yaml.tftpl",
            "controlplane/20-cluster-cni-proxy.yaml",
            "controlplane/30-extra-manifests.yaml",
        ]
    );
    assert_eq!(
        patches_of(&stdout, "talos-worker-01"),
        ["common/40-kubelet.yaml"]
    );
    assert_eq!(
        patches_of(&stdout, "talos-gpu-01"),
        [
            "common/40-kubelet.yaml",
            "nodes/talos-gpu-01/30-nvidia-modules.yaml"
        ]
    );
    insta::assert_snapshot!("homelab_summary", stdout);
}

#[test]
fn homelab_json_report_has_the_model_with_defaults_and_patch_kinds() {
    let out = run(&["validate", "-f", "examples/homelab/cluster.yaml", "--json"]);
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert_eq!(v["valid"], true);
    let t = &v["topology"];
    assert_eq!(t["cluster"]["endpoint"], "https://192.168.1.120:6443");
    assert_eq!(t["cluster"]["talos_version"], "v1.13.8");
    assert_eq!(t["nodes"][2]["vm_id"], 123);
    assert_eq!(t["nodes"][2]["schematic"], "nvidia");
    assert_eq!(t["nodes"][2]["hostpci"][0]["mapping"], "gpu");
    assert_eq!(t["patches_dir"], "patches");
    let cp = &v["patches"]["talos-controlplane-01"];
    assert_eq!(cp[1]["kind"], "templatefile");
    assert_eq!(cp[1]["level"], "role");
    assert_eq!(v["patches"]["talos-gpu-01"][1]["level"], "node");
    insta::assert_json_snapshot!("homelab_json", v);
}
