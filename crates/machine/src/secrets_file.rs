//! talosctl's `secrets.yaml`: read it (every problem reported, in Talos's words) and write it
//! byte for byte as `talosctl gen secrets` does (go-yaml `Marshal`, base64 of the PEM texts).
//! Source: Talos `pkg/machinery/config/generate/secrets/{secrets.go,bundle.go}`.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;
use serde_yaml_ng::{Mapping, Value};

use super::keys::PrivateKey;
use super::secrets::{Certs, ClusterIdentity, EncryptionSecret, SecretsBundle};
use talosprov_base::pem::CertAndKey;
use talosprov_base::sensitive::Sensitive;
use talosprov_base::yaml::{Flavour, to_string};

/// Errors reading a secrets.yaml.
#[derive(Debug, thiserror::Error)]
pub enum SecretsFileError {
    /// Not YAML of the expected shape.
    #[error("secrets.yaml{}: {message}", line.map(|l| format!(" line {l}")).unwrap_or_default())]
    Yaml {
        /// 1-based line of the problem, when the parser gives one.
        line: Option<usize>,
        /// The parser's message.
        message: String,
    },
    /// Parsed, but missing or invalid fields; every problem is listed.
    #[error("invalid secrets bundle:\n  - {}", problems.join("\n  - "))]
    Invalid {
        /// One line per problem, naming the field (e.g. `certs.etcd.key`).
        problems: Vec<String>,
    },
}

#[derive(Deserialize, Default)]
struct RawBundle {
    cluster: Option<RawCluster>,
    secrets: Option<RawSecrets>,
    trustdinfo: Option<RawTrustd>,
    certs: Option<RawCerts>,
}

#[derive(Deserialize, Default)]
struct RawCluster {
    id: Option<String>,
    secret: Option<String>,
}

#[derive(Deserialize, Default)]
struct RawSecrets {
    bootstraptoken: Option<String>,
    aescbcencryptionsecret: Option<String>,
    secretboxencryptionsecret: Option<String>,
}

#[derive(Deserialize, Default)]
struct RawTrustd {
    token: Option<String>,
}

#[derive(Deserialize, Default)]
struct RawCerts {
    etcd: Option<RawCertAndKey>,
    k8s: Option<RawCertAndKey>,
    k8saggregator: Option<RawCertAndKey>,
    k8sserviceaccount: Option<RawKey>,
    os: Option<RawCertAndKey>,
}

#[derive(Deserialize, Default)]
struct RawCertAndKey {
    crt: Option<String>,
    key: Option<String>,
}

#[derive(Deserialize, Default)]
struct RawKey {
    key: Option<String>,
}

/// Read a secrets.yaml in talosctl's layout. Unknown fields are ignored, as Talos ignores them.
///
/// # Errors
/// [`SecretsFileError::Yaml`] for text that does not parse, [`SecretsFileError::Invalid`] with
/// every missing or invalid field (Talos `Bundle.Validate` wording).
pub fn parse_secrets_yaml(text: &str) -> Result<SecretsBundle, SecretsFileError> {
    let raw: RawBundle = serde_yaml_ng::from_str(text).map_err(|e| SecretsFileError::Yaml {
        line: e.location().map(|l| l.line()),
        message: e.to_string(),
    })?;
    let mut problems = Vec::new();
    let required = |value: Option<String>, field: &str, problems: &mut Vec<String>| match value {
        Some(v) if !v.is_empty() => v,
        _ => {
            problems.push(format!("{field} is required"));
            String::new()
        }
    };

    let cluster = raw.cluster.unwrap_or_default();
    let id = required(cluster.id, "cluster.id", &mut problems);
    let secret = required(cluster.secret, "cluster.secret", &mut problems);

    let secrets = raw.secrets.unwrap_or_default();
    let bootstrap = required(
        secrets.bootstraptoken,
        "secrets.bootstraptoken",
        &mut problems,
    );
    let non_empty = |v: Option<String>| v.filter(|s| !s.is_empty());
    let encryption = match (
        non_empty(secrets.secretboxencryptionsecret),
        non_empty(secrets.aescbcencryptionsecret),
    ) {
        (Some(s), None) => Some(EncryptionSecret::Secretbox(Sensitive::new(s))),
        (None, Some(a)) => Some(EncryptionSecret::AesCbc(Sensitive::new(a))),
        (None, None) => {
            problems.push(
                "one of [secrets.secretboxencryptionsecret, secrets.aescbcencryptionsecret] is required".into(),
            );
            None
        }
        (Some(_), Some(_)) => {
            problems.push(
                "only one of [secrets.secretboxencryptionsecret, secrets.aescbcencryptionsecret] is allowed".into(),
            );
            None
        }
    };

    let trustd = required(
        raw.trustdinfo.unwrap_or_default().token,
        "trustdinfo.token",
        &mut problems,
    );

    let certs = raw.certs.unwrap_or_default();
    let etcd = cert_and_key(certs.etcd, "certs.etcd", &mut problems);
    let k8s = cert_and_key(certs.k8s, "certs.k8s", &mut problems);
    let aggregator = cert_and_key(certs.k8saggregator, "certs.k8saggregator", &mut problems);
    let os = cert_and_key(certs.os, "certs.os", &mut problems);
    let service_account = match certs
        .k8sserviceaccount
        .and_then(|k| k.key)
        .filter(|k| !k.is_empty())
    {
        None => {
            problems.push("certs.k8sserviceaccount is required".into());
            None
        }
        Some(b64) => decode_key(&b64, "certs.k8sserviceaccount.key", &mut problems),
    };

    match (encryption, etcd, k8s, aggregator, os, service_account) {
        (Some(encryption), Some(etcd), Some(k8s), Some(k8s_aggregator), Some(os), Some(sa))
            if problems.is_empty() =>
        {
            Ok(SecretsBundle {
                cluster: ClusterIdentity {
                    id,
                    secret: Sensitive::new(secret),
                },
                bootstrap_token: Sensitive::new(bootstrap),
                encryption,
                trustd_token: Sensitive::new(trustd),
                certs: Certs {
                    etcd,
                    k8s,
                    k8s_aggregator,
                    k8s_service_account: Sensitive::new(sa),
                    os,
                },
            })
        }
        _ => Err(SecretsFileError::Invalid { problems }),
    }
}

fn decode_text(b64: &str, field: &str, problems: &mut Vec<String>) -> Option<String> {
    let bytes = match STANDARD.decode(b64.trim()) {
        Ok(b) => b,
        Err(_) => {
            problems.push(format!("{field} is not valid base64"));
            return None;
        }
    };
    match String::from_utf8(bytes) {
        Ok(s) => Some(s),
        Err(_) => {
            problems.push(format!("{field} is not PEM text"));
            None
        }
    }
}

fn decode_key(b64: &str, field: &str, problems: &mut Vec<String>) -> Option<String> {
    let pem = decode_text(b64, field, problems)?;
    match PrivateKey::from_pem(&pem) {
        Ok(_) => Some(pem),
        Err(e) => {
            problems.push(format!("{field} is invalid: {e}"));
            None
        }
    }
}

fn cert_and_key(
    raw: Option<RawCertAndKey>,
    field: &str,
    problems: &mut Vec<String>,
) -> Option<CertAndKey> {
    let Some(raw) = raw else {
        problems.push(format!("{field} is required"));
        return None;
    };
    let crt = match raw.crt.filter(|c| !c.is_empty()) {
        Some(c) => decode_text(&c, &format!("{field}.crt"), problems),
        None => {
            problems.push(format!("{field}.crt is required"));
            None
        }
    };
    let key = match raw.key.filter(|k| !k.is_empty()) {
        Some(k) => decode_key(&k, &format!("{field}.key"), problems),
        None => {
            problems.push(format!("{field}.key is required"));
            None
        }
    };
    let pair = CertAndKey {
        crt: crt?,
        key: Sensitive::new(key?),
    };
    match super::pki::certificate_der(&pair)
        .map(|der| x509_parser::parse_x509_certificate(&der).is_ok())
    {
        Ok(true) => Some(pair),
        Ok(false) => {
            problems.push(format!("{field}.crt is invalid: not an X.509 certificate"));
            None
        }
        Err(e) => {
            problems.push(format!("{field}.crt is invalid: {e}"));
            None
        }
    }
}

/// Write the bundle as talosctl's `secrets.yaml` (go-yaml `Marshal` of Talos's `Bundle`: keys
/// `cluster`, `secrets`, `trustdinfo`, `certs`, 4-space indent, every `crt`/`key` the standard
/// base64 of its PEM text). The caller writes it with mode 0600.
pub fn secrets_yaml(bundle: &SecretsBundle) -> String {
    let b64 = |s: &str| Value::String(STANDARD.encode(s.as_bytes()));
    let pair = |c: &CertAndKey| map([("crt", b64(&c.crt)), ("key", b64(c.key.expose()))]);
    let mut secrets = Mapping::new();
    secrets.insert(
        "bootstraptoken".into(),
        bundle.bootstrap_token.expose().as_str().into(),
    );
    match &bundle.encryption {
        EncryptionSecret::AesCbc(s) => {
            secrets.insert("aescbcencryptionsecret".into(), s.expose().as_str().into())
        }
        EncryptionSecret::Secretbox(s) => secrets.insert(
            "secretboxencryptionsecret".into(),
            s.expose().as_str().into(),
        ),
    };
    let certs = &bundle.certs;
    let doc = map([
        (
            "cluster",
            map([
                ("id", bundle.cluster.id.as_str().into()),
                ("secret", bundle.cluster.secret.expose().as_str().into()),
            ]),
        ),
        ("secrets", Value::Mapping(secrets)),
        (
            "trustdinfo",
            map([("token", bundle.trustd_token.expose().as_str().into())]),
        ),
        (
            "certs",
            map([
                ("etcd", pair(&certs.etcd)),
                ("k8s", pair(&certs.k8s)),
                ("k8saggregator", pair(&certs.k8s_aggregator)),
                (
                    "k8sserviceaccount",
                    map([("key", b64(certs.k8s_service_account.expose()))]),
                ),
                ("os", pair(&certs.os)),
            ]),
        ),
    ]);
    to_string(&doc, Flavour::Marshal)
}

fn map<const N: usize>(entries: [(&str, Value); N]) -> Value {
    Value::Mapping(
        entries
            .into_iter()
            .map(|(k, v)| (Value::String(k.into()), v))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_bundle_lists_every_required_field() {
        let Err(SecretsFileError::Invalid { problems }) = parse_secrets_yaml("cluster: {}\n")
        else {
            panic!("expected an invalid bundle");
        };
        assert_eq!(
            problems,
            vec![
                "cluster.id is required",
                "cluster.secret is required",
                "secrets.bootstraptoken is required",
                "one of [secrets.secretboxencryptionsecret, secrets.aescbcencryptionsecret] is required",
                "trustdinfo.token is required",
                "certs.etcd is required",
                "certs.k8s is required",
                "certs.k8saggregator is required",
                "certs.os is required",
                "certs.k8sserviceaccount is required",
            ]
        );
    }

    #[test]
    fn key_that_is_not_base64_is_named() {
        let mut problems = Vec::new();
        assert!(decode_key("not base64!", "certs.os.key", &mut problems).is_none());
        assert_eq!(problems, vec!["certs.os.key is not valid base64"]);
    }
}
