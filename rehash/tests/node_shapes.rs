//! Plan truth on node shapes the bundled nodes do not have as such, built in each test from the
//! real files the way a user's node would look: downgrades (a patch forward and back again).

mod common;

use common::{node, snapshot, Node};
use rehash::{Action, BackupOptions, From, Plan, Version};
use std::collections::BTreeMap;

/// Every container's stored (hash, hashWithoutResources), by id: what "value-exact" compares.
fn values(n: &Node) -> BTreeMap<String, (Option<String>, Option<String>)> {
    let store = n.location.open().unwrap();
    store
        .scan()
        .unwrap()
        .records
        .into_iter()
        .map(|r| (r.id, (r.hash, r.hash_without_resources)))
        .collect()
}

fn patch_to(n: &Node, pods: &[u8], from: From, to: &str, backup: &str) -> Plan {
    let store = n.location.open().unwrap();
    let to: Version = to.parse().unwrap();
    let plan = Plan::build(pods, store.as_ref(), from, to).expect("plan");
    rehash::patch(
        &plan,
        store.as_ref(),
        &BackupOptions {
            dir: n.tmp.path().join(backup),
        },
        &rehash::Silent,
    )
    .expect("patch");
    plan
}

/// Up to `to`, then back down to the node's own kubelet with `--from auto`: the downgrade is
/// proven from the upgraded hashes and gives every original value back.
fn round_trip(name: &str, to: &str) -> (Node, BTreeMap<std::path::PathBuf, Vec<u8>>) {
    let n = node(name);
    let bytes_before = snapshot(&n.dir);
    let pods = std::fs::read(n.dir.join("pods.json")).unwrap();
    let values_before = values(&n);
    let up = patch_to(&n, &pods, From::Auto, to, "backup-up");
    let original = up.from.expect("auto found the node's kubelet");
    assert!(
        !up.rewrites().is_empty(),
        "{name}: the upgrade to {to} rewrites"
    );

    let down = patch_to(&n, &pods, From::Auto, &original.to_string(), "backup-down");
    assert!(
        down.from.expect("auto").to_string() != original.to_string(),
        "{name}: after the upgrade the node proves a newer kubelet than {original}"
    );
    assert_eq!(
        down.rewrites().len(),
        up.rewrites().len(),
        "{name}: the downgrade rewrites exactly the containers the upgrade rewrote"
    );
    for r in &down.records {
        if r.action == Action::Rewrite {
            assert!(
                r.reason.contains("proven"),
                "{name} {}: a downgrade rewrite is proven like an upgrade's",
                r.id
            );
        }
    }
    assert_eq!(
        values(&n),
        values_before,
        "{name}: {original} -> {to} -> {original} gives every stored value back"
    );
    (n, bytes_before)
}

#[test]
fn docker_downgrade_round_trip_is_byte_exact() {
    let (n, before) = round_trip("docker-20.10", "1.31");
    let after = snapshot(&n.dir);
    assert_eq!(before.len(), after.len(), "docker: the same files");
    for (p, b) in &before {
        assert!(
            after.get(p) == Some(b),
            "docker: 1.14 -> 1.31 -> 1.14 gives back {} byte for byte",
            p.display()
        );
    }
}

#[test]
fn containerd_downgrade_round_trip_is_value_exact() {
    round_trip("containerd-1.7", "1.31");
    round_trip("containerd-1.6", "1.31");
}

#[test]
fn crio_downgrade_round_trip_is_value_exact() {
    round_trip("crio-1.30", "1.31");
}

#[test]
fn an_explicit_from_newer_than_to_is_a_downgrade() {
    let n = node("containerd-1.7");
    let pods = std::fs::read(n.dir.join("pods.json")).unwrap();
    patch_to(&n, &pods, From::Auto, "1.31", "backup-up");
    let store = n.location.open().unwrap();
    let plan = Plan::build(
        &pods,
        store.as_ref(),
        From::Version("1.31".parse().unwrap()),
        "1.30".parse().unwrap(),
    )
    .expect("--from 1.31 --to 1.30 plans");
    assert!(
        !plan.rewrites().is_empty(),
        "a downgrade plan rewrites the proven containers"
    );
    // The 1.30 target writes hashWithoutResources where the record carries it.
    assert!(
        plan.rewrites()
            .iter()
            .any(|r| r.hash_without_resources.is_some()),
        "the downgrade to 1.30 restores hashWithoutResources too"
    );
}
