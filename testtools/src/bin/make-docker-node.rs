//! Makes a Docker node of fixtures/nodes from a node the real kubelet made
//! (scripts/make-docker-node-fixture.sh):
//!
//!   make-docker-node SRC OUT DOCKERD [RUNC]
//!
//! SRC: a node of `scripts/make-node-fixture.sh` (pods.json, runtime-before.json, expected.json:
//! every hash there is the real kubelet's). OUT: the new node. DOCKERD: the dockerd binary that
//! writes the store (RUNC: its default runtime, for a Docker that needs a newer runc).
//!
//! The same pods go onto a private dockerd (live-restore) in the shape cri-dockerd gives a
//! kubelet's CRI calls (cri-dockerd 0.4.1's `core/helpers.go`, `naming.go`): the container's
//! CRI labels as Docker labels, its CRI annotations as `annotation.<key>` labels,
//! `io.kubernetes.docker.type`, `io.kubernetes.sandbox.id`, and the `k8s_…` names. The labels
//! and annotations are exactly those the real kubelet sent (SRC's runtime-before.json), so each
//! container carries the hash the real kubelet stored; running containers run, exited ones ran
//! and exited. dockerd is stopped (the containers keep running) and every container's
//! `config.v2.json` and `hostconfig.json` are copied as dockerd wrote them; then the containers
//! are removed. pods.json gets the new container ids; expected.json SRC's verdicts under them.

use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use testtools::docker::{create, import_busybox_image, Daemon};
use testtools::fixture_json;

fn read(p: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display())))
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(src), Some(out), Some(dockerd)) = (args.first(), args.get(1), args.get(2)) else {
        eprintln!("usage: make-docker-node SRC OUT DOCKERD [RUNC]");
        return ExitCode::from(2);
    };
    let (src, out) = (PathBuf::from(src), PathBuf::from(out));
    let before = read(&src.join("runtime-before.json"));
    let expected = read(&src.join("expected.json"));
    let mut pods = read(&src.join("pods.json"));

    let mut d = Daemon::with_dockerd(PathBuf::from(dockerd));
    if let Some(runc) = args.get(3) {
        d.use_runc(Path::new(runc));
    }
    d.start();
    let c = d.client();
    let version: Value = c.call("GET", "/version", None).unwrap();
    let image = "k8s-lab.local/busybox:1.0";
    import_busybox_image(&c, "k8s-lab.local/busybox", "1.0");
    import_busybox_image(&c, "k8s-lab.local/pause", "1.0");

    let containers = before["containers"].as_array().unwrap();
    // sandboxes first, as the kubelet makes them: one per sandbox id of SRC
    let mut sandbox_of: BTreeMap<String, String> = BTreeMap::new();
    for ctr in containers {
        let old_sandbox = ctr["pod_sandbox_id"].as_str().unwrap();
        if sandbox_of.contains_key(old_sandbox) {
            continue;
        }
        let l = &ctr["labels"];
        let (ns, name, uid) = (
            l["io.kubernetes.pod.namespace"].as_str().unwrap(),
            l["io.kubernetes.pod.name"].as_str().unwrap(),
            l["io.kubernetes.pod.uid"].as_str().unwrap(),
        );
        let id = create(
            &c,
            &format!("k8s_POD_{name}_{ns}_{uid}_0"),
            json!({
                "Image": "k8s-lab.local/pause:1.0",
                "Cmd": ["/bin/sh", "-c", "trap 'exit 0' TERM; while true; do sleep 3600 & wait $!; done"],
                "Labels": {
                    "io.kubernetes.container.name": "POD",
                    "io.kubernetes.docker.type": "podsandbox",
                    "io.kubernetes.pod.name": name,
                    "io.kubernetes.pod.namespace": ns,
                    "io.kubernetes.pod.uid": uid,
                },
                "HostConfig": {"NetworkMode": "none", "IpcMode": "shareable"},
            }),
        );
        d.container_ids.push(id.clone());
        c.call::<Value>("POST", &format!("/containers/{id}/start"), None)
            .unwrap();
        sandbox_of.insert(old_sandbox.to_string(), id);
    }
    let mut new_id: BTreeMap<String, String> = BTreeMap::new();
    for ctr in containers {
        let sandbox = &sandbox_of[ctr["pod_sandbox_id"].as_str().unwrap()];
        let mut labels = serde_json::Map::new();
        for (k, v) in ctr["labels"].as_object().unwrap() {
            labels.insert(k.clone(), v.clone());
        }
        for (k, v) in ctr["annotations"].as_object().unwrap() {
            labels.insert(format!("annotation.{k}"), v.clone());
        }
        labels.insert("io.kubernetes.docker.type".into(), json!("container"));
        labels.insert("io.kubernetes.sandbox.id".into(), json!(sandbox));
        let l = &ctr["labels"];
        let (ns, pod, uid, cname) = (
            l["io.kubernetes.pod.namespace"].as_str().unwrap(),
            l["io.kubernetes.pod.name"].as_str().unwrap(),
            l["io.kubernetes.pod.uid"].as_str().unwrap(),
            l["io.kubernetes.container.name"].as_str().unwrap(),
        );
        labels.insert(
            "io.kubernetes.container.logpath".into(),
            json!(format!("/var/log/pods/{ns}_{pod}_{uid}/{cname}/0.log")),
        );
        let running = ctr["state"] == "CONTAINER_RUNNING";
        let cmd = if running {
            json!([
                "/bin/sh",
                "-c",
                "trap 'exit 0' TERM; while true; do sleep 1; done"
            ])
        } else {
            json!(["/bin/sh", "-c", "echo done"])
        };
        let id = create(
            &c,
            &format!("k8s_{cname}_{pod}_{ns}_{uid}_0"),
            json!({
                "Image": image,
                "Cmd": cmd,
                "Labels": labels,
                "HostConfig": {
                    "NetworkMode": format!("container:{sandbox}"),
                    "IpcMode": format!("container:{sandbox}"),
                },
            }),
        );
        d.container_ids.push(id.clone());
        c.call::<Value>("POST", &format!("/containers/{id}/start"), None)
            .unwrap();
        new_id.insert(ctr["id"].as_str().unwrap().to_string(), id);
    }
    // the exited ones have exited, the running ones run
    std::thread::sleep(std::time::Duration::from_secs(2));
    for (old, id) in &new_id {
        let i = c.inspect(id).unwrap();
        let want = containers.iter().find(|c| c["id"] == old.as_str()).unwrap()["state"]
            == "CONTAINER_RUNNING";
        assert_eq!(i.running, want, "{id}: running as in SRC");
        if i.running {
            d.container_pids.push(i.pid);
        }
    }
    d.stop();

    let _ = std::fs::remove_dir_all(&out);
    let store = out.join("var/lib/docker/containers");
    for id in sandbox_of.values().chain(new_id.values()) {
        std::fs::create_dir_all(store.join(id)).unwrap();
        for f in ["config.v2.json", "hostconfig.json"] {
            std::fs::copy(
                d.data_root().join("containers").join(id).join(f),
                store.join(id).join(f),
            )
            .unwrap();
        }
    }

    // pods.json and expected.json under the new ids
    let mut ids: BTreeMap<String, String> = new_id.clone();
    ids.extend(sandbox_of.clone());
    for p in pods["items"].as_array_mut().unwrap() {
        for key in ["initContainerStatuses", "containerStatuses"] {
            for s in p["status"][key].as_array_mut().into_iter().flatten() {
                if let Some(old) = s["containerID"].as_str() {
                    let old = old
                        .trim_start_matches("containerd://")
                        .trim_start_matches("cri-o://");
                    if let Some(n) = ids.get(old) {
                        s["containerID"] = json!(format!("docker://{n}"));
                    }
                }
            }
        }
    }
    let mut exp = expected.clone();
    for row in exp["containers"].as_array_mut().unwrap() {
        let old = row["id"].as_str().unwrap().to_string();
        row["id"] = json!(ids[&old]);
    }
    exp["containers"]
        .as_array_mut()
        .unwrap()
        .sort_by(|a, b| a["id"].as_str().cmp(&b["id"].as_str()));
    exp["runtime"] = version.clone();
    exp["scenario"] = json!(out.file_name().unwrap().to_string_lossy());
    exp["made_by"] = json!(format!(
        "scripts/make-docker-node-fixture.sh (testtools/src/bin/make-docker-node.rs) from {}: the real kubelet's pods, labels, annotations and verdicts, the containers created on a real dockerd in cri-dockerd's shape",
        src.file_name().unwrap().to_string_lossy()
    ));
    std::fs::write(out.join("pods.json"), fixture_json(&pods)).unwrap();
    std::fs::write(out.join("expected.json"), fixture_json(&exp)).unwrap();
    std::fs::write(
        out.join("runtime-before.json"),
        fixture_json(&json!({"version": version, "ids": ids})),
    )
    .unwrap();

    // done with the live containers (the guard removes them and stops what is left)
    d.start();
    let c = d.client();
    for id in d.container_ids.clone().iter().rev() {
        let _ = c.request("DELETE", &format!("/containers/{id}?force=1"), None);
    }
    d.container_ids.clear();
    d.stop();
    eprintln!(
        "make-docker-node: {} containers and {} sandboxes written by Docker {} into {}",
        new_id.len(),
        sandbox_of.len(),
        version["Version"],
        out.display()
    );
    ExitCode::SUCCESS
}
