//! The waits of a cluster's life: reachable in maintenance mode, secure mode up after
//! the install reboot, etcd ready to bootstrap. Each retries transient failures
//! (refused connections, Unavailable, FailedPrecondition) with capped exponential
//! backoff until a deadline that its error names.

use std::future::Future;
use std::net::IpAddr;
use std::time::Duration;

use tokio::time::Instant;

use super::client::TalosClient;
use super::credentials::ClientCredentials;
use super::error::{NodeName, TalosError};
use super::types::BootstrapOutcome;

/// Retry pacing: the first pause, doubling up to `max`. Units: time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// First pause after a failure.
    pub initial: Duration,
    /// Largest pause.
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            initial: Duration::from_millis(200),
            max: Duration::from_secs(5),
        }
    }
}

impl Backoff {
    /// The pause before retry number `attempt` (0-based).
    pub fn delay(&self, attempt: u32) -> Duration {
        let factor = 1u32 << attempt.min(16);
        self.initial.saturating_mul(factor).min(self.max)
    }
}

/// Runs `attempt` until it succeeds, fails with a non-transient error, or `timeout`
/// passes; the deadline error carries `what` and the last failure.
pub async fn retry_until<T, F, Fut>(
    node: &NodeName,
    what: &'static str,
    timeout: Duration,
    backoff: Backoff,
    mut attempt: F,
) -> Result<T, TalosError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, TalosError>>,
{
    let deadline = Instant::now() + timeout;
    let mut tries = 0u32;
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        let last = match tokio::time::timeout(remaining, attempt()).await {
            Ok(Ok(value)) => return Ok(value),
            Ok(Err(err)) if err.is_transient() => err,
            Ok(Err(err)) => return Err(err),
            Err(_) => TalosError::Unreachable {
                node: node.clone(),
                reason: "the attempt was still running at the deadline".to_string(),
            },
        };
        tracing::debug!(node = %node, what, error = %last, "not yet");
        let pause = backoff.delay(tries);
        tries += 1;
        if Instant::now() + pause >= deadline {
            return Err(TalosError::Deadline {
                node: node.clone(),
                what,
                waited: timeout,
                last: Box::new(last),
            });
        }
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
/// certificate that does not cover the IP.
pub async fn wait_secure(
    ip: IpAddr,
    hostname: Option<&str>,
    credentials: &ClientCredentials,
    timeout: Duration,
    backoff: Backoff,
) -> Result<TalosClient, TalosError> {
    let node = node_name(ip, hostname);
    retry_until(&node, "up in secure mode", timeout, backoff, || async {
        let client = TalosClient::connect_secure(ip, credentials)
            .await
            .map_err(|e| e.with_hostname(hostname))?;
        let client = named(client, hostname);
        client.version().await?;
        Ok(client)
    })
    .await
}

/// Waits until a control-plane node's CRI is running and its etcd service exists
/// (Preparing, i.e. waiting for bootstrap, or already Running): the point where
/// Bootstrap can succeed. Errors: [`TalosError::Deadline`] ("ready to bootstrap etcd").
pub async fn wait_etcd_ready(
    client: &TalosClient,
    timeout: Duration,
    backoff: Backoff,
) -> Result<(), TalosError> {
    retry_until(
        client.node(),
        "ready to bootstrap etcd",
        timeout,
        backoff,
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
    retry_until(client.node(), "bootstrapped", timeout, backoff, || {
        client.bootstrap()
    })
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
        insta::assert_snapshot!(err.to_string(), @"node 127.0.0.9 (cp-1) was not reachable in maintenance mode within 1 s");
        let source = std::error::Error::source(&err).unwrap().to_string();
        assert!(source.contains("Connection refused"), "{source}");
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
