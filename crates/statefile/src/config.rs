//! Which backend holds the state, resolved (purely) from the topology's
//! `state:` section, the environment (`TF_HTTP_*`, as GitLab's OpenTofu tooling
//! sets them) and `--backend-config KEY=VALUE` overrides. Names and defaults
//! follow OpenTofu `internal/backend/remote-state/http/backend.go`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use url::Url;

use talosprov_base::sensitive::Sensitive;

/// The local backend's state file, next to the topology file (OpenTofu's
/// `terraform.tfstate`, under talosprov's own name).
pub const DEFAULT_STATE_FILE: &str = "talosprov.tfstate";

/// The topology's `state:` section, as written (credentials never go here);
/// read with the topology's own reader ([`crate::topology::read`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StateSection {
    /// `local` or `http`.
    pub backend: Option<String>,
    /// Local state path, relative to the topology file's folder.
    pub path: Option<String>,
    /// http: the state URL (GET and POST).
    pub address: Option<String>,
    /// http: the lock URL (GitLab: `<address>/lock`).
    pub lock_address: Option<String>,
    /// http: the unlock URL (defaults to the lock URL).
    pub unlock_address: Option<String>,
    /// http: the lock method (default `LOCK`; GitLab wants `POST`).
    pub lock_method: Option<String>,
    /// http: the unlock method (default `UNLOCK`; GitLab wants `DELETE`).
    pub unlock_method: Option<String>,
}

/// Settings of the http backend, complete and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpBackendConfig {
    /// State URL: GET to read, `update_method` to save.
    pub address: Url,
    /// Method to save the state (`TF_HTTP_UPDATE_METHOD`, default `POST`).
    pub update_method: String,
    /// Lock URL; `None` means no locking, as in OpenTofu.
    pub lock_address: Option<Url>,
    /// Unlock URL; defaults to the lock URL.
    pub unlock_address: Option<Url>,
    /// Lock method (`TF_HTTP_LOCK_METHOD`, default `LOCK`).
    pub lock_method: String,
    /// Unlock method (`TF_HTTP_UNLOCK_METHOD`, default `UNLOCK`).
    pub unlock_method: String,
    /// Basic auth user (`TF_HTTP_USERNAME`), environment only.
    pub username: Option<String>,
    /// Basic auth password (`TF_HTTP_PASSWORD`), environment only.
    pub password: Option<Sensitive>,
    /// Retries after the first attempt (`TF_HTTP_RETRY_MAX`, default 2).
    pub retry_max: u32,
    /// First backoff (`TF_HTTP_RETRY_WAIT_MIN`, seconds, default 1).
    pub retry_wait_min: Duration,
    /// Longest backoff (`TF_HTTP_RETRY_WAIT_MAX`, seconds, default 30).
    pub retry_wait_max: Duration,
}

/// The backend to use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendConfig {
    /// A local state file.
    Local {
        /// The state file path.
        path: PathBuf,
    },
    /// The Terraform http protocol.
    Http(Box<HttpBackendConfig>),
}

/// A backend setting is missing or wrong. Each variant names where the value
/// came from (`state.address`, `TF_HTTP_RETRY_MAX`, `--backend-config ...`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// An override is not `KEY=VALUE`.
    #[error("--backend-config \"{0}\" is not KEY=VALUE")]
    NotKeyValue(String),
    /// An override key is not a backend setting.
    #[error(
        "--backend-config {0} is not a backend setting: use backend, path, address, \
         lock_address, unlock_address, lock_method, unlock_method, update_method, \
         retry_max, retry_wait_min or retry_wait_max"
    )]
    UnknownKey(String),
    /// Credentials on the command line.
    #[error(
        "--backend-config {key} is refused: credentials come only from the environment \
         ({variable})"
    )]
    Credential {
        /// `username` or `password`.
        key: String,
        /// The variable to use instead.
        variable: &'static str,
    },
    /// A value that does not parse.
    #[error("{from} = \"{value}\" is invalid: {reason}")]
    Invalid {
        /// Where the value came from.
        from: String,
        /// The value as given, which cannot be parsed.
        value: String,
        /// What is expected.
        reason: &'static str,
    },
    /// http chosen with no address anywhere.
    #[error(
        "the http state backend needs an address: set TF_HTTP_ADDRESS, state.address in \
         the topology, or --backend-config address=URL"
    )]
    MissingAddress,
    /// `--state` given while the backend is http.
    #[error("--state names a local state file, but the backend is http (from {0})")]
    StateFlagWithHttp(String),
}

/// A value and where it came from.
struct Setting {
    value: String,
    from: String,
}

/// Parse `--backend-config KEY=VALUE` arguments.
///
/// # Errors
/// [`ConfigError::NotKeyValue`] for an argument without `=`.
pub fn parse_overrides(args: &[String]) -> Result<Vec<(String, String)>, ConfigError> {
    args.iter()
        .map(|a| match a.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_owned(), v.to_owned())),
            _ => Err(ConfigError::NotKeyValue(a.clone())),
        })
        .collect()
}

/// Resolve the backend: for each setting, a `--backend-config` override wins,
/// then the topology's `state:` section, then the `TF_HTTP_*` variable, then
/// OpenTofu's default. The backend is http when chosen explicitly or when an
/// address is set anywhere (`TF_HTTP_ADDRESS` included); otherwise local, at
/// `--state PATH` or `talosprov.tfstate` in `topology_dir`.
///
/// # Errors
/// [`ConfigError`], naming the setting and where it came from.
pub fn resolve(
    section: &StateSection,
    env: &BTreeMap<String, String>,
    overrides: &[(String, String)],
    topology_dir: &Path,
    state_flag: Option<&Path>,
) -> Result<BackendConfig, ConfigError> {
    let sources = Sources {
        over: known_overrides(overrides)?,
        section,
        env,
    };
    let address = sources.pick("address", &section.address, Some("TF_HTTP_ADDRESS"));
    let backend = sources.pick("backend", &section.backend, None);
    let (is_http, chosen_by) = match &backend {
        Some(s) => match s.value.as_str() {
            "local" => (false, s.from.clone()),
            "http" => (true, s.from.clone()),
            _ => return Err(invalid(s, "expected local or http")),
        },
        None => match &address {
            Some(a) => (true, a.from.clone()),
            None => (false, String::new()),
        },
    };

    if !is_http {
        let path = if let Some(p) = state_flag {
            p.to_path_buf()
        } else if let Some(p) = sources.over.get("path") {
            PathBuf::from(p)
        } else if let Some(p) = &section.path {
            topology_dir.join(p)
        } else {
            topology_dir.join(DEFAULT_STATE_FILE)
        };
        return Ok(BackendConfig::Local { path });
    }
    if state_flag.is_some() {
        return Err(ConfigError::StateFlagWithHttp(chosen_by));
    }
    let address = url(&address.ok_or(ConfigError::MissingAddress)?)?;
    Ok(BackendConfig::Http(Box::new(resolve_http(
        &sources, address,
    )?)))
}

/// The `--backend-config` overrides by key; credentials are refused (they
/// come from the environment only), as is a key OpenTofu's http backend
/// does not have.
fn known_overrides(overrides: &[(String, String)]) -> Result<BTreeMap<&str, &str>, ConfigError> {
    let mut over: BTreeMap<&str, &str> = BTreeMap::new();
    for (k, v) in overrides {
        match k.as_str() {
            "username" => return Err(credential(k, "TF_HTTP_USERNAME")),
            "password" => return Err(credential(k, "TF_HTTP_PASSWORD")),
            "backend" | "path" | "address" | "lock_address" | "unlock_address" | "lock_method"
            | "unlock_method" | "update_method" | "retry_max" | "retry_wait_min"
            | "retry_wait_max" => {
                over.insert(k.as_str(), v.as_str());
            }
            _ => return Err(ConfigError::UnknownKey(k.clone())),
        }
    }
    Ok(over)
}

/// Where backend settings come from, in the order they win.
struct Sources<'a> {
    /// `--backend-config` overrides by key.
    over: BTreeMap<&'a str, &'a str>,
    section: &'a StateSection,
    env: &'a BTreeMap<String, String>,
}

impl Sources<'_> {
    /// A setting from the override of `key`, else the `state:` section's
    /// value, else the (non-empty) `variable`.
    fn pick(
        &self,
        key: &str,
        from_section: &Option<String>,
        variable: Option<&str>,
    ) -> Option<Setting> {
        if let Some(v) = self.over.get(key) {
            return Some(Setting {
                value: (*v).to_owned(),
                from: format!("--backend-config {key}"),
            });
        }
        if let Some(v) = from_section {
            return Some(Setting {
                value: v.clone(),
                from: format!("state.{key}"),
            });
        }
        let var = variable?;
        self.env
            .get(var)
            .filter(|v| !v.is_empty())
            .map(|v| Setting {
                value: v.clone(),
                from: var.to_owned(),
            })
    }

    /// An HTTP method setting (an RFC 9110 token), else `default`.
    fn method(
        &self,
        key: &str,
        from_section: &Option<String>,
        var: &str,
        default: &str,
    ) -> Result<String, ConfigError> {
        match self.pick(key, from_section, Some(var)) {
            Some(m) if is_token(&m.value) => Ok(m.value),
            Some(m) => Err(invalid(&m, "expected an HTTP method such as POST or LOCK")),
            None => Ok(default.to_owned()),
        }
    }

    /// A duration setting, in seconds or as a duration such as `5m` (read
    /// as every duration is, [`crate::duration::parse`]), else `default`
    /// seconds.
    fn seconds(&self, key: &str, var: &str, default: u64) -> Result<Duration, ConfigError> {
        match self.pick(key, &None, Some(var)) {
            Some(s) => talosprov_base::duration::parse(&s.value)
                .map_err(|_| invalid(&s, talosprov_base::duration::EXPECTED)),
            None => Ok(Duration::from_secs(default)),
        }
    }

    /// A URL setting, if set anywhere.
    fn optional_url(
        &self,
        key: &str,
        from_section: &Option<String>,
        var: &str,
    ) -> Result<Option<Url>, ConfigError> {
        self.pick(key, from_section, Some(var))
            .map(|s| url(&s))
            .transpose()
    }
}

/// The http backend's settings past its `address`: lock and unlock
/// addresses (unlock defaults to lock), methods, credentials from the
/// environment only, and the retry policy, with OpenTofu's defaults.
fn resolve_http(sources: &Sources<'_>, address: Url) -> Result<HttpBackendConfig, ConfigError> {
    let section = sources.section;
    let env = sources.env;
    let lock_address = sources.optional_url(
        "lock_address",
        &section.lock_address,
        "TF_HTTP_LOCK_ADDRESS",
    )?;
    let unlock_address = sources
        .optional_url(
            "unlock_address",
            &section.unlock_address,
            "TF_HTTP_UNLOCK_ADDRESS",
        )?
        .or_else(|| lock_address.clone());
    let retry_max = match sources.pick("retry_max", &None, Some("TF_HTTP_RETRY_MAX")) {
        Some(s) => s
            .value
            .trim()
            .parse::<u32>()
            .map_err(|_| invalid(&s, "expected a whole number of retries"))?,
        None => 2,
    };
    Ok(HttpBackendConfig {
        address,
        update_method: sources.method("update_method", &None, "TF_HTTP_UPDATE_METHOD", "POST")?,
        lock_address,
        unlock_address,
        lock_method: sources.method(
            "lock_method",
            &section.lock_method,
            "TF_HTTP_LOCK_METHOD",
            "LOCK",
        )?,
        unlock_method: sources.method(
            "unlock_method",
            &section.unlock_method,
            "TF_HTTP_UNLOCK_METHOD",
            "UNLOCK",
        )?,
        username: env
            .get("TF_HTTP_USERNAME")
            .filter(|v| !v.is_empty())
            .cloned(),
        password: env
            .get("TF_HTTP_PASSWORD")
            .filter(|v| !v.is_empty())
            .map(Sensitive::new),
        retry_max,
        retry_wait_min: sources.seconds("retry_wait_min", "TF_HTTP_RETRY_WAIT_MIN", 1)?,
        retry_wait_max: sources.seconds("retry_wait_max", "TF_HTTP_RETRY_WAIT_MAX", 30)?,
    })
}

fn credential(key: &str, variable: &'static str) -> ConfigError {
    ConfigError::Credential {
        key: key.to_owned(),
        variable,
    }
}

fn invalid(s: &Setting, reason: &'static str) -> ConfigError {
    ConfigError::Invalid {
        from: s.from.clone(),
        value: s.value.clone(),
        reason,
    }
}

fn url(s: &Setting) -> Result<Url, ConfigError> {
    match Url::parse(&s.value) {
        Ok(mut u) if u.password().is_some() => {
            let _ = u.set_password(Some("REDACTED"));
            Err(ConfigError::Invalid {
                from: s.from.clone(),
                value: u.to_string(),
                reason: "credentials do not go in the URL: use TF_HTTP_USERNAME and TF_HTTP_PASSWORD",
            })
        }
        Ok(u) if matches!(u.scheme(), "http" | "https") => Ok(u),
        _ => Err(invalid(s, "expected an http:// or https:// URL")),
    }
}

/// An HTTP method token (RFC 9110 `token`, letters only in practice).
fn is_token(m: &str) -> bool {
    !m.is_empty() && m.bytes().all(|b| b.is_ascii_alphabetic())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn http(c: BackendConfig) -> HttpBackendConfig {
        match c {
            BackendConfig::Http(h) => *h,
            other => panic!("expected http, got {other:?}"),
        }
    }

    #[test]
    fn local_state_defaults_next_to_the_topology_file() {
        let c = resolve(
            &StateSection::default(),
            &env(&[]),
            &[],
            Path::new("/c"),
            None,
        )
        .unwrap();
        assert_eq!(
            c,
            BackendConfig::Local {
                path: PathBuf::from("/c/talosprov.tfstate")
            }
        );
    }

    #[test]
    fn gitlab_environment_selects_http_with_opentofu_defaults() {
        let e = env(&[
            (
                "TF_HTTP_ADDRESS",
                "https://gitlab.example/api/v4/projects/1/terraform/state/lab",
            ),
            (
                "TF_HTTP_LOCK_ADDRESS",
                "https://gitlab.example/api/v4/projects/1/terraform/state/lab/lock",
            ),
            ("TF_HTTP_LOCK_METHOD", "POST"),
            ("TF_HTTP_UNLOCK_METHOD", "DELETE"),
            ("TF_HTTP_USERNAME", "gitlab-ci-token"),
            ("TF_HTTP_PASSWORD", "glcbt-secret"),
        ]);
        let h = http(resolve(&StateSection::default(), &e, &[], Path::new("."), None).unwrap());
        assert_eq!(h.lock_method, "POST");
        assert_eq!(h.unlock_method, "DELETE");
        assert_eq!(
            h.unlock_address, h.lock_address,
            "unlock defaults to the lock URL"
        );
        assert_eq!(h.update_method, "POST");
        assert_eq!(
            (h.retry_max, h.retry_wait_min, h.retry_wait_max),
            (2, Duration::from_secs(1), Duration::from_secs(30))
        );
        assert_eq!(
            h.password.as_ref().map(Sensitive::as_str),
            Some("glcbt-secret")
        );
        assert!(!format!("{h:?}").contains("glcbt-secret"));
    }

    #[test]
    fn override_beats_section_beats_environment() {
        let section = StateSection {
            backend: Some("http".to_owned()),
            address: Some("http://127.0.0.1:1/section".to_owned()),
            lock_method: Some("PUT".to_owned()),
            ..StateSection::default()
        };
        let e = env(&[
            ("TF_HTTP_ADDRESS", "http://127.0.0.1:1/env"),
            ("TF_HTTP_LOCK_METHOD", "LOCK"),
        ]);
        let o = parse_overrides(&["address=http://127.0.0.1:1/flag".to_owned()]).unwrap();
        let h = http(resolve(&section, &e, &o, Path::new("."), None).unwrap());
        assert_eq!(h.address.path(), "/flag");
        assert_eq!(h.lock_method, "PUT");
        assert_eq!(h.lock_address, None, "no lock address means no locking");
    }

    #[test]
    fn explicit_local_backend_wins_over_tf_http_address() {
        let section = StateSection {
            backend: Some("local".to_owned()),
            path: Some("state/lab.tfstate".to_owned()),
            ..StateSection::default()
        };
        let e = env(&[("TF_HTTP_ADDRESS", "http://127.0.0.1:1/s")]);
        let c = resolve(&section, &e, &[], Path::new("/c"), None).unwrap();
        assert_eq!(
            c,
            BackendConfig::Local {
                path: PathBuf::from("/c/state/lab.tfstate")
            }
        );
    }

    #[test]
    fn retry_waits_are_read_as_every_duration_is() {
        let with = |o: &[&str]| {
            let e = env(&[
                ("TF_HTTP_ADDRESS", "http://127.0.0.1:1/s"),
                ("TF_HTTP_RETRY_WAIT_MIN", "2"),
            ]);
            let o: Vec<String> = o.iter().map(|s| (*s).to_owned()).collect();
            let o = parse_overrides(&o).unwrap();
            resolve(&StateSection::default(), &e, &o, Path::new("."), None)
        };
        let h = http(with(&["retry_wait_max=5m"]).unwrap());
        assert_eq!(
            (h.retry_wait_min, h.retry_wait_max),
            (Duration::from_secs(2), Duration::from_secs(300))
        );
        let h = http(with(&["retry_wait_min=500ms"]).unwrap());
        assert_eq!(h.retry_wait_min, Duration::from_millis(500));
        assert_eq!(
            with(&["retry_wait_max=soon"]).unwrap_err().to_string(),
            format!(
                "--backend-config retry_wait_max = \"soon\" is invalid: {}",
                talosprov_base::duration::EXPECTED
            )
        );
    }

    #[test]
    fn configuration_errors_name_their_source() {
        let bad = |section: StateSection, e: &[(&str, &str)], o: &[&str]| {
            let o: Vec<String> = o.iter().map(|s| (*s).to_owned()).collect();
            match parse_overrides(&o) {
                Ok(o) => resolve(&section, &env(e), &o, Path::new("."), None)
                    .unwrap_err()
                    .to_string(),
                Err(e) => e.to_string(),
            }
        };
        let http_section = StateSection {
            backend: Some("http".to_owned()),
            ..StateSection::default()
        };
        let text = [
            bad(http_section.clone(), &[], &[]),
            bad(
                StateSection::default(),
                &[("TF_HTTP_ADDRESS", "ftp://x")],
                &[],
            ),
            bad(
                StateSection::default(),
                &[
                    ("TF_HTTP_ADDRESS", "http://127.0.0.1/"),
                    ("TF_HTTP_RETRY_MAX", "lots"),
                ],
                &[],
            ),
            bad(StateSection::default(), &[], &["password=hunter2"]),
            bad(
                StateSection::default(),
                &[("TF_HTTP_ADDRESS", "https://u:hunter2@gitlab.example/s")],
                &[],
            ),
            bad(StateSection::default(), &[], &["colour=red"]),
            bad(StateSection::default(), &[], &["address"]),
            bad(
                StateSection {
                    backend: Some("s3".to_owned()),
                    ..StateSection::default()
                },
                &[],
                &[],
            ),
        ]
        .join("\n");
        assert!(!text.contains("hunter2"));
        insta::assert_snapshot!(text);
    }

    #[test]
    fn state_flag_is_refused_with_the_http_backend() {
        let e = env(&[("TF_HTTP_ADDRESS", "http://127.0.0.1:1/s")]);
        let err = resolve(
            &StateSection::default(),
            &e,
            &[],
            Path::new("."),
            Some(Path::new("x")),
        )
        .unwrap_err();
        assert_eq!(
            err,
            ConfigError::StateFlagWithHttp("TF_HTTP_ADDRESS".to_owned())
        );
    }
}
