//! Apply's final gate: ask the Kubernetes API until every node of the topology is
//! registered and Ready (and `nvidia.com/gpu` allocatable on the GPU nodes), or the
//! wait is over, saying what it still waits for on the way.

use std::net::IpAddr;
use std::time::Duration;

use tokio::time::Instant;

use talosprov_base::kube_node::KubeNode;
use talosprov_kube::client::KubeClient;
use talosprov_retry::Backoff;

use super::cluster::ClusterNode;
use super::kubernetes::judge_kubernetes;
use super::report::{Check, CheckStatus};

/// How long one question to the Kubernetes API may take.
pub const KUBE_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// How often the gate reports what it still waits for (plain progress lines say
/// `still waiting: … [Ns elapsed]` at this pace).
pub const PROGRESS_EVERY: Duration = Duration::from_secs(10);

/// What the gate waits for.
#[derive(Debug, Clone)]
pub struct KubernetesGate {
    /// The admin kubeconfig (YAML) from the state; `None` before the cluster has one,
    /// which fails every attempt with that reason.
    pub kubeconfig: Option<String>,
    /// Every node of the topology, matched to the API's nodes by `InternalIP`.
    pub nodes: Vec<ClusterNode>,
    /// The nodes that must have `nvidia.com/gpu` allocatable (empty: no GPU check).
    pub gpu_nodes: Vec<IpAddr>,
    /// The bound of the whole wait (`TALOSPROV_READY_WAIT`, 10 min by default).
    pub wait: Duration,
}

/// What the gate tells its caller while it waits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GateEvent {
    /// The gate starts: what it waits for, and for how long at most.
    Started {
        /// The nodes that must be Ready.
        nodes: usize,
        /// The hostnames that must have `nvidia.com/gpu` allocatable.
        gpu_nodes: Vec<String>,
        /// The bound of the wait.
        wait: Duration,
    },
    /// Still waiting, at most every [`PROGRESS_EVERY`]: one entry per node that is not
    /// there yet (`talos-gpu-01: no nvidia.com/gpu allocatable`), or why the API did
    /// not answer.
    Waiting {
        /// What is still missing, one entry per node or one for the API.
        missing: Vec<String>,
        /// Time since the gate started.
        elapsed: Duration,
    },
}

/// The gate's outcome: the checks of the last attempt (all passed, or what still
/// failed at the deadline), the nodes the API gave last (empty when it did not
/// answer), and how long it took.
#[derive(Debug, Clone)]
pub struct GateOutcome {
    /// The Kubernetes checks of the last attempt.
    pub checks: Vec<Check>,
    /// The API's nodes at the last attempt.
    pub nodes: Vec<KubeNode>,
    /// Time from the start of the gate to its outcome.
    pub elapsed: Duration,
}

impl GateOutcome {
    /// Whether every check passed.
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|c| c.status != CheckStatus::Fail)
    }

    /// What still failed, one entry per node or one for the API (empty when passed).
    pub fn missing(&self) -> Vec<String> {
        missing(&self.checks)
    }
}

/// The entries of the failing checks, one per node or one for the API: each
/// check's per-node lines (after its `failed on N of M` head line), or its
/// whole reason when it has none. A node that fails several checks (a GPU
/// node neither registered nor with its GPU) is named once, with each of its
/// reasons once, in the checks' order.
pub fn missing(checks: &[Check]) -> Vec<String> {
    // (who, reasons) in the order first seen; `who` is the text before the
    // first ": " (`gpu-1 (10.0.0.2)`), or the whole entry when it has none.
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    let mut add = |entry: &str| {
        let (who, reason) = match entry.split_once(": ") {
            Some((who, reason)) => (who, Some(reason)),
            None => (entry, None),
        };
        let at = match out.iter().position(|(w, _)| w == who) {
            Some(i) => i,
            None => {
                out.push((who.to_owned(), Vec::new()));
                out.len() - 1
            }
        };
        if let Some(reason) = reason
            && !out[at].1.iter().any(|r| r == reason)
        {
            out[at].1.push(reason.to_owned());
        }
    };
    for c in checks.iter().filter(|c| c.status == CheckStatus::Fail) {
        let mut lines = c.reason.lines();
        let head = lines.next().unwrap_or_default();
        let rest: Vec<&str> = lines.collect();
        if rest.is_empty() {
            add(head);
        } else {
            rest.into_iter().for_each(&mut add);
        }
    }
    out.into_iter()
        .map(|(who, reasons)| {
            if reasons.is_empty() {
                who
            } else {
                format!("{who}: {}", reasons.join("; "))
            }
        })
        .collect()
}

/// Ask the Kubernetes API (a new client each attempt, each bounded by
/// [`KUBE_REQUEST_TIMEOUT`]) until the checks pass or `gate.wait` has gone, pacing
/// the attempts with [`Backoff`]. `events` gets [`GateEvent::Started`] first, then
/// [`GateEvent::Waiting`] at most every [`PROGRESS_EVERY`] while something fails.
pub async fn wait_for_kubernetes(
    gate: &KubernetesGate,
    mut events: impl FnMut(GateEvent),
) -> GateOutcome {
    let ask = || async {
        let kubeconfig = gate
            .kubeconfig
            .as_deref()
            .ok_or_else(|| "the state has no kubeconfig yet".to_owned())?;
        let client = KubeClient::from_kubeconfig(kubeconfig)
            .await
            .map_err(|e| e.to_string())?;
        client.nodes().await.map_err(|e| e.to_string())
    };
    wait_with(gate, ask, &mut events).await
}

/// [`wait_for_kubernetes`] with the question to the API given: the loop, its pacing
/// and its events, tested without a cluster.
async fn wait_with<F, Fut>(
    gate: &KubernetesGate,
    ask: F,
    events: &mut impl FnMut(GateEvent),
) -> GateOutcome
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<Vec<KubeNode>, String>>,
{
    let start = Instant::now();
    let deadline = start + gate.wait;
    let gpu_names = gate
        .nodes
        .iter()
        .filter(|n| gate.gpu_nodes.contains(&n.ip))
        .map(|n| n.hostname.clone())
        .collect();
    events(GateEvent::Started {
        nodes: gate.nodes.len(),
        gpu_nodes: gpu_names,
        wait: gate.wait,
    });
    let backoff = Backoff::default();
    let mut attempt = 0;
    let mut reported = start;
    loop {
        // One request never outlasts the wait by much.
        let answer = tokio::time::timeout(KUBE_REQUEST_TIMEOUT, ask())
            .await
            .unwrap_or_else(|_| Err(format!("no answer in {} s", KUBE_REQUEST_TIMEOUT.as_secs())));
        let checks = judge_kubernetes(&gate.nodes, &gate.gpu_nodes, &answer);
        let passed = checks.iter().all(|c| c.status != CheckStatus::Fail);
        let now = Instant::now();
        if passed || now >= deadline {
            return GateOutcome {
                checks,
                nodes: answer.unwrap_or_default(),
                elapsed: now - start,
            };
        }
        if now - reported >= PROGRESS_EVERY {
            reported = now;
            events(GateEvent::Waiting {
                missing: missing(&checks),
                elapsed: now - start,
            });
        }
        let pause = backoff.delay(attempt).min(deadline - now);
        tokio::time::sleep(pause).await;
        attempt += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use talosprov_base::role::Role;

    fn node(name: &str, ip: [u8; 4], role: Role) -> ClusterNode {
        ClusterNode {
            hostname: name.to_owned(),
            ip: IpAddr::from(ip),
            role,
        }
    }

    fn kube(name: &str, ip: [u8; 4], ready: bool, gpus: u64) -> KubeNode {
        KubeNode {
            name: name.to_owned(),
            internal_ip: Some(IpAddr::from(ip)),
            ready,
            reason: if ready {
                "KubeletReady".to_owned()
            } else {
                "KubeletNotReady".to_owned()
            },
            control_plane: false,
            kubelet_version: "v1.36.2".to_owned(),
            gpus,
        }
    }

    fn gate(wait: Duration) -> KubernetesGate {
        KubernetesGate {
            kubeconfig: None,
            nodes: vec![
                node("cp-1", [10, 0, 0, 1], Role::Controlplane),
                node("gpu-1", [10, 0, 0, 2], Role::Worker),
            ],
            gpu_nodes: vec![IpAddr::from([10, 0, 0, 2])],
            wait,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn reports_what_it_waits_for_every_ten_seconds_and_fails_at_the_deadline() {
        let mut events = Vec::new();
        let outcome = wait_with(
            &gate(Duration::from_secs(35)),
            || async {
                Ok(vec![
                    kube("cp-1", [10, 0, 0, 1], true, 0),
                    kube("gpu-1", [10, 0, 0, 2], true, 0),
                ])
            },
            &mut |e| events.push(e),
        )
        .await;
        assert!(!outcome.passed());
        assert_eq!(
            outcome.missing(),
            vec!["gpu-1 (10.0.0.2): no nvidia.com/gpu allocatable".to_owned()]
        );
        assert!(
            outcome.elapsed >= Duration::from_secs(35),
            "{:?}",
            outcome.elapsed
        );
        assert_eq!(
            events[0],
            GateEvent::Started {
                nodes: 2,
                gpu_nodes: vec!["gpu-1".to_owned()],
                wait: Duration::from_secs(35)
            }
        );
        let waits: Vec<&GateEvent> = events[1..].iter().collect();
        assert!(waits.len() >= 3, "{events:?}");
        let mut last = Duration::ZERO;
        for e in waits {
            let GateEvent::Waiting { missing, elapsed } = e else {
                panic!("{e:?}");
            };
            assert_eq!(
                missing,
                &vec!["gpu-1 (10.0.0.2): no nvidia.com/gpu allocatable".to_owned()]
            );
            assert!(*elapsed >= last + PROGRESS_EVERY, "{events:?}");
            last = *elapsed;
        }
    }

    #[test]
    fn a_node_failing_several_checks_is_named_once_with_each_reason() {
        let nodes = gate(Duration::from_secs(1)).nodes;
        let gpus = [IpAddr::from([10, 0, 0, 2])];
        // The GPU node is not registered: both checks name it, for the same reason.
        let checks = judge_kubernetes(
            &nodes,
            &gpus,
            &Ok(vec![kube("cp-1", [10, 0, 0, 1], false, 0)]),
        );
        assert_eq!(
            missing(&checks),
            vec![
                "cp-1 (10.0.0.1): NotReady: KubeletNotReady".to_owned(),
                "gpu-1 (10.0.0.2): not registered".to_owned(),
            ]
        );
        // Registered but NotReady and without its GPU: one entry, both reasons.
        let checks = judge_kubernetes(
            &nodes,
            &gpus,
            &Ok(vec![
                kube("cp-1", [10, 0, 0, 1], true, 0),
                kube("gpu-1", [10, 0, 0, 2], false, 0),
            ]),
        );
        assert_eq!(
            missing(&checks),
            vec![
                "gpu-1 (10.0.0.2): NotReady: KubeletNotReady; no nvidia.com/gpu allocatable"
                    .to_owned()
            ]
        );
        // The API down: one entry, though both checks fail with it.
        let checks = judge_kubernetes(&nodes, &gpus, &Err("connection refused".to_owned()));
        assert_eq!(
            missing(&checks),
            vec!["the Kubernetes API: connection refused".to_owned()]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn passes_once_every_node_is_ready_and_says_why_the_api_did_not_answer_before() {
        let calls = Cell::new(0);
        let mut events = Vec::new();
        let outcome = wait_with(
            &gate(Duration::from_secs(600)),
            || {
                calls.set(calls.get() + 1);
                let n = calls.get();
                async move {
                    match n {
                        0..=10 => Err("client error (Connect)".to_owned()),
                        _ => Ok(vec![
                            kube("cp-1", [10, 0, 0, 1], true, 0),
                            kube("gpu-1", [10, 0, 0, 2], true, 1),
                        ]),
                    }
                }
            },
            &mut |e| events.push(e),
        )
        .await;
        assert!(outcome.passed(), "{:?}", outcome.checks);
        assert_eq!(outcome.nodes.len(), 2);
        assert!(
            events
                .iter()
                .any(|e| matches!(e, GateEvent::Waiting { missing, .. }
                if missing == &vec!["the Kubernetes API: client error (Connect)".to_owned()])),
            "{events:?}"
        );
    }
}
