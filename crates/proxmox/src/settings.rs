//! Settings of the Proxmox client, explicit values: endpoint, credentials (API token
//! or user and password), TLS mode and deadlines. Environment variables
//! (`PROXMOX_VE_*`, as bpg's provider reads them) are read only here, at the edge.

use crate::error::ProxmoxError;
use crate::tls::{self, Fingerprint, TlsMode};
use std::time::Duration;
use talosprov_base::sensitive::Sensitive;

/// An API token `USER@REALM!TOKENID=SECRET`, sent as `Authorization: PVEAPIToken=...`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiToken {
    /// The token ID, `user@realm!name`.
    pub id: String,
    /// The token secret (a UUID).
    pub secret: Sensitive,
}

impl ApiToken {
    /// Parse `USER@REALM!TOKENID=SECRET`, split at the last `=` as PVE does
    /// (pve-access-control `verify_token`).
    ///
    /// # Errors
    /// [`ProxmoxError::Settings`] when there is no `=`, no `@` or no `!` (the secret is not shown).
    pub fn parse(text: &str) -> Result<Self, ProxmoxError> {
        let text = text.trim();
        let text = text.strip_prefix("PVEAPIToken=").unwrap_or(text);
        let Some((id, secret)) = text.rsplit_once('=') else {
            return Err(ProxmoxError::Settings(
                "PROXMOX_VE_API_TOKEN must look like USER@REALM!TOKENID=SECRET (no '=' found)"
                    .into(),
            ));
        };
        let well_formed = id
            .split_once('@')
            .and_then(|(user, rest)| {
                rest.split_once('!')
                    .map(|(realm, name)| (user, realm, name))
            })
            .is_some_and(|(u, r, n)| !u.is_empty() && !r.is_empty() && !n.is_empty());
        if !well_formed || secret.is_empty() {
            return Err(ProxmoxError::Settings(format!(
                "PROXMOX_VE_API_TOKEN must look like USER@REALM!TOKENID=SECRET; the token ID '{id}' does not"
            )));
        }
        Ok(ApiToken {
            id: id.to_string(),
            secret: Sensitive::new(secret),
        })
    }

    pub(crate) fn header(&self) -> String {
        format!("PVEAPIToken={}={}", self.id, self.secret.expose())
    }
}

/// How the client authenticates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Auth {
    /// An API token (preferred; exempt from CSRF).
    Token(ApiToken),
    /// Ticket login with a user name and password; non-GET requests send the CSRF token.
    Password {
        /// `user@realm`; `@pam` is added when no realm is given.
        username: String,
        /// The user's password, sent only to `POST /access/ticket`.
        password: Sensitive,
    },
}

impl Auth {
    /// Who the credentials are, as `pveum acl modify` names them: `--users u@r
    /// --tokens 'u@r!name'` for a token (a privilege-separated token holds only
    /// what both its user and it are granted), `--users u@r` for a user.
    pub fn grantee(&self) -> String {
        match self {
            Auth::Token(t) => {
                let user = t.id.split('!').next().unwrap_or_default();
                format!("--users {user} --tokens '{}'", t.id)
            }
            Auth::Password { username, .. } => format!("--users {username}"),
        }
    }
}

/// Deadlines and backoff, in wall-clock time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// How long transient failures of one request are retried.
    pub retry_deadline: Duration,
    /// How long one task (download, create, start...) may run.
    pub task_deadline: Duration,
    /// The first backoff delay; it doubles up to `max_backoff`.
    pub first_backoff: Duration,
    /// The longest backoff delay.
    pub max_backoff: Duration,
    /// Per HTTP request.
    pub request: Duration,
}

impl Timeouts {
    /// The pacing of retries and polls: `first_backoff` doubling up to
    /// `max_backoff`.
    pub fn backoff(&self) -> talosprov_retry::Backoff {
        talosprov_retry::Backoff {
            initial: self.first_backoff,
            max: self.max_backoff,
        }
    }
}

impl Default for Timeouts {
    /// 120 s of retries, 15 min per task, backoff 250 ms doubling to 5 s, 60 s per request.
    fn default() -> Self {
        Timeouts {
            retry_deadline: Duration::from_secs(120),
            task_deadline: Duration::from_secs(900),
            first_backoff: Duration::from_millis(250),
            max_backoff: Duration::from_secs(5),
            request: Duration::from_secs(60),
        }
    }
}

/// Everything a [`Client`] needs, explicitly.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// `https://host:8006`, without `/api2/json`.
    pub endpoint: String,
    /// Credentials.
    pub auth: Auth,
    /// Certificate checking.
    pub tls: TlsMode,
    /// Deadlines and backoff.
    pub timeouts: Timeouts,
}

impl Settings {
    /// Settings from the topology's values and the environment, read through `lookup`
    /// (pass `|k| std::env::var(k).ok()`): `PROXMOX_VE_ENDPOINT` when the topology
    /// has no endpoint; `PROXMOX_VE_API_TOKEN`, else `PROXMOX_VE_USERNAME` and
    /// `PROXMOX_VE_PASSWORD`; `PROXMOX_VE_INSECURE=true`. TLS: a CA file and a
    /// fingerprint together are both enforced; else the CA file, the
    /// fingerprint, insecure, then the system roots.
    ///
    /// # Errors
    /// [`ProxmoxError::Settings`] for a missing endpoint or credentials, a malformed
    /// token or fingerprint, or an endpoint that is not `https://`.
    pub fn from_lookup(
        endpoint: Option<&str>,
        ca_file: Option<&std::path::Path>,
        fingerprint: Option<&str>,
        insecure: bool,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Self, ProxmoxError> {
        let endpoint = match endpoint {
            Some(e) => e.to_string(),
            None => lookup("PROXMOX_VE_ENDPOINT").ok_or_else(|| {
                ProxmoxError::Settings(
                    "no Proxmox endpoint: set proxmox.endpoint in the topology or PROXMOX_VE_ENDPOINT".into(),
                )
            })?,
        };
        let auth = if let Some(token) = lookup("PROXMOX_VE_API_TOKEN").filter(|t| !t.is_empty()) {
            Auth::Token(ApiToken::parse(&token)?)
        } else {
            match (lookup("PROXMOX_VE_USERNAME"), lookup("PROXMOX_VE_PASSWORD")) {
                (Some(username), Some(password)) => Auth::Password {
                    username,
                    password: Sensitive::new(password),
                },
                _ => {
                    return Err(ProxmoxError::Settings(
                        "no Proxmox credentials: set PROXMOX_VE_API_TOKEN (USER@REALM!TOKENID=SECRET), \
                         or PROXMOX_VE_USERNAME and PROXMOX_VE_PASSWORD"
                            .into(),
                    ));
                }
            }
        };
        let env_insecure = lookup("PROXMOX_VE_INSECURE").is_some_and(|v| {
            matches!(v.trim().to_ascii_lowercase().as_str(), "1" | "true" | "yes")
        });
        let tls = match (ca_file, fingerprint) {
            (Some(path), Some(fp)) => TlsMode::CaFileAndFingerprint {
                ca_file: path.to_path_buf(),
                fingerprint: Fingerprint::parse(fp)?,
            },
            (Some(path), None) => TlsMode::CaFile(path.to_path_buf()),
            (None, Some(fp)) => TlsMode::Fingerprint(Fingerprint::parse(fp)?),
            (None, None) if insecure || env_insecure => TlsMode::Insecure,
            (None, None) => TlsMode::System,
        };
        Ok(Settings {
            endpoint: normalize_endpoint(&endpoint)?,
            auth,
            tls,
            timeouts: Timeouts::default(),
        })
    }

    /// [`Settings::from_lookup`] over the process environment.
    ///
    /// # Errors
    /// As [`Settings::from_lookup`].
    pub fn from_env(
        endpoint: Option<&str>,
        ca_file: Option<&std::path::Path>,
        fingerprint: Option<&str>,
        insecure: bool,
    ) -> Result<Self, ProxmoxError> {
        Self::from_lookup(endpoint, ca_file, fingerprint, insecure, |k| {
            std::env::var(k).ok()
        })
    }

    /// The warning to print for these settings: TLS verification off.
    pub fn warning(&self) -> Option<&'static str> {
        (self.tls == TlsMode::Insecure).then_some(tls::INSECURE_WARNING)
    }
}

/// `https://host:8006` from what a user writes (a trailing `/` or `/api2/json` is dropped).
///
/// # Errors
/// [`ProxmoxError::Settings`] when it is not an `https://` URL with a host.
pub fn normalize_endpoint(endpoint: &str) -> Result<String, ProxmoxError> {
    let trimmed = endpoint.trim().trim_end_matches('/');
    let trimmed = trimmed.strip_suffix("/api2/json").unwrap_or(trimmed);
    let url = url::Url::parse(trimmed)
        .map_err(|e| ProxmoxError::Settings(format!("endpoint '{endpoint}': {e}")))?;
    if url.scheme() != "https" || url.host_str().is_none() {
        return Err(ProxmoxError::Settings(format!(
            "endpoint '{endpoint}' must be an https:// URL such as https://pve.lan:8006"
        )));
    }
    Ok(trimmed.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn token_splits_at_the_last_equals_sign() {
        let t = ApiToken::parse("root@pam!talosprov=3f1c-aa=bb").expect("parses");
        assert_eq!(t.id, "root@pam!talosprov=3f1c-aa");
        let t = ApiToken::parse("terraform@pve!tp=2c1f6e4a-0000-4000-8000-000000000001")
            .expect("parses");
        assert_eq!(t.id, "terraform@pve!tp");
        assert_eq!(
            t.header(),
            "PVEAPIToken=terraform@pve!tp=2c1f6e4a-0000-4000-8000-000000000001"
        );
    }

    #[test]
    fn malformed_token_is_refused_without_showing_the_secret() {
        let e = ApiToken::parse("root@pam:abc-secret").expect_err("no =");
        assert!(!e.to_string().contains("abc-secret"), "{e}");
        let e = ApiToken::parse("rootpam!x=very-secret").expect_err("no realm");
        assert!(!e.to_string().contains("very-secret"), "{e}");
    }

    #[test]
    fn settings_prefer_topology_endpoint_and_token() {
        let s = Settings::from_lookup(
            Some("https://pve.lan:8006/api2/json/"),
            None,
            None,
            false,
            env(&[
                ("PROXMOX_VE_ENDPOINT", "https://other:8006"),
                ("PROXMOX_VE_API_TOKEN", "root@pam!t=s3cret"),
                ("PROXMOX_VE_USERNAME", "root@pam"),
                ("PROXMOX_VE_PASSWORD", "pw"),
            ]),
        )
        .expect("valid");
        assert_eq!(s.endpoint, "https://pve.lan:8006");
        assert!(matches!(s.auth, Auth::Token(_)));
        assert_eq!(s.tls, TlsMode::System);
        assert!(!format!("{s:?}").contains("s3cret"));
    }

    #[test]
    fn settings_fall_back_to_password_and_env_endpoint() {
        let s = Settings::from_lookup(
            None,
            None,
            None,
            false,
            env(&[
                ("PROXMOX_VE_ENDPOINT", "https://10.0.0.5:8006"),
                ("PROXMOX_VE_USERNAME", "root@pam"),
                ("PROXMOX_VE_PASSWORD", "pw"),
                ("PROXMOX_VE_INSECURE", "true"),
            ]),
        )
        .expect("valid");
        assert!(matches!(s.auth, Auth::Password { .. }));
        assert_eq!(s.tls, TlsMode::Insecure);
        assert!(s.warning().is_some());
    }

    #[test]
    fn ca_file_and_fingerprint_are_both_kept_and_outrank_insecure() {
        let fp = "AB:CD:01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB:CD:EF:01:23:45:67:89:AB";
        let lookup = env(&[
            ("PROXMOX_VE_API_TOKEN", "a@b!c=d"),
            ("PROXMOX_VE_INSECURE", "true"),
        ]);
        let ca = Some(std::path::Path::new("/etc/ca.pem"));
        let s = Settings::from_lookup(Some("https://h:8006"), ca, Some(fp), false, &lookup)
            .expect("valid");
        assert_eq!(
            s.tls,
            TlsMode::CaFileAndFingerprint {
                ca_file: "/etc/ca.pem".into(),
                fingerprint: Fingerprint::parse(fp).expect("fingerprint"),
            }
        );
        let s =
            Settings::from_lookup(Some("https://h:8006"), ca, None, false, &lookup).expect("valid");
        assert_eq!(s.tls, TlsMode::CaFile("/etc/ca.pem".into()));
        let s = Settings::from_lookup(Some("https://h:8006"), None, Some(fp), true, &lookup)
            .expect("valid");
        assert!(matches!(s.tls, TlsMode::Fingerprint(_)));
        assert_eq!(s.warning(), None);
    }

    #[test]
    fn missing_credentials_and_plain_http_are_refused() {
        let e = Settings::from_lookup(Some("https://h:8006"), None, None, false, env(&[]))
            .expect_err("no credentials");
        assert!(e.to_string().contains("PROXMOX_VE_API_TOKEN"), "{e}");
        let e = Settings::from_lookup(
            Some("http://h:8006"),
            None,
            None,
            false,
            env(&[("PROXMOX_VE_API_TOKEN", "a@b!c=d")]),
        )
        .expect_err("http");
        assert!(e.to_string().contains("https://"), "{e}");
    }
}
