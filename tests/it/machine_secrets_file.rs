//! talosctl's secrets.yaml: import of a hand-written fixture (made with openssl, laid out from
//! the format's description), byte-identical export, and the errors for broken bundles.

use crate::support::fixtures::SECRETS;
use talosprov_machine::keys::KeyAlgorithm;
use talosprov_machine::secrets::EncryptionSecret;
use talosprov_machine::secrets_file::{parse_secrets_yaml, secrets_yaml};

#[test]
fn importing_then_exporting_a_talosctl_bundle_is_byte_identical() {
    let bundle = parse_secrets_yaml(SECRETS).expect("fixture parses");
    assert_eq!(secrets_yaml(&bundle), SECRETS);
}

#[test]
fn imported_bundle_exposes_every_field() {
    let b = parse_secrets_yaml(SECRETS).unwrap();
    assert_eq!(b.cluster.id, "4OHi4-Tl5ufo6err7O3u7_Dx8vP09fb3-Pn6-_z9_v8=");
    assert_eq!(b.bootstrap_token.expose(), "fx7k2q.0a1b2c3d4e5f6g7h");
    assert_eq!(b.trustd_token.expose(), "tr9s8d.h7g6f5e4d3c2b1a0");
    assert!(matches!(b.encryption, EncryptionSecret::Secretbox(_)));
    assert_eq!(
        talosprov_machine::pki::private_key(&b.certs.os)
            .unwrap()
            .algorithm(),
        KeyAlgorithm::Ed25519
    );
    assert_eq!(
        talosprov_machine::pki::private_key(&b.certs.etcd)
            .unwrap()
            .algorithm(),
        KeyAlgorithm::EcdsaP256
    );
    assert!(
        b.certs
            .k8s_aggregator
            .crt
            .starts_with("-----BEGIN CERTIFICATE-----\n")
    );
}

#[test]
fn debug_output_of_a_bundle_shows_no_secret() {
    let b = parse_secrets_yaml(SECRETS).unwrap();
    let debug = format!("{b:?}");
    assert!(!debug.contains("fx7k2q"), "{debug}");
    assert!(!debug.contains("PRIVATE KEY"), "{debug}");
    assert!(!debug.contains("dGFsb3Nwcm92"), "{debug}");
}

#[test]
fn bundle_with_missing_and_invalid_fields_reports_every_problem() {
    let broken = SECRETS
        .replace("    bootstraptoken: fx7k2q.0a1b2c3d4e5f6g7h\n", "")
        .replace("trustdinfo:\n    token: tr9s8d.h7g6f5e4d3c2b1a0\n", "")
        .replace(
            "    secretboxencryptionsecret:",
            "    aescbcencryptionsecret: c2Vjb25k\n    secretboxencryptionsecret:",
        );
    let mut lines: Vec<String> = broken.lines().map(str::to_string).collect();
    for line in &mut lines {
        if line.starts_with("        key: LS0tLS1CRUdJTiBFQyBQUklWQVRFIEtFWS0tLS0t") {
            // Corrupt the first EC key only.
            *line = "        key: bm90IGEga2V5".to_string();
            break;
        }
    }
    let err = parse_secrets_yaml(&(lines.join("\n") + "\n")).unwrap_err();
    insta::assert_snapshot!(err.to_string());
}

#[test]
fn text_that_is_not_yaml_is_refused_with_its_line() {
    let err = parse_secrets_yaml("cluster:\n    id: [unclosed\n").unwrap_err();
    let text = err.to_string();
    assert!(text.starts_with("secrets.yaml line "), "{text}");
}
