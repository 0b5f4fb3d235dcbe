//! The loopback lab for end-to-end tests: fakepve, the factory stand-in and
//! the Talos simulator on addresses of the test's own (127.<a>.<b>.121-123),
//! the lab topology rewritten for them in a temporary folder, and a runner for
//! the talosprov binary with the Proxmox environment set.

use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

use serde_json::Value;
use talosprov_sim::Simulator;
use talosprov_sim::state::SimOptions;

use super::cli::{BIN, finish, stdout};
use super::factory::Factory;
use super::fakepve::{FakeOptions, FakePve, ROOT_TOKEN_ID, ROOT_TOKEN_SECRET};
use super::fixtures::{SECRETS_FILE, copy_tree, repo};

/// One running lab.
pub struct Lab {
    /// fakepve.
    pub pve: FakePve,
    /// The factory stand-in.
    pub factory: Factory,
    /// The simulated nodes.
    pub sim: Option<Simulator>,
    /// The folder holding cluster.yaml, patches/ and the state.
    pub dir: tempfile::TempDir,
    /// The node addresses.
    pub ips: Vec<String>,
    /// Extra environment for every talosprov run.
    pub env: Vec<(String, String)>,
    /// Three control planes and two workers instead of the lab's nodes.
    pub ha: bool,
}

/// The highly available lab's nodes: control planes `talos-cp-01..03` at
/// `.121-.123`, workers `talos-worker-01..02` at `.124-.125`.
const HA_NODES: &str = "nodes:
  - { hostname: talos-cp-01, ip: 127.0.0.121, role: controlplane, cores: 2, memory: 4096, disk_size: 50 }
  - { hostname: talos-cp-02, ip: 127.0.0.122, role: controlplane, cores: 2, memory: 4096, disk_size: 50 }
  - { hostname: talos-cp-03, ip: 127.0.0.123, role: controlplane, cores: 2, memory: 4096, disk_size: 50 }
  - { hostname: talos-worker-01, ip: 127.0.0.124, role: worker, cores: 4, memory: 8192, disk_size: 100 }
  - { hostname: talos-worker-02, ip: 127.0.0.125, role: worker, cores: 4, memory: 8192, disk_size: 100 }
";

/// The hostnames of the lab's nodes at `.121` on, as `examples/lab/cluster.yaml` lists them.
const LAB_HOSTNAMES: [&str; 3] = ["talos-controlplane-01", "talos-worker-01", "talos-gpu-01"];

/// The hostnames of `HA_NODES`, in address order.
const HA_HOSTNAMES: [&str; 5] = [
    "talos-cp-01",
    "talos-cp-02",
    "talos-cp-03",
    "talos-worker-01",
    "talos-worker-02",
];

impl Lab {
    /// Start a lab whose nodes are `127.<net>.121` to `.123` (`net` like
    /// "1.7": distinct per test, so tests run in parallel), with the
    /// simulator's install reboot taking `reboot`.
    pub async fn start(net: &str, reboot: Duration) -> Lab {
        Lab::start_at(net, reboot, "v1.13.8").await
    }

    /// As [`Lab::start`], with the simulated nodes booting `talos_version`
    /// (write the topology with the same version).
    pub async fn start_at(net: &str, reboot: Duration, talos_version: &str) -> Lab {
        Lab::start_with(net, reboot, talos_version, false).await
    }

    /// A lab of three control planes and two workers (see `HA_NODES`) at
    /// `127.<net>.121-125`, booting `talos_version`.
    pub async fn start_ha(net: &str, reboot: Duration, talos_version: &str) -> Lab {
        Lab::start_with(net, reboot, talos_version, true).await
    }

    /// As [`Lab::start_ha`] at Talos v1.13.8, with Proxmox hosts `pve2` and
    /// `pve3` beside `pve1`.
    pub async fn start_ha_on_three_hosts(net: &str) -> Lab {
        let opts = FakeOptions {
            nodes: vec!["pve2".to_owned(), "pve3".to_owned()],
            ..FakeOptions::default()
        };
        Lab::start_full(net, Duration::from_millis(100), "v1.13.8", true, 0, opts).await
    }

    /// A lab whose simulator also serves `extra` more nodes (127.<net>.124
    /// on) for a pool's members, and whose Proxmox has two more hosts, `pve2`
    /// and `pve3`.
    pub async fn start_for_pools(net: &str, extra: u8) -> Lab {
        let opts = FakeOptions {
            nodes: vec!["pve2".to_owned(), "pve3".to_owned()],
            ..FakeOptions::default()
        };
        Lab::start_full(
            net,
            Duration::from_millis(100),
            "v1.13.8",
            false,
            extra,
            opts,
        )
        .await
    }

    /// The lab as `examples/lab/run.sh` starts it: one Proxmox host with the
    /// lab's storages, and simulated nodes on `127.<net>.121` to `.133`
    /// (the reference cluster's three, then spares waiting in maintenance
    /// mode where the README's pool example puts its members).
    pub async fn start_like_run_sh(net: &str) -> Lab {
        Lab::start_full(
            net,
            Duration::from_millis(100),
            "v1.13.8",
            false,
            10,
            FakeOptions::default(),
        )
        .await
    }

    async fn start_with(net: &str, reboot: Duration, talos_version: &str, ha: bool) -> Lab {
        Lab::start_full(net, reboot, talos_version, ha, 0, FakeOptions::default()).await
    }

    /// A lab (as [`Lab::start`]) whose Proxmox is started with `opts` (tokens,
    /// grants, more hosts).
    pub async fn start_with_fake(net: &str, opts: FakeOptions) -> Lab {
        Lab::start_full(net, Duration::from_millis(100), "v1.13.8", false, 0, opts).await
    }

    async fn start_full(
        net: &str,
        reboot: Duration,
        talos_version: &str,
        ha: bool,
        extra: u8,
        opts: FakeOptions,
    ) -> Lab {
        let pve = FakePve::start(opts).await;
        let factory = Factory::start().await;
        let last = if ha { 125 } else { 123 + extra };
        let ips: Vec<String> = (121..=last).map(|n| format!("127.{net}.{n}")).collect();
        let addrs: Vec<std::net::IpAddr> = ips.iter().map(|s| s.parse().expect("ip")).collect();
        let sim = Simulator::start(
            &addrs,
            SimOptions {
                talos_version: talos_version.into(),
                reboot_delay: reboot,
                // talos-gpu-01 has the lab's GPU passed through, and so may a
                // pool's members (the GPU shows only where the NVIDIA modules load).
                gpu_nodes: if ha { Vec::new() } else { addrs[2..].to_vec() },
                // Each node is named after its VM, as nocloud names it; a pool's
                // members are left to the simulator's stable names.
                hostnames: addrs
                    .iter()
                    .copied()
                    .zip(if ha {
                        &HA_HOSTNAMES[..]
                    } else {
                        &LAB_HOSTNAMES[..]
                    })
                    .map(|(ip, name)| (ip, (*name).to_owned()))
                    .collect(),
            },
        )
        .await
        .expect("start the simulator");
        let dir = tempfile::tempdir().expect("temp dir");
        copy_tree(&repo().join("patches"), &dir.path().join("patches"));
        copy_tree(
            &repo().join("examples/lab/addons"),
            &dir.path().join("addons"),
        );
        let lab = Lab {
            pve,
            factory,
            sim: Some(sim),
            dir,
            ips: if extra > 0 { ips[..3].to_vec() } else { ips },
            env: Vec::new(),
            ha,
        };
        lab.write_topology(|t| t);
        lab
    }

    /// The topology file.
    pub fn topology(&self) -> PathBuf {
        self.dir.path().join("cluster.yaml")
    }

    /// The state file.
    pub fn state_file(&self) -> PathBuf {
        self.dir.path().join("talosprov.tfstate")
    }

    /// Write the lab topology for this lab, passed through `edit`.
    pub fn write_topology(&self, edit: impl Fn(String) -> String) {
        let mut text = std::fs::read_to_string(repo().join("examples/lab/cluster.yaml"))
            .expect("lab topology");
        if self.ha {
            let start = text.find("nodes:\n").expect("nodes");
            let end = text.find("\n# The same reference").expect("patches_dir");
            text = format!("{}{HA_NODES}{}", &text[..start], &text[end..]);
        }
        for (i, ip) in self.ips.iter().enumerate().skip(3) {
            text = text.replace(&format!("127.0.0.{}", 121 + i), ip);
        }
        // Each lab has its own VIP, where the simulator serves its Kubernetes API.
        let vip = format!("{}120", self.ips[0].trim_end_matches("121"));
        let text = text
            .replace("vip: 127.0.0.120", &format!("vip: {vip}"))
            .replace("127.0.0.121", &self.ips[0])
            .replace("127.0.0.122", &self.ips[1])
            .replace("127.0.0.123", &self.ips[2])
            .replace("http://127.0.0.1:18080", &self.factory.url)
            .replace(".run/ca.pem", &self.pve.ca_file.display().to_string())
            .replace("../../patches", "patches");
        std::fs::write(self.topology(), edit(text)).expect("write topology");
    }

    /// A `talosprov` command for this lab (`-f` is added after the args).
    pub fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut c = self.bare_command(args);
        c.arg("-f").arg(self.topology());
        c
    }

    /// A `talosprov` command with the lab's Proxmox environment and `args`
    /// only (no `-f`).
    pub fn bare_command(&self, args: &[&str]) -> tokio::process::Command {
        let mut c = tokio::process::Command::new(BIN);
        c.args(args)
            .env("PROXMOX_VE_ENDPOINT", &self.pve.url)
            .env(
                "PROXMOX_VE_API_TOKEN",
                format!("{ROOT_TOKEN_ID}={ROOT_TOKEN_SECRET}"),
            )
            .env_remove("RUST_LOG")
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        c
    }

    /// Run talosprov to the end (at most 120 s).
    pub async fn run(&self, args: &[&str]) -> Output {
        Self::finished(self.command(args), args).await
    }

    /// Run `command` (made from `args`) to the end, echoing its output.
    pub async fn finished(command: tokio::process::Command, args: &[&str]) -> Output {
        let out = finish(command).await;
        eprintln!(
            "$ talosprov {}\n{}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    /// Seed the state with the fixture secrets bundle (no key generation).
    pub async fn import_secrets(&self) {
        let out = self.run(&["secrets", "import", SECRETS_FILE]).await;
        assert!(out.status.success(), "secrets import failed");
    }

    /// The VMs fakepve holds, by vmid.
    pub async fn vms(&self) -> Vec<Value> {
        let all = self.pve.get("/cluster/resources").await;
        all.as_array()
            .expect("list")
            .iter()
            .filter(|r| r["type"] == "qemu")
            .cloned()
            .collect()
    }

    /// The state, parsed.
    pub fn state(&self) -> talosprov_statefile::format::State {
        let bytes = std::fs::read(self.state_file()).expect("state file");
        talosprov_statefile::format::State::from_json(&bytes).expect("state JSON")
    }

    /// The etcd members control plane `ip` lists, by peer address (sorted),
    /// through the Talos API with the state's talosconfig.
    pub async fn etcd_members(&self, ip: &str) -> Vec<String> {
        let client = talosprov_talos::client::TalosClient::connect_secure(
            ip.parse().expect("ip"),
            &self.talos_credentials().await,
        )
        .await
        .expect("connect");
        let mut names: Vec<String> = client
            .etcd_member_list()
            .await
            .expect("members")
            .into_iter()
            .flat_map(|m| m.peer_urls)
            .filter_map(|u| url::Url::parse(&u).ok()?.host_str().map(str::to_owned))
            .collect();
        names.sort();
        names
    }

    /// The Talos client credentials of the state's talosconfig (`os:admin`), as
    /// an operator's talosctl would use them.
    pub async fn talos_credentials(&self) -> talosprov_talos::credentials::ClientCredentials {
        let text = stdout(&self.run(&["output", "talosconfig", "-raw"]).await);
        let tc = talosprov_base::talosconfig::Talosconfig::parse(&text)
            .expect("the state's talosconfig");
        talosprov_talos::credentials::ClientCredentials::from_talosconfig(&tc)
    }
}

/// A plan's change lines (`+ vm/...`, `~ addon/...`, `- config/...`: the
/// marks indented by two spaces), trimmed; field lines and config diffs,
/// indented deeper, left out.
pub fn change_lines(plan: &str) -> Vec<String> {
    plan.lines()
        .filter_map(|l| l.strip_prefix("  "))
        .filter(|l| {
            ["+ ", "~ ", "- ", "-/+ "]
                .iter()
                .any(|m| l.starts_with(m) && l[m.len()..].contains('/') && !l.contains(" = "))
        })
        .map(str::to_owned)
        .collect()
}

impl Lab {
    /// `plan`'s standard output, after checking it succeeded.
    pub async fn plan_text(&self) -> String {
        let out = self.run(&["plan"]).await;
        assert!(out.status.success(), "plan failed");
        stdout(&out)
    }

    /// `apply -auto-approve`'s standard output, after checking it succeeded.
    pub async fn apply_text(&self) -> String {
        let out = self.run(&["apply", "-auto-approve"]).await;
        assert!(out.status.success(), "apply failed");
        stdout(&out)
    }
}
