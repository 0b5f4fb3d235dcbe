//! `talosprov etcd snapshot` on the lab: the snapshot is streamed from a
//! control plane, age-encrypted before it leaves the process, named so names
//! sort by time, described by a manifest, and pruned by the `backup:`
//! section's retention.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use age::secrecy::ExposeSecret as _;
use sha2::{Digest as _, Sha256};

use crate::support::cli::{stderr, stdout};
use crate::support::kubectl::{kubectl, lab_kubeconfig};
use crate::support::lab::Lab;
use crate::support::moto::Moto;
use talosprov_sim::kube_store::snapshot::{SNAPSHOT_MAGIC, check_snapshot_hash};

/// The archives (`*.snapshot.age`) of a folder, sorted by name.
pub fn archives(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| {
            d.map(|e| e.expect("entry").path())
                .filter(|p| p.to_string_lossy().ends_with(".snapshot.age"))
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// The manifest beside an archive.
pub fn manifest_of(archive: &Path) -> serde_json::Value {
    let path = PathBuf::from(archive.to_string_lossy().replace(".snapshot.age", ".json"));
    let text = std::fs::read_to_string(&path).expect("a manifest beside the archive");
    serde_json::from_str(&text).expect("the manifest is JSON")
}

/// An archive opened with an age identity.
pub fn decrypt(archive: &Path, identity: &age::x25519::Identity) -> Vec<u8> {
    let bytes = std::fs::read(archive).expect("read the archive");
    let decryptor = age::Decryptor::new(&bytes[..]).expect("an age file");
    let mut reader = decryptor
        .decrypt(std::iter::once(identity as &dyn age::Identity))
        .expect("the identity opens it");
    let mut out = Vec::new();
    reader.read_to_end(&mut out).expect("decrypt");
    out
}

/// The marker ConfigMap's `colour`, read with kubectl.
pub fn marker_colour(kubeconfig: &Path) -> String {
    kubectl(
        kubeconfig,
        &[
            "get",
            "configmap",
            "marker",
            "-o",
            "jsonpath={.data.colour}",
        ],
    )
}

/// Create the ConfigMap `default/marker` (`colour: ultramarine-0451`) with
/// kubectl, as a user would.
pub fn put_marker(lab: &Lab, kubeconfig: &Path) {
    let file = lab.dir.path().join("marker.yaml");
    std::fs::write(
        &file,
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: marker\n  namespace: default\ndata:\n  colour: ultramarine-0451\n",
    )
    .expect("write marker.yaml");
    kubectl(
        kubeconfig,
        &[
            "apply",
            "--server-side",
            "-f",
            file.to_str().expect("UTF-8"),
        ],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_is_encrypted_named_described_and_pruned_as_the_backup_section_says() {
    let lab = Lab::start("20.10", Duration::from_millis(100)).await;
    lab.import_secrets().await;
    lab.apply_text().await;
    let kubeconfig = lab_kubeconfig(&lab).await;
    put_marker(&lab, &kubeconfig);

    // No backup: section: beside the state, sealed with the cluster's own key.
    let out = lab.run(&["etcd", "snapshot"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let default = lab.dir.path().join("etcd-snapshots");
    let saved = archives(&default);
    assert_eq!(saved.len(), 1, "{saved:?}");
    let text = stdout(&out);
    assert!(text.starts_with("Saved etcd snapshot etcd-"), "{text}");
    assert!(text.contains("from talos-controlplane-01"), "{text}");
    assert!(
        text.contains("encrypted with the cluster's own key"),
        "{text}"
    );
    let name = saved[0].file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.contains("-lab-r"), "{name}");
    let manifest = manifest_of(&saved[0]);
    assert_eq!(manifest["cluster"], "lab");
    assert_eq!(manifest["lineage"], lab.state().lineage.to_string());
    assert_eq!(manifest["node"], "talos-controlplane-01");
    assert_eq!(manifest["key"], "cluster");
    assert!(
        manifest["talos_version"]
            .as_str()
            .unwrap()
            .starts_with("v1.")
    );
    assert!(
        manifest["kubernetes_version"]
            .as_str()
            .unwrap()
            .starts_with("v1.")
    );
    assert!(manifest["revision"].as_u64().unwrap() > 0, "{manifest}");
    assert!(
        name.contains(&format!("-r{}.", manifest["revision"])),
        "{name}"
    );
    let sealed = std::fs::read(&saved[0]).unwrap();
    assert_eq!(manifest["encrypted_bytes"], sealed.len() as u64);
    assert!(sealed.starts_with(b"age-encryption.org/v1\n"));
    for plain in [&b"ultramarine-0451"[..], b"kube-system", SNAPSHOT_MAGIC] {
        assert!(
            !sealed.windows(plain.len()).any(|w| w == plain),
            "{:?} is in the archive unencrypted",
            String::from_utf8_lossy(plain)
        );
    }

    // --recipient: sealed to that key alone, which opens it to the snapshot
    // the node sent, whole.
    let identity = age::x25519::Identity::generate();
    let recipient = identity.to_public().to_string();
    let to = lab.dir.path().join("mine");
    let out = lab
        .run(&[
            "etcd",
            "snapshot",
            "--to",
            to.to_str().unwrap(),
            "--recipient",
            &recipient,
        ])
        .await;
    assert!(out.status.success(), "{}", stderr(&out));
    let mine = archives(&to);
    assert_eq!(mine.len(), 1);
    let manifest = manifest_of(&mine[0]);
    assert_eq!(manifest["key"], "recipients");
    let plain = decrypt(&mine[0], &identity);
    assert!(plain.starts_with(SNAPSHOT_MAGIC));
    check_snapshot_hash(&plain).expect("the snapshot arrives whole");
    assert_eq!(manifest["plaintext_bytes"], plain.len() as u64);
    assert_eq!(
        manifest["plaintext_sha256"],
        hex::encode(Sha256::digest(&plain))
    );
    assert!(plain.windows(16).any(|w| w == b"ultramarine-0451"));

    // backup: keep_last 2 and no daily copies: the third snapshot deletes the
    // first, and an unrelated file in the folder is never touched.
    lab.write_topology(|t| {
        format!("{t}\nbackup:\n  destination: kept\n  keep_last: 2\n  keep_daily: 0\n")
    });
    let kept = lab.dir.path().join("kept");
    std::fs::create_dir_all(&kept).unwrap();
    std::fs::write(kept.join("notes.txt"), "mine").unwrap();
    // An upload that stopped before its manifest, and another cluster's.
    let orphan = kept.join("etcd-20250101T000000.000Z-lab-r1.snapshot.age");
    let theirs = kept.join("etcd-20250101T000000.000Z-other-r1.snapshot.age");
    std::fs::write(&orphan, "partial").unwrap();
    std::fs::write(&theirs, "theirs").unwrap();
    let mut names = Vec::new();
    for _ in 0..3 {
        let out = lab.run(&["etcd", "snapshot"]).await;
        assert!(out.status.success(), "{}", stderr(&out));
        names.push(archives(&kept).last().cloned().expect("an archive"));
    }
    let left: Vec<PathBuf> = archives(&kept)
        .into_iter()
        .filter(|p| p != &theirs)
        .collect();
    assert_eq!(left, names[1..].to_vec(), "the newest two are kept");
    assert!(!Path::new(&names[0].to_string_lossy().replace(".snapshot.age", ".json")).exists());
    assert!(kept.join("notes.txt").exists());
    assert!(!orphan.exists(), "an interrupted upload is deleted");
    assert!(
        theirs.exists(),
        "another cluster's archive is never touched"
    );
    assert_eq!(
        archives(&default).len(),
        1,
        "the default folder is left alone"
    );

    // keep_last 0 still keeps the only one left: the newest.
    lab.write_topology(|t| {
        format!("{t}\nbackup:\n  destination: kept\n  keep_last: 0\n  keep_daily: 0\n")
    });
    let out = lab.run(&["etcd", "snapshot"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert_eq!(text.matches("(retention)").count(), 2, "{text}");
    assert_eq!(
        archives(&kept).len(),
        2,
        "the newest, and the other cluster's"
    );

    // backup.max_age: the plan warns when the newest snapshot is older, or
    // when there is none.
    lab.write_topology(|t| format!("{t}\nbackup:\n  destination: kept\n  max_age: 26h\n"));
    let text = lab.plan_text().await;
    assert!(!text.contains("backup.max_age"), "a fresh snapshot: {text}");
    let newest = archives(&kept).pop().unwrap();
    let old = kept.join("etcd-20251101T000000.000Z-lab-r3.snapshot.age");
    std::fs::rename(&newest, &old).unwrap();
    std::fs::rename(
        newest.to_string_lossy().replace(".snapshot.age", ".json"),
        kept.join("etcd-20251101T000000.000Z-lab-r3.json"),
    )
    .unwrap();
    let text = lab.plan_text().await;
    assert!(
        text.contains(&format!(
            "Warning: the newest etcd snapshot in {}, etcd-20251101T000000.000Z-lab-r3.snapshot.age, is ",
            kept.display()
        )),
        "{text}"
    );
    assert!(
        text.contains("older than backup.max_age (1day 2h)"),
        "{text}"
    );
    std::fs::remove_file(&old).unwrap();
    let text = lab.plan_text().await;
    assert!(
        text.contains("there is no etcd snapshot of cluster lab in"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_go_to_s3_encrypted_and_a_failing_store_leaves_nothing() {
    let moto = Moto::start(&["backups"]).await;
    let mut lab = Lab::start("20.11", Duration::from_millis(100)).await;
    lab.env.extend(moto.env());
    lab.import_secrets().await;
    lab.apply_text().await;
    let kubeconfig = lab_kubeconfig(&lab).await;
    put_marker(&lab, &kubeconfig);
    lab.write_topology(|t| {
        format!(
            "{t}\nbackup:\n  destination: s3://backups/lab/etcd\n  keep_last: 1\n  keep_daily: 0\n"
        )
    });

    let out = lab.run(&["etcd", "snapshot"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("to s3://backups/lab/etcd ("),
        "{}",
        stdout(&out)
    );
    let objects = moto.objects("backups").await;
    assert_eq!(objects.len(), 2, "{objects:?}");
    let (archive, size) = objects
        .iter()
        .find(|(k, _)| k.ends_with(".snapshot.age"))
        .expect("the archive");
    assert!(archive.starts_with("lab/etcd/etcd-"), "{archive}");
    let manifest_key = archive.replace(".snapshot.age", ".json");
    let manifest: serde_json::Value =
        serde_json::from_slice(&moto.get("backups", &manifest_key).await).expect("JSON");
    assert_eq!(manifest["encrypted_bytes"], *size);
    assert_eq!(manifest["key"], "cluster");
    let sealed = moto.get("backups", archive).await;
    assert!(sealed.starts_with(b"age-encryption.org/v1\n"));
    assert!(!sealed.windows(16).any(|w| w == b"ultramarine-0451"));

    // Retention in S3: keep_last 1 leaves the newest alone.
    let out = lab.run(&["etcd", "snapshot"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("(retention)"), "{}", stdout(&out));
    let after = moto.objects("backups").await;
    assert_eq!(after.len(), 2, "{after:?}");
    assert!(!after.contains_key(archive.as_str()), "{after:?}");

    // 403 and 500: refused with S3's answer named, and nothing written.
    for (status, code) in [(403, "AccessDenied"), (500, "InternalError")] {
        let before = moto.requests().await.len();
        moto.fail_with(status, code).await;
        let out = lab.run(&["etcd", "snapshot"]).await;
        assert_eq!(out.status.code(), Some(1), "{status}: {}", stdout(&out));
        let err = stderr(&out);
        assert!(err.contains("s3://backups/lab/etcd"), "{status}: {err}");
        assert!(
            err.contains(code) || err.contains(&format!("{status} Internal Server Error")),
            "{status}: {err}"
        );
        assert!(!err.contains("talosprov-test-secret"), "{err}");
        moto.heal().await;
        assert_eq!(moto.objects("backups").await, after, "{status}");
        let requests = moto.requests().await.split_off(before);
        assert!(
            !requests
                .iter()
                .any(|r| r.starts_with("DELETE /backups/lab/etcd/etcd-")),
            "a failed snapshot deletes no archive: {requests:?}"
        );
    }

    // An endpoint that does not answer.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let mut cmd = lab.command(&["etcd", "snapshot"]);
    cmd.env("AWS_ENDPOINT_URL", format!("http://127.0.0.1:{port}"));
    let out = Lab::finished(cmd, &["etcd", "snapshot"]).await;
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("s3://backups/lab/etcd"), "{err}");
    assert!(err.contains("connect") || err.contains("Connect"), "{err}");
    assert_eq!(moto.objects("backups").await, after);
}

/// Delete every control plane's VM in fakepve, as a lost host does, and
/// reinstall its simulated node from scratch: etcd is gone.
pub async fn lose_the_control_planes(lab: &Lab) {
    let sim = lab.sim.as_ref().expect("simulator");
    let state = lab.state();
    for (host, vm) in &state.resources.vms {
        let config = &state.resources.configs[host];
        if config.role != Some(talosprov_base::role::Role::Controlplane) {
            continue;
        }
        talosprov_proxmox::lifecycle::destroy_vm(&lab.pve.client(), &vm.node, vm.vmid, 5)
            .await
            .expect("delete the VM by hand");
        // Each simulated node is named after its VM.
        let node = lab
            .ips
            .iter()
            .filter_map(|ip| sim.node(ip.parse().expect("ip")))
            .find(|n| &n.hostname() == host)
            .expect("the control plane's node");
        node.wipe();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_that_lost_every_control_plane_is_restored_from_s3() {
    let moto = Moto::start(&["backups"]).await;
    let mut lab = Lab::start("20.12", Duration::from_millis(100)).await;
    lab.env.extend(moto.env());
    lab.write_topology(|t| format!("{t}\nbackup:\n  destination: s3://backups/lab\n"));
    lab.import_secrets().await;
    lab.apply_text().await;
    let kubeconfig = lab_kubeconfig(&lab).await;
    put_marker(&lab, &kubeconfig);
    let out = lab.run(&["etcd", "snapshot"]).await;
    assert!(out.status.success(), "{}", stderr(&out));

    lose_the_control_planes(&lab).await;
    let node = lab
        .sim
        .as_ref()
        .unwrap()
        .node(lab.ips[0].parse().unwrap())
        .unwrap();
    assert!(!node.etcd_bootstrapped());

    // The plan says what is broken and how out; -detailed-exitcode fails.
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let text = stdout(&out);
    assert!(
        text.contains(
            "Broken: bootstrap: etcd is gone on every control plane (talos-controlplane-01: no VM)"
        ),
        "{text}"
    );
    assert!(
        text.contains("talosprov etcd restore --from latest"),
        "{text}"
    );
    assert!(text.contains("-allow-new-etcd"), "{text}");
    assert!(!text.contains("No changes."), "{text}");
    // apply refuses it, and changes nothing.
    let before = lab.vms().await.len();
    let out = lab.run(&["apply", "-auto-approve"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("etcd is gone on every control plane"),
        "{}",
        stderr(&out)
    );
    assert_eq!(lab.vms().await.len(), before);

    // The restore: the plan (the control plane's VM and config, the
    // recovering bootstrap), then the cluster back with its objects.
    let out = lab
        .run(&["etcd", "restore", "--from", "latest", "-auto-approve"])
        .await;
    assert!(out.status.success(), "{}\n{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("+ vm/talos-controlplane-01"), "{text}");
    assert!(text.contains("+ bootstrap"), "{text}");
    assert!(
        text.contains("recover it on talos-controlplane-01 from the snapshot"),
        "{text}"
    );
    assert!(
        !text.contains("vm/talos-worker-01"),
        "workers are left alone: {text}"
    );
    assert!(
        stderr(&out).contains("Checking the etcd snapshot etcd-"),
        "{}",
        stderr(&out)
    );
    assert!(node.etcd_bootstrapped());
    let colour = marker_colour(&kubeconfig);
    assert_eq!(colour, "ultramarine-0451");
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}

/// Run `etcd restore` with `args` and check it is refused with `expected` in
/// its error, and that nothing changed: the VMs, the state's serial.
async fn refused(lab: &Lab, args: &[&str], expected: &str) {
    let vms = lab.vms().await.len();
    let serial = lab.state().serial;
    let mut all = vec!["etcd", "restore", "-auto-approve"];
    all.extend_from_slice(args);
    let out = lab.run(&all).await;
    assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stdout(&out));
    let err = stderr(&out);
    assert!(err.contains(expected), "{args:?}: {err}");
    assert!(!stdout(&out).contains("will perform"), "{args:?}: no plan");
    assert_eq!(lab.vms().await.len(), vms, "{args:?}");
    assert_eq!(lab.state().serial, serial, "{args:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_refuses_what_it_cannot_trust_and_changes_nothing() {
    let moto = Moto::start(&["backups"]).await;
    let mut lab = Lab::start("20.13", Duration::from_millis(100)).await;
    lab.env.extend(moto.env());
    lab.import_secrets().await;
    lab.apply_text().await;
    let identity = age::x25519::Identity::generate();
    let recipient = identity.to_public().to_string();
    let out = lab.run(&["etcd", "snapshot"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let out = lab
        .run(&[
            "etcd",
            "snapshot",
            "--to",
            "s3://backups/lab",
            "--recipient",
            &recipient,
        ])
        .await;
    assert!(out.status.success(), "{}", stderr(&out));
    let folder = lab.dir.path().join("etcd-snapshots");
    let archive = archives(&folder).pop().expect("an archive");
    let archive_text = archive.to_str().unwrap().to_owned();

    // etcd is healthy: refused, saying how to take it down first.
    refused(
        &lab,
        &["--from", "latest"],
        "etcd is running and healthy on talos-controlplane-01",
    )
    .await;
    refused(
        &lab,
        &["--from", "latest"],
        "talosctl reset --graceful=false",
    )
    .await;

    lose_the_control_planes(&lab).await;

    // Sealed to a recipient: without the identity, and with another one.
    refused(
        &lab,
        &["--from", "s3://backups/lab"],
        "give the identity file with --identity FILE",
    )
    .await;
    let other = lab.dir.path().join("other.key");
    std::fs::write(
        &other,
        age::x25519::Identity::generate()
            .to_string()
            .expose_secret(),
    )
    .unwrap();
    refused(
        &lab,
        &[
            "--from",
            "s3://backups/lab",
            "--identity",
            other.to_str().unwrap(),
        ],
        "the age identity given does not open it",
    )
    .await;
    // S3 answering 403 and 500.
    for (status, code) in [(403, "AccessDenied"), (500, "Internal Server Error")] {
        moto.fail_with(status, code).await;
        refused(&lab, &["--from", "s3://backups/lab"], code).await;
        moto.heal().await;
    }
    // No archive there.
    refused(
        &lab,
        &["--from", "s3://backups/elsewhere"],
        "there is no etcd snapshot of cluster lab",
    )
    .await;

    // Another cluster's snapshot: its manifest names another lineage, or
    // another etcd CA.
    let manifest_path = PathBuf::from(archive_text.replace(".snapshot.age", ".json"));
    let original = std::fs::read_to_string(&manifest_path).unwrap();
    let mut other_cluster: serde_json::Value = serde_json::from_str(&original).unwrap();
    other_cluster["lineage"] = "0b7d5b5e-8f7a-4c1e-9d55-3d2b1f7e6a10".into();
    std::fs::write(&manifest_path, other_cluster.to_string()).unwrap();
    refused(&lab, &["--from", &archive_text], "is of another cluster").await;
    let mut other_ca: serde_json::Value = serde_json::from_str(&original).unwrap();
    other_ca["etcd_ca_sha256"] = "00".repeat(32).into();
    std::fs::write(&manifest_path, other_ca.to_string()).unwrap();
    refused(&lab, &["--from", &archive_text], "another etcd CA").await;
    // A checksum that fails.
    let mut wrong_sum: serde_json::Value = serde_json::from_str(&original).unwrap();
    wrong_sum["plaintext_sha256"] = "11".repeat(32).into();
    std::fs::write(&manifest_path, wrong_sum.to_string()).unwrap();
    refused(&lab, &["--from", &archive_text], "fails its checksum").await;
    // A corrupt archive.
    std::fs::write(&manifest_path, &original).unwrap();
    let mut sealed = std::fs::read(&archive).unwrap();
    let at = sealed.len() - 40;
    sealed[at] ^= 0x55;
    std::fs::write(&archive, &sealed).unwrap();
    refused(&lab, &["--from", &archive_text], "cannot be decrypted").await;
    // A manifest that is not one.
    std::fs::write(&manifest_path, "{\"format\": 1").unwrap();
    refused(&lab, &["--from", &archive_text], "is not valid").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_lost_control_planes_are_restored_and_join_one_etcd() {
    let mut lab = Lab::start_ha("20.15", Duration::from_millis(100), "v1.13.8").await;
    lab.env.push(("TALOSPROV_READY_WAIT".into(), "120s".into()));
    lab.import_secrets().await;
    lab.apply_text().await;
    let kubeconfig = lab_kubeconfig(&lab).await;
    put_marker(&lab, &kubeconfig);
    let out = lab.run(&["etcd", "snapshot"]).await;
    assert!(out.status.success(), "{}", stderr(&out));

    lose_the_control_planes(&lab).await;
    let text = stdout(&lab.run(&["plan"]).await);
    assert!(
        text.contains(
            "etcd is gone on every control plane (talos-cp-01: no VM, talos-cp-02: no VM, \
             talos-cp-03: no VM)"
        ),
        "{text}"
    );

    let out = lab
        .run(&["etcd", "restore", "--from", "latest", "-auto-approve"])
        .await;
    assert!(out.status.success(), "{}\n{}", stdout(&out), stderr(&out));
    let text = stdout(&out);
    for cp in ["talos-cp-01", "talos-cp-02", "talos-cp-03"] {
        assert!(text.contains(&format!("+ vm/{cp}")), "{text}");
    }
    assert!(!text.contains("vm/talos-worker"), "{text}");
    // One etcd of the three control planes, with the objects of the snapshot.
    assert_eq!(lab.etcd_members(&lab.ips[0]).await, lab.ips[..3]);
    let colour = marker_colour(&kubeconfig);
    assert_eq!(colour, "ultramarine-0451");
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_without_etcds_hash_is_recovered_only_with_skip_hash_check() {
    let lab = Lab::start("20.16", Duration::from_millis(100)).await;
    lab.import_secrets().await;
    lab.apply_text().await;
    let kubeconfig = lab_kubeconfig(&lab).await;
    put_marker(&lab, &kubeconfig);
    let out = lab.run(&["etcd", "snapshot"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let folder = lab.dir.path().join("etcd-snapshots");
    let taken = archives(&folder).pop().expect("an archive");
    let manifest = manifest_of(&taken);

    // A database copied from etcd's data directory, archived by hand: the
    // body without the hash etcd appends to a snapshot it saves.
    let cp: std::net::IpAddr = lab.ips[0].parse().unwrap();
    let node = lab.sim.as_ref().unwrap().node(cp).unwrap();
    let body = node
        .with_kube_store(|s| s.snapshot_body())
        .expect("a store");
    assert!(check_snapshot_hash(&body).is_err());
    let identity = age::x25519::Identity::generate();
    let encryptor =
        age::Encryptor::with_recipients(std::iter::once(&identity.to_public() as _)).unwrap();
    let mut sealed = Vec::new();
    let mut writer = encryptor.wrap_output(&mut sealed).unwrap();
    std::io::Write::write_all(&mut writer, &body).unwrap();
    writer.finish().unwrap();
    let copied = lab.dir.path().join("copied");
    std::fs::create_dir_all(&copied).unwrap();
    let stem = "etcd-20261201T000000.000Z-lab-r9";
    std::fs::write(copied.join(format!("{stem}.snapshot.age")), &sealed).unwrap();
    let mut by_hand = manifest.clone();
    by_hand["plaintext_sha256"] = hex::encode(Sha256::digest(&body)).into();
    by_hand["plaintext_bytes"] = (body.len() as u64).into();
    by_hand["encrypted_bytes"] = (sealed.len() as u64).into();
    by_hand["key"] = "recipients".into();
    by_hand["revision"] = 9.into();
    std::fs::write(copied.join(format!("{stem}.json")), by_hand.to_string()).unwrap();
    let key = lab.dir.path().join("key.txt");
    std::fs::write(&key, identity.to_string().expose_secret()).unwrap();

    lose_the_control_planes(&lab).await;
    let from = copied.join(format!("{stem}.snapshot.age"));
    let args = [
        "etcd",
        "restore",
        "--from",
        from.to_str().unwrap(),
        "--identity",
        key.to_str().unwrap(),
        "-auto-approve",
    ];
    // Talos refuses it without the flag; the flag says so.
    let out = lab.run(&args).await;
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("etcd could not be recovered on talos-controlplane-01"),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("--skip-hash-check"),
        "{}",
        stderr(&out)
    );
    assert!(!node.etcd_bootstrapped());

    // With it: the control plane is configured already (its etcd waits for a
    // bootstrap), and the bootstrap recovers from the copy.
    let text = stdout(&lab.run(&["plan"]).await);
    assert!(
        text.contains("(talos-controlplane-01: etcd waits for a bootstrap)"),
        "{text}"
    );
    let mut with_flag = args.to_vec();
    with_flag.push("--skip-hash-check");
    let out = lab.run(&with_flag).await;
    assert!(out.status.success(), "{}\n{}", stdout(&out), stderr(&out));
    assert!(node.etcd_bootstrapped());
    let colour = marker_colour(&kubeconfig);
    assert_eq!(colour, "ultramarine-0451");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn force_restores_over_a_healthy_etcd_after_resetting_the_control_planes() {
    let lab = Lab::start("20.17", Duration::from_millis(100)).await;
    lab.import_secrets().await;
    lab.apply_text().await;
    let kubeconfig = lab_kubeconfig(&lab).await;
    put_marker(&lab, &kubeconfig);
    let out = lab.run(&["etcd", "snapshot"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    // The object changes after the snapshot.
    let file = lab.dir.path().join("marker.yaml");
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::write(&file, text.replace("ultramarine-0451", "vermilion")).unwrap();
    kubectl(
        &kubeconfig,
        &["apply", "--server-side", "-f", file.to_str().unwrap()],
    );

    let out = lab.run(&["etcd", "restore", "--from", "latest"]).await;
    assert_eq!(out.status.code(), Some(1));
    assert!(stderr(&out).contains("add --force"), "{}", stderr(&out));
    // Without a terminal, the resets need -auto-approve too.
    let out = lab
        .run(&["etcd", "restore", "--from", "latest", "--force"])
        .await;
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("no terminal to confirm on: add -auto-approve"),
        "{}",
        stderr(&out)
    );
    let cp: std::net::IpAddr = lab.ips[0].parse().unwrap();
    let node = lab.sim.as_ref().unwrap().node(cp).unwrap();
    assert_eq!(
        node.phase(),
        talosprov_sim::state::Phase::Secure,
        "nothing was reset"
    );

    let out = lab
        .run(&[
            "etcd",
            "restore",
            "--from",
            "latest",
            "--force",
            "-auto-approve",
        ])
        .await;
    assert!(out.status.success(), "{}\n{}", stdout(&out), stderr(&out));
    assert!(
        stderr(&out).contains("Resetting talos-controlplane-01"),
        "{}",
        stderr(&out)
    );
    assert!(stdout(&out).contains("recover it on talos-controlplane-01"));
    let colour = marker_colour(&kubeconfig);
    assert_eq!(colour, "ultramarine-0451", "the snapshot's value is back");
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}
