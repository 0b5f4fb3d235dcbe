//! Benchmark of the patch pipeline: a generated cluster of 1000 nodes with 10
//! patch files per level (common, role, node), a third each literal, Jinja and
//! templatefile. Compiles every file, renders each node's 30 patches, reads
//! them as YAML, and merges them over a base config. Prints the time per phase.
//! (Rendering alone is timed first, then the whole render-and-read path.)
//!
//! Run: `cargo run --release --example bench_patch`

use std::path::PathBuf;
use std::time::Instant;
use talosprov_patch::apply::apply_patches;
use talosprov_patch::discover::PatchKind;
use talosprov_patch::document::MachineConfig;
use talosprov_patch::load::load_documents;
use talosprov_patch::render::{Renderer, TemplateVars};

const NODES: usize = 1000;
const PER_LEVEL: usize = 10;

const BASE: &str = "version: v1alpha1\nmachine:\n  type: worker\n  install:\n    disk: /dev/sda\n  network: {}\ncluster:\n  clusterName: bench\n  network:\n    podSubnets: [10.244.0.0/16]\n";

fn patch_file(level: &str, i: usize) -> (PathBuf, PatchKind, String) {
    match i % 3 {
        0 => (
            PathBuf::from(format!("patches/{level}/{i:02}-literal.yaml")),
            PatchKind::Literal,
            format!("machine:\n  nodeLabels:\n    bench/{level}-{i}: \"yes\"\n  certSANs: [san-{i}.example.com]\n"),
        ),
        1 => (
            PathBuf::from(format!("patches/{level}/{i:02}-jinja.yaml.j2")),
            PatchKind::Jinja,
            format!(
                "machine:\n  network:\n    hostname: {{{{ hostname }}}}\n    nameservers: {{{{ nameservers | tojson }}}}\n  kubelet:\n    extraArgs:\n      node-ip: {{{{ node_ip }}}}\n      level-{i}: {level}\n"
            ),
        ),
        _ => (
            PathBuf::from(format!("patches/{level}/{i:02}-network.yaml.tftpl")),
            PatchKind::Templatefile,
            "machine:\n  network:\n    interfaces:\n      - deviceSelector:\n          physical: true\n        addresses:\n          - ${node_ip}/${prefix_length}\n        routes:\n          - network: 0.0.0.0/0\n            gateway: ${gateway}\n%{ if vip != null ~}\n        vip:\n          ip: ${vip}\n%{ endif ~}\n"
                .to_string(),
        ),
    }
}

fn vars(n: usize) -> TemplateVars {
    TemplateVars {
        hostname: format!("node-{n:04}"),
        node_ip: format!("10.{}.{}.{}", n / 65536, (n / 256) % 256, n % 256),
        role: if n < 3 { "controlplane" } else { "worker" }.into(),
        vip: (n < 3).then(|| "10.255.255.250".to_string()),
        gateway: "10.0.0.1".into(),
        nameservers: vec!["1.1.1.1".into(), "9.9.9.9".into()],
        prefix_length: 8,
        cluster_name: "bench".into(),
        talos_version: "v1.13.8".into(),
        kubernetes_version: "v1.36.2".into(),
        node: serde_json::json!({ "hostname": format!("node-{n:04}"), "cores": 4 }),
        pool: None,
        index: None,
    }
}

fn main() {
    let start = Instant::now();
    let mut renderer = Renderer::new();
    let mut per_node: Vec<Vec<PathBuf>> = vec![Vec::new(); NODES];
    let mut shared = Vec::new();
    for level in ["common", "controlplane", "worker"] {
        for i in 0..PER_LEVEL {
            let (path, kind, text) = patch_file(level, i);
            renderer.add(&path, kind, &text).expect("valid template");
            shared.push((level, path));
        }
    }
    for (n, files) in per_node.iter_mut().enumerate() {
        let role = if n < 3 { "controlplane" } else { "worker" };
        files.extend(
            shared
                .iter()
                .filter(|(l, _)| *l == "common" || *l == role)
                .map(|(_, p)| p.clone()),
        );
        for i in 0..PER_LEVEL {
            let (path, kind, text) = patch_file(&format!("nodes/node-{n:04}"), i);
            renderer.add(&path, kind, &text).expect("valid template");
            files.push(path);
        }
    }
    let compiled = start.elapsed();

    let t = Instant::now();
    for (n, files) in per_node.iter().enumerate() {
        let v = vars(n);
        for f in files {
            renderer.render(f, &v).expect("renders");
        }
    }
    let render_time = t.elapsed();

    let t = Instant::now();
    let mut rendered = Vec::with_capacity(NODES);
    for (n, files) in per_node.iter().enumerate() {
        let v = vars(n);
        let patches: Vec<_> = files
            .iter()
            .map(|f| {
                let docs = renderer.render_documents(f, &v).expect("renders");
                load_documents(f.display().to_string(), docs).expect("loads")
            })
            .collect();
        rendered.push(patches);
    }
    let parse_time = t.elapsed();

    let t = Instant::now();
    let base = MachineConfig::parse(BASE).expect("base config");
    let mut bytes = 0;
    for patches in &rendered {
        let config = apply_patches(&base, patches).expect("merges");
        bytes += config.to_yaml().expect("yaml").len();
    }
    let merge_time = t.elapsed();

    let files: usize = per_node.iter().map(Vec::len).sum();
    println!(
        "nodes: {NODES}, patch files per node: {}, renders: {files}",
        files / NODES
    );
    println!(
        "compile {} files:      {:>8.1} ms",
        3 * PER_LEVEL + NODES * PER_LEVEL,
        compiled.as_secs_f64() * 1e3
    );
    println!(
        "render only:            {:>8.1} ms",
        render_time.as_secs_f64() * 1e3
    );
    println!(
        "render + YAML + load:   {:>8.1} ms",
        parse_time.as_secs_f64() * 1e3
    );
    println!(
        "merge + write configs:  {:>8.1} ms ({bytes} bytes)",
        merge_time.as_secs_f64() * 1e3
    );
    println!(
        "total:                  {:>8.1} ms",
        start.elapsed().as_secs_f64() * 1e3
    );
}
