//! The patch pipeline through the library: templates in OpenTofu and Jinja
//! syntax rendered for a node, loaded, and merged over a base config in order,
//! with the file that set each value remembered.

use std::path::Path;
use talosprov_patch::apply::apply_patches_traced;
use talosprov_patch::discover::PatchKind;
use talosprov_patch::document::{DocumentId, MachineConfig};
use talosprov_patch::load::load_documents;
use talosprov_patch::render::{Renderer, TemplateVars};

const BASE: &str = "\
version: v1alpha1
machine:
  type: controlplane
  kubelet:
    image: ghcr.io/siderolabs/kubelet:v1.36.2
  install:
    disk: /dev/sda
cluster:
  clusterName: homelab
  network:
    podSubnets: [10.244.0.0/16]
    serviceSubnets: [10.96.0.0/12]
";

const KUBELET: &str =
    "machine:\n  kubelet:\n    extraArgs:\n      rotate-server-certificates: true\n";

const NETWORK_VIP: &str = r#"machine:
  network:
    hostname: ${hostname}
    nameservers:
%{ for ns in nameservers ~}
      - ${ns}
%{ endfor ~}
    interfaces:
      - deviceSelector:
          physical: true
        dhcp: false
        addresses:
          - ${node_ip}/${prefix_length}
        routes:
          - network: 0.0.0.0/0
            gateway: ${gateway}
%{ if vip != null ~}
        vip:
          ip: ${vip}
%{ endif ~}
"#;

const CNI: &str = "cluster:\n  network:\n    cni:\n      name: {{ 'none' if role == 'controlplane' else 'flannel' }}\n  proxy:\n    disabled: true\n";

fn vars() -> TemplateVars {
    TemplateVars {
        hostname: "talos-controlplane-01".into(),
        node_ip: "192.168.1.121".into(),
        role: "controlplane".into(),
        vip: Some("192.168.1.120".into()),
        gateway: "192.168.1.1".into(),
        nameservers: vec!["192.168.1.1".into(), "1.1.1.1".into()],
        prefix_length: 24,
        cluster_name: "homelab".into(),
        talos_version: "v1.13.8".into(),
        kubernetes_version: "v1.36.2".into(),
        node: serde_json::json!({"hostname": "talos-controlplane-01"}),
        pool: None,
        index: None,
    }
}

#[test]
fn rendered_templates_merge_over_the_base_config_in_order() {
    let files = [
        ("patches/common/40-kubelet.yaml", KUBELET),
        (
            "patches/controlplane/10-network-vip.yaml.tftpl",
            NETWORK_VIP,
        ),
        ("patches/controlplane/20-cluster-cni-proxy.yaml.j2", CNI),
    ];
    let mut renderer = Renderer::new();
    for (name, text) in files {
        let kind = PatchKind::of(name).unwrap();
        renderer.add(Path::new(name), kind, text).unwrap();
    }
    let patches: Vec<_> = files
        .iter()
        .map(|(name, _)| {
            let docs = renderer.render_documents(Path::new(name), &vars()).unwrap();
            load_documents(*name, docs).unwrap()
        })
        .collect();
    let base = MachineConfig::parse(BASE).unwrap();
    let (config, provenance) = apply_patches_traced(&base, &patches).unwrap();
    insta::assert_snapshot!(config.to_yaml().unwrap());
    let v1 = DocumentId::v1alpha1();
    assert_eq!(
        provenance.source_of(&v1, "machine.network.interfaces[0].vip.ip"),
        Some("patches/controlplane/10-network-vip.yaml.tftpl")
    );
    assert_eq!(
        provenance.source_of(&v1, "machine.kubelet.extraArgs.rotate-server-certificates"),
        Some("patches/common/40-kubelet.yaml")
    );
    assert_eq!(provenance.source_of(&v1, "machine.install.disk"), None);
}
