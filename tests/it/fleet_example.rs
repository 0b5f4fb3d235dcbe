//! examples/fleet: two clusters sharing a patch root, each with its own state
//! and pools. Both validate, plan offline, and plan against Proxmox (fakepve
//! with three hosts); the GitLab pipeline runs one set of jobs per cluster,
//! each against the state named after its cluster, triggered by its own folder
//! or the shared patches.

use std::path::PathBuf;

use serde_yaml_ng::Value;

use crate::support::cli::{stderr, stdout, talosprov};
use crate::support::fakepve::{FakeOptions, FakePve, ROOT_TOKEN_ID, ROOT_TOKEN_SECRET};
use crate::support::fixtures::{copy_tree, repo};

const CLUSTERS: [&str; 2] = ["kwkd", "edge"];

fn fleet() -> PathBuf {
    repo().join("examples/fleet")
}

/// A copy of the fleet in a temporary folder (so plans write no state into
/// the repository).
fn copy() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    copy_tree(&fleet(), dir.path());
    dir
}

#[test]
fn both_clusters_validate_and_list_their_pools_and_shared_patches() {
    for name in CLUSTERS {
        let file = fleet().join(format!("clusters/{name}/cluster.yaml"));
        let out = talosprov()
            .env_remove("PROXMOX_VE_ENDPOINT")
            .env("NO_COLOR", "1")
            .args(["validate", "-f"])
            .arg(&file)
            .output()
            .expect("run talosprov");
        let text = stdout(&out);
        assert!(out.status.success(), "{name}:\n{}{text}", stderr(&out));
        assert!(text.contains("0 errors, 0 warnings"), "{text}");
        assert!(
            text.contains("examples/fleet/patches/common/10-time.yaml"),
            "{text}"
        );
        assert!(text.contains("\npool workers ("), "{text}");
    }
}

#[test]
fn the_pool_patches_see_their_pool_and_index() {
    let out = tempfile::tempdir().expect("temp dir");
    let status = talosprov()
        .env_remove("PROXMOX_VE_ENDPOINT")
        .args(["render", "-f"])
        .arg(fleet().join("clusters/kwkd/cluster.yaml"))
        .arg("--secrets")
        .arg(repo().join("tests/fixtures/secrets.yaml"))
        .arg("--out-dir")
        .arg(out.path())
        .output()
        .expect("run talosprov");
    assert!(status.status.success(), "{}", stderr(&status));
    let config = std::fs::read_to_string(out.path().join("kwkd-wk-2.yaml")).expect("config");
    assert!(config.contains("talosprov.dev/pool: workers"), "{config}");
    assert!(
        config.contains("talosprov.dev/member: '2'")
            || config.contains("talosprov.dev/member: \"2\""),
        "{config}"
    );
    assert!(config.contains("time.cloudflare.com"), "{config}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_clusters_plan_offline_and_against_proxmox() {
    let pve = FakePve::start(FakeOptions {
        nodes: vec!["pve2".to_owned(), "pve3".to_owned()],
        ..FakeOptions::default()
    })
    .await;
    let dir = copy();
    for name in CLUSTERS {
        let file = dir.path().join(format!("clusters/{name}/cluster.yaml"));
        let text = std::fs::read_to_string(&file).expect("topology");
        let text = text
            .replace("  endpoint: https://pve.example:8006\n", "")
            .replace(
                "  node: pve1\n",
                &format!("  node: pve1\n  ca_file: {}\n", pve.ca_file.display()),
            );
        std::fs::write(&file, text).expect("write");
        for refresh in ["-refresh=false", "-refresh=true"] {
            let out = talosprov()
                .env("PROXMOX_VE_ENDPOINT", &pve.url)
                .env(
                    "PROXMOX_VE_API_TOKEN",
                    format!("{ROOT_TOKEN_ID}={ROOT_TOKEN_SECRET}"),
                )
                .env("NO_COLOR", "1")
                .args(["plan", refresh, "-f"])
                .arg(&file)
                .output()
                .expect("run talosprov");
            let text = stdout(&out);
            assert!(
                out.status.success(),
                "{name} {refresh}:\n{}{text}",
                stderr(&out)
            );
            assert!(text.contains("pool workers: 0 -> "), "{text}");
            assert!(text.contains("Plan: "), "{text}");
            // Each cluster's state is its own: a plan writes none.
            assert!(!file.with_file_name("talosprov.tfstate").exists());
        }
    }
}

fn pipeline() -> Value {
    let text = std::fs::read_to_string(fleet().join(".gitlab-ci.yml")).expect("pipeline");
    serde_yaml_ng::from_str(&text).expect("YAML")
}

#[test]
fn the_pipeline_has_one_set_of_jobs_per_cluster_each_with_its_own_state() {
    let doc = pipeline();
    let shared = &doc[".cluster"]["variables"]["TF_HTTP_ADDRESS"];
    assert_eq!(
        shared.as_str(),
        Some("${CI_API_V4_URL}/projects/${CI_PROJECT_ID}/terraform/state/${CLUSTER}")
    );
    for name in CLUSTERS {
        for job in ["validate", "plan", "apply"] {
            let j = &doc[format!("{job}:{name}").as_str()];
            assert_eq!(
                j["variables"]["CLUSTER"].as_str(),
                Some(name),
                "{job}:{name}"
            );
            let changes: Vec<&str> = j["rules"][0]["changes"]
                .as_sequence()
                .unwrap_or_else(|| panic!("{job}:{name} has rules.changes"))
                .iter()
                .filter_map(Value::as_str)
                .collect();
            assert!(
                changes.contains(&format!("clusters/{name}/**/*").as_str()),
                "{changes:?}"
            );
            assert!(changes.contains(&"patches/**/*"), "{changes:?}");
            let other = CLUSTERS.iter().find(|c| **c != name).expect("other");
            assert!(
                !changes.iter().any(|c| c.contains(other)),
                "{job}:{name} runs for {other}'s changes"
            );
        }
        assert_eq!(
            doc[format!("apply:{name}").as_str()]["rules"][0]["when"].as_str(),
            Some("manual")
        );
    }
}
