//! The simulated cluster's Kubernetes API, started when etcd is bootstrapped, on the
//! control-plane endpoint (`cluster.controlPlane.endpoint`, port 6443): TLS from the
//! cluster's Kubernetes CA, client certificates required and verified against it (so
//! the admin kubeconfig talosprov writes is the one that works). It server-side
//! applies the bootstrapping control plane's `cluster.inlineManifests` at bootstrap
//! (field manager `talos`, forced), as Talos does, and then serves what `kubectl` and
//! kube-rs need, with the kube-apiserver's paths, status codes and `Status` bodies:
//!
//! - discovery: `/version`, `/api`, `/api/v1`, `/apis` (an `APIGroupList`),
//!   `/apis/<group>` (an `APIGroup`) and `/apis/<group>/<version>` (an
//!   `APIResourceList`), from the built-in kinds and the stored
//!   CustomResourceDefinitions (see [`crate::kube_store`]); `/openapi/v3` (the
//!   root and one document per group version) tells kubectl that every kind's PATCH
//!   takes `fieldValidation`, so it leaves validation to the server (which accepts any
//!   field); `/openapi/v2` answers 404;
//! - objects, at `/api/v1/...` and `/apis/<group>/<version>/...`, namespaced
//!   (`namespaces/<ns>/<plural>[/<name>]`) or not (`<plural>[/<name>]`): GET one, LIST
//!   (one namespace or all; `labelSelector` by equality and existence, `fieldSelector`
//!   on `metadata.name` and `metadata.namespace`), POST (create), PUT (replace, with
//!   the resourceVersion precondition), PATCH with `application/apply-patch+yaml`
//!   (server-side apply: `fieldManager`, `force`, `dryRun=All`), PATCH with a JSON
//!   merge patch (and a strategic merge patch, read as one without its `$` directives:
//!   lists are replaced whole), and DELETE (immediate, no finalizers; a Namespace or a
//!   CRD takes its objects along); `dryRun=All` on every write; a `Table` (NAME, AGE)
//!   when the client asks for one (`kubectl get`);
//! - nodes, read-only, computed from the simulated machines (as JSON or as `Table`).
//!
//! Request bodies above 8 MiB are refused (413), objects above etcd's 1.5 MiB too (500,
//! as a real cluster answers), and the store is bounded (see [`crate::kube_store`]).
//! Unknown paths answer 404 "the server could not find the requested resource"
//! (subresources such as `/status` and `/scale` included); watches are not served
//! (405).
//!
//! Nodes follow the simulated machines and the live objects: a node is Ready when
//! Talos deploys its own CNI (`cluster.network.cni.name` other than `none`), or while
//! a DaemonSet that mounts the host path `/etc/cni/net.d` exists (what every CNI
//! does); a node the simulator treats as having a passed-through NVIDIA device
//! ([`SimOptions::gpu_nodes`]) with the NVIDIA kernel modules in its config has
//! `nvidia.com/gpu: 1` allocatable while a DaemonSet that mounts
//! `/var/lib/kubelet/device-plugins` exists (the device plugin). Either DaemonSet
//! counts only on the nodes its pod template's `nodeSelector` selects, by the
//! labels the kubelet gives (hostname, OS, architecture, control-plane role).
//!
//! [`SimOptions::gpu_nodes`]: crate::SimOptions::gpu_nodes

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use talosprov_machine::effective;

use http_body_util::{BodyExt, Full};
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rustls::ServerConfig;
use rustls::server::WebPkiClientVerifier;
use serde_json::{Value, json};
use sha2::Digest;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use super::certs;
use super::config::NodeConfig;
use super::kube_store::{self, ApplyOptions, ResourceType, Store, StoreError};
use super::state::{Phase, Shared, cluster_key};
use talosprov_base::role::Role;

/// The API server's port when the endpoint names none.
pub const APISERVER_PORT: u16 = 6443;

/// The host path every CNI writes its config into.
const CNI_DIR: &str = "/etc/cni/net.d";
/// The kubelet's device-plugin socket folder, which a device plugin mounts.
const DEVICE_PLUGINS_DIR: &str = "/var/lib/kubelet/device-plugins";
/// The kernel modules the NVIDIA device plugin needs loaded.
const NVIDIA_MODULES: [&str; 4] = ["nvidia", "nvidia_uvm", "nvidia_drm", "nvidia_modeset"];

/// Apply `cfg`'s inline manifests to its cluster and start serving its API, unless it
/// already is. A fresh cluster starts from an empty store; a `recovered` one keeps the
/// store the etcd snapshot restored and only gets the inline-manifest objects it lacks.
/// Failures (the address cannot be bound, a certificate cannot be made) are logged:
/// the Talos side goes on, as a real node's would with a broken API server.
pub(crate) async fn start(shared: Arc<Shared>, cfg: NodeConfig, recovered: bool) {
    let key = cluster_key(&cfg);
    let epoch = {
        let mut clusters = shared.clusters();
        let cluster = clusters.entry(key.clone()).or_default();
        if cluster.api_started {
            return;
        }
        cluster.api_started = true;
        if !recovered {
            cluster.store = Store::new();
        }
        for manifest in inline_manifests(&cfg.raw) {
            let errors = if recovered {
                cluster
                    .store
                    .create_missing_from_manifests(&manifest, "talos")
            } else {
                cluster.store.apply_manifests(&manifest, "talos")
            };
            for error in errors {
                tracing::warn!(target: "talos_sim", cluster = %key, %error, "an inline manifest is not applied");
            }
        }
        cluster.epoch
    };
    if let Err(e) = serve(shared, &cfg, key, epoch).await {
        tracing::warn!(target: "talos_sim", error = %e, "the Kubernetes API does not start");
    }
}

/// The contents of every inline manifest of `raw` (`cluster.inlineManifests`, then the
/// `KubeInlineManifestConfig` documents), in order.
fn inline_manifests(raw: &[u8]) -> Vec<String> {
    effective::inline_manifests(&yaml_documents(raw))
        .into_iter()
        .map(|(_, contents)| contents)
        .collect()
}

/// The YAML documents of a raw config (those that parse).
fn yaml_documents(raw: &[u8]) -> Vec<serde_yaml_ng::Value> {
    serde_yaml_ng::Deserializer::from_slice(raw)
        .filter_map(|d| <serde_yaml_ng::Value as serde::Deserialize>::deserialize(d).ok())
        .filter(|d| !d.is_null())
        .collect()
}

/// Binds the API's address (waiting a little for an earlier API of the cluster, just
/// aborted, to close its listener) and serves it in a task kept as the cluster's
/// `api_task`, unless etcd was gone meanwhile (another `epoch`).
async fn serve(
    shared: Arc<Shared>,
    cfg: &NodeConfig,
    key: String,
    epoch: u64,
) -> Result<(), String> {
    let endpoint = url::Url::parse(&cfg.endpoint).map_err(|e| e.to_string())?;
    let host: IpAddr = endpoint
        .host_str()
        .ok_or("the endpoint has no host")?
        .trim_matches(['[', ']'])
        .parse()
        .map_err(|_| "the endpoint's host is not an IP address".to_string())?;
    let addr = SocketAddr::new(host, endpoint.port().unwrap_or(APISERVER_PORT));
    let mut addresses = vec![host];
    addresses.extend(shared.nodes.iter().map(|n| n.ip).filter(|ip| *ip != host));
    let mut current = ApiTls {
        addresses,
        cas: None,
        acceptor: None,
    };
    current.refresh(cfg)?;
    let listener = bind(addr).await?;
    tracing::info!(target: "talos_sim", %addr, cluster = %key, "Kubernetes API serving");
    let mut shutdown = shared.shutdown.subscribe();
    let keeper = shared.clone();
    let task_key = key.clone();
    let task = tokio::spawn(async move {
        // The connections' tasks, aborted with this one when the API stops.
        let mut connections = tokio::task::JoinSet::new();
        loop {
            let accepted = tokio::select! {
                a = listener.accept() => a,
                _ = shutdown.changed() => return,
            };
            while connections.try_join_next().is_some() {}
            let Ok((tcp, peer)) = accepted else { continue };
            if let Some(cfg) = control_plane_config(&shared, &key)
                && let Err(e) = current.refresh(&cfg)
            {
                tracing::warn!(target: "talos_sim", error = %e, "the Kubernetes API keeps its certificates");
            }
            let Some(acceptor) = current.acceptor.clone() else {
                continue;
            };
            let shared = shared.clone();
            let key = key.clone();
            connections.spawn(async move {
                let Ok(stream) = acceptor.accept(tcp).await else {
                    tracing::info!(target: "talos_sim", %peer, "Kubernetes API: TLS handshake refused");
                    return;
                };
                let service = hyper::service::service_fn(move |req| {
                    let shared = shared.clone();
                    let key = key.clone();
                    async move { Ok::<_, Infallible>(respond(&shared, &key, req).await) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    let mut clusters = keeper.clusters();
    let cluster = clusters.entry(task_key).or_default();
    if cluster.epoch == epoch && cluster.api_started {
        if let Some(earlier) = cluster.api_task.replace(task) {
            earlier.abort();
        }
    } else {
        task.abort();
    }
    Ok(())
}

/// Binds `addr`; while it is in use, retries for up to two seconds (an aborted API
/// task drops its listener when the runtime next polls it).
async fn bind(addr: SocketAddr) -> Result<TcpListener, String> {
    let mut tries = 0;
    loop {
        match TcpListener::bind(addr).await {
            Ok(listener) => return Ok(listener),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && tries < 100 => {
                tries += 1;
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            Err(e) => return Err(format!("cannot listen on {addr}: {e}")),
        }
    }
}

/// The API server's TLS: a serving certificate from the issuing Kubernetes CA
/// (`cluster.ca`), client certificates verified against it and every
/// `cluster.acceptedCAs`. Rebuilt when a control plane's config changes them, as the
/// API server restarts with new certificates when Talos rotates its CA.
struct ApiTls {
    /// The names the serving certificate carries.
    addresses: Vec<IpAddr>,
    /// The issuing CA and the client CAs `acceptor` was built for.
    cas: Option<(String, Vec<String>)>,
    acceptor: Option<TlsAcceptor>,
}

impl ApiTls {
    /// Rebuild for `cfg` when its CAs differ from the current ones.
    fn refresh(&mut self, cfg: &NodeConfig) -> Result<(), String> {
        let ca_crt = cfg
            .k8s_ca_crt_pem
            .as_deref()
            .ok_or("cluster.ca.crt is missing")?;
        let ca_key = cfg
            .k8s_ca_key_pem
            .as_deref()
            .ok_or("cluster.ca.key is missing")?;
        let cas = (ca_crt.to_owned(), cfg.k8s_client_cas());
        if self.cas.as_ref() == Some(&cas) {
            return Ok(());
        }
        let identity = certs::apiserver_identity(ca_crt, ca_key, &self.addresses)?;
        let provider = talosprov_talos::tls::provider();
        let mut roots = rustls::RootCertStore::empty();
        let joined = cas.1.concat();
        for ca in rustls_pemfile::certs(&mut joined.as_bytes()) {
            roots
                .add(ca.map_err(|e| e.to_string())?)
                .map_err(|e| e.to_string())?;
        }
        let verifier =
            WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
                .build()
                .map_err(|e| e.to_string())?;
        let mut tls = ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_client_cert_verifier(verifier)
            .with_single_cert(identity.chain, identity.key)
            .map_err(|e| e.to_string())?;
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        self.acceptor = Some(TlsAcceptor::from(Arc::new(tls)));
        self.cas = Some(cas);
        Ok(())
    }
}

/// The running config of a control plane of cluster `key` (the first by address).
fn control_plane_config(shared: &Shared, key: &str) -> Option<NodeConfig> {
    shared.nodes.iter().find_map(|node| {
        let state = node.lock();
        let cfg = state.config.as_ref()?;
        (state.phase == Phase::Secure
            && cfg.machine_type == Role::Controlplane
            && cluster_key(cfg) == key)
            .then(|| cfg.clone())
    })
}

/// The largest request body read; beyond, 413.
const MAX_BODY: usize = 8 << 20;

type Answer = Response<Full<Bytes>>;

/// The answer to one request, after reading its body (up to [`MAX_BODY`]).
async fn respond(shared: &Shared, key: &str, req: Request<Incoming>) -> Answer {
    let (parts, body) = req.into_parts();
    let body = match read_body(body).await {
        Ok(b) => b,
        Err(e) => return error(&e),
    };
    let answer = handle(shared, key, &parts, &body);
    tracing::debug!(target: "talos_sim", method = %parts.method, uri = %parts.uri,
        status = answer.status().as_u16(), "Kubernetes API request");
    answer
}

/// How much of a too large body is read (and dropped) before answering 413, so that
/// the client, still sending, reads the answer rather than a reset connection.
const MAX_DRAINED: usize = 64 << 20;

/// The request body, up to [`MAX_BODY`] bytes kept in memory.
///
/// Errors: 413 RequestEntityTooLarge beyond (after reading the rest, dropping it, up
/// to [`MAX_DRAINED`]); 400 when the body cannot be read.
async fn read_body(mut body: Incoming) -> Result<Bytes, StoreError> {
    let mut kept: Vec<u8> = Vec::new();
    let mut seen = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| {
            StoreError::bad_request(format!("the request body cannot be read: {e}"))
        })?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        seen += data.len();
        if seen <= MAX_BODY {
            kept.extend_from_slice(&data);
        } else {
            kept = Vec::new();
            if seen > MAX_DRAINED {
                break;
            }
        }
    }
    if seen > MAX_BODY {
        return Err(StoreError {
            code: 413,
            reason: "RequestEntityTooLarge",
            message: format!("Request entity too large: limit is {MAX_BODY}"),
            details: Value::Null,
        });
    }
    Ok(Bytes::from(kept))
}

/// What a request for objects names.
struct Target<'a> {
    rt: ResourceType,
    ns: Option<&'a str>,
    name: Option<&'a str>,
}

impl Target<'_> {
    /// The namespace, empty for cluster-scoped kinds and across namespaces.
    fn ns(&self) -> &str {
        self.ns.unwrap_or_default()
    }
}

/// One request, read.
struct Call<'a> {
    parts: &'a http::request::Parts,
    query: HashMap<String, String>,
    /// Whether the client asks for a `Table` (`kubectl get`).
    table: bool,
    body: &'a [u8],
    /// `dryRun=All`.
    dry_run: bool,
    /// `fieldManager`, else the client's name from its user agent (as the apiserver
    /// names updates' managers).
    manager: String,
}

/// The answer to one request whose body was read: discovery and OpenAPI documents,
/// nodes, or a read or write of objects.
fn handle(shared: &Shared, key: &str, parts: &http::request::Parts, body: &[u8]) -> Answer {
    let path = parts.uri.path().trim_end_matches('/');
    let segments: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    if parts.method == Method::GET
        && let Some(answer) = discovery(shared, key, &segments)
    {
        return answer;
    }
    let target = match target(shared, key, &segments) {
        Ok(t) => t,
        Err(e) => return error(&e),
    };
    let call = match read_call(parts, body) {
        Ok(c) => c,
        Err(e) => return error(&e),
    };
    if target.rt.group.is_empty() && target.rt.plural == "nodes" {
        return serve_nodes(shared, key, &parts.method, target.name, call.table);
    }
    if call
        .query
        .get("watch")
        .is_some_and(|w| w == "true" || w == "1")
    {
        return method_not_allowed("watch is not served by the simulated API server");
    }
    let node_count = node_count(shared, key);
    let mut clusters = shared.clusters();
    let Some(cluster) = clusters.get_mut(key) else {
        return error(&StoreError::no_resource());
    };
    let store = &mut cluster.store;
    store.set_node_count(node_count);
    let result = match (&parts.method, target.name) {
        (&Method::GET, Some(name)) => store.get(&target.rt, target.ns(), name).map(|o| {
            if call.table {
                object_table(&[o], &store.revision())
            } else {
                o
            }
        }),
        (&Method::GET, None) => list(store, &target, &call),
        (&Method::POST, None) => create(store, &target, &call),
        (&Method::PATCH, Some(name)) => return patch(store, &target, name, &call),
        (&Method::PUT, Some(name)) => parse_body(body).and_then(|o| {
            store
                .replace(
                    &target.rt,
                    target.ns(),
                    name,
                    o,
                    &call.manager,
                    call.dry_run,
                )
                .map(|w| w.object)
        }),
        (&Method::DELETE, Some(name)) => delete(store, &target, name, call.dry_run),
        _ => return method_not_allowed(&format!("{} is not supported on {path}", parts.method)),
    };
    match result {
        Ok(o) if parts.method == Method::POST => answer(StatusCode::CREATED, &o),
        Ok(o) => ok(&o),
        Err(e) => error(&e),
    }
}

/// The discovery and OpenAPI documents (`/version`, `/api`, `/apis`, `/apis/<group>`,
/// `/api/v1`, `/apis/<group>/<version>`, `/openapi/v3...`); `None` for other paths.
fn discovery(shared: &Shared, key: &str, segments: &[&str]) -> Option<Answer> {
    let served = |group: &str, version: &str, types: &[ResourceType]| {
        types
            .iter()
            .any(|t| t.group == group && t.version == version)
    };
    let types = || resource_types(shared, key);
    Some(match segments {
        ["version"] => ok(&version(shared, key)),
        ["api"] => ok(&json!({"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": ""}]})),
        ["apis"] => ok(&group_list(&types())),
        ["apis", group] => {
            let list = group_list(&types());
            match list["groups"]
                .as_array()
                .and_then(|gs| gs.iter().find(|g| g["name"] == *group))
            {
                Some(g) => {
                    let mut g = g.clone();
                    g["kind"] = json!("APIGroup");
                    g["apiVersion"] = json!("v1");
                    ok(&g)
                }
                None => error(&StoreError::no_resource()),
            }
        }
        ["api", "v1"] => ok(&resource_list("", "v1", &types())),
        ["openapi", "v3"] => ok(&openapi_root(&types())),
        ["openapi", "v3", "api", "v1"] => ok(&openapi_doc("", "v1", &types())),
        ["apis", group, version] | ["openapi", "v3", "apis", group, version] => {
            let types = types();
            if !served(group, version, &types) {
                error(&StoreError::no_resource())
            } else if segments[0] == "apis" {
                ok(&resource_list(group, version, &types))
            } else {
                ok(&openapi_doc(group, version, &types))
            }
        }
        _ => return None,
    })
}

/// The resource, namespace and name an object path names
/// (`/api/v1/namespaces/<ns>/<plural>/<name>`, `/apis/<g>/<v>/<plural>`, ...).
///
/// Errors: 404 "the server could not find the requested resource" for a path naming
/// no served resource, or with a namespace the resource's scope does not have.
fn target<'a>(shared: &Shared, key: &str, segments: &[&'a str]) -> Result<Target<'a>, StoreError> {
    let (group, version, rest) = match segments {
        ["api", "v1", rest @ ..] => ("", "v1", rest),
        ["apis", group, version, rest @ ..] => (*group, *version, rest),
        _ => return Err(StoreError::no_resource()),
    };
    let (ns, plural, name) = match rest {
        ["namespaces", ns, plural] => (Some(*ns), *plural, None),
        ["namespaces", ns, plural, name] => (Some(*ns), *plural, Some(*name)),
        [plural] => (None, *plural, None),
        [plural, name] => (None, *plural, Some(*name)),
        _ => return Err(StoreError::no_resource()),
    };
    let rt = resource_types(shared, key)
        .into_iter()
        .find(|t| t.group == group && t.version == version && t.plural == plural)
        .ok_or_else(StoreError::no_resource)?;
    if (ns.is_some() && !rt.namespaced) || (ns.is_none() && rt.namespaced && name.is_some()) {
        return Err(StoreError::no_resource());
    }
    Ok(Target { rt, ns, name })
}

/// The query parameters and headers of a request for objects.
///
/// Errors: 400 for a `dryRun` other than `All`.
fn read_call<'a>(parts: &'a http::request::Parts, body: &'a [u8]) -> Result<Call<'a>, StoreError> {
    let query: HashMap<String, String> =
        url::form_urlencoded::parse(parts.uri.query().unwrap_or_default().as_bytes())
            .into_owned()
            .collect();
    let header = |name: hyper::header::HeaderName| {
        parts
            .headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    };
    let dry_run = match query.get("dryRun").map(String::as_str) {
        None | Some("") => false,
        Some("All") => true,
        Some(other) => {
            return Err(StoreError::bad_request(format!(
                "Invalid dry run value: {other}: supported values: \"All\""
            )));
        }
    };
    let manager = query.get("fieldManager").cloned().unwrap_or_else(|| {
        match header(hyper::header::USER_AGENT).split('/').next() {
            Some(agent) if !agent.is_empty() => agent.to_owned(),
            _ => "unknown".to_owned(),
        }
    });
    Ok(Call {
        table: header(hyper::header::ACCEPT).contains("as=Table"),
        parts,
        query,
        body,
        dry_run,
        manager,
    })
}

/// LIST: the objects of the target's namespace (or all), selected, as a list or a Table.
fn list(store: &Store, target: &Target<'_>, call: &Call<'_>) -> Result<Value, StoreError> {
    let mut listed = store.list(&target.rt, target.ns);
    select(&mut listed, &call.query)?;
    if call.table {
        let items = listed["items"].as_array().cloned().unwrap_or_default();
        Ok(object_table(&items, &store.revision()))
    } else {
        Ok(listed)
    }
}

/// POST: create the body's object in the target's namespace.
fn create(store: &mut Store, target: &Target<'_>, call: &Call<'_>) -> Result<Value, StoreError> {
    if target.rt.namespaced && target.ns.is_none() {
        return Err(StoreError {
            code: 405,
            reason: "MethodNotAllowed",
            message: "create needs a namespace in the path".to_owned(),
            details: Value::Null,
        });
    }
    let object = parse_body(call.body)?;
    store.create(&target.rt, target.ns(), object, &call.manager, call.dry_run)
}

/// PATCH: server-side apply (`application/apply-patch+yaml`), or a merge patch (JSON
/// merge patch, and strategic merge patch read as one); 201 when an apply creates.
fn patch(store: &mut Store, target: &Target<'_>, name: &str, call: &Call<'_>) -> Answer {
    let content_type = call
        .parts
        .headers
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|c| c.to_str().ok())
        .unwrap_or_default()
        .split(';')
        .next()
        .unwrap_or_default()
        .trim();
    let patch = match parse_body(call.body) {
        Ok(o) => o,
        Err(e) => return error(&e),
    };
    let written = match content_type {
        "application/apply-patch+yaml" => {
            let opts = ApplyOptions {
                manager: call
                    .query
                    .get("fieldManager")
                    .map(String::as_str)
                    .unwrap_or(""),
                force: call.query.get("force").is_some_and(|f| f == "true"),
                dry_run: call.dry_run,
            };
            store.apply(&target.rt, target.ns(), name, patch, opts)
        }
        "application/merge-patch+json" => store.merge_patch(
            &target.rt,
            target.ns(),
            name,
            patch,
            &call.manager,
            call.dry_run,
        ),
        "application/strategic-merge-patch+json" => store.merge_patch(
            &target.rt,
            target.ns(),
            name,
            without_directives(patch),
            &call.manager,
            call.dry_run,
        ),
        other => Err(StoreError {
            code: 415,
            reason: "UnsupportedMediaType",
            message: format!(
                "the body of the request was in an unknown format - accepted media types \
                 include: application/merge-patch+json, application/strategic-merge-patch+json, \
                 application/apply-patch+yaml (not {other})"
            ),
            details: Value::Null,
        }),
    };
    match written {
        Ok(w) if w.created => answer(StatusCode::CREATED, &w.object),
        Ok(w) => ok(&w.object),
        Err(e) => error(&e),
    }
}

/// A strategic merge patch read as a JSON merge patch: without its directives
/// (`$setElementOrder/...`, `$retainKeys`, `$patch`, `$deleteFromPrimitiveList/...`),
/// so lists are replaced whole.
fn without_directives(patch: Value) -> Value {
    match patch {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .filter(|(k, _)| !k.starts_with('$'))
                .map(|(k, v)| (k, without_directives(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.into_iter().map(without_directives).collect()),
        other => other,
    }
}

/// DELETE: a `Status` of success naming the object, as for an immediate deletion.
fn delete(
    store: &mut Store,
    target: &Target<'_>,
    name: &str,
    dry_run: bool,
) -> Result<Value, StoreError> {
    let o = store.delete(&target.rt, target.ns(), name, dry_run)?;
    let mut details = json!({"name": name, "kind": target.rt.plural, "uid": o["metadata"]["uid"]});
    if !target.rt.group.is_empty() {
        details["group"] = json!(target.rt.group);
    }
    Ok(
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
              "details": details}),
    )
}

/// The served kinds of the cluster (the built-in ones before it is bootstrapped).
fn resource_types(shared: &Shared, key: &str) -> Vec<ResourceType> {
    shared
        .clusters()
        .get(key)
        .map(|c| c.store.resource_types())
        .unwrap_or_else(kube_store::builtin_types)
}

/// A request body, JSON or YAML (one document).
fn parse_body(body: &[u8]) -> Result<Value, StoreError> {
    serde_json::from_slice(body)
        .or_else(|_| serde_yaml_ng::from_slice::<Value>(body))
        .map_err(|e| StoreError::bad_request(format!("the body is neither JSON nor YAML: {e}")))
}

/// One selector term, as a test of an item.
type ItemTest = Box<dyn Fn(&Value) -> bool>;

/// Keep the items of `list` that match the query's `labelSelector` (`k=v`, `k==v`,
/// `k!=v`, `k`, `!k`, comma-separated) and `fieldSelector` (`metadata.name` and
/// `metadata.namespace`, with `=`, `==` or `!=`).
fn select(list: &mut Value, query: &HashMap<String, String>) -> Result<(), StoreError> {
    let mut tests: Vec<ItemTest> = Vec::new();
    for term in query
        .get("labelSelector")
        .map(String::as_str)
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
    {
        let term = term.to_owned();
        tests.push(Box::new(move |o: &Value| {
            let labels = &o["metadata"]["labels"];
            if let Some((k, v)) = term.split_once("!=") {
                labels[k.trim()].as_str() != Some(v.trim())
            } else if let Some((k, v)) = term.split_once('=') {
                labels[k.trim()].as_str() == Some(v.trim_start_matches('=').trim())
            } else if let Some(k) = term.strip_prefix('!') {
                labels.get(k.trim()).is_none()
            } else {
                labels.get(&term).is_some()
            }
        }));
    }
    for term in query
        .get("fieldSelector")
        .map(String::as_str)
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|t| !t.is_empty())
    {
        let (field, value, equal) = if let Some((f, v)) = term.split_once("!=") {
            (f, v, false)
        } else if let Some((f, v)) = term.split_once('=') {
            (f, v.trim_start_matches('='), true)
        } else {
            return Err(StoreError::bad_request(format!(
                "invalid field selector: {term}"
            )));
        };
        let field = match field.trim() {
            "metadata.name" => "name",
            "metadata.namespace" => "namespace",
            other => {
                return Err(StoreError::bad_request(format!(
                    "field label not supported: {other}"
                )));
            }
        };
        let value = value.trim().to_owned();
        tests.push(Box::new(move |o: &Value| {
            (o["metadata"][field].as_str().unwrap_or_default() == value) == equal
        }));
    }
    if let Some(items) = list["items"].as_array_mut() {
        items.retain(|o| tests.iter().all(|t| t(o)));
    }
    Ok(())
}

/// The `Table` `kubectl get` asks for, of stored objects: NAME and AGE.
fn object_table(items: &[Value], revision: &str) -> Value {
    let column = |name: &str, kind: &str, format: &str| json!({"name": name, "type": kind, "format": format, "description": "", "priority": 0});
    let rows: Vec<Value> = items
        .iter()
        .map(|o| {
            json!({"cells": [o["metadata"]["name"], age(o["metadata"]["creationTimestamp"].as_str())],
                   "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                              "metadata": o["metadata"]}})
        })
        .collect();
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": revision},
           "columnDefinitions": [column("Name", "string", "name"), column("Age", "string", "")],
           "rows": rows})
}

/// How long ago `timestamp` (RFC 3339) was, as kubectl shows ages (`42s`, `5m`, `3h`,
/// `2d`).
fn age(timestamp: Option<&str>) -> String {
    let Some(t) = timestamp.and_then(|t| {
        time::OffsetDateTime::parse(t, &time::format_description::well_known::Rfc3339).ok()
    }) else {
        return "<unknown>".to_owned();
    };
    let secs = (time::OffsetDateTime::now_utc() - t).whole_seconds().max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 7200 => format!("{}m", s / 60),
        s if s < 172_800 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

/// `/apis`: every group of `types` but the core one, with its versions.
fn group_list(types: &[ResourceType]) -> Value {
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for t in types.iter().filter(|t| !t.group.is_empty()) {
        match groups.iter_mut().find(|(g, _)| *g == t.group) {
            Some((_, versions)) if !versions.contains(&t.version) => {
                versions.push(t.version.clone())
            }
            Some(_) => {}
            None => groups.push((t.group.clone(), vec![t.version.clone()])),
        }
    }
    let groups: Vec<Value> = groups
        .iter()
        .map(|(g, versions)| {
            let vs: Vec<Value> = versions
                .iter()
                .map(|v| json!({"groupVersion": format!("{g}/{v}"), "version": v}))
                .collect();
            json!({"name": g, "versions": vs, "preferredVersion": vs[0]})
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/openapi/v3`: the path of each group version's document (`api/v1`,
/// `apis/<group>/<version>`), as kubectl reads it before asking for one.
fn openapi_root(types: &[ResourceType]) -> Value {
    let mut paths = serde_json::Map::new();
    for t in types {
        let path = if t.group.is_empty() {
            format!("api/{}", t.version)
        } else {
            format!("apis/{}/{}", t.group, t.version)
        };
        let url = format!(
            "/openapi/v3/{path}?hash={}",
            openapi_hash(types, &t.group, &t.version)
        );
        paths.insert(path, json!({"serverRelativeURL": url}));
    }
    json!({"paths": paths})
}

/// A hash of a group version's resources, so that a client's cached document changes
/// with them (a CRD's new version).
fn openapi_hash(types: &[ResourceType], group: &str, version: &str) -> String {
    let mut h = sha2::Sha256::new();
    for t in types
        .iter()
        .filter(|t| t.group == group && t.version == version)
    {
        h.update(format!("{}/{}/{}\n", t.plural, t.kind, t.namespaced).as_bytes());
    }
    hex::encode(h.finalize())[..16].to_uppercase()
}

/// The OpenAPI v3 document of one group version, reduced to what kubectl reads from it
/// before an apply: each object path's PATCH operation, with its kind
/// (`x-kubernetes-group-version-kind`) and the `fieldValidation` parameter, which tells
/// kubectl that the server validates (so it does not validate client-side). The
/// simulator itself does not validate fields.
fn openapi_doc(group: &str, version: &str, types: &[ResourceType]) -> Value {
    let mut paths = serde_json::Map::new();
    let prefix = if group.is_empty() {
        format!("/api/{version}")
    } else {
        format!("/apis/{group}/{version}")
    };
    let parameters = json!(["dryRun", "fieldManager", "fieldValidation", "force"]
        .iter()
        .map(|p| json!({"name": p, "in": "query", "schema": {"type": "string", "uniqueItems": true}}))
        .collect::<Vec<_>>());
    for t in types
        .iter()
        .filter(|t| t.group == group && t.version == version)
    {
        let path = if t.namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{}/{{name}}", t.plural)
        } else {
            format!("{prefix}/{}/{{name}}", t.plural)
        };
        let gvk = json!({"group": group, "version": version, "kind": t.kind});
        paths.insert(
            path,
            json!({"patch": {"operationId": format!("patch{}", t.kind),
                             "x-kubernetes-action": "patch",
                             "x-kubernetes-group-version-kind": gvk,
                             "parameters": parameters,
                             "responses": {"200": {"description": "OK"}}}}),
        );
    }
    json!({"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": "unversioned"},
           "paths": paths, "components": {"schemas": {}}})
}

/// `/api/v1` or `/apis/<group>/<version>`: the resources of that group version.
fn resource_list(group: &str, version: &str, types: &[ResourceType]) -> Value {
    let group_version = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    let resources: Vec<Value> = types
        .iter()
        .filter(|t| t.group == group && t.version == version)
        .map(|t| {
            let mut r = json!({"name": t.plural, "singularName": t.singular,
                   "namespaced": t.namespaced, "kind": t.kind, "verbs": t.verbs});
            if !t.short_names.is_empty() {
                r["shortNames"] = json!(t.short_names);
            }
            r
        })
        .collect();
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version,
           "resources": resources})
}

/// GET of nodes (one, or the list; JSON or Table); anything else is refused.
fn serve_nodes(
    shared: &Shared,
    key: &str,
    method: &Method,
    name: Option<&str>,
    table: bool,
) -> Answer {
    if method != Method::GET {
        return method_not_allowed("nodes are read-only in the simulated API server");
    }
    let (cni_addon, device_plugin) = shared
        .clusters()
        .get(key)
        .map(|c| {
            let objects: Vec<&Value> = c.store.objects().collect();
            (
                DaemonSets::mounting(&objects, CNI_DIR),
                DaemonSets::mounting(&objects, DEVICE_PLUGINS_DIR),
            )
        })
        .unwrap_or_default();
    let nodes = nodes(shared, key, &cni_addon, &device_plugin);
    match name {
        None if table => ok(&node_table(&nodes)),
        None => ok(&json!({"kind": "NodeList", "apiVersion": "v1",
                           "metadata": {"resourceVersion": "1"}, "items": nodes})),
        Some(name) => match nodes.into_iter().find(|n| n["metadata"]["name"] == *name) {
            Some(n) if table => ok(&node_table(&[n])),
            Some(n) => ok(&n),
            None => error(&StoreError::not_found(
                &kube_store::builtin_types()
                    .into_iter()
                    .find(|t| t.plural == "nodes")
                    .expect("built-in"),
                name,
            )),
        },
    }
}

fn version(shared: &Shared, key: &str) -> Value {
    let git = shared
        .nodes
        .iter()
        .find_map(|n| {
            let s = n.lock();
            s.config
                .as_ref()
                .filter(|c| cluster_key(c) == key)
                .and_then(|c| kubelet_version(&c.raw))
        })
        .unwrap_or_else(|| "v1.36.2".to_owned());
    let mut parts = git.trim_start_matches('v').split('.');
    json!({"major": parts.next().unwrap_or("1"), "minor": parts.next().unwrap_or("0"),
           "gitVersion": git, "platform": "linux/amd64"})
}

/// The DaemonSets of a cluster that mount one host folder (`/etc/cni/net.d` for a
/// CNI, `/var/lib/kubelet/device-plugins` for a device plugin), by the
/// `nodeSelector` of their pod template: their pods run, and so their effect shows,
/// on the nodes whose labels hold every pair of a selector (all nodes for an empty
/// or missing one).
#[derive(Debug, Default)]
struct DaemonSets {
    selectors: Vec<serde_json::Map<String, Value>>,
}

impl DaemonSets {
    fn mounting(objects: &[&Value], dir: &str) -> Self {
        let selectors = objects
            .iter()
            .filter(|o| o["kind"] == "DaemonSet")
            .filter(|o| {
                o["spec"]["template"]["spec"]["volumes"]
                    .as_array()
                    .is_some_and(|vs| {
                        vs.iter().any(|v| {
                            v["hostPath"]["path"]
                                .as_str()
                                .is_some_and(|p| p.trim_end_matches('/') == dir)
                        })
                    })
            })
            .map(|o| {
                o["spec"]["template"]["spec"]["nodeSelector"]
                    .as_object()
                    .cloned()
                    .unwrap_or_default()
            })
            .collect();
        DaemonSets { selectors }
    }

    /// Whether one of the DaemonSets runs on a node with `labels`.
    fn run_on(&self, labels: &Value) -> bool {
        self.selectors
            .iter()
            .any(|sel| sel.iter().all(|(k, v)| labels[k] == *v))
    }
}

/// How many of the simulator's machines run with the cluster's config, in secure mode
/// (the nodes a DaemonSet runs on).
fn node_count(shared: &Shared, key: &str) -> usize {
    shared
        .nodes
        .iter()
        .filter(|n| {
            let s = n.lock();
            s.phase == Phase::Secure && s.config.as_ref().is_some_and(|c| cluster_key(c) == key)
        })
        .count()
}

/// The Node objects of the cluster's machines that run with its config; `cni_addon`
/// and `device_plugin` tell whether such DaemonSets exist.
fn nodes(
    shared: &Shared,
    key: &str,
    cni_addon: &DaemonSets,
    device_plugin: &DaemonSets,
) -> Vec<Value> {
    // Talos deploys its own CNI (flannel, or `custom` URLs) unless the cluster's CNI,
    // which the control planes' configs carry, is `none`.
    let talos_deploys_cni = shared
        .nodes
        .iter()
        .find_map(|n| {
            let s = n.lock();
            s.config
                .as_ref()
                .filter(|c| cluster_key(c) == key && c.machine_type == Role::Controlplane)
                .map(|c| talos_cni(&c.raw) != "none")
        })
        .unwrap_or(false);
    let mut out = Vec::new();
    for node in &shared.nodes {
        let mut state = node.lock();
        if state.phase == Phase::Secure
            && state.config.as_ref().is_some_and(|c| cluster_key(c) == key)
        {
            state
                .registered_at
                .get_or_insert_with(crate::state::unix_now);
        }
        let registered = state.registered_at.unwrap_or_default();
        let Some(cfg) = state.config.as_ref().filter(|c| cluster_key(c) == key) else {
            continue;
        };
        if state.phase != Phase::Secure {
            continue;
        }
        let name = node.hostname(&state);
        let labels = node_labels(&name, cfg);
        let cni = talos_deploys_cni || cni_addon.run_on(&labels);
        let gpu = device_plugin.run_on(&labels)
            && shared.options.gpu_nodes.contains(&node.ip)
            && NVIDIA_MODULES
                .iter()
                .all(|m| kernel_modules(&cfg.raw).iter().any(|k| k == m));
        out.push(node_object(&name, node.ip, cfg, (cni, gpu), registered));
    }
    out
}

/// The labels the kubelet gives a node: hostname, OS, architecture, and the
/// control-plane role.
fn node_labels(name: &str, cfg: &NodeConfig) -> Value {
    let mut labels = json!({"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64"});
    if cfg.machine_type == Role::Controlplane {
        labels["node-role.kubernetes.io/control-plane"] = json!("");
    }
    labels
}

/// The `Node` the kubelet registers: `(ready, gpu)` for its Ready condition and its
/// `nvidia.com/gpu`, `registered` (Unix seconds) for its `creationTimestamp`.
fn node_object(
    name: &str,
    ip: IpAddr,
    cfg: &NodeConfig,
    (ready, gpu): (bool, bool),
    registered: u64,
) -> Value {
    let created = time::OffsetDateTime::from_unix_timestamp(registered as i64)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_default();
    let mut resources =
        json!({"cpu": "2", "memory": "4005276Ki", "pods": "110", "ephemeral-storage": "40Gi"});
    if gpu {
        resources["nvidia.com/gpu"] = json!("1");
    }
    let labels = node_labels(name, cfg);
    let condition = if ready {
        json!({"type": "Ready", "status": "True", "reason": "KubeletReady",
               "message": "kubelet is posting ready status"})
    } else {
        json!({"type": "Ready", "status": "False", "reason": "KubeletNotReady",
               "message": "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized"})
    };
    json!({
        "kind": "Node", "apiVersion": "v1",
        "metadata": {"name": name, "labels": labels, "creationTimestamp": created,
                     "resourceVersion": "1", "uid": format!("sim-{ip}")},
        "spec": {},
        "status": {
            "capacity": resources.clone(), "allocatable": resources,
            "conditions": [condition],
            "addresses": [{"type": "InternalIP", "address": ip.to_string()},
                          {"type": "Hostname", "address": name}],
            "nodeInfo": {"kubeletVersion": kubelet_version(&cfg.raw).unwrap_or_default(),
                         "osImage": "Talos", "operatingSystem": "linux", "architecture": "amd64",
                         "containerRuntimeVersion": "containerd://2.1.5"}
        }
    })
}

/// The Table `kubectl get nodes` asks for: NAME, STATUS, ROLES, AGE, VERSION.
fn node_table(nodes: &[Value]) -> Value {
    let column = |name: &str, kind: &str| json!({"name": name, "type": kind, "format": "", "description": "", "priority": 0});
    let rows: Vec<Value> = nodes
        .iter()
        .map(|n| {
            let ready = n["status"]["conditions"][0]["status"] == "True";
            let roles = if n["metadata"]["labels"]
                .get("node-role.kubernetes.io/control-plane")
                .is_some()
            {
                "control-plane"
            } else {
                "<none>"
            };
            json!({"cells": [n["metadata"]["name"], if ready { "Ready" } else { "NotReady" }, roles,
                             age(n["metadata"]["creationTimestamp"].as_str()),
                             n["status"]["nodeInfo"]["kubeletVersion"]],
                   "object": {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1",
                              "metadata": n["metadata"]}})
        })
        .collect();
    json!({"kind": "Table", "apiVersion": "meta.k8s.io/v1", "metadata": {"resourceVersion": "1"},
           "columnDefinitions": [column("Name", "string"), column("Status", "string"),
                                 column("Roles", "string"), column("Age", "string"), column("Version", "string")],
           "rows": rows})
}

/// The CNI a raw config runs, in either contract (Talos's default: flannel).
fn talos_cni(raw: &[u8]) -> String {
    effective::cni_name(&yaml_documents(raw))
}

/// The kernel modules of a raw config (`machine.kernel.modules`, `KernelModuleConfig`).
fn kernel_modules(raw: &[u8]) -> Vec<String> {
    effective::kernel_modules(&yaml_documents(raw))
}

/// The kubelet image's tag (`v1.36.2`) of a raw config.
fn kubelet_version(raw: &[u8]) -> Option<String> {
    let image = effective::kubelet_image(&yaml_documents(raw))?;
    image.rsplit_once(':').map(|(_, tag)| tag.to_owned())
}

fn ok(body: &Value) -> Answer {
    answer(StatusCode::OK, body)
}

fn answer(code: StatusCode, body: &Value) -> Answer {
    Response::builder()
        .status(code)
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap_or_default()
}

/// The `Status` answer of a refused request.
fn error(e: &StoreError) -> Answer {
    let code = StatusCode::from_u16(e.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    answer(code, &e.status())
}

fn method_not_allowed(message: &str) -> Answer {
    error(&StoreError {
        code: 405,
        reason: "MethodNotAllowed",
        message: message.to_owned(),
        details: Value::Null,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::SimOptions;

    /// A simulator state with no machines and one cluster `k` whose API started.
    fn shared() -> Shared {
        let shared = Shared::new(SimOptions::default(), Vec::new());
        shared
            .clusters()
            .entry("k".to_owned())
            .or_default()
            .api_started = true;
        shared
    }

    /// The status and JSON body of one request.
    fn call(
        shared: &Shared,
        method: &str,
        uri: &str,
        headers: &[(&str, &str)],
        body: &str,
    ) -> (u16, Value) {
        let mut builder = Request::builder().method(method).uri(uri);
        for (k, v) in headers {
            builder = builder.header(*k, *v);
        }
        let (parts, ()) = builder.body(()).expect("request").into_parts();
        let answer = handle(shared, "k", &parts, body.as_bytes());
        let code = answer.status().as_u16();
        let bytes = futures::executor::block_on(answer.into_body().collect())
            .expect("body")
            .to_bytes();
        (code, serde_json::from_slice(&bytes).expect("JSON"))
    }

    const APPLY: (&str, &str) = ("content-type", "application/apply-patch+yaml");

    #[test]
    fn discovery_lists_the_built_in_kinds_and_the_crds() {
        let s = shared();
        let (code, groups) = call(&s, "GET", "/apis", &[], "");
        assert_eq!(code, 200);
        let names: Vec<&str> = groups["groups"]
            .as_array()
            .expect("groups")
            .iter()
            .map(|g| g["name"].as_str().expect("name"))
            .collect();
        for g in [
            "apps",
            "rbac.authorization.k8s.io",
            "apiextensions.k8s.io",
            "policy",
            "scheduling.k8s.io",
            "admissionregistration.k8s.io",
        ] {
            assert!(names.contains(&g), "{g}: {names:?}");
        }
        let (_, core) = call(&s, "GET", "/api/v1", &[], "");
        let configmaps = core["resources"]
            .as_array()
            .expect("resources")
            .iter()
            .find(|r| r["name"] == "configmaps")
            .expect("configmaps");
        assert_eq!(configmaps["kind"], "ConfigMap");
        assert_eq!(configmaps["namespaced"], true);
        assert_eq!(configmaps["shortNames"], json!(["cm"]));
        let (code, apps) = call(&s, "GET", "/apis/apps", &[], "");
        assert_eq!((code, apps["kind"].as_str()), (200, Some("APIGroup")));
        assert_eq!(apps["preferredVersion"]["groupVersion"], "apps/v1");
        let (code, body) = call(&s, "GET", "/apis/example.com/v1", &[], "");
        assert_eq!(code, 404);
        assert_eq!(
            body["message"],
            "the server could not find the requested resource"
        );

        let crd = r#"{"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.com"},
            "spec": {"group": "example.com", "scope": "Cluster",
                     "names": {"plural": "widgets", "kind": "Widget", "shortNames": ["wd"]},
                     "versions": [{"name": "v1", "served": true, "storage": true}]}}"#;
        let (code, _) = call(
            &s,
            "PATCH",
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.com?fieldManager=m",
            &[APPLY],
            crd,
        );
        assert_eq!(code, 201);
        let (code, list) = call(&s, "GET", "/apis/example.com/v1", &[], "");
        assert_eq!(code, 200);
        assert_eq!(list["resources"][0]["name"], "widgets");
        assert_eq!(list["resources"][0]["namespaced"], false);
        assert_eq!(list["resources"][0]["shortNames"], json!(["wd"]));
        let (code, root) = call(&s, "GET", "/openapi/v3", &[], "");
        assert_eq!(code, 200);
        let url = root["paths"]["apis/example.com/v1"]["serverRelativeURL"]
            .as_str()
            .expect("the CRD's document");
        let (code, doc) = call(&s, "GET", url, &[], "");
        assert_eq!(code, 200);
        let patch = &doc["paths"]["/apis/example.com/v1/widgets/{name}"]["patch"];
        assert_eq!(patch["x-kubernetes-group-version-kind"]["kind"], "Widget");
        assert!(
            patch["parameters"]
                .as_array()
                .expect("parameters")
                .iter()
                .any(|p| p["name"] == "fieldValidation")
        );
    }

    #[test]
    fn objects_are_applied_read_listed_and_deleted_over_http() {
        let s = shared();
        let uri = "/api/v1/namespaces/default/configmaps/cm";
        let body = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\ndata:\n  key: a\n";
        let (code, e) = call(&s, "PATCH", uri, &[APPLY], body);
        assert_eq!(
            (code, e["reason"].as_str()),
            (400, Some("BadRequest")),
            "no field manager"
        );
        let (code, o) = call(
            &s,
            "PATCH",
            &format!("{uri}?fieldManager=m&dryRun=All"),
            &[APPLY],
            body,
        );
        assert_eq!((code, o["data"]["key"].as_str()), (201, Some("a")));
        let (code, e) = call(&s, "GET", uri, &[], "");
        assert_eq!(code, 404, "a dry run stores nothing");
        assert_eq!(
            e,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "configmaps \"cm\" not found", "reason": "NotFound",
            "details": {"name": "cm", "kind": "configmaps"}, "code": 404})
        );
        let (code, _) = call(
            &s,
            "PATCH",
            &format!("{uri}?fieldManager=m"),
            &[APPLY],
            body,
        );
        assert_eq!(code, 201);
        let (code, _) = call(
            &s,
            "PATCH",
            &format!("{uri}?fieldManager=m"),
            &[APPLY],
            body,
        );
        assert_eq!(code, 200);
        let (code, e) = call(
            &s,
            "PATCH",
            &format!("{uri}?fieldManager=other"),
            &[APPLY],
            &body.replace("key: a", "key: b"),
        );
        assert_eq!(code, 409);
        assert_eq!(e["details"]["causes"][0]["field"], ".data.key");
        let (code, e) = call(
            &s,
            "PATCH",
            "/api/v1/namespaces/nope/configmaps/cm?fieldManager=m",
            &[APPLY],
            body,
        );
        assert_eq!(
            (code, e["message"].as_str()),
            (404, Some("namespaces \"nope\" not found"))
        );

        let (_, all) = call(&s, "GET", "/api/v1/configmaps", &[], "");
        assert_eq!(all["kind"], "ConfigMapList");
        assert_eq!(all["items"].as_array().expect("items").len(), 1);
        let (_, none) = call(
            &s,
            "GET",
            "/api/v1/namespaces/kube-system/configmaps",
            &[],
            "",
        );
        assert!(none["items"].as_array().expect("items").is_empty());
        let (_, by_name) = call(
            &s,
            "GET",
            "/api/v1/configmaps?fieldSelector=metadata.name%3Dother",
            &[],
            "",
        );
        assert!(by_name["items"].as_array().expect("items").is_empty());
        let (_, table) = call(
            &s,
            "GET",
            "/api/v1/namespaces/default/configmaps",
            &[(
                "accept",
                "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
            )],
            "",
        );
        assert_eq!(table["kind"], "Table");
        assert_eq!(table["rows"][0]["cells"][0], "cm");

        let (code, created) = call(
            &s,
            "POST",
            "/api/v1/namespaces/default/configmaps",
            &[("content-type", "application/json")],
            r#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm2"}}"#,
        );
        assert_eq!(
            (code, created["metadata"]["namespace"].as_str()),
            (201, Some("default"))
        );
        let (code, e) = call(
            &s,
            "POST",
            "/api/v1/namespaces/default/configmaps",
            &[("content-type", "application/json")],
            r#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm2"}}"#,
        );
        assert_eq!((code, e["reason"].as_str()), (409, Some("AlreadyExists")));

        let (code, status) = call(&s, "DELETE", uri, &[], "");
        assert_eq!((code, status["status"].as_str()), (200, Some("Success")));
        let (code, _) = call(&s, "DELETE", uri, &[], "");
        assert_eq!(code, 404);
    }

    #[test]
    fn unknown_resources_and_node_writes_are_refused() {
        let s = shared();
        for uri in [
            "/api/v1/pods",
            "/apis/apps/v2/deployments",
            "/api/v1/namespaces/default/nodes",
            "/api/v1/configmaps/cm",
            "/nothing",
        ] {
            let (code, e) = call(&s, "GET", uri, &[], "");
            assert_eq!(code, 404, "{uri}");
            assert_eq!(
                e["message"], "the server could not find the requested resource",
                "{uri}"
            );
        }
        let (code, _) = call(&s, "DELETE", "/api/v1/nodes/n", &[], "");
        assert_eq!(code, 405);
        let (code, nodes) = call(&s, "GET", "/api/v1/nodes", &[], "");
        assert_eq!((code, nodes["kind"].as_str()), (200, Some("NodeList")));
        let (code, _) = call(
            &s,
            "PATCH",
            "/api/v1/namespaces/default/configmaps/cm?fieldManager=m",
            &[("content-type", "application/json-patch+json")],
            "[]",
        );
        assert_eq!(code, 415);
    }
}
