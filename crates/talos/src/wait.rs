//! The waits of a cluster's life: reachable in maintenance mode, secure mode up after
//! the install reboot, etcd ready to bootstrap. Each retries transient failures
//! (refused connections, Unavailable, FailedPrecondition) with capped exponential
//! backoff until a deadline that its error names, with the cause that kept
//! failing, in operator words; a secure-mode wait also tells a node in
//! maintenance mode, or in another cluster, from one still booting.

use std::future::Future;
use std::net::IpAddr;
use std::time::Duration;

use tokio::time::Instant;

use super::client::TalosClient;
use super::credentials::ClientCredentials;
use super::error::{NodeName, TalosError};
use super::types::BootstrapOutcome;

use talosprov_retry::Backoff;

/// How many failures in a row with the same cause make it worth naming.
pub const SAME_CAUSE_AFTER: u32 = 3;

/// Follows what a wait keeps failing with: the same cause for
/// [`SAME_CAUSE_AFTER`] attempts in a row is named, once, to `on_cause`, and
/// in the deadline error.
pub struct CauseTracker<'a> {
    key: Option<String>,
    text: String,
    repeats: u32,
    since: Instant,
    on_cause: &'a (dyn Fn(&str) + Send + Sync),
}

impl std::fmt::Debug for CauseTracker<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CauseTracker")
            .field("key", &self.key)
            .field("repeats", &self.repeats)
            .finish_non_exhaustive()
    }
}

impl<'a> CauseTracker<'a> {
    /// A tracker that tells `on_cause` of a cause that persists.
    pub fn new(on_cause: &'a (dyn Fn(&str) + Send + Sync)) -> Self {
        CauseTracker {
            key: None,
            text: String::new(),
            repeats: 0,
            since: Instant::now(),
            on_cause,
        }
    }

    /// Note one failed attempt.
    pub fn failed(&mut self, err: &TalosError) {
        let explained = err.explain();
        if self.key.as_deref() == Some(explained.key.as_str()) {
            self.repeats += 1;
        } else {
            self.key = Some(explained.key);
            self.repeats = 1;
            self.since = Instant::now();
        }
        self.text = explained.text;
        if self.repeats == SAME_CAUSE_AFTER {
            (self.on_cause)(&self.text);
        }
    }

    /// The persisting cause with how long it lasted, for a deadline error:
    /// `cp-1 refuses connections ... (for the last 880 s)`; `None` when the
    /// last failures differed.
    pub fn persisting(&self) -> Option<String> {
        (self.repeats >= 2).then(|| {
            let secs = self.since.elapsed().as_secs();
            match self.text.split_once(": ") {
                Some((what, why)) => format!("{what} (for the last {secs} s): {why}"),
                None => format!("{} (for the last {secs} s)", self.text),
            }
        })
    }
}

/// Nothing to tell.
fn quiet(_: &str) {}

/// Runs `attempt` until it succeeds, fails with a non-transient error, or `timeout`
/// passes; the deadline error carries `what`, the cause that persisted, and the
/// last failure.
pub async fn retry_until<T, F, Fut>(
    node: &NodeName,
    what: &'static str,
    timeout: Duration,
    backoff: Backoff,
    attempt: F,
) -> Result<T, TalosError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, TalosError>>,
{
    retry_explained(node, what, timeout, backoff, &quiet, attempt).await
}

/// [`retry_until`], telling `on_cause` (once per cause) of a failure that
/// repeats [`SAME_CAUSE_AFTER`] times in a row, in operator words
/// ([`TalosError::explain`]).
///
/// # Errors
/// The first non-transient error, or [`TalosError::Deadline`].
pub async fn retry_explained<T, F, Fut>(
    node: &NodeName,
    what: &'static str,
    timeout: Duration,
    backoff: Backoff,
    on_cause: &(dyn Fn(&str) + Send + Sync),
    mut attempt: F,
) -> Result<T, TalosError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, TalosError>>,
{
    let deadline = Instant::now() + timeout;
    let mut tries = 0u32;
    let mut causes = CauseTracker::new(on_cause);
    let mut previous: Option<TalosError> = None;
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        let last = match tokio::time::timeout(remaining, attempt()).await {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(err)) if err.is_transient() => err,
            Ok(Err(err)) => return Err(err),
            // An attempt cut short by the deadline says nothing new: the
            // failure before it is the one to name.
            Err(_) if previous.is_some() => {
                return Err(TalosError::Deadline {
                    node: node.clone(),
                    what,
                    waited: timeout,
                    cause: causes.persisting(),
                    last: Box::new(previous.take().expect("checked")),
                });
            }
            Err(_) => TalosError::Unreachable {
                node: node.clone(),
                reason: "the attempt was still running at the deadline".to_string(),
            },
        };
        tracing::debug!(node = %node, what, error = %last, "not yet");
        causes.failed(&last);
        let pause = backoff.delay(tries);
        tries += 1;
        if Instant::now() + pause >= deadline {
            return Err(TalosError::Deadline {
                node: node.clone(),
                what,
                waited: timeout,
                cause: causes.persisting(),
                last: Box::new(last),
            });
        }
        previous = Some(last);
        tokio::time::sleep(pause).await;
    }
}

fn node_name(ip: IpAddr, hostname: Option<&str>) -> NodeName {
    NodeName {
        ip,
        hostname: hostname.map(str::to_string),
    }
}

fn named(client: TalosClient, hostname: Option<&str>) -> TalosClient {
    match hostname {
        Some(h) => client.with_hostname(h),
        None => client,
    }
}

/// Waits until the node answers Version in maintenance mode; returns a maintenance
/// client. Errors: [`TalosError::Deadline`] ("reachable in maintenance mode").
pub async fn wait_maintenance(
    ip: IpAddr,
    hostname: Option<&str>,
    timeout: Duration,
    backoff: Backoff,
) -> Result<TalosClient, TalosError> {
    let node = node_name(ip, hostname);
    retry_until(
        &node,
        "reachable in maintenance mode",
        timeout,
        backoff,
        || async {
            let client = TalosClient::connect_maintenance(ip)
                .await
                .map_err(|e| e.with_hostname(hostname))?;
            let client = named(client, hostname);
            client.version().await?;
            Ok(client)
        },
    )
    .await
}

/// Waits until the node serves mutual TLS with a certificate from the OS CA and
/// answers Version (after the install reboot). A certificate from an unknown issuer
/// (the maintenance-mode one) is retried. Errors: [`TalosError::Deadline`]
/// ("up in secure mode"), or at once on a rejected client certificate or a server
/// certificate that does not verify; see [`wait_secure_with`] for a node found in
/// maintenance mode (here: the config was just applied).
pub async fn wait_secure(
    ip: IpAddr,
    hostname: Option<&str>,
    credentials: &ClientCredentials,
    timeout: Duration,
    backoff: Backoff,
) -> Result<TalosClient, TalosError> {
    let options = SecureWait {
        timeout,
        backoff,
        in_maintenance: InMaintenance::AfterApply {
            grace: MAINTENANCE_GRACE,
        },
        on_cause: &quiet,
    };
    wait_secure_with(ip, hostname, credentials, &options).await
}

/// How long a node given its config in maintenance mode may still answer in
/// maintenance mode before it goes down for its install (Talos stops the
/// maintenance API once the config is in; a few seconds at most).
pub const MAINTENANCE_GRACE: Duration = Duration::from_secs(10);

/// What a secure-mode wait makes of a node that answers in maintenance mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InMaintenance {
    /// The node is recorded configured (bootstrap, kubeconfig, a reboot):
    /// maintenance mode means it was reset; the wait fails at once.
    Fails,
    /// Its config was just applied in maintenance mode: it may answer there
    /// until it goes down for its install; once it was seen down, or after
    /// `grace`, maintenance mode means the config did not take, and the wait
    /// fails.
    AfterApply {
        /// How long it may keep answering in maintenance mode at first.
        grace: Duration,
    },
}

/// The settings of [`wait_secure_with`].
pub struct SecureWait<'a> {
    /// The deadline, from the start of the wait.
    pub timeout: Duration,
    /// Retry pacing.
    pub backoff: Backoff,
    /// What a maintenance-mode answer means.
    pub in_maintenance: InMaintenance,
    /// Told, in operator words, of a cause that keeps the node from answering
    /// (see [`CauseTracker`]).
    pub on_cause: &'a (dyn Fn(&str) + Send + Sync),
}

impl std::fmt::Debug for SecureWait<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecureWait")
            .field("timeout", &self.timeout)
            .field("backoff", &self.backoff)
            .field("in_maintenance", &self.in_maintenance)
            .finish_non_exhaustive()
    }
}

/// Waits until the node is up in secure mode, as [`wait_secure`], and tells
/// apart what keeps it from answering. A certificate from an unknown issuer is
/// looked into with a maintenance-mode probe: a node answering there is
/// judged by `in_maintenance` ([`TalosError::InMaintenance`]); one that asks
/// for a client certificate runs another cluster's config
/// ([`TalosError::OtherCluster`], at once).
///
/// # Errors
/// [`TalosError::Deadline`] naming the cause that persisted; the errors above;
/// a rejected client certificate or a server certificate that does not verify.
pub async fn wait_secure_with(
    ip: IpAddr,
    hostname: Option<&str>,
    credentials: &ClientCredentials,
    options: &SecureWait<'_>,
) -> Result<TalosClient, TalosError> {
    let node = node_name(ip, hostname);
    let started = Instant::now();
    let seen_down = std::sync::atomic::AtomicBool::new(false);
    retry_explained(
        &node,
        "up in secure mode",
        options.timeout,
        options.backoff,
        options.on_cause,
        || async {
            let secure = async {
                let client = TalosClient::connect_secure(ip, credentials)
                    .await
                    .map_err(|e| e.with_hostname(hostname))?;
                let client = named(client, hostname);
                client.version().await?;
                Ok(client)
            }
            .await;
            let err = match secure {
                Ok(client) => return Ok(client),
                Err(e) => e,
            };
            match &err {
                TalosError::Unreachable { .. } => {
                    seen_down.store(true, std::sync::atomic::Ordering::Relaxed);
                    Err(err)
                }
                TalosError::ServerCertificate {
                    unknown_issuer: true,
                    ..
                } => match probe_maintenance(ip).await {
                    Probe::Maintenance => {
                        let (after_apply, settling) = match options.in_maintenance {
                            InMaintenance::Fails => (false, false),
                            InMaintenance::AfterApply { grace } => (
                                true,
                                !seen_down.load(std::sync::atomic::Ordering::Relaxed)
                                    && started.elapsed() < grace,
                            ),
                        };
                        Err(TalosError::InMaintenance {
                            node: node.clone(),
                            after_apply,
                            settling,
                        })
                    }
                    Probe::WantsClientCertificate => {
                        Err(TalosError::OtherCluster { node: node.clone() })
                    }
                    Probe::Nothing => Err(err),
                },
                _ => Err(err),
            }
        },
    )
    .await
}

/// What a maintenance-mode probe found.
enum Probe {
    /// The node answered Version without a client certificate.
    Maintenance,
    /// It refused the connection for lack of a client certificate: configured.
    WantsClientCertificate,
    /// Anything else (down, rebooting).
    Nothing,
}

/// Probe the node in maintenance mode (no client certificate), within 5 s.
async fn probe_maintenance(ip: IpAddr) -> Probe {
    let answer = tokio::time::timeout(Duration::from_secs(5), async {
        TalosClient::connect_maintenance(ip).await?.version().await
    })
    .await;
    match answer {
        Ok(Ok(_)) => Probe::Maintenance,
        Ok(Err(TalosError::ClientCertificateRejected { .. })) => Probe::WantsClientCertificate,
        _ => Probe::Nothing,
    }
}

/// Waits until a control-plane node's CRI is running and its etcd service exists
/// (Preparing, i.e. waiting for bootstrap, or already Running): the point where
/// Bootstrap can succeed. Errors: [`TalosError::Deadline`] ("ready to bootstrap etcd").
pub async fn wait_etcd_ready(
    client: &TalosClient,
    timeout: Duration,
    backoff: Backoff,
) -> Result<(), TalosError> {
    wait_etcd_ready_explained(client, timeout, backoff, &quiet).await
}

/// [`wait_etcd_ready`], telling `on_cause` of what keeps etcd from being ready
/// when it persists (see [`retry_explained`]).
///
/// # Errors
/// As [`wait_etcd_ready`].
pub async fn wait_etcd_ready_explained(
    client: &TalosClient,
    timeout: Duration,
    backoff: Backoff,
    on_cause: &(dyn Fn(&str) + Send + Sync),
) -> Result<(), TalosError> {
    retry_explained(
        client.node(),
        "ready to bootstrap etcd",
        timeout,
        backoff,
        on_cause,
        || async {
            let services = client.service_list().await?;
            let state = |id: &str| {
                services
                    .iter()
                    .find(|s| s.id == id)
                    .map(|s| s.state.as_str())
            };
            match (state("cri"), state("etcd")) {
                (Some("Running"), Some("Preparing" | "Running")) => Ok(()),
                (cri, etcd) => Err(TalosError::NotReady {
                    node: client.node().clone(),
                    rpc: "ServiceList",
                    message: format!(
                        "cri is {}, etcd is {}",
                        cri.unwrap_or("absent"),
                        etcd.unwrap_or("absent")
                    ),
                }),
            }
        },
    )
    .await
}

/// Calls Bootstrap, retrying FailedPrecondition ("bootstrap is not available yet",
/// "time is not in sync yet") until `timeout`. AlreadyExists with healthy members is
/// success ([`BootstrapOutcome::AlreadyBootstrapped`]).
pub async fn bootstrap_when_ready(
    client: &TalosClient,
    timeout: Duration,
    backoff: Backoff,
) -> Result<BootstrapOutcome, TalosError> {
    bootstrap_when_ready_explained(client, timeout, backoff, &quiet).await
}

/// [`bootstrap_when_ready`], telling `on_cause` of a refusal that persists
/// (see [`retry_explained`]).
///
/// # Errors
/// As [`bootstrap_when_ready`].
pub async fn bootstrap_when_ready_explained(
    client: &TalosClient,
    timeout: Duration,
    backoff: Backoff,
    on_cause: &(dyn Fn(&str) + Send + Sync),
) -> Result<BootstrapOutcome, TalosError> {
    retry_explained(
        client.node(),
        "bootstrapped",
        timeout,
        backoff,
        on_cause,
        || client.bootstrap(),
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_its_cap() {
        let b = Backoff {
            initial: Duration::from_millis(100),
            max: Duration::from_millis(700),
        };
        let delays: Vec<_> = (0..5).map(|i| b.delay(i).as_millis()).collect();
        assert_eq!(delays, [100, 200, 400, 700, 700]);
        assert_eq!(b.delay(60), Duration::from_millis(700));
    }

    #[tokio::test]
    async fn deadline_error_names_what_and_how_long() {
        let node = node_name("127.0.0.9".parse().unwrap(), Some("cp-1"));
        let err = retry_until::<(), _, _>(
            &node,
            "reachable in maintenance mode",
            Duration::from_millis(1000),
            Backoff {
                initial: Duration::from_millis(10),
                max: Duration::from_millis(50),
            },
            || async {
                Err(TalosError::Unreachable {
                    node: node_name("127.0.0.9".parse().unwrap(), Some("cp-1")),
                    reason: "Connection refused (os error 111)".into(),
                })
            },
        )
        .await
        .unwrap_err();
        let text = err.to_string();
        let (head, tail) = text
            .split_once(" (for the last ")
            .expect("names the persisting cause");
        assert_eq!(
            head,
            "node 127.0.0.9 (cp-1) was not reachable in maintenance mode within 1 s: cp-1 refuses connections on the Talos API port 50000"
        );
        assert!(
            tail.ends_with(" s): it is down, booting or installing"),
            "{text}"
        );
        let source = std::error::Error::source(&err).unwrap().to_string();
        assert!(source.contains("Connection refused"), "{source}");
    }

    #[tokio::test]
    async fn a_cause_is_named_once_after_it_repeats_and_again_when_it_changes() {
        let node = node_name("127.0.0.9".parse().unwrap(), Some("w-1"));
        let told = std::sync::Mutex::new(Vec::new());
        let on_cause = |c: &str| told.lock().unwrap().push(c.to_owned());
        let mut calls = 0;
        let err = retry_explained::<(), _, _>(
            &node,
            "up in secure mode",
            Duration::from_millis(400),
            Backoff {
                initial: Duration::from_millis(5),
                max: Duration::from_millis(5),
            },
            &on_cause,
            || {
                calls += 1;
                let n = calls;
                async move {
                    Err(if n <= 4 {
                        TalosError::Unreachable {
                            node: node_name("127.0.0.9".parse().unwrap(), Some("w-1")),
                            reason: "Connection refused (os error 111)".into(),
                        }
                    } else {
                        TalosError::NotReady {
                            node: node_name("127.0.0.9".parse().unwrap(), Some("w-1")),
                            rpc: "Bootstrap",
                            message: "bootstrap is not available yet".into(),
                        }
                    })
                }
            },
        )
        .await
        .unwrap_err();
        assert_eq!(
            *told.lock().unwrap(),
            [
                "w-1 refuses connections on the Talos API port 50000: it is down, booting or installing",
                "w-1 is not ready for Bootstrap: bootstrap is not available yet",
            ]
        );
        assert!(
            err.to_string()
                .contains(": w-1 is not ready for Bootstrap (for the last "),
            "{err}"
        );
    }

    #[tokio::test]
    async fn permanent_errors_are_not_retried() {
        let node = node_name("127.0.0.9".parse().unwrap(), None);
        let mut calls = 0;
        let err = retry_until::<(), _, _>(
            &node,
            "x",
            Duration::from_secs(60),
            Backoff::default(),
            || {
                calls += 1;
                async {
                    Err(TalosError::InvalidConfig {
                        node: node_name("127.0.0.9".parse().unwrap(), None),
                        message: "bad".into(),
                    })
                }
            },
        )
        .await
        .unwrap_err();
        assert!(matches!(err, TalosError::InvalidConfig { .. }));
        assert_eq!(calls, 1);
    }
}
