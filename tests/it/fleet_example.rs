//! examples/fleet: two clusters sharing a patch root, each with its own state
//! and pools. Both validate, plan offline, and plan against Proxmox (fakepve
//! with three hosts); the GitLab pipeline includes the CI/CD component once per
//! cluster, giving one set of jobs per cluster, each against the state named
//! after its cluster, triggered by its own folder or the shared patches, with
//! apply by hand.

use std::path::PathBuf;

use serde_yaml_ng::{Mapping, Value};

use crate::gitlab_ci_example::{COMPONENT_JOBS, component_jobs};
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

/// The jobs the fleet pipeline gets: each include of the CI/CD component
/// interpolated with its inputs, as GitLab does, then the pipeline's own keys.
fn merged_jobs(doc: &Value) -> Mapping {
    let mut jobs = Mapping::new();
    for include in doc["include"].as_sequence().expect("include list") {
        let inputs = include["inputs"].as_mapping().expect("include inputs");
        for (name, job) in component_jobs(inputs) {
            assert!(
                jobs.insert(name.clone(), job).is_none(),
                "two includes define {name:?}: give each its own job_suffix"
            );
        }
    }
    for (name, value) in doc.as_mapping().expect("mapping") {
        if name.as_str() != Some("include") {
            jobs.insert(name.clone(), value.clone());
        }
    }
    jobs
}

#[test]
fn the_pipeline_has_one_set_of_jobs_per_cluster_each_with_its_own_state() {
    let doc = pipeline();
    let includes = doc["include"].as_sequence().expect("include list");
    assert_eq!(includes.len(), CLUSTERS.len(), "one include per cluster");
    for (include, name) in includes.iter().zip(CLUSTERS) {
        let component = include["component"].as_str().expect("a component include");
        assert_eq!(
            component,
            format!(
                "$CI_SERVER_FQDN/talosprov/talosprov/talosprov@{}",
                env!("CARGO_PKG_VERSION")
            )
        );
        assert_eq!(
            include["inputs"]["root_dir"].as_str(),
            Some(format!("clusters/{name}").as_str())
        );
        assert_eq!(include["inputs"]["state_name"].as_str(), Some(name));
    }
    // Nothing compiled: the component's jobs run the published image.
    let text = std::fs::read_to_string(fleet().join(".gitlab-ci.yml")).expect("pipeline");
    assert!(!text.contains("cargo"), "{text}");
    assert!(doc.get("build").is_none(), "a build job");

    let jobs = merged_jobs(&doc);
    let job = |key: &str| -> &Value { jobs.get(key).unwrap_or_else(|| panic!("no job {key}")) };
    let stages: Vec<&str> = job("stages")
        .as_sequence()
        .expect("stages")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for name in CLUSTERS {
        let shared = job(&format!(".talosprov-component:{name}"));
        assert_eq!(
            shared["variables"]["TF_HTTP_ADDRESS"].as_str(),
            Some(
                format!("${{CI_API_V4_URL}}/projects/${{CI_PROJECT_ID}}/terraform/state/{name}")
                    .as_str()
            )
        );
        assert_eq!(
            shared["variables"]["TALOSPROV_TOPOLOGY"].as_str(),
            Some(format!("clusters/{name}/cluster.yaml").as_str())
        );
        let other = CLUSTERS.iter().find(|c| **c != name).expect("other");
        for kind in COMPONENT_JOBS {
            let key = format!("{kind}:{name}");
            let j = job(&key);
            assert_eq!(
                j["extends"].as_str(),
                Some(format!(".talosprov-component:{name}").as_str()),
                "{key}"
            );
            let stage = j["stage"].as_str().expect("stage");
            assert!(
                stages.contains(&stage),
                "{key}: stage {stage} not in {stages:?}"
            );
            // The scheduled jobs run for no change.
            if kind == "drift" || kind == "backup" {
                continue;
            }
            let changes: Vec<&str> = j["rules"]
                .as_sequence()
                .unwrap_or_else(|| panic!("{key} has rules"))
                .iter()
                .filter_map(|rule| rule.get("changes").and_then(Value::as_sequence))
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            assert!(
                changes.contains(&format!("clusters/{name}/**/*").as_str()),
                "{key}: {changes:?}"
            );
            assert!(changes.contains(&"patches/**/*"), "{key}: {changes:?}");
            assert!(
                !changes.iter().any(|c| c.contains(other)),
                "{key} runs for {other}'s changes"
            );
        }
        let plan = job(&format!("plan:{name}"));
        assert_eq!(
            plan["needs"][0]["job"].as_str(),
            Some(format!("validate:{name}").as_str())
        );
        let apply = job(&format!("apply:{name}"));
        assert_eq!(
            apply["resource_group"].as_str(),
            Some(format!("talosprov-{name}").as_str())
        );
        assert_eq!(
            apply["needs"][0]["job"].as_str(),
            Some(format!("plan:{name}").as_str())
        );
        for rule in apply["rules"].as_sequence().expect("apply rules") {
            let when = rule["when"].as_str();
            assert!(when == Some("manual") || when == Some("never"), "{rule:?}");
            if when == Some("manual") {
                assert!(
                    rule["if"]
                        .as_str()
                        .is_some_and(|c| c.starts_with("$CI_COMMIT_BRANCH == $CI_DEFAULT_BRANCH")),
                    "{rule:?}"
                );
            }
        }
    }
}
