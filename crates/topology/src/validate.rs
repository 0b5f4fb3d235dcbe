//! Raw topology to validated model: defaults, references and every check in
//! one pass, collecting all problems. The sections live in `validate_sections`,
//! the node checks in `validate_nodes`.

use super::check::{Cx, known, resolve};
use super::raw::{RawNode, RawTopology, Spanned};
use super::validate_nodes::{self, NodeContext};
use crate::model::{Cluster, Environment, SchematicSpec, Topology};
use indexmap::IndexMap;
use std::path::{Path, PathBuf};
use talosprov_base::diagnostics::{Code, Diagnostic};

/// The Image Factory used when `image_factory.url` is not given.
pub const DEFAULT_IMAGE_FACTORY: &str = "https://factory.talos.dev";

/// Convert the raw topology into the model, applying every default and
/// running every check of the format.
///
/// Returns the model (complete only when no error was found; callers must
/// check the diagnostics) and every diagnostic, errors and warnings. `file`
/// labels diagnostics and anchors relative paths; `env` supplies
/// `PROXMOX_VE_ENDPOINT`. Pure: no I/O.
pub fn validate(
    raw: &RawTopology,
    file: &Path,
    env: &Environment,
) -> (Option<Topology>, Vec<Diagnostic>) {
    let mut cx = Cx {
        file,
        diagnostics: Vec::new(),
    };
    let base = talosprov_base::paths::folder_of(file);
    let cluster = cx.cluster(raw.cluster.as_ref());
    let proxmox = cx.proxmox(raw.proxmox.as_ref(), env, base);
    let image_factory_url = image_factory_url(&mut cx, raw);
    let schematics = cx.schematics(raw);
    let pci_mappings = cx.pci_mappings(raw);
    let declared_schematics: Vec<&String> = raw
        .schematics
        .iter()
        .flat_map(|s| &s.value)
        .map(|e| &e.name.value)
        .collect();
    let declared_pci_mappings: Vec<&String> = raw
        .pci_mappings
        .iter()
        .flat_map(|s| &s.value)
        .map(|e| &e.name.value)
        .collect();
    let default_schematic =
        check_default_schematic(&mut cx, raw, &schematics, &declared_schematics);
    let sections = (proxmox.as_ref(), &pci_mappings);
    let (pools, listed, all_nodes, memberships) =
        pool_members(&mut cx, raw, &cluster, sections, env);
    let nodes = validate_nodes::nodes(
        &mut cx,
        all_nodes.as_ref(),
        &NodeContext {
            network: cluster.network,
            vip: cluster.vip,
            proxmox_node: proxmox.as_ref().map(|p| p.node.as_str()),
            schematics: &schematics,
            default_schematic: default_schematic.as_deref(),
            pci_mappings: &pci_mappings,
            declared_schematics: declared_schematics.clone(),
            declared_pci_mappings,
            cluster: cluster.name.as_deref().unwrap_or("cluster"),
            bridge: proxmox.as_ref().map_or("vmbr0", |p| p.bridge.as_str()),
            datastore: proxmox.as_ref().map_or("", |p| p.datastore.as_str()),
            default_networks: proxmox.as_ref().map_or(&[][..], |p| &p.networks),
            default_disks: proxmox.as_ref().map_or(&[][..], |p| &p.disks),
            default_ha: proxmox.as_ref().and_then(|p| p.ha.as_ref()),
        },
    );
    name_member_fields(&mut cx.diagnostics, listed, &memberships);
    check_spread(&mut cx, raw);
    let nodes = nodes.map(|mut nodes| {
        for (node, m) in nodes.iter_mut().skip(listed).zip(memberships) {
            node.pool = Some(m);
        }
        nodes
    });
    let state = cx.state(raw.state.as_ref(), base);
    let addons = cx.addons(raw, base);
    let backup = cx.backup(raw.backup.as_ref(), base);
    let patches_dirs: Vec<PathBuf> = match &raw.patches_dir {
        Some(list) if !list.value.is_empty() => list
            .value
            .iter()
            .map(|d| resolve(base, d.value.as_str()))
            .collect(),
        _ => vec![resolve(base, "patches")],
    };
    let patches_dir = patches_dirs[0].clone();

    let endpoint = cluster.endpoint.clone().or_else(|| {
        let host = cluster.vip.or_else(|| {
            nodes
                .as_ref()?
                .iter()
                .find(|n| n.role == talosprov_base::role::Role::Controlplane)
                .map(|n| n.ip)
        })?;
        Some(format!("https://{host}:6443"))
    });
    let topology = (|| {
        Some(Topology {
            file: file.to_path_buf(),
            cluster: Cluster {
                name: cluster.name?,
                talos_version: cluster.talos_version?,
                kubernetes_version: cluster.kubernetes_version?,
                vip: cluster.vip,
                endpoint: endpoint?,
                gateway: cluster.gateway?,
                prefix_length: cluster.network?.prefix,
                nameservers: cluster.nameservers?,
                install_disk: cluster.install_disk?,
            },
            proxmox: proxmox?,
            image_factory_url: image_factory_url?,
            schematics,
            pci_mappings,
            nodes: nodes?,
            patches_dir,
            patches_dirs,
            pools,
            state: state?,
            addons,
            backup: backup?,
        })
    })();
    if let Some(t) = &topology {
        guest_agent_warnings(&mut cx, raw, t);
    }
    let topology = topology.filter(|_| !talosprov_base::diagnostics::has_errors(&cx.diagnostics));
    (topology, cx.diagnostics)
}

/// `T049`: the nodes whose image has no QEMU guest agent, once per schematic
/// (at its entry) and once for the nodes on the factory's plain image (at the
/// first one): their VMs get `agent: 0`, since Proxmox otherwise waits on an
/// agent that never answers.
fn guest_agent_warnings(cx: &mut Cx<'_>, raw: &RawTopology, t: &Topology) {
    let mut without: indexmap::IndexMap<Option<&str>, Vec<&str>> = indexmap::IndexMap::new();
    for n in &t.nodes {
        if !t.has_guest_agent(n) {
            without
                .entry(n.schematic.as_deref())
                .or_default()
                .push(n.hostname.as_str());
        }
    }
    let agent = super::model::GUEST_AGENT_EXTENSION;
    for (schematic, hosts) in without {
        let who = if hosts.len() > 3 {
            format!("{} and {} more", hosts[..3].join(", "), hosts.len() - 3)
        } else {
            hosts.join(", ")
        };
        let consequence = format!(
            "so their VMs get no QEMU guest agent (agent: 0): Proxmox shuts them down through \
             ACPI and shows no guest IP ({who})"
        );
        let (pos, field, msg) = match schematic {
            Some(name) => {
                let entry = raw
                    .schematics
                    .iter()
                    .flat_map(|s| &s.value)
                    .find(|e| e.name.value == name);
                let pos = entry.map_or(talosprov_base::diagnostics::Pos::default(), |e| {
                    e.value.extensions.as_ref().map_or(e.name.pos, |x| x.pos)
                });
                let msg = format!("schematic `{name}` has no {agent}, {consequence}");
                (pos, format!("schematics.{name}.extensions"), msg)
            }
            None => {
                let first = t.nodes.iter().find(|n| n.hostname == hosts[0]);
                let pos = raw
                    .nodes
                    .iter()
                    .flat_map(|l| &l.value)
                    .find(|n| {
                        n.value.hostname.as_ref().map(|h| h.value.as_str())
                            == first.map(|n| n.hostname.as_str())
                    })
                    .map_or(talosprov_base::diagnostics::Pos::default(), |n| n.pos);
                let msg = format!(
                    "nodes without a schematic run the factory's plain Talos image, which has \
                     no {agent}, {consequence}; give them a schematic with it (default_schematic)"
                );
                (pos, "default_schematic".to_owned(), msg)
            }
        };
        cx.push(
            Diagnostic::warning(Code::NoGuestAgent, cx.file, msg)
                .at(pos)
                .field(field),
        );
    }
}

/// What allocating the pools gives validation: the pools, how many nodes
/// are listed, the listed nodes followed by the members as `nodes` entries,
/// and each member's pool and index.
type Members = (
    Vec<super::pools::Pool>,
    usize,
    Option<Spanned<Vec<Spanned<RawNode>>>>,
    Vec<super::pools::Membership>,
);

/// A member's diagnostics name the pool's keys, where its settings come
/// from (`pools.gpus.hostpci[0].mapping`), not its place in the node list.
fn name_member_fields(
    diagnostics: &mut [Diagnostic],
    listed: usize,
    memberships: &[super::pools::Membership],
) {
    for d in diagnostics {
        let Some(field) = &d.field else { continue };
        let Some((index, rest)) = field
            .strip_prefix("nodes[")
            .and_then(|f| f.split_once(']'))
            .and_then(|(i, rest)| Some((i.parse::<usize>().ok()?, rest)))
        else {
            continue;
        };
        if let Some(m) = index.checked_sub(listed).and_then(|k| memberships.get(k)) {
            d.field = Some(format!("pools.{}{rest}", m.pool));
            // A member's host comes from the pool's `proxmox_nodes`.
            if let Some((head, host)) = d.message.rsplit_once("; set proxmox_node: ") {
                let host = host.split(',').next().unwrap_or(host).to_owned();
                d.message = format!(
                    "{head}; keep the pool's members on {host} (`proxmox_nodes: [{host}]`)"
                );
            }
        }
    }
}

/// The pools' members, allocated ([`super::pools`]).
fn pool_members(
    cx: &mut Cx<'_>,
    raw: &RawTopology,
    cluster: &super::validate_sections::ClusterDraft,
    (proxmox, mappings): (
        Option<&crate::model::ProxmoxSettings>,
        &IndexMap<String, crate::model::PciMapping>,
    ),
    env: &Environment,
) -> Members {
    let listed = raw.nodes.as_ref().map_or(0, |n| n.value.len());
    let Some(declared) = &raw.pools else {
        return (Vec::new(), listed, raw.nodes.clone(), Vec::new());
    };
    let mut taken: std::collections::BTreeSet<std::net::Ipv4Addr> = raw
        .nodes
        .iter()
        .flat_map(|n| &n.value)
        .filter_map(|n| n.value.ip.as_ref()?.value.parse().ok())
        .collect();
    taken.extend(cluster.vip);
    taken.extend(cluster.gateway);
    let taken_vmids = raw
        .nodes
        .iter()
        .flat_map(|n| &n.value)
        .filter_map(|n| match &n.value.vm_id {
            Some(v) => u32::try_from(v.value).ok(),
            None => n
                .value
                .ip
                .as_ref()?
                .value
                .parse::<std::net::Ipv4Addr>()
                .ok()
                .map(|ip| u32::from(ip.octets()[3])),
        })
        .collect();
    let context = super::pools::Context {
        cluster: cluster.name.as_deref().unwrap_or("cluster"),
        network: cluster.network,
        taken,
        taken_vmids,
        proxmox_node: proxmox.map(|p| p.node.as_str()),
        recorded: &env.recorded_pools,
        capacity: &env.host_capacity,
        pci_hosts: mappings
            .iter()
            .map(|(name, m)| {
                let default = proxmox.map_or("", |p| p.node.as_str());
                (name.clone(), m.hosts(default))
            })
            .collect(),
        pci_used: listed_devices(raw, proxmox.map(|p| p.node.as_str())),
        default_data_gib: proxmox
            .map_or(0, |p| p.disks.iter().map(|d| u64::from(d.size_gib)).sum()),
    };
    let (pools, members) =
        super::pools::allocate(&declared.value, &context, &mut cx.diagnostics, cx.file);
    let mut all = raw
        .nodes
        .clone()
        .unwrap_or_else(|| Spanned::new(Vec::new(), declared.pos));
    let mut memberships = Vec::new();
    for (node, m) in members {
        all.value.push(node);
        memberships.push(m);
    }
    (pools, listed, Some(all), memberships)
}

/// The `(mapping, host)` devices the listed nodes take (their `hostpci`
/// mappings on their `proxmox_node`, else `proxmox.node`).
fn listed_devices(
    raw: &RawTopology,
    default_host: Option<&str>,
) -> std::collections::BTreeSet<(String, String)> {
    raw.nodes
        .iter()
        .flat_map(|n| &n.value)
        .flat_map(|n| {
            let host = n
                .value
                .proxmox_node
                .as_ref()
                .map(|h| h.value.clone())
                .or(default_host.map(str::to_owned))
                .unwrap_or_default();
            n.value
                .hostpci
                .iter()
                .flat_map(|l| &l.value)
                .filter_map(move |h| Some((h.value.mapping.as_ref()?.value.clone(), host.clone())))
        })
        .collect()
}

/// `default_schematic`: a valid schematic's name. One declared but invalid
/// gives `None` without an error of its own (that schematic's error says
/// why); one not declared is an error.
fn check_default_schematic(
    cx: &mut Cx<'_>,
    raw: &RawTopology,
    schematics: &IndexMap<String, SchematicSpec>,
    declared_schematics: &[&String],
) -> Option<String> {
    let d = raw.default_schematic.as_ref()?;
    if schematics.contains_key(&d.value) {
        Some(d.value.clone())
    } else if declared_schematics.contains(&&d.value) {
        None
    } else {
        let msg = format!(
            "default_schematic `{}` is not declared under `schematics`{}",
            d.value,
            known(declared_schematics.iter().copied())
        );
        cx.error(Code::UnknownSchematic, d.pos, "default_schematic", msg);
        None
    }
}

/// `image_factory.url`, checked, else the public Image Factory.
fn image_factory_url(cx: &mut Cx<'_>, raw: &RawTopology) -> Option<String> {
    match raw
        .image_factory
        .as_ref()
        .and_then(|f| f.value.url.as_ref())
    {
        Some(url) => cx.url(url, "image_factory.url", false),
        None => Some(DEFAULT_IMAGE_FACTORY.to_owned()),
    }
}

/// `proxmox.spread`: each entry a role or a declared pool, given once.
fn check_spread(cx: &mut Cx<'_>, raw: &RawTopology) {
    let Some(list) = raw.proxmox.as_ref().and_then(|p| p.value.spread.as_ref()) else {
        return;
    };
    let pools: Vec<&str> = raw
        .pools
        .iter()
        .flat_map(|p| &p.value)
        .map(|e| e.name.value.as_str())
        .collect();
    let mut seen = Vec::new();
    for (i, entry) in list.value.iter().enumerate() {
        let name = entry.value.as_str();
        let field = format!("proxmox.spread[{i}]");
        let msg = if seen.contains(&name) {
            format!("{name:?} is given twice in proxmox.spread")
        } else if ["controlplane", "worker"].contains(&name) || pools.contains(&name) {
            seen.push(name);
            continue;
        } else {
            let known: Vec<&str> = ["controlplane", "worker"]
                .into_iter()
                .chain(pools.iter().copied())
                .collect();
            format!(
                "proxmox.spread entries are a role or a pool: {name:?} is neither (known: {})",
                known.join(", ")
            )
        };
        seen.push(name);
        cx.push(
            Diagnostic::error(Code::UnknownSpread, cx.file, msg)
                .at(entry.pos)
                .field(field),
        );
    }
}

#[cfg(test)]
mod tests {
    use crate::model::{Environment, SchematicSpec, StateSettings, Topology};
    use crate::parse;
    use std::path::{Path, PathBuf};
    use talosprov_base::diagnostics::Code;
    use talosprov_base::role::Role;

    /// A valid topology with every kind of section; the tests change one thing.
    const BASE: &str = include_str!("../../../tests/fixtures/valid/base.yaml");

    fn env() -> Environment {
        Environment::default()
    }

    fn valid(text: &str, env: &Environment) -> Topology {
        let loaded = parse(text, Path::new("dir/cluster.yaml"), env);
        talosprov_base::diagnostics::assert_clean(&loaded.diagnostics);
        loaded.topology.expect("a topology")
    }

    /// A cluster of `n` one-line nodes on a /8.
    fn cluster_of(n: usize) -> String {
        let mut t = String::from(
            "cluster:\n  name: lab\n  talos_version: v1.13.8\n  gateway: 10.0.0.1\n  prefix_length: 8\n\
             proxmox:\n  endpoint: https://pve.test:8006\n  node: pve\n  datastore: local-lvm\nnodes:\n",
        );
        for i in 0..n {
            let role = if i == 0 { "controlplane" } else { "worker" };
            t.push_str(&format!(
                "  - {{hostname: n{i}, ip: 10.1.{}.{}, vm_id: {}, role: {role}, cores: 1, memory: 4096}}\n",
                i / 250,
                1 + i % 250,
                1000 + i
            ));
        }
        t
    }

    #[test]
    fn more_nodes_than_the_limit_is_an_input_limit_error_at_the_first_one_over() {
        let max = talosprov_base::limits::MAX_NODES;
        assert_eq!(valid(&cluster_of(max), &env()).nodes.len(), max);
        let loaded = parse(&cluster_of(max + 1), Path::new("c.yaml"), &env());
        assert!(loaded.topology.is_none());
        let d: Vec<_> = loaded
            .diagnostics
            .iter()
            .map(|d| {
                let pos = d.pos.map(|p| (p.line, p.column));
                (d.code, pos, d.field.clone(), d.message.clone())
            })
            .collect();
        assert_eq!(
            d,
            vec![(
                Code::InputLimit,
                Some((11 + max as u32, 5)),
                Some(format!("nodes[{max}]")),
                format!(
                    "the topology has {} nodes, over talosprov's limit of {max} per cluster",
                    max + 1
                ),
            )]
        );
    }

    #[test]
    fn base_topology_is_valid_with_defaults_applied() {
        let t = valid(BASE, &env());
        assert_eq!(t.cluster.endpoint, "https://10.0.0.100:6443");
        assert_eq!(t.cluster.prefix_length, 24);
        assert_eq!(t.cluster.install_disk, "/dev/sda");
        assert!(t.cluster.nameservers.is_empty());
        assert_eq!(t.proxmox.image_storage, "local");
        assert_eq!(t.proxmox.bridge, "vmbr0");
        assert_eq!(t.image_factory_url, "https://factory.talos.dev");
        assert_eq!(t.patches_dir, PathBuf::from("dir/patches"));
        assert_eq!(t.state, StateSettings::Local { path: None });
        let cp = &t.nodes[0];
        assert_eq!(cp.role, Role::Controlplane);
        assert_eq!(cp.vm_id.0, 101);
        assert_eq!(cp.disk_size, 40);
        assert_eq!(cp.proxmox_node, "pve");
        assert_eq!(cp.schematic.as_deref(), Some("base"));
        let h = &t.nodes[1].hostpci[0];
        assert_eq!(
            (h.device(), h.pcie, h.rombar, h.xvga),
            ("hostpci0".to_owned(), true, true, false)
        );
    }

    #[test]
    fn endpoint_defaults_to_first_controlplane_without_vip() {
        let t = valid(&BASE.replace("  vip: 10.0.0.100\n", ""), &env());
        assert_eq!(t.cluster.endpoint, "https://10.0.0.101:6443");
    }

    #[test]
    fn proxmox_endpoint_comes_from_the_environment_when_the_file_has_none() {
        let text = BASE.replace("  endpoint: https://pve.test:8006\n", "");
        let env = Environment {
            proxmox_endpoint: Some("https://pve.env:8006/".into()),
            ..Environment::default()
        };
        assert_eq!(valid(&text, &env).proxmox.endpoint, "https://pve.env:8006");
        // The file wins over the environment.
        assert_eq!(valid(BASE, &env).proxmox.endpoint, "https://pve.test:8006");
        let missing = parse(&text, Path::new("c.yaml"), &Environment::default());
        assert_eq!(missing.diagnostics[0].code, Code::MissingField);
        assert_eq!(
            missing.diagnostics[0].field.as_deref(),
            Some("proxmox.endpoint")
        );
    }

    #[test]
    fn relative_paths_resolve_against_the_file() {
        let text =
            format!("{BASE}patches_dir: ../shared/patches\nstate:\n  path: state/lab.json\n");
        let t = valid(&text, &env());
        assert_eq!(t.patches_dir, PathBuf::from("shared/patches"));
        assert_eq!(
            t.state,
            StateSettings::Local {
                path: Some(PathBuf::from("dir/state/lab.json"))
            }
        );
        assert_eq!(super::resolve(Path::new(""), "."), PathBuf::from("."));
    }

    #[test]
    fn http_state_backend_may_take_its_address_from_the_environment() {
        let text = format!("{BASE}state:\n  backend: http\n");
        match valid(&text, &env()).state {
            StateSettings::Http { address, .. } => assert_eq!(address, None),
            other => panic!("expected the http backend, got {other:?}"),
        }
    }

    #[test]
    fn http_state_backend_defaults_its_methods() {
        let text = format!(
            "{BASE}state:\n  backend: http\n  address: https://gitlab.example/state\n  lock_address: https://gitlab.example/state/lock\n"
        );
        match valid(&text, &env()).state {
            StateSettings::Http {
                address,
                lock_address,
                unlock_address,
                lock_method,
                unlock_method,
            } => {
                assert_eq!(address.as_deref(), Some("https://gitlab.example/state"));
                assert_eq!(
                    lock_address.as_deref(),
                    Some("https://gitlab.example/state/lock")
                );
                assert_eq!(unlock_address, None);
                assert_eq!(
                    (lock_method.as_str(), unlock_method.as_str()),
                    ("LOCK", "UNLOCK")
                );
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn schematic_id_is_accepted_as_given() {
        let id = "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba";
        let text = BASE.replace(
            "    extensions: [siderolabs/qemu-guest-agent]",
            &format!("    id: {id}"),
        );
        let t = valid(&text, &env());
        assert_eq!(t.schematics["base"], SchematicSpec::Id(id.into()));
    }

    /// `BASE` with `addons:` text appended.
    fn with_addons(addons: &str) -> String {
        format!("{BASE}addons:\n{addons}")
    }

    fn problems(text: &str) -> Vec<(Code, String, String)> {
        parse(text, Path::new("c.yaml"), &env())
            .diagnostics
            .into_iter()
            .map(|d| (d.code, d.field.unwrap_or_default(), d.message))
            .collect()
    }

    #[test]
    fn addon_presets_give_their_defaults() {
        use crate::model::AddonSource;
        use talosprov_base::preset::Preset;
        use talosprov_base::preset::spec::Phase;
        let t = valid(
            &with_addons(
                "  cilium:\n    preset: cilium\n    helm: {repo: https://helm.cilium.io/, chart: cilium, version: 1.19.6, values: {operator: {replicas: 1}}}\n\
                 \x20 gpu:\n    preset: nvidia-gpu-operator\n    helm: {repo: https://helm.ngc.nvidia.com/nvidia, chart: gpu-operator, version: v26.3.3}\n    depends_on: [cilium]\n\
                 \x20 plain:\n    manifests: [addons/*.yaml]\n\
                 \x20 oci:\n    helm: {repo: oci://ghcr.io/org/charts/thing, version: 0.1.0}\n",
            ),
            &env(),
        );
        let cilium = &t.addons["cilium"];
        assert_eq!(
            (cilium.preset, cilium.phase, cilium.namespace.as_str()),
            (Some(Preset::Cilium), Phase::Bootstrap, "kube-system")
        );
        match &cilium.source {
            AddonSource::Helm { repo, values, .. } => {
                assert_eq!(repo, "https://helm.cilium.io");
                assert_eq!(values["operator"]["replicas"], 1);
            }
            other @ AddonSource::Manifests(_) | other @ AddonSource::Url { .. } => {
                panic!("{other:?}")
            }
        }
        let gpu = &t.addons["gpu"];
        assert_eq!(
            (gpu.phase, gpu.namespace.as_str()),
            (Phase::Cluster, "gpu-operator")
        );
        assert_eq!(
            gpu.namespace_labels
                .get("pod-security.kubernetes.io/enforce")
                .map(String::as_str),
            Some("privileged")
        );
        assert_eq!(gpu.depends_on, ["cilium"]);
        assert_eq!(
            t.addons["plain"].source,
            AddonSource::Manifests(vec![PathBuf::from("dir/addons/*.yaml")])
        );
        assert_eq!(t.addons["plain"].namespace, "default");
        assert!(
            matches!(&t.addons["oci"].source, AddonSource::Helm { chart, .. } if chart.is_empty())
        );
    }

    #[test]
    fn addon_fields_are_all_checked_at_once() {
        let got = problems(&with_addons(
            "  Bad_Name:\n    manifests: [a.yaml]\n\
             \x20 p:\n    preset: calico\n    manifests: [a.yaml]\n    phase: later\n    namespace: Kube_System\n\
             \x20 h:\n    helm: {repo: ftp://charts.test, version: ^1.2.0}\n\
             \x20 boot:\n    manifests: [b.yaml]\n    phase: bootstrap\n    depends_on: [late]\n\
             \x20 late:\n    manifests: [l.yaml]\n\
             \x20 g:\n    manifests: [\"dir*/x.yaml\"]\n    sha256: abc\n",
        ));
        let fields: Vec<(Code, &str)> = got.iter().map(|(c, f, _)| (*c, f.as_str())).collect();
        assert_eq!(
            fields,
            [
                (Code::InvalidValue, "addons.Bad_Name"),
                (Code::InvalidValue, "addons.p.preset"),
                (Code::InvalidValue, "addons.p.phase"),
                (Code::InvalidValue, "addons.p.namespace"),
                (Code::MissingField, "addons.h.helm.chart"),
                (Code::InvalidUrl, "addons.h.helm.repo"),
                (Code::InvalidValue, "addons.h.helm.version"),
                (Code::ConflictingFields, "addons.boot.depends_on"),
                (Code::InvalidValue, "addons.g.manifests"),
                (Code::ConflictingFields, "addons.g.sha256"),
            ],
            "{got:#?}"
        );
    }
}
