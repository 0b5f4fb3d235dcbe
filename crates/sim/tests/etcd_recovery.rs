//! etcd disaster recovery against the simulator, driven by the Talos client: a
//! snapshot carries the cluster's Kubernetes objects; losing every control plane loses
//! etcd and its Kubernetes API; a control plane configured again from maintenance mode
//! takes the snapshot (EtcdRecover) and bootstraps from it, hash checked unless
//! skipped. Loopback addresses 127.93.x.y only, one set per test.

use std::io::Cursor;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use base64::Engine as _;
use p256::pkcs8::DecodePrivateKey as _;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};
use serde_json::json;
use talosprov_base::sensitive::Sensitive;
use talosprov_retry::Backoff;
use talosprov_sim::kube_store::snapshot::{
    SNAPSHOT_HASH_BYTES, SNAPSHOT_MAGIC, check_snapshot_hash,
};
use talosprov_sim::state::SimOptions;
use talosprov_sim::{SimNode, Simulator};
use talosprov_talos::client::TalosClient;
use talosprov_talos::credentials::ClientCredentials;
use talosprov_talos::error::TalosError;
use talosprov_talos::types::ApplyOptions;
use talosprov_talos::wait::{wait_maintenance, wait_secure};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

const WAIT: Duration = Duration::from_secs(30);
const FAST: Backoff = Backoff {
    initial: Duration::from_millis(20),
    max: Duration::from_millis(200),
};

fn ip(s: &str) -> IpAddr {
    s.parse().expect("an IP address")
}

/// The secrets of one test cluster: OS CA (Ed25519), Kubernetes CA (P-256), admin.
struct Pki {
    os_crt: String,
    os_key: String,
    k8s_crt: String,
    k8s_key: String,
    admin: ClientCredentials,
    cluster_id: String,
}

fn ca(alg: &'static rcgen::SignatureAlgorithm, org: &str) -> (CertificateParams, KeyPair) {
    let key = KeyPair::generate_for(alg).unwrap();
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params
        .distinguished_name
        .push(DnType::OrganizationName, org);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    (params, key)
}

impl Pki {
    fn new(cluster_id: &str) -> Pki {
        let (os_params, os_key) = ca(&rcgen::PKCS_ED25519, "talos");
        let os_crt = os_params.self_signed(&os_key).unwrap().pem();
        let (k8s_params, k8s_key) = ca(&rcgen::PKCS_ECDSA_P256_SHA256, "kubernetes");
        let k8s_crt = k8s_params.self_signed(&k8s_key).unwrap().pem();
        let admin_key = KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap();
        let mut params = CertificateParams::default();
        params.distinguished_name = DistinguishedName::new();
        params
            .distinguished_name
            .push(DnType::OrganizationName, "os:admin");
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let issuer = rcgen::Issuer::from_params(&os_params, &os_key);
        let admin_crt = params.signed_by(&admin_key, &issuer).unwrap().pem();
        let admin_key_pem = admin_key
            .serialize_pem()
            .replace("PRIVATE KEY", "ED25519 PRIVATE KEY");
        let admin =
            ClientCredentials::from_pem(os_crt.clone(), admin_crt, Sensitive::new(admin_key_pem));
        Pki {
            os_key: os_key
                .serialize_pem()
                .replace("PRIVATE KEY", "ED25519 PRIVATE KEY"),
            os_crt,
            k8s_key: p256::SecretKey::from_pkcs8_der(k8s_key.serialized_der())
                .unwrap()
                .to_sec1_pem(p256::pkcs8::LineEnding::LF)
                .unwrap()
                .to_string(),
            k8s_crt,
            admin,
            cluster_id: cluster_id.to_string(),
        }
    }

    /// A minimal control-plane config whose API endpoint is `endpoint`:6443.
    fn control_plane(&self, hostname: &str, endpoint: IpAddr) -> String {
        let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
        format!(
            "version: v1alpha1\ndebug: false\npersist: true\nmachine:\n  type: controlplane\n  token: abcdef.0123456789abcdef\n  ca:\n    crt: {}\n    key: \"{}\"\n  certSANs: []\n  network:\n    hostname: {hostname}\n  install:\n    disk: /dev/sda\n    image: ghcr.io/siderolabs/installer:v1.13.8\ncluster:\n  id: {}\n  secret: c2VjcmV0\n  controlPlane:\n    endpoint: https://{endpoint}:6443\n  clusterName: demo\n  network:\n    dnsDomain: cluster.local\n  token: abcdef.fedcba9876543210\n  ca:\n    crt: {}\n    key: \"{}\"\n",
            b64(&self.os_crt),
            b64(&self.os_key),
            self.cluster_id,
            b64(&self.k8s_crt),
            b64(&self.k8s_key),
        )
    }
}

/// Applies each node's config in maintenance mode and waits for secure mode.
async fn configure(pki: &Pki, nodes: &[(IpAddr, &str)], endpoint: IpAddr) -> Vec<TalosClient> {
    for (addr, hostname) in nodes {
        let client = wait_maintenance(*addr, Some(hostname), WAIT, FAST)
            .await
            .unwrap();
        client
            .apply_configuration(
                pki.control_plane(hostname, endpoint).as_bytes(),
                &ApplyOptions::default(),
            )
            .await
            .unwrap();
    }
    let mut clients = Vec::new();
    for (addr, hostname) in nodes {
        clients.push(
            wait_secure(*addr, Some(hostname), &pki.admin, WAIT, FAST)
                .await
                .unwrap(),
        );
    }
    clients
}

/// Waits until a TCP connection to `addr` succeeds (`true`) or is refused (`false`).
async fn wait_api(addr: SocketAddr, answering: bool) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let connected = tokio::net::TcpStream::connect(addr).await.is_ok();
        if connected == answering {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the Kubernetes API at {addr} never became answering={answering}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn create_configmap(node: &SimNode, name: &str, value: &str) {
    node.with_kube_store(|store| {
        let rt = store.resource("", "v1", "configmaps").expect("served");
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": name, "namespace": "default"},
                        "data": {"value": value}});
        store.create(&rt, "default", cm, "test", false).unwrap();
    })
    .expect("the node's cluster has a store");
}

/// The `value` of ConfigMap `name` in `default`, if it exists.
fn configmap_value(node: &SimNode, name: &str) -> Option<String> {
    node.with_kube_store(|store| {
        let rt = store.resource("", "v1", "configmaps").expect("served");
        store
            .get(&rt, "default", name)
            .ok()
            .and_then(|o| o["data"]["value"].as_str().map(str::to_owned))
    })
    .flatten()
}

async fn snapshot(client: &TalosClient) -> Vec<u8> {
    let mut out = Vec::new();
    let written = client.etcd_snapshot(&mut out).await.unwrap();
    assert_eq!(written, out.len() as u64);
    out
}

fn sim_options() -> SimOptions {
    SimOptions {
        reboot_delay: Duration::from_millis(50),
        ..SimOptions::default()
    }
}

fn rpc_code(e: &TalosError) -> Option<tonic::Code> {
    match e {
        TalosError::Rpc { code, .. } => Some(*code),
        TalosError::NotReady { .. } => Some(tonic::Code::FailedPrecondition),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_control_plane_lost_then_recovered_from_a_snapshot() {
    let (cp1, cp2) = (ip("127.93.1.1"), ip("127.93.1.2"));
    let sim = Simulator::start(&[cp1, cp2], sim_options()).await.unwrap();
    let pki = Pki::new("recovery-a");
    let nodes = [(cp1, "cp-1"), (cp2, "cp-2")];
    let clients = configure(&pki, &nodes, cp1).await;
    clients[0].bootstrap().await.unwrap();
    let api = SocketAddr::new(cp1, 6443);
    wait_api(api, true).await;
    let (n1, n2) = (sim.node(cp1).unwrap(), sim.node(cp2).unwrap());

    create_configmap(&n1, "kept", "before the snapshot");
    let saved = snapshot(&clients[1]).await;
    assert!(saved.starts_with(SNAPSHOT_MAGIC));
    check_snapshot_hash(&saved).unwrap();
    create_configmap(&n1, "lost", "after the snapshot");

    // A healthy, bootstrapped control plane refuses an upload.
    let refused = clients[0]
        .etcd_recover(Cursor::new(saved.clone()))
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, TalosError::NotReady { message, .. } if message.contains("etcd is already running")),
        "{refused:?}"
    );

    // Every control plane is lost: etcd and its API with them.
    n1.wipe();
    assert!(n2.etcd_bootstrapped(), "cp-2 still holds etcd data");
    n2.wipe();
    wait_api(api, false).await;

    let clients = configure(&pki, &nodes, cp1).await;
    assert!(!n1.etcd_bootstrapped());
    assert_eq!(configmap_value(&n1, "kept"), None, "a fresh store");
    let missing = clients[0].bootstrap_recover(false).await.unwrap_err();
    assert!(
        matches!(&missing, TalosError::NotReady { message, .. } if message.contains("error finding etcd snapshot")),
        "{missing:?}"
    );

    let sent = clients[0]
        .etcd_recover(Cursor::new(saved.clone()))
        .await
        .unwrap();
    assert_eq!(sent, saved.len() as u64);
    assert_eq!(n1.uploaded_etcd_snapshot(), Some(sent));
    clients[0].bootstrap_recover(false).await.unwrap();
    assert_eq!(n1.uploaded_etcd_snapshot(), None, "the upload is consumed");
    assert!(n1.etcd_bootstrapped());
    assert_eq!(
        configmap_value(&n1, "kept").as_deref(),
        Some("before the snapshot")
    );
    assert_eq!(configmap_value(&n1, "lost"), None);
    assert_eq!(clients[0].etcd_member_list().await.unwrap().len(), 2);
    wait_api(api, true).await;

    // etcd runs again: another recovery is refused, and so is a second bootstrap.
    let again = clients[0].bootstrap_recover(true).await.unwrap_err();
    assert_eq!(
        rpc_code(&again),
        Some(tonic::Code::AlreadyExists),
        "{again:?}"
    );
    sim.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tampered_garbage_and_hashless_snapshots() {
    let cp = ip("127.93.2.1");
    let sim = Simulator::start(&[cp], sim_options()).await.unwrap();
    let pki = Pki::new("recovery-b");
    let nodes = [(cp, "cp-1")];
    let clients = configure(&pki, &nodes, cp).await;
    clients[0].bootstrap().await.unwrap();
    let node = sim.node(cp).unwrap();
    create_configmap(&node, "kept", "value-1");
    let saved = snapshot(&clients[0]).await;

    // Reset (not wipe) of the last control plane loses etcd too.
    clients[0]
        .reset(&talosprov_talos::types::ResetOptions {
            graceful: false,
            reboot: true,
            system_partitions: Vec::new(),
        })
        .await
        .unwrap();
    assert!(!node.etcd_bootstrapped());
    wait_api(SocketAddr::new(cp, 6443), false).await;
    let clients = configure(&pki, &nodes, cp).await;
    let client = &clients[0];

    let internal = |e: &TalosError, words: &str| match e {
        TalosError::Rpc { code, message, .. } => {
            *code == tonic::Code::Internal && message.contains(words)
        }
        _ => false,
    };

    // Garbage: refused with and without the hash check; nothing changes.
    client
        .etcd_recover(Cursor::new(
            b"not a snapshot at all, not even close".to_vec(),
        ))
        .await
        .unwrap();
    let e = client.bootstrap_recover(false).await.unwrap_err();
    assert!(
        internal(&e, "snapshot file integrity check failed"),
        "{e:?}"
    );
    let e = client.bootstrap_recover(true).await.unwrap_err();
    assert!(
        internal(&e, "failed to recover etcd from snapshot"),
        "{e:?}"
    );
    assert!(!node.etcd_bootstrapped());
    assert_eq!(configmap_value(&node, "kept"), None);

    // The body alone (a copy of the data directory): only without the hash check,
    // but first a tampered one that no longer parses, then one that still does.
    let body = &saved[..saved.len() - SNAPSHOT_HASH_BYTES];
    let mut broken = saved.clone();
    broken[SNAPSHOT_MAGIC.len() + 8] = b']';
    client.etcd_recover(Cursor::new(broken)).await.unwrap();
    let e = client.bootstrap_recover(true).await.unwrap_err();
    assert!(internal(&e, "does not parse"), "{e:?}");
    let at = saved
        .windows(7)
        .position(|w| w == b"value-1")
        .expect("the object is in the snapshot");
    let mut tampered = saved.clone();
    tampered[at + 6] = b'2';
    client.etcd_recover(Cursor::new(tampered)).await.unwrap();
    let e = client.bootstrap_recover(false).await.unwrap_err();
    assert!(
        internal(&e, "snapshot file integrity check failed"),
        "{e:?}"
    );
    assert!(!node.etcd_bootstrapped());

    // A later upload replaces an earlier one: the hashless body, loaded with the
    // check skipped.
    client
        .etcd_recover(Cursor::new(body.to_vec()))
        .await
        .unwrap();
    assert_eq!(node.uploaded_etcd_snapshot(), Some(body.len() as u64));
    let e = client.bootstrap_recover(false).await.unwrap_err();
    assert!(internal(&e, "integrity check failed"), "{e:?}");
    client.bootstrap_recover(true).await.unwrap();
    assert_eq!(configmap_value(&node, "kept").as_deref(), Some("value-1"));
    wait_api(SocketAddr::new(cp, 6443), true).await;
    sim.shutdown().await;
}

/// A writer that keeps only the bytes' count and the largest single write.
#[derive(Default)]
struct Counting {
    bytes: u64,
    largest_write: usize,
    tail: Vec<u8>,
}

impl AsyncWrite for Counting {
    fn poll_write(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.bytes += buf.len() as u64;
        self.largest_write = self.largest_write.max(buf.len());
        self.tail = buf.to_vec();
        Poll::Ready(Ok(buf.len()))
    }
    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// A reader that gives `good` bytes of `data`, then fails.
struct FailingAfter {
    data: Cursor<Vec<u8>>,
    good: usize,
}

impl AsyncRead for FailingAfter {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if self.data.position() as usize >= self.good {
            return Poll::Ready(Err(std::io::Error::other("disk on fire")));
        }
        Pin::new(&mut self.data).poll_read(cx, buf)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn padded_snapshots_stream_in_chunks_and_still_recover() {
    let cp = ip("127.93.3.1");
    let sim = Simulator::start(&[cp], sim_options()).await.unwrap();
    let pki = Pki::new("recovery-c");
    let nodes = [(cp, "cp-1")];
    let clients = configure(&pki, &nodes, cp).await;
    clients[0].bootstrap().await.unwrap();
    let node = sim.node(cp).unwrap();
    create_configmap(&node, "kept", "padded");
    let plain = snapshot(&clients[0]).await.len() as u64;
    let padding = (3 << 20) + 5;
    node.pad_etcd_snapshot(padding);
    let mut counting = Counting::default();
    let written = clients[0].etcd_snapshot(&mut counting).await.unwrap();
    assert_eq!(written, plain + padding);
    assert_eq!(counting.bytes, written);
    assert!(
        counting.largest_write <= 1 << 20,
        "{}",
        counting.largest_write
    );
    let padded = snapshot(&clients[0]).await;
    assert_eq!(padded.len() as u64, plain + padding);
    assert_eq!(counting.tail, padded[padded.len() - counting.tail.len()..]);

    node.wipe();
    wait_api(SocketAddr::new(cp, 6443), false).await;
    let clients = configure(&pki, &nodes, cp).await;

    // An upload whose input fails part-way is cancelled: the node keeps nothing.
    let e = clients[0]
        .etcd_recover(FailingAfter {
            data: Cursor::new(padded.clone()),
            good: (1 << 20) + 10,
        })
        .await
        .unwrap_err();
    assert!(
        matches!(&e, TalosError::Rpc { message, .. } if message.starts_with("reading the snapshot")),
        "{e:?}"
    );
    let deadline = tokio::time::Instant::now() + WAIT;
    while node.uploaded_etcd_snapshot().is_some() {
        assert!(tokio::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let sent = clients[0]
        .etcd_recover(Cursor::new(padded.clone()))
        .await
        .unwrap();
    assert_eq!(sent, padded.len() as u64);
    clients[0].bootstrap_recover(false).await.unwrap();
    assert_eq!(configmap_value(&node, "kept").as_deref(), Some("padded"));
    sim.shutdown().await;
}
