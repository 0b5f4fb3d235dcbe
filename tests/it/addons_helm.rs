//! A `helm` add-on through plan and apply against the lab: rendered once by a
//! `helm` stand-in that checks its arguments (the Cilium preset's values in
//! its values file), recorded in the state with the digest of its inputs, and
//! put into the control plane's inline manifests; a second plan renders
//! nothing and changes nothing; changed values render again and change the
//! control plane's config only; a saved plan is applied without `helm`, and
//! `render` shows the recorded rendering.

use std::time::Duration;

use crate::support::cli::stdout;
use crate::support::fixtures::HELM_STAND_IN;
use crate::support::lab::Lab;

/// The lab topology with Cilium (preset, `phase: bootstrap`) instead of the
/// lab's own CNI add-on, with `values` as its chart values.
fn with_cilium(values: &'static str) -> impl Fn(String) -> String {
    move |t| {
        let start = t.find("addons:\n").expect("addons");
        format!(
            "{}addons:\n  cilium:\n    preset: cilium\n    helm:\n      repo: https://helm.cilium.io/\n      chart: cilium\n      version: 1.19.6\n      values: {values}\n",
            &t[..start]
        )
    }
}

/// What the stand-in must receive.
const EXPECT: &str = "template cilium cilium --repo https://helm.cilium.io --version 1.19.6 \
    --namespace kube-system --kube-version v1.36.2 --include-crds --values VALUES";

fn runs(lab: &Lab) -> usize {
    std::fs::read_to_string(lab.dir.path().join("helm.log"))
        .unwrap_or_default()
        .lines()
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chart_is_rendered_once_recorded_and_applied_inline() {
    let mut lab = Lab::start("15.1", Duration::from_millis(100)).await;
    let dir = lab.dir.path().to_path_buf();
    lab.env.extend([
        ("TALOSPROV_HELM".to_owned(), HELM_STAND_IN.to_owned()),
        ("HELM_STAND_IN_EXPECT".to_owned(), EXPECT.to_owned()),
        (
            "HELM_STAND_IN_LOG".to_owned(),
            dir.join("helm.log").display().to_string(),
        ),
        (
            "HELM_STAND_IN_VALUES".to_owned(),
            dir.join("values.yaml").display().to_string(),
        ),
    ]);
    lab.write_topology(with_cilium("{operator: {replicas: 1}}"));
    lab.import_secrets().await;
    let out = lab.run(&["apply", "-auto-approve"]).await;
    assert!(out.status.success(), "apply failed");
    assert_eq!(runs(&lab), 1, "one render for the apply");

    // The preset's values, under the user's, reached helm.
    let values: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&std::fs::read_to_string(dir.join("values.yaml")).expect("values"))
            .expect("values YAML");
    assert_eq!(
        values["kubeProxyReplacement"], true,
        "the lab's patches disable kube-proxy"
    );
    assert_eq!(values["k8sServicePort"], 7445);
    assert_eq!(values["operator"]["replicas"], 1);
    assert_eq!(values["ipam"]["mode"], "kubernetes");

    // Recorded, and applied in the control plane's inline manifests only.
    let state = lab.state();
    let rendering = &state.renderings["cilium"];
    assert!(rendering.manifests.expose().contains("kind: DaemonSet"));
    let applied = |host: &str| state.outputs.machineconfigs[host].value.expose().clone();
    let cp = applied("talos-controlplane-01");
    assert!(
        cp.contains("inlineManifests:\n        - name: cilium\n"),
        "{cp}"
    );
    assert!(
        cp.contains("kube-proxy-replacement: 'true'"),
        "values reached the chart:\n{cp}"
    );
    assert!(!applied("talos-worker-01").contains("inlineManifests"));
    let state_text = std::fs::read_to_string(lab.state_file()).expect("state");
    assert!(state_text.contains("\"renderings\""));

    // Nothing renders anew: the new CA the chart would make is not a change.
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert_eq!(runs(&lab), 1, "the recorded rendering was used");

    // New values render again, and change the control plane's config only.
    lab.write_topology(with_cilium("{operator: {replicas: 3}}"));
    let plan_file = dir.join("cilium.tfplan");
    let plan_arg = plan_file.display().to_string();
    let out = lab
        .run(&["plan", "-out", &plan_arg, "-detailed-exitcode"])
        .await;
    assert_eq!(out.status.code(), Some(2));
    let text = stdout(&out);
    assert!(text.contains("~ config/talos-controlplane-01"), "{text}");
    assert!(!text.contains("config/talos-worker-01"), "{text}");
    assert!(!text.contains("vm/"), "{text}");
    assert_eq!(runs(&lab), 2);
    // The plan shows the effective values it rendered with.
    let shown = text
        .split("Add-on cilium (cilium 1.19.6): rendered now with helm template; values:\n")
        .nth(1)
        .unwrap_or_else(|| panic!("the values are shown:\n{text}"));
    for line in [
        "    kubeProxyReplacement: true\n",
        "    k8sServicePort: 7445\n",
        "      replicas: 3\n",
    ] {
        assert!(shown.contains(line), "{line:?} in:\n{shown}");
    }

    // The saved plan carries its rendering: applying it needs no helm.
    lab.env.retain(|(k, _)| k != "TALOSPROV_HELM");
    lab.env
        .push(("TALOSPROV_HELM".to_owned(), "/nonexistent/helm".to_owned()));
    let out = lab.run(&["apply", &plan_arg]).await;
    assert!(out.status.success(), "the saved plan applies without helm");
    assert_eq!(runs(&lab), 2);
    let state = lab.state();
    assert!(
        state.outputs.machineconfigs["talos-controlplane-01"]
            .value
            .expose()
            .contains("replicas: 3")
    );
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));

    // `render` with the state's secrets shows the recorded rendering, with no helm.
    let out = lab
        .run(&["render", "talos-controlplane-01", "--show-sensitive"])
        .await;
    assert!(out.status.success());
    assert_eq!(
        stdout(&out),
        *lab.state().outputs.machineconfigs["talos-controlplane-01"]
            .value
            .expose()
    );
    assert_eq!(runs(&lab), 2);
}
