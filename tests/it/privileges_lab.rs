//! The token's privileges, checked by `plan` before anything is changed,
//! against fakepve's ACLs (`/access/permissions?path=`, with inheritance as PVE
//! computes it): a privilege the plan needs and the token lacks stops the plan,
//! naming the privilege, its path and the `pveum` line that grants it; with the
//! README's role, and nothing more, apply makes the whole lab, fakepve
//! checking every call's permission on its own.

use crate::support::cli::stdout;
use crate::support::fakepve::FakeOptions;
use crate::support::lab::Lab;

const TOKEN: &str = "prov@pve!ci";
const SECRET: &str = "5b0a3c1e-2f4d-4e6a-8b7c-9d0e1f2a3b4c";

/// The README's role for PVE 8 and PVE 9, as its `pveum role add` line lists it.
fn readme_role() -> Vec<String> {
    let readme = std::fs::read_to_string(crate::support::fixtures::repo().join("README.md"))
        .expect("README");
    let line = readme
        .lines()
        .find(|l| {
            l.trim_start()
                .starts_with("pveum role add Talosprov --privs")
        })
        .expect("the README's `pveum role add Talosprov --privs ...` line");
    let privs = line.split("--privs").nth(1).expect("privs");
    privs
        .trim()
        .trim_matches(|c| c == '"' || c == '\'' || c == '\\')
        .split([',', ' '])
        .filter(|p| !p.is_empty())
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_readme_role_is_exactly_what_the_check_asks_for() {
    let role = readme_role();
    let want: Vec<String> = talosprov_proxmox::access::role_privileges()
        .iter()
        .map(|p| p.to_string())
        .collect();
    let mut sorted = role.clone();
    sorted.sort();
    assert_eq!(sorted, want, "README role vs the check");
    for p in &role {
        for major in [8, 9] {
            assert!(
                talosprov_proxmox::access::privilege_exists(p, major),
                "{p} does not exist on PVE {major}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_privilege_stops_plan_and_validate_online_and_the_role_is_enough_for_apply() {
    let role = readme_role();
    let without: Vec<String> = role
        .iter()
        .filter(|p| p.as_str() != "Datastore.AllocateSpace")
        .cloned()
        .collect();
    let mut lab = Lab::start_with_fake(
        "20.4",
        FakeOptions {
            tokens: vec![(TOKEN.into(), SECRET.into())],
            grants: vec![(TOKEN.into(), "/".into(), without)],
            ..FakeOptions::default()
        },
    )
    .await;
    lab.env
        .push(("PROXMOX_VE_API_TOKEN".into(), format!("{TOKEN}={SECRET}")));
    lab.import_secrets().await;
    let before = lab.pve.request_total().await;
    let out = lab.run(&["plan"]).await;
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        err.contains(
            "Datastore.AllocateSpace on /storage/local-lvm (to allocate VM disks on storage \
             local-lvm)"
        ),
        "{err}"
    );
    assert!(
        err.contains(
            "grant it: pveum acl modify /storage/local-lvm --users prov@pve --tokens \
             'prov@pve!ci' --roles Talosprov"
        ),
        "{err}"
    );
    assert!(err.contains("lack 1 privilege(s)"), "only that one: {err}");
    let writes: Vec<_> = lab
        .pve
        .requests()
        .await
        .into_iter()
        .skip(before)
        .filter(|(m, _, _)| m != "GET")
        .collect();
    assert!(writes.is_empty(), "nothing changed: {writes:?}");
    // validate --online makes the same plan and stops the same way, unlocked.
    let out = lab.run(&["validate", "--online"]).await;
    let err = String::from_utf8_lossy(&out.stderr).to_string();
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        err.contains("Datastore.AllocateSpace on /storage/local-lvm")
            && err.contains("pveum acl modify"),
        "{err}"
    );
    assert!(
        stdout(&out).starts_with("cluster lab:"),
        "the offline summary first: {}",
        stdout(&out)
    );
    // apply plans first: it stops the same way.
    let out = lab.run(&["apply", "-auto-approve"]).await;
    assert!(!out.status.success());
    assert!(lab.vms().await.is_empty(), "no VM made");

    // With the whole role, apply makes the lab; fakepve checks each call itself.
    lab.pve
        .cmd(
            serde_json::json!({"cmd": "grant", "user": TOKEN, "path": "/",
                                "privs": ["Datastore.AllocateSpace"]}),
        )
        .await;
    let before = lab.pve.request_total().await;
    let out = lab.run(&["validate", "--online"]).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout(&out).contains(
            "Online: Proxmox VE 9.0.10; the plan can be made (12 to add, 0 to change, 0 to \
             destroy; 3 configs to apply) and the API token holds every privilege its Proxmox \
             changes need."
        ),
        "{}",
        stdout(&out)
    );
    let writes = lab
        .pve
        .requests()
        .await
        .into_iter()
        .skip(before)
        .filter(|(m, _, _)| m != "GET")
        .count();
    assert_eq!(writes, 0, "validate --online changes nothing");
    let out = lab.run(&["apply", "-auto-approve"]).await;
    assert!(
        out.status.success(),
        "apply with the role: {}",
        stdout(&out)
    );
    assert_eq!(lab.vms().await.len(), 3);
    let out = lab.run(&["validate", "--online"]).await;
    assert!(
        stdout(&out).contains("(0 to add, 0 to change, 0 to destroy; 0 configs to apply) and it changes nothing in Proxmox."),
        "{}",
        stdout(&out)
    );
}
