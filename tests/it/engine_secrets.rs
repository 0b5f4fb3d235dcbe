//! No secret of the state appears in plan output (human or JSON, with a config
//! diff), in `-v` and `RUST_LOG=debug` logs of apply, or in error messages.

use std::time::Duration;

use crate::support::cli::{stderr, stdout};
use crate::support::lab::Lab;
use base64::Engine;

/// Every secret value in the state: the bundle's keys and tokens (as stored,
/// and the key lines of the decoded PEM), and the client keys of the outputs.
fn secret_values(state: &talosprov_statefile::format::State) -> Vec<String> {
    let mut out = Vec::new();
    let add_b64_pem = |b64: &str, out: &mut Vec<String>| {
        out.push(b64.to_owned());
        if let Ok(pem) = base64::engine::general_purpose::STANDARD.decode(b64.trim()) {
            let pem = String::from_utf8_lossy(&pem).into_owned();
            out.extend(
                pem.lines()
                    .filter(|l| !l.starts_with("-----") && l.len() >= 16)
                    .map(str::to_owned),
            );
        }
    };
    let bundle: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(state.secrets.as_ref().expect("secrets").expose()).expect("yaml");
    out.push(
        bundle["cluster"]["secret"]
            .as_str()
            .expect("secret")
            .to_owned(),
    );
    out.push(
        bundle["secrets"]["bootstraptoken"]
            .as_str()
            .expect("token")
            .to_owned(),
    );
    out.push(
        bundle["secrets"]["secretboxencryptionsecret"]
            .as_str()
            .expect("secretbox")
            .to_owned(),
    );
    out.push(
        bundle["trustdinfo"]["token"]
            .as_str()
            .expect("trustd")
            .to_owned(),
    );
    for ca in ["etcd", "k8s", "k8saggregator", "k8sserviceaccount", "os"] {
        add_b64_pem(bundle["certs"][ca]["key"].as_str().expect("key"), &mut out);
    }
    if let Some(t) = &state.outputs.talosconfig {
        let doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(t.value.expose()).expect("yaml");
        let ctx = doc["context"].as_str().expect("context").to_owned();
        add_b64_pem(
            doc["contexts"][ctx.as_str()]["key"].as_str().expect("key"),
            &mut out,
        );
    }
    if let Some(k) = &state.outputs.kubeconfig {
        let doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(k.value.expose()).expect("yaml");
        add_b64_pem(
            doc["users"][0]["user"]["client-key-data"]
                .as_str()
                .expect("key"),
            &mut out,
        );
    }
    out.retain(|s| s.len() >= 8);
    out
}

fn assert_clean(what: &str, text: &str, secrets: &[String]) {
    for s in secrets {
        assert!(
            !text.contains(s.as_str()),
            "{what} shows a secret value (first chars {:?})",
            &s[..6]
        );
    }
}

/// A control-plane patch with a Kubernetes Secret in the inline manifests.
const INLINE_SECRET_PATCH: &str = "cluster:
  inlineManifests:
    - name: app-credentials
      contents: |
        apiVersion: v1
        kind: Secret
        metadata:
          name: app
          namespace: default
        stringData:
          password: MARKER-inline-password
        data:
          token: TUFSS0VSLWlubGluZS10b2tlbg==
";

/// The values of that Secret, which must never be shown.
const INLINE_SECRET_VALUES: [&str; 2] = ["MARKER-inline-password", "TUFSS0VSLWlubGluZS10b2tlbg=="];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_reaches_plans_logs_or_errors() {
    let lab = Lab::start("1.4", Duration::from_millis(100)).await;
    lab.import_secrets().await;
    let mut seen: Vec<(String, String)> = Vec::new();
    let mut keep = |what: &str, o: &std::process::Output| {
        seen.push((what.to_owned(), format!("{}{}", stdout(o), stderr(o))));
    };
    keep("plan", &lab.run(&["plan"]).await);
    keep("plan -json", &lab.run(&["plan", "-json"]).await);
    let verbose = lab
        .command(&["-v", "apply", "-auto-approve"])
        .output()
        .await
        .expect("apply -v");
    assert!(verbose.status.success(), "{}", stderr(&verbose));
    keep("apply -v", &verbose);

    // A config change: the plan shows a diff of the redacted configs, one
    // with a Kubernetes Secret among the inline manifests.
    lab.write_topology(|t| t.replace("kubernetes_version: v1.36.2", "kubernetes_version: v1.36.1"));
    std::fs::write(
        lab.dir.path().join("patches/controlplane/90-secret.yaml"),
        INLINE_SECRET_PATCH,
    )
    .expect("patch");
    keep("plan with a config diff", &lab.run(&["plan"]).await);
    let plan_file = lab.dir.path().join("p.plan");
    let plan_file = plan_file.to_str().expect("utf-8");
    keep("plan -out", &lab.run(&["plan", "-out", plan_file]).await);
    keep("show saved plan", &lab.run(&["show", plan_file]).await);
    keep(
        "show -json saved plan",
        &lab.run(&["show", "-json", plan_file]).await,
    );
    keep(
        "render",
        &lab.run(&["render", "talos-controlplane-01"]).await,
    );
    let debug = lab
        .command(&["plan", "-json"])
        .env("RUST_LOG", "debug")
        .output()
        .await
        .expect("plan with RUST_LOG=debug");
    keep("RUST_LOG=debug plan -json", &debug);

    // Errors: a wrong Proxmox token, and a stale saved plan.
    let bad = lab
        .command(&["apply", "-auto-approve"])
        .env(
            "PROXMOX_VE_API_TOKEN",
            "root@pam!talosprov=00000000-0000-0000-0000-000000000000",
        )
        .output()
        .await
        .expect("apply with a bad token");
    assert!(!bad.status.success());
    keep("error: bad token", &bad);
    let out = lab.run(&["output", "kubeconfig"]).await;
    keep("output kubeconfig (human)", &out);

    let mut secrets = secret_values(&lab.state());
    secrets.extend(INLINE_SECRET_VALUES.iter().map(|s| (*s).to_owned()));
    assert!(secrets.len() >= 10, "found the secrets to look for");
    for (what, text) in &seen {
        assert_clean(what, text, &secrets);
    }
    let diffed = &seen[3].1;
    assert!(
        diffed.contains("(sensitive)") && diffed.contains("app-credentials"),
        "the diff shows the inline Secret with redacted values:\n{diffed}"
    );
}
