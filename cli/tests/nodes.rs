//! The operator's workflow on the real nodes of fixtures/nodes (and the 2,000-container nodes of
//! fixtures/nodes-large): for every target in each node's expected.json, `plan --from auto` gives
//! every record exactly the expected target hash and action; `patch` then `verify` succeed, a
//! second `patch` changes nothing, and `rollback` restores every byte.

mod under_test;

use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use testtools::fixtures_dir;
use under_test::bin;

/// A scenario copied to a temp dir (modes kept), so patches never touch the fixtures.
struct Node {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    name: String,
}

fn copy_node(src: &Path, name: &str) -> Node {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join(name);
    let st = Command::new("cp")
        .arg("-a")
        .arg(src)
        .arg(&dir)
        .status()
        .unwrap();
    assert!(st.success(), "cp -a {}", src.display());
    Node {
        _tmp: tmp,
        dir,
        name: name.to_string(),
    }
}

fn unpack_large(archive: &str, name: &str) -> Node {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join(name);
    std::fs::create_dir(&dir).unwrap();
    let st = Command::new("tar")
        .arg("-xzf")
        .arg(fixtures_dir().join("nodes-large").join(archive))
        .arg("-C")
        .arg(&dir)
        .status()
        .unwrap();
    assert!(st.success(), "tar -xzf {archive}");
    Node {
        _tmp: tmp,
        dir,
        name: name.to_string(),
    }
}

impl Node {
    /// A containerd node's meta.db passes Go bbolt's own check and reads, through bbolt, as
    /// through our reader (a no-op for the other runtimes).
    fn bbolt_check(&self) {
        if self.name.starts_with("containerd") {
            storepatch::containerd::bolt::testing::assert_bbolt_check(
                &self
                    .dir
                    .join("var/lib/containerd")
                    .join(storepatch::containerd::META_DB),
            );
        }
    }

    fn store_flags(&self) -> Vec<String> {
        let d = &self.dir;
        let none = d.join("no-such-runtime");
        let mut f = vec![
            "--runtime-socket".to_string(),
            none.join("sock").display().to_string(),
            "--runtime-pidfile".into(),
            none.join("pid").display().to_string(),
        ];
        if self.name.starts_with("docker") {
            f.extend(["--runtime".into(), "docker".into(), "--root".into()]);
            f.push(d.join("var/lib/docker").display().to_string());
            f.extend(["--live-restore".into(), "true".into()]);
        } else if self.name.starts_with("containerd") {
            f.extend(["--runtime".into(), "containerd".into(), "--root".into()]);
            f.push(d.join("var/lib/containerd").display().to_string());
        } else {
            f.extend(["--runtime".into(), "crio".into(), "--root".into()]);
            f.push(d.join("var/lib/containers/storage").display().to_string());
            f.push("--runroot".into());
            f.push(d.join("run/containers/storage").display().to_string());
        }
        f
    }

    fn run(&self, cmd: &str, extra: &[&str]) -> (i32, String, String) {
        let out = Command::new(bin())
            .arg(cmd)
            .arg("--pods")
            .arg(self.dir.join("pods.json"))
            .args(self.store_flags())
            .args(extra)
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    fn expected(&self) -> Value {
        serde_json::from_slice(&std::fs::read(self.dir.join("expected.json")).unwrap()).unwrap()
    }

    /// sha256 of every file under var/ and run/, by path.
    fn tree(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for top in ["var", "run"] {
            let root = self.dir.join(top);
            if !root.exists() {
                continue;
            }
            for e in walkdir::WalkDir::new(&root) {
                let e = e.unwrap();
                if e.file_type().is_file() {
                    let bytes = std::fs::read(e.path()).unwrap();
                    out.insert(
                        e.path()
                            .strip_prefix(&self.dir)
                            .unwrap()
                            .display()
                            .to_string(),
                        storepatch::backup::sha256_hex(&bytes),
                    );
                }
            }
        }
        out
    }
}

/// What expected.json says the plan must do with one record for target `v`.
fn expected_action(row: &Value, v: &str) -> (&'static str, Option<String>) {
    if row["kind"] == "sandbox" {
        return ("sandbox", None);
    }
    if row["orphan"] == true {
        return ("orphan", None);
    }
    let target = row["targets"][v]["hash"].as_str().map(str::to_string);
    if row["stored_hash_verifies"] == false {
        return ("unproven", target);
    }
    if row["stored_hash"].as_str() == target.as_deref() {
        ("unchanged", target)
    } else {
        ("rewrite", target)
    }
}

fn check_plan(node: &Node, v: &str) -> Value {
    let (code, out, err) = node.run("plan", &["--to", v, "-o", "json"]);
    assert!(
        code == 0 || code == 4,
        "{} plan --to {v}: exit {code}: {err}",
        node.name
    );
    let plan: Value = serde_json::from_str(&out).unwrap();
    let expected = node.expected();
    assert!(
        plan["from_candidates"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c == &expected["from_kubelet"]),
        "{} --to {v}: --from auto found {} but the node runs kubelet {}",
        node.name,
        plan["from_candidates"],
        expected["from_kubelet"]
    );
    let records: HashMap<&str, &Value> = plan["records"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["id"].as_str().unwrap(), r))
        .collect();
    let rows = expected["containers"].as_array().unwrap();
    assert_eq!(
        records.len(),
        rows.len(),
        "{}: one plan record per store record",
        node.name
    );
    let mut wrong = Vec::new();
    for row in rows {
        let id = row["id"].as_str().unwrap();
        let Some(r) = records.get(id) else {
            wrong.push(format!("{id}: not in the plan"));
            continue;
        };
        let (action, target) = expected_action(row, v);
        if r["action"] != action {
            wrong.push(format!(
                "{id} ({}): action {} (want {action}): {}",
                row["container_name"], r["action"], r["reason"]
            ));
        }
        if let Some(t) = &target {
            if r["target_hash"].as_str() != Some(t) {
                wrong.push(format!("{id}: target {} (want {t})", r["target_hash"]));
            }
        }
        if let (Some(want), Some(_)) = (
            row["targets"][v]["hash_without_resources"].as_str(),
            row["stored_hash_without_resources"].as_str(),
        ) {
            if r["target_hash_without_resources"].as_str() != Some(want) {
                wrong.push(format!(
                    "{id}: target hashWithoutResources {} (want {want})",
                    r["target_hash_without_resources"]
                ));
            }
        }
        if let Some(restart) = row["targets"][v]["kubelet_would_restart"].as_bool() {
            if r["would_restart_without_rewrite"].as_bool() != Some(restart) {
                wrong.push(format!(
                    "{id} ({}, {}): would_restart_without_rewrite {} (want {restart})",
                    row["container_name"], row["state"], r["would_restart_without_rewrite"]
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} --to {v}: {} record(s) differ from expected.json:\n{}",
        node.name,
        wrong.len(),
        wrong
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    if let Some(s) = expected["summary_per_target"][v].as_object() {
        assert_eq!(
            plan["summary"]["would_restart_without_rewrite"], s["kubelet_would_restart"],
            "{} --to {v}: restart count of the summary",
            node.name
        );
    }
    plan
}

/// The report of a patch that wrote names the steps of the store's rewrite, in order, each
/// with a wall time that fits inside `backup_and_apply_ms`.
fn check_apply_phases(node: &Node, report: &Path) {
    let rep: Value = serde_json::from_slice(&std::fs::read(report).unwrap()).unwrap();
    let names: Vec<&str> = rep["timings"]["apply_phases"]
        .as_array()
        .map(|a| a.iter().filter_map(|p| p["phase"].as_str()).collect())
        .unwrap_or_default();
    let expected: &[&str] = match rep["runtime"].as_str() {
        Some("containerd") => &[
            "read",
            "edit",
            "page_plan",
            "check",
            "backup",
            "commit",
            "read_back",
        ],
        _ => &["edit_and_stage", "backup_commit", "rename", "read_back"],
    };
    assert_eq!(
        names, expected,
        "{}: the patch report names the steps of the store's rewrite",
        node.name
    );
    let sum: f64 = rep["timings"]["apply_phases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let ms = p["ms"].as_f64().unwrap();
            assert!(
                ms >= 0.0,
                "{}: a step's time is not negative: {p}",
                node.name
            );
            ms
        })
        .sum();
    let whole = rep["timings"]["backup_and_apply_ms"].as_f64().unwrap();
    assert!(
        sum <= whole + 0.01,
        "{}: the steps ({sum} ms) fit inside backup_and_apply_ms ({whole} ms)",
        node.name
    );
}

/// patch → verify → patch again (no change) → rollback (every byte back).
fn patch_cycle(node: &Node, v: &str) {
    let before = node.tree();
    let backup = node.dir.join("backup");
    let report = node.dir.join("report.json");
    let (code, _, err) = node.run(
        "patch",
        &[
            "--to",
            v,
            "--backup-dir",
            backup.to_str().unwrap(),
            "--report",
            report.to_str().unwrap(),
            "-o",
            "json",
        ],
    );
    assert!(
        code == 0 || code == 4,
        "{} patch --to {v}: exit {code}: {err}",
        node.name
    );
    let patched = node.tree();
    node.bbolt_check();
    check_apply_phases(node, &report);
    assert_ne!(
        before, patched,
        "{} patch --to {v} changed the store",
        node.name
    );
    let (code, _, err) = node.run("verify", &["--to", v]);
    assert_eq!(code, 0, "{} verify --to {v} after patch: {err}", node.name);
    let (code, out, err) = node.run("plan", &["--to", v, "-o", "json"]);
    assert!(code == 0 || code == 4, "{err}");
    let plan: Value = serde_json::from_str(&out).unwrap();
    assert!(
        plan["records"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["action"] != "rewrite"),
        "{} after patch nothing is left to rewrite",
        node.name
    );
    let backup2 = node.dir.join("backup2");
    let (code, _, err) = node.run(
        "patch",
        &["--to", v, "--backup-dir", backup2.to_str().unwrap()],
    );
    assert!(
        code == 0 || code == 4,
        "{} second patch: exit {code}: {err}",
        node.name
    );
    assert_eq!(
        node.tree(),
        patched,
        "{} a second patch changes nothing",
        node.name
    );
    assert!(
        err.contains("nothing to rewrite"),
        "{}: second patch says so: {err}",
        node.name
    );

    rollback_restores(node, &backup, &before);
}

/// `rollback --backup-dir backup` succeeds and gives the store back every byte of `before`.
fn rollback_restores(node: &Node, backup: &Path, before: &BTreeMap<String, String>) {
    let out = Command::new(bin())
        .arg("rollback")
        .arg("--backup-dir")
        .arg(backup)
        .args(node.store_flags())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{} rollback: {}",
        node.name,
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        &node.tree(),
        before,
        "{} rollback restores every byte",
        node.name
    );
}

fn small(name: &str) -> Node {
    copy_node(&fixtures_dir().join("nodes").join(name), name)
}

fn targets(node: &Node) -> Vec<String> {
    node.expected()["targets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap().to_string())
        .collect()
}

fn every_target_then_patch(node: Node) {
    let ts = targets(&node);
    for v in &ts {
        check_plan(&node, v);
    }
    patch_cycle(&node, ts.last().unwrap());
}

#[test]
fn docker_20_10_node_from_1_14() {
    every_target_then_patch(small("docker-20.10"));
}

#[test]
fn containerd_1_6_node_from_1_24() {
    every_target_then_patch(small("containerd-1.6"));
}

#[test]
fn containerd_1_7_node_from_1_30() {
    every_target_then_patch(small("containerd-1.7"));
}

#[test]
fn crio_1_30_node_from_1_30() {
    every_target_then_patch(small("crio-1.30"));
}

/// A node the real kubelet 1.30 made on containerd 2.4.2 (built from the module), judged by the
/// real kubelet 1.31 (scripts/make-node-fixture.sh): its stores carry containerd 2.4's new
/// container metadata (ImageDigest, ImageName), which a patch keeps byte for byte.
#[test]
fn containerd_2_4_node_from_1_30_made_by_the_real_kubelet() {
    every_target_then_patch(small("containerd-2.4"));
}

/// As containerd 2.4's, on containerd 2.3.7, the first LTS.
#[test]
fn containerd_2_3_node_from_1_30_made_by_the_real_kubelet() {
    every_target_then_patch(small("containerd-2.3"));
}

/// A node the real kubelet 1.30 made on CRI-O 1.36.3 (built from the module), judged by the
/// real kubelet 1.31 (scripts/make-node-fixture.sh crio:1.36.3).
#[test]
fn crio_1_36_node_from_1_30_made_by_the_real_kubelet() {
    every_target_then_patch(small("crio-1.36"));
}

/// The real kubelet's pods of the containerd 2.4 node on Docker 28.5.2 (built from the module),
/// in cri-dockerd's shape (scripts/make-docker-node-fixture.sh): the store Docker 28.5 writes.
#[test]
fn docker_28_5_node_from_1_30() {
    every_target_then_patch(small("docker-28.5"));
}

/// As Docker 28.5's, on Docker 29's engine (moby/moby/v2 v2.0.0-beta.24, the 29.8 line).
#[test]
fn docker_29_engine_node_from_1_30() {
    every_target_then_patch(small("docker-29.8-beta.24"));
}

/// As containerd 2.4's, on containerd 2.2.9.
#[test]
fn containerd_2_2_node_from_1_30_made_by_the_real_kubelet() {
    every_target_then_patch(small("containerd-2.2"));
}

#[test]
fn large_containerd_1_7_node() {
    every_target_then_patch(unpack_large(
        "containerd-1.7-large.tar.gz",
        "containerd-1.7-large",
    ));
}

#[test]
fn large_docker_20_10_node() {
    every_target_then_patch(unpack_large(
        "docker-20.10-large.tar.gz",
        "docker-20.10-large",
    ));
}

/// After the runtime has written to the store since the patch (containerd commits to meta.db
/// at every start), a byte rollback is refused, and `rollback --values` writes the previous
/// hashes back while keeping the runtime's own change.
#[test]
fn value_rollback_after_the_store_changed_since_the_patch() {
    use storepatch::RuntimeStore;
    let node = small("containerd-1.7");
    let backup = node.dir.join("backup");
    let (code, out, err) = node.run("plan", &["--to", "1.31", "-o", "json"]);
    assert!(code == 0 || code == 4, "{err}");
    let before: Value = serde_json::from_str(&out).unwrap();
    let (code, _, err) = node.run(
        "patch",
        &["--to", "1.31", "--backup-dir", backup.to_str().unwrap()],
    );
    assert!(code == 0 || code == 4, "patch: {err}");

    // Someone else writes the store: the orphan's hash changes (the runtime's own commit).
    let orphan = before["records"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["action"] == "orphan")
        .expect("the node has an orphan");
    let orphan_id = orphan["id"].as_str().unwrap().to_string();
    let store = storepatch::containerd::ContainerdStore::with_options(
        &node.dir.join("var/lib/containerd"),
        storepatch::containerd::ContainerdOptions {
            socket: Some(node.dir.join("no-such-runtime/sock")),
        },
    )
    .unwrap();
    let mut other = storepatch::backup::Backup::create(
        &node.dir.join("other-backup"),
        "containerd",
        store.root(),
    )
    .unwrap();
    store
        .apply(
            &[storepatch::Rewrite {
                id: orphan_id.clone(),
                hash: "abc123".parse().unwrap(),
                hash_without_resources: None,
            }],
            &mut other,
        )
        .unwrap();

    let rollback = |extra: &[&str]| {
        Command::new(bin())
            .arg("rollback")
            .arg("--backup-dir")
            .arg(&backup)
            .args(node.store_flags())
            .args(extra)
            .output()
            .unwrap()
    };
    let refused = rollback(&[]);
    assert_eq!(
        refused.status.code(),
        Some(3),
        "byte rollback refuses a store changed since"
    );
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("--values"),
        "the refusal names the way out: {}",
        String::from_utf8_lossy(&refused.stderr)
    );
    let by_value = rollback(&["--values"]);
    assert!(
        by_value.status.success(),
        "{}",
        String::from_utf8_lossy(&by_value.stderr)
    );
    node.bbolt_check();

    let scan = store.scan().unwrap();
    let now: HashMap<&str, &storepatch::StoreRecord> =
        scan.records.iter().map(|r| (r.id.as_str(), r)).collect();
    for r in before["records"].as_array().unwrap() {
        let id = r["id"].as_str().unwrap();
        if id == orphan_id {
            assert_eq!(
                now[id].hash.as_deref(),
                Some("abc123"),
                "the other writer's change is kept"
            );
        } else if r["kind"] == "container" && r["action"] != "undecodable" {
            assert_eq!(
                now[id].hash.as_deref(),
                r["stored_hash"].as_str(),
                "{id}: previous hash back"
            );
            assert_eq!(
                now[id].hash_without_resources.as_deref(),
                r["stored_hash_without_resources"].as_str(),
                "{id}: previous hashWithoutResources back"
            );
        }
    }
    let again = rollback(&["--values"]);
    assert!(again.status.success(), "a second value rollback is a no-op");
    assert!(String::from_utf8_lossy(&again.stdout).contains("already"));
}

/// Docker with live-restore off: the plan warns loudly, and patch refuses (exit 3) without
/// touching the store.
#[test]
fn docker_patch_refuses_without_live_restore() {
    let node = small("docker-20.10");
    let before = node.tree();
    let daemon_json = node.dir.join("daemon.json");
    std::fs::write(&daemon_json, br#"{"live-restore": false}"#).unwrap();
    let flags: Vec<String> = node
        .store_flags()
        .into_iter()
        .filter(|f| f != "--live-restore" && f != "true")
        .collect();
    let run = |cmd: &str, extra: &[&str]| {
        Command::new(bin())
            .arg(cmd)
            .arg("--pods")
            .arg(node.dir.join("pods.json"))
            .args(&flags)
            .arg("--daemon-json")
            .arg(&daemon_json)
            .args(extra)
            .output()
            .unwrap()
    };
    let plan = run("plan", &["--to", "1.16"]);
    let text = String::from_utf8_lossy(&plan.stdout);
    assert!(
        text.contains("DANGER: dockerd live-restore is OFF"),
        "{text}"
    );
    let backup = node.dir.join("backup");
    let patch = run(
        "patch",
        &["--to", "1.16", "--backup-dir", backup.to_str().unwrap()],
    );
    assert_eq!(
        patch.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&patch.stderr)
    );
    assert!(String::from_utf8_lossy(&patch.stderr).contains("live-restore is off"));
    assert_eq!(node.tree(), before, "nothing written");
    assert!(!backup.exists(), "no backup taken");

    // Unknown (no daemon.json, dockerd stopped so its flags cannot be read): the plan warns,
    // the patch goes on.
    std::fs::remove_file(&daemon_json).unwrap();
    let plan = run("plan", &["--to", "1.16"]);
    assert!(
        String::from_utf8_lossy(&plan.stdout).contains("DANGER"),
        "still warned"
    );
    let patch = run(
        "patch",
        &["--to", "1.16", "--backup-dir", backup.to_str().unwrap()],
    );
    assert!(
        matches!(patch.status.code(), Some(0) | Some(4)),
        "unknown live-restore does not block the patch: {}",
        String::from_utf8_lossy(&patch.stderr)
    );
    assert_ne!(node.tree(), before, "the patch wrote");
}

/// The node shapes of the plan-truth rules on the 2,000-container nodes, through the binary:
/// static pods seen through mirror pods are never orphans, another node's pods file is refused
/// with exit 3 naming its node, and a patch forward then back (a downgrade) gives the original
/// store back — every byte on Docker, every value on containerd.
#[test]
fn large_nodes_static_pods_foreign_pods_and_downgrade() {
    for (archive, name, to) in [
        ("docker-20.10-large.tar.gz", "docker-20.10-large", "1.23"),
        (
            "containerd-1.7-large.tar.gz",
            "containerd-1.7-large",
            "1.31",
        ),
    ] {
        let node = unpack_large(archive, name);
        let pods_path = node.dir.join("pods.json");
        let original_pods = std::fs::read(&pods_path).unwrap();
        let plan_json = |node: &Node| -> (i32, Value, String) {
            let (code, out, err) = node.run("plan", &["--to", to, "-o", "json"]);
            let v = serde_json::from_str(&out).unwrap_or(Value::Null);
            (code, v, err)
        };
        let (code, baseline, err) = plan_json(&node);
        assert!(code == 0 || code == 4, "{name}: {err}");

        // Every 10th pod shown as the mirror pod of a static pod (pinned uuid-form UIDs).
        let mut pods: Value = serde_json::from_slice(&original_pods).unwrap();
        let mut mirrored = std::collections::BTreeSet::new();
        for (i, p) in pods["items"].as_array_mut().unwrap().iter_mut().enumerate() {
            if i % 10 == 0 {
                let uid = p["metadata"]["uid"].as_str().unwrap().to_string();
                p["metadata"]["uid"] = Value::from(format!("f0000000-0000-4000-8000-{i:012}"));
                let meta = p["metadata"].as_object_mut().unwrap();
                let ann = meta
                    .entry("annotations")
                    .or_insert(Value::Object(Default::default()));
                ann["kubernetes.io/config.mirror"] = Value::from(uid.clone());
                mirrored.insert(uid);
            }
        }
        std::fs::write(&pods_path, serde_json::to_vec(&pods).unwrap()).unwrap();
        let (code, plan, err) = plan_json(&node);
        assert!(code == 0 || code == 4, "{name}: {err}");
        let recs = plan["records"].as_array().unwrap();
        let statics: Vec<&Value> = recs
            .iter()
            .filter(|r| mirrored.contains(r["pod_uid"].as_str().unwrap_or("")))
            .collect();
        assert!(
            statics.len() > 100,
            "{name}: {} static records",
            statics.len()
        );
        for r in &statics {
            assert_eq!(r["static_pod"], true, "{name}: {r}");
            assert_ne!(
                r["action"], "orphan",
                "{name}: a static pod's container is not orphan: {r}"
            );
        }
        assert_eq!(
            plan["summary"], baseline["summary"],
            "{name}: pinned static pods plan like API pods"
        );

        // One of them from a manifest without metadata.uid: its UID was derived, the target
        // kubelet derives another one, so its running containers are counted as restarting.
        let running: std::collections::BTreeSet<&str> = baseline["records"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["action"] == "rewrite" && r["would_restart_without_rewrite"] == true)
            .filter_map(|r| r["pod_uid"].as_str())
            .collect();
        let k = pods["items"]
            .as_array()
            .unwrap()
            .iter()
            .position(|p| {
                p["metadata"]["annotations"]["kubernetes.io/config.mirror"]
                    .as_str()
                    .is_some_and(|u| running.contains(u))
            })
            .expect("a mirrored pod with a running container to rewrite");
        let first = &pods["items"][k];
        let node_name = first["spec"]["nodeName"].as_str().unwrap().to_string();
        let manifest_name = "static-0".to_string();
        let mirror_name = format!("{manifest_name}-{node_name}");
        let mut pods_d = pods.clone();
        pods_d["items"][k]["metadata"]["name"] = Value::from(mirror_name);
        std::fs::write(&pods_path, serde_json::to_vec(&pods_d).unwrap()).unwrap();
        let mdir = node.dir.join("manifests");
        std::fs::create_dir_all(&mdir).unwrap();
        std::fs::write(
            mdir.join("static-0.yaml"),
            format!(
                "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {manifest_name}\n  namespace: {}\n",
                first["metadata"]["namespace"].as_str().unwrap()
            ),
        )
        .unwrap();
        let (code, out, err) = node.run(
            "plan",
            &[
                "--to",
                to,
                "-o",
                "json",
                "--manifests",
                mdir.to_str().unwrap(),
            ],
        );
        assert!(code == 0 || code == 4, "{name}: {err}");
        let derived: Value = serde_json::from_str(&out).unwrap();
        let uid0 = pods["items"][k]["metadata"]["annotations"]["kubernetes.io/config.mirror"]
            .as_str()
            .unwrap();
        let restarting = derived["records"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| {
                r["pod_uid"] == uid0
                    && r["would_restart_after_rewrite"] == true
                    && r["reason"].as_str().unwrap_or("").contains("derived UID")
            })
            .count();
        assert!(
            restarting > 0,
            "{name}: the derived-UID static pod restarts"
        );
        assert_eq!(
            derived["summary"]["would_restart_after_rewrite"]
                .as_u64()
                .unwrap(),
            baseline["summary"]["would_restart_after_rewrite"]
                .as_u64()
                .unwrap()
                + restarting as u64,
            "{name}: and is counted in the summary"
        );
        std::fs::write(&pods_path, serde_json::to_vec(&pods).unwrap()).unwrap();

        // Another node's pods file: exit 3, naming that node.
        for p in pods["items"].as_array_mut().unwrap() {
            p["spec"]["nodeName"] = Value::from("node-99");
            let uid = p["metadata"]["uid"].as_str().unwrap().replace('-', "");
            p["metadata"]["uid"] = Value::from(format!("x{uid}"));
            if let Some(a) = p["metadata"]["annotations"].as_object_mut() {
                a.remove("kubernetes.io/config.mirror");
            }
        }
        std::fs::write(&pods_path, serde_json::to_vec(&pods).unwrap()).unwrap();
        let (code, _, err) = node.run("plan", &["--to", to]);
        assert_eq!(
            code, 3,
            "{name}: another node's pods file is refused: {err}"
        );
        assert!(err.contains("node-99"), "{name}: names the node: {err}");
        // This node's own pods, half of them said to run on another node: exit 3, both named.
        let mut split: Value = serde_json::from_slice(&original_pods).unwrap();
        for (i, p) in split["items"]
            .as_array_mut()
            .unwrap()
            .iter_mut()
            .enumerate()
        {
            if i % 2 == 1 {
                p["spec"]["nodeName"] = Value::from("node-2");
            }
        }
        std::fs::write(&pods_path, serde_json::to_vec(&split).unwrap()).unwrap();
        let (code, _, err) = node.run("plan", &["--to", to]);
        assert_eq!(
            code, 3,
            "{name}: a store spread over two nodes' pods is refused: {err}"
        );
        assert!(
            err.contains("node-1") && err.contains("node-2"),
            "{name}: names both nodes: {err}"
        );
        std::fs::write(&pods_path, &original_pods).unwrap();

        // Forward, then back to the node's own kubelet.
        let from = node.expected()["from_kubelet"]
            .as_str()
            .unwrap()
            .to_string();
        let before = node.tree();
        let stored = |v: &Value| -> BTreeMap<String, Value> {
            v["records"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| {
                    (
                        r["id"].as_str().unwrap().to_string(),
                        serde_json::json!([r["stored_hash"], r["stored_hash_without_resources"]]),
                    )
                })
                .collect()
        };
        for (v, bk) in [(to, "bk-up"), (from.as_str(), "bk-down")] {
            let backup = node.dir.join(bk);
            let (code, _, err) = node.run(
                "patch",
                &["--to", v, "--backup-dir", backup.to_str().unwrap()],
            );
            assert!(code == 0 || code == 4, "{name} patch --to {v}: {err}");
        }
        let (_, back, _) = {
            let (code, out, err) = node.run("plan", &["--to", &from, "-o", "json"]);
            (code, serde_json::from_str::<Value>(&out).unwrap(), err)
        };
        assert_eq!(
            stored(&back),
            stored(&baseline),
            "{name}: {from} -> {to} -> {from} gives every stored value back"
        );
        if name.starts_with("docker") {
            let after: BTreeMap<String, String> = node
                .tree()
                .into_iter()
                .filter(|(k, _)| !k.starts_with("bk-"))
                .collect();
            assert_eq!(after, before, "{name}: the downgrade gives back every byte");
        }
        node.bbolt_check();
    }
}

/// `--manifests`: an unreadable directory or an unparsable manifest is a usage error naming
/// it (exit 2), before anything else is read; a readable one is used.
#[test]
fn static_pod_manifests_flag() {
    let node = small("containerd-1.7");
    let dir = node.dir.join("manifests");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(
        dir.join("etcd.yaml"),
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: etcd\n  namespace: kube-system\n",
    )
    .unwrap();
    let (code, _, err) = node.run(
        "plan",
        &["--to", "1.31", "--manifests", dir.to_str().unwrap()],
    );
    assert!(code == 0 || code == 4, "a good manifest dir plans: {err}");
    std::fs::write(dir.join("kube-scheduler.yaml"), "kind: Pod\nmetadata: [\n").unwrap();
    let (code, _, err) = node.run(
        "plan",
        &["--to", "1.31", "--manifests", dir.to_str().unwrap()],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("kube-scheduler.yaml"), "names the file: {err}");
    let missing = node.dir.join("no-manifests");
    let (code, _, err) = node.run(
        "plan",
        &["--to", "1.31", "--manifests", missing.to_str().unwrap()],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("no-manifests"), "names the dir: {err}");
}

/// `patch` backs meta.db up by page by default (an undo file far smaller than the file, manifest
/// format 3) and whole with `--backup full` (format 2); `rollback` restores every byte from
/// either, on the 2,000-container node.
#[test]
fn containerd_page_and_full_backups_both_roll_back_exactly() {
    let node = unpack_large("containerd-1.7-large.tar.gz", "containerd-1.7-large");
    let before = node.tree();
    let meta_len = std::fs::metadata(
        node.dir
            .join("var/lib/containerd/io.containerd.metadata.v1.bolt/meta.db"),
    )
    .unwrap()
    .len();
    for (kind, format) in [(None, 3), (Some("full"), 2)] {
        let backup = node.dir.join(format!("backup-{}", kind.unwrap_or("pages")));
        let mut args = vec!["--to", "1.31", "--backup-dir", backup.to_str().unwrap()];
        if let Some(k) = kind {
            args.extend(["--backup", k]);
        }
        let (code, _, err) = node.run("patch", &args);
        assert!(code == 0 || code == 4, "patch {args:?}: exit {code}: {err}");
        assert_ne!(node.tree(), before);
        let manifest: Value =
            serde_json::from_slice(&std::fs::read(backup.join("manifest.json")).unwrap()).unwrap();
        assert_eq!(manifest["format"], format, "{manifest}");
        let entry = &manifest["entries"][0];
        let copy_len = std::fs::metadata(backup.join(entry["backup_file"].as_str().unwrap()))
            .unwrap()
            .len();
        if kind.is_none() {
            assert!(
                copy_len * 20 < meta_len,
                "the undo file ({copy_len} bytes) is a small part of meta.db ({meta_len})"
            );
            assert!(entry["pages"]["ranges"].as_array().unwrap().len() > 1);
        } else {
            assert_eq!(copy_len, meta_len, "a whole copy");
        }
        let out = Command::new(bin())
            .arg("rollback")
            .arg("--backup-dir")
            .arg(&backup)
            .args(node.store_flags())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "rollback: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            node.tree(),
            before,
            "{kind:?}: rollback restores every byte"
        );
    }
}

/// Kubelet 1.37 and 1.38 (issue 38) on every bundled node. The real `HashContainer` of
/// k8s.io/kubernetes v1.37.2 (tools/kubelet-hash) gives every one of the 300 golden specs the
/// hash v1.36.3's does, so a 1.37 plan must decide every record exactly as the 1.36 plan does.
/// Then the way back: after a patch to 1.37, `plan --from 1.37 --to 1.36` proves every rewritten
/// container at 1.37 and finds each already at its 1.36 hash (nothing to rewrite), and rollback
/// restores every byte.
#[test]
fn every_bundled_node_plans_1_37_and_1_38_and_backs_out_from_1_37() {
    let summary = |plan: &Value| -> Vec<(String, String, String)> {
        let mut v: Vec<(String, String, String)> = plan["records"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                (
                    r["id"].as_str().unwrap().to_string(),
                    r["action"].as_str().unwrap_or("").to_string(),
                    r["target_hash"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect();
        v.sort();
        v
    };
    for name in [
        "docker-20.10",
        "containerd-1.6",
        "containerd-1.7",
        "containerd-2.2",
        "containerd-2.3",
        "containerd-2.4",
        "crio-1.30",
        "crio-1.36",
        "docker-28.5",
    ] {
        let node = small(name);
        let plan_for = |v: &str, extra: &[&str]| -> (i32, Value) {
            let mut args = vec!["--to", v, "-o", "json"];
            args.extend_from_slice(extra);
            let (code, out, err) = node.run("plan", &args);
            assert!(
                code == 0 || code == 4,
                "{name} plan --to {v} {extra:?}: exit {code}: {err}"
            );
            (code, serde_json::from_str(&out).unwrap())
        };
        let (code_36, p36) = plan_for("1.36", &[]);
        let (code_37, p37) = plan_for("1.37", &[]);
        assert_eq!(
            code_37, code_36,
            "{name}: the 1.37 plan's exit code is 1.36's"
        );
        assert_eq!(p37["to"], "1.37", "{name}");
        assert_eq!(
            summary(&p37),
            summary(&p36),
            "{name}: every record's action and target hash for 1.37 are 1.36's"
        );
        // 1.38.0-beta.0's real HashContainer gives the golden specs 1.37's hashes too
        let (code_38, p38) = plan_for("1.38", &[]);
        assert_eq!(
            code_38, code_36,
            "{name}: the 1.38 plan's exit code is 1.36's"
        );
        assert_eq!(
            summary(&p38),
            summary(&p36),
            "{name}: every record's action and target hash for 1.38 are 1.36's"
        );
        if name == "docker-20.10" {
            // a dockershim node's way to 1.37 goes through cri-dockerd: covered by its own tests
            continue;
        }
        let before = node.tree();
        let backup = node.dir.join("backup-1.37");
        let (code, _, err) = node.run(
            "patch",
            &["--to", "1.37", "--backup-dir", backup.to_str().unwrap()],
        );
        assert!(
            code == 0 || code == 4,
            "{name} patch --to 1.37: exit {code}: {err}"
        );
        let rewritten: Vec<&Value> = p37["records"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["action"] == "rewrite")
            .collect();
        assert!(
            !rewritten.is_empty(),
            "{name}: the node has containers to rewrite for 1.37"
        );
        let (_, back) = plan_for("1.36", &["--from", "1.37"]);
        let back_by_id: HashMap<&str, &Value> = back["records"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (r["id"].as_str().unwrap(), r))
            .collect();
        for r in &rewritten {
            let b = back_by_id[r["id"].as_str().unwrap()];
            assert_eq!(
                (b["action"].as_str(), b["target_hash"].as_str()),
                (Some("unchanged"), r["target_hash"].as_str()),
                "{name}: {} holds its 1.37 hash, which is its 1.36 hash: the back-out rewrites nothing",
                r["id"]
            );
        }
        rollback_restores(&node, &backup, &before);
    }
}
