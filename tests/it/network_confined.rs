//! Where talosprov connects, traced (`strace -f -e trace=connect`, Debian's
//! strace, which tests/run.sh installs): an `s3://` destination without the
//! `AWS_*` keys makes no request at all, and never asks the cloud instance
//! metadata address (169.254.169.254) unless `backup.s3.instance_credentials`
//! says so; every connection of a run stays on 127.0.0.0/8 (or a Unix
//! socket).

use std::path::Path;
use std::time::Duration;

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::support::cli::{BIN, stderr, stdout};
use crate::support::fakepve::{ROOT_TOKEN_ID, ROOT_TOKEN_SECRET};
use crate::support::lab::Lab;
use crate::support::moto::Moto;

/// The addresses the traced processes connected to, one per `connect` call
/// (`127.0.0.1:9000`, `unix:/var/run/nscd/socket`, `[::1]:443`).
fn connects(trace: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(trace).expect("the trace");
    text.lines()
        .filter(|l| l.contains("connect("))
        .filter_map(|l| {
            if let Some(path) = l.split("sun_path=\"").nth(1) {
                return Some(format!("unix:{}", path.split('"').next()?));
            }
            let port = l.split("htons(").nth(1)?.split(')').next()?;
            if let Some(a) = l.split("inet_addr(\"").nth(1) {
                return Some(format!("{}:{port}", a.split('"').next()?));
            }
            let a = l
                .split("inet_pton(AF_INET6, \"")
                .nth(1)?
                .split('"')
                .next()?;
            Some(format!("[{a}]:{port}"))
        })
        .collect()
}

/// Whether `address` (as [`connects`] gives it) is on loopback or a Unix socket.
fn local(address: &str) -> bool {
    address.starts_with("unix:")
        || address.starts_with("127.")
        || address.starts_with("[::1]")
        || address.starts_with("[::ffff:127.")
}

/// Run `talosprov args -f <topology>` under strace with the lab's Proxmox
/// settings and `env` only (no other variables); its output and the
/// addresses it connected to.
async fn traced(
    lab: &Lab,
    args: &[&str],
    env: &[(&str, &str)],
) -> (std::process::Output, Vec<String>) {
    let trace = lab.dir.path().join("connect.trace");
    let mut c = tokio::process::Command::new("strace");
    c.args(["-f", "-qq", "-e", "trace=connect", "-o"])
        .arg(&trace)
        .arg(BIN)
        .args(args)
        .arg("-f")
        .arg(lab.topology())
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", lab.dir.path())
        .env("PROXMOX_VE_ENDPOINT", &lab.pve.url)
        .env(
            "PROXMOX_VE_API_TOKEN",
            format!("{ROOT_TOKEN_ID}={ROOT_TOKEN_SECRET}"),
        )
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::null());
    let out = tokio::time::timeout(Duration::from_secs(120), c.output())
        .await
        .expect("the traced run ends within 120 s")
        .expect("strace runs (tests/run.sh installs Debian's strace)");
    eprintln!(
        "$ talosprov {}\n{}{}",
        args.join(" "),
        stdout(&out),
        stderr(&out)
    );
    let addresses = connects(&trace);
    eprintln!("connected to: {addresses:?}");
    (out, addresses)
}

/// A loopback stand-in for the instance metadata service: counts the
/// connections it gets and answers each with 404.
async fn metadata_stub(ip: &str) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind((ip, 0)).await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("address"));
    let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = hits.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = socket.read(&mut buf).await;
                let _ = socket
                    .write_all(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
                    .await;
            });
        }
    });
    (url, hits)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_s3_destination_without_keys_asks_no_one_and_only_loopback_is_reached() {
    let moto = Moto::start(&["backups"]).await;
    let lab = Lab::start("22.5", Duration::from_millis(100)).await;
    lab.write_topology(|t| {
        format!("{t}\nbackup:\n  destination: s3://backups/lab\n  max_age: 1d\n")
    });
    lab.import_secrets().await;
    lab.apply_text().await;
    // The endpoint and region, but no keys: as a job that forgot them.
    let env = [
        ("AWS_ENDPOINT_URL", moto.url.as_str()),
        ("AWS_REGION", "us-east-1"),
    ];
    let before = moto.requests().await.len();
    let runs: [&[&str]; 3] = [
        &["etcd", "snapshot"],
        &["etcd", "restore", "--from", "latest", "-auto-approve"],
        &["plan"],
    ];
    for args in runs {
        let (out, addresses) = traced(&lab, args, &env).await;
        let said = format!("{}{}", stdout(&out), stderr(&out));
        assert!(
            said.contains("no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"),
            "{args:?}: {said}"
        );
        if args[0] == "plan" {
            // The plan reads Proxmox and the nodes: the trace sees them.
            assert!(
                addresses
                    .iter()
                    .any(|a| local(a) && !a.starts_with("unix:")),
                "{args:?}: {addresses:?}"
            );
        }
        let away: Vec<&String> = addresses.iter().filter(|a| !local(a)).collect();
        assert!(away.is_empty(), "{args:?} left loopback: {away:?}");
        assert!(
            !addresses.iter().any(|a| a.contains("169.254")),
            "{args:?}: {addresses:?}"
        );
    }
    assert_eq!(
        moto.requests().await.len(),
        before,
        "nothing was sent to S3 without credentials"
    );

    // Only when the topology says so is the metadata service asked (here a
    // loopback stand-in, where AWS_EC2_METADATA_SERVICE_ENDPOINT points).
    let (url, hits) = metadata_stub("127.22.5.99").await;
    lab.write_topology(|t| {
        format!(
            "{t}\nbackup:\n  destination: s3://backups/lab\n  s3:\n    instance_credentials: true\n"
        )
    });
    let with = [
        ("AWS_ENDPOINT_URL", moto.url.as_str()),
        ("AWS_REGION", "us-east-1"),
        ("AWS_EC2_METADATA_SERVICE_ENDPOINT", url.as_str()),
    ];
    let (out, addresses) = traced(&lab, &["etcd", "snapshot"], &with).await;
    assert!(!out.status.success(), "the stand-in gives no credentials");
    assert!(
        hits.load(std::sync::atomic::Ordering::SeqCst) > 0,
        "the metadata service was asked: {addresses:?}"
    );
    let away: Vec<&String> = addresses.iter().filter(|a| !local(a)).collect();
    assert!(away.is_empty(), "left loopback: {away:?}");
}
