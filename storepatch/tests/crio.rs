//! CRI-O back-end against the files a real CRI-O 1.30.14 wrote (fixtures/nodes/crio-1.30):
//! scan = expected.json, patch for 1.31 = the bytes CRI-O accepted in step4 (variant VC),
//! rollback = the original bytes, rerun = no-op, and every bad input refused with no byte changed.

use serde_json::Value;
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use storepatch::backup::{self, Backup};
use storepatch::crio::{CrioOptions, CrioStore};
use storepatch::{RecordKind, Rewrite, RuntimeStore, StoreError, StoreRecord};

use testtools::tree::snapshot_entries as snapshot;

fn fixture() -> PathBuf {
    testtools::fixtures_dir().join("nodes/crio-1.30")
}

fn expected() -> Value {
    serde_json::from_slice(&fs::read(fixture().join("expected.json")).unwrap()).unwrap()
}

const GRAPH: &str = "var/lib/containers/storage";
const RUN: &str = "run/containers/storage";

/// A writable copy of the node's `var/` and `run/` under `dir/node`.
fn copy_node(dir: &Path) -> PathBuf {
    let node = dir.join("node");
    testtools::tree::copy(&fixture().join("var"), &node.join("var"));
    testtools::tree::copy(&fixture().join("run"), &node.join("run"));
    node
}

fn assert_unchanged(before: &BTreeMap<PathBuf, (u32, Vec<u8>)>, root: &Path, what: &str) {
    let after = snapshot(root);
    let before_keys: Vec<_> = before.keys().collect();
    let after_keys: Vec<_> = after.keys().collect();
    assert_eq!(before_keys, after_keys, "{what}: set of files changed");
    for (k, v) in before {
        assert!(after[k] == *v, "{what}: {} changed", k.display());
    }
}

/// The rewrites a planner would make for `target`: every container whose target is known.
fn rewrites_for(target: &str) -> Vec<Rewrite> {
    expected()["containers"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| {
            let t = c["targets"][target].as_object()?;
            Some(Rewrite {
                id: c["id"].as_str().unwrap().to_string(),
                hash: t["hash"].as_str().unwrap().parse().unwrap(),
                hash_without_resources: t
                    .get("hash_without_resources")
                    .and_then(Value::as_str)
                    .map(|h| h.parse().unwrap()),
            })
        })
        .collect()
}

fn open(node: &Path) -> CrioStore {
    CrioStore::open(&node.join(GRAPH)).unwrap()
}

fn new_backup(dir: &Path, name: &str, store: &CrioStore) -> (PathBuf, Backup) {
    let p = dir.join(name);
    let b = Backup::create(&p, "crio", store.graphroot()).unwrap();
    (p, b)
}

fn by_id(records: &[StoreRecord]) -> BTreeMap<&str, &StoreRecord> {
    records.iter().map(|r| (r.id.as_str(), r)).collect()
}

/// What CRI-O stores as `io.kubernetes.cri-o.ImageName` for the image the kubelet sent.
fn normalized_image(image: &str) -> String {
    let (first, _) = image.split_once('/').unwrap_or(("", image));
    let mut s = if !image.contains('/') {
        format!("docker.io/library/{image}")
    } else if !(first.contains('.') || first.contains(':') || first == "localhost") {
        format!("docker.io/{image}")
    } else {
        image.to_string()
    };
    let last = s.rsplit('/').next().unwrap();
    if !last.contains(':') && !s.contains('@') {
        s.push_str(":latest");
    }
    s
}

#[test]
fn scan_gives_every_record_of_expected_json() {
    // Read-only on the fixture itself: scan never writes.
    let before = snapshot(&fixture());
    let store = CrioStore::open(&fixture().join(GRAPH)).unwrap();
    assert_eq!(
        store.runroot(),
        Some(fixture().join(RUN).as_path()),
        "runroot discovered beside the graphroot"
    );
    let report = store.scan().unwrap();
    assert_unchanged(&before, &fixture(), "scan");
    let exp = expected();
    let rows = exp["containers"].as_array().unwrap();
    assert_eq!(
        report.records.len(),
        rows.len(),
        "one record per runtime container"
    );
    let recs = by_id(&report.records);
    let before_json: Value =
        serde_json::from_slice(&fs::read(fixture().join("runtime-before.json")).unwrap()).unwrap();
    let pids: BTreeMap<&str, u64> = before_json["containers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["id"].as_str().unwrap(), c["pid"].as_u64().unwrap()))
        .collect();
    let (mut containers, mut sandboxes, mut digest_refs) = (0, 0, 0);
    for row in rows {
        let id = row["id"].as_str().unwrap();
        let r = recs.get(id).unwrap_or_else(|| panic!("{id} not scanned"));
        assert_eq!(r.problem, None, "{id}: {:?}", r.problem);
        assert_eq!(
            r.namespace.as_deref(),
            row["pod"]["namespace"].as_str(),
            "{id}"
        );
        assert_eq!(r.pod.as_deref(), row["pod"]["name"].as_str(), "{id}");
        assert_eq!(r.pod_uid.as_deref(), row["pod"]["uid"].as_str(), "{id}");
        assert!(
            r.location.ends_with("userdata/config.json"),
            "{}",
            r.location
        );
        match row["kind"].as_str().unwrap() {
            "sandbox" => {
                sandboxes += 1;
                assert_eq!(r.kind, RecordKind::Sandbox, "{id}");
                assert_eq!(r.hash, None);
                assert_eq!(r.container, None);
            }
            "container" => {
                containers += 1;
                assert_eq!(r.kind, RecordKind::Container, "{id}");
                assert_eq!(
                    r.container.as_deref(),
                    row["container_name"].as_str(),
                    "{id}"
                );
                assert_eq!(r.attempt, row["attempt"].as_u64().map(|a| a as u32), "{id}");
                assert_eq!(r.hash.as_deref(), row["stored_hash"].as_str(), "{id}");
                assert_eq!(
                    r.hash_without_resources.as_deref(),
                    row["stored_hash_without_resources"].as_str(),
                    "{id}"
                );
                assert_eq!(r.pid.map(u64::from), pids.get(id).copied(), "{id} pid");
                let img = row["image_in_runtime"].as_str().unwrap();
                if img.contains('@') {
                    // Fixture deviation (nodes/README.md): CRI-O stored the digest reference
                    // under a tag.
                    digest_refs += 1;
                    assert!(r.image.is_some(), "{id}");
                } else {
                    assert_eq!(
                        r.image.as_deref(),
                        Some(normalized_image(img).as_str()),
                        "{id}"
                    );
                }
            }
            k => panic!("unknown kind {k}"),
        }
    }
    assert_eq!(containers, exp["counts"]["containers"].as_u64().unwrap());
    assert_eq!(sandboxes, exp["counts"]["sandboxes"].as_u64().unwrap());
    assert!(digest_refs <= 1);
    let version_warning = report
        .warnings
        .iter()
        .find(|w| w.code == "crio-version-file")
        .expect("a version-file warning");
    let version_warning = &version_warning.message;
    assert!(
        version_warning.contains("1.30.14+unknown") && version_warning.contains("1.30"),
        "{version_warning}"
    );
    assert!(
        version_warning.contains("removes every pod"),
        "{version_warning}"
    );
}

#[test]
fn patch_131_reproduces_step4_vc_bytes_and_rolls_back() {
    let tmp = tempfile::tempdir().unwrap();
    let node = copy_node(tmp.path());
    let original = snapshot(&node);
    let store = open(&node);
    let rewrites = rewrites_for("1.31");
    assert_eq!(
        rewrites.len(),
        26,
        "26 non-orphan containers have a 1.31 target"
    );
    let (bdir, mut b) = new_backup(tmp.path(), "backup", &store);
    let out = store.apply(&rewrites, &mut b).unwrap();
    assert_eq!(out.changed.len(), 26);
    assert!(out.already.is_empty());
    assert_eq!(
        out.files_written, 52,
        "graphroot + runroot config.json of 26 containers"
    );

    // step4/rewritten holds the exact VC bytes CRI-O accepted; compare where they overlap
    // (config.json; state.json is not ours to write, CRI-O regenerates it).
    let vc = fixture().join("step4/rewritten");
    let mut compared = 0;
    let mut vc_state = 0;
    for e in walkdir::WalkDir::new(&vc) {
        let e = e.unwrap();
        if !e.file_type().is_file() {
            continue;
        }
        let rel = e.path().strip_prefix(&vc).unwrap();
        if rel.file_name().unwrap() == "config.json" {
            let ours = fs::read(node.join(rel)).unwrap();
            assert!(
                ours == fs::read(e.path()).unwrap(),
                "{} differs from step4 VC",
                rel.display()
            );
            compared += 1;
        } else {
            vc_state += 1;
        }
    }
    assert_eq!(compared, 52, "every VC config.json compared");
    assert_eq!(vc_state, 26, "VC state.json files exist but are not ours");

    // Nothing else changed: state.json, sandboxes, the orphan, version file, clean.shutdown.
    let after = snapshot(&node);
    let changed: Vec<_> = original
        .iter()
        .filter(|(k, v)| after.get(*k) != Some(*v))
        .map(|(k, _)| k.clone())
        .collect();
    assert_eq!(changed.len(), 52, "only the 52 config.json files changed");
    assert!(changed.iter().all(|p| p.ends_with("userdata/config.json")));
    assert_eq!(
        original.len(),
        after.len(),
        "no file added or removed (no temp left)"
    );

    // The scan now reports the targets.
    let recs = store.scan().unwrap().records;
    let recs = by_id(&recs);
    for rw in &rewrites {
        assert_eq!(recs[rw.id.as_str()].hash, Some(rw.hash.to_string()));
        assert_eq!(recs[rw.id.as_str()].problem, None);
    }

    // The manifest names all 52 files and is complete.
    let m = backup::read_manifest(&bdir).unwrap();
    assert_eq!(m.state, "applied");
    assert_eq!(m.entries.len(), 52);

    // Rollback restores every byte, and a second rollback is a no-op.
    backup::rollback(&bdir, false).unwrap();
    assert_unchanged(&original, &node, "rollback");
    let again = backup::rollback(&bdir, false).unwrap();
    assert!(again
        .files
        .iter()
        .all(|(_, a)| *a == backup::RollbackAction::AlreadyOriginal));
    assert_unchanged(&original, &node, "second rollback");
}

#[test]
fn rerun_is_idempotent_and_other_targets_apply() {
    let tmp = tempfile::tempdir().unwrap();
    let node = copy_node(tmp.path());
    let store = open(&node);
    for (i, target) in ["1.31", "1.33", "1.36"].iter().enumerate() {
        let rw = rewrites_for(target);
        let (_, mut b) = new_backup(tmp.path(), &format!("b{i}"), &store);
        store.apply(&rw, &mut b).unwrap();
        let recs = store.scan().unwrap().records;
        let recs = by_id(&recs);
        for r in &rw {
            assert_eq!(
                recs[r.id.as_str()].hash,
                Some(r.hash.to_string()),
                "{target}"
            );
        }
        let snap = snapshot(&node);
        let (bdir, mut b) = new_backup(tmp.path(), &format!("again{i}"), &store);
        let out = store.apply(&rw, &mut b).unwrap();
        assert!(out.changed.is_empty(), "{target}: rerun changes nothing");
        assert_eq!(out.already.len(), rw.len());
        assert_eq!(out.files_written, 0);
        assert_unchanged(&snap, &node, "rerun");
        assert!(backup::read_manifest(&bdir).unwrap().entries.is_empty());
    }
}

#[test]
fn hash_without_resources_is_matched_by_key_not_value() {
    let tmp = tempfile::tempdir().unwrap();
    let node = copy_node(tmp.path());
    let store = open(&node);
    let recs = store.scan().unwrap().records;
    // Containers whose two values are equal, and one without hashWithoutResources.
    let same: Vec<&StoreRecord> = recs
        .iter()
        .filter(|r| r.hash.is_some() && r.hash == r.hash_without_resources)
        .collect();
    assert!(same.len() >= 2, "fixture has containers with equal values");
    let without = recs
        .iter()
        .find(|r| r.kind == RecordKind::Container && r.hash_without_resources.is_none())
        .unwrap();
    let mut rw: Vec<Rewrite> = same
        .iter()
        .map(|r| Rewrite {
            id: r.id.clone(),
            hash: "1111aaaa".parse().unwrap(),
            hash_without_resources: Some("2222bbbb".parse().unwrap()),
        })
        .collect();
    rw.push(Rewrite {
        id: without.id.clone(),
        hash: "3333cccc".parse().unwrap(),
        hash_without_resources: Some("4444dddd".parse().unwrap()),
    });
    let (_, mut b) = new_backup(tmp.path(), "b", &store);
    store.apply(&rw, &mut b).unwrap();
    let after = store.scan().unwrap().records;
    let after = by_id(&after);
    for r in &same {
        let a = after[r.id.as_str()];
        assert_eq!(a.hash.as_deref(), Some("1111aaaa"));
        assert_eq!(a.hash_without_resources.as_deref(), Some("2222bbbb"));
        assert_eq!(a.problem, None, "plain keys agree with the embedded string");
        let text = fs::read_to_string(&a.location).unwrap();
        assert_eq!(
            text.matches("\"io.kubernetes.container.hash\": \"1111aaaa\"")
                .count(),
            1
        );
        assert_eq!(
            text.matches("\"io.kubernetes.container.hashWithoutResources\": \"2222bbbb\"")
                .count(),
            1
        );
    }
    let a = after[without.id.as_str()];
    assert_eq!(a.hash.as_deref(), Some("3333cccc"));
    assert_eq!(a.hash_without_resources, None, "never added where absent");
    assert!(!fs::read_to_string(&a.location)
        .unwrap()
        .contains("4444dddd"));
}

#[test]
fn top_level_disagreement_is_flagged_and_healed() {
    let tmp = tempfile::tempdir().unwrap();
    let node = copy_node(tmp.path());
    let store = open(&node);
    let id = "8717c4babc213a2a54c8eaff061fa3faa7263d912a5ceea808aec32b1616aa21";
    let p = node
        .join(GRAPH)
        .join("overlay-containers")
        .join(id)
        .join("userdata/config.json");
    let text = fs::read_to_string(&p).unwrap();
    let edited = text.replacen(
        "\"io.kubernetes.container.hash\": \"e7299d5\"",
        "\"io.kubernetes.container.hash\": \"0bad\"",
        1,
    );
    assert_ne!(text, edited);
    fs::write(&p, &edited).unwrap();
    let recs = store.scan().unwrap().records;
    let r = by_id(&recs)[id];
    assert_eq!(r.kind, RecordKind::Container);
    assert_eq!(
        r.hash.as_deref(),
        Some("e7299d5"),
        "the embedded value is what CRI-O reports"
    );
    let problem = r.problem.as_deref().unwrap();
    assert!(
        problem.contains("0bad") && problem.contains("e7299d5"),
        "{problem}"
    );
    let (_, mut b) = new_backup(tmp.path(), "b", &store);
    let rw = Rewrite {
        id: id.into(),
        hash: "e68fd970".parse().unwrap(),
        hash_without_resources: None,
    };
    store.apply(&[rw], &mut b).unwrap();
    let recs = store.scan().unwrap().records;
    let r = by_id(&recs)[id];
    assert_eq!(r.hash.as_deref(), Some("e68fd970"));
    assert_eq!(r.problem, None);
}

/// One broken graphroot config.json: the scan reports it, a patch naming it is refused
/// before any byte changes (the good container in the same patch is not written either).
fn refused_without_change(
    mutate: impl FnOnce(&Path, &Path),
    expect_kind: RecordKind,
    expect_problem: &str,
) {
    let tmp = tempfile::tempdir().unwrap();
    let node = copy_node(tmp.path());
    let id = "8717c4babc213a2a54c8eaff061fa3faa7263d912a5ceea808aec32b1616aa21";
    let good = "ad92b485fb51f23cb1fdd06e43971ec1d3eaa62cc705b382b1ad8af56b9c2985";
    let cfg = node
        .join(GRAPH)
        .join("overlay-containers")
        .join(id)
        .join("userdata/config.json");
    mutate(&cfg, tmp.path());
    let before = snapshot(tmp.path());
    let store = open(&node);
    let recs = store.scan().unwrap().records;
    let r = by_id(&recs)[id];
    assert_eq!(r.kind, expect_kind, "{:?}", r.problem);
    let problem = r.problem.as_deref().unwrap_or_default();
    assert!(problem.contains(expect_problem), "problem: {problem}");
    assert_eq!(recs.len(), 41, "one bad record does not hide the others");
    let rw = vec![
        Rewrite {
            id: good.into(),
            hash: "19fd1bfc".parse().unwrap(),
            hash_without_resources: None,
        },
        Rewrite {
            id: id.into(),
            hash: "e68fd970".parse().unwrap(),
            hash_without_resources: None,
        },
    ];
    let bdir = tmp.path().join("backup");
    let mut b = Backup::create(&bdir, "crio", store.graphroot()).unwrap();
    let err = store.apply(&rw, &mut b).unwrap_err().to_string();
    assert!(err.contains(id), "the error names the container: {err}");
    assert!(err.contains(expect_problem), "{err}");
    // Only the (empty, 0700) backup dir may differ.
    let mut after_expected = before;
    after_expected.insert(
        PathBuf::from("backup"),
        (fs::symlink_metadata(&bdir).unwrap().mode(), Vec::new()),
    );
    assert_unchanged(&after_expected, tmp.path(), "refused patch");
}

#[test]
fn bad_not_json() {
    refused_without_change(
        |p, _| fs::write(p, b"this is not json").unwrap(),
        RecordKind::Undecodable,
        "not valid JSON",
    );
}

#[test]
fn bad_truncated() {
    refused_without_change(
        |p, _| {
            let b = fs::read(p).unwrap();
            fs::write(p, &b[..b.len() / 2]).unwrap();
        },
        RecordKind::Undecodable,
        "not valid JSON",
    );
}

#[test]
fn bad_embedded_string_not_json_is_never_written() {
    // Exactly the edit that made the real CRI-O delete the container: an unquoted hash
    // inside the io.kubernetes.cri-o.Annotations string (step4/broken-annotations-test.json).
    refused_without_change(
        |p, _| {
            let t = fs::read_to_string(p).unwrap();
            let n = t.replacen(
                "\\\"io.kubernetes.container.hash\\\":\\\"e7299d5\\\"",
                "\\\"io.kubernetes.container.hash\\\":e7299d5",
                1,
            );
            assert_ne!(t, n);
            fs::write(p, n).unwrap();
        },
        RecordKind::Undecodable,
        "not a JSON object of strings",
    );
}

#[test]
fn bad_embedded_string_not_an_object() {
    refused_without_change(
        |p, _| {
            let mut v: Value = serde_json::from_slice(&fs::read(p).unwrap()).unwrap();
            v["annotations"]["io.kubernetes.cri-o.Annotations"] = Value::from("[\"a\",\"b\"]");
            fs::write(p, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
        },
        RecordKind::Undecodable,
        "not a JSON object of strings",
    );
}

#[test]
fn bad_embedded_value_not_a_string() {
    refused_without_change(
        |p, _| {
            let t = fs::read_to_string(p).unwrap();
            let n = t.replacen(
                "\\\"io.kubernetes.container.restartCount\\\":\\\"0\\\"",
                "\\\"io.kubernetes.container.restartCount\\\":0",
                1,
            );
            assert_ne!(t, n);
            fs::write(p, n).unwrap();
        },
        RecordKind::Undecodable,
        "not a JSON object of strings",
    );
}

#[test]
fn bad_labels_missing() {
    refused_without_change(
        |p, _| {
            let mut v: Value = serde_json::from_slice(&fs::read(p).unwrap()).unwrap();
            let labels = v["annotations"]["io.kubernetes.cri-o.Labels"]
                .as_str()
                .unwrap();
            let mut l: BTreeMap<String, String> = serde_json::from_str(labels).unwrap();
            l.remove("io.kubernetes.pod.uid");
            v["annotations"]["io.kubernetes.cri-o.Labels"] =
                Value::from(serde_json::to_string(&l).unwrap());
            fs::write(p, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
        },
        RecordKind::Undecodable,
        "io.kubernetes.pod.uid",
    );
}

#[test]
fn bad_symlinked_userdata_escape() {
    refused_without_change(
        |p, tmp| {
            // userdata/ replaced by a link to a directory outside the store.
            let userdata = p.parent().unwrap();
            let outside = tmp.join("outside");
            fs::rename(userdata, &outside).unwrap();
            std::os::unix::fs::symlink(&outside, userdata).unwrap();
        },
        RecordKind::Undecodable,
        "symbolic link",
    );
}

#[test]
fn bad_symlinked_config_escape() {
    refused_without_change(
        |p, tmp| {
            let outside = tmp.join("outside-config.json");
            fs::rename(p, &outside).unwrap();
            std::os::unix::fs::symlink(&outside, p).unwrap();
        },
        RecordKind::Undecodable,
        "symbolic link",
    );
}

#[test]
fn missing_root_and_runroot() {
    let tmp = tempfile::tempdir().unwrap();
    let e = CrioStore::open(&tmp.path().join("nope")).unwrap_err();
    assert!(matches!(e, StoreError::RootMissing(_)), "{e}");
    assert!(e.to_string().contains("nope"));
    let node = copy_node(tmp.path());
    let e = CrioStore::with_options(
        &node.join(GRAPH),
        CrioOptions {
            runroot: Some(tmp.path().join("no-runroot")),
            ..Default::default()
        },
    )
    .unwrap_err();
    assert!(e.to_string().contains("no-runroot"), "{e}");
}

#[test]
fn non_standard_graphroot_warns_and_writes_only_the_graphroot() {
    let tmp = tempfile::tempdir().unwrap();
    let node = copy_node(tmp.path());
    let graph = tmp.path().join("storage");
    fs::rename(node.join(GRAPH), &graph).unwrap();
    let store = CrioStore::open(&graph).unwrap();
    assert_eq!(store.runroot(), None);
    let report = store.scan().unwrap();
    assert!(
        report
            .warnings
            .iter()
            .any(|w| w.code == "crio-runroot-not-found"
                && w.message.contains("runroot was not discovered")),
        "{:?}",
        report.warnings
    );
    let before_run = snapshot(&node.join("run"));
    let (_, mut b) = new_backup(tmp.path(), "b", &store);
    let out = store.apply(&rewrites_for("1.31"), &mut b).unwrap();
    assert_eq!(out.files_written, 26);
    assert_unchanged(&before_run, &node.join("run"), "runroot untouched");
    // Given explicitly, the runroot copies are written too (and only they change now).
    let store = CrioStore::with_options(
        &graph,
        CrioOptions {
            runroot: Some(node.join(RUN)),
            ..Default::default()
        },
    )
    .unwrap();
    let (_, mut b) = new_backup(tmp.path(), "b2", &store);
    let out = store.apply(&rewrites_for("1.31"), &mut b).unwrap();
    assert_eq!(out.files_written, 26);
    assert_eq!(out.changed.len(), 26);
}

#[test]
fn corrupt_runroot_copy_blocks_the_patch() {
    let tmp = tempfile::tempdir().unwrap();
    let node = copy_node(tmp.path());
    let id = "8717c4babc213a2a54c8eaff061fa3faa7263d912a5ceea808aec32b1616aa21";
    let run_cfg = node
        .join(RUN)
        .join("overlay-containers")
        .join(id)
        .join("userdata/config.json");
    let b = fs::read(&run_cfg).unwrap();
    fs::write(&run_cfg, &b[..100]).unwrap();
    let before = snapshot(&node);
    let store = open(&node);
    let (_, mut bk) = new_backup(tmp.path(), "b", &store);
    let err = store
        .apply(&rewrites_for("1.31"), &mut bk)
        .unwrap_err()
        .to_string();
    assert!(err.contains(&run_cfg.display().to_string()), "{err}");
    assert_unchanged(&before, &node, "corrupt runroot copy");
}

#[test]
fn unknown_sandbox_and_bad_values_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let node = copy_node(tmp.path());
    let before = snapshot(&node);
    let store = open(&node);
    let good = rewrites_for("1.31");
    let sandbox = "0d991a6a11d476fd1de4965502b3b335dd0f0ddc4cd2a235e84c018c6bfa12e9";
    let cases: Vec<(Rewrite, &str)> = vec![
        (
            Rewrite {
                id: "f".repeat(64),
                hash: "aa".parse().unwrap(),
                hash_without_resources: None,
            },
            "no record with id",
        ),
        (
            Rewrite {
                id: "../../../../etc".into(),
                hash: "aa".parse().unwrap(),
                hash_without_resources: None,
            },
            "no record with id",
        ),
        (
            Rewrite {
                id: sandbox.into(),
                hash: "aa".parse().unwrap(),
                hash_without_resources: None,
            },
            "not a kubelet container",
        ),
        (good[0].clone(), "given twice"),
    ];
    for (i, (bad, msg)) in cases.into_iter().enumerate() {
        let mut rw = good.clone();
        match rw.iter().position(|r| r.id == bad.id && r.hash != bad.hash) {
            Some(i) => rw[i] = bad,
            None => rw.push(bad),
        }
        let (_, mut b) = new_backup(tmp.path(), &format!("b{i}"), &store);
        let err = store.apply(&rw, &mut b).unwrap_err().to_string();
        assert!(err.contains(msg), "case {i}: {err}");
        assert_unchanged(&before, &node, msg);
    }
}

#[test]
fn used_backup_dir_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let node = copy_node(tmp.path());
    let store = open(&node);
    let (bdir, mut b) = new_backup(tmp.path(), "b", &store);
    store.apply(&rewrites_for("1.31"), &mut b).unwrap();
    let snap = snapshot(&node);
    let backup_snap = snapshot(&bdir);
    let e = Backup::create(&bdir, "crio", store.graphroot()).unwrap_err();
    assert!(e.to_string().contains("already holds a backup"), "{e}");
    assert_unchanged(&snap, &node, "store");
    assert_unchanged(&backup_snap, &bdir, "old backup");
}

#[test]
fn running_crio_is_detected_by_socket_and_pidfile() {
    let tmp = tempfile::tempdir().unwrap();
    let node = copy_node(tmp.path());
    let before = snapshot(&node);
    let sock = tmp.path().join("crio.sock");
    let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    let store = CrioStore::with_options(
        &node.join(GRAPH),
        CrioOptions {
            socket: Some(sock.clone()),
            ..Default::default()
        },
    )
    .unwrap();
    let (_, mut b) = new_backup(tmp.path(), "b", &store);
    let e = store.apply(&rewrites_for("1.31"), &mut b).unwrap_err();
    assert!(matches!(e, StoreError::RuntimeRunning { .. }), "{e}");
    assert!(e.to_string().contains("crio.sock"), "{e}");
    assert_unchanged(&before, &node, "running (socket)");
    // A stale socket file (CRI-O gone) does not count as running.
    drop(listener);
    assert!(sock.exists());
    store.ensure_stopped().unwrap();

    // A pid file naming a live process called crio.
    let fake = tmp.path().join("crio");
    fs::copy("/bin/sleep", &fake).unwrap();
    // Another test thread forking while the copy was open for writing can make exec fail
    // with ETXTBSY for a moment: retry.
    let mut child = (0..50)
        .find_map(
            |_| match std::process::Command::new(&fake).arg("30").spawn() {
                Ok(c) => Some(c),
                Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) => {
                    std::thread::sleep(std::time::Duration::from_millis(100));
                    None
                }
                Err(e) => panic!("spawning {}: {e}", fake.display()),
            },
        )
        .expect("exec kept failing with ETXTBSY");
    // Until the child has exec'd, its comm is still ours.
    let comm = format!("/proc/{}/comm", child.id());
    for _ in 0..100 {
        if fs::read_to_string(&comm).unwrap_or_default().trim() == "crio" {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let pidfile = tmp.path().join("crio.pid");
    fs::write(&pidfile, format!("{}\n", child.id())).unwrap();
    let store = CrioStore::with_options(
        &node.join(GRAPH),
        CrioOptions {
            socket: Some(sock.clone()),
            pidfile: Some(pidfile.clone()),
            ..Default::default()
        },
    )
    .unwrap();
    let r = store.ensure_stopped();
    child.kill().unwrap();
    child.wait().unwrap();
    let e = r.unwrap_err();
    assert!(matches!(e, StoreError::RuntimeRunning { .. }), "{e}");
    // Same pid file, process gone: stopped.
    store.ensure_stopped().unwrap();
    // A pid file naming another program is not CRI-O.
    fs::write(&pidfile, format!("{}\n", std::process::id())).unwrap();
    store.ensure_stopped().unwrap();
    fs::write(&pidfile, "garbage").unwrap();
    let e = store.ensure_stopped().unwrap_err();
    assert!(e.to_string().contains("not a pid"), "{e}");
}

/// A tmpfs of `size` mounted at a fresh directory, unmounted on drop.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Tmpfs {
        let dir = tempfile::tempdir().unwrap();
        let st = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .expect("running mount(8)");
        assert!(
            st.success(),
            "mounting a tmpfs failed: this test needs root (CI runs as root)"
        );
        Tmpfs { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Fills the file system up to the last byte.
    fn fill(&self) {
        use std::io::Write;
        let mut f = fs::File::create(self.path().join("filler")).unwrap();
        let chunk = vec![0u8; 4096];
        loop {
            if let Err(e) = f.write_all(&chunk) {
                assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "{e}");
                break;
            }
        }
        let one = [0u8; 1];
        while f.write_all(&one).is_ok() {}
        let _ = f.sync_all();
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg(self.dir.path())
            .status();
    }
}

#[test]
fn disk_full_changes_nothing() {
    // Store on a full tmpfs, backup elsewhere: staging the new files fails, nothing renamed.
    let fs_ = Tmpfs::mount("8m");
    let node = copy_node(fs_.path());
    fs_.fill();
    let before = snapshot(&node);
    let store = open(&node);
    let other = tempfile::tempdir().unwrap();
    let (_, mut b) = new_backup(other.path(), "b", &store);
    let e = store.apply(&rewrites_for("1.31"), &mut b).unwrap_err();
    assert!(
        matches!(&e, StoreError::Io { source, .. } if source.raw_os_error() == Some(libc::ENOSPC)),
        "{e}"
    );
    assert_unchanged(&before, &node, "disk full (store)");

    // Backup on the full tmpfs: taking the backup fails, the store is not touched.
    let store_tmp = tempfile::tempdir().unwrap();
    let node2 = copy_node(store_tmp.path());
    let before2 = snapshot(&node2);
    let store2 = open(&node2);
    fs::remove_file(fs_.path().join("filler")).unwrap();
    let bdir = fs_.path().join("backup");
    let mut b = Backup::create(&bdir, "crio", store2.graphroot()).unwrap();
    fs_.fill();
    let e = store2.apply(&rewrites_for("1.31"), &mut b).unwrap_err();
    assert!(e.to_string().contains("No space left"), "{e}");
    assert_unchanged(&before2, &node2, "disk full (backup)");
}

/// Crash sweep: kill a patching process (SIGKILL, `KUBELET_REHASH_CRASH_AT`) at every durable
/// step. After each crash every store file holds either its original or its new bytes, the
/// rollback of whatever backup exists gives back the original bytes, and a fresh patch then
/// produces the step4 VC bytes. The same test function is the child when `CRIO_CRASH_CHILD`
/// names a node to patch.
#[test]
fn crash_sweep_leaves_old_or_new_bytes_and_rolls_back() {
    const SELF: &str = "crash_sweep_leaves_old_or_new_bytes_and_rolls_back";
    let rewrites: Vec<Rewrite> = rewrites_for("1.31").into_iter().take(2).collect();
    if let Some(node) = std::env::var_os("CRIO_CRASH_CHILD") {
        let node = PathBuf::from(node);
        let store = open(&node);
        let mut b = Backup::create(&node.join("backup"), "crio", store.graphroot()).unwrap();
        store.apply(&rewrites, &mut b).unwrap();
        return;
    }
    let run_child = |node: &Path, crash_at: Option<u64>| {
        let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
        cmd.args(["--exact", SELF, "--test-threads=1", "--nocapture"])
            .env("CRIO_CRASH_CHILD", node)
            .env("KUBELET_REHASH_CRASH_LOG", "1")
            .env_remove("KUBELET_REHASH_CRASH_AT");
        if let Some(n) = crash_at {
            cmd.env("KUBELET_REHASH_CRASH_AT", n.to_string());
        }
        cmd.output().unwrap()
    };
    let tmp = tempfile::tempdir().unwrap();
    let pristine = copy_node(tmp.path());
    let original = snapshot(&pristine);
    let vc = fixture().join("step4/rewritten");
    let ids: Vec<&str> = rewrites.iter().map(|r| r.id.as_str()).collect();
    // The files the patch writes, with their VC bytes.
    let mut targets: BTreeMap<PathBuf, Vec<u8>> = BTreeMap::new();
    for base in [GRAPH, RUN] {
        for id in &ids {
            let rel = Path::new(base)
                .join("overlay-containers")
                .join(id)
                .join("userdata/config.json");
            targets.insert(rel.clone(), fs::read(vc.join(&rel)).unwrap());
        }
    }

    // Count the durable steps of an uninterrupted run.
    let dry = tmp.path().join("dry");
    testtools::tree::copy(&pristine, &dry);
    let out = run_child(&dry, None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let names: Vec<String> = String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter_map(|l| l.strip_prefix("kubelet-rehash fault point "))
        .filter_map(|l| l.split_once(": ").map(|(_, name)| name.to_string()))
        .collect();
    let points = names.len() as u64;
    // Every durable step is a point: the backup made durable (one syncfs) before the first of
    // the four files (graph and run copies of two containers) is renamed over, each rename,
    // and the syncfs after them.
    let at = |name: &str| names.iter().position(|n| n == name);
    assert!(
        at("backup-syncfs").is_some_and(|b| at("rename").is_some_and(|r| b < r))
            && names.iter().filter(|n| *n == "rename").count() >= 4
            && names.iter().filter(|n| *n == "syncfs").count() >= 2,
        "the sweep covers the backup's flush, every rename and the flushes around them: {names:?}"
    );
    eprintln!("crio crash sweep: {points} fault points");

    use std::os::unix::process::ExitStatusExt;
    for n in 1..=points {
        let node = tmp.path().join(format!("crash{n}"));
        testtools::tree::copy(&pristine, &node);
        let out = run_child(&node, Some(n));
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGKILL),
            "point {n} did not crash"
        );
        // Every file: original or new, never anything else; only our temp files are extra.
        let now = snapshot(&node);
        for (rel, (_, bytes)) in &now {
            if rel.starts_with("backup") {
                continue;
            }
            let Some(name) = rel.file_name().map(|n| n.to_string_lossy()) else {
                continue;
            };
            if name.contains(".rehash-tmp-") {
                fs::remove_file(node.join(rel)).unwrap();
                continue;
            }
            let orig = &original
                .get(rel)
                .unwrap_or_else(|| panic!("point {n}: new file {rel:?}"))
                .1;
            let ok = bytes == orig || targets.get(rel) == Some(bytes);
            assert!(
                ok,
                "point {n}: {} holds neither old nor new bytes",
                rel.display()
            );
        }
        for rel in original.keys() {
            assert!(
                now.contains_key(rel),
                "point {n}: {} vanished",
                rel.display()
            );
        }
        let bdir = node.join("backup");
        if bdir.join(backup::MANIFEST_NAME).exists() {
            backup::rollback(&bdir, false).unwrap();
        }
        let restored: BTreeMap<_, _> = snapshot(&node)
            .into_iter()
            .filter(|(k, _)| !k.starts_with("backup"))
            .collect();
        assert!(
            restored == original,
            "point {n}: rollback did not restore every byte"
        );
        // And the patch still completes afterwards.
        let store = open(&node);
        let mut b = Backup::create(&node.join("backup2"), "crio", store.graphroot()).unwrap();
        store.apply(&rewrites, &mut b).unwrap();
        for (rel, bytes) in &targets {
            assert!(
                fs::read(node.join(rel)).unwrap() == *bytes,
                "point {n}: {rel:?}"
            );
        }
        fs::remove_dir_all(&node).unwrap();
    }
}

/// Crash sweep of the rollback: patch a node, then kill a rollback (SIGKILL,
/// `KUBELET_REHASH_CRASH_AT`) at every durable step. After each crash every file holds its
/// patched or its original bytes (with its mode), and running the rollback again restores
/// every original byte. The same test function is the child when `CRIO_ROLLBACK_CRASH_CHILD`
/// names a backup to roll back.
#[test]
fn rollback_crash_sweep_leaves_old_or_new_bytes_and_reruns() {
    const SELF: &str = "rollback_crash_sweep_leaves_old_or_new_bytes_and_reruns";
    if let Some(bdir) = std::env::var_os("CRIO_ROLLBACK_CRASH_CHILD") {
        backup::rollback(Path::new(&bdir), false).unwrap();
        return;
    }
    let rewrites: Vec<Rewrite> = rewrites_for("1.31").into_iter().take(3).collect();
    let run_child = |bdir: &Path, crash_at: Option<u64>| {
        let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
        cmd.args(["--exact", SELF, "--test-threads=1", "--nocapture"])
            .env("CRIO_ROLLBACK_CRASH_CHILD", bdir)
            .env("KUBELET_REHASH_CRASH_LOG", "1")
            .env_remove("KUBELET_REHASH_CRASH_AT");
        if let Some(n) = crash_at {
            cmd.env("KUBELET_REHASH_CRASH_AT", n.to_string());
        }
        cmd.output().unwrap()
    };
    // A patched node (backup inside it) and its state before and after the patch.
    let patched_node = |dir: &Path| {
        let node = copy_node(dir);
        let before = snapshot(&node);
        let store = open(&node);
        let bdir = node.join("backup");
        let mut b = Backup::create(&bdir, "crio", store.graphroot()).unwrap();
        let out = store.apply(&rewrites, &mut b).unwrap();
        assert_eq!(out.files_written, 2 * rewrites.len());
        let after: BTreeMap<_, _> = snapshot(&node)
            .into_iter()
            .filter(|(k, _)| !k.starts_with("backup"))
            .collect();
        (node, bdir, before, after)
    };

    let tmp = tempfile::tempdir().unwrap();
    let dry = tmp.path().join("dry");
    let (node, bdir, original, _) = patched_node(&dry);
    let out = run_child(&bdir, None);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let points = String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| l.starts_with("kubelet-rehash fault point"))
        .count() as u64;
    // Per restored file one staged write and one rename, and two syncfs.
    assert!(
        points >= 4 * rewrites.len() as u64 + 2,
        "expected a fault point per durable step, saw {points}"
    );
    let restored: BTreeMap<_, _> = snapshot(&node)
        .into_iter()
        .filter(|(k, _)| !k.starts_with("backup"))
        .collect();
    assert!(
        restored == original,
        "the rollback did not restore every byte"
    );
    fs::remove_dir_all(&dry).unwrap();

    use std::os::unix::process::ExitStatusExt;
    for n in 1..=points {
        let dir = tmp.path().join(format!("crash{n}"));
        let (node, bdir, original, patched) = patched_node(&dir);
        let out = run_child(&bdir, Some(n));
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGKILL),
            "point {n} did not crash"
        );
        let now = snapshot(&node);
        for (rel, entry) in &now {
            if rel.starts_with("backup") {
                continue;
            }
            let name = rel.file_name().map(|n| n.to_string_lossy().into_owned());
            if name.is_some_and(|n| n.contains(".rehash-tmp-")) {
                fs::remove_file(node.join(rel)).unwrap();
                continue;
            }
            let ok = original.get(rel) == Some(entry) || patched.get(rel) == Some(entry);
            assert!(
                ok,
                "point {n}: {} holds neither its patched nor its original bytes and mode",
                rel.display()
            );
        }
        for rel in original.keys() {
            assert!(
                now.contains_key(rel),
                "point {n}: {} vanished",
                rel.display()
            );
        }
        backup::rollback(&bdir, false).unwrap();
        let restored: BTreeMap<_, _> = snapshot(&node)
            .into_iter()
            .filter(|(k, _)| !k.starts_with("backup"))
            .collect();
        assert!(
            restored == original,
            "point {n}: the second rollback did not restore every byte"
        );
        fs::remove_dir_all(&dir).unwrap();
    }
}

#[test]
fn node_file_warnings_follow_the_node() {
    let tmp = tempfile::tempdir().unwrap();
    let node = copy_node(tmp.path());
    let store = open(&node);
    let w = store.scan().unwrap().warnings;
    assert!(
        !w.iter().any(|w| w.code == "crio-unclean-shutdown"),
        "{w:?}"
    );
    fs::remove_file(node.join("var/lib/crio/clean.shutdown")).unwrap();
    fs::remove_file(node.join("run/crio/version")).unwrap();
    let w = store.scan().unwrap().warnings;
    assert!(
        w.iter()
            .any(|w| w.code == "crio-unclean-shutdown" && w.message.contains("internal_repair")),
        "{w:?}"
    );
    assert!(
        w.iter()
            .any(|w| w.code == "crio-version-file-missing" && w.message.contains("is missing")),
        "{w:?}"
    );
}

#[test]
fn precheck_refuses_a_node_every_crio_would_wipe() {
    let tmp = tempfile::tempdir().unwrap();
    let node = copy_node(tmp.path());
    let store = open(&node);
    store.precheck().expect("the node's own version file");
    let vf = node.join("run/crio/version");
    // a version file of another minor only wipes under that CRI-O: a warning, not a refusal
    fs::write(&vf, b"\"1.29.0\"").unwrap();
    store.precheck().expect("a parseable version file");
    for (bytes, why) in [
        (&b"1.30.14"[..], "not a JSON version string"),
        (b"\"x.y\"", "not a JSON version string"),
    ] {
        fs::write(&vf, bytes).unwrap();
        match store.precheck() {
            Err(StoreError::Refused(m)) => {
                assert!(m.contains(why) && m.contains("removes every pod"), "{m}")
            }
            other => panic!("{bytes:?}: {other:?}"),
        }
    }
    fs::remove_file(&vf).unwrap();
    match store.precheck() {
        Err(StoreError::Refused(m)) => {
            assert!(
                m.contains("is missing") && m.contains("nothing was written"),
                "{m}"
            )
        }
        other => panic!("missing version file: {other:?}"),
    }
    assert!(!vf.exists(), "the check never creates the version file");
}

/// Replaces the stored hash `from` with `to` in a config.json (plain and embedded annotation).
fn set_hash(cfg: &Path, from: &str, to: &str) {
    let b = String::from_utf8(fs::read(cfg).unwrap()).unwrap();
    let n = b.matches(from).count();
    assert!(n >= 1, "{} holds hash {from}", cfg.display());
    fs::write(cfg, b.replace(from, to)).unwrap();
}

/// The fixture container both runroot tests disturb.
const RUNROOT_CASE: &str = "8717c4babc213a2a54c8eaff061fa3faa7263d912a5ceea808aec32b1616aa21";

/// A node copy for the runroot tests: (its temp dir, the node, [`RUNROOT_CASE`]'s graphroot and
/// runroot `config.json`, the store).
fn runroot_case() -> (tempfile::TempDir, PathBuf, PathBuf, PathBuf, CrioStore) {
    let tmp = tempfile::tempdir().unwrap();
    let node = copy_node(tmp.path());
    let rel = Path::new("overlay-containers")
        .join(RUNROOT_CASE)
        .join("userdata/config.json");
    let (graph, run) = (node.join(GRAPH).join(&rel), node.join(RUN).join(&rel));
    let store = open(&node);
    (tmp, node, graph, run, store)
}

/// Issue 35, defect 4: a runroot copy whose plain `io.kubernetes.container.hash` annotation
/// differs from the graphroot copy's (its embedded `io.kubernetes.cri-o.Annotations` copy
/// agreeing) disagrees as much as one whose embedded copy differs: the scan reports it, the
/// plan makes it unproven, and the patch refuses it, writing nothing.
#[test]
fn runroot_copy_with_a_differing_plain_annotation_is_never_rewritten() {
    let (tmp, node, _, run_cfg, store) = runroot_case();
    let id = RUNROOT_CASE;
    let stored = by_id(&store.scan().unwrap().records)[id]
        .hash
        .clone()
        .unwrap();
    let foreign = format!("{:0>w$}", "1", w = stored.len());
    // only the plain key: `"io.kubernetes.container.hash": "<stored>"` (MarshalIndent), not
    // the escaped one inside the embedded string
    let text = String::from_utf8(fs::read(&run_cfg).unwrap()).unwrap();
    let plain = format!("\"io.kubernetes.container.hash\": \"{stored}\"");
    assert_eq!(text.matches(&plain).count(), 1, "one plain hash annotation");
    fs::write(
        &run_cfg,
        text.replace(
            &plain,
            &format!("\"io.kubernetes.container.hash\": \"{foreign}\""),
        ),
    )
    .unwrap();

    let rec = by_id(&store.scan().unwrap().records)[id].clone();
    let copy = rec
        .other_copy
        .expect("the scan reports the runroot copy whose plain annotation disagrees");
    assert_eq!(copy.location, run_cfg.display().to_string());
    assert_eq!(copy.hash.as_deref(), Some(foreign.as_str()));

    let before = snapshot(&node);
    let (_, mut bk) = new_backup(tmp.path(), "b", &store);
    let only: Vec<Rewrite> = rewrites_for("1.31")
        .into_iter()
        .filter(|r| r.id == id)
        .collect();
    let err = store.apply(&only, &mut bk).unwrap_err();
    assert!(
        err.is_refusal(),
        "a disagreeing plain annotation is a refusal: {err}"
    );
    assert!(
        err.to_string().contains(&foreign) && err.to_string().contains("unproven"),
        "the refusal names the copy's value: {err}"
    );
    assert_unchanged(
        &before,
        &node,
        "runroot copy with a differing plain annotation",
    );
}

/// A runroot copy of config.json whose hash differs from the graphroot copy's (and is not the
/// target's) makes the scan report it, and the patch refuses to rewrite that container: both
/// copies and every other file stay as they were. A runroot copy that already holds the
/// target (a patch interrupted after its runroot wave) is finished instead.
#[test]
fn disagreeing_runroot_copy_is_reported_and_never_rewritten() {
    let (tmp, node, graph_cfg, run_cfg, store) = runroot_case();
    let id = RUNROOT_CASE;
    let scan = store.scan().unwrap();
    let rec = by_id(&scan.records)[id].clone();
    assert_eq!(rec.other_copy, None, "the fixture's two copies agree");
    let stored = rec.hash.clone().unwrap();
    let foreign = format!("{:0>w$}", "1", w = stored.len());
    assert_ne!(foreign, stored);
    set_hash(&run_cfg, &stored, &foreign);

    let scan = store.scan().unwrap();
    let rec = by_id(&scan.records)[id].clone();
    let copy = rec
        .other_copy
        .expect("the scan reports the runroot copy that disagrees");
    assert_eq!(copy.location, run_cfg.display().to_string());
    assert_eq!(copy.hash.as_deref(), Some(foreign.as_str()));
    assert_eq!(
        rec.hash.as_deref(),
        Some(stored.as_str()),
        "record keeps the graphroot hash"
    );

    let before = snapshot(&node);
    let (_, mut bk) = new_backup(tmp.path(), "b", &store);
    let only: Vec<Rewrite> = rewrites_for("1.31")
        .into_iter()
        .filter(|r| r.id == id)
        .collect();
    let err = store.apply(&only, &mut bk).unwrap_err();
    assert!(err.is_refusal(), "a disagreeing copy is a refusal: {err}");
    let msg = err.to_string();
    assert!(
        msg.contains(&run_cfg.display().to_string()) && msg.contains("unproven"),
        "the refusal names the runroot copy: {msg}"
    );
    assert_unchanged(&before, &node, "disagreeing runroot copy");
    drop(bk);

    // The runroot copy already at the target: the rewrite finishes the graphroot copy.
    set_hash(&run_cfg, &foreign, &stored);
    let target = only[0].hash.to_string();
    set_hash(&run_cfg, &stored, &target);
    let (_, mut bk) = new_backup(tmp.path(), "b2", &store);
    let out = store.apply(&only, &mut bk).unwrap();
    assert_eq!(out.changed, [id.to_string()]);
    assert_eq!(out.files_written, 1, "only the graphroot copy was behind");
    let graph_now = String::from_utf8(fs::read(&graph_cfg).unwrap()).unwrap();
    assert!(graph_now.contains(&target), "graphroot copy at the target");
}

/// The node the real kubelet 1.30 made on CRI-O 1.36.3 (fixtures/nodes/crio-1.36,
/// scripts/make-node-fixture.sh): a patch to 1.31 changes, in every file it writes, the hash
/// values and nothing else, byte for byte (CRI-O 1.36's fields, known to us or not, stay in
/// place), leaves every other file alone, and rolls back exactly.
#[test]
fn crio_1_36_patch_changes_only_the_hash_values() {
    let src = testtools::fixtures_dir().join("nodes/crio-1.36");
    let exp: Value = serde_json::from_slice(&fs::read(src.join("expected.json")).unwrap()).unwrap();
    let t = tempfile::tempdir().unwrap();
    let node = t.path().join("node");
    testtools::tree::copy(&src.join("var"), &node.join("var"));
    testtools::tree::copy(&src.join("run"), &node.join("run"));
    let before = snapshot(&node);
    let store = CrioStore::with_options(
        &node.join(GRAPH),
        CrioOptions {
            runroot: Some(node.join(RUN)),
            ..CrioOptions::default()
        },
    )
    .unwrap();
    let scan = store.scan().unwrap();
    let old: BTreeMap<String, String> = scan
        .records
        .iter()
        .filter_map(|r| Some((r.id.clone(), r.hash.as_ref()?.to_string())))
        .collect();
    let rewrites: Vec<Rewrite> = exp["containers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["kind"] == "container")
        .map(|c| Rewrite {
            id: c["id"].as_str().unwrap().to_string(),
            hash: c["targets"]["1.31"]["hash"]
                .as_str()
                .unwrap()
                .parse()
                .unwrap(),
            hash_without_resources: None,
        })
        .collect();
    assert_eq!(rewrites.len(), 10, "the node's containers");
    let (bdir, mut b) = new_backup(t.path(), "backup", &store);
    let out = store.apply(&rewrites, &mut b).unwrap();
    assert_eq!(out.changed.len(), rewrites.len());
    let after = snapshot(&node);
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>(),
        "no file added or removed"
    );
    let mut written = 0;
    for (rel, (mode, bytes)) in &before {
        let (mode_after, now) = &after[rel];
        assert_eq!(mode, mode_after, "{}: mode kept", rel.display());
        let Some(rw) = rewrites
            .iter()
            .find(|rw| rel.to_string_lossy().contains(&rw.id))
            // the tool writes config.json only (runc and CRI-O regenerate their state.json:
            // the module docs)
            .filter(|_| rel.ends_with("userdata/config.json"))
        else {
            assert_eq!(
                bytes,
                now,
                "{}: a file the patch does not write",
                rel.display()
            );
            continue;
        };
        let text = String::from_utf8(bytes.clone()).unwrap();
        let want = text.replace(&old[&rw.id], &rw.hash.to_string());
        if want.as_bytes() != bytes.as_slice() {
            written += 1;
        }
        assert_eq!(
            String::from_utf8(now.clone()).unwrap(),
            want,
            "{}: the old bytes with the hash values replaced",
            rel.display()
        );
    }
    // each container's config.json in the graphroot and in the runroot
    assert_eq!(written, 2 * rewrites.len(), "files written");
    backup::rollback(&bdir, false).unwrap();
    assert_unchanged(&before, &node, "after rollback");
}
