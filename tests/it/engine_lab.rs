//! The main job end to end against fakepve, the factory stand-in and the Talos
//! simulator: plan, apply, outputs, a second plan, an in-place update, a patch
//! change, destroy; a kill mid-apply (its lock taken over by the next run); a
//! stale saved plan; two applies at once.

use std::time::Duration;

use crate::support::cli::{signal, stderr, stdout};
use crate::support::lab::Lab;
use crate::support::wait::until;
use talosprov_machine::secrets_file::parse_secrets_yaml;

/// The base64 PEM of `field` in the current context of a talosconfig, decoded.
fn talosconfig_field(text: &str, field: &str) -> String {
    use base64::Engine;
    let doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(text).expect("talosconfig YAML");
    let ctx = doc["context"].as_str().expect("context").to_owned();
    let b64 = doc["contexts"][ctx.as_str()][field]
        .as_str()
        .expect("field");
    String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(b64)
            .expect("base64"),
    )
    .expect("PEM")
}

fn der_of(pem: &str) -> Vec<u8> {
    rustls_pemfile::certs(&mut pem.as_bytes())
        .next()
        .expect("a certificate")
        .expect("PEM")
        .to_vec()
}

/// Check that the certificate in `leaf_pem` is signed by the CA in `ca_pem`
/// (P-256 or Ed25519, the two kinds Talos CAs use).
fn assert_signed_by(leaf_pem: &str, ca_pem: &str) {
    use x509_parser::prelude::*;
    let (leaf_der, ca_der) = (der_of(leaf_pem), der_of(ca_pem));
    let (_, leaf) = X509Certificate::from_der(&leaf_der).expect("leaf");
    let (_, ca) = X509Certificate::from_der(&ca_der).expect("CA");
    assert_eq!(leaf.issuer(), ca.subject(), "issuer is the CA");
    let key = &ca.public_key().subject_public_key.data;
    let tbs = leaf.tbs_certificate.as_ref();
    let sig = &leaf.signature_value.data;
    if key.len() == 32 {
        use ed25519_dalek::Verifier;
        let k = ed25519_dalek::VerifyingKey::from_bytes(key.as_ref().try_into().expect("32"))
            .expect("Ed25519 key");
        let s = ed25519_dalek::Signature::from_slice(sig).expect("signature");
        k.verify(tbs, &s).expect("Ed25519 signature by the CA");
    } else {
        use p256::ecdsa::signature::Verifier;
        let k = p256::ecdsa::VerifyingKey::from_sec1_bytes(key).expect("P-256 key");
        let s = p256::ecdsa::Signature::from_der(sig).expect("signature");
        k.verify(tbs, &s).expect("ECDSA signature by the CA");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lab_flow_plans_applies_updates_and_destroys() {
    let lab = Lab::start("1.1", Duration::from_millis(200)).await;
    lab.import_secrets().await;

    // 1. plan shows every create.
    let out = lab.run(&["plan"]).await;
    assert!(out.status.success());
    let text = stdout(&out);
    for a in [
        "+ pci_mapping/gpu",
        "+ pool/TALOS",
        "+ vm/talos-controlplane-01",
        "+ vm/talos-worker-01",
        "+ vm/talos-gpu-01",
        "~ config/talos-controlplane-01",
        "+ bootstrap",
        "+ kubeconfig",
        "+ addon/lab-cni/DaemonSet.apps/kube-system/lab-cni",
        "+ addon/nvidia-device-plugin/DaemonSet.apps/kube-system/nvidia-device-plugin-daemonset",
    ] {
        assert!(text.contains(a), "plan lacks {a}:\n{text}");
    }
    assert!(
        text.contains("Plan: 12 to add, 0 to change, 0 to destroy."),
        "{text}"
    );

    // 2. apply succeeds.
    let out = lab.run(&["apply", "-auto-approve"]).await;
    assert!(out.status.success(), "apply failed");
    assert_eq!(lab.vms().await.len(), 3);
    // The apply counts what it did as the plan counted it.
    let text = stdout(&out);
    let planned = text
        .lines()
        .find(|l| l.starts_with("Plan: "))
        .expect("the plan's summary")
        .trim_start_matches("Plan: ")
        .replace(" to add", " added")
        .replace(" to change", " changed")
        .replace(" to destroy", " destroyed")
        .replace(" to apply", " applied");
    assert!(
        text.contains(&format!("Apply complete! Resources: {planned}")),
        "{text}"
    );

    // 3. the outputs parse and chain to the state's CAs.
    let state = lab.state();
    let secrets =
        parse_secrets_yaml(state.secrets.as_ref().expect("secrets").expose()).expect("bundle");
    let kube = stdout(&lab.run(&["output", "kubeconfig", "-raw"]).await);
    let kube: serde_yaml_ng::Value = serde_yaml_ng::from_str(&kube).expect("kubeconfig YAML");
    let cert_b64 = kube["users"][0]["user"]["client-certificate-data"]
        .as_str()
        .expect("client certificate");
    let cert = {
        use base64::Engine;
        String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(cert_b64)
                .expect("base64"),
        )
        .expect("PEM")
    };
    assert_signed_by(&cert, &secrets.certs.k8s.crt);
    let talos = stdout(&lab.run(&["output", "talosconfig", "-raw"]).await);
    assert_signed_by(&talosconfig_field(&talos, "crt"), &secrets.certs.os.crt);
    assert_eq!(talosconfig_field(&talos, "ca"), secrets.certs.os.crt);

    // 4. a second plan shows no changes.
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));

    // 5. more worker memory: exactly one in-place update, which converges.
    lab.write_topology(|t| t.replace("memory: 8192", "memory: 12288"));
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(2));
    let text = stdout(&out);
    assert!(text.contains("~ vm/talos-worker-01"), "{text}");
    assert!(text.contains("~ memory_mib = 8192 -> 12288"), "{text}");
    assert!(
        text.contains("Plan: 0 to add, 1 to change, 0 to destroy."),
        "{text}"
    );
    let out = lab.run(&["apply", "-auto-approve"]).await;
    assert!(out.status.success());
    let config = lab.pve.get("/nodes/pve1/qemu/122/config").await;
    assert_eq!(config["memory"].to_string().trim_matches('"'), "12288");
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));

    // 6. a node patch edited: one apply-config with its diff.
    let node_dir = lab.dir.path().join("patches/nodes/talos-worker-01");
    std::fs::create_dir_all(&node_dir).expect("mkdir");
    std::fs::write(
        node_dir.join("50-zone.yaml"),
        "machine:\n  nodeLabels:\n    topology.kubernetes.io/zone: lab-a\n",
    )
    .expect("write patch");
    let out = lab.run(&["plan"]).await;
    let text = stdout(&out);
    assert!(text.contains("~ config/talos-worker-01"), "{text}");
    assert!(
        text.contains("+        topology.kubernetes.io/zone: lab-a"),
        "{text}"
    );
    assert!(
        text.contains("0 to add, 0 to change, 0 to destroy. Talos: 1 config to apply."),
        "{text}"
    );
    let out = lab.run(&["apply", "-auto-approve"]).await;
    assert!(out.status.success());

    // 7. destroy empties fakepve; a plan then shows every create again.
    let out = lab.run(&["destroy", "-auto-approve"]).await;
    assert!(out.status.success());
    assert!(lab.vms().await.is_empty());
    let pools = lab.pve.get("/pools").await;
    assert!(pools.as_array().is_some_and(Vec::is_empty), "{pools}");
    let text = stdout(&lab.run(&["plan"]).await);
    for a in [
        "+ vm/talos-controlplane-01",
        "+ vm/talos-worker-01",
        "+ vm/talos-gpu-01",
        "+ bootstrap",
    ] {
        assert!(text.contains(a), "plan after destroy lacks {a}:\n{text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_apply_loses_no_state_and_the_next_finishes_without_duplicates() {
    // Long install reboots keep the first apply waiting for secure mode.
    let lab = Lab::start("1.2", Duration::from_secs(3)).await;
    lab.import_secrets().await;
    let mut child = lab
        .command(&["apply", "-auto-approve"])
        .spawn()
        .expect("start apply");
    until(
        "the VMs created and recorded",
        Duration::from_secs(60),
        async || lab.vms().await.len() >= 3 && lab.state().resources.vms.len() >= 3,
    )
    .await;
    child.start_kill().expect("kill apply");
    let _ = child.wait().await;
    let state = lab.state();
    assert_eq!(state.resources.vms.len(), 3, "VMs recorded before the kill");

    // The killed run's lock is stale: the next run takes it over, naming it.
    let out = lab.run(&["apply", "-auto-approve"]).await;
    assert!(out.status.success(), "second apply failed");
    let err = stderr(&out);
    assert!(
        err.contains("took over the state lock left by")
            && err.contains("for apply")
            && err.contains("is no longer running"),
        "{err}"
    );
    assert_eq!(lab.vms().await.len(), 3);
    assert_eq!(
        lab.pve.count("POST", "/nodes/pve1/qemu").await,
        3,
        "one create per VM"
    );
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_saved_plan_is_refused_and_a_second_apply_names_the_lock_holder() {
    let lab = Lab::start("1.3", Duration::from_secs(2)).await;
    lab.import_secrets().await;
    let plan_file = lab.dir.path().join("first.plan");
    let out = lab
        .run(&["plan", "-out", plan_file.to_str().expect("utf-8")])
        .await;
    assert!(out.status.success());
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&plan_file)
            .expect("plan file")
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    let mut first = lab
        .command(&["apply", "-auto-approve"])
        .spawn()
        .expect("start apply");
    let lock_info = lab.dir.path().join(".talosprov.tfstate.lock.info");
    until(
        "the first apply taking the lock",
        Duration::from_secs(60),
        async || lock_info.exists(),
    )
    .await;
    let out = lab.run(&["apply", "-auto-approve"]).await;
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("the state is locked by"), "{err}");
    assert!(err.contains("for apply"), "{err}");
    let status = tokio::time::timeout(Duration::from_secs(120), first.wait())
        .await
        .expect("first apply ends")
        .expect("wait");
    assert!(status.success());

    let out = lab
        .run(&["apply", plan_file.to_str().expect("utf-8")])
        .await;
    assert!(!out.status.success());
    assert!(stderr(&out).contains("stale"), "{}", stderr(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_mid_apply_saves_state_releases_the_lock_and_exits_143() {
    let lab = Lab::start("1.5", Duration::from_secs(3)).await;
    lab.import_secrets().await;
    let mut child = lab
        .command(&["apply", "-auto-approve"])
        .spawn()
        .expect("start apply");
    until("the VMs recorded", Duration::from_secs(60), async || {
        lab.state().resources.vms.len() >= 3
    })
    .await;
    signal(child.id().expect("pid"), "TERM");
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("apply stops promptly")
        .expect("wait");
    assert_eq!(status.code(), Some(143));
    assert!(
        !lab.dir.path().join(".talosprov.tfstate.lock.info").exists(),
        "lock released"
    );
    assert_eq!(lab.state().resources.vms.len(), 3);

    let out = lab.run(&["apply", "-auto-approve"]).await;
    assert!(out.status.success(), "apply after the interruption failed");
    assert_eq!(
        lab.pve.count("POST", "/nodes/pve1/qemu").await,
        3,
        "one create per VM"
    );
    assert!(lab.state().resources.bootstrap.is_some_and(|b| b.done));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn saved_plan_is_sealed_like_an_encrypted_state() {
    use age::secrecy::ExposeSecret;
    let mut lab = Lab::start("1.6", Duration::from_millis(100)).await;
    let identity = age::x25519::Identity::generate();
    let key_file = lab.dir.path().join("state.key");
    std::fs::write(&key_file, identity.to_string().expose_secret()).expect("key file");
    lab.env.push((
        talosprov_backend::encrypt::IDENTITY_FILE_VAR.to_owned(),
        key_file.display().to_string(),
    ));
    lab.import_secrets().await;
    let plan_file = lab.dir.path().join("sealed.plan");
    let out = lab
        .run(&["plan", "-out", plan_file.to_str().expect("utf-8")])
        .await;
    assert!(out.status.success());
    let bytes = std::fs::read(&plan_file).expect("plan file");
    let text = String::from_utf8_lossy(&bytes);
    assert!(!text.contains("format_version"), "the plan is sealed");
    assert!(
        !text.contains("config/talos-worker-01"),
        "the plan is sealed"
    );
    let out = lab
        .run(&["apply", plan_file.to_str().expect("utf-8")])
        .await;
    assert!(out.status.success(), "applying the sealed plan failed");
    assert_eq!(lab.vms().await.len(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_removed_from_the_topology_is_reset_then_deleted() {
    let lab = Lab::start("1.7", Duration::from_millis(100)).await;
    lab.import_secrets().await;
    assert!(lab.run(&["apply", "-auto-approve"]).await.status.success());

    lab.write_topology(|t| {
        let start = t.find("  - hostname: talos-gpu-01").expect("gpu node");
        let end = t[start..].find("\n\n").map_or(t.len(), |e| start + e);
        format!("{}{}", &t[..start], &t[end..])
    });
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(2));
    let text = stdout(&out);
    assert!(text.contains("- vm/talos-gpu-01"), "{text}");
    assert!(
        text.contains("Plan: 0 to add, 0 to change, 1 to destroy."),
        "{text}"
    );

    assert!(lab.run(&["apply", "-auto-approve"]).await.status.success());
    assert_eq!(lab.vms().await.len(), 2);
    let gpu: std::net::IpAddr = lab.ips[2].parse().expect("ip");
    let served = lab
        .sim
        .as_ref()
        .expect("sim")
        .node(gpu)
        .expect("node")
        .served();
    assert!(
        served
            .iter()
            .any(|s| s.rpc == "Reset" && s.code == tonic::Code::Ok),
        "the removed node was reset: {served:?}"
    );
    let state = lab.state();
    assert!(!state.resources.vms.contains_key("talos-gpu-01"));
    assert!(!state.outputs.machineconfigs.contains_key("talos-gpu-01"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn targeted_saved_plan_applies_only_the_target_and_its_dependencies() {
    let lab = Lab::start("1.8", Duration::from_millis(100)).await;
    lab.import_secrets().await;
    let plan_file = lab.dir.path().join("controlplane.plan");
    let file = plan_file.to_str().expect("utf-8");
    let out = lab
        .run(&[
            "plan",
            "-target",
            "config/talos-controlplane-01",
            "-out",
            file,
        ])
        .await;
    assert!(out.status.success());
    let text = stdout(&out);
    assert!(text.contains("+ vm/talos-controlplane-01"), "{text}");
    assert!(!text.contains("vm/talos-worker-01"), "{text}");
    // The plan says it is partial, and how to apply it: the lab's topology is
    // not ./cluster.yaml, so the command names it.
    let warned = stderr(&out);
    assert!(
        warned.contains(
            "Warning: Resource targeting is in effect: the plan covers only \
             -target config/talos-controlplane-01 and what it depends on, so it may be incomplete"
        ),
        "{warned}"
    );
    assert!(!warned.contains("matches no resource"), "{warned}");
    let hint = format!(
        "To perform exactly these actions, run:\n    talosprov apply -f {} {file}\n",
        lab.topology().display()
    );
    assert!(text.ends_with(&hint), "{text}");

    // A target that names nothing plans nothing, and says so.
    let out = lab
        .run(&[
            "plan",
            "-target",
            "vm/nosuch",
            "-target",
            "vm/talos-worker-1",
        ])
        .await;
    assert!(out.status.success());
    assert!(stdout(&out).contains("No changes."), "{}", stdout(&out));
    let warned = stderr(&out);
    assert!(
        warned.contains(
            "Warning: Resource targeting is in effect: the plan covers only -target vm/nosuch, \
             -target vm/talos-worker-1 and what they depend on,"
        ),
        "{warned}"
    );
    assert!(
        warned.contains(
            "Warning: -target vm/nosuch matches no resource in the topology or the state: \
             nothing is planned for it\n"
        ),
        "{warned}"
    );
    assert!(
        warned.contains(
            "Warning: -target vm/talos-worker-1 matches no resource in the topology or the \
             state: nothing is planned for it; did you mean `vm/talos-worker-01`?"
        ),
        "{warned}"
    );

    let out = lab.run(&["apply", file]).await;
    assert!(out.status.success());
    let warned = stderr(&out);
    assert!(
        warned.contains("Warning: Resource targeting is in effect"),
        "{warned}"
    );
    assert!(
        warned.contains("Warning: Applied changes may be incomplete"),
        "{warned}"
    );
    let vms = lab.vms().await;
    assert_eq!(vms.len(), 1);
    assert_eq!(vms[0]["name"], "talos-controlplane-01");
    let state = lab.state();
    assert!(state.resources.configs["talos-controlplane-01"].secure_mode);
    assert!(state.resources.bootstrap.is_none());
}
