//! The talosconfig as a value: talosctl's client config with one context (its
//! endpoints, nodes, the OS CA and an admin client certificate), read from and
//! written to talosctl's format. Issuing one is the machine layer's
//! (`machine::talosconfig::generate`). Source: Talos
//! `pkg/machinery/client/config/config.go`.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_yaml_ng::{Mapping, Value};

use crate::pem::CertAndKey;
use crate::yaml::{Flavour, to_string};

/// A talosconfig with one context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Talosconfig {
    /// The context name (the cluster name).
    pub context: String,
    /// `endpoints` (always written, possibly `[]`).
    pub endpoints: Vec<String>,
    /// `nodes` (left out when empty).
    pub nodes: Vec<String>,
    /// The OS CA certificate, PEM.
    pub ca: String,
    /// The admin client certificate and key, PEM.
    pub client: CertAndKey,
}

impl Talosconfig {
    /// The file text in talosctl's format (go-yaml `Marshal`): `context`, then `contexts` with
    /// `endpoints`, `nodes`, and `ca`/`crt`/`key` as standard base64 of PEM. Write it with
    /// mode 0600.
    pub fn to_yaml(&self) -> String {
        let list = |v: &[String]| Value::Sequence(v.iter().map(|s| s.as_str().into()).collect());
        let b64 = |s: &str| Value::String(STANDARD.encode(s.as_bytes()));
        let mut ctx = Mapping::new();
        ctx.insert("endpoints".into(), list(&self.endpoints));
        if !self.nodes.is_empty() {
            ctx.insert("nodes".into(), list(&self.nodes));
        }
        ctx.insert("ca".into(), b64(&self.ca));
        ctx.insert("crt".into(), b64(&self.client.crt));
        ctx.insert("key".into(), b64(self.client.key.expose()));
        let mut contexts = Mapping::new();
        contexts.insert(self.context.as_str().into(), Value::Mapping(ctx));
        let mut doc = Mapping::new();
        doc.insert("context".into(), self.context.as_str().into());
        doc.insert("contexts".into(), Value::Mapping(contexts));
        to_string(&Value::Mapping(doc), Flavour::Marshal)
    }

    /// Read a talosconfig in talosctl's format: its current `context`, and that
    /// context's `endpoints`, `nodes` and `ca`/`crt`/`key` (standard base64 of PEM),
    /// the reverse of [`Talosconfig::to_yaml`]. Other contexts are ignored.
    ///
    /// # Errors
    /// [`TalosconfigError`] naming what is missing or malformed; never a value.
    pub fn parse(text: &str) -> Result<Self, TalosconfigError> {
        let doc: Value = serde_yaml_ng::from_str(text).map_err(|_| TalosconfigError::NotYaml)?;
        let context = doc
            .get("context")
            .and_then(Value::as_str)
            .filter(|c| !c.is_empty())
            .ok_or(TalosconfigError::NoContext)?
            .to_owned();
        let ctx = doc
            .get("contexts")
            .and_then(|c| c.get(context.as_str()))
            .ok_or_else(|| TalosconfigError::MissingContext(context.clone()))?;
        let list = |name: &str| -> Vec<String> {
            ctx.get(name)
                .and_then(Value::as_sequence)
                .map(|s| {
                    s.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_owned)
                        .collect()
                })
                .unwrap_or_default()
        };
        let pem = |field: &'static str| -> Result<String, TalosconfigError> {
            let value = ctx.get(field).and_then(Value::as_str).ok_or_else(|| {
                TalosconfigError::MissingField {
                    field,
                    context: context.clone(),
                }
            })?;
            let bytes = STANDARD
                .decode(value.trim())
                .map_err(|_| TalosconfigError::NotBase64 { field })?;
            String::from_utf8(bytes).map_err(|_| TalosconfigError::NotPem { field })
        };
        Ok(Talosconfig {
            endpoints: list("endpoints"),
            nodes: list("nodes"),
            ca: pem("ca")?,
            client: CertAndKey {
                crt: pem("crt")?,
                key: crate::sensitive::Sensitive::new(pem("key")?),
            },
            context,
        })
    }
}

/// Why a talosconfig could not be read by [`Talosconfig::parse`]. The messages
/// name fields, never their values.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TalosconfigError {
    /// The text is not YAML.
    #[error("the talosconfig is not YAML")]
    NotYaml,
    /// No current `context`.
    #[error("the talosconfig has no current context")]
    NoContext,
    /// `contexts` lacks the current context.
    #[error("the talosconfig lacks its current context {0:?}")]
    MissingContext(String),
    /// The current context lacks `ca`, `crt` or `key`.
    #[error("the talosconfig has no {field} in context {context:?}")]
    MissingField {
        /// `ca`, `crt` or `key`.
        field: &'static str,
        /// The context name.
        context: String,
    },
    /// A field is not standard base64.
    #[error("the talosconfig's {field} is not base64")]
    NotBase64 {
        /// `ca`, `crt` or `key`.
        field: &'static str,
    },
    /// A field does not decode to text.
    #[error("the talosconfig's {field} is not PEM text")]
    NotPem {
        /// `ca`, `crt` or `key`.
        field: &'static str,
    },
}
