//! The simulated cluster's Kubernetes API, started when etcd is bootstrapped, on the
//! control-plane endpoint (`cluster.controlPlane.endpoint`, port 6443): TLS from the
//! cluster's Kubernetes CA, client certificates required and verified against it (so
//! the admin kubeconfig talosprov writes is the one that works). It applies the
//! bootstrapping control plane's `cluster.inlineManifests` at bootstrap, as Talos does,
//! and serves, read-only, what `kubectl get` needs: discovery (`/version`, `/api`,
//! `/apis`, the resource lists), nodes (as JSON or as the `Table` kubectl asks for) and
//! the objects of the inline manifests.
//!
//! Nodes follow the simulated machines: a node is Ready when Talos deploys its own CNI
//! (`cluster.network.cni.name` other than `none`), or once a DaemonSet that mounts the
//! host path `/etc/cni/net.d` runs (what every CNI does); a node the simulator treats as
//! having a passed-through NVIDIA device ([`SimOptions::gpu_nodes`]) with the NVIDIA
//! kernel modules in its config has `nvidia.com/gpu: 1` allocatable once a DaemonSet
//! that mounts `/var/lib/kubelet/device-plugins` runs (the device plugin).
//!
//! [`SimOptions::gpu_nodes`]: crate::SimOptions::gpu_nodes

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use rustls::ServerConfig;
use rustls::server::WebPkiClientVerifier;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;

use super::certs;
use super::config::NodeConfig;
use super::state::{Phase, Shared, cluster_key};
use talosprov_core::role::Role;

/// The API server's port when the endpoint names none.
pub const APISERVER_PORT: u16 = 6443;

/// The host path every CNI writes its config into.
const CNI_DIR: &str = "/etc/cni/net.d";
/// The kubelet's device-plugin socket folder, which a device plugin mounts.
const DEVICE_PLUGINS_DIR: &str = "/var/lib/kubelet/device-plugins";
/// The kernel modules the NVIDIA device plugin needs loaded.
const NVIDIA_MODULES: [&str; 4] = ["nvidia", "nvidia_uvm", "nvidia_drm", "nvidia_modeset"];

/// Apply `cfg`'s inline manifests to its cluster and start serving its API, unless it
/// already is. Failures (the address cannot be bound, a certificate cannot be made)
/// are logged: the Talos side goes on, as a real node's would with a broken API server.
pub(crate) async fn start(shared: Arc<Shared>, cfg: NodeConfig) {
    let key = cluster_key(&cfg);
    {
        let mut clusters = shared.clusters();
        let cluster = clusters.entry(key.clone()).or_default();
        if cluster.api_started {
            return;
        }
        cluster.api_started = true;
        cluster.objects = inline_objects(&cfg.raw);
    }
    if let Err(e) = serve(shared, &cfg, key).await {
        tracing::warn!(target: "talos_sim", error = %e, "the Kubernetes API does not start");
    }
}

/// The objects of every `cluster.inlineManifests[].contents` of `raw`, in order.
fn inline_objects(raw: &[u8]) -> Vec<Value> {
    let mut out = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_slice(raw) {
        let Ok(v) = <serde_yaml_ng::Value as serde::Deserialize>::deserialize(doc) else {
            continue;
        };
        let Some(list) = v
            .get("cluster")
            .and_then(|c| c.get("inlineManifests"))
            .and_then(|l| l.as_sequence())
        else {
            continue;
        };
        for m in list {
            let contents = m.get("contents").and_then(|c| c.as_str()).unwrap_or("");
            for object in serde_yaml_ng::Deserializer::from_str(contents) {
                if let Ok(o) = <Value as serde::Deserialize>::deserialize(object)
                    && o.is_object()
                {
                    out.push(o);
                }
            }
        }
    }
    out
}

async fn serve(shared: Arc<Shared>, cfg: &NodeConfig, key: String) -> Result<(), String> {
    let endpoint = url::Url::parse(&cfg.endpoint).map_err(|e| e.to_string())?;
    let host: IpAddr = endpoint
        .host_str()
        .ok_or("the endpoint has no host")?
        .trim_matches(['[', ']'])
        .parse()
        .map_err(|_| "the endpoint's host is not an IP address".to_string())?;
    let addr = SocketAddr::new(host, endpoint.port().unwrap_or(APISERVER_PORT));
    let ca_crt = cfg
        .k8s_ca_crt_pem
        .as_deref()
        .ok_or("cluster.ca.crt is missing")?;
    let ca_key = cfg
        .k8s_ca_key_pem
        .as_deref()
        .ok_or("cluster.ca.key is missing")?;
    let mut addresses = vec![host];
    addresses.extend(shared.nodes.iter().map(|n| n.ip).filter(|ip| *ip != host));
    let identity = certs::apiserver_identity(ca_crt, ca_key, &addresses)?;
    let provider = talosprov_talos::tls::provider();
    let mut roots = rustls::RootCertStore::empty();
    for ca in rustls_pemfile::certs(&mut ca_crt.as_bytes()) {
        roots
            .add(ca.map_err(|e| e.to_string())?)
            .map_err(|e| e.to_string())?;
    }
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| e.to_string())?;
    let mut tls = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_client_cert_verifier(verifier)
        .with_single_cert(identity.chain, identity.key)
        .map_err(|e| e.to_string())?;
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    tracing::info!(target: "talos_sim", %addr, cluster = %key, "Kubernetes API serving");
    let acceptor = TlsAcceptor::from(Arc::new(tls));
    let mut shutdown = shared.shutdown.subscribe();
    let keeper = shared.clone();
    let task = tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                a = listener.accept() => a,
                _ = shutdown.changed() => return,
            };
            let Ok((tcp, peer)) = accepted else { continue };
            let acceptor = acceptor.clone();
            let shared = shared.clone();
            let key = key.clone();
            tokio::spawn(async move {
                let Ok(stream) = acceptor.accept(tcp).await else {
                    tracing::info!(target: "talos_sim", %peer, "Kubernetes API: TLS handshake refused");
                    return;
                };
                let service = hyper::service::service_fn(move |req| {
                    let shared = shared.clone();
                    let key = key.clone();
                    async move { Ok::<_, Infallible>(respond(&shared, &key, &req)) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    keeper.keep_task(task);
    Ok(())
}

/// The answer to one request.
fn respond(shared: &Shared, key: &str, req: &Request<Incoming>) -> Response<Full<Bytes>> {
    if req.method() != Method::GET {
        return status(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            "this simulated API server is read-only",
        );
    }
    let table = req
        .headers()
        .get(hyper::header::ACCEPT)
        .and_then(|a| a.to_str().ok())
        .is_some_and(|a| a.contains("as=Table"));
    let path = req.uri().path().trim_end_matches('/');
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    let objects = shared
        .clusters()
        .get(key)
        .map(|c| c.objects.clone())
        .unwrap_or_default();
    match parts.as_slice() {
        ["version"] => ok(&version(shared, key)),
        ["api"] => ok(&json!({"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": ""}]})),
        ["apis"] => ok(
            &json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [
            {"name": "apps", "versions": [{"groupVersion": "apps/v1", "version": "v1"}],
             "preferredVersion": {"groupVersion": "apps/v1", "version": "v1"}}]}),
        ),
        ["api", "v1"] => ok(&resource_list(
            "v1",
            &[
                ("nodes", "Node", false),
                ("namespaces", "Namespace", false),
                ("serviceaccounts", "ServiceAccount", true),
                ("configmaps", "ConfigMap", true),
            ],
        )),
        ["apis", "apps", "v1"] => ok(&resource_list(
            "apps/v1",
            &[
                ("daemonsets", "DaemonSet", true),
                ("deployments", "Deployment", true),
            ],
        )),
        ["api", "v1", "nodes"] => {
            let nodes = nodes(shared, key, &objects);
            if table {
                ok(&node_table(&nodes))
            } else {
                ok(&list("NodeList", "v1", nodes))
            }
        }
        ["api", "v1", "nodes", name] => match nodes(shared, key, &objects)
            .into_iter()
            .find(|n| n["metadata"]["name"] == *name)
        {
            Some(n) => ok(&n),
            None => not_found(&format!("nodes \"{name}\" not found")),
        },
        ["apis", "apps", "v1", kind] | ["api", "v1", kind] => ok(&list_of(&objects, kind, None)),
        ["apis", "apps", "v1", "namespaces", ns, kind] | ["api", "v1", "namespaces", ns, kind] => {
            ok(&list_of(&objects, kind, Some(ns)))
        }
        _ => not_found(&format!(
            "the server could not find the requested resource ({path})"
        )),
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

fn resource_list(group_version: &str, resources: &[(&str, &str, bool)]) -> Value {
    json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version,
        "resources": resources.iter().map(|(name, kind, namespaced)| json!({
            "name": name, "singularName": kind.to_lowercase(), "namespaced": namespaced,
            "kind": kind, "verbs": ["get", "list"]})).collect::<Vec<_>>()})
}

fn list(kind: &str, api_version: &str, items: Vec<Value>) -> Value {
    json!({"kind": kind, "apiVersion": api_version, "metadata": {"resourceVersion": "1"}, "items": items})
}

/// The objects of resource `plural` (`daemonsets`), in namespace `ns` or all.
fn list_of(objects: &[Value], plural: &str, ns: Option<&str>) -> Value {
    let kind = match plural {
        "daemonsets" => "DaemonSet",
        "deployments" => "Deployment",
        "serviceaccounts" => "ServiceAccount",
        "configmaps" => "ConfigMap",
        "namespaces" => "Namespace",
        _ => "",
    };
    let items: Vec<Value> = objects
        .iter()
        .filter(|o| o["kind"] == kind)
        .filter(|o| {
            ns.is_none_or(|ns| o["metadata"]["namespace"].as_str().unwrap_or("default") == ns)
        })
        .cloned()
        .collect();
    let api_version = objects
        .iter()
        .find(|o| o["kind"] == kind)
        .and_then(|o| o["apiVersion"].as_str())
        .unwrap_or("v1")
        .to_owned();
    list(&format!("{kind}List"), &api_version, items)
}

/// Whether a DaemonSet among `objects` mounts the host path `dir`.
fn daemonset_mounts(objects: &[Value], dir: &str) -> bool {
    objects
        .iter()
        .filter(|o| o["kind"] == "DaemonSet")
        .any(|o| {
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
}

/// The Node objects of the cluster's machines that run with its config.
fn nodes(shared: &Shared, key: &str, objects: &[Value]) -> Vec<Value> {
    let cni_addon = daemonset_mounts(objects, CNI_DIR);
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
    let cni = cni_addon || talos_deploys_cni;
    let device_plugin = daemonset_mounts(objects, DEVICE_PLUGINS_DIR);
    let mut out = Vec::new();
    for node in &shared.nodes {
        let state = node.lock();
        let Some(cfg) = state.config.as_ref().filter(|c| cluster_key(c) == key) else {
            continue;
        };
        if state.phase != Phase::Secure {
            continue;
        }
        let name = node.hostname(&state);
        let gpu = device_plugin
            && shared.options.gpu_nodes.contains(&node.ip)
            && NVIDIA_MODULES
                .iter()
                .all(|m| kernel_modules(&cfg.raw).iter().any(|k| k == m));
        out.push(node_object(&name, node.ip, cfg, cni, gpu));
    }
    out
}

fn node_object(name: &str, ip: IpAddr, cfg: &NodeConfig, ready: bool, gpu: bool) -> Value {
    let mut resources =
        json!({"cpu": "2", "memory": "4005276Ki", "pods": "110", "ephemeral-storage": "40Gi"});
    if gpu {
        resources["nvidia.com/gpu"] = json!("1");
    }
    let mut labels = json!({"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64"});
    if cfg.machine_type == Role::Controlplane {
        labels["node-role.kubernetes.io/control-plane"] = json!("");
    }
    let condition = if ready {
        json!({"type": "Ready", "status": "True", "reason": "KubeletReady",
               "message": "kubelet is posting ready status"})
    } else {
        json!({"type": "Ready", "status": "False", "reason": "KubeletNotReady",
               "message": "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized"})
    };
    json!({
        "kind": "Node", "apiVersion": "v1",
        "metadata": {"name": name, "labels": labels, "creationTimestamp": "2026-01-01T00:00:00Z",
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
            let roles = if n["metadata"]["labels"].get("node-role.kubernetes.io/control-plane").is_some() {
                "control-plane"
            } else {
                "<none>"
            };
            json!({"cells": [n["metadata"]["name"], if ready { "Ready" } else { "NotReady" }, roles, "1d",
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

/// `cluster.network.cni.name` of a raw config (Talos's default: flannel).
fn talos_cni(raw: &[u8]) -> String {
    v1alpha1(raw)
        .and_then(|d| {
            d["cluster"]["network"]["cni"]["name"]
                .as_str()
                .map(str::to_owned)
        })
        .unwrap_or_else(|| "flannel".to_owned())
}

/// `machine.kernel.modules[].name` of a raw config.
fn kernel_modules(raw: &[u8]) -> Vec<String> {
    v1alpha1(raw)
        .and_then(|d| d["machine"]["kernel"]["modules"].as_array().cloned())
        .unwrap_or_default()
        .iter()
        .filter_map(|m| m["name"].as_str().map(str::to_owned))
        .collect()
}

/// The kubelet image's tag (`v1.36.2`) of a raw config.
fn kubelet_version(raw: &[u8]) -> Option<String> {
    let doc = v1alpha1(raw)?;
    let image = doc["machine"]["kubelet"]["image"].as_str()?;
    image.rsplit_once(':').map(|(_, tag)| tag.to_owned())
}

fn v1alpha1(raw: &[u8]) -> Option<Value> {
    serde_yaml_ng::Deserializer::from_slice(raw)
        .filter_map(|d| <Value as serde::Deserialize>::deserialize(d).ok())
        .find(|d| d.get("machine").is_some())
}

fn ok(body: &Value) -> Response<Full<Bytes>> {
    Response::builder()
        .status(StatusCode::OK)
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap_or_default()
}

fn status(code: StatusCode, reason: &str, message: &str) -> Response<Full<Bytes>> {
    let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                      "message": message, "reason": reason, "code": code.as_u16()});
    Response::builder()
        .status(code)
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap_or_default()
}

fn not_found(message: &str) -> Response<Full<Bytes>> {
    status(StatusCode::NOT_FOUND, "NotFound", message)
}
