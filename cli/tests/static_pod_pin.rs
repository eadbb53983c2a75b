//! `--pin-static-pod-uids` through the binary, on a real containerd 1.7 node (fixtures/nodes)
//! going 1.30 → 1.31, one of whose pods is shown as the mirror pod of a static pod whose
//! manifest sets no `metadata.uid`: without the pin the plan counts its restart; with it the
//! manifest gets the kubelet's UID (one line, every other byte kept), the original goes into
//! the backup, a rerun changes nothing, `rollback` gives every byte back, and a manifest the
//! edit cannot handle leaves the node untouched with a clear refusal.

mod under_test;

use serde_json::Value;
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use testtools::fixtures_dir;
use under_test::bin;

const NODE: &str = "containerd-1.7";
const TO: &str = "1.31";

/// A copy of the fixture node with one pod turned into a static pod's mirror.
struct Node {
    _tmp: tempfile::TempDir,
    dir: PathBuf,
    manifests: PathBuf,
    /// The UID the kubelet gave the static pod (its containers' pod UID label).
    uid: String,
}

impl Node {
    fn new(manifest: &str) -> Node {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join(NODE);
        let st = Command::new("cp")
            .arg("-a")
            .arg(fixtures_dir().join("nodes").join(NODE))
            .arg(&dir)
            .status()
            .unwrap();
        assert!(st.success(), "cp -a the fixture node");
        let manifests = tmp.path().join("manifests");
        std::fs::create_dir(&manifests).unwrap();
        let mut node = Node {
            _tmp: tmp,
            dir,
            manifests,
            uid: String::new(),
        };
        // a pod with a running container to rewrite: its restart is the static pod's alone
        let (_, out, err) = node.run("plan", &["-o", "json"]);
        let plan: Value = serde_json::from_str(&out).unwrap_or_else(|_| panic!("plan: {err}"));
        let uid = plan["records"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["action"] == "rewrite" && r["would_restart_without_rewrite"] == true)
            .and_then(|r| r["pod_uid"].as_str())
            .expect("a running container to rewrite")
            .to_string();
        let pods_path = node.dir.join("pods.json");
        let mut pods: Value = serde_json::from_slice(&std::fs::read(&pods_path).unwrap()).unwrap();
        let p = pods["items"]
            .as_array_mut()
            .unwrap()
            .iter_mut()
            .find(|p| p["metadata"]["uid"] == uid.as_str())
            .unwrap();
        let node_name = p["spec"]["nodeName"].as_str().unwrap().to_string();
        let namespace = p["metadata"]["namespace"].as_str().unwrap().to_string();
        p["metadata"]["uid"] = Value::from("f0000000-0000-4000-8000-000000000001");
        p["metadata"]["name"] = Value::from(format!("static-0-{node_name}"));
        let meta = p["metadata"].as_object_mut().unwrap();
        let ann = meta
            .entry("annotations")
            .or_insert(Value::Object(Default::default()));
        ann["kubernetes.io/config.mirror"] = Value::from(uid.clone());
        ann["kubernetes.io/config.hash"] = Value::from(uid.clone());
        std::fs::write(&pods_path, serde_json::to_vec(&pods).unwrap()).unwrap();
        node.uid = uid;
        let file = node.manifest();
        std::fs::write(&file, manifest.replace("NAMESPACE", &namespace)).unwrap();
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).unwrap();
        node
    }

    fn manifest(&self) -> PathBuf {
        self.manifests.join("static-0.yaml")
    }

    fn run(&self, cmd: &str, extra: &[&str]) -> (i32, String, String) {
        let none = self.dir.join("no-such-runtime");
        let mut args: Vec<String> = vec![
            cmd.into(),
            "--to".into(),
            TO.into(),
            "--pods".into(),
            self.dir.join("pods.json").display().to_string(),
            "--runtime-socket".into(),
            none.join("sock").display().to_string(),
            "--runtime-pidfile".into(),
            none.join("pid").display().to_string(),
            "--runtime".into(),
            "containerd".into(),
            "--root".into(),
            self.dir.join("var/lib/containerd").display().to_string(),
            "--manifests".into(),
            self.manifests.display().to_string(),
        ];
        if cmd == "rollback" {
            // rollback takes the backup's store; no plan flags
            args = vec![cmd.into()];
            args.extend(extra.iter().map(|s| s.to_string()));
            args.extend([
                "--runtime-socket".into(),
                none.join("sock").display().to_string(),
                "--runtime-pidfile".into(),
                none.join("pid").display().to_string(),
            ]);
        } else {
            args.extend(extra.iter().map(|s| s.to_string()));
        }
        let out = Command::new(bin()).args(&args).output().unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    fn plan(&self, extra: &[&str]) -> Value {
        let mut args = vec!["-o", "json"];
        args.extend(extra);
        let (code, out, err) = self.run("plan", &args);
        assert!(code == 0 || code == 4, "plan: {err}");
        serde_json::from_str(&out).unwrap()
    }

    /// The static pod's running containers: (would restart after the rewrite, reason).
    fn static_rows(&self, plan: &Value) -> Vec<(bool, String)> {
        plan["records"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["pod_uid"] == self.uid.as_str() && r["action"] == "rewrite")
            .map(|r| {
                (
                    r["would_restart_after_rewrite"] == true,
                    r["reason"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }

    /// sha256 of every file of the store and the manifests, by path.
    fn tree(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        for root in [self.dir.join("var"), self.manifests.clone()] {
            for e in walkdir::WalkDir::new(&root) {
                let e = e.unwrap();
                if e.file_type().is_file() {
                    out.insert(
                        e.path().display().to_string(),
                        storepatch::backup::sha256_hex(&std::fs::read(e.path()).unwrap()),
                    );
                }
            }
        }
        out
    }
}

/// kubeadm's shape, with comments an operator added.
const MANIFEST: &str = "# static pod, edited by hand\napiVersion: v1\nkind: Pod\nmetadata:\n  labels:\n    tier: control-plane   # keep\n  name: static-0\n  namespace: NAMESPACE\nspec:\n  containers:\n  - name: c\n    image: busybox\n";

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o7777
}

#[test]
fn patch_pins_the_kubelets_uid_backs_the_manifest_up_reruns_idempotently_and_rolls_back_exactly() {
    let node = Node::new(MANIFEST);
    let original = std::fs::read(node.manifest()).unwrap();
    let before = node.tree();

    // Without the pin: the derived UID is a restart, and the plan says how to avoid it.
    let plain = node.plan(&[]);
    let rows = node.static_rows(&plain);
    assert!(!rows.is_empty(), "the static pod has containers to rewrite");
    assert!(
        rows.iter()
            .all(|(restart, why)| *restart && why.contains("--pin-static-pod-uids")),
        "without the pin the derived-UID static pod restarts, and the reason names the flag: {rows:?}"
    );
    assert!(
        plain.get("static_pod_pins").is_none(),
        "no pin is planned without the flag"
    );

    // With it: kept, because its UID gets pinned; the pin is the UID read from the node.
    let pinned = node.plan(&["--pin-static-pod-uids"]);
    let rows = node.static_rows(&pinned);
    assert!(
        rows.iter()
            .all(|(restart, why)| !*restart && why.contains("kept because its UID gets pinned")),
        "with the pin the static pod is kept and its plan line says why: {rows:?}"
    );
    assert_eq!(
        pinned["summary"]["would_restart_after_rewrite"]
            .as_u64()
            .unwrap()
            + rows.len() as u64,
        plain["summary"]["would_restart_after_rewrite"]
            .as_u64()
            .unwrap(),
        "the pinned pod's containers are no longer counted as restarts"
    );
    assert_eq!(
        pinned["static_pod_pins"][0]["uid"], node.uid,
        "the UID pinned is the one the runtime's containers carry"
    );
    assert_eq!(node.tree(), before, "plan writes nothing");

    // patch: the manifest gets one line, its mode stays, the backup holds the original.
    let bk = node.dir.join("bk");
    let (code, _, err) = node.run(
        "patch",
        &[
            "--pin-static-pod-uids",
            "--backup-dir",
            bk.to_str().unwrap(),
        ],
    );
    assert!(code == 0 || code == 4, "patch --pin-static-pod-uids: {err}");
    assert!(
        err.contains("pinned metadata.uid in 1 static pod manifest"),
        "patch says it pinned: {err}"
    );
    let after = std::fs::read(node.manifest()).unwrap();
    let line = format!("  uid: \"{}\"\n", node.uid);
    let name_end = MANIFEST.find("  namespace:").unwrap();
    assert_eq!(
        String::from_utf8(after.clone()).unwrap(),
        format!(
            "{}{line}{}",
            &String::from_utf8_lossy(&original)[..name_end],
            &String::from_utf8_lossy(&original)[name_end..]
        ),
        "the uid line follows name:, every other byte is the original's"
    );
    assert_eq!(mode(&node.manifest()), 0o640, "the manifest keeps its mode");
    let leftovers: Vec<_> = std::fs::read_dir(&node.manifests)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n != "static-0.yaml")
        .collect();
    assert!(
        leftovers.is_empty(),
        "no temp file is left beside the manifest: {leftovers:?}"
    );
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(bk.join("manifest.json")).unwrap()).unwrap();
    let entry = manifest["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| Path::new(e["path"].as_str().unwrap()) == node.manifest())
        .expect("the backup lists the manifest");
    assert_eq!(
        entry["sha256_original"],
        storepatch::backup::sha256_hex(&original),
        "the backup records the original manifest's sha256"
    );
    assert_eq!(
        entry["sha256_new"],
        storepatch::backup::sha256_hex(&after),
        "and the pinned one's"
    );

    // A rerun: the manifest is pinned, nothing to pin, not a restart any more.
    let again = node.plan(&["--pin-static-pod-uids"]);
    assert!(
        again.get("static_pod_pins").is_none(),
        "a pinned manifest needs no pin"
    );
    assert!(
        node.static_rows(&again).is_empty(),
        "after the patch nothing of the static pod is left to rewrite"
    );
    let bk2 = node.dir.join("bk2");
    let (code, _, err) = node.run(
        "patch",
        &[
            "--pin-static-pod-uids",
            "--backup-dir",
            bk2.to_str().unwrap(),
        ],
    );
    assert!(code == 0 || code == 4, "the second patch: {err}");
    assert_eq!(
        std::fs::read(node.manifest()).unwrap(),
        after,
        "a second run changes nothing in the manifest"
    );

    // rollback: every byte of the store and the manifest back.
    let (code, _, err) = node.run("rollback", &["--backup-dir", bk.to_str().unwrap()]);
    assert_eq!(code, 0, "rollback: {err}");
    assert_eq!(
        std::fs::read(node.manifest()).unwrap(),
        original,
        "rollback restores the manifest byte for byte"
    );
    assert_eq!(mode(&node.manifest()), 0o640, "with its mode");
    let now: BTreeMap<String, String> = node
        .tree()
        .into_iter()
        .filter(|(k, _)| !k.contains("/bk"))
        .collect();
    assert_eq!(now, before, "rollback gives back every byte of the node");
}

#[test]
fn a_manifest_the_edit_cannot_handle_leaves_the_node_untouched_with_a_clear_refusal() {
    // a flow-style document: the minimal edit refuses it rather than reserialize it
    let node = Node::new(
        "{apiVersion: v1, kind: Pod, metadata: {name: static-0, namespace: NAMESPACE}, spec: {containers: []}}\n",
    );
    let before = node.tree();
    let plan = node.plan(&["--pin-static-pod-uids"]);
    assert!(
        plan["hazards"]
            .as_array()
            .unwrap()
            .iter()
            .any(|h| h["code"] == "static-pod-pin-refused" && h["severity"] == "block"),
        "the plan names the refused pin as a block hazard: {}",
        plan["hazards"]
    );
    let bk = node.dir.join("bk");
    let (code, _, err) = node.run(
        "patch",
        &[
            "--pin-static-pod-uids",
            "--backup-dir",
            bk.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 3, "refused: {err}");
    assert!(
        err.contains("static-pod-pin-refused") && err.contains("flow style"),
        "the refusal names the manifest's form: {err}"
    );
    assert!(
        err.contains(node.manifest().to_str().unwrap()),
        "and the manifest: {err}"
    );
    assert_eq!(node.tree(), before, "nothing of the node was written");
    assert!(
        !bk.join("manifest.json").exists(),
        "no backup was taken: nothing was going to be written"
    );
}

#[test]
fn a_uid_the_node_does_not_agree_on_is_never_pinned() {
    let node = Node::new(MANIFEST);
    let pods_path = node.dir.join("pods.json");
    let mut pods: Value = serde_json::from_slice(&std::fs::read(&pods_path).unwrap()).unwrap();
    for p in pods["items"].as_array_mut().unwrap() {
        if p["metadata"]["annotations"]["kubernetes.io/config.mirror"] == node.uid.as_str() {
            p["metadata"]["annotations"]["kubernetes.io/config.hash"] =
                Value::from("ffffffffffffffffffffffffffffffff");
        }
    }
    std::fs::write(&pods_path, serde_json::to_vec(&pods).unwrap()).unwrap();
    let before = node.tree();
    let bk = node.dir.join("bk");
    let (code, _, err) = node.run(
        "patch",
        &[
            "--pin-static-pod-uids",
            "--backup-dir",
            bk.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 3, "refused: {err}");
    assert!(
        err.contains("config.hash is ffffffffffffffffffffffffffffffff"),
        "the refusal names both UIDs' witnesses: {err}"
    );
    assert_eq!(node.tree(), before, "nothing of the node was written");
}
