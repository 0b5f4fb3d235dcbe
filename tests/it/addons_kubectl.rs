//! Real kubectl, with the kubeconfig `talosprov output kubeconfig` gives, against the
//! lab's simulated cluster after one apply: the bootstrap add-ons (the lab's CNI and
//! the NVIDIA device plugin, in the control plane's inline manifests) were applied
//! when etcd was bootstrapped, so every node is Ready and only the GPU node has
//! `nvidia.com/gpu: 1`; `talosprov health` (through kube-rs) agrees. Then kubectl
//! writes with its default flags: server-side apply with two field managers (a
//! conflict, then forced), a server dry run, a label, a CRD and an object of its kind,
//! client-side apply (a create, then a strategic merge patch), deletes (the CNI's
//! DaemonSet gone, the nodes are NotReady). kubectl is the independent client: a
//! missing kubectl fails the test with how to install it.

use std::time::Duration;

use crate::support::cli::stdout;
use crate::support::kubectl::{kubectl, kubectl_output, lab_kubeconfig};
use crate::support::lab::Lab;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_apply_kubectl_sees_every_node_ready_and_the_gpu_allocatable() {
    let lab = Lab::start("15.2", Duration::from_millis(100)).await;
    lab.import_secrets().await;
    let out = lab.run(&["apply", "-auto-approve"]).await;
    assert!(out.status.success(), "apply failed");
    // Apply's final gate waited for the nodes, and shows them.
    let text = stdout(&out);
    let table = text
        .split("\nKubernetes nodes:\n")
        .nth(1)
        .unwrap_or_else(|| panic!("the node table:\n{text}"));
    // The table, then a blank line and `Apply complete!`, which comes last.
    let (table, rest) = table.split_once("\n\n").expect("a line after the table");
    assert!(rest.starts_with("Apply complete! "), "{text}");
    let rows: Vec<&str> = table.lines().collect();
    assert_eq!(rows.len(), 4, "{table}");
    assert!(
        rows[0].starts_with("NAME") && rows[0].ends_with("GPU"),
        "{table}"
    );
    assert_eq!(
        rows[1..].iter().filter(|r| r.contains(" Ready ")).count(),
        3,
        "{table}"
    );
    assert!(rows[3].ends_with(&format!("{}   1", lab.ips[2])), "{table}");
    let kubeconfig = lab_kubeconfig(&lab).await;

    let nodes: serde_json::Value =
        serde_json::from_str(&kubectl(&kubeconfig, &["get", "nodes", "-o", "json"]))
            .expect("kubectl JSON");
    let items = nodes["items"].as_array().expect("items");
    assert_eq!(items.len(), 3, "{nodes:#}");
    // Each node is named after its VM (the topology's hostname), as nocloud names
    // it, and registered just now.
    let mut names: Vec<&str> = items
        .iter()
        .map(|n| n["metadata"]["name"].as_str().expect("name"))
        .collect();
    names.sort_unstable();
    assert_eq!(
        names,
        ["talos-controlplane-01", "talos-gpu-01", "talos-worker-01"]
    );
    let wide = kubectl(&kubeconfig, &["get", "nodes", "--no-headers"]);
    for row in wide.lines() {
        let age = row.split_whitespace().nth(3).expect("AGE");
        assert!(age.ends_with('s'), "registered seconds ago: {row}");
    }
    for n in items {
        let ip = n["status"]["addresses"][0]["address"]
            .as_str()
            .expect("address");
        let ready = n["status"]["conditions"]
            .as_array()
            .expect("conditions")
            .iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        assert!(ready, "{ip} is not Ready: {n:#}");
        let gpu = n["status"]["allocatable"]["nvidia.com/gpu"].as_str();
        if ip == lab.ips[2] {
            assert_eq!(gpu, Some("1"), "the GPU node: {n:#}");
        } else {
            assert_eq!(gpu, None, "{ip}: {n:#}");
        }
    }

    // The human view, and the add-ons' DaemonSets, as an operator would look.
    let table = kubectl(&kubeconfig, &["get", "nodes"]);
    assert_eq!(table.matches(" Ready ").count(), 3, "{table}");
    assert!(table.contains("control-plane"), "{table}");
    let daemonsets = kubectl(
        &kubeconfig,
        &["get", "daemonsets", "-n", "kube-system", "-o", "name"],
    );
    assert_eq!(
        daemonsets,
        "daemonset.apps/lab-cni\ndaemonset.apps/nvidia-device-plugin-daemonset\n"
    );

    // talosprov's own health check asks the same API.
    let out = lab.run(&["health"]).await;
    assert!(out.status.success(), "health failed");
    let text = stdout(&out);
    assert!(
        text.contains("all k8s nodes to report ready: 3 nodes registered and Ready\n"),
        "{text}"
    );
    assert!(
        text.contains(
            "GPU nodes to have nvidia.com/gpu allocatable: nvidia.com/gpu allocatable on 1 node\n"
        ),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_cni_addon_the_nodes_stay_not_ready() {
    let lab = Lab::start("15.3", Duration::from_millis(100)).await;
    lab.write_topology(|t| t[..t.find("addons:\n").expect("addons")].to_owned());
    lab.import_secrets().await;
    assert!(lab.run(&["apply", "-auto-approve"]).await.status.success());
    let kubeconfig = lab_kubeconfig(&lab).await;
    let table = kubectl(&kubeconfig, &["get", "nodes"]);
    assert_eq!(table.matches(" NotReady ").count(), 3, "{table}");
    // health skips the Kubernetes checks, saying why, as before.
    let out = lab.run(&["health"]).await;
    assert!(out.status.success(), "health failed");
    assert!(stdout(&out).contains("CNI is none"), "{}", stdout(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apply_fails_its_final_gate_when_the_gpu_never_becomes_allocatable() {
    let mut lab = Lab::start("15.4", Duration::from_millis(100)).await;
    // The GPU node without the patch that loads the NVIDIA modules.
    std::fs::remove_dir_all(lab.dir.path().join("patches/nodes/talos-gpu-01")).expect("rm");
    lab.env
        .push(("TALOSPROV_READY_WAIT".to_owned(), "1".to_owned()));
    lab.import_secrets().await;
    let out = lab.run(&["apply", "-auto-approve"]).await;
    assert_eq!(out.status.code(), Some(1));
    let err = crate::support::cli::stderr(&out);
    assert!(
        err.contains("the changes are applied (Resources: 12 added, 0 changed, 0 destroyed. Talos: 3 configs applied, 1 bootstrap), but the cluster is not Ready after 1 s:"),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "talos-gpu-01 ({}): no nvidia.com/gpu allocatable",
            lab.ips[2],
        )),
        "{err}"
    );
    assert!(
        stdout(&out).contains("Kubernetes nodes:\n"),
        "the table is shown"
    );
    // Everything apply did is recorded: nothing is left to change.
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}

/// A lab after one apply, and the path of its admin kubeconfig.
async fn applied_lab(net: &str) -> (Lab, std::path::PathBuf) {
    let lab = Lab::start(net, Duration::from_millis(100)).await;
    lab.import_secrets().await;
    assert!(lab.run(&["apply", "-auto-approve"]).await.status.success());
    let kubeconfig = lab_kubeconfig(&lab).await;
    (lab, kubeconfig)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_server_side_apply_tracks_field_managers_and_conflicts() {
    let (lab, kubeconfig) = applied_lab("15.5").await;
    let file = lab.dir.path().join("settings.yaml");
    let write = |value: &str| {
        std::fs::write(
            &file,
            format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: default\n\
                 data:\n  key: \"{value}\"\n  mode: fast\n"
            ),
        )
        .expect("write the manifest")
    };
    let path = file.to_str().expect("UTF-8 path");
    write("1");
    let out = kubectl(&kubeconfig, &["apply", "--server-side", "-f", path]);
    assert_eq!(out, "configmap/settings serverside-applied\n");
    // The same config again is no change, and still succeeds.
    let out = kubectl(&kubeconfig, &["apply", "--server-side", "-f", path]);
    assert_eq!(out, "configmap/settings serverside-applied\n");

    // Another manager changing a value kubectl owns conflicts.
    write("2");
    let out = kubectl_output(
        &kubeconfig,
        &[
            "apply",
            "--server-side",
            "--field-manager",
            "other",
            "-f",
            path,
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a conflict is an error");
    assert!(err.contains("conflict"), "{err}");
    assert!(err.contains(".data.key"), "{err}");
    let cm: serde_json::Value = serde_json::from_str(&kubectl(
        &kubeconfig,
        &["get", "configmap", "settings", "-o", "json"],
    ))
    .expect("kubectl JSON");
    assert_eq!(cm["data"]["key"], "1", "{cm:#}");

    // Forced, it takes the field over; the unchanged one is shared.
    let out = kubectl(
        &kubeconfig,
        &[
            "apply",
            "--server-side",
            "--field-manager",
            "other",
            "--force-conflicts",
            "-f",
            path,
        ],
    );
    assert_eq!(out, "configmap/settings serverside-applied\n");
    let cm: serde_json::Value = serde_json::from_str(&kubectl(
        &kubeconfig,
        &[
            "get",
            "configmap",
            "settings",
            "-o",
            "json",
            "--show-managed-fields",
        ],
    ))
    .expect("kubectl JSON");
    assert_eq!(cm["data"]["key"], "2", "{cm:#}");
    let managed: Vec<(&str, &serde_json::Value)> = cm["metadata"]["managedFields"]
        .as_array()
        .expect("managedFields")
        .iter()
        .map(|e| (e["manager"].as_str().expect("manager"), &e["fieldsV1"]))
        .collect();
    assert_eq!(
        managed,
        vec![
            ("kubectl", &serde_json::json!({"f:data": {"f:mode": {}}})),
            (
                "other",
                &serde_json::json!({"f:data": {"f:key": {}, "f:mode": {}}})
            ),
        ],
        "{cm:#}"
    );
    for e in cm["metadata"]["managedFields"].as_array().expect("entries") {
        assert_eq!(e["operation"], "Apply", "{e}");
        assert_eq!(e["fieldsType"], "FieldsV1", "{e}");
    }

    // A server dry run changes nothing.
    write("3");
    let out = kubectl(
        &kubeconfig,
        &[
            "apply",
            "--server-side",
            "--field-manager",
            "other",
            "--dry-run=server",
            "-f",
            path,
        ],
    );
    assert_eq!(
        out,
        "configmap/settings serverside-applied (server dry run)\n"
    );
    let value = kubectl(
        &kubeconfig,
        &["get", "configmap", "settings", "-o", "jsonpath={.data.key}"],
    );
    assert_eq!(value, "2");
    // Other writes: a label (a merge patch).
    let out = kubectl(&kubeconfig, &["label", "configmap", "settings", "team=a"]);
    assert_eq!(out, "configmap/settings labeled\n");
    let names = kubectl(
        &kubeconfig,
        &["get", "configmaps", "-A", "-l", "team=a", "-o", "name"],
    );
    assert_eq!(names, "configmap/settings\n");
    // A body above the server's limit (8 MiB) is refused.
    std::fs::write(
        &file,
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: big\ndata:\n  blob: {}\n",
            "x".repeat(9 << 20)
        ),
    )
    .expect("write");
    let out = kubectl_output(&kubeconfig, &["apply", "--server-side", "-f", path]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.to_lowercase().contains("too large"), "{err}");

    // Deleted, it is gone.
    let out = kubectl(&kubeconfig, &["delete", "configmap", "settings"]);
    assert_eq!(out, "configmap \"settings\" deleted\n");
    let out = kubectl_output(&kubeconfig, &["get", "configmap", "settings"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("(NotFound): configmaps \"settings\" not found"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_applies_a_crd_its_objects_and_a_deployment_client_side() {
    let (lab, kubeconfig) = applied_lab("15.6").await;
    let crd = lab.dir.path().join("crd.yaml");
    std::fs::write(
        &crd,
        "apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          x-kubernetes-preserve-unknown-fields: true
",
    )
    .expect("write");
    let widget = lab.dir.path().join("widget.yaml");
    std::fs::write(
        &widget,
        "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: gear\nspec:\n  size: 3\n",
    )
    .expect("write");
    let out = kubectl(
        &kubeconfig,
        &["apply", "--server-side", "-f", crd.to_str().expect("UTF-8")],
    );
    assert_eq!(
        out,
        "customresourcedefinition.apiextensions.k8s.io/widgets.example.com serverside-applied\n"
    );
    let established = kubectl(
        &kubeconfig,
        &[
            "get",
            "crd",
            "widgets.example.com",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Established\")].status}",
        ],
    );
    assert_eq!(established, "True");
    let out = kubectl(
        &kubeconfig,
        &[
            "apply",
            "--server-side",
            "-f",
            widget.to_str().expect("UTF-8"),
        ],
    );
    assert_eq!(out, "widget.example.com/gear serverside-applied\n");
    let table = kubectl(&kubeconfig, &["get", "widgets"]);
    let rows: Vec<&str> = table.lines().collect();
    assert_eq!(rows.len(), 2, "{table}");
    assert!(
        rows[0].starts_with("NAME") && rows[0].contains("AGE"),
        "{table}"
    );
    assert!(rows[1].starts_with("gear "), "{table}");
    let names = kubectl(&kubeconfig, &["get", "widgets", "-A", "-o", "name"]);
    assert_eq!(names, "widget.example.com/gear\n");

    // Client-side apply (kubectl's default): a create, then a strategic merge patch.
    let file = lab.dir.path().join("client.yaml");
    let path = file.to_str().expect("UTF-8");
    let write = |image: &str| {
        std::fs::write(
            &file,
            format!(
                "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\nspec:\n  \
                 selector:\n    matchLabels: {{app: web}}\n  template:\n    metadata:\n      \
                 labels: {{app: web}}\n    spec:\n      containers:\n        - name: web\n          \
                 image: {image}\n"
            ),
        )
        .expect("write")
    };
    write("nginx:1");
    assert_eq!(
        kubectl(&kubeconfig, &["apply", "-f", path]),
        "deployment.apps/web created\n"
    );
    write("nginx:2");
    assert_eq!(
        kubectl(&kubeconfig, &["apply", "-f", path]),
        "deployment.apps/web configured\n"
    );
    let deployment: serde_json::Value = serde_json::from_str(&kubectl(
        &kubeconfig,
        &["get", "deployment", "web", "-o", "json"],
    ))
    .expect("kubectl JSON");
    let spec = &deployment["spec"]["template"]["spec"];
    assert_eq!(spec["containers"][0]["image"], "nginx:2", "{deployment:#}");
    assert_eq!(
        spec["containers"].as_array().map(Vec::len),
        Some(1),
        "{deployment:#}"
    );
    assert!(
        spec.as_object()
            .expect("spec")
            .keys()
            .all(|k| !k.starts_with('$')),
        "{deployment:#}"
    );
    assert_eq!(deployment["metadata"]["generation"], 2);
    assert_eq!(deployment["status"]["observedGeneration"], 2);
    assert_eq!(deployment["status"]["readyReplicas"], 1);

    // Without its CRD the kind, and its objects, are gone.
    kubectl(&kubeconfig, &["delete", "crd", "widgets.example.com"]);
    let out = kubectl_output(&kubeconfig, &["get", "widgets"]);
    assert!(
        !out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_cni_daemonset_makes_the_nodes_not_ready() {
    let (_lab, kubeconfig) = applied_lab("15.7").await;
    let table = kubectl(&kubeconfig, &["get", "nodes"]);
    assert_eq!(table.matches(" Ready ").count(), 3, "{table}");
    let out = kubectl(
        &kubeconfig,
        &["delete", "daemonset", "lab-cni", "-n", "kube-system"],
    );
    assert_eq!(out, "daemonset.apps \"lab-cni\" deleted\n");
    let table = kubectl(&kubeconfig, &["get", "nodes"]);
    assert_eq!(table.matches(" NotReady ").count(), 3, "{table}");
}
