//! The talosconfig and offline admin kubeconfig files: their shape, and that `kubectl config
//! view` reads the kubeconfig when kubectl is installed.

use crate::support::fixtures::SECRETS;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use rand::SeedableRng;
use serde_yaml_ng::Value;
use talosprov_base::talosconfig::Talosconfig;
use talosprov_machine::kubeconfig::{AdminKubeconfig, KubeconfigInput};
use talosprov_machine::secrets::SecretsBundle;
use talosprov_machine::secrets_file::parse_secrets_yaml;
use talosprov_machine::talosconfig::{TalosconfigInput, generate};
use time::Duration;
use time::macros::datetime;

fn bundle() -> SecretsBundle {
    parse_secrets_yaml(SECRETS).unwrap()
}

fn talosconfig(b: &SecretsBundle, nodes: Vec<String>) -> Talosconfig {
    let input = TalosconfigInput {
        context: "homelab".into(),
        endpoints: vec!["192.168.1.121".into()],
        nodes,
        secrets: b,
        now: datetime!(2026-03-04 05:06:07 UTC),
        lifetime: talosprov_machine::talosconfig::ADMIN_CERTIFICATE_VALIDITY,
    };
    generate(&input, &mut rand_chacha::ChaCha20Rng::seed_from_u64(3)).unwrap()
}

#[test]
fn talosconfig_has_one_context_named_after_the_cluster() {
    let b = bundle();
    let nodes = vec![
        "192.168.1.121".to_string(),
        "192.168.1.122".into(),
        "192.168.1.123".into(),
    ];
    let tc = talosconfig(&b, nodes);
    let text = tc.to_yaml();
    insta::with_settings!({filters => vec![(r"(ca|crt|key): [A-Za-z0-9+/=]{40,}", "$1: <base64>")]}, {
        insta::assert_snapshot!(text)
    });
    let doc: Value = serde_yaml_ng::from_str(&text).unwrap();
    let ctx = &doc["contexts"]["homelab"];
    let pem = |field: &str| {
        String::from_utf8(STANDARD.decode(ctx[field].as_str().unwrap()).unwrap()).unwrap()
    };
    assert_eq!(pem("ca"), b.certs.os.crt);
    assert_eq!(pem("crt"), tc.client.crt);
    assert!(pem("key").starts_with("-----BEGIN ED25519 PRIVATE KEY-----"));
}

#[test]
fn talosconfig_parse_reads_back_what_to_yaml_wrote() {
    let b = bundle();
    for nodes in [
        vec![],
        vec!["192.168.1.121".to_string(), "192.168.1.122".into()],
    ] {
        let tc = talosconfig(&b, nodes);
        assert_eq!(Talosconfig::parse(&tc.to_yaml()).unwrap(), tc);
    }
}

#[test]
fn talosconfig_parse_names_what_is_wrong_and_never_a_value() {
    use talosprov_base::talosconfig::TalosconfigError as E;
    let b = bundle();
    let good = talosconfig(&b, vec![]).to_yaml();
    let key_b64 = {
        let doc: Value = serde_yaml_ng::from_str(&good).unwrap();
        doc["contexts"]["homelab"]["key"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let cases: Vec<(String, E)> = vec![
        ("{[".into(), E::NotYaml),
        ("contexts: {}".into(), E::NoContext),
        (
            "context: other\ncontexts: {}".into(),
            E::MissingContext("other".into()),
        ),
        (
            good.replace(&format!("key: {key_b64}"), "x: y"),
            E::MissingField {
                field: "key",
                context: "homelab".into(),
            },
        ),
        (
            good.replace(&key_b64, "not*base64"),
            E::NotBase64 { field: "key" },
        ),
        (
            good.replace(&key_b64, &STANDARD.encode([0xff, 0xfe])),
            E::NotPem { field: "key" },
        ),
    ];
    for (text, want) in cases {
        let got = Talosconfig::parse(&text).unwrap_err();
        assert_eq!(got, want, "{text}");
        assert!(!got.to_string().contains(&key_b64[..20]));
    }
}

#[test]
fn talosconfig_without_nodes_leaves_the_field_out_and_keeps_endpoints() {
    let b = bundle();
    let doc: Value = serde_yaml_ng::from_str(&talosconfig(&b, vec![]).to_yaml()).unwrap();
    let ctx = doc["contexts"]["homelab"].as_mapping().unwrap();
    assert!(!ctx.contains_key("nodes"));
    assert!(ctx.contains_key("endpoints"));
}

fn kubeconfig(b: &SecretsBundle) -> AdminKubeconfig {
    let input = KubeconfigInput {
        cluster_name: "homelab".into(),
        endpoint: "https://192.168.1.120:6443".into(),
        secrets: b,
        now: datetime!(2026-03-04 05:06:07 UTC),
        lifetime: Duration::days(365),
    };
    AdminKubeconfig::generate(&input, &mut rand_chacha::ChaCha20Rng::seed_from_u64(4)).unwrap()
}

#[test]
fn kubeconfig_names_cluster_user_and_context_as_talos_does() {
    let b = bundle();
    let kc = kubeconfig(&b);
    insta::with_settings!({filters => vec![(r"-data: [A-Za-z0-9+/=]{40,}", "-data: <base64>")]}, {
        insta::assert_snapshot!(kc.yaml)
    });
    let doc: Value = serde_yaml_ng::from_str(&kc.yaml).unwrap();
    let ca = STANDARD
        .decode(
            doc["clusters"][0]["cluster"]["certificate-authority-data"]
                .as_str()
                .unwrap(),
        )
        .unwrap();
    assert_eq!(String::from_utf8(ca).unwrap(), b.certs.k8s.crt);
}

#[test]
fn kubectl_reads_the_kubeconfig() {
    let Ok(version) = std::process::Command::new("kubectl")
        .args(["version", "--client"])
        .output()
    else {
        eprintln!("kubectl not installed; skipped");
        return;
    };
    if !version.status.success() {
        return;
    }
    let b = bundle();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kubeconfig");
    std::fs::write(&path, kubeconfig(&b).yaml).unwrap();
    let out = std::process::Command::new("kubectl")
        .args(["config", "view", "--raw", "-o", "json", "--kubeconfig"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let view: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(view["current-context"], "admin@homelab");
    assert_eq!(view["clusters"][0]["name"], "homelab");
    assert_eq!(
        view["clusters"][0]["cluster"]["server"],
        "https://192.168.1.120:6443"
    );
    assert_eq!(view["contexts"][0]["context"]["user"], "admin@homelab");
    assert_eq!(view["contexts"][0]["context"]["namespace"], "default");
    assert!(
        view["users"][0]["user"]["client-key-data"]
            .as_str()
            .unwrap()
            .len()
            > 100
    );
}
