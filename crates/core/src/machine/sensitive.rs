//! A wrapper for secret values (tokens, private keys, the cluster secret) whose `Debug` and
//! `Display` print `(sensitive)`, so a secret never reaches a log, a plan or an error by accident.

use std::fmt;

/// A secret value. Read it with [`Sensitive::expose`]; printing it shows `(sensitive)`.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Sensitive<T>(T);

/// The text shown in place of a secret value, as OpenTofu shows it.
pub const REDACTED: &str = "(sensitive)";

impl<T> Sensitive<T> {
    /// Wrap a secret value.
    pub fn new(value: T) -> Self {
        Sensitive(value)
    }

    /// The secret value itself, for the few places that must write it (machine configs,
    /// secrets.yaml, talosconfig, kubeconfig).
    pub fn expose(&self) -> &T {
        &self.0
    }
}

impl<T> From<T> for Sensitive<T> {
    fn from(value: T) -> Self {
        Sensitive(value)
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
        let s = Sensitive::new("inn7ol.u4ehnti8qyls9ymo".to_string());
        assert_eq!(format!("{s}"), "(sensitive)");
        assert_eq!(format!("{s:?}"), "(sensitive)");
        assert_eq!(format!("{:?}", Some(&s)), "Some((sensitive))");
        assert_eq!(s.expose(), "inn7ol.u4ehnti8qyls9ymo");
    }
}
