//! A `phase: cluster` add-on kept converged through server-side apply, against
//! the lab's simulated cluster, with real kubectl as the independent client:
//! it is applied after the bootstrap (namespace first), a changed manifest
//! shows its objects' field diffs (a Secret's data redacted) and converges
//! without touching a VM or a machine config, an object deleted or edited by
//! hand is drift that apply repairs, a manifest's object removed is pruned,
//! and every plan after an apply shows no changes.

use std::time::Duration;

use crate::support::kubectl::{kubectl, kubectl_output, lab_kubeconfig};
use crate::support::lab::{Lab, change_lines};

/// The add-on's manifest: a ConfigMap, a Secret and a Deployment.
fn manifest(greeting: &str, password: &str, with_configmap: bool) -> String {
    let configmap = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  greeting: \
         {greeting}\n---\n"
    );
    format!(
        "{}apiVersion: v1\nkind: Secret\nmetadata:\n  name: credentials\nstringData:\n  \
         password: {password}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: \
         web\nspec:\n  replicas: 2\n  selector:\n    matchLabels: {{app: web}}\n  template:\n    \
         metadata:\n      labels: {{app: web}}\n    spec:\n      containers:\n        - name: \
         web\n          image: registry.k8s.io/pause:3.10\n",
        if with_configmap {
            configmap.as_str()
        } else {
            ""
        }
    )
}

const DEMO: &str = "  demo:\n    manifests: [addons/demo.yaml]\n    namespace: demo\n    \
                    namespace_labels: {team: web}\n    depends_on: [lab-cni]\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_addon_is_applied_kept_converged_repaired_and_pruned() {
    let lab = Lab::start("15.8", Duration::from_millis(100)).await;
    let file = lab.dir.path().join("addons/demo.yaml");
    std::fs::write(&file, manifest("hello", "s3cr3t-one", true)).expect("manifest");
    lab.write_topology(|t| format!("{t}{DEMO}"));
    lab.import_secrets().await;

    // The first apply: the cluster, then the add-ons' objects after the
    // bootstrap, the demo namespace (with its label) before its objects.
    let text = lab.apply_text().await;
    assert!(text.contains("+ addon/demo/Namespace/demo"), "{text}");
    assert!(!text.contains("s3cr3t"), "a secret in the plan:\n{text}");
    let kubeconfig = lab_kubeconfig(&lab).await;
    let ns: serde_json::Value = serde_json::from_str(&kubectl(
        &kubeconfig,
        &["get", "namespace", "demo", "-o", "json"],
    ))
    .expect("namespace");
    assert_eq!(ns["metadata"]["labels"]["team"], "web", "{ns:#}");
    let cm: serde_json::Value = serde_json::from_str(&kubectl(
        &kubeconfig,
        &[
            "get",
            "configmap",
            "settings",
            "-n",
            "demo",
            "-o",
            "json",
            "--show-managed-fields",
        ],
    ))
    .expect("configmap");
    assert_eq!(cm["data"]["greeting"], "hello");
    let managers: Vec<&str> = cm["metadata"]["managedFields"]
        .as_array()
        .expect("managedFields")
        .iter()
        .filter_map(|m| m["manager"].as_str())
        .collect();
    assert_eq!(managers, ["talosprov"], "{cm:#}");
    let rollout = kubectl(
        &kubeconfig,
        &[
            "rollout",
            "status",
            "deployment/web",
            "-n",
            "demo",
            "--timeout=5s",
        ],
    );
    assert!(rollout.contains("successfully rolled out"), "{rollout}");
    let state = lab.state();
    assert!(
        state
            .resources
            .objects
            .contains_key("demo/ConfigMap/demo/settings")
    );
    assert!(state.resources.objects.contains_key("demo/Namespace/demo"));
    // The bootstrap add-ons are talosprov's too, once applied.
    assert!(
        state
            .resources
            .objects
            .contains_key("lab-cni/DaemonSet.apps/kube-system/lab-cni")
    );
    let text = lab.plan_text().await;
    assert!(change_lines(&text).is_empty(), "a second plan:\n{text}");
    assert!(text.contains("No changes."), "{text}");

    // A changed manifest: field diffs, the Secret's redacted; only objects.
    std::fs::write(&file, manifest("bonjour", "s3cr3t-two", true)).expect("manifest");
    let text = lab.plan_text().await;
    assert_eq!(
        change_lines(&text),
        [
            "~ addon/demo/ConfigMap/demo/settings",
            "~ addon/demo/Secret/demo/credentials"
        ],
        "{text}"
    );
    assert!(text.contains("data.greeting"), "{text}");
    assert!(
        text.contains("\"hello\" -> \"bonjour\"") || text.contains("hello -> bonjour"),
        "{text}"
    );
    assert!(!text.contains("s3cr3t"), "a secret in the plan:\n{text}");
    assert!(text.contains("(sensitive)"), "{text}");
    let text = lab.apply_text().await;
    assert!(text.contains("0 added, 2 changed, 0 destroyed"), "{text}");
    let greeting = kubectl(
        &kubeconfig,
        &[
            "get",
            "configmap",
            "settings",
            "-n",
            "demo",
            "-o",
            "jsonpath={.data.greeting}",
        ],
    );
    assert_eq!(greeting, "bonjour");
    assert!(change_lines(&lab.plan_text().await).is_empty());

    // Deleted by hand: drift, and apply creates it again.
    kubectl(
        &kubeconfig,
        &["delete", "configmap", "settings", "-n", "demo"],
    );
    let text = lab.plan_text().await;
    assert_eq!(
        change_lines(&text),
        ["+ addon/demo/ConfigMap/demo/settings"],
        "{text}"
    );
    assert!(text.contains("deleted outside talosprov"), "{text}");
    lab.apply_text().await;
    kubectl(&kubeconfig, &["get", "configmap", "settings", "-n", "demo"]);

    // Edited by hand (another field manager, forcing): drift with the field,
    // and apply takes the field back.
    let edited = lab.dir.path().join("edited.yaml");
    std::fs::write(
        &edited,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: demo\ndata:\n  greeting: hallo\n",
    )
    .expect("edit");
    let edited = edited.to_string_lossy().into_owned();
    kubectl(
        &kubeconfig,
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager",
            "hand",
            "-f",
            &edited,
        ],
    );
    let text = lab.plan_text().await;
    assert_eq!(
        change_lines(&text),
        ["~ addon/demo/ConfigMap/demo/settings"],
        "{text}"
    );
    assert!(text.contains("edited outside talosprov"), "{text}");
    assert!(text.contains("hallo"), "{text}");
    lab.apply_text().await;
    let greeting = kubectl(
        &kubeconfig,
        &[
            "get",
            "configmap",
            "settings",
            "-n",
            "demo",
            "-o",
            "jsonpath={.data.greeting}",
        ],
    );
    assert_eq!(greeting, "bonjour");
    assert!(change_lines(&lab.plan_text().await).is_empty());

    // The ConfigMap leaves the manifest: pruned.
    std::fs::write(&file, manifest("bonjour", "s3cr3t-two", false)).expect("manifest");
    let text = lab.plan_text().await;
    assert_eq!(
        change_lines(&text),
        ["- addon/demo/ConfigMap/demo/settings"],
        "{text}"
    );
    let text = lab.apply_text().await;
    assert!(text.contains("0 added, 0 changed, 1 destroyed"), "{text}");
    let gone = kubectl_output(&kubeconfig, &["get", "configmap", "settings", "-n", "demo"]);
    assert!(!gone.status.success());
    assert!(String::from_utf8_lossy(&gone.stderr).contains("NotFound"));
    assert!(
        !lab.state()
            .resources
            .objects
            .contains_key("demo/ConfigMap/demo/settings")
    );

    // The whole add-on removed: its objects pruned, its namespace last.
    lab.write_topology(|t| t);
    let text = lab.plan_text().await;
    let lines = change_lines(&text);
    assert_eq!(lines.len(), 3, "{text}");
    assert_eq!(lines[2], "- addon/demo/Namespace/demo", "{text}");
    lab.apply_text().await;
    let gone = kubectl_output(&kubeconfig, &["get", "namespace", "demo"]);
    assert!(!gone.status.success());
    assert!(change_lines(&lab.plan_text().await).is_empty());

    // A bootstrap add-on's change: its object is applied, and the control
    // plane's inline manifest follows (Talos applies it at once, no reboot),
    // so that a later Kubernetes upgrade does not roll the CNI back.
    let cni = lab.dir.path().join("addons/lab-cni.yaml.j2");
    let text = std::fs::read_to_string(&cni).expect("lab-cni");
    std::fs::write(&cni, text.replace("pause:3.10", "pause:3.11")).expect("write");
    let text = lab.plan_text().await;
    assert_eq!(
        change_lines(&text),
        [
            "~ config/talos-controlplane-01",
            "~ addon/lab-cni/DaemonSet.apps/kube-system/lab-cni"
        ],
        "{text}"
    );
    assert!(
        text.contains(
            "~ spec.template.spec.containers[0].image = registry.k8s.io/pause:3.10 -> \
             registry.k8s.io/pause:3.11"
        ),
        "{text}"
    );
    assert!(text.contains("Talos: 1 config to apply"), "{text}");
    assert!(text.contains("(applied without a reboot)"), "{text}");
    assert!(
        !text.contains("Warning"),
        "talosprov applies the add-on itself:\n{text}"
    );
    lab.apply_text().await;
    let image = kubectl(
        &kubeconfig,
        &[
            "get",
            "daemonset",
            "lab-cni",
            "-n",
            "kube-system",
            "-o",
            "jsonpath={.spec.template.spec.containers[0].image}",
        ],
    );
    assert!(image.ends_with("pause:3.11"), "{image}");
    assert!(change_lines(&lab.plan_text().await).is_empty());
}

/// The `policy` add-on: a CRD, an object of its kind, and a ConfigMap.
fn policy_manifest(extra: &str) -> String {
    format!(
        "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: \
         widgets.example.com\nspec:\n  group: example.com\n  names:\n    kind: Widget\n    \
         plural: widgets\n    singular: widget\n  scope: Namespaced\n  versions:\n    - name: v1\n      \
         served: true\n      storage: true\n      schema:\n        openAPIV3Schema:\n          type: \
         object\n          x-kubernetes-preserve-unknown-fields: true\n---\napiVersion: \
         example.com/v1\nkind: Widget\nmetadata:\n  name: gear\nspec:\n  teeth: 12\n---\napiVersion: \
         v1\nkind: ConfigMap\nmetadata:\n  name: settings\ndata:\n  mode: fast\n{extra}"
    )
}

const POLICY: &str = "  policy:\n    manifests: [addons/policy.yaml]\n    namespace: widgets\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crds_conflicts_rollout_deadlines_and_saved_plans_of_addon_objects() {
    let mut lab = Lab::start("15.9", Duration::from_millis(100)).await;
    let file = lab.dir.path().join("addons/policy.yaml");
    std::fs::write(&file, policy_manifest("")).expect("manifest");
    lab.write_topology(|t| format!("{t}{POLICY}"));
    lab.import_secrets().await;

    // A CRD and an object of its kind in one apply: the CRD first, until
    // Established, then the object.
    let text = lab.apply_text().await;
    assert!(
        text.contains(
            "+ addon/policy/CustomResourceDefinition.apiextensions.k8s.io/widgets.example.com"
        ),
        "{text}"
    );
    let kubeconfig = lab_kubeconfig(&lab).await;
    let widgets = kubectl(
        &kubeconfig,
        &["get", "widgets", "-n", "widgets", "-o", "name"],
    );
    assert_eq!(widgets, "widget.example.com/gear\n");
    assert!(change_lines(&lab.plan_text().await).is_empty());

    // An object someone else made, with other values: held back, untouched.
    let theirs = lab.dir.path().join("theirs.yaml");
    std::fs::write(
        &theirs,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: taken\n  namespace: widgets\ndata:\n  owner: them\n",
    )
    .expect("write");
    let theirs = theirs.to_string_lossy().into_owned();
    kubectl(
        &kubeconfig,
        &[
            "apply",
            "--server-side",
            "--field-manager",
            "someone",
            "-f",
            &theirs,
        ],
    );
    std::fs::write(
        &file,
        policy_manifest(
            "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: taken\ndata:\n  owner: us\n",
        ),
    )
    .expect("manifest");
    let text = lab.plan_text().await;
    assert!(change_lines(&text).is_empty(), "{text}");
    assert!(
        text.contains("Warning: addon/policy/ConfigMap/widgets/taken: not applied")
            && text.contains("someone"),
        "{text}"
    );
    lab.apply_text().await;
    let owner = kubectl(
        &kubeconfig,
        &[
            "get",
            "configmap",
            "taken",
            "-n",
            "widgets",
            "-o",
            "jsonpath={.data.owner}",
        ],
    );
    assert_eq!(owner, "them");
    kubectl(
        &kubeconfig,
        &["delete", "configmap", "taken", "-n", "widgets"],
    );
    std::fs::write(&file, policy_manifest("")).expect("manifest");

    // A saved plan is applied only while the cluster is as it showed.
    std::fs::write(
        &file,
        policy_manifest("").replace("mode: fast", "mode: slow"),
    )
    .expect("manifest");
    let saved = lab.dir.path().join("policy.plan");
    let saved = saved.to_string_lossy().into_owned();
    assert!(lab.run(&["plan", "-out", &saved]).await.status.success());
    kubectl(
        &kubeconfig,
        &["delete", "configmap", "settings", "-n", "widgets"],
    );
    let out = lab.run(&["apply", &saved]).await;
    assert!(
        !out.status.success(),
        "a saved plan applied over a changed cluster"
    );
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        err.contains("addon/policy/ConfigMap/widgets/settings")
            && err.contains("nothing was changed"),
        "{err}"
    );
    assert!(lab.run(&["plan", "-out", &saved]).await.status.success());
    let out = lab.run(&["apply", &saved]).await;
    assert!(out.status.success(), "the saved plan");
    let mode = kubectl(
        &kubeconfig,
        &[
            "get",
            "configmap",
            "settings",
            "-n",
            "widgets",
            "-o",
            "jsonpath={.data.mode}",
        ],
    );
    assert_eq!(mode, "slow");

    // A workload that never rolls out fails apply at its named deadline; the
    // object itself was applied, and is recorded.
    std::fs::write(
        &file,
        policy_manifest(
            "---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: slow\n  annotations:\n    \
             talos-sim.talosprov.dev/rollout: stuck\nspec:\n  selector:\n    matchLabels: {app: \
             slow}\n  template:\n    metadata:\n      labels: {app: slow}\n    spec:\n      \
             containers:\n        - name: slow\n          image: registry.k8s.io/pause:3.10\n",
        )
        .replace("mode: fast", "mode: slow"),
    )
    .expect("manifest");
    lab.env
        .push(("TALOSPROV_ROLLOUT_WAIT".to_owned(), "2s".to_owned()));
    let out = lab.run(&["apply", "-auto-approve"]).await;
    assert!(!out.status.success(), "a stuck rollout");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        err.contains(
            "rollout of Deployment widgets/slow: not done within the rollout deadline of 2 s"
        ),
        "{err}"
    );
    assert!(
        lab.state()
            .resources
            .objects
            .contains_key("policy/Deployment.apps/widgets/slow")
    );
}
