//! The node grower of the scaling benchmark (testtools::grow, scripts/bench-node.sh): a real
//! node of fixtures/nodes grown to 3× its containers plans every clone exactly as its original
//! (same action, hashes, state, restart verdicts; only the ids, pod uid and pod name differ), so
//! the summary is 3× the original's; shrunk to a subset, every kept record plans as before.

mod under_test;

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use testtools::grow::{grow_node, GrowReport};
use testtools::node_tree::fixture;
use under_test::bin;

fn plan(node: &Path) -> Value {
    let (root, extra): (&str, &[&str]) = if node.join("var/lib/docker").exists() {
        ("var/lib/docker", &["--live-restore", "true"])
    } else {
        ("var/lib/containerd", &[])
    };
    let none = node.join("no-such-runtime");
    let out = Command::new(bin())
        .arg("plan")
        .arg("--pods")
        .arg(node.join("pods.json"))
        .arg("--to")
        .arg("1.31")
        .arg("--root")
        .arg(node.join(root))
        .args(extra)
        .arg("--runtime-socket")
        .arg(none.join("sock"))
        .arg("--runtime-pidfile")
        .arg(none.join("pid"))
        .args(["-o", "json"])
        .output()
        .unwrap();
    let code = out.status.code();
    assert!(
        code == Some(0) || code == Some(4),
        "plan on {} exited {code:?}: {}",
        node.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn records(plan: &Value) -> BTreeMap<String, Value> {
    plan["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["id"].as_str().unwrap().to_string(), r.clone()))
        .collect()
}

fn count(plan: &Value, action: &str) -> u64 {
    plan["summary"]["actions"][action].as_u64().unwrap_or(0)
}

/// A record with what a clone changes (id, pod name, pod uid) left out.
fn sans_identity(r: &Value) -> Value {
    let mut r = r.clone();
    for k in ["id", "pod", "pod_uid"] {
        r.as_object_mut().unwrap().remove(k);
    }
    r
}

fn grown(name: &str, factor: usize) -> (tempfile::TempDir, PathBuf, GrowReport, Value) {
    let src = fixture(name);
    let original = plan(&src);
    let n = original["summary"]["containers"].as_u64().unwrap() as usize;
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join(name);
    let report = grow_node(&src, &out, n * factor, false).unwrap();
    assert_eq!(report.containers_before, n);
    assert_eq!(report.containers, n * factor);
    (tmp, out, report, original)
}

fn grown_node_plans_every_clone_as_its_original(name: &str) {
    let (_tmp, out, report, original) = grown(name, 3);
    if name.starts_with("containerd") {
        storepatch::containerd::bolt::testing::assert_bbolt_check(
            &out.join("var/lib/containerd")
                .join(storepatch::containerd::META_DB),
        );
    }
    let grown = plan(&out);
    let (orig, new) = (records(&original), records(&grown));
    for key in [
        "containers",
        "sandboxes",
        "would_restart_without_rewrite",
        "would_restart_after_rewrite",
    ] {
        assert_eq!(
            grown["summary"][key].as_u64().unwrap(),
            3 * original["summary"][key].as_u64().unwrap(),
            "{name} grown 3×: summary {key} must be 3× the original's (every pod cloned twice, each clone planned like its original)"
        );
    }
    let actions = original["summary"]["actions"].as_object().unwrap();
    assert!(
        count(&original, "rewrite") > 0,
        "{name}: the original plans rewrites"
    );
    for (action, n) in actions {
        assert_eq!(
            count(&grown, action),
            3 * n.as_u64().unwrap(),
            "{name} grown 3×: the plan must have 3× the original's {action:?} records (every clone planned like its original)"
        );
    }
    assert_eq!(new.len(), 3 * orig.len(), "{name}: 3× the store records");
    // every clone's record is its original's, but for the identity the clone changed
    assert_eq!(report.clones.len() % 2, 0);
    let mut compared = 0;
    for c in &report.clones {
        for (old_id, new_id) in &c.ids {
            let (o, g) = (&orig[old_id], &new[new_id]);
            assert_eq!(
                sans_identity(g),
                sans_identity(o),
                "{name}: clone {new_id} of {old_id} must plan exactly as its original"
            );
            assert_eq!(
                g["pod_uid"].as_str(),
                Some(c.uid.as_str()),
                "{name}: clone {new_id} is in the clone's pod uid"
            );
            assert_eq!(
                g["pod"].as_str(),
                Some(c.name.as_str()),
                "{name}: clone {new_id} carries the clone's pod name"
            );
            assert_ne!(
                g["pod_uid"], o["pod_uid"],
                "{name}: a clone has a pod uid of its own"
            );
            compared += 1;
        }
    }
    assert_eq!(
        compared,
        2 * orig.len(),
        "{name}: every original record was cloned twice"
    );
    // the originals stay as they were
    for (id, o) in &orig {
        assert_eq!(
            &new[id], o,
            "{name}: original record {id} plans as before growing"
        );
    }
}

#[test]
fn grown_docker_node_plans_every_clone_as_its_original() {
    grown_node_plans_every_clone_as_its_original("docker-20.10");
}

#[test]
fn grown_containerd_node_plans_every_clone_as_its_original() {
    grown_node_plans_every_clone_as_its_original("containerd-1.7");
}

#[test]
fn shrunk_nodes_keep_whole_pods_that_plan_as_before() {
    for name in ["docker-20.10", "containerd-1.7"] {
        let src = fixture(name);
        let original = plan(&src);
        let orig = records(&original);
        let n = original["summary"]["containers"].as_u64().unwrap() as usize / 2;
        let tmp = tempfile::tempdir().unwrap();
        let out = tmp.path().join(name);
        let report = grow_node(&src, &out, n, false).unwrap();
        assert!(report.dropped_pods > 0 && report.clones.is_empty());
        let shrunk = plan(&out);
        assert_eq!(
            shrunk["summary"]["containers"].as_u64(),
            Some(n as u64),
            "{name} shrunk: exactly the containers asked for"
        );
        for (id, r) in records(&shrunk) {
            assert_eq!(
                r, orig[&id],
                "{name} shrunk: kept record {id} must plan as in the original node"
            );
        }
    }
}

#[test]
fn grow_to_the_nodes_own_count_copies_it_byte_for_byte() {
    let src = fixture("containerd-1.7");
    let original = plan(&src);
    let n = original["summary"]["containers"].as_u64().unwrap() as usize;
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("n");
    grow_node(&src, &out, n, false).unwrap();
    for p in [
        "pods.json",
        "var/lib/containerd/io.containerd.metadata.v1.bolt/meta.db",
    ] {
        assert_eq!(
            std::fs::read(out.join(p)).unwrap(),
            std::fs::read(src.join(p)).unwrap(),
            "N = the node's own count: {p} is the real node's, byte for byte"
        );
    }
}

#[test]
fn grown_meta_db_of_the_containerd_bench_holds_every_pod_three_times() {
    use storepatch::containerd::{ContainerdOptions, ContainerdStore, META_DB};
    use storepatch::{RecordKind, RuntimeStore};
    let kinds = |root: &Path| {
        let store = ContainerdStore::with_options(
            root,
            ContainerdOptions {
                socket: Some(root.join("none.sock")),
            },
        )
        .unwrap();
        let scan = store.scan().unwrap();
        let n = |k: RecordKind| scan.records.iter().filter(|r| r.kind == k).count();
        (
            n(RecordKind::Container),
            n(RecordKind::Sandbox),
            scan.records.len(),
        )
    };
    let src = fixture("containerd-1.7").join("var/lib/containerd");
    let before = kinds(&src);
    assert!(before.0 > 0 && before.1 > 0);
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("containerd");
    let db = root.join(META_DB);
    std::fs::create_dir_all(db.parent().unwrap()).unwrap();
    let grown = testtools::grow::grow_meta_db(std::fs::read(src.join(META_DB)).unwrap(), 2, false);
    std::fs::write(&db, grown).unwrap();
    storepatch::containerd::bolt::testing::assert_bbolt_check(&db);
    assert_eq!(
        kinds(&root),
        (3 * before.0, 3 * before.1, 3 * before.2),
        "meta.db grown with 2 copies: every container and sandbox three times"
    );
}
