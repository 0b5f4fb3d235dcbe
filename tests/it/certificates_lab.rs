//! The client certificates the state keeps, a year on: a talosconfig whose admin
//! certificate has expired and a kubeconfig whose certificate expires within the renewal
//! window. talosprov still reads the cluster (with a talosconfig issued for the run from the
//! OS CA), its plan shows both renewals with their dates, a saved plan of them applies
//! exactly, and the renewed talosconfig is accepted by the nodes, which refuse the expired
//! one as Talos does.

use std::time::Duration;

use talosprov_base::talosconfig::Talosconfig;
use talosprov_machine::expiry::{kubeconfig_cluster, kubeconfig_not_after, talosconfig_not_after};
use talosprov_machine::kubeconfig::{AdminKubeconfig, KubeconfigInput};
use talosprov_machine::secrets_file::parse_secrets_yaml;
use talosprov_machine::talosconfig::{TalosconfigInput, generate};
use talosprov_plan::renewal::Renewal;
use talosprov_statefile::format::Output;
use time::OffsetDateTime;

use crate::support::cli::{finish, stdout};
use crate::support::fixtures::SECRETS_FILE;
use crate::support::lab::Lab;

/// The state's talosconfig and kubeconfig made again with certificates issued at the
/// given times, for 365 days, from the state's own CAs.
fn age_certificates(
    lab: &Lab,
    talosconfig_issued: OffsetDateTime,
    kubeconfig_issued: OffsetDateTime,
) {
    let secrets = parse_secrets_yaml(&std::fs::read_to_string(SECRETS_FILE).expect("secrets"))
        .expect("bundle");
    let mut state = lab.state();
    let stored = Talosconfig::parse(
        state
            .outputs
            .talosconfig
            .as_ref()
            .expect("a talosconfig")
            .value
            .expose(),
    )
    .expect("talosconfig");
    let mut rng = rand::rngs::OsRng;
    let old = generate(
        &TalosconfigInput {
            context: stored.context.clone(),
            endpoints: stored.endpoints.clone(),
            nodes: stored.nodes.clone(),
            secrets: &secrets,
            now: talosconfig_issued,
            lifetime: time::Duration::days(365),
        },
        &mut rng,
    )
    .expect("old talosconfig");
    let (name, server) = kubeconfig_cluster(
        state
            .outputs
            .kubeconfig
            .as_ref()
            .expect("a kubeconfig")
            .value
            .expose(),
    )
    .expect("kubeconfig cluster");
    let k = AdminKubeconfig::generate(
        &KubeconfigInput {
            cluster_name: name,
            endpoint: server,
            secrets: &secrets,
            now: kubeconfig_issued,
            lifetime: time::Duration::days(365),
        },
        &mut rng,
    )
    .expect("old kubeconfig");
    state.outputs.talosconfig = Some(Output::sensitive(old.to_yaml()));
    state.outputs.kubeconfig = Some(Output::sensitive(k.yaml));
    std::fs::write(lab.state_file(), state.to_json()).expect("write state");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_talosconfig_and_a_kubeconfig_due_are_planned_renewed_and_used() {
    let lab = Lab::start("19.1", Duration::from_millis(100)).await;
    lab.write_topology(|t| t);
    lab.import_secrets().await;
    lab.apply_text().await;
    let old_talos = lab.talos_credentials().await;

    // Mid-day offsets, so that the day counts do not move while the test runs.
    let now = OffsetDateTime::now_utc();
    let talos_issued = now - time::Duration::days(400) - time::Duration::hours(12);
    let kube_issued = now - time::Duration::days(353) + time::Duration::hours(12);
    age_certificates(&lab, talos_issued, kube_issued);
    let talos_expiry = talos_issued + time::Duration::days(365);
    let kube_expiry = kube_issued + time::Duration::days(365);
    let clock = Renewal::at(now);
    let talos_reason = clock.reason(talos_expiry);
    let kube_reason = clock.reason(kube_expiry);
    assert!(talos_reason.contains("(35 days ago)"), "{talos_reason}");
    assert!(kube_reason.contains("(in 12 days)"), "{kube_reason}");

    // The simulator, as apid, refuses a client certificate past its NotAfter.
    let expired = talosprov_talos::credentials::ClientCredentials::from_talosconfig(
        &Talosconfig::parse(
            lab.state()
                .outputs
                .talosconfig
                .as_ref()
                .expect("tc")
                .value
                .expose(),
        )
        .expect("parse"),
    );
    let ip: std::net::IpAddr = lab.ips[0].parse().expect("ip");
    let refused = async {
        let client = talosprov_talos::client::TalosClient::connect_secure(ip, &expired).await?;
        client.etcd_member_list().await?;
        Ok::<_, anyhow::Error>(())
    }
    .await;
    assert!(refused.is_err(), "an expired talosconfig is refused");

    // health still reaches the nodes, and fails its certificates check naming the
    // expired talosconfig.
    let out = lab.run(&["health"]).await;
    let text = format!("{}{}", stdout(&out), crate::support::cli::stderr(&out));
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("expired: talosconfig"), "{text}");
    assert!(
        text.contains(&format!("kubeconfig until {}", kube_expiry.date())),
        "{text}"
    );
    assert!(!text.contains("cannot connect"), "{text}");

    // A shorter window leaves the kubeconfig alone; the expired talosconfig is renewed
    // whatever the window.
    let mut command = lab.command(&["plan", "-detailed-exitcode"]);
    command.env("TALOSPROV_RENEW_WITHIN", "7days");
    let out = finish(command).await;
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains(&talos_reason), "{text}");
    assert!(!text.contains("~ kubeconfig"), "{text}");

    // The default window: both, and nothing else; the nodes were read back all the same.
    let plan_file = lab.dir.path().join("renew.tfplan");
    let plan_path = plan_file.to_str().expect("utf-8");
    let out = lab
        .run(&["plan", "-detailed-exitcode", "-out", plan_path])
        .await;
    let text = stdout(&out);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert!(text.contains("~ talosconfig"), "{text}");
    assert!(text.contains(&talos_reason), "{text}");
    assert!(text.contains("~ kubeconfig"), "{text}");
    assert!(text.contains(&kube_reason), "{text}");
    assert!(
        crate::support::lab::change_lines(&text).is_empty(),
        "only the renewals: {text}"
    );

    // The saved plan applies exactly: both renewed, for 365 days from now.
    let out = lab.run(&["apply", plan_path]).await;
    assert!(out.status.success(), "{}", stdout(&out));
    let state = lab.state();
    let year = time::Duration::days(365);
    let renewed_talos = talosconfig_not_after(
        state
            .outputs
            .talosconfig
            .as_ref()
            .expect("tc")
            .value
            .expose(),
    )
    .expect("a certificate");
    let renewed_kube = kubeconfig_not_after(
        state
            .outputs
            .kubeconfig
            .as_ref()
            .expect("kc")
            .value
            .expose(),
    )
    .expect("a certificate");
    for renewed in [renewed_talos, renewed_kube] {
        assert!(
            (renewed - (now + year)).abs() < time::Duration::hours(1),
            "{renewed} is a year from now"
        );
    }

    // The renewed talosconfig is accepted; the old credentials of the first apply too
    // (they are still valid), the expired ones not.
    assert_eq!(
        lab.etcd_members(&lab.ips[0]).await.len(),
        1,
        "the renewed talosconfig reaches etcd"
    );
    let client = talosprov_talos::client::TalosClient::connect_secure(ip, &old_talos)
        .await
        .expect("connect");
    assert!(client.etcd_member_list().await.is_ok());
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(0), "nothing left: {}", stdout(&out));

    // Short-lived client configs for a person: issued from the state's CAs, valid for the
    // TTL, accepted by the nodes and by kubectl, and the state's own untouched.
    let before = std::fs::read(lab.state_file()).expect("state");
    let out = lab
        .run(&["output", "talosconfig", "--ttl", "24h", "-raw"])
        .await;
    assert!(out.status.success());
    let text = stdout(&out);
    let expiry = talosconfig_not_after(&text).expect("a certificate");
    assert!((expiry - (now + time::Duration::hours(24))).abs() < time::Duration::minutes(30));
    let short = talosprov_talos::credentials::ClientCredentials::from_talosconfig(
        &Talosconfig::parse(&text).expect("a talosconfig"),
    );
    let client = talosprov_talos::client::TalosClient::connect_secure(ip, &short)
        .await
        .expect("connect");
    assert!(client.etcd_member_list().await.is_ok());
    let file = lab.dir.path().join("short-kubeconfig");
    let out = lab
        .run(&[
            "output",
            "kubeconfig",
            "--ttl",
            "1h",
            "--out-file",
            file.to_str().expect("utf-8"),
        ])
        .await;
    assert!(out.status.success());
    let text = std::fs::read_to_string(&file).expect("kubeconfig");
    let expiry = kubeconfig_not_after(&text).expect("a certificate");
    assert!((expiry - (now + time::Duration::hours(1))).abs() < time::Duration::minutes(30));
    crate::support::kubectl::kubectl(&file, &["get", "nodes"]);
    assert_eq!(std::fs::read(lab.state_file()).expect("state"), before);
    for bad in [
        &["output", "machineconfig", "talos-worker-01", "--ttl", "1h"][..],
        &["output", "talosconfig", "--ttl", "400days", "-raw"],
    ] {
        let out = lab.run(bad).await;
        assert_eq!(out.status.code(), Some(1), "{bad:?}");
    }

    // kubectl, an independent client, is refused with an expired kubeconfig.
    age_certificates(
        &lab,
        now - time::Duration::days(30),
        now - time::Duration::days(800),
    );
    let old = lab.dir.path().join("old-kubeconfig");
    std::fs::write(
        &old,
        lab.state()
            .outputs
            .kubeconfig
            .as_ref()
            .expect("kc")
            .value
            .expose(),
    )
    .expect("write");
    let out = crate::support::kubectl::kubectl_output(&old, &["get", "nodes"]);
    assert!(!out.status.success(), "an expired kubeconfig is refused");
}

/// With the clock moved 359.5 days ahead by faketime (LD_PRELOAD, on this glibc build), a
/// plan made from the state alone shows the talosconfig and the kubeconfig of the first apply
/// renewed, with their dates; at the real time it shows nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_clock_a_year_ahead_the_plan_renews_both_client_certificates() {
    let faketime = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .map(|d| d.join("faketime"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "this test needs faketime (Debian's `faketime` package; tests/run.sh installs it \
             when run as root)"
            )
        });
    let lab = Lab::start("19.2", Duration::from_millis(100)).await;
    lab.write_topology(|t| t);
    lab.import_secrets().await;
    lab.apply_text().await;
    let out = lab
        .run(&["plan", "-refresh=false", "-detailed-exitcode"])
        .await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));

    let ahead = time::Duration::hours(8628);
    let mut command = tokio::process::Command::new(faketime);
    command
        .args(["-f", "+8628h", crate::support::cli::BIN])
        .args(["plan", "-refresh=false", "-detailed-exitcode", "-f"])
        .arg(lab.topology())
        .env("PROXMOX_VE_ENDPOINT", &lab.pve.url)
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let out = finish(command).await;
    let text = stdout(&out);
    assert_eq!(
        out.status.code(),
        Some(2),
        "{text}{}",
        crate::support::cli::stderr(&out)
    );
    let state = lab.state();
    let clock = Renewal::at(OffsetDateTime::now_utc() + ahead);
    let talos = talosconfig_not_after(
        state
            .outputs
            .talosconfig
            .as_ref()
            .expect("tc")
            .value
            .expose(),
    )
    .expect("a certificate");
    let kube = kubeconfig_not_after(
        state
            .outputs
            .kubeconfig
            .as_ref()
            .expect("kc")
            .value
            .expose(),
    )
    .expect("a certificate");
    for (address, expiry) in [("talosconfig", talos), ("kubeconfig", kube)] {
        let reason = clock.reason(expiry);
        assert!(reason.contains("(in 5 days)"), "{reason}");
        assert!(
            text.contains(&format!("# {address} will be updated in place: {reason}")),
            "{address}: {text}"
        );
    }
    assert!(
        crate::support::lab::change_lines(&text).is_empty(),
        "{text}"
    );
}
