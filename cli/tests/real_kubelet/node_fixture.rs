//! `REAL_KUBELET_NODE_FIXTURE=DIR`: the lab's node kept as a fixture of `fixtures/nodes`
//! (scripts/make-node-fixture.sh), every byte and every hash from the real programs:
//! - the runtime's store as the old kubelet's runtime left it when stopped (containerd's
//!   `meta.db` and the CRI plugin's status files; CRI-O's `config.json`/`state.json` in the
//!   graphroot and runroot, runc's state, its version file and clean-shutdown marker),
//!   `pods.json` as the API server served it and
//!   `runtime-before.json` as the runtime answered through the CRI;
//! - `expected.json`: the stored hashes are the old real kubelet's; each target hash is what the
//!   real new kubelet stored when it created the same container of the same pod again (every
//!   sandbox is stopped after the control so that it recreates every container, exited init
//!   containers and sidecars too, whose hashes a restart alone would never show); whether the
//!   new kubelet restarts a container without a rewrite is what it did in the control.
//!
//! Nothing in it comes from kubelet-rehash: the fixture is the baseline the tool is judged by.

use super::{sh, wait_settled, Lab};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use storepatch::live::cri::v1;
use testtools::fixture_json;

const HASH: &str = "io.kubernetes.container.hash";
const HASH_WITHOUT_RESOURCES: &str = "io.kubernetes.container.hashWithoutResources";

/// What the capture kept of the old kubelet's node, for `expected.json` at the end.
pub struct Captured {
    dir: PathBuf,
    from: String,
    version: Value,
    pods: Value,
    containers: Vec<v1::Container>,
    states: BTreeMap<String, String>,
}

/// The destination, when asked for (containerd and CRI-O labs: a Docker lab's kubelet is a
/// dockershim one, whose store the first Docker node's recipe describes).
pub fn wanted(runtime: &str) -> Option<PathBuf> {
    let dir = PathBuf::from(std::env::var_os("REAL_KUBELET_NODE_FIXTURE")?);
    assert!(
        runtime == "containerd" || runtime == "crio",
        "REAL_KUBELET_NODE_FIXTURE captures containerd and CRI-O nodes"
    );
    Some(dir)
}

/// Copies `from/<rel>` to `to/<rel>` for every file that `rel` (with `*` for one path
/// element) names; returns how many.
fn copy_matching(from: &Path, to: &Path, rel: &str) -> usize {
    let mut found = vec![PathBuf::new()];
    for part in rel.split('/') {
        let mut next = Vec::new();
        for base in &found {
            if part == "*" {
                let Ok(entries) = std::fs::read_dir(from.join(base)) else {
                    continue;
                };
                for e in entries.flatten() {
                    next.push(base.join(e.file_name()));
                }
            } else {
                next.push(base.join(part));
            }
        }
        found = next;
    }
    let mut n = 0;
    for f in found {
        if from.join(&f).is_file() {
            std::fs::create_dir_all(to.join(&f).parent().unwrap()).unwrap();
            std::fs::copy(from.join(&f), to.join(&f)).unwrap();
            n += 1;
        }
    }
    n
}

fn list(lab: &Lab) -> Vec<v1::Container> {
    let r: v1::ListContainersResponse = lab
        .cri()
        .unary(
            "/runtime.v1.RuntimeService/ListContainers",
            v1::ListContainersRequest { filter: None },
        )
        .unwrap();
    let mut c = r.containers;
    c.sort_by(|a, b| a.id.cmp(&b.id));
    c
}

fn sorted(m: &std::collections::HashMap<String, String>) -> BTreeMap<&String, &String> {
    m.iter().collect()
}

/// With the old kubelet settled: stops it, records what the runtime answers, stops the
/// runtime (its containers keep running), copies the store, and starts both again.
pub fn capture(lab: &Lab, dir: &Path, from: &str, from_v: &str) -> Captured {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    sh(
        Command::new("sh").arg("-c").arg(lab.lab("stop-kubelet")),
        "stop-kubelet",
    );
    let pods = lab.pods_of_node();
    std::fs::write(dir.join("pods.json"), fixture_json(&pods)).unwrap();
    let version = lab.cri().version().unwrap();
    let version = json!({
        "runtime_name": version.runtime_name,
        "runtime_version": version.runtime_version,
        "runtime_api_version": version.runtime_api_version,
    });
    let containers = list(lab);
    let listed = lab.cri().list_containers().unwrap();
    let states: BTreeMap<String, String> = listed
        .iter()
        .map(|c| (c.id.clone(), c.state.clone()))
        .collect();
    let pids: BTreeMap<String, Option<u32>> =
        listed.iter().map(|c| (c.id.clone(), c.pid)).collect();
    let sandboxes: BTreeSet<&String> = containers.iter().map(|c| &c.pod_sandbox_id).collect();
    let before = json!({
        "version": version,
        "sandboxes": sandboxes.iter().map(|id| {
            let s = lab.cri().pod_sandbox_status(id).unwrap();
            json!({"id": id, "ready": s.ready, "ip": s.ip, "host_network": s.host_network})
        }).collect::<Vec<_>>(),
        "containers": containers.iter().map(|c| json!({
            "id": c.id,
            "pod_sandbox_id": c.pod_sandbox_id,
            "name": c.metadata.as_ref().map(|m| m.name.clone()),
            "attempt": c.metadata.as_ref().map(|m| m.attempt),
            "image": c.image.as_ref().map(|i| i.image.clone()),
            "image_ref": c.image_ref,
            "state": states.get(&c.id),
            "pid": pids.get(&c.id).copied().flatten(),
            "created_at": c.created_at,
            "labels": sorted(&c.labels),
            "annotations": sorted(&c.annotations),
        })).collect::<Vec<_>>(),
    });
    std::fs::write(dir.join("runtime-before.json"), fixture_json(&before)).unwrap();

    sh(
        Command::new("sh").arg("-c").arg(lab.lab("stop-runtime")),
        "stop-runtime",
    );
    let root = Path::new(lab.var("RUNTIME_ROOT"));
    if lab.var("RUNTIME") == "crio" {
        // the lab lays CRI-O out as a node's own / under one directory: the graphroot is
        // <node>/var/lib/containers/storage
        let node = root.ancestors().nth(4).unwrap();
        let mut copied = 0;
        for rel in [
            "var/lib/containers/storage/overlay-containers/volatile-containers.json",
            "var/lib/containers/storage/overlay-containers/containers.json",
            "var/lib/containers/storage/overlay-containers/*/userdata/config.json",
            "var/lib/containers/storage/overlay-containers/*/userdata/state.json",
            "run/containers/storage/overlay-containers/*/userdata/config.json",
            "run/runc/*/state.json",
            "var/lib/crio/clean.shutdown",
            "var/lib/crio/clean.shutdown.supported",
            "var/run/crio/version",
        ] {
            copied += copy_matching(node, dir, rel);
        }
        assert!(copied > containers.len(), "CRI-O's store: {copied} files");
    } else {
        let store = dir.join("var/lib/containerd");
        let db = "io.containerd.metadata.v1.bolt/meta.db";
        std::fs::create_dir_all(store.join(db).parent().unwrap()).unwrap();
        std::fs::copy(root.join(db), store.join(db)).unwrap();
        let cri = "io.containerd.grpc.v1.cri/containers";
        for c in &containers {
            let status = root.join(cri).join(&c.id).join("status");
            if status.is_file() {
                let to = store.join(cri).join(&c.id);
                std::fs::create_dir_all(&to).unwrap();
                std::fs::copy(&status, to.join("status")).unwrap();
            }
        }
    }
    sh(
        Command::new("sh").arg("-c").arg(lab.lab("start-runtime")),
        "start-runtime",
    );
    sh(
        Command::new("sh").arg("-c").arg(lab.lab("start-kubelet")),
        "start-kubelet",
    );
    wait_settled(lab, from_v, "after the fixture's capture");
    node_ready(lab, "after the fixture's capture");
    Captured {
        dir: dir.to_path_buf(),
        from: from.to_string(),
        version,
        pods,
        containers,
        states,
    }
}

/// Waits for the node's Ready condition (a runtime restarted reports its network not ready
/// for a moment, and the steps after this one hold the node Ready only from Ready).
fn node_ready(lab: &Lab, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let node = lab.json(&["get", "node", lab.var("NODE")]);
        let ready = node["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Ready" && c["status"] == "True");
        if ready {
            // the readiness of the pods and the endpoints follow
            std::thread::sleep(Duration::from_secs(10));
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: the node not Ready in 120 s"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// `ns/pod/container` of a container, from the kubelet's labels.
fn key(c: &v1::Container) -> String {
    format!(
        "{}/{}/{}",
        c.labels["io.kubernetes.pod.namespace"],
        c.labels["io.kubernetes.pod.name"],
        c.labels["io.kubernetes.container.name"]
    )
}

/// Stops every sandbox, so the running new kubelet creates every container of every pod again,
/// and returns the new containers by `ns/pod/container`.
fn recreated_by_new_kubelet(
    lab: &Lab,
    to_v: &str,
    wanted: &BTreeSet<String>,
) -> BTreeMap<String, v1::Container> {
    let old = list(lab);
    let old_ids: BTreeSet<String> = old.iter().map(|c| c.id.clone()).collect();
    let sandboxes: BTreeSet<String> = old.iter().map(|c| c.pod_sandbox_id.clone()).collect();
    // a sandbox stopped under the kubelet, as if its pause process had died (a CRI-O sandbox
    // has no process to kill: drop_infra_ctr)
    let cri = lab.cri();
    for sandbox in &sandboxes {
        testtools::cri::CriTestCalls::stop_pod_sandbox(&cri, sandbox).unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        std::thread::sleep(Duration::from_secs(3));
        let new: BTreeMap<String, v1::Container> = list(lab)
            .into_iter()
            .filter(|c| !old_ids.contains(&c.id))
            .map(|c| (key(&c), c))
            .collect();
        if wanted.iter().all(|k| new.contains_key(k)) {
            wait_settled(lab, to_v, "after every sandbox was recreated");
            node_ready(lab, "after every sandbox was recreated");
            return new;
        }
        assert!(
            Instant::now() < deadline,
            "the new kubelet recreated only {:?} of {:?}",
            new.keys().collect::<Vec<_>>(),
            wanted
        );
    }
}

/// After the control (the new kubelet running, without the tool): writes `expected.json`.
/// `restarted`: the control's restarted containers, as `ns/pod/container`.
pub fn finish(cap: Captured, lab: &Lab, to: &str, to_v: &str, restarted: &BTreeSet<String>) {
    let items = cap.pods["items"].as_array().unwrap();
    let pod_of = |ns: &str, name: &str| {
        items
            .iter()
            .find(|p| p["metadata"]["namespace"] == ns && p["metadata"]["name"] == name)
    };
    let wanted: BTreeSet<String> = cap.containers.iter().map(key).collect();
    let target = recreated_by_new_kubelet(lab, to_v, &wanted);
    let mut rows = Vec::new();
    let mut sandboxes = BTreeMap::new();
    for c in &cap.containers {
        let ns = &c.labels["io.kubernetes.pod.namespace"];
        let name = &c.labels["io.kubernetes.pod.name"];
        let pod = json!({"namespace": ns, "name": name, "uid": c.labels["io.kubernetes.pod.uid"]});
        sandboxes
            .entry(c.pod_sandbox_id.clone())
            .or_insert(pod.clone());
        let spec = pod_of(ns, name).unwrap_or_else(|| panic!("{}: no pod in pods.json", key(c)));
        let cname = &c.labels["io.kubernetes.container.name"];
        let init = spec["spec"]["initContainers"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|i| i["name"] == cname.as_str());
        // the image the kubelet asked for, which containerd keeps in the container's record
        // (the CRI's list answers with the image id instead)
        let image = spec["spec"]["containers"]
            .as_array()
            .into_iter()
            .flatten()
            .chain(init)
            .find(|i| i["name"] == cname.as_str())
            .map(|i| i["image"].clone())
            .unwrap_or(Value::Null);
        let container_type = match init {
            Some(i) if i["restartPolicy"] == "Always" => "sidecar",
            Some(_) => "init",
            None => "container",
        };
        let state = match cap.states[&c.id].as_str() {
            "CONTAINER_RUNNING" => "running",
            "CONTAINER_EXITED" => "exited",
            other => panic!("{}: state {other} in a settled node", key(c)),
        };
        let stored = c.annotations[HASH].clone();
        let t = &target[&key(c)];
        let target_hash = t.annotations[HASH].clone();
        let mut tgt = json!({
            "hash": target_hash,
            "stored_ne_target": stored != target_hash,
            "kubelet_would_restart": state == "running" && restarted.contains(&key(c)),
        });
        if let Some(h) = t.annotations.get(HASH_WITHOUT_RESOURCES) {
            tgt["hash_without_resources"] = json!(h);
        }
        rows.push(json!({
            "id": c.id,
            "kind": "container",
            "pod": pod,
            "in_podlist": true,
            "orphan": false,
            "container_name": cname,
            "container_type": container_type,
            "attempt": c.metadata.as_ref().unwrap().attempt,
            "state": state,
            "stored_hash": stored,
            "stored_hash_without_resources": c.annotations.get(HASH_WITHOUT_RESOURCES),
            "image_in_runtime": image,
            "drifted": false,
            "from_hash_of_podlist_spec": stored,
            "stored_hash_verifies": true,
            "targets": {to: tgt},
        }));
    }
    for (id, pod) in &sandboxes {
        rows.push(json!({
            "id": id, "kind": "sandbox", "pod": pod, "in_podlist": true, "orphan": false,
            "container_name": null, "stored_hash": null, "targets": {to: null},
        }));
    }
    rows.sort_by(|a, b| a["id"].as_str().cmp(&b["id"].as_str()));
    let cs: Vec<&Value> = rows.iter().filter(|r| r["kind"] == "container").collect();
    let count = |f: &dyn Fn(&Value) -> bool| cs.iter().filter(|r| f(r)).count();
    let expected = json!({
        "scenario": cap.dir.file_name().unwrap().to_string_lossy(),
        "runtime": cap.version,
        "from_kubelet": cap.from,
        "from_kubelet_build": lab.var("KUBELET_VERSION"),
        "to_kubelet_build": to_v,
        "made_by": "scripts/make-node-fixture.sh (cli/tests/real_kubelet/node_fixture.rs): real kubelets and control plane built from Kubernetes' Go modules",
        "targets": [to],
        "hash_annotation": HASH,
        "counts": {
            "sandboxes": sandboxes.len(),
            "containers": cs.len(),
            "containers_running": count(&|r| r["state"] == "running"),
            "containers_exited": count(&|r| r["state"] == "exited"),
            "orphan_containers": 0,
            "drifted_containers": 0,
        },
        "summary_per_target": {to: {
            "containers_in_podlist": cs.len(),
            "stored_ne_target": count(&|r| r["targets"][to]["stored_ne_target"] == true),
            "running_stored_ne_target": count(&|r| r["state"] == "running" && r["targets"][to]["stored_ne_target"] == true),
            "kubelet_would_restart": count(&|r| r["targets"][to]["kubelet_would_restart"] == true),
        }},
        "field_notes": {
            "stored_hash": "io.kubernetes.container.hash as the old real kubelet stored it (CRI annotations)",
            "targets.<v>.hash": "what the real kubelet <v> stored when it created the same container of the same pod again (every sandbox stopped after the control)",
            "targets.<v>.kubelet_would_restart": "the real kubelet <v>, swapped in without a rewrite, restarted this container",
        },
        "containers": rows,
    });
    std::fs::write(cap.dir.join("expected.json"), fixture_json(&expected)).unwrap();
    eprintln!(
        "real_kubelet: node fixture written to {}",
        cap.dir.display()
    );
}
