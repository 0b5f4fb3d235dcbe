//! The one wrapper for secret values (the secrets bundle, private keys, API
//! token secrets, tickets, kubeconfigs, machine configs) whose `Debug` and
//! `Display` print `(sensitive)`, so a secret never reaches a log, a plan or an
//! error by accident. Every crate of the workspace uses this type.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A secret value, text by default. Read it with [`Sensitive::as_str`];
/// printing it shows [`REDACTED`]. Serialised as the plain value
/// (`#[serde(transparent)]`), since the state file holds the secrets.
#[derive(Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Sensitive<T = String>(T);

/// The text shown in place of a secret value, as OpenTofu shows it.
pub const REDACTED: &str = "(sensitive)";

impl<T> Sensitive<T> {
    /// Wrap a secret value (anything that converts into `T`, such as a
    /// `&str` for a `Sensitive<String>`).
    pub fn new(value: impl Into<T>) -> Self {
        Sensitive(value.into())
    }

    /// The secret value itself, for the few places that must write or send it
    /// (machine configs, secrets.yaml, talosconfig, kubeconfig, the state, the
    /// Proxmox API token header).
    pub fn expose(&self) -> &T {
        &self.0
    }
}

impl<T> From<T> for Sensitive<T> {
    fn from(value: T) -> Self {
        Sensitive(value)
    }
}

impl Sensitive<String> {
    /// The secret text as a `&str`.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl<T> fmt::Debug for Sensitive<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

impl<T> fmt::Display for Sensitive<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_and_display_never_show_the_value() {
        let s: Sensitive = Sensitive::new("inn7ol.u4ehnti8qyls9ymo");
        assert_eq!(format!("{s}"), "(sensitive)");
        assert_eq!(format!("{s:?}"), "(sensitive)");
        assert_eq!(format!("{:?}", Some(&s)), "Some((sensitive))");
        assert_eq!(s.expose(), "inn7ol.u4ehnti8qyls9ymo");
    }
}
