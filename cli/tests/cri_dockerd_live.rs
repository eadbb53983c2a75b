//! The dockershim → cri-dockerd switch (kubelet 1.23 → 1.24 and → 1.31) end to end on a REAL
//! dockerd 20.10 (Debian's docker.io, live-restore) and a REAL cri-dockerd 0.4.1 built from
//! third_party/ (testtools::cri_dockerd; scripts/setup-cri-dockerd.sh).
//!
//! No kubelet binary exists here (nor dockershim, which lived inside the kubelet). The pods
//! are made the way kubelet 1.23's dockershim made them: dockershim and cri-dockerd are the
//! same code (cri-dockerd is dockershim moved out of the kubelet), so cri-dockerd is driven
//! through the CRI exactly as kubelet 1.23's kuberuntime drives dockershim (the kubelet's
//! labels and annotations, the real 1.23 hashes of golden specs from
//! fixtures/golden/specs.jsonl), and its sandbox checkpoints are then moved to where dockershim
//! kept them (`/var/lib/dockershim/sandbox/`, under the node's stand-in root) with the checksum
//! dockershim computes, cri-dockerd's root left empty: the node as kubelet 1.23 leaves it.
//!
//! Needs root and scripts/setup-docker.sh + scripts/setup-cri-dockerd.sh. One node at a time.

use hashcompat::KubeletVersion;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use storepatch::live::cri::CriClient;
use testtools::containerd as ctd;
use testtools::cri::CriTestCalls;
use testtools::cri_dockerd as cd;

const HASH: &str = "io.kubernetes.container.hash";

static SERIAL: Mutex<()> = Mutex::new(());

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_kubelet-rehash")
}

fn golden(id: &str, name: &str) -> Value {
    let path = ctd::workspace().join("fixtures/golden/specs.jsonl");
    let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    for l in text.lines() {
        let v: Value = serde_json::from_str(l).unwrap();
        if v["id"] == id {
            let mut s = v["container"].clone();
            s["name"] = json!(name);
            return s;
        }
    }
    panic!("{}: no spec {id}", path.display());
}

/// The hash kubelet `ver` computes for `spec`.
fn hash(spec: &Value, ver: &str) -> String {
    let v: KubeletVersion = ver.parse().unwrap();
    hashcompat::hash_container(spec, v)
        .unwrap_or_else(|e| panic!("hashcompat {ver} of {}: {e}", spec["name"]))
        .hash
        .to_string()
}

struct Pod {
    ns: String,
    name: String,
    uid: String,
    host_network: bool,
    sandbox: String,
    /// The address CNI gave it (none for the host-network pod).
    ip: String,
}

struct Ctr {
    pod: usize,
    name: String,
    spec: Value,
    id: String,
}

/// A Docker node as kubelet 1.23 leaves it: a host-network pod with two containers and a pod
/// on the CNI bridge with two.
struct Scenario {
    node: cd::Node,
    cri: Option<CriClient>,
    pods: Vec<Pod>,
    ctrs: Vec<Ctr>,
    pods_file: PathBuf,
}

const FROM: &str = "1.23";

impl Scenario {
    fn new(tag: &str) -> Scenario {
        let mut node = cd::Node::new();
        let cri = node.start();
        let mut pods = vec![
            Pod {
                ns: "shop".into(),
                name: format!("web-{tag}-5d8f7c9b6-x2k4p"),
                uid: format!("d0c00000-{tag:0>4}-4c6d-9e8f-000000000001"),
                host_network: true,
                sandbox: String::new(),
                ip: String::new(),
            },
            Pod {
                ns: "kube-system".into(),
                name: format!("tools-{tag}-8xk2q"),
                uid: format!("d0c00000-{tag:0>4}-4c6d-9e8f-000000000002"),
                host_network: false,
                sandbox: String::new(),
                ip: String::new(),
            },
        ];
        let mut ctrs = Vec::new();
        for (pod, id, name) in [
            (0, "f001-minimal", "app"),
            (0, "f018-probes-http-exec", "probes"),
            (1, "f022-securitycontext-full", "sc"),
            (1, "f009-env-fieldref", "envfrom"),
        ] {
            ctrs.push(Ctr {
                pod,
                name: name.into(),
                spec: golden(id, name),
                id: String::new(),
            });
        }
        for (i, p) in pods.iter_mut().enumerate() {
            let pc = node.pod_config(&p.ns, &p.name, &p.uid, p.host_network);
            p.sandbox = cri.run_pod_sandbox(&pc).unwrap_or_else(|e| {
                panic!(
                    "RunPodSandbox {}: {e}\n{}\n{}",
                    p.name,
                    node.log_tail(),
                    node.docker.log_tail()
                )
            });
            for c in ctrs.iter_mut().filter(|c| c.pod == i) {
                let spec = ctd::spec(&c.name, &hash(&c.spec, FROM), None, true);
                let cc = ctd::container_config_in(&node.t, &pc, cd::APP_IMAGE, &spec);
                c.id = cri
                    .create_container(&p.sandbox, &cc, &pc)
                    .unwrap_or_else(|e| panic!("CreateContainer {}: {e}", c.name));
                cri.start_container(&c.id)
                    .unwrap_or_else(|e| panic!("StartContainer {}: {e}", c.name));
            }
            let st = cri.pod_sandbox_status(&p.sandbox).unwrap();
            assert!(st.ready, "{}: {st:?}", p.name);
            assert_eq!(st.host_network, p.host_network, "{}: {st:?}", p.name);
            p.ip = st.ip.clone();
        }
        let prefix = node.subnet.rsplit_once(".0/").unwrap().0.to_string();
        assert!(
            pods[1].ip.starts_with(&format!("{prefix}.")),
            "the bridge pod has no address of {}: {:?}",
            node.subnet,
            pods[1].ip
        );
        assert_eq!(pods[0].ip, "", "a host-network sandbox reports no IP");
        let pods_file = node.t.join("pods.json");
        let sc = Scenario {
            node,
            cri: Some(cri),
            pods,
            ctrs,
            pods_file,
        };
        fs::write(
            &sc.pods_file,
            serde_json::to_vec_pretty(&sc.pods_json()).unwrap(),
        )
        .unwrap();
        sc
    }

    /// `kubectl get pods -A -o json` of the node.
    fn pods_json(&self) -> Value {
        let items: Vec<Value> = self
            .pods
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let mine: Vec<&Ctr> = self.ctrs.iter().filter(|c| c.pod == i).collect();
                json!({
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": p.name, "namespace": p.ns, "uid": p.uid},
                    "spec": {
                        "containers": mine.iter().map(|c| c.spec.clone()).collect::<Vec<_>>(),
                        "nodeName": "docker-node",
                        "restartPolicy": "Always",
                        "hostNetwork": p.host_network,
                    },
                    "status": {
                        "phase": "Running",
                        "podIP": if p.host_network { "192.0.2.10".to_string() } else { p.ip.clone() },
                        "containerStatuses": mine.iter().map(|c| json!({
                            "name": c.name,
                            "containerID": format!("docker://{}", c.id),
                            "image": c.spec["image"],
                            "imageID": "",
                            "ready": true,
                            "restartCount": 0,
                            "started": true,
                            "state": {"running": {"startedAt": "2026-01-01T10:00:00Z"}},
                        })).collect::<Vec<_>>(),
                    },
                })
            })
            .collect();
        json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items})
    }

    fn cri(&self) -> &CriClient {
        self.cri.as_ref().expect("cri-dockerd runs")
    }

    /// (pid, start time) of every container, from cri-dockerd; all must run.
    fn pids(&self) -> BTreeMap<String, (u32, u64)> {
        let listed = self.cri().list_containers().expect("ListContainers");
        self.ctrs
            .iter()
            .map(|c| {
                let l = listed.iter().find(|l| l.id == c.id).unwrap();
                assert_eq!(l.state, "CONTAINER_RUNNING", "{}: {l:?}", c.name);
                let pid = l.pid.unwrap_or_else(|| panic!("no pid for {}", c.name));
                let (_, start) = ctd::proc_stat(pid).expect("container process");
                (c.id.clone(), (pid, start))
            })
            .collect()
    }
}

#[derive(Debug)]
struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

fn run(args: &[String]) -> Out {
    let o = Command::new(bin())
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin()));
    Out {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

#[allow(dead_code)]
fn expect_code(what: &str, o: &Out, code: i32) {
    assert_eq!(
        o.code, code,
        "{what}: exit {} (expected {code})\nstdout:\n{}\nstderr:\n{}",
        o.code, o.stdout, o.stderr
    );
}

fn root_or_fail() {
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "the cri-dockerd tests start a real dockerd and cri-dockerd and need root; {}",
        cd::SETUP
    );
}

#[allow(dead_code)]
fn s(x: &str) -> String {
    x.to_string()
}

#[allow(dead_code)]
fn p(x: &Path) -> String {
    x.display().to_string()
}

/// The harness itself: kubelet 1.23-shaped pods on a real cri-dockerd, one on the CNI bridge
/// (an address of the test's own subnet), one host-network; cri-dockerd keeps a checkpoint per
/// sandbox in its own root; the containers carry the real 1.23 hashes.
#[test]
fn cri_dockerd_runs_kubelet_1_23_pods() {
    root_or_fail();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let sc = Scenario::new("h1");
    for p in &sc.pods {
        let cp = sc.node.checkpoint_dir().join(&p.sandbox);
        let v: Value = serde_json::from_slice(&fs::read(&cp).unwrap()).unwrap();
        assert_eq!(v["name"], json!(p.name), "{}", cp.display());
        assert_eq!(
            v["data"]["host_network"].as_bool().unwrap_or(false),
            p.host_network
        );
    }
    let listed = sc.cri().list_containers().unwrap();
    for c in &sc.ctrs {
        let l = listed.iter().find(|l| l.id == c.id).unwrap();
        assert_eq!(
            l.annotations.get(HASH),
            Some(&hash(&c.spec, FROM)),
            "{}",
            c.name
        );
    }
    assert_eq!(sc.pids().len(), sc.ctrs.len());
}
