//! Plan truth on node shapes the bundled nodes do not have as such, built in each test from the
//! real files the way a user's node would look: downgrades (a patch forward and back again).

mod common;

use common::{node, Node};
use rehash::{Action, From, Plan, Version};
use std::collections::BTreeMap;
use testtools::tree::snapshot;

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
    rehash::patch(&plan, store.as_ref(), &n.backup(backup), &rehash::Silent).expect("patch");
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

// ---- static pods ----------------------------------------------------------------------------

use rehash::static_pods::StaticManifests;
use rehash::NodeFiles;
use serde_json::{json, Value};

fn pods_of(n: &Node) -> Value {
    serde_json::from_slice(&std::fs::read(n.dir.join("pods.json")).unwrap()).unwrap()
}

/// The uid of a pod with a running container that the plan rewrites, and its index.
fn rewritten_pod(n: &Node, pods: &Value, to: &str) -> (usize, String) {
    let store = n.location.open().unwrap();
    let plan = Plan::build(
        &serde_json::to_vec(pods).unwrap(),
        store.as_ref(),
        From::Auto,
        to.parse().unwrap(),
    )
    .unwrap();
    let r = plan
        .records
        .iter()
        .find(|r| r.action == Action::Rewrite && r.would_restart_without_rewrite)
        .expect("a running container to rewrite");
    let uid = r.pod_uid.clone().unwrap();
    let i = pods["items"]
        .as_array()
        .unwrap()
        .iter()
        .position(|p| p["metadata"]["uid"] == uid.as_str())
        .unwrap();
    (i, uid)
}

/// Turns pod `i` into the mirror pod of a static pod whose kubelet UID is `kubelet_uid`, named
/// `<manifest>-<node>` as the kubelet names mirror pods; returns the manifest name.
fn make_mirror(pods: &mut Value, i: usize, kubelet_uid: &str) -> String {
    let pod = &mut pods["items"][i];
    let node = pod["spec"]["nodeName"].as_str().unwrap().to_string();
    let manifest = format!("static-{i}");
    pod["metadata"]["name"] = json!(format!("{manifest}-{node}"));
    pod["metadata"]["uid"] = json!("0a0a0a0a-1111-4222-8333-444444444444"); // the API server's
    let ann = pod["metadata"]
        .as_object_mut()
        .unwrap()
        .entry("annotations")
        .or_insert(json!({}));
    ann["kubernetes.io/config.mirror"] = json!(kubelet_uid);
    ann["kubernetes.io/config.hash"] = json!(kubelet_uid);
    ann["kubernetes.io/config.source"] = json!("file");
    manifest
}

fn manifests(n: &Node, pods: &Value, i: usize, name: &str, uid: Option<&str>) -> NodeFiles {
    let dir = n.tmp.path().join("manifests");
    std::fs::create_dir_all(&dir).unwrap();
    let ns = pods["items"][i]["metadata"]["namespace"].as_str().unwrap();
    let uid_line = uid.map(|u| format!("  uid: {u}\n")).unwrap_or_default();
    std::fs::write(
        dir.join(format!("{name}.yaml")),
        format!("apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\n  namespace: {ns}\n{uid_line}spec:\n  containers: []\n"),
    )
    .unwrap();
    NodeFiles {
        manifests: Some(StaticManifests::read(&dir).unwrap()),
        ..NodeFiles::default()
    }
}

fn plan_with(n: &Node, pods: &Value, to: &str, files: &NodeFiles) -> Plan {
    let store = n.location.open().unwrap();
    Plan::build_with(
        &serde_json::to_vec(pods).unwrap(),
        store.as_ref(),
        From::Auto,
        to.parse().unwrap(),
        files,
    )
    .expect("plan")
}

fn static_pod_cases(name: &str, to: &str) {
    let n = node(name);
    let mut pods = pods_of(&n);
    let baseline = plan_with(&n, &pods, to, &NodeFiles::default());
    let (i, uid) = rewritten_pod(&n, &pods, to);
    let manifest = make_mirror(&mut pods, i, &uid);
    let of_pod = |p: &Plan| -> Vec<rehash::PlanRecord> {
        p.records
            .iter()
            .filter(|r| r.pod_uid.as_deref() == Some(uid.as_str()))
            .cloned()
            .collect()
    };

    // No manifests on the node, a UID of the pinned (uuid) form: the pod is kept.
    let plan = plan_with(&n, &pods, to, &NodeFiles::default());
    let recs = of_pod(&plan);
    assert!(!recs.is_empty());
    for r in &recs {
        assert!(
            r.static_pod,
            "{name} {}: matched through the mirror pod",
            r.id
        );
        assert_ne!(
            r.action,
            Action::Orphan,
            "{name} {}: a static pod's container is never orphan",
            r.id
        );
    }
    assert_eq!(
        plan.summary, baseline.summary,
        "{name}: a static pod with a pinned UID plans like the same pod from the API"
    );
    let json: Value = serde_json::from_slice(&plan.to_json()).unwrap();
    assert!(
        json["records"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["static_pod"] == true),
        "{name}: the report marks static pods"
    );

    // The manifest pins the UID: kept.
    let pinned = manifests(&n, &pods, i, &manifest, Some(&uid));
    let plan = plan_with(&n, &pods, to, &pinned);
    assert_eq!(
        plan.summary, baseline.summary,
        "{name}: a pinned UID keeps the pod"
    );

    // The manifest sets no uid: the kubelet derived it, the target derives another one.
    let derived = manifests(&n, &pods, i, &manifest, None);
    let plan = plan_with(&n, &pods, to, &derived);
    let running: Vec<_> = of_pod(&plan)
        .into_iter()
        .filter(|r| {
            r.kind == rehash::plan::RecordClass::Container
                && r.state == Some(rehash::pods::ContainerState::Running)
        })
        .collect();
    assert!(!running.is_empty());
    for r in &running {
        assert!(
            r.would_restart_after_rewrite && r.reason.contains("derived UID"),
            "{name} {}: a derived-UID static pod restarts under another kubelet: {}",
            r.id,
            r.reason
        );
    }
    assert_eq!(
        plan.summary.would_restart_after_rewrite,
        baseline.summary.would_restart_after_rewrite + running.len(),
        "{name}: the derived-UID pod's running containers are counted"
    );
    assert!(
        plan.summary.sentence.contains("static pods"),
        "{name}: the sentence says why: {}",
        plan.summary.sentence
    );
}

#[test]
fn static_pods_through_mirror_pods_on_every_node() {
    static_pod_cases("containerd-1.7", "1.31");
    static_pod_cases("containerd-1.6", "1.31");
    static_pod_cases("docker-20.10", "1.23");
    static_pod_cases("crio-1.30", "1.31");
}

#[test]
fn a_derived_uid_is_recognised_by_its_form_without_manifests() {
    // A Docker node whose static pod got its UID from the kubelet (32 hex digits): rewrite the
    // uid in that pod's container files as such a node would have it.
    let n = node("docker-20.10");
    let mut pods = pods_of(&n);
    let (i, uid) = rewritten_pod(&n, &pods, "1.23");
    let derived = "5d2c2b1c6e8f4a0b9c3d7e1f2a4b6c8d";
    for d in std::fs::read_dir(n.dir.join("var/lib/docker/containers")).unwrap() {
        let d = d.unwrap().path();
        for f in ["config.v2.json", "hostconfig.json"] {
            let p = d.join(f);
            let b = std::fs::read_to_string(&p).unwrap();
            if b.contains(&uid) {
                std::fs::write(&p, b.replace(&uid, derived)).unwrap();
            }
        }
    }
    make_mirror(&mut pods, i, derived);
    let plan = plan_with(&n, &pods, "1.23", &NodeFiles::default());
    let recs: Vec<_> = plan
        .records
        .iter()
        .filter(|r| r.pod_uid.as_deref() == Some(derived))
        .collect();
    assert!(!recs.is_empty());
    assert!(recs
        .iter()
        .all(|r| r.static_pod && r.action != Action::Orphan));
    assert!(
        recs.iter()
            .any(|r| r.would_restart_after_rewrite && r.reason.contains("derived (md5) form")),
        "a 32-hex kubelet UID without a manifest counts as derived: {recs:#?}"
    );
}

#[test]
fn a_manifest_dir_with_an_unparsable_file_is_refused_by_name() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(
        d.path().join("kube-apiserver.yaml"),
        "kind: Pod\nmetadata: {name: [",
    )
    .unwrap();
    let e = StaticManifests::read(d.path()).unwrap_err();
    assert!(
        e.to_string().contains("kube-apiserver.yaml"),
        "the message names the file: {e}"
    );
}

// ---- in-place resize ------------------------------------------------------------------------

#[test]
fn a_container_resized_in_place_is_proven_by_hash_without_resources_and_rewritten() {
    // containerd 1.7 runs kubelet 1.30 with InPlacePodVerticalScaling: records carry
    // hashWithoutResources. Resize one running container's spec as the API server would show
    // it after `kubectl patch --subresource resize`.
    let n = node("containerd-1.7");
    let mut pods = pods_of(&n);
    let before = plan_with(&n, &pods, "1.31", &NodeFiles::default());
    let victim = before
        .records
        .iter()
        .find(|r| {
            r.action == Action::Rewrite
                && r.would_restart_without_rewrite
                && r.stored_hash_without_resources.is_some()
        })
        .expect("a running 1.30 container with hashWithoutResources");
    let (uid, cname) = (
        victim.pod_uid.clone().unwrap(),
        victim.container.clone().unwrap(),
    );
    for p in pods["items"].as_array_mut().unwrap() {
        if p["metadata"]["uid"] == uid.as_str() {
            for c in p["spec"]["containers"].as_array_mut().unwrap() {
                if c["name"] == cname.as_str() {
                    c["resources"] = json!({"limits": {"cpu": "777m", "memory": "333Mi"}, "requests": {"cpu": "777m", "memory": "333Mi"}});
                }
            }
        }
    }
    let plan = plan_with(&n, &pods, "1.31", &NodeFiles::default());
    let r = plan.records.iter().find(|r| r.id == victim.id).unwrap();
    assert_ne!(
        r.from_hash, victim.from_hash,
        "the resize changed what 1.30 computes as hash"
    );
    assert_eq!(r.action, Action::Rewrite, "resized: {}", r.reason);
    assert!(r.reason.contains("resized in place"), "{}", r.reason);
    assert!(!r.would_restart_after_rewrite);
    // (1.31 hashes no resources, so its target equals the unresized one's.)
    // The same spec change without the stored hashWithoutResources to vouch for it would be
    // unproven: the proof really rests on that annotation. A 1.30 -> 1.30 plan sees the hash
    // mismatch too.
    let store = n.location.open().unwrap();
    let done = rehash::patch(&plan, store.as_ref(), &n.backup("bk"), &rehash::Silent).unwrap();
    assert_eq!(done.changed, before.rewrites().len());
    let after = plan_with(&n, &pods, "1.31", &NodeFiles::default());
    let r = after.records.iter().find(|r| r.id == victim.id).unwrap();
    assert_eq!(
        (r.action, r.would_restart_without_rewrite),
        (Action::Unchanged, false),
        "after the patch kubelet 1.31 keeps the resized container"
    );
}

#[test]
fn a_resized_container_rewritten_to_1_29_gets_both_hashes() {
    let n = node("containerd-1.7");
    let mut pods = pods_of(&n);
    let before = plan_with(&n, &pods, "1.29", &NodeFiles::default());
    // 1.30 -> 1.29 is a downgrade with equal hashes for most specs; resize one container so
    // that both values must be recomputed for the target.
    let victim = before
        .records
        .iter()
        .find(|r| {
            r.stored_hash_without_resources.is_some()
                && r.state == Some(rehash::pods::ContainerState::Running)
        })
        .unwrap()
        .clone();
    for p in pods["items"].as_array_mut().unwrap() {
        if p["metadata"]["uid"] == victim.pod_uid.as_deref().unwrap() {
            for c in p["spec"]["containers"].as_array_mut().unwrap() {
                if c["name"] == victim.container.as_deref().unwrap() {
                    c["resources"] =
                        json!({"limits": {"cpu": "1234m"}, "requests": {"cpu": "1234m"}});
                }
            }
        }
    }
    let plan = plan_with(&n, &pods, "1.29", &NodeFiles::default());
    let r = plan.records.iter().find(|r| r.id == victim.id).unwrap();
    assert_eq!(r.action, Action::Rewrite, "{}", r.reason);
    assert!(r.reason.contains("resized in place"), "{}", r.reason);
    assert!(
        r.target_hash_without_resources.is_some(),
        "a 1.27–1.30 target writes hashWithoutResources where the record carries it"
    );
    assert_ne!(
        r.target_hash.map(|h| h.to_string()),
        r.stored_hash,
        "1.29 hashes the new resources"
    );
}

// ---- the pods file belongs to this node -----------------------------------------------------

fn expect_foreign(n: &Node, pods: &Value, from: From, names: &[&str]) {
    let store = n.location.open().unwrap();
    let e = Plan::build(
        &serde_json::to_vec(pods).unwrap(),
        store.as_ref(),
        from,
        "1.31".parse().unwrap(),
    )
    .unwrap_err();
    assert!(matches!(e, rehash::Error::ForeignPods(_)), "{e}");
    assert_eq!(e.class(), rehash::ErrorClass::Refused, "exit 3");
    for name in names {
        assert!(e.to_string().contains(name), "names node {name}: {e}");
    }
}

fn renode(pods: &mut Value, node: &str, uid_prefix: &str) {
    for (i, p) in pods["items"].as_array_mut().unwrap().iter_mut().enumerate() {
        p["spec"]["nodeName"] = json!(node);
        p["metadata"]["uid"] = json!(format!("{uid_prefix}-{i:04}"));
    }
}

#[test]
fn another_nodes_pods_file_is_refused_with_the_node_names() {
    let n = node("containerd-1.7");
    // Another node's file (its own pods and uids), with --from auto and an explicit --from.
    let mut other = pods_of(&node("docker-20.10"));
    renode(&mut other, "node-7", "b7");
    expect_foreign(&n, &other, From::Auto, &["node-7"]);
    expect_foreign(
        &n,
        &other,
        From::Version("1.30".parse().unwrap()),
        &["node-7"],
    );

    // A file of several nodes, this node's pods among one of them: planned, with a hazard.
    let mut multi = pods_of(&n);
    let items = multi["items"].as_array_mut().unwrap();
    items.extend(other["items"].as_array().unwrap().iter().cloned());
    let plan = plan_with(&n, &multi, "1.31", &NodeFiles::default());
    assert!(
        plan.hazards
            .iter()
            .any(|h| h.code == "pods-file-multi-node"),
        "{:?}",
        plan.warnings
    );
    let alone = plan_with(&n, &pods_of(&n), "1.31", &NodeFiles::default());
    assert_eq!(
        plan.summary, alone.summary,
        "the other node's pods change nothing"
    );

    // The store's pods spread over two nodes of the file: refused, naming both.
    let mut split = pods_of(&n);
    for (i, p) in split["items"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .enumerate()
    {
        if i % 2 == 1 {
            p["spec"]["nodeName"] = json!("node-2");
        }
    }
    expect_foreign(&n, &split, From::Auto, &["node-1", "node-2"]);

    // A pods file without nodeName (a hand-made list) is taken as it is.
    let mut bare = pods_of(&n);
    for p in bare["items"].as_array_mut().unwrap() {
        p["spec"].as_object_mut().unwrap().remove("nodeName");
    }
    plan_with(&n, &bare, "1.31", &NodeFiles::default());
}

// ---- kubelet checkpoints --------------------------------------------------------------------

/// A kubelet dir holding the checkpoint files of a case under fixtures/checkpoints (written
/// by real Go code of the kubelet's checkpoint structs, tools/kubelet-checkpoints).
fn kubelet_dir(n: &Node, cases: &[&str]) -> std::path::PathBuf {
    let dir = n.tmp.path().join("var-lib-kubelet");
    std::fs::create_dir_all(&dir).unwrap();
    for case in cases {
        let st = std::process::Command::new("cp")
            .arg("-a")
            .arg(format!(
                "{}/.",
                testtools::fixtures_dir()
                    .join("checkpoints")
                    .join(case)
                    .display()
            ))
            .arg(&dir)
            .status()
            .unwrap();
        assert!(st.success());
        let _ = std::fs::remove_file(dir.join("verdicts.json"));
    }
    dir
}

fn with_kubelet_dir(dir: &std::path::Path) -> NodeFiles {
    NodeFiles {
        kubelet_dir: Some(dir.to_path_buf()),
        ..NodeFiles::default()
    }
}

#[test]
fn a_rejected_checkpoint_blocks_the_patch_until_it_is_set_aside_and_rollback_restores_it() {
    let n = node("containerd-1.7");
    let pods = pods_of(&n);
    let kd = kubelet_dir(&n, &["dra-1.30-claim"]);
    let dra = kd.join("dra_manager_state");
    let dra_bytes = std::fs::read(&dra).unwrap();
    let plan = plan_with(&n, &pods, "1.31", &with_kubelet_dir(&kd));
    let h = plan
        .hazards
        .iter()
        .find(|h| h.code == "checkpoint-rejected")
        .expect("kubelet 1.31 rejects a 1.30 dra_manager_state");
    assert_eq!(h.severity, rehash::Severity::Block);
    assert_eq!(h.files, vec![dra.display().to_string()]);
    assert!(
        h.reference.as_deref().is_some_and(|r| r.contains("127653")),
        "names the upstream issue: {h:?}"
    );
    assert!(h.message.contains("1.31"), "{}", h.message);

    // Without the flag: refused, exit 3, nothing written anywhere.
    let before = snapshot(&n.dir);
    let store = n.location.open().unwrap();
    let e = rehash::patch(
        &plan,
        store.as_ref(),
        &n.backup("bk-refused"),
        &rehash::Silent,
    )
    .unwrap_err();
    assert!(matches!(e, rehash::Error::Blocked(_)), "{e}");
    assert_eq!(e.class(), rehash::ErrorClass::Refused);
    assert!(e.to_string().contains("checkpoint-rejected"), "{e}");
    assert!(
        snapshot(&n.dir) == before,
        "a refused patch changed the store"
    );
    assert_eq!(std::fs::read(&dra).unwrap(), dra_bytes);
    assert!(!n.tmp.path().join("bk-refused/manifest.json").exists());

    // With it: set aside into the backup (a manifest entry like every other copy).
    let mut opts = n.backup("bk");
    opts.set_aside_checkpoints = true;
    let done = rehash::patch(&plan, store.as_ref(), &opts, &rehash::Silent).unwrap();
    assert_eq!(done.set_aside, vec![dra.clone()]);
    assert!(
        !dra.exists(),
        "the rejected checkpoint is out of the kubelet's way"
    );
    let manifest = storepatch::backup::read_manifest(&opts.dir).unwrap();
    assert!(
        manifest.entries.iter().any(|e| e.path == dra
            && e.set_aside
            && e.sha256_original == storepatch::backup::sha256_hex(&dra_bytes)),
        "the manifest records the set-aside file with its sha256"
    );
    // The plan after the patch has nothing left to block on.
    let again = plan_with(&n, &pods, "1.31", &with_kubelet_dir(&kd));
    assert!(again
        .hazards
        .iter()
        .all(|h| h.severity != rehash::Severity::Block));

    rehash::rollback(&opts.dir, &n.location, false).unwrap();
    assert_eq!(
        std::fs::read(&dra).unwrap(),
        dra_bytes,
        "rollback puts the checkpoint back byte for byte"
    );
    assert!(snapshot(&n.dir) == before, "and the store too");
}

#[test]
fn a_value_rollback_puts_set_aside_checkpoints_back_too() {
    let n = node("containerd-1.7");
    let pods = pods_of(&n);
    let kd = kubelet_dir(&n, &["dra-1.30-claim"]);
    let dra = kd.join("dra_manager_state");
    let dra_bytes = std::fs::read(&dra).unwrap();
    let plan = plan_with(&n, &pods, "1.31", &with_kubelet_dir(&kd));
    let store = n.location.open().unwrap();
    let mut opts = n.backup("bk");
    opts.set_aside_checkpoints = true;
    rehash::patch(&plan, store.as_ref(), &opts, &rehash::Silent).unwrap();
    assert!(!dra.exists());
    rehash::rollback_values(&opts.dir, store.as_ref(), &opts.state).unwrap();
    assert_eq!(std::fs::read(&dra).unwrap(), dra_bytes);
}

/// Issue 35, defect 2: once the new kubelet has written its own checkpoint where the patch
/// set ours aside (a 1.31 kubelet writes `dra_manager_state` at start), both rollbacks keep
/// its file in the backup and put ours back, instead of refusing with no way out.
#[test]
fn rollback_keeps_the_checkpoint_a_newer_kubelet_wrote_and_puts_ours_back() {
    use storepatch::backup::RollbackAction;
    let theirs = std::fs::read(
        testtools::fixtures_dir().join("checkpoints/dra-1.31-claim/dra_manager_state"),
    )
    .unwrap();
    for values in [false, true] {
        let n = node("containerd-1.7");
        let pods = pods_of(&n);
        let kd = kubelet_dir(&n, &["dra-1.30-claim"]);
        let dra = kd.join("dra_manager_state");
        let ours = std::fs::read(&dra).unwrap();
        let before = snapshot(&n.dir);
        let plan = plan_with(&n, &pods, "1.31", &with_kubelet_dir(&kd));
        let store = n.location.open().unwrap();
        let mut opts = n.backup("bk");
        opts.set_aside_checkpoints = true;
        rehash::patch(&plan, store.as_ref(), &opts, &rehash::Silent).unwrap();
        // the new kubelet starts and writes its own
        std::fs::write(&dra, &theirs).unwrap();
        let report = if values {
            rehash::rollback_values(&opts.dir, store.as_ref(), &opts.state)
                .unwrap_or_else(|e| panic!("value rollback: {e}"))
                .set_aside
        } else {
            rehash::rollback(&opts.dir, &n.location, false)
                .unwrap_or_else(|e| panic!("byte rollback: {e}"))
        };
        assert_eq!(
            std::fs::read(&dra).unwrap(),
            ours,
            "values={values}: our checkpoint is back byte for byte"
        );
        let kept = rehash::rollback::kept_newer(&report);
        assert_eq!(kept.len(), 1, "values={values}: one file kept: {report:?}");
        assert_eq!(
            kept[0].0, dra,
            "values={values}: the file kept is the checkpoint"
        );
        assert!(
            kept[0]
                .1
                .starts_with(opts.dir.join(storepatch::backup::WRITTEN_SINCE_DIR)),
            "values={values}: kept inside the backup: {}",
            kept[0].1.display()
        );
        assert_eq!(
            std::fs::read(&kept[0].1).unwrap(),
            theirs,
            "values={values}: the newer kubelet's file is kept byte for byte"
        );
        if !values {
            assert!(snapshot(&n.dir) == before, "the store is back too");
        }
        // a second rollback finds everything in place and writes nothing
        let again = if values {
            rehash::rollback_values(&opts.dir, store.as_ref(), &opts.state)
                .unwrap()
                .set_aside
        } else {
            rehash::rollback(&opts.dir, &n.location, false).unwrap()
        };
        assert!(
            again
                .files
                .iter()
                .all(|(_, a)| *a == RollbackAction::AlreadyOriginal),
            "values={values}: a rerun is idempotent: {again:?}"
        );
    }
}

/// Issue 38: the CPU (V3) and memory (V2) checkpoints kubelet 1.36 writes with
/// PodLevelResourceManagers on, made by the real 1.36.5 code (fixtures/checkpoints-module).
/// The real kubelets refuse them below 1.36 and on 1.36 without the gate, accept them on 1.37:
/// the plan says so per target and the kubelet's config.yaml, and `--set-aside-checkpoints`
/// moves them out of a back-out's way with a byte-exact rollback.
#[test]
fn the_pod_level_checkpoints_of_1_36_block_a_back_out_and_are_set_aside_with_rollback() {
    let n = node("containerd-1.7");
    let pods = pods_of(&n);
    let kd = n.tmp.path().join("var-lib-kubelet");
    std::fs::create_dir_all(&kd).unwrap();
    let mut files = Vec::new();
    for (case, file) in [
        ("cpu-static-1.36-plrm", "cpu_manager_state"),
        ("memory-static-1.36-plrm", "memory_manager_state"),
    ] {
        let bytes = std::fs::read(
            testtools::fixtures_dir()
                .join("checkpoints-module")
                .join(case)
                .join(file),
        )
        .unwrap();
        std::fs::write(kd.join(file), &bytes).unwrap();
        files.push((kd.join(file), bytes));
    }
    let rejected = |p: &Plan| -> Vec<String> {
        let mut f: Vec<String> = p
            .hazards
            .iter()
            .filter(|h| h.code == "checkpoint-rejected")
            .flat_map(|h| {
                assert_eq!(h.severity, rehash::Severity::Block, "{h:?}");
                h.files.clone()
            })
            .collect();
        f.sort();
        f
    };
    let both: Vec<String> = files.iter().map(|(p, _)| p.display().to_string()).collect();

    let back = plan_with(&n, &pods, "1.35", &with_kubelet_dir(&kd));
    assert_eq!(
        rejected(&back),
        both,
        "a back-out to 1.35 is blocked on both pod-level checkpoints"
    );
    assert_eq!(
        rejected(&plan_with(&n, &pods, "1.36", &with_kubelet_dir(&kd))),
        both,
        "1.36 without the gate in config.yaml refuses them too"
    );
    assert!(
        rejected(&plan_with(&n, &pods, "1.37", &with_kubelet_dir(&kd))).is_empty(),
        "1.37 reads them"
    );
    std::fs::write(
        kd.join("config.yaml"),
        "kind: KubeletConfiguration\nfeatureGates:\n  PodLevelResourceManagers: true\n",
    )
    .unwrap();
    assert!(
        rejected(&plan_with(&n, &pods, "1.36", &with_kubelet_dir(&kd))).is_empty(),
        "1.36 with the gate in its config.yaml reads them"
    );
    assert_eq!(
        rejected(&plan_with(&n, &pods, "1.35", &with_kubelet_dir(&kd))),
        both,
        "the gate does not help 1.35"
    );

    let store = n.location.open().unwrap();
    let mut opts = n.backup("bk");
    opts.set_aside_checkpoints = true;
    let done = rehash::patch(&back, store.as_ref(), &opts, &rehash::Silent).unwrap();
    let mut set_aside = done.set_aside.clone();
    set_aside.sort();
    assert_eq!(
        set_aside,
        files.iter().map(|(p, _)| p.clone()).collect::<Vec<_>>(),
        "both files are set aside"
    );
    assert!(files.iter().all(|(p, _)| !p.exists()));
    assert!(
        rejected(&plan_with(&n, &pods, "1.35", &with_kubelet_dir(&kd))).is_empty(),
        "nothing left to block a 1.35 start"
    );
    rehash::rollback(&opts.dir, &n.location, false).unwrap();
    for (p, bytes) in &files {
        assert_eq!(
            &std::fs::read(p).unwrap(),
            bytes,
            "rollback puts {} back byte for byte",
            p.display()
        );
    }
}

#[test]
fn checkpoint_verdicts_follow_the_version_pair() {
    let n = node("containerd-1.7");
    let pods = pods_of(&n);
    // Accepted: a 1.30 DRA checkpoint under a 1.30 target (no hazard); rejected by 1.31; a
    // 1.31 one rejected by a downgrade to 1.30 after an upgrade.
    let kd = kubelet_dir(&n, &["dra-1.30-claim"]);
    let codes = |p: &Plan| p.hazards.iter().map(|h| h.code.clone()).collect::<Vec<_>>();
    let same = plan_with(&n, &pods, "1.30", &with_kubelet_dir(&kd));
    assert!(
        !codes(&same).iter().any(|c| c.starts_with("checkpoint")),
        "{:?}",
        same.warnings
    );
    std::fs::remove_dir_all(&kd).unwrap();
    let kd = kubelet_dir(&n, &["dra-1.31-claim"]);
    patch_to(
        &n,
        &serde_json::to_vec(&pods).unwrap(),
        From::Auto,
        "1.31",
        "bk-up",
    );
    let down = plan_with(&n, &pods, "1.30", &with_kubelet_dir(&kd));
    assert!(
        codes(&down).contains(&"checkpoint-rejected".to_string()),
        "kubelet 1.30 rejects a 1.31 dra_manager_state: {:?}",
        down.warnings
    );

    // A device-manager checkpoint of 1.19 under 1.20: rejected but the kubelet runs on (warn).
    let d = node("docker-20.10");
    let kd = kubelet_dir(&d, &["device-1.19", "cpu-1.17-static"]);
    let plan = plan_with(&d, &pods_of(&d), "1.20", &with_kubelet_dir(&kd));
    let dev = plan
        .hazards
        .iter()
        .find(|h| h.code == "checkpoint-state-lost")
        .expect("1.20 drops a 1.19 device checkpoint");
    assert_eq!(dev.severity, rehash::Severity::Warn);
    assert!(
        !codes(&plan).contains(&"checkpoint-rejected".to_string()),
        "1.20 accepts a 1.17 cpu_manager_state: {:?}",
        plan.warnings
    );
}

#[test]
fn bad_checkpoint_files_are_clear_errors_and_change_nothing() {
    let n = node("containerd-1.7");
    let pods = pods_of(&n);
    let before = snapshot(&n.dir);
    let kd = n.tmp.path().join("kubelet");
    std::fs::create_dir(&kd).unwrap();
    let store = n.location.open().unwrap();
    let try_plan = || {
        Plan::build_with(
            &serde_json::to_vec(&pods).unwrap(),
            store.as_ref(),
            From::Auto,
            "1.31".parse().unwrap(),
            &with_kubelet_dir(&kd),
        )
    };
    for (what, setup) in [
        (
            "not JSON",
            &(|p: &std::path::Path| std::fs::write(p, b"\x00garbage").unwrap())
                as &dyn Fn(&std::path::Path),
        ),
        ("unknown shape", &|p: &std::path::Path| {
            std::fs::write(p, br#"{"what": 1}"#).unwrap()
        }),
        ("a symlink", &|p: &std::path::Path| {
            std::os::unix::fs::symlink("/etc/hostname", p).unwrap()
        }),
    ] {
        let f = kd.join("cpu_manager_state");
        let _ = std::fs::remove_file(&f);
        setup(&f);
        let e = try_plan().unwrap_err();
        assert!(matches!(e, rehash::Error::Checkpoint(_)), "{what}: {e}");
        assert_eq!(e.class(), rehash::ErrorClass::Usage, "{what}: exit 2");
        assert!(
            e.to_string().contains("cpu_manager_state"),
            "{what}: names the file: {e}"
        );
    }
    let e = Plan::build_with(
        &serde_json::to_vec(&pods).unwrap(),
        store.as_ref(),
        From::Auto,
        "1.31".parse().unwrap(),
        &with_kubelet_dir(&n.tmp.path().join("no-such-dir")),
    )
    .unwrap_err();
    assert!(e.to_string().contains("no-such-dir"), "{e}");
    assert!(
        snapshot(&n.dir) == before,
        "bad checkpoint input changed nothing"
    );
}

/// Kubelet 1.35+ refuses a cgroup v1 host unless its config sets `failCgroupV1: false` (the
/// real 1.35 kubelet did, on the lab, after a 1.34 → 1.35 upgrade: docs/lab.md). The plan
/// blocks on it, naming the config file, exactly when all three hold: target 1.35+, a v1
/// hierarchy, and a config.yaml without the setting.
#[test]
fn a_cgroup_v1_node_whose_kubelet_config_does_not_allow_it_blocks_1_35_and_later() {
    let n = node("containerd-1.7");
    let pods = pods_of(&n);
    let kd = n.tmp.path().join("var-lib-kubelet");
    std::fs::create_dir_all(&kd).unwrap();
    let v1 = n.tmp.path().join("cgroup-v1");
    std::fs::create_dir_all(v1.join("memory")).unwrap();
    let v2 = n.tmp.path().join("cgroup-v2");
    std::fs::create_dir_all(&v2).unwrap();
    std::fs::write(v2.join("cgroup.controllers"), "cpu memory pids\n").unwrap();
    let files = |cgroup: &std::path::Path| NodeFiles {
        kubelet_dir: Some(kd.clone()),
        cgroup_fs: Some(cgroup.to_path_buf()),
        ..NodeFiles::default()
    };
    let blocked = |to: &str, cgroup: &std::path::Path| {
        plan_with(&n, &pods, to, &files(cgroup))
            .hazards
            .into_iter()
            .find(|h| h.code == "kubelet-refuses-cgroup-v1")
    };
    let config = kd.join("config.yaml");
    let kubeadm = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncgroupDriver: systemd\n";
    std::fs::write(&config, kubeadm).unwrap();
    for to in ["1.35", "1.36", "1.37"] {
        let h = blocked(to, &v1).unwrap_or_else(|| panic!("{to} on cgroup v1 blocks"));
        assert_eq!(h.severity, rehash::Severity::Block);
        assert_eq!(h.files, vec![config.display().to_string()]);
        assert!(h.message.contains("failCgroupV1: false"), "{}", h.message);
    }
    assert!(
        blocked("1.34", &v1).is_none(),
        "1.34 still runs on cgroup v1 by default"
    );
    assert!(blocked("1.35", &v2).is_none(), "a cgroup v2 node is fine");
    for allowed in [
        "failCgroupV1: false\n",
        "  failCgroupV1:   false  \n",
        "\"failCgroupV1\": false,\n",
    ] {
        std::fs::write(&config, format!("{kubeadm}{allowed}")).unwrap();
        assert!(
            blocked("1.35", &v1).is_none(),
            "the config allows it: {allowed:?}"
        );
    }
    std::fs::write(&config, format!("{kubeadm}failCgroupV1: true\n")).unwrap();
    assert!(
        blocked("1.35", &v1).is_some(),
        "failCgroupV1: true still refuses"
    );
    std::fs::remove_file(&config).unwrap();
    assert!(
        blocked("1.35", &v1).is_none(),
        "no config.yaml in the kubelet dir: nothing read, nothing said"
    );
}

// ---- what the API server said (issue 36) ----------------------------------------------------

fn with_api(server_version: &str, node_kubelet_version: &str) -> NodeFiles {
    NodeFiles {
        api: Some(rehash::ApiFacts {
            server: "https://10.0.0.1:6443".into(),
            identity: "system:node:worker-1 (groups system:nodes)".into(),
            server_version: server_version.into(),
            node: "worker-1".into(),
            node_kubelet_version: node_kubelet_version.into(),
        }),
        ..NodeFiles::default()
    }
}

fn codes_of(p: &Plan) -> Vec<(String, rehash::Severity)> {
    p.hazards
        .iter()
        .filter(|h| h.code.starts_with("kubelet-"))
        .map(|h| (h.code.clone(), h.severity))
        .collect()
}

/// The demo node on 1.31 hashes (1.31 to 1.38 hash these specs alike), as after an upgrade to
/// 1.31: `--from auto` has several candidates there, which a witness of the version settles.
fn demo_node_on_1_31() -> (Node, Value) {
    let n = node("containerd-1.7");
    let pods = pods_of(&n);
    patch_to(
        &n,
        &serde_json::to_vec(&pods).unwrap(),
        From::Auto,
        "1.31",
        "bk-to-1.31",
    );
    (n, pods)
}

/// A version up to 1.31 the stored hashes rule out.
fn ruled_out(auto: &Plan) -> hashcompat::KubeletVersion {
    hashcompat::KubeletVersion::all()
        .into_iter()
        .find(|v| !auto.from_candidates.contains(v) && v.minor() <= 31)
        .unwrap()
}

#[test]
fn the_nodes_reported_kubelet_version_settles_from_auto_and_a_disagreement_blocks() {
    let (n, pods) = demo_node_on_1_31();
    let auto = plan_with(&n, &pods, "1.31", &NodeFiles::default());
    assert!(
        auto.from_candidates.len() > 1,
        "the demo node's hashes allow several versions: {:?}",
        auto.from_candidates
    );
    // a reported version among the candidates decides, and the plan says so
    let reported = *auto.from_candidates.last().unwrap();
    let decided = plan_with(
        &n,
        &pods,
        "1.31",
        &with_api("v1.31.2", &format!("v{reported}.7")),
    );
    assert_eq!(
        decided.from,
        Some(reported),
        "the Node's kubelet version is --from"
    );
    assert_eq!(decided.from_candidates, auto.from_candidates);
    assert!(codes_of(&decided).is_empty(), "{:?}", decided.hazards);
    assert!(decided
        .warnings
        .iter()
        .any(|w| w.contains("as Node worker-1 reports kubelet")));
    // a version the hashes rule out blocks, naming both
    let outside = ruled_out(&auto);
    let disagreed = plan_with(
        &n,
        &pods,
        "1.31",
        &with_api("v1.31.2", &format!("v{outside}.0")),
    );
    let h = disagreed
        .hazards
        .iter()
        .find(|h| h.code == "kubelet-version-disagrees")
        .expect("a disagreement hazard");
    assert_eq!(h.severity, rehash::Severity::Block);
    assert!(
        h.message.contains(&format!("v{outside}.0")) && h.message.contains("stored hashes prove"),
        "{}",
        h.message
    );
}

/// Offline (issue 36): the installed kubelet's own `--version` is the witness the Node's report
/// is online: it settles `--from auto` among the candidates, and one the hashes rule out (a
/// binary replaced before its kubelet restarted) blocks, naming the binary.
#[test]
fn offline_the_installed_kubelets_version_settles_from_auto_and_a_disagreement_blocks() {
    let (n, pods) = demo_node_on_1_31();
    let installed = |v: String| NodeFiles {
        installed_kubelet: Some(rehash::InstalledKubelet {
            path: "/usr/bin/kubelet".into(),
            version: v,
        }),
        ..NodeFiles::default()
    };
    let auto = plan_with(&n, &pods, "1.31", &NodeFiles::default());
    let reported = *auto.from_candidates.last().unwrap();
    let decided = plan_with(&n, &pods, "1.31", &installed(format!("v{reported}.2")));
    assert_eq!(
        decided.from,
        Some(reported),
        "the installed kubelet's version is --from"
    );
    assert!(
        decided
            .warnings
            .iter()
            .any(|w| w.contains("as the installed kubelet /usr/bin/kubelet says")),
        "{:?}",
        decided.warnings
    );
    let outside = ruled_out(&auto);
    let disagreed = plan_with(&n, &pods, "1.31", &installed(format!("v{outside}.0")));
    let h = disagreed
        .hazards
        .iter()
        .find(|h| h.code == "kubelet-version-disagrees")
        .expect("a disagreement hazard");
    assert_eq!(h.severity, rehash::Severity::Block);
    assert!(
        h.message.contains("/usr/bin/kubelet") && h.message.contains(&format!("v{outside}.0")),
        "{}",
        h.message
    );
}

#[test]
fn the_version_skew_policy_blocks_a_kubelet_newer_than_the_api_server_or_too_far_behind() {
    let n = node("containerd-1.7");
    let pods = pods_of(&n);
    let case = |server: &str, to: &str| codes_of(&plan_with(&n, &pods, to, &with_api(server, "")));
    let block = rehash::Severity::Block;
    assert_eq!(
        case("v1.30.4", "1.31"),
        vec![("kubelet-newer-than-apiserver".to_string(), block)]
    );
    assert!(case("v1.31.0", "1.31").is_empty(), "the same minor");
    assert!(
        case("v1.34.1", "1.31").is_empty(),
        "three minors behind is allowed"
    );
    assert_eq!(
        case("v1.35.0", "1.31"),
        vec![("kubelet-too-old-for-apiserver".to_string(), block)]
    );
    // before kubelet 1.25, two minors
    assert!(case("v1.26.0", "1.24").is_empty());
    assert_eq!(
        case("v1.27.0", "1.24"),
        vec![("kubelet-too-old-for-apiserver".to_string(), block)]
    );
    // a distribution's version string and an API server newer than this tool knows
    assert!(case("v1.31.4+k3s1", "1.31").is_empty());
    assert_eq!(
        case("v1.45.0", "1.31"),
        vec![("kubelet-too-old-for-apiserver".to_string(), block)]
    );
}

// ---- the target kubelet's admission (issue 52) ----------------------------------------------

/// The Node object of the pods' node: its name from the pods file, the labels `labels`, room
/// for every pod.
fn node_object(pods: &Value, labels: Value) -> rehash::admission::NodeObject {
    let name = pods["items"][0]["spec"]["nodeName"]
        .as_str()
        .unwrap_or("node");
    let node = json!({
        "kind": "Node",
        "metadata": {"name": name, "labels": labels},
        "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "250", "ephemeral-storage": "1Ti"}}
    });
    rehash::admission::NodeObject::parse(&serde_json::to_vec(&node).unwrap()).unwrap()
}

#[test]
fn a_pod_whose_node_selector_the_node_no_longer_matches_is_planned_to_restart_and_blocks() {
    let n = node("containerd-1.7");
    let mut pods = pods_of(&n);
    let (i, uid) = rewritten_pod(&n, &pods, "1.31");
    pods["items"][i]["spec"]["nodeSelector"] = json!({"disktype": "ssd"});
    let name = format!(
        "{}/{}",
        pods["items"][i]["metadata"]["namespace"].as_str().unwrap(),
        pods["items"][i]["metadata"]["name"].as_str().unwrap()
    );
    let with = |labels: Value| NodeFiles {
        node_object: Some(node_object(&pods, labels)),
        ..NodeFiles::default()
    };

    // the label is still there: nothing is rejected, the plan is the plan without a Node
    let kept = plan_with(&n, &pods, "1.31", &with(json!({"disktype": "ssd"})));
    let blind = plan_with(&n, &pods, "1.31", &NodeFiles::default());
    assert!(
        !kept
            .hazards
            .iter()
            .any(|h| h.code.starts_with("kubelet-rejects")),
        "a pod that still fits is never flagged: {:?}",
        kept.hazards
    );
    assert_eq!(
        kept.summary.would_restart_after_rewrite, blind.summary.would_restart_after_rewrite,
        "admission that admits every pod changes no container's fate"
    );
    assert!(
        blind
            .hazards
            .iter()
            .any(|h| h.code == "admission-not-predicted" && h.severity == rehash::Severity::Warn),
        "without a Node object the plan says admission was not predicted"
    );
    assert!(
        !kept
            .hazards
            .iter()
            .any(|h| h.code == "admission-not-predicted"),
        "with one it does not"
    );

    // the label is gone: exactly that pod is rejected, and its running containers restart
    let plan = plan_with(&n, &pods, "1.31", &with(json!({})));
    let rejected: Vec<&rehash::Hazard> = plan
        .hazards
        .iter()
        .filter(|h| h.code == "kubelet-rejects-pod-at-admission")
        .collect();
    assert_eq!(rejected.len(), 1, "one pod is rejected: {rejected:?}");
    assert_eq!(
        rejected[0].severity,
        rehash::Severity::Block,
        "a rejection blocks"
    );
    assert!(
        rejected[0].message.contains(&format!("pod {name}:"))
            && rejected[0].message.contains(
                "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"
            ),
        "the hazard names the pod and kubelet 1.31's own words: {}",
        rejected[0].message
    );
    for (r, b) in plan.records.iter().zip(&blind.records) {
        let ours = r.pod_uid.as_deref() == Some(uid.as_str());
        if ours && b.would_restart_without_rewrite {
            assert!(
                r.would_restart_after_rewrite && r.reason.contains("rejects the pod at admission"),
                "{}: a running container of the rejected pod restarts",
                r.id
            );
        } else {
            assert_eq!(
                r.would_restart_after_rewrite, b.would_restart_after_rewrite,
                "{}: every other container keeps its fate",
                r.id
            );
        }
        assert_eq!(
            r.action, b.action,
            "{}: the rewrite itself is unchanged",
            r.id
        );
    }
    assert!(
        plan.summary.would_restart_after_rewrite > blind.summary.would_restart_after_rewrite
            && plan.summary.sentence.contains("rejects at admission"),
        "the summary counts and says them: {}",
        plan.summary.sentence
    );

    // patch refuses it, and goes on with --accept-restarts
    let store = n.location.open().unwrap();
    let before = snapshot(&n.dir);
    let e = rehash::patch(
        &plan,
        store.as_ref(),
        &n.backup("bk-refused"),
        &rehash::Silent,
    )
    .unwrap_err();
    assert!(
        matches!(e, rehash::Error::Blocked(_))
            && e.to_string().contains("kubelet-rejects-pod-at-admission"),
        "a rejected pod refuses the patch: {e}"
    );
    assert!(
        snapshot(&n.dir) == before,
        "a refused patch changed nothing"
    );
    let mut opts = n.backup("bk");
    opts.accept_restarts = true;
    let done = rehash::patch(&plan, store.as_ref(), &opts, &rehash::Silent)
        .expect("--accept-restarts goes on knowing");
    assert!(done.changed > 0, "the other containers are rewritten");
}
