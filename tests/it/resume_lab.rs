//! Long operations stopped by a signal on the lab (the real binary, signals
//! sent with `kill`): each says what it was doing, leaves nothing half-made
//! behind (a killed one's leftovers go with the next run), and names the
//! exact command that resumes it, which does.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::backup_lab::{lose_the_control_planes, marker_colour, put_marker};
use crate::support::cli::{stderr, stdout};
use crate::support::kubectl::lab_kubeconfig;
use crate::support::lab::Lab;
use crate::support::moto::Moto;
use crate::support::running::Running;
use crate::support::wait;

/// The files of `dir`, sorted by name (none when it does not exist).
fn files(dir: &Path) -> Vec<String> {
    let mut out: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out
}

/// Wait until `dir` holds a partial archive: the snapshot is mid-stream.
async fn streaming(dir: &Path) {
    wait::until(
        "a partial archive in the snapshot folder",
        Duration::from_secs(60),
        async || files(dir).iter().any(|f| f.ends_with(".partial")),
    )
    .await;
}

/// The command a warning gives between "run `" and "` to …".
fn named_command(err: &str, then: &str) -> Vec<String> {
    let end = err
        .find(&format!("` {then}"))
        .unwrap_or_else(|| panic!("no \"` {then}\" in:\n{err}"));
    let start = err[..end].rfind("run `").expect("run `") + "run `".len();
    err[start..end]
        .split(' ')
        .map(str::to_owned)
        .collect::<Vec<_>>()
}

/// A lab with a cluster applied and its control plane's etcd snapshots made
/// big (64 MiB) and slow (50 ms a MiB), so a snapshot can be stopped midway.
async fn slow_snapshots(net: &str) -> Lab {
    let lab = Lab::start(net, Duration::from_millis(100)).await;
    lab.import_secrets().await;
    lab.apply_text().await;
    let cp = lab
        .sim
        .as_ref()
        .expect("sim")
        .node(lab.ips[0].parse().expect("ip"))
        .expect("control plane");
    cp.pad_etcd_snapshot(64 << 20);
    cp.slow_etcd_snapshot(Duration::from_millis(50));
    lab
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_snapshot_leaves_nothing_and_a_killed_ones_leftovers_go_with_the_next() {
    let lab = slow_snapshots("22.1").await;
    let dir = lab.dir.path().join("etcd-snapshots");
    for (signal, name, code) in [("TERM", "SIGTERM", 143), ("INT", "SIGINT", 130)] {
        let mut run = Running::start(&lab, &["etcd", "snapshot"]);
        streaming(&dir).await;
        run.signal(signal);
        let status = run.exit(30).await;
        let err = run.stderr();
        assert_eq!(status.code(), Some(code), "{err}");
        let said = format!(
            "{name} received while streaming the etcd snapshot from talos-controlplane-01 to {}: \
             stopped; the partial archive was removed and nothing was saved; run `talosprov etcd \
             snapshot -f {}` to take one",
            dir.display(),
            lab.topology().display()
        );
        assert!(err.contains(&said), "{err}");
        assert_eq!(files(&dir), Vec::<String>::new(), "{signal}: nothing left");
    }

    // kill -9 cannot be caught: the partial file stays, its lock gone with
    // the process. So does an earlier version's staging file.
    let mut run = Running::start(&lab, &["etcd", "snapshot"]);
    streaming(&dir).await;
    run.signal("KILL");
    run.exit(30).await;
    let left = files(&dir);
    assert_eq!(left.len(), 1, "{left:?}");
    assert!(left[0].ends_with(".snapshot.age.partial"), "{left:?}");
    let staged = "etcd-20261201T000000.000Z-lab-r1.snapshot.age#1";
    std::fs::write(dir.join(staged), b"half an upload").expect("write");
    let other = "etcd-20261201T000000.000Z-other-r1.snapshot.age#1";
    std::fs::write(dir.join(other), b"another cluster's").expect("write");

    // The next snapshot removes this cluster's leftovers, and only them.
    let cp = lab.sim.as_ref().unwrap().node(lab.ips[0].parse().unwrap());
    cp.unwrap().slow_etcd_snapshot(Duration::ZERO);
    let out = lab.run(&["etcd", "snapshot"]).await;
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    for gone in [&left[0], staged] {
        assert!(
            text.contains(&format!(
                "Deleted {gone} (left by an interrupted snapshot)."
            )),
            "{text}"
        );
    }
    let now = files(&dir);
    assert_eq!(now.len(), 3, "{now:?}");
    assert!(now.iter().any(|f| f.ends_with(".snapshot.age")), "{now:?}");
    assert!(now.iter().any(|f| f.ends_with(".json")), "{now:?}");
    assert!(now.iter().any(|f| f == other), "{now:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_stopped_mid_upload_to_s3_aborts_its_multipart_upload() {
    let moto = Moto::start(&["backups"]).await;
    let mut lab = slow_snapshots("22.2").await;
    lab.env.extend(moto.env());
    let mut run = Running::start(&lab, &["etcd", "snapshot", "--to", "s3://backups/lab"]);
    // Parts are uploading once the first 5 MiB are sealed.
    wait::until(
        "a multipart upload in progress",
        Duration::from_secs(60),
        async || !moto.uploads("backups").await.is_empty(),
    )
    .await;
    run.signal("TERM");
    let status = run.exit(60).await;
    let err = run.stderr();
    assert_eq!(status.code(), Some(143), "{err}");
    assert!(
        err.contains("SIGTERM received while streaming the etcd snapshot from talos-controlplane-01 to s3://backups/lab"),
        "{err}"
    );
    assert!(
        err.contains("run `talosprov etcd snapshot -f")
            && err.contains("--to s3://backups/lab` to take one"),
        "{err}"
    );
    assert_eq!(moto.uploads("backups").await, Vec::<String>::new());
    assert!(moto.objects("backups").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restore_stopped_while_the_control_plane_installs_is_finished_by_the_command_it_names() {
    // The install reboot takes 3 s: time to stop the restore in it.
    let lab = Lab::start("22.3", Duration::from_secs(3)).await;
    lab.import_secrets().await;
    lab.apply_text().await;
    let kubeconfig = lab_kubeconfig(&lab).await;
    // Stopped while the control plane installs (its config applied in
    // maintenance mode), then while the bootstrap waits for it.
    for (round, point) in [
        "config/talos-controlplane-01: waiting for secure mode",
        "bootstrap: waiting for talos-controlplane-01 in secure mode",
    ]
    .iter()
    .enumerate()
    {
        put_marker(&lab, &kubeconfig);
        let out = lab.run(&["etcd", "snapshot"]).await;
        assert!(out.status.success(), "{}", stderr(&out));
        lose_the_control_planes(&lab).await;
        stop_and_resume_a_restore(&lab, &kubeconfig, point).await;
        eprintln!("round {round} ({point}) resumed");
    }
}

/// Start `etcd restore --from latest`, stop it with SIGTERM once stderr shows
/// `point`, check what it says and records, then run the command it names:
/// the restore finishes and the marker is back.
async fn stop_and_resume_a_restore(lab: &Lab, kubeconfig: &Path, point: &str) {
    let mut run = Running::start(
        lab,
        &["etcd", "restore", "--from", "latest", "-auto-approve"],
    );
    run.wait_for(point, 120).await;
    run.signal("TERM");
    let status = run.exit(90).await;
    let err = run.stderr();
    assert_eq!(status.code(), Some(143), "{point}: {err}");
    let again = named_command(&err, "to continue");
    let archive = PathBuf::from(&again[again.iter().position(|w| w == "--from").unwrap() + 1]);
    let topology = lab.topology().display().to_string();
    assert_eq!(
        again[..5],
        ["talosprov", "etcd", "restore", "-f", topology.as_str()],
        "{err}"
    );
    assert_eq!(
        archive.parent(),
        Some(lab.dir.path().join("etcd-snapshots").as_path()),
        "the exact snapshot, not `latest`: {err}"
    );
    let recorded = lab.state().etcd_restore.expect("the restore is recorded");
    assert_eq!(PathBuf::from(&recorded.from), archive);

    // Meanwhile, the cluster is not converged, and the plan says how on.
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    let text = stdout(&out);
    assert!(
        text.contains("Unfinished: bootstrap: an etcd restore from"),
        "{text}"
    );
    assert!(
        text.contains(&format!("--from {}", archive.display())),
        "{text}"
    );

    // At once, the named command finishes the restore: the objects are back.
    let mut args: Vec<&str> = again[1..].iter().map(String::as_str).collect();
    args.push("-auto-approve");
    let out = Lab::finished(lab.bare_command(&args), &args).await;
    assert!(out.status.success(), "{}\n{}", stdout(&out), stderr(&out));
    assert!(
        stderr(&out).contains("is unfinished: this run continues it"),
        "{}",
        stderr(&out)
    );
    let colour = marker_colour(kubeconfig);
    assert_eq!(colour, "ultramarine-0451");
    assert!(lab.state().etcd_restore.is_none());
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotation_stopped_between_its_stages_names_itself_and_is_never_a_clean_plan() {
    let lab = Lab::start("22.4", Duration::from_millis(100)).await;
    lab.import_secrets().await;
    lab.apply_text().await;
    let mut run = Running::start(&lab, &["rotate-ca", "--kubernetes", "-auto-approve"]);
    run.wait_for("Stage 2 of 3", 120).await;
    run.signal("TERM");
    let status = run.exit(90).await;
    let err = run.stderr();
    assert_eq!(status.code(), Some(143), "{err}");
    let command = format!(
        "run `talosprov rotate-ca -f {} --kubernetes`",
        lab.topology().display()
    );
    assert!(err.contains(&command), "{err}");
    assert!(!err.contains("talosprov apply"), "{err}");
    assert!(lab.state().ca_rotation.is_some());

    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("Unfinished: a rotation of the Kubernetes CA is in progress"),
        "{}",
        stdout(&out)
    );

    let out = lab
        .run(&["rotate-ca", "--kubernetes", "-auto-approve"])
        .await;
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(lab.state().ca_rotation.is_none());
    let out = lab.run(&["plan", "-detailed-exitcode"]).await;
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
}
