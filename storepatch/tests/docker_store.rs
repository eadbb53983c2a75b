//! The Docker back-end over real dockerd 20.10.24 files (fixtures/stores/docker-20.10.24 and
//! the Docker node fixtures/nodes/docker-20.10), and over every bad input the issue lists.

use serde_json::Value;
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use storepatch::backup::{self, Backup};
use storepatch::docker::{DockerOptions, DockerStore};
use storepatch::{RecordKind, Rewrite, RuntimeStore, StoreError};

use testtools::fixtures_dir;
use testtools::tree::{snapshot_with_inodes as snapshot, walk};

fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for e in fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dst = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &dst);
        } else {
            fs::copy(e.path(), &dst).unwrap();
        }
    }
}

/// A data-root in a temp dir holding a copy of `containers_src` as `containers/`, with
/// config.v2.json at mode 0600 as dockerd writes it.
fn store_from(containers_src: &Path) -> (tempfile::TempDir, PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("docker");
    copy_tree(containers_src, &root.join("containers"));
    for e in fs::read_dir(root.join("containers")).unwrap() {
        let p = e.unwrap().path().join("config.v2.json");
        if p.exists() {
            fs::set_permissions(&p, fs::Permissions::from_mode(0o600)).unwrap();
        }
    }
    (t, root)
}

/// Options that never look at the machine's own dockerd.
fn opts(t: &Path, live_restore: Option<bool>) -> DockerOptions {
    DockerOptions {
        pidfile: t.join("no-docker.pid"),
        socket: t.join("no-docker.sock"),
        daemon_json: t.join("no-daemon.json"),
        live_restore,
        ..DockerOptions::default()
    }
}

fn cfg_path(root: &Path, id: &str) -> PathBuf {
    root.join("containers").join(id).join("config.v2.json")
}

fn rw(id: &str, hash: &str) -> Rewrite {
    Rewrite {
        id: id.into(),
        hash: hash.parse().expect("a test hash is hex"),
        hash_without_resources: None,
    }
}

/// Checks `new` differs from `old` only inside label values of `keys` under Config.Labels.
fn assert_only_label_values_differ(old: &[u8], new: &[u8], changed: &[(&str, &str, &str)]) {
    let mut expect = old.to_vec();
    for (key, from, to) in changed {
        let needle = format!("\"{key}\":\"{from}\"");
        let at = expect
            .windows(needle.len())
            .position(|w| w == needle.as_bytes())
            .unwrap_or_else(|| panic!("{needle} not in the original"));
        let repl = format!("\"{key}\":\"{to}\"");
        expect.splice(at..at + needle.len(), repl.bytes());
    }
    assert!(
        expect == new,
        "bytes differ elsewhere than the label values"
    );
}

#[test]
fn store_fixture_scan_apply_rollback_rerun() {
    let fx = fixtures_dir().join("stores/docker-20.10.24");
    let (t, root) = store_from(&fx.join("before/containers"));
    let store = DockerStore::with_options(&root, opts(t.path(), Some(true))).unwrap();
    let report = store.scan().unwrap();
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    assert_eq!(report.records.len(), 6);

    let pods: Value =
        serde_json::from_slice(&fs::read(fx.join("containers.json")).unwrap()).unwrap();
    let by_id: BTreeMap<_, _> = report.records.iter().map(|r| (r.id.clone(), r)).collect();
    let mut rewrites = Vec::new();
    let mut expected_changes = Vec::new();
    for pod in pods.as_array().unwrap() {
        let sb = by_id[pod["sandbox_id"].as_str().unwrap()];
        assert_eq!(sb.kind, RecordKind::Sandbox);
        assert_eq!(sb.pod.as_deref(), pod["pod"].as_str());
        assert_eq!(sb.namespace.as_deref(), pod["namespace"].as_str());
        assert_eq!(sb.pod_uid.as_deref(), pod["uid"].as_str());
        assert_eq!(sb.attempt, Some(0));
        assert_eq!(sb.hash, None);
        assert_eq!(sb.container, None);
        for c in pod["containers"].as_array().unwrap() {
            let id = c["id"].as_str().unwrap();
            let r = by_id[id];
            assert_eq!(r.kind, RecordKind::Container, "{id}");
            assert_eq!(r.pod.as_deref(), pod["pod"].as_str());
            assert_eq!(r.namespace.as_deref(), pod["namespace"].as_str());
            assert_eq!(r.pod_uid.as_deref(), pod["uid"].as_str());
            assert_eq!(r.container.as_deref(), c["name"].as_str());
            assert_eq!(r.attempt, Some(c["attempt"].as_u64().unwrap() as u32));
            assert_eq!(r.hash.as_deref(), c["hash_before"].as_str());
            assert_eq!(r.hash_without_resources, None);
            assert!(r.problem.is_none(), "{:?}", r.problem);
            // pid and image as dockerd recorded them
            let doc: Value =
                serde_json::from_slice(&fs::read(cfg_path(&root, id)).unwrap()).unwrap();
            let pid = doc["State"]["Pid"].as_u64().unwrap() as u32;
            assert_eq!(r.pid, (pid > 0).then_some(pid));
            assert_eq!(r.pid.is_some(), c["state"] == "running");
            assert_eq!(r.image.as_deref(), doc["Config"]["Image"].as_str());
            let (from, to) = (
                c["hash_before"].as_str().unwrap(),
                c["hash_after_restart"].as_str().unwrap(),
            );
            if from != to {
                rewrites.push(rw(id, to));
                expected_changes.push((id.to_string(), from.to_string(), to.to_string()));
            }
        }
    }
    assert_eq!(rewrites.len(), 2);

    let before = snapshot(&root);
    let bdir = t.path().join("backup");
    let mut b = Backup::create(&bdir, "docker", &root).unwrap();
    let out = store.apply(&rewrites, &mut b).unwrap();
    assert_eq!(out.changed.len(), 2);
    assert!(out.already.is_empty());
    assert_eq!(out.files_written, 2);

    // Every config.v2.json now equals what dockerd itself wrote after reading the edit back
    // (after-restart/: the two edited ones byte-identical to the edit, the others unchanged).
    for e in fs::read_dir(fx.join("after-restart/containers")).unwrap() {
        let id = e.unwrap().file_name().into_string().unwrap();
        let want = fs::read(
            fx.join("after-restart/containers")
                .join(&id)
                .join("config.v2.json"),
        )
        .unwrap();
        assert!(
            fs::read(cfg_path(&root, &id)).unwrap() == want,
            "{id} differs from dockerd's own bytes"
        );
    }
    let after = snapshot(&root);
    for (path, (old, mode, _)) in &before {
        let (new, new_mode, _) = &after[path];
        assert_eq!(mode, new_mode, "mode kept for {}", path.display());
        if let Some((_, from, to)) = expected_changes
            .iter()
            .find(|(id, _, _)| path.ends_with(format!("{id}/config.v2.json")))
        {
            assert_only_label_values_differ(
                old,
                new,
                &[("annotation.io.kubernetes.container.hash", from, to)],
            );
        } else {
            assert!(old == new, "{} changed", path.display());
        }
    }
    assert_eq!(before.len(), after.len(), "no stray files");
    let rescan = store.scan().unwrap();
    for (id, _, to) in &expected_changes {
        let r = rescan.records.iter().find(|r| &r.id == id).unwrap();
        assert_eq!(r.hash.as_deref(), Some(to.as_str()));
    }

    // Rerun: idempotent, nothing written.
    let mut b2 = Backup::create(&t.path().join("backup2"), "docker", &root).unwrap();
    let again = store.apply(&rewrites, &mut b2).unwrap();
    assert!(again.changed.is_empty());
    assert_eq!(again.already.len(), 2);
    assert_eq!(again.files_written, 0);
    assert_eq!(
        snapshot(&root),
        after,
        "a rerun writes nothing (same bytes, same inodes)"
    );

    // A backup dir that already holds a backup is refused.
    let e = Backup::create(&bdir, "docker", &root).unwrap_err();
    assert!(e.to_string().contains("already holds a backup"), "{e}");

    // Rollback restores every byte and mode.
    backup::rollback(&bdir, false).unwrap();
    let restored = snapshot(&root);
    for (path, (old, mode, _)) in &before {
        assert!(&restored[path].0 == old, "{} not restored", path.display());
        assert_eq!(restored[path].1, *mode);
    }
}

#[test]
fn node_fixture_scan_matches_expected_and_apply_matches_step4() {
    let node = fixtures_dir().join("nodes/docker-20.10");
    let (t, root) = store_from(&node.join("var/lib/docker/containers"));
    let store = DockerStore::with_options(&root, opts(t.path(), None)).unwrap();
    let report = store.scan().unwrap();
    // No daemon.json, no flag and no running dockerd to read flags from: unknown, loudly.
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.code == "docker-live-restore-unknown"
                && w.message
                    .contains("cannot tell whether dockerd live-restore is on")),
        "{:?}",
        report.warnings
    );

    let expected: Value =
        serde_json::from_slice(&fs::read(node.join("expected.json")).unwrap()).unwrap();
    let rows = expected["containers"].as_array().unwrap();
    assert_eq!(report.records.len(), rows.len());
    let runtime: Value =
        serde_json::from_slice(&fs::read(node.join("runtime-before.json")).unwrap()).unwrap();
    let pid_of: BTreeMap<&str, (u64, &str)> = runtime
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["id"].as_str().unwrap(),
                (r["pid"].as_u64().unwrap(), r["status"].as_str().unwrap()),
            )
        })
        .collect();
    for row in rows {
        let id = row["id"].as_str().unwrap();
        let r = report.records.iter().find(|r| r.id == id).unwrap();
        let kind = match row["kind"].as_str().unwrap() {
            "sandbox" => RecordKind::Sandbox,
            "container" => RecordKind::Container,
            k => panic!("{k}"),
        };
        assert_eq!(r.kind, kind, "{id}");
        assert_eq!(
            r.namespace.as_deref(),
            row["pod"]["namespace"].as_str(),
            "{id}"
        );
        assert_eq!(r.pod.as_deref(), row["pod"]["name"].as_str(), "{id}");
        assert_eq!(r.pod_uid.as_deref(), row["pod"]["uid"].as_str(), "{id}");
        assert_eq!(
            r.container.as_deref(),
            row["container_name"].as_str(),
            "{id}"
        );
        assert_eq!(r.hash.as_deref(), row["stored_hash"].as_str(), "{id}");
        if kind == RecordKind::Container {
            assert_eq!(
                r.attempt,
                Some(row["attempt"].as_u64().unwrap() as u32),
                "{id}"
            );
            assert_eq!(
                r.hash_without_resources.as_deref(),
                row["stored_hash_without_resources"].as_str()
            );
        }
        let (pid, status) = pid_of[id];
        assert_eq!(
            r.pid.map(u64::from),
            (status == "running").then_some(pid),
            "{id} pid"
        );
    }

    // Apply the 1.16 targets of step 4: the result equals the bytes the real run wrote and
    // dockerd read back.
    let map: Value =
        serde_json::from_slice(&fs::read(node.join("step4/map-1.16.json")).unwrap()).unwrap();
    let rewrites: Vec<Rewrite> = map
        .as_object()
        .unwrap()
        .iter()
        .map(|(id, v)| rw(id, v["new"].as_str().unwrap()))
        .collect();
    assert_eq!(rewrites.len(), 25);
    let before = snapshot(&root);
    let bdir = t.path().join("backup");
    let mut b = Backup::create(&bdir, "docker", &root).unwrap();
    let out = store.apply(&rewrites, &mut b).unwrap();
    assert_eq!(out.changed.len(), 25);
    let rewritten = node.join("step4/rewritten/var/lib/docker/containers");
    for r in &rewrites {
        let want = fs::read(rewritten.join(&r.id).join("config.v2.json")).unwrap();
        assert!(
            fs::read(cfg_path(&root, &r.id)).unwrap() == want,
            "{} differs from step4",
            r.id
        );
    }
    let after = snapshot(&root);
    let changed_files = before.iter().filter(|(p, v)| after[*p].0 != v.0).count();
    assert_eq!(changed_files, 25, "only the 25 rewritten files changed");
    let manifest = backup::read_manifest(&bdir).unwrap();
    assert_eq!(manifest.entries.len(), 25);
    assert_eq!(manifest.state, "applied");

    let mut b2 = Backup::create(&t.path().join("b2"), "docker", &root).unwrap();
    let again = store.apply(&rewrites, &mut b2).unwrap();
    assert_eq!((again.changed.len(), again.already.len()), (0, 25));

    backup::rollback(&bdir, false).unwrap();
    let restored = snapshot(&root);
    for (p, v) in &before {
        assert!(restored[p].0 == v.0, "{} not restored", p.display());
    }
}

// ---------------------------------------------------------------- bad inputs

const NGINX: &str = "1336f9653190616c7060db33ed6fc95b7fe5cf6a6e499ebdc0021962dcb8bb98";
const SIDECAR: &str = "b80899089fddbff6c9f7ef63efd3a530434eeb7f1fa9bf7672d31d9fc3b28fd3";
const SANDBOX: &str = "14bf795d80f304c0b774a5ac6e48845df31ff13f5b913a8da2860cfce65fde4b";

fn small_store() -> (tempfile::TempDir, PathBuf, DockerStore) {
    let (t, root) = store_from(&fixtures_dir().join("stores/docker-20.10.24/before/containers"));
    let store = DockerStore::with_options(&root, opts(t.path(), Some(true))).unwrap();
    (t, root, store)
}

/// Applies `rewrites` expecting an error; checks no byte of the store changed.
fn apply_fails(t: &Path, root: &Path, store: &DockerStore, rewrites: &[Rewrite]) -> StoreError {
    let before = snapshot(root);
    let bdir = t.join(format!("backup-{}", before.len() + rand_suffix()));
    let mut b = Backup::create(&bdir, "docker", root).unwrap();
    let e = store.apply(rewrites, &mut b).unwrap_err();
    assert_eq!(snapshot(root), before, "no byte changed after: {e}");
    e
}

fn rand_suffix() -> usize {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    N.fetch_add(1, Ordering::SeqCst)
}

fn record<'a>(r: &'a storepatch::ScanReport, id: &str) -> &'a storepatch::StoreRecord {
    r.records.iter().find(|x| x.id == id).unwrap()
}

#[test]
fn not_json_and_truncated_are_reported_and_others_go_on() {
    let (t, root, store) = small_store();
    let orig = fs::read(cfg_path(&root, NGINX)).unwrap();
    fs::write(cfg_path(&root, NGINX), &orig[..orig.len() / 2]).unwrap();
    fs::write(cfg_path(&root, SIDECAR), b"this is not json\n").unwrap();
    let rep = store.scan().unwrap();
    assert_eq!(rep.records.len(), 6);
    let n = record(&rep, NGINX);
    assert_eq!(n.kind, RecordKind::Undecodable);
    assert!(
        n.problem.as_deref().unwrap().contains("truncated"),
        "{:?}",
        n.problem
    );
    let s = record(&rep, SIDECAR);
    assert_eq!(s.kind, RecordKind::Undecodable);
    assert!(
        s.problem.as_deref().unwrap().contains("not valid JSON"),
        "{:?}",
        s.problem
    );
    assert_eq!(
        rep.records
            .iter()
            .filter(|r| r.kind == RecordKind::Container)
            .count(),
        2
    );
    // Asking to rewrite them fails, naming the file, and writes nothing (even the good one).
    let e = apply_fails(
        t.path(),
        &root,
        &store,
        &[
            rw(
                "864862862dee90d03f179884e0fde2989d0c990b4a05e9b3ce3e0ceb5776f400",
                "c0ffee02",
            ),
            rw(NGINX, "e1f2a3b4"),
        ],
    );
    assert!(
        e.to_string().contains(NGINX) && e.to_string().contains("truncated"),
        "{e}"
    );
    let e = apply_fails(t.path(), &root, &store, &[rw(SIDECAR, "e1f2a3b4")]);
    assert!(e.to_string().contains("not valid JSON"), "{e}");
}

#[test]
fn labels_missing_or_of_the_wrong_type() {
    let (t, root, store) = small_store();
    let edit = |id: &str, f: &dyn Fn(&mut Value)| {
        let mut v: Value = serde_json::from_slice(&fs::read(cfg_path(&root, id)).unwrap()).unwrap();
        f(&mut v);
        fs::write(cfg_path(&root, id), serde_json::to_vec(&v).unwrap()).unwrap();
    };
    // Labels of the wrong type: an array.
    edit(NGINX, &|v| {
        v["Config"]["Labels"] = serde_json::json!(["a", "b"])
    });
    // A label value of the wrong type.
    edit(SIDECAR, &|v| {
        v["Config"]["Labels"]["annotation.io.kubernetes.container.hash"] = serde_json::json!(5)
    });
    // Labels missing entirely: not a Kubernetes container.
    edit(SANDBOX, &|v| v["Config"]["Labels"] = Value::Null);
    // A Kubernetes container without its hash label.
    let pg = "864862862dee90d03f179884e0fde2989d0c990b4a05e9b3ce3e0ceb5776f400";
    edit(pg, &|v| {
        v["Config"]["Labels"]
            .as_object_mut()
            .unwrap()
            .remove("annotation.io.kubernetes.container.hash");
    });
    let rep = store.scan().unwrap();
    let n = record(&rep, NGINX);
    assert_eq!(n.kind, RecordKind::Undecodable);
    assert!(
        n.problem.as_deref().unwrap().contains("wrong type"),
        "{:?}",
        n.problem
    );
    assert_eq!(record(&rep, SIDECAR).kind, RecordKind::Undecodable);
    assert_eq!(record(&rep, SANDBOX).kind, RecordKind::NotKubernetes);
    let p = record(&rep, pg);
    assert_eq!(p.kind, RecordKind::Container);
    assert!(p
        .problem
        .as_deref()
        .unwrap()
        .contains("no annotation.io.kubernetes.container.hash"));

    let e = apply_fails(t.path(), &root, &store, &[rw(NGINX, "1")]);
    assert!(e.to_string().contains("Config.Labels is an array"), "{e}");
    let e = apply_fails(t.path(), &root, &store, &[rw(SIDECAR, "1")]);
    assert!(e.to_string().contains("is a number, not a string"), "{e}");
    let e = apply_fails(t.path(), &root, &store, &[rw(SANDBOX, "1")]);
    assert!(e.to_string().contains("not a Kubernetes container"), "{e}");
    let e = apply_fails(t.path(), &root, &store, &[rw(pg, "1")]);
    assert!(
        e.to_string()
            .contains("has no annotation.io.kubernetes.container.hash"),
        "{e}"
    );
    // A sandbox is never rewritten.
    let (t2, root2, store2) = small_store();
    let e = apply_fails(t2.path(), &root2, &store2, &[rw(SANDBOX, "1")]);
    assert!(e.to_string().contains("pod sandbox"), "{e}");
}

#[test]
fn symlinked_or_escaping_container_dirs_are_refused() {
    let (t, root, store) = small_store();
    // containers/<id> replaced by a symlink to a copy outside the data-root.
    let outside = t.path().join("outside");
    copy_tree(&root.join("containers").join(NGINX), &outside);
    fs::remove_dir_all(root.join("containers").join(NGINX)).unwrap();
    std::os::unix::fs::symlink(&outside, root.join("containers").join(NGINX)).unwrap();
    // config.v2.json itself a symlink (inside the root).
    let side = cfg_path(&root, SIDECAR);
    fs::rename(&side, side.with_file_name("real.json")).unwrap();
    std::os::unix::fs::symlink("real.json", &side).unwrap();
    let rep = store.scan().unwrap();
    let n = record(&rep, NGINX);
    assert_eq!(n.kind, RecordKind::Undecodable);
    assert!(
        n.problem.as_deref().unwrap().contains("symbolic link"),
        "{:?}",
        n.problem
    );
    let s = record(&rep, SIDECAR);
    assert_eq!(s.kind, RecordKind::Undecodable);
    assert!(
        s.problem.as_deref().unwrap().contains("symbolic link"),
        "{:?}",
        s.problem
    );
    let outside_before = snapshot(&outside);
    let e = apply_fails(t.path(), &root, &store, &[rw(NGINX, "e1f2a3b4")]);
    assert!(e.to_string().contains("symbolic link"), "{e}");
    assert_eq!(snapshot(&outside), outside_before);
    let e = apply_fails(t.path(), &root, &store, &[rw(SIDECAR, "e1f2a3b4")]);
    assert!(e.to_string().contains("symbolic link"), "{e}");
    // Ids that would walk out of containers/.
    for bad in ["../../outside", "..", "a/b", ""] {
        let e = apply_fails(t.path(), &root, &store, &[rw(bad, "e1f2a3b4")]);
        assert!(matches!(e, StoreError::UnknownRecord(_)), "{bad}: {e}");
    }
    // containers/ itself a symlink out of the data-root.
    let (t3, root3, _) = small_store();
    let moved = t3.path().join("elsewhere");
    fs::rename(root3.join("containers"), &moved).unwrap();
    std::os::unix::fs::symlink(&moved, root3.join("containers")).unwrap();
    let store3 = DockerStore::with_options(&root3, opts(t3.path(), Some(true))).unwrap();
    let e = store3.scan().unwrap_err();
    assert!(e.to_string().contains("outside the data-root"), "{e}");
}

#[test]
fn missing_root_unknown_id_running_dockerd_and_conflicting_rewrites() {
    let t = tempfile::tempdir().unwrap();
    let e = DockerStore::open(&t.path().join("nope")).unwrap_err();
    assert!(matches!(e, StoreError::RootMissing(_)), "{e}");
    let empty = t.path().join("empty");
    fs::create_dir(&empty).unwrap();
    let e = DockerStore::with_options(&empty, opts(t.path(), None))
        .unwrap()
        .scan()
        .unwrap_err();
    assert!(e.to_string().contains("Docker data-root"), "{e}");

    let (t, root, store) = small_store();
    // An unknown id, after a valid one: error before any write.
    let e = apply_fails(
        t.path(),
        &root,
        &store,
        &[rw(NGINX, "e1f2a3b4"), rw(&"f".repeat(64), "1")],
    );
    assert!(matches!(e, StoreError::UnknownRecord(_)), "{e}");
    // One id twice, with different or with identical values: the one contract of every
    // back-end (storepatch::contract::validate).
    for second in ["e1f2a3b5", "e1f2a3b4"] {
        let e = apply_fails(
            t.path(),
            &root,
            &store,
            &[rw(NGINX, "e1f2a3b4"), rw(NGINX, second)],
        );
        assert!(e.to_string().contains("given twice"), "{e}");
    }
    // dockerd "running": a pidfile naming a live process.
    let pidfile = t.path().join("docker.pid");
    fs::write(&pidfile, std::process::id().to_string()).unwrap();
    let running = DockerStore::with_options(
        &root,
        DockerOptions {
            pidfile,
            ..opts(t.path(), Some(true))
        },
    )
    .unwrap();
    let e = apply_fails(t.path(), &root, &running, &[rw(NGINX, "e1f2a3b4")]);
    assert!(matches!(e, StoreError::RuntimeRunning { .. }), "{e}");
    assert!(running.scan().is_ok(), "scanning a running store is fine");
}

#[test]
fn hash_without_resources_is_written_only_where_present() {
    let (t, root, store) = small_store();
    // Give sidecar a hashWithoutResources label, the way a 1.27–1.30 kubelet would.
    let p = cfg_path(&root, SIDECAR);
    let bytes = fs::read(&p).unwrap();
    let s = String::from_utf8(bytes).unwrap().replacen(
        "\"annotation.io.kubernetes.container.hash\":\"5b20d7f1\",",
        "\"annotation.io.kubernetes.container.hash\":\"5b20d7f1\",\"annotation.io.kubernetes.container.hashWithoutResources\":\"6a7b8c9d\",",
        1,
    );
    fs::write(&p, &s).unwrap();
    let old_side = fs::read(&p).unwrap();
    let old_nginx = fs::read(cfg_path(&root, NGINX)).unwrap();
    let mut b = Backup::create(&t.path().join("b"), "docker", &root).unwrap();
    let rws = [
        Rewrite {
            id: SIDECAR.into(),
            hash: "badf00d".parse().unwrap(),
            hash_without_resources: Some("4e5f6071".parse().unwrap()),
        },
        Rewrite {
            id: NGINX.into(),
            hash: "e1f2a3b4".parse().unwrap(),
            hash_without_resources: Some("12345678".parse().unwrap()),
        },
    ];
    store.apply(&rws, &mut b).unwrap();
    assert_only_label_values_differ(
        &old_side,
        &fs::read(&p).unwrap(),
        &[
            (
                "annotation.io.kubernetes.container.hash",
                "5b20d7f1",
                "badf00d",
            ),
            (
                "annotation.io.kubernetes.container.hashWithoutResources",
                "6a7b8c9d",
                "4e5f6071",
            ),
        ],
    );
    let new_nginx = fs::read(cfg_path(&root, NGINX)).unwrap();
    assert_only_label_values_differ(
        &old_nginx,
        &new_nginx,
        &[(
            "annotation.io.kubernetes.container.hash",
            "3a1f6c2e",
            "e1f2a3b4",
        )],
    );
    assert!(
        !String::from_utf8(new_nginx)
            .unwrap()
            .contains("hashWithoutResources"),
        "not added where absent"
    );
}

/// The patch's read-back after `apply` answers the files apply wrote from apply's own read of
/// them after the renames, once; every later read-back, and any id apply did not write, reads
/// the file on disk.
#[test]
fn read_back_after_apply_gives_the_written_labels_then_reads_the_disk() {
    let (t, root, store) = small_store();
    let mut b = Backup::create(&t.path().join("b"), "docker", &root).unwrap();
    let out = store
        .apply(&[rw(SIDECAR, "badf00d"), rw(NGINX, "e1f2a3b4")], &mut b)
        .unwrap();
    assert_eq!(out.changed.len(), 2, "both files rewritten");
    let hashes = |records: Vec<storepatch::StoreRecord>| -> Vec<Option<String>> {
        records.into_iter().map(|r| r.hash).collect()
    };
    // Changed behind the store's back (never happens in a patch: dockerd is stopped and the
    // store locked), so that the two reads can be told apart.
    let p = cfg_path(&root, NGINX);
    let edited = String::from_utf8(fs::read(&p).unwrap())
        .unwrap()
        .replacen("e1f2a3b4", "0000aaaa", 1);
    fs::write(&p, edited).unwrap();
    assert_eq!(
        hashes(store.read_back(&[SIDECAR, NGINX]).unwrap()),
        [Some("badf00d".to_string()), Some("e1f2a3b4".to_string())],
        "the first read-back answers from apply's read after the renames, without a second read"
    );
    assert_eq!(
        hashes(store.read_back(&[SIDECAR, NGINX]).unwrap()),
        [Some("badf00d".to_string()), Some("0000aaaa".to_string())],
        "a later read-back reads each file as it is on disk"
    );
    let fresh = DockerStore::with_options(&root, opts(t.path(), Some(true))).unwrap();
    assert_eq!(
        hashes(fresh.read_back(&[NGINX]).unwrap()),
        [Some("0000aaaa".to_string())],
        "a store that wrote nothing reads the disk"
    );
}

/// Root bypasses file permissions, so the denied case runs in a child process of this test
/// binary that dropped to uid/gid 65534 (nobody): real EACCES from the kernel.
#[test]
fn permission_denied() {
    if std::env::var_os("STOREPATCH_AS_NOBODY").is_some() {
        return as_nobody_child();
    }
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "this test needs root to drop to nobody (CI runs as root)"
    );
    let t = tempfile::tempdir().unwrap();
    let root = t.path().join("docker");
    copy_tree(
        &fixtures_dir().join("stores/docker-20.10.24/before/containers"),
        &root.join("containers"),
    );
    // The store is root's, readable by all but writable by no one else; one file is 0600.
    for p in walk(&root) {
        let mode = if p.is_dir() { 0o755 } else { 0o644 };
        fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
    }
    fs::set_permissions(cfg_path(&root, SIDECAR), fs::Permissions::from_mode(0o600)).unwrap();
    fs::set_permissions(t.path(), fs::Permissions::from_mode(0o755)).unwrap();
    let work = t.path().join("nobody");
    fs::create_dir(&work).unwrap();
    std::os::unix::fs::chown(&work, Some(65534), Some(65534)).unwrap();
    let before = snapshot(&root);
    let exe = std::env::current_exe().unwrap();
    use std::os::unix::process::CommandExt;
    let out = std::process::Command::new(exe)
        .args([
            "--exact",
            "permission_denied",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("STOREPATCH_AS_NOBODY", &root)
        .env("STOREPATCH_NOBODY_WORK", &work)
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "child as nobody failed:\n{text}");
    assert!(text.contains("NOBODY-CHECKS-PASSED"), "{text}");
    assert_eq!(snapshot(&root), before, "nothing changed");
}

fn as_nobody_child() {
    assert_ne!(unsafe { libc::geteuid() }, 0);
    let root = PathBuf::from(std::env::var_os("STOREPATCH_AS_NOBODY").unwrap());
    let work = PathBuf::from(std::env::var_os("STOREPATCH_NOBODY_WORK").unwrap());
    let store = DockerStore::with_options(&root, opts(&work, Some(true))).unwrap();
    let rep = store.scan().unwrap();
    let s = record(&rep, SIDECAR);
    assert_eq!(s.kind, RecordKind::Undecodable);
    assert!(
        s.problem.as_deref().unwrap().contains("Permission denied"),
        "{:?}",
        s.problem
    );
    assert_eq!(
        record(&rep, NGINX).kind,
        RecordKind::Container,
        "others go on"
    );
    let mut b = Backup::create(&work.join("b"), "docker", &root).unwrap();
    let e = store.apply(&[rw(NGINX, "e1f2a3b4")], &mut b).unwrap_err();
    assert!(e.to_string().contains("Permission denied"), "{e}");
    assert!(e.to_string().contains(NGINX), "names the file: {e}");
    println!("NOBODY-CHECKS-PASSED");
}

/// A tiny tmpfs that is full when the new bytes are written: the originals stay intact and
/// no temp file is left behind.
#[test]
fn disk_full_during_the_write() {
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "mounting a tmpfs needs root (CI runs as root)"
    );
    let t = tempfile::tempdir().unwrap();
    let mnt = t.path().join("tiny");
    fs::create_dir(&mnt).unwrap();
    let st = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=256k,mode=0755", "tmpfs"])
        .arg(&mnt)
        .status()
        .unwrap();
    assert!(st.success(), "mount -t tmpfs failed");
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(&self.0).status();
        }
    }
    let _guard = Unmount(mnt.clone());
    let root = mnt.join("docker");
    copy_tree(
        &fixtures_dir().join("stores/docker-20.10.24/before/containers"),
        &root.join("containers"),
    );
    // Fill the filesystem to the last byte.
    {
        use std::io::Write;
        let mut f = fs::File::create(mnt.join("filler")).unwrap();
        let chunk = vec![0u8; 4096];
        loop {
            if f.write_all(&chunk).is_err() {
                break;
            }
        }
        let one = [0u8; 1];
        while f.write_all(&one).is_ok() {}
    }
    let store = DockerStore::with_options(&root, opts(t.path(), Some(true))).unwrap();
    assert_eq!(
        store.scan().unwrap().records.len(),
        6,
        "a full disk does not stop a scan"
    );
    let before = snapshot(&root);
    let mut b = Backup::create(&t.path().join("backup"), "docker", &root).unwrap();
    let e = store
        .apply(
            &[
                rw(NGINX, "e1f2a3b4"),
                rw(
                    "864862862dee90d03f179884e0fde2989d0c990b4a05e9b3ce3e0ceb5776f400",
                    "c0ffee02",
                ),
            ],
            &mut b,
        )
        .unwrap_err();
    assert!(e.to_string().contains("No space left"), "{e}");
    assert_eq!(
        snapshot(&root),
        before,
        "originals intact, no temp files left"
    );
    // Freeing space lets the same apply go through into a fresh backup.
    fs::remove_file(mnt.join("filler")).unwrap();
    let mut b = Backup::create(&t.path().join("backup2"), "docker", &root).unwrap();
    let out = store.apply(&[rw(NGINX, "e1f2a3b4")], &mut b).unwrap();
    assert_eq!(out.changed, vec![NGINX.to_string()]);
}
