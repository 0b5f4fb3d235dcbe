//! When a plan renews the client certificates the state keeps: the talosconfig's admin
//! certificate (issued from the OS CA for 365 days) and the admin kubeconfig's (from the
//! Kubernetes CA). The siderolabs/talos provider renews the talosconfig within a month of
//! expiry; talosprov does the same for both, within [`DEFAULT_RENEW_WITHIN`] unless told
//! otherwise, and renews a certificate already expired the same way, since the CAs are in the
//! state.

use serde::{Deserialize, Serialize};
use time::format_description::well_known::Rfc3339;
use time::{Duration, OffsetDateTime};

/// The default renewal window: 30 days before a certificate expires.
pub const DEFAULT_RENEW_WITHIN: Duration = Duration::days(30);

/// How long before a CA in the secrets expires a plan warns about it: one year. A CA lives
/// ten years (`generate/secrets` in Talos); it is not renewed but rotated, and once it has
/// expired no node accepts the certificates it signed.
pub const CA_WARN_WITHIN: Duration = Duration::days(365);

/// Each CA of `secrets` with its name and where the bundle keeps it, for messages:
/// `("OS", "certs.os")`, the Kubernetes, aggregator and etcd CAs.
pub fn cas(
    secrets: &talosprov_machine::secrets::SecretsBundle,
) -> [(&'static str, &'static str, &str); 4] {
    let c = &secrets.certs;
    [
        ("OS (Talos API)", "certs.os", c.os.crt.as_str()),
        ("Kubernetes", "certs.k8s", c.k8s.crt.as_str()),
        (
            "Kubernetes aggregator",
            "certs.k8saggregator",
            c.k8s_aggregator.crt.as_str(),
        ),
        ("etcd", "certs.etcd", c.etcd.crt.as_str()),
    ]
}

/// The warnings of a plan about the CAs in the state's secrets that expire within
/// [`CA_WARN_WITHIN`] of `now`, or have expired; none when the state has no readable bundle.
pub fn ca_warnings(state: &talosprov_statefile::format::State, now: OffsetDateTime) -> Vec<String> {
    let Some(secrets) = state
        .secrets
        .as_ref()
        .and_then(|s| talosprov_machine::secrets_file::parse_secrets_yaml(s.expose()).ok())
    else {
        return Vec::new();
    };
    cas(&secrets)
        .iter()
        .filter_map(|(name, key, pem)| {
            let not_after = talosprov_machine::expiry::certificate_not_after(pem)?;
            let left = not_after - now;
            if left >= CA_WARN_WITHIN {
                return None;
            }
            let date = not_after.date();
            let when = if left.is_negative() {
                format!("expired on {date}")
            } else {
                format!("expires on {date}, in {} days", left.whole_days())
            };
            Some(format!(
                "the cluster's {name} CA ({key} in the secrets) {when}: rotate it before then \
                 (Talos's CA rotation), since no node accepts a certificate it signed once it \
                 has expired"
            ))
        })
        .collect()
}

/// The plan's clock and its renewal window. A saved plan keeps it (as
/// `{"now": RFC 3339, "within_seconds": n}`), so that apply plans again at the same time and
/// renews exactly what the plan showed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "RenewalWire", try_from = "RenewalWire")]
pub struct Renewal {
    /// When the plan is made (UTC).
    pub now: OffsetDateTime,
    /// A certificate that expires before `now + within` is renewed.
    pub within: Duration,
}

/// [`Renewal`] as JSON holds it.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RenewalWire {
    now: String,
    within_seconds: i64,
}

impl From<Renewal> for RenewalWire {
    fn from(r: Renewal) -> Self {
        RenewalWire {
            now: r.now.format(&Rfc3339).unwrap_or_default(),
            within_seconds: r.within.whole_seconds(),
        }
    }
}

impl TryFrom<RenewalWire> for Renewal {
    type Error = String;

    fn try_from(w: RenewalWire) -> Result<Self, String> {
        let now = OffsetDateTime::parse(&w.now, &Rfc3339)
            .map_err(|e| format!("renewal.now {:?} is not an RFC 3339 time: {e}", w.now))?;
        Ok(Renewal {
            now,
            within: Duration::seconds(w.within_seconds),
        })
    }
}

impl Renewal {
    /// The clock at `now` with the default window.
    pub fn at(now: OffsetDateTime) -> Self {
        Renewal {
            now,
            within: DEFAULT_RENEW_WITHIN,
        }
    }

    /// Whether a certificate valid until `not_after` is due for renewal.
    pub fn due(&self, not_after: OffsetDateTime) -> bool {
        not_after - self.now < self.within
    }

    /// The reason a plan gives for renewing a certificate valid until `not_after`:
    /// `client certificate expires 2027-11-30 (in 12 days) -> renew`, or
    /// `client certificate expired on 2027-11-30 (3 days ago) -> renew`.
    pub fn reason(&self, not_after: OffsetDateTime) -> String {
        let date = not_after.date();
        let left = not_after - self.now;
        let days = |n: i64| {
            if n == 1 {
                "1 day".to_owned()
            } else {
                format!("{n} days")
            }
        };
        if left.is_negative() {
            let ago = (-left).whole_days();
            let when = if ago == 0 {
                "today".to_owned()
            } else {
                format!("{} ago", days(ago))
            };
            format!("client certificate expired on {date} ({when}) -> renew")
        } else {
            let n = left.whole_days();
            let when = if n == 0 {
                "within a day".to_owned()
            } else {
                format!("in {}", days(n))
            };
            format!("client certificate expires {date} ({when}) -> renew")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng as _;
    use time::macros::datetime;

    #[test]
    fn cas_that_expire_within_a_year_are_warned_about_by_name() {
        let issued = datetime!(2017-06-01 00:00 UTC);
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(5);
        let bundle =
            talosprov_machine::secrets::SecretsBundle::generate_for_checks(&mut rng, issued)
                .expect("bundle");
        let mut state = talosprov_statefile::format::State::new(uuid::Uuid::nil());
        assert!(
            ca_warnings(&state, issued).is_empty(),
            "no secrets, no warning"
        );
        state.secrets = Some(talosprov_base::sensitive::Sensitive::new(
            talosprov_machine::secrets_file::secrets_yaml(&bundle),
        ));
        let expiry = issued + talosprov_machine::secrets::CA_VALIDITY;
        assert!(ca_warnings(&state, expiry - Duration::days(400)).is_empty());
        let found = ca_warnings(&state, expiry - Duration::days(100));
        assert_eq!(found.len(), 4, "{found:#?}");
        assert!(
            found[0].starts_with(&format!(
                "the cluster's OS (Talos API) CA (certs.os in the secrets) expires on {}, in 100 days",
                expiry.date()
            )),
            "{}",
            found[0]
        );
        let late = ca_warnings(&state, expiry + Duration::days(1));
        assert!(late[3].contains("etcd CA"), "{}", late[3]);
        assert!(
            late[3].contains(&format!("expired on {}", expiry.date())),
            "{}",
            late[3]
        );
    }

    #[test]
    fn certificates_are_due_within_the_window_and_after_they_expire() {
        let r = Renewal::at(datetime!(2027-11-18 09:00 UTC));
        let in_12_days = datetime!(2027-11-30 10:00 UTC);
        assert!(r.due(in_12_days));
        assert_eq!(
            r.reason(in_12_days),
            "client certificate expires 2027-11-30 (in 12 days) -> renew"
        );
        assert!(!r.due(datetime!(2027-12-19 10:00 UTC)));
        let expired = datetime!(2027-11-15 08:00 UTC);
        assert!(r.due(expired));
        assert_eq!(
            r.reason(expired),
            "client certificate expired on 2027-11-15 (3 days ago) -> renew"
        );
        assert_eq!(
            r.reason(datetime!(2027-11-19 08:00 UTC)),
            "client certificate expires 2027-11-19 (within a day) -> renew"
        );
        assert_eq!(
            r.reason(datetime!(2027-11-19 10:00 UTC)),
            "client certificate expires 2027-11-19 (in 1 day) -> renew"
        );
        let shorter = Renewal {
            within: Duration::days(7),
            ..r
        };
        assert!(!shorter.due(in_12_days));
        let json = serde_json::to_string(&shorter).unwrap();
        assert_eq!(
            json,
            r#"{"now":"2027-11-18T09:00:00Z","within_seconds":604800}"#
        );
        assert_eq!(serde_json::from_str::<Renewal>(&json).unwrap(), shorter);
        assert!(serde_json::from_str::<Renewal>(r#"{"now":"soon","within_seconds":1}"#).is_err());
    }
}
