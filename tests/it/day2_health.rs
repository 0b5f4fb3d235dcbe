//! `talosprov health` run as a user would, against a simulated cluster: the node
//! list from the topology, the talosconfig from the state, each check printed, and
//! exit 1 naming the failing checks.

use crate::support::cli::talosprov;
use crate::support::day2_cluster;

use std::path::Path;
use std::time::Duration;

use base64::Engine as _;
use day2_cluster::TestCluster;
use talosprov_backend::local::LocalBackend;
use talosprov_backend::store::StateStore;
use talosprov_statefile::format::Output as StateOutput;
use talosprov_statefile::format::State;

/// A topology naming `cp-1` at `<prefix>.121` and `w-1` at `<prefix>.122`.
fn topology(prefix: &str, talos_version: &str) -> String {
    format!(
        "cluster:\n  name: lab\n  talos_version: {talos_version}\n  gateway: {prefix}.254\nproxmox:\n  endpoint: https://127.0.0.1:8006\n  node: pve\n  datastore: local-lvm\nnodes:\n  - hostname: cp-1\n    ip: {prefix}.121\n    cores: 2\n    memory: 4096\n  - hostname: w-1\n    ip: {prefix}.122\n    role: worker\n    cores: 2\n    memory: 2048\n"
    )
}

/// Writes the topology and a state holding the cluster's talosconfig and a
/// control-plane machine config with CNI `none`.
async fn write_files(dir: &Path, cluster: &TestCluster, topology: &str) {
    std::fs::write(dir.join("cluster.yaml"), topology).unwrap();
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let admin = &cluster.pki.admin;
    let talosconfig = format!(
        "context: lab\ncontexts:\n  lab:\n    endpoints:\n      - {ip}\n    ca: {ca}\n    crt: {crt}\n    key: {key}\n",
        ip = cluster.node("cp-1").ip,
        ca = b64(&admin.ca_pem),
        crt = b64(&admin.crt_pem),
        key = b64(admin.key_pem.expose()),
    );
    let mut state = State::new(uuid::Uuid::from_u128(8));
    state.outputs.talosconfig = Some(StateOutput::sensitive(talosconfig));
    state.outputs.machineconfigs.insert(
        "cp-1".into(),
        StateOutput::sensitive(
            "machine:\n  type: controlplane\ncluster:\n  network:\n    cni:\n      name: none\n",
        ),
    );
    let store = StateStore::new(LocalBackend::new(dir.join("talosprov.tfstate")), None);
    store.save(&mut state, false).await.unwrap();
}

/// Runs `talosprov health` in `dir` (off the runtime, so the simulator keeps serving)
/// and returns its exit code, stdout and stderr in one text.
async fn health(dir: &Path, cluster: &TestCluster, args: &[&str]) -> (i32, String) {
    let key_pem = cluster.pki.admin.key_pem.expose().to_string();
    let key_b64 = base64::engine::general_purpose::STANDARD.encode(&key_pem);
    let dir = dir.to_path_buf();
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let output = tokio::task::spawn_blocking(move || {
        talosprov()
            .current_dir(&dir)
            .env_clear()
            .arg("health")
            .args(&args)
            .timeout(Duration::from_secs(120))
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let code = output.status.code().unwrap_or(-1);
    // Neither the client key nor its base64 form is ever printed.
    for secret in [&key_pem, &key_b64] {
        for line in secret
            .lines()
            .filter(|l| l.len() > 20 && !l.starts_with("-----"))
        {
            assert!(!String::from_utf8_lossy(&output.stdout).contains(line));
            assert!(!String::from_utf8_lossy(&output.stderr).contains(line));
        }
    }
    let text = format!(
        "exit: {code}\n--- stdout\n{}--- stderr\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (code, text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthy_cluster_passes_every_check_and_skips_the_cni_ones() {
    let cluster = TestCluster::start_from("127.78.8", 121, 1, 1, "v1.13.8").await;
    let dir = tempfile::tempdir().unwrap();
    write_files(dir.path(), &cluster, &topology("127.78.8", "v1.13.8")).await;
    let (code, text) = health(
        dir.path(),
        &cluster,
        &["-f", "cluster.yaml", "--wait", "30s"],
    )
    .await;
    assert_eq!(code, 0, "{text}");
    insta::assert_snapshot!(text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unhealthy_cluster_fails_naming_each_failing_check_and_node() {
    let cluster = TestCluster::start_from("127.78.10", 121, 1, 1, "v1.13.8").await;
    // etcd on the control plane lost its member, the worker does not answer, and
    // the topology expects a newer Talos.
    let cp = cluster.sim.node(cluster.node("cp-1").ip).unwrap();
    cp.lose_etcd_member();
    let worker = cluster.sim.node(cluster.node("w-1").ip).unwrap();
    worker.refuse_connections_for(Duration::from_secs(600));
    let dir = tempfile::tempdir().unwrap();
    write_files(dir.path(), &cluster, &topology("127.78.10", "v1.13.9")).await;
    let (code, text) = health(dir.path(), &cluster, &["-f", "cluster.yaml"]).await;
    assert_eq!(code, 1, "{text}");
    insta::assert_snapshot!(text);
}

#[test]
fn health_help_says_where_the_nodes_and_credentials_come_from() {
    let output = talosprov()
        .env_clear()
        .args(["health", "--help"])
        .output()
        .unwrap();
    assert!(output.status.success());
    insta::assert_snapshot!(String::from_utf8_lossy(&output.stdout));
}

/// `talosprov args` in an empty folder with only `env`: exit code and stderr.
fn in_empty_folder(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let out = talosprov()
        .current_dir(dir.path())
        .env_clear()
        .envs(env.iter().copied())
        .args(args)
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn health_wait_takes_a_duration_as_every_duration_flag_and_variable_does() {
    // Accepted: the run gets past its flags, to the missing topology.
    for wait in ["5m", "300", "1h30m", "90s", "0"] {
        let (code, stderr) = in_empty_folder(&["health", "--wait", wait], &[]);
        assert_eq!(code, Some(1), "--wait {wait}: {stderr}");
        assert!(
            stderr.contains("cannot read the topology file cluster.yaml"),
            "--wait {wait}: {stderr}"
        );
    }
    // Refused, each with the same words.
    let expected = "not a number of seconds nor a duration such as 30s, 5m or 1h30m";
    for (flag, args) in [
        ("--wait <DURATION>", &["health", "--wait", "5x"][..]),
        ("--wait <DURATION>", &["health", "--wait", "soon"][..]),
        (
            "--lock-timeout <DURATION>",
            &["plan", "-lock-timeout", "5x"][..],
        ),
    ] {
        let (code, stderr) = in_empty_folder(args, &[]);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        let value = args[2];
        assert!(
            stderr.contains(&format!("invalid value '{value}' for '{flag}': {expected}")),
            "{args:?}: {stderr}"
        );
    }
    for var in [
        "TALOSPROV_READY_WAIT",
        "TALOSPROV_ROLLOUT_WAIT",
        "TALOSPROV_INTERRUPT_GRACE",
    ] {
        let (code, stderr) = in_empty_folder(&["apply"], &[(var, "5x")]);
        assert_eq!(code, Some(1), "{var}: {stderr}");
        assert!(
            stderr.contains(&format!("{var}=\"5x\" is {expected}")),
            "{var}: {stderr}"
        );
    }
}
