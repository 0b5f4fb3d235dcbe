//! `talosprov adopt` against a lab cluster made to match OpenTofu states
//! written here from the providers' documented schemas: the nodes run the
//! configs the siderolabs/talos provider makes (`talosctl gen config`'s, with
//! the provider's defaults, then the config patches), applied out of band by
//! an independent Talos client, and the states describe the VMs as the
//! bpg/proxmox provider records them, read from fakepve. Each state is
//! adopted, validated and planned with exit 0; a later apply changes nothing;
//! a VM edited by hand after adopt is one in-place update.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use crate::config_drift_lab::{apply_out_of_band, client_files, running_config};
use crate::support::cli::stdout;
use crate::support::lab::{Lab, change_lines};
use talosprov_base::role::Role;
use talosprov_machine::config::machine_config_yaml;
use talosprov_machine::secrets::SecretsBundle;
use talosprov_machine::secrets_file::parse_secrets_yaml;
use talosprov_patch::apply::apply_patches;
use talosprov_patch::document::MachineConfig;
use talosprov_patch::load::load_patch;

const HOSTS: [&str; 3] = ["talos-controlplane-01", "talos-worker-01", "talos-gpu-01"];
const COMMON_PATCH: &str =
    "machine:\n  kubelet:\n    extraArgs:\n      rotate-server-certificates: \"true\"\n";

fn zone_patch(host: &str) -> String {
    format!("machine:\n  nodeLabels:\n    topology.kubernetes.io/zone: {host}\n")
}

/// How one fixture state is written.
#[derive(Clone, Copy, Debug)]
struct Variant {
    /// `proxmox_virtual_environment_` or `proxmox_`.
    prefix: &'static str,
    /// The nodes live in a module under `for_each` (else `count`, at root).
    module_for_each: bool,
    /// The talos provider's apply resource schema: 0 (input only), 1 (input
    /// and result), or 2 for provider 0.10's write-only input (the hash only).
    talos_schema: u8,
}

/// `talosctl gen config`'s config for `role`, as the talos provider's data
/// source makes it: the default installer and disk.
fn provider_input(secrets: &SecretsBundle, role: Role, endpoint: &str) -> MachineConfig {
    crate::support::tfstate::provider_input(secrets, role, "lab", endpoint)
}

fn patched(input: &MachineConfig, patches: &[String]) -> String {
    let loaded: Vec<_> = patches
        .iter()
        .enumerate()
        .map(|(i, p)| load_patch(format!("p{i}"), p).expect("patch"))
        .collect();
    machine_config_yaml(&apply_patches(input, &loaded).expect("applies").documents)
}

/// One node as the fixture describes it.
struct NodeFacts {
    host: &'static str,
    ip: String,
    role: Role,
    input: String,
    patches: Vec<String>,
    running: String,
    vm: Value,
}

/// The talos provider's `machine_secrets`: talosctl's layout, renamed.
fn provider_secrets(yaml: &str) -> Value {
    let v: serde_yaml_ng::Value = serde_yaml_ng::from_str(yaml).expect("YAML");
    let mut v: Value = serde_json::to_value(v).expect("JSON");
    fn rename(v: &mut Value) {
        if let Value::Object(m) = v {
            for (k, mut inner) in std::mem::take(m) {
                rename(&mut inner);
                let k = match k.as_str() {
                    "crt" => "cert".to_owned(),
                    "bootstraptoken" => "bootstrap_token".to_owned(),
                    "secretboxencryptionsecret" => "secretbox_encryption_secret".to_owned(),
                    "aescbcencryptionsecret" => "aescbc_encryption_secret".to_owned(),
                    "k8saggregator" => "k8s_aggregator".to_owned(),
                    "k8sserviceaccount" => "k8s_serviceaccount".to_owned(),
                    _ => k,
                };
                m.insert(k, inner);
            }
        }
    }
    rename(&mut v);
    v["secrets"]["aescbc_encryption_secret"] = Value::Null;
    v
}

/// A bpg VM's state attributes, from what fakepve holds for it.
async fn vm_attributes(lab: &Lab, vmid: u64, ip: &str, image: &str) -> Value {
    let c = lab
        .pve
        .get(&format!("/nodes/pve1/qemu/{vmid}/config"))
        .await;
    let s = |k: &str| c[k].as_str().map(str::to_owned).unwrap_or_default();
    let prop = |text: &str, key: &str| {
        text.split(',')
            .find_map(|p| p.strip_prefix(&format!("{key}=")).map(str::to_owned))
    };
    let scsi0 = s("scsi0");
    let size: u64 = prop(&scsi0, "size")
        .map(|v| v.trim_end_matches('G').parse().expect("size"))
        .unwrap_or(0);
    let net0 = s("net0");
    let mac = net0
        .split(',')
        .next()
        .and_then(|p| p.split_once('='))
        .map(|(_, m)| m.to_owned());
    let hostpci: Vec<Value> = s("hostpci0")
        .split(',')
        .find_map(|p| p.strip_prefix("mapping="))
        .map(|m| vec![json!({"device": "hostpci0", "mapping": m, "pcie": true, "rombar": true})])
        .unwrap_or_default();
    let tags: Vec<String> = s("tags")
        .split([';', ','])
        .filter(|t| !t.is_empty())
        .map(str::to_owned)
        .collect();
    json!({
        "vm_id": vmid,
        "node_name": "pve1",
        "name": s("name"),
        "tags": tags,
        "pool_id": "TALOS",
        "machine": "q35",
        "bios": "ovmf",
        "cpu": [{"cores": c["cores"].as_u64().or_else(|| s("cores").parse().ok()), "type": "host"}],
        "memory": [{"dedicated": s("memory").parse::<u64>().ok().or(c["memory"].as_u64())}],
        "disk": [{
            "interface": "scsi0", "datastore_id": "local-lvm", "size": size,
            "file_id": image, "ssd": false, "discard": "ignore",
        }],
        "efi_disk": [{"datastore_id": "local-lvm", "type": "4m"}],
        "hostpci": hostpci,
        "network_device": [{"bridge": "vmbr0", "model": "virtio", "mac_address": mac, "vlan_id": 0}],
        "agent": [{"enabled": true}],
        "initialization": [{
            "ip_config": [{"ipv4": [{"address": format!("{ip}/8"), "gateway": "127.0.0.1"}]}],
            "dns": [{"servers": ["127.0.0.1"]}],
        }],
    })
}

fn instance(index_key: Option<Value>, schema: u8, attributes: Value) -> Value {
    let mut i =
        json!({"schema_version": schema, "attributes": attributes, "sensitive_attributes": []});
    if let Some(k) = index_key {
        i["index_key"] = k;
    }
    i
}

fn resource(module: Option<&str>, mode: &str, kind: &str, name: &str, provider: &str) -> Value {
    let mut r = json!({
        "mode": mode, "type": kind, "name": name,
        "provider": format!("provider[\"registry.opentofu.org/{provider}\"]"),
        "instances": [],
    });
    if let Some(m) = module {
        r["module"] = json!(m);
    }
    r
}

/// The fixture state of `variant` for the lab's nodes.
fn fixture(
    variant: Variant,
    secrets_yaml: &str,
    nodes: &[NodeFacts],
    image: &Value,
    pool_comment: &Value,
) -> Value {
    let module = variant.module_for_each.then_some("module.cluster[\"lab\"]");
    let key = |i: usize, host: &str| {
        if variant.module_for_each {
            json!(host)
        } else {
            json!(i)
        }
    };
    let mut secrets = resource(
        module,
        "managed",
        "talos_machine_secrets",
        "this",
        "siderolabs/talos",
    );
    secrets["instances"] = json!([instance(
        None,
        1,
        json!({
            "id": "machine_secrets", "talos_version": "v1.13",
            "machine_secrets": provider_secrets(secrets_yaml),
            "client_configuration": {"ca_certificate": "", "client_certificate": "", "client_key": ""},
        })
    )]);
    let mut data = resource(
        module,
        "data",
        "talos_machine_configuration",
        "node",
        "siderolabs/talos",
    );
    // `proxmox_vm` is the provider's other VM resource: the VMs keep the long name.
    let mut vms = resource(
        module,
        "managed",
        "proxmox_virtual_environment_vm",
        "node",
        "bpg/proxmox",
    );
    let mut applies = resource(
        module,
        "managed",
        "talos_machine_configuration_apply",
        "node",
        "siderolabs/talos",
    );
    for (i, n) in nodes.iter().enumerate() {
        let mut d = instance(
            Some(key(i, n.host)),
            0,
            json!({
                "cluster_name": "lab", "cluster_endpoint": format!("https://{}:6443", vip(&nodes[0].ip)),
                "machine_type": n.role.as_str(), "talos_version": "v1.13",
                "kubernetes_version": "1.36.2", "docs": false, "examples": false,
                "machine_configuration": n.input,
            }),
        );
        d["attributes"]["machine_secrets"] = provider_secrets(secrets_yaml);
        data["instances"].as_array_mut().expect("list").push(d);
        let vm = n.vm.clone();
        vms["instances"]
            .as_array_mut()
            .expect("list")
            .push(instance(Some(key(i, n.host)), 0, vm));
        let sha = {
            use sha2::Digest as _;
            hex::encode(sha2::Sha256::digest(n.running.as_bytes()))
        };
        let attrs = match variant.talos_schema {
            0 => json!({"node": n.ip, "endpoint": n.ip, "apply_mode": "auto",
                        "config_patches": n.patches, "machine_configuration": n.input}),
            1 => json!({"node": n.ip, "endpoint": n.ip, "apply_mode": "auto",
                        "config_patches": n.patches, "machine_configuration_input": n.input,
                        "machine_configuration": n.running}),
            _ => json!({"node": n.ip, "endpoint": n.ip, "apply_mode": "auto",
                        "config_patches": n.patches, "machine_configuration_input": null,
                        "machine_configuration_input_wo_version": 1,
                        "machine_configuration_hash": sha}),
        };
        let schema = u8::from(variant.talos_schema != 0);
        applies["instances"]
            .as_array_mut()
            .expect("list")
            .push(instance(Some(key(i, n.host)), schema, attrs));
    }
    let mut bootstrap = resource(
        module,
        "managed",
        "talos_machine_bootstrap",
        "this",
        "siderolabs/talos",
    );
    bootstrap["instances"] = json!([instance(
        None,
        0,
        json!({"node": nodes[0].ip, "endpoint": nodes[0].ip})
    )]);
    let mut download = resource(
        module,
        "managed",
        &format!("{}download_file", variant.prefix),
        "talos",
        "bpg/proxmox",
    );
    download["instances"] = json!([instance(None, 0, image.clone())]);
    let mut mapping = resource(
        module,
        "managed",
        &format!("{}hardware_mapping_pci", variant.prefix),
        "gpu",
        "bpg/proxmox",
    );
    mapping["instances"] = json!([instance(
        None,
        0,
        json!({
            "name": "gpu", "comment": "GeForce RTX 3050",
            "map": [{"node": "pve1", "path": "0000:01:00", "id": "10de:2507",
                     "subsystem_id": "10de:2507", "iommu_group": 10}],
        })
    )]);
    let mut pool = resource(
        module,
        "managed",
        &format!("{}pool", variant.prefix),
        "talos",
        "bpg/proxmox",
    );
    pool["instances"] = json!([instance(
        None,
        0,
        json!({"pool_id": "TALOS", "comment": pool_comment})
    )]);
    json!({
        "version": 4, "terraform_version": "1.10.6", "serial": 17,
        "lineage": "3f1d2c4b-5a6e-4f70-8a9b-0c1d2e3f4a5b", "outputs": {},
        "resources": [secrets, data, pool, download, mapping, vms, applies, bootstrap],
        "check_results": null,
    })
}

fn vip(cp_ip: &str) -> String {
    format!("{}120", cp_ip.trim_end_matches("121"))
}

/// Run talosprov with the lab's Proxmox environment and `args` only.
async fn talosprov(lab: &Lab, args: &[&str]) -> std::process::Output {
    talosprov_env(lab, args, &[]).await
}

/// [`talosprov`] with `env` added.
async fn talosprov_env(lab: &Lab, args: &[&str], env: &[(String, String)]) -> std::process::Output {
    let mut c = lab.bare_command(args);
    c.envs(env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
    Lab::finished(c, args).await
}

/// Make the lab's nodes run the talos provider's configs; the nodes' facts.
async fn provider_cluster(lab: &Lab) -> Vec<NodeFacts> {
    let secrets_yaml = lab.state().secrets.expect("secrets").expose().clone();
    let secrets = parse_secrets_yaml(&secrets_yaml).expect("bundle");
    let endpoint = format!("https://{}:6443", vip(&lab.ips[0]));
    let files = client_files(lab);
    let state = lab.state();
    let image = state
        .resources
        .images
        .values()
        .next()
        .expect("an image")
        .volid
        .clone();
    let mut nodes = Vec::new();
    for (i, host) in HOSTS.iter().enumerate() {
        let role = if i == 0 {
            Role::Controlplane
        } else {
            Role::Worker
        };
        let input = provider_input(&secrets, role, &endpoint);
        let patches = vec![COMMON_PATCH.to_owned(), zone_patch(host)];
        let running = patched(&input, &patches);
        let ip = lab.ips[i].clone();
        apply_out_of_band(files.path(), &ip, &running);
        let vmid = u64::from(state.resources.vms[*host].vmid);
        nodes.push(NodeFacts {
            host,
            ip: ip.clone(),
            role,
            input: machine_config_yaml(&input.documents),
            patches,
            running,
            vm: vm_attributes(lab, vmid, &ip, &image).await,
        });
    }
    for n in &nodes {
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while running_config(files.path(), &n.ip) != n.running.as_bytes() {
            assert!(
                std::time::Instant::now() < deadline,
                "{} never ran its config",
                n.host
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    nodes
}

/// The image the lab's VMs were made from, as `download_file` records it.
fn image_attributes(lab: &Lab) -> Value {
    let state = lab.state();
    let (_, image) = state.resources.images.iter().next().expect("an image");
    let file = image.volid.split_once('/').expect("volid").1.to_owned();
    json!({
        "node_name": image.node, "datastore_id": image.storage, "content_type": "import",
        "file_name": file,
        "url": format!("{}/image/{}/{}/nocloud-amd64.qcow2", lab.factory.url, image.schematic_id, image.talos_version),
        "overwrite": true,
    })
}

fn write_fixture(dir: &Path, name: &str, state: &Value) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, serde_json::to_vec_pretty(state).expect("JSON")).expect("write");
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_provider_state_adopts_validates_and_plans_with_no_change() {
    let lab = Lab::start("20.8", Duration::from_millis(100)).await;
    // The add-ons stay out: the provider states describe none.
    lab.write_topology(|t| {
        t[..t.find("\n# Kubernetes add-ons").expect("addons")].to_owned() + "\n"
    });
    lab.import_secrets().await;
    lab.apply_text().await;
    let nodes = provider_cluster(&lab).await;
    let secrets_yaml = lab.state().secrets.expect("secrets").expose().clone();
    let image = image_attributes(&lab);
    let ca = lab.pve.ca_file.display().to_string();
    let pool_comment = lab.pve.get("/pools/TALOS").await["comment"].clone();
    let variants = [
        Variant {
            prefix: "proxmox_virtual_environment_",
            module_for_each: false,
            talos_schema: 0,
        },
        Variant {
            prefix: "proxmox_",
            module_for_each: true,
            talos_schema: 1,
        },
        Variant {
            prefix: "proxmox_virtual_environment_",
            module_for_each: true,
            talos_schema: 2,
        },
    ];
    for (k, variant) in variants.iter().enumerate() {
        let state = fixture(*variant, &secrets_yaml, &nodes, &image, &pool_comment);
        let file = write_fixture(lab.dir.path(), &format!("v{k}.tfstate"), &state);
        let before = std::fs::read(&file).expect("fixture");
        let out_dir = lab.dir.path().join(format!("adopted-{k}"));
        let out = talosprov(
            &lab,
            &[
                "adopt",
                "--from-tfstate",
                file.to_str().expect("utf-8"),
                "--out",
                out_dir.to_str().expect("utf-8"),
                "--proxmox-ca-file",
                &ca,
            ],
        )
        .await;
        assert!(out.status.success(), "{variant:?}: adopt failed");
        let text = stdout(&out);
        assert!(text.contains("+ vm/talos-gpu-01"), "{text}");
        assert!(text.contains("+ pci_mapping/gpu"), "{text}");
        // Read only: the source is as it was, and no secret is printed.
        assert_eq!(std::fs::read(&file).expect("fixture"), before);
        for line in secrets_yaml
            .lines()
            .filter_map(|l| l.split_once(": "))
            .map(|(_, v)| v)
        {
            if line.len() > 16 {
                assert!(!text.contains(line), "adopt printed a secret");
                for entry in walk(&out_dir) {
                    let body = std::fs::read_to_string(&entry).expect("read");
                    if !entry.ends_with("talosprov.tfstate") {
                        assert!(!body.contains(line), "{} holds a secret", entry.display());
                    }
                }
            }
        }
        let topology = out_dir.join("cluster.yaml");
        let topo = topology.to_str().expect("utf-8");
        let adopted: talosprov_statefile::format::State =
            talosprov_statefile::format::State::from_json(
                &std::fs::read(out_dir.join("talosprov.tfstate")).expect("adopted state"),
            )
            .expect("state");
        // The secrets are the state's, certificates and all.
        let theirs = parse_secrets_yaml(&secrets_yaml).expect("bundle");
        let ours = parse_secrets_yaml(adopted.secrets.as_ref().expect("secrets").expose())
            .expect("bundle");
        assert_eq!(ours.certs.os.crt, theirs.certs.os.crt);
        assert_eq!(ours.certs.k8s.crt, theirs.certs.k8s.crt);
        assert_eq!(ours.certs.etcd.crt, theirs.certs.etcd.crt);
        assert!(
            talosprov(&lab, &["validate", "-f", topo])
                .await
                .status
                .success(),
            "{variant:?}"
        );
        let plan = talosprov(&lab, &["plan", "-detailed-exitcode", "-f", topo]).await;
        assert_eq!(
            plan.status.code(),
            Some(0),
            "{variant:?}: {}",
            stdout(&plan)
        );
        let apply = talosprov(&lab, &["apply", "-auto-approve", "-f", topo]).await;
        assert!(stdout(&apply).contains("No changes"), "{variant:?}");
    }
    // The state GitLab keeps for the old pipeline: read with one GET, never
    // locked or written, and never the target.
    let server = crate::support::gitlab_state::GitlabState::start().await;
    let source = serde_json::to_vec(&fixture(
        variants[1],
        &secrets_yaml,
        &nodes,
        &image,
        &pool_comment,
    ))
    .expect("JSON");
    server.stored.lock().expect("lock").state = Some(source.clone());
    let out_dir = lab.dir.path().join("adopted-http");
    let dir_arg = out_dir.display().to_string();
    let base = [
        "adopt",
        "--from-tfstate",
        "http",
        "--out",
        dir_arg.as_str(),
        "--proxmox-ca-file",
        ca.as_str(),
    ];
    let same = talosprov_env(&lab, &base, &server.env()).await;
    assert_eq!(same.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&same.stderr).contains("the target state is the source state"));
    let local = lab.dir.path().join("http-adopted.tfstate");
    let mut args = base.to_vec();
    args.extend([
        "--backend-config",
        "backend=local",
        "--state",
        local.to_str().expect("utf-8"),
    ]);
    let out = talosprov_env(&lab, &args, &server.env()).await;
    assert!(out.status.success(), "adopt from http failed");
    assert!(local.exists());
    assert_eq!(server.state(), Some(source), "the source state was written");
    let requests = server.stored.lock().expect("lock").requests.clone();
    assert!(
        requests.iter().all(|r| r.starts_with("GET")),
        "{requests:?}"
    );
    let topology = out_dir.join("cluster.yaml");
    let plan = talosprov(
        &lab,
        &[
            "plan",
            "-detailed-exitcode",
            "-f",
            topology.to_str().expect("utf-8"),
            "--state",
            local.to_str().expect("utf-8"),
        ],
    )
    .await;
    assert_eq!(plan.status.code(), Some(0), "http: {}", stdout(&plan));

    // --dry-run writes nothing and prints what it would write.
    let dry_dir = lab.dir.path().join("adopted-dry");
    let file = lab.dir.path().join("v1.tfstate");
    let out = talosprov(
        &lab,
        &[
            "adopt",
            "--dry-run",
            "--from-tfstate",
            file.to_str().expect("utf-8"),
            "--out",
            dry_dir.to_str().expect("utf-8"),
        ],
    )
    .await;
    assert!(out.status.success());
    assert!(stdout(&out).contains("Would write"), "{}", stdout(&out));
    assert!(stdout(&out).contains("Nothing was written (--dry-run)."));
    assert!(!dry_dir.exists(), "--dry-run wrote files");

    // A cluster made with talosctl: the bundle and the nodes.
    let schematic = lab
        .state()
        .resources
        .images
        .values()
        .next()
        .expect("an image")
        .schematic_id
        .clone();
    let out_dir = lab.dir.path().join("adopted-talos");
    let mut args = vec![
        "adopt".to_owned(),
        "--from-talos".into(),
        crate::support::fixtures::SECRETS_FILE.into(),
        "--out".into(),
        out_dir.display().to_string(),
        "--proxmox-ca-file".into(),
        ca.clone(),
        "--schematic".into(),
        schematic,
    ];
    for n in &nodes {
        args.extend(["--node".to_owned(), n.ip.clone()]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = talosprov(&lab, &args).await;
    assert!(out.status.success(), "adopt --from-talos failed");
    let text = stdout(&out);
    assert!(
        text.contains("+ vm/talos-worker-01: VM 122 on pve1"),
        "{text}"
    );
    assert!(text.contains("proxmox.pool is left out"), "{text}");
    // What every node has went up to common/; each node keeps its own.
    assert!(
        out_dir
            .join("patches/common/01-adopted-machine-kubelet.yaml")
            .exists(),
        "{text}"
    );
    assert!(
        out_dir
            .join("patches/nodes/talos-worker-01/00-adopted-machine-nodelabels.yaml")
            .exists(),
        "{text}"
    );
    let topology = out_dir.join("cluster.yaml");
    let topo = topology.to_str().expect("utf-8");
    let plan = talosprov(&lab, &["plan", "-detailed-exitcode", "-f", topo]).await;
    assert_eq!(
        plan.status.code(),
        Some(0),
        "--from-talos: {}",
        stdout(&plan)
    );

    // Adopting again: refused without --merge; with it, nothing is lacking
    // and nothing changes; a folder with another topology is a conflict.
    let again: Vec<String> = vec![
        "adopt".into(),
        "--from-tfstate".into(),
        lab.dir.path().join("v0.tfstate").display().to_string(),
        "--out".into(),
        lab.dir.path().join("adopted-0").display().to_string(),
        "--proxmox-ca-file".into(),
        ca.clone(),
    ];
    let again: Vec<&str> = again.iter().map(String::as_str).collect();
    let state_before =
        std::fs::read(lab.dir.path().join("adopted-0/talosprov.tfstate")).expect("state");
    let out = talosprov(&lab, &again).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("give an empty --out folder"));
    let mut merge = again.clone();
    merge.push("--merge");
    let out = talosprov(&lab, &merge).await;
    assert!(
        out.status.success(),
        "adopt --merge of the same source failed"
    );
    let state_after: talosprov_statefile::format::State =
        talosprov_statefile::format::State::from_json(
            &std::fs::read(lab.dir.path().join("adopted-0/talosprov.tfstate")).expect("state"),
        )
        .expect("state");
    let before: talosprov_statefile::format::State =
        talosprov_statefile::format::State::from_json(&state_before).expect("state");
    assert_eq!(state_after.resources, before.resources);
    assert_eq!(state_after.lineage, before.lineage);
    let mut clash = merge.clone();
    let talos_dir = lab.dir.path().join("adopted-talos").display().to_string();
    clash[4] = talos_dir.as_str();
    let out = talosprov(&lab, &clash).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("with other content than adopt writes"));

    // A VM edited by hand after adopt: one in-place update.
    let topology = lab
        .dir
        .path()
        .join(format!("adopted-{}/cluster.yaml", variants.len() - 1));
    let topo = topology.to_str().expect("utf-8");
    let vmid = lab.state().resources.vms["talos-worker-01"].vmid;
    let set = std::collections::BTreeMap::from([("cores".to_owned(), "6".to_owned())]);
    let put = talosprov_proxmox::lifecycle::config_request("pve1", vmid, &set, &[], None);
    lab.pve
        .client()
        .send(&put)
        .await
        .expect("PUT cores by hand");
    let plan = talosprov(&lab, &["plan", "-f", topo]).await;
    let changes = change_lines(&stdout(&plan));
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert!(
        changes[0].starts_with("~ vm/talos-worker-01"),
        "{changes:?}"
    );

    // A node no VM matches is refused, naming it.
    let mut state = fixture(variants[0], &secrets_yaml, &nodes, &image, &pool_comment);
    let vms = state["resources"]
        .as_array_mut()
        .expect("list")
        .iter_mut()
        .find(|r| r["type"] == "proxmox_virtual_environment_vm")
        .expect("vms");
    vms["instances"].as_array_mut().expect("list").remove(1);
    let file = write_fixture(lab.dir.path(), "novm.tfstate", &state);
    let out_dir = lab.dir.path().join("adopted-novm");
    let out = talosprov(
        &lab,
        &[
            "adopt",
            "--from-tfstate",
            file.to_str().expect("utf-8"),
            "--out",
            out_dir.to_str().expect("utf-8"),
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "talos_machine_configuration_apply.node[1]: node {} matches no VM",
            nodes[1].ip
        )),
        "{err}"
    );
    assert!(!out_dir.exists(), "a refused adopt wrote files");
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// Bad sources are refused with their place, and nothing is written.
#[test]
fn bad_sources_are_refused_with_their_place_and_nothing_is_written() {
    let dir = tempfile::tempdir().expect("dir");
    let good = json!({
        "version": 4, "terraform_version": "1.10.6", "serial": 1,
        "lineage": "3f1d2c4b-5a6e-4f70-8a9b-0c1d2e3f4a5b", "outputs": {},
        "resources": [{
            "mode": "managed", "type": "talos_machine_configuration_apply", "name": "node",
            "provider": "provider[\"registry.opentofu.org/siderolabs/talos\"]",
            "instances": [{"schema_version": 1, "attributes": {"node": "10.0.0.1"}}],
        }],
    });
    let text = serde_json::to_string_pretty(&good).expect("JSON");
    let cases: Vec<(&str, String, &str)> = vec![
        ("truncated", text[..text.len() / 2].to_owned(), "the file is truncated"),
        (
            "version3",
            text.replace("\"version\": 4", "\"version\": 3"),
            "version 3",
        ),
        ("no-secrets", text.clone(), "talos_machine_secrets"),
        (
            "encrypted",
            r#"{"serial": 3, "lineage": "x", "meta": {}, "encrypted_data": "AAAA", "encryption_version": "v0"}"#.to_owned(),
            "encrypted",
        ),
    ];
    for (name, body, expect) in cases {
        let file = dir.path().join(format!("{name}.tfstate"));
        std::fs::write(&file, body).expect("write");
        let out_dir = dir.path().join(format!("out-{name}"));
        let out = crate::support::cli::talosprov()
            .args(["adopt", "--from-tfstate"])
            .arg(&file)
            .arg("--out")
            .arg(&out_dir)
            .output()
            .expect("run");
        assert_eq!(out.status.code(), Some(1), "{name}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(&file.display().to_string()), "{name}: {err}");
        assert!(err.contains(expect), "{name}: {err}");
        assert!(!out_dir.exists(), "{name}: files written");
    }
}
