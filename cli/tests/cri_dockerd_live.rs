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

mod under_test;

use hashcompat::KubeletVersion;
use rehash::cri_dockerd::checkpoint::{SandboxCheckpoint, Writer};
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
use under_test::bin;

const HASH: &str = "io.kubernetes.container.hash";

static SERIAL: Mutex<()> = Mutex::new(());

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
        Scenario::on(cd::Node::new(), tag)
    }

    /// On a node of another dockerd.
    fn on(mut node: cd::Node, tag: &str) -> Scenario {
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

    /// The node as kubelet 1.23 leaves it for the window: cri-dockerd's checkpoints become
    /// dockershim's (its directory, its checksum), cri-dockerd's root is emptied, and
    /// cri-dockerd and dockerd are stopped (live-restore: the containers keep running).
    fn leave_as_kubelet_1_23_and_stop(&mut self) {
        self.cri = None;
        self.node.stop();
        let shim = &self.node.dockershim_sandbox_dir;
        fs::create_dir_all(shim).unwrap();
        for pod in &self.pods {
            let own = self.node.checkpoint_dir().join(&pod.sandbox);
            let cp = SandboxCheckpoint::parse(&fs::read(&own).unwrap()).unwrap();
            assert_eq!(cp.writer(), Writer::CriDockerd, "{}", own.display());
            fs::write(shim.join(&pod.sandbox), cp.for_dockershim()).unwrap();
        }
        fs::remove_dir_all(&self.node.root).unwrap();
        self.node.docker.stop();
    }

    fn stop(&mut self) {
        self.cri = None;
        self.node.stop();
        self.node.docker.stop();
    }

    fn start(&mut self) {
        self.node.docker.start();
        self.cri = Some(self.node.start());
    }

    /// The Docker store and the kubelet-side flags of this node (nothing under the machine's
    /// own /var/lib or /etc is read).
    fn store_flags(&self) -> Vec<String> {
        let d = &self.node.docker;
        let t = &self.node.t;
        for dir in ["kubelet-root", "manifests"] {
            fs::create_dir_all(t.join(dir)).unwrap();
        }
        vec![
            s("--runtime"),
            s("docker"),
            s("--root"),
            p(&d.data_root()),
            s("--runtime-socket"),
            p(&d.socket()),
            s("--runtime-pidfile"),
            p(&d.pidfile()),
            s("--live-restore"),
            s("true"),
            s("--daemon-json"),
            p(&d.path("daemon.json")),
            s("--kubelet-dir"),
            p(&t.join("kubelet-root")),
            s("--manifests"),
            p(&t.join("manifests")),
            s("--cri-dockerd"),
            p(&cd::binary()),
            s("--dockershim-checkpoints"),
            p(&self.node.dockershim_sandbox_dir),
            s("--cri-dockerd-root"),
            p(&self.node.root),
            s("--cri-dockerd-endpoint"),
            self.node.endpoint(),
        ]
    }

    /// Every config.v2.json of the store, with its bytes.
    fn docker_files(&self) -> BTreeMap<PathBuf, Vec<u8>> {
        let mut m = BTreeMap::new();
        for e in fs::read_dir(self.node.docker.data_root().join("containers"))
            .unwrap()
            .flatten()
        {
            let f = e.path().join("config.v2.json");
            if let Ok(b) = fs::read(&f) {
                m.insert(f, b);
            }
        }
        m
    }

    /// What cri-dockerd reports, as the target kubelet asks it: every container `want`'s hash
    /// with the same process, every sandbox ready with its original IP (none for host network).
    fn check_through_cri(&self, pids: &BTreeMap<String, (u32, u64)>, want: &str, phase: &str) {
        let listed = self.cri().list_containers().expect("ListContainers");
        for c in &self.ctrs {
            let l = listed
                .iter()
                .find(|l| l.id == c.id)
                .unwrap_or_else(|| panic!("{phase}: cri-dockerd lost {}", c.name));
            assert_eq!(
                l.annotations.get(HASH),
                Some(&hash(&c.spec, want)),
                "{phase}: hash of {}",
                c.name
            );
            assert_eq!(l.state, "CONTAINER_RUNNING", "{phase}: {}", c.name);
            let (pid, start) = pids[&c.id];
            assert_eq!(l.pid, Some(pid), "{phase}: pid of {}", c.name);
            assert_eq!(
                ctd::proc_stat(pid).map(|s| s.1),
                Some(start),
                "{phase}: {}",
                c.name
            );
        }
        for pod in &self.pods {
            let st = self.cri().pod_sandbox_status(&pod.sandbox).unwrap();
            assert!(st.ready, "{phase}: {} not ready: {st:?}", pod.name);
            assert_eq!(st.ip, pod.ip, "{phase}: IP of {}", pod.name);
        }
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

fn s(x: &str) -> String {
    x.to_string()
}

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

/// The window, for 1.23 → 1.24 and (on a second node) 1.23 → 1.31: the node as kubelet 1.23
/// leaves it (dockershim's checkpoints, cri-dockerd's root empty), cri-dockerd and dockerd
/// stopped, the containers running on; `patch` rewrites the hashes and carries the
/// checkpoints over; dockerd and cri-dockerd start; `verify --live` asks cri-dockerd. Then
/// everything is checked again through the CRI, a sandbox on the bridge is torn down through
/// cri-dockerd (which reads the carried-over checkpoint: with dockershim's checksum it would
/// refuse it), and `rollback` restores the Docker files and removes the copies.
#[test]
fn cri_dockerd_switch_keeps_every_container_and_sandbox() {
    switch_keeps_every_container_and_sandbox(&[("s24", "1.24"), ("s31", "1.31")], &|| {
        cd::Node::new()
    });
}

/// The same on Docker 28.5.2, built from the Go module proxy (scripts/setup-docker-module.sh).
#[test]
fn cri_dockerd_switch_on_docker_28_5_keeps_every_container_and_sandbox() {
    let dockerd = testtools::docker::module_dockerd("28.5.2");
    switch_keeps_every_container_and_sandbox(&[("t31", "1.31")], &|| {
        cd::Node::with_dockerd(dockerd.clone())
    });
}

/// And on Docker 29's engine (moby/moby/v2 v2.0.0-beta.24) with runc 1.4.3 (both built from the
/// Go module proxy): cri-dockerd 0.4.1 in front of it.
#[test]
fn cri_dockerd_switch_on_docker_29_engine_keeps_every_container_and_sandbox() {
    let dockerd = testtools::docker::module_dockerd("v2.0.0-beta.24");
    let runc = testtools::docker::module_runc("1.4.3");
    switch_keeps_every_container_and_sandbox(&[("u31", "1.31")], &|| {
        cd::Node::with_docker(dockerd.clone(), Some(runc.clone()))
    });
}

fn switch_keeps_every_container_and_sandbox(cases: &[(&str, &str)], node: &dyn Fn() -> cd::Node) {
    root_or_fail();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for &(tag, to) in cases {
        let mut sc = Scenario::on(node(), tag);
        let pids = sc.pids();
        sc.leave_as_kubelet_1_23_and_stop();
        for (id, (pid, start)) in &pids {
            assert_eq!(
                ctd::proc_stat(*pid).map(|s| s.1),
                Some(*start),
                "{to}: container {id} died with dockerd (live-restore?)"
            );
        }
        let before = sc.docker_files();
        let shim_before: BTreeMap<PathBuf, Vec<u8>> = fs::read_dir(&sc.node.dockershim_sandbox_dir)
            .unwrap()
            .flatten()
            .map(|e| (e.path(), fs::read(e.path()).unwrap()))
            .collect();

        // the plan names the switch
        let mut plan_args = vec![
            s("plan"),
            s("--pods"),
            p(&sc.pods_file),
            s("--to"),
            s(to),
            s("-o"),
            s("json"),
        ];
        plan_args.extend(sc.store_flags());
        let out = run(&plan_args);
        expect_code("plan", &out, 0);
        let plan: Value = serde_json::from_str(&out.stdout).unwrap();
        // --from auto: the oldest version whose hashes the stored ones prove (1.21–1.23 hash
        // these specs alike); the switch applies to any of them below 1.24
        assert!(
            plan["from_candidates"]
                .as_array()
                .unwrap()
                .contains(&json!(FROM)),
            "{to}: {}",
            plan["from_candidates"]
        );
        let codes: Vec<&str> = plan["hazards"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["code"].as_str().unwrap())
            .collect();
        for code in [
            "cri-dockerd-binary",
            "cri-dockerd-checkpoints",
            "kubelet-flags-change",
        ] {
            assert!(codes.contains(&code), "{to}: {code} not in {codes:?}");
        }
        assert!(
            !codes.contains(&"cri-dockerd-checkpoint-missing"),
            "{codes:?}"
        );
        assert_eq!(
            plan["cri_dockerd"]["version"],
            json!(format!("cri-dockerd {} (v{})", cd::VERSION, cd::VERSION))
        );

        // patch
        let backup = sc.node.t.join(format!("backup-{to}"));
        if to == "1.24" {
            // with cri-dockerd answering (dockerd too), the plan blocks the patch
            sc.start();
            let out = run(&plan_args);
            expect_code("plan with cri-dockerd running", &out, 0);
            assert!(
                out.stdout.contains("\"cri-dockerd-running\""),
                "{}",
                out.stdout
            );
            sc.stop();
        }
        let report = sc.node.t.join(format!("report-{to}.json"));
        let mut patch_args = vec![
            s("patch"),
            s("--pods"),
            p(&sc.pods_file),
            s("--to"),
            s(to),
            s("--backup-dir"),
            p(&backup),
            s("--report"),
            p(&report),
        ];
        patch_args.extend(sc.store_flags());
        let out = run(&patch_args);
        expect_code("patch", &out, 0);
        assert!(
            out.stderr.contains("copied 2 sandbox checkpoint(s)"),
            "{}",
            out.stderr
        );
        for pod in &sc.pods {
            let copy = sc.node.checkpoint_dir().join(&pod.sandbox);
            let cp = SandboxCheckpoint::parse(&fs::read(&copy).unwrap()).unwrap();
            assert_eq!(cp.writer(), Writer::CriDockerd, "{}", copy.display());
        }

        // the new kubelet's runtime
        sc.start();
        let out = run(&[s("verify"), s("--live"), s("--report"), p(&report)]);
        expect_code("verify --live", &out, 0);
        sc.check_through_cri(&pids, to, &format!("after patch to {to}"));
        if to == "1.24" {
            already_switched_node_is_not_switched_again(&sc);
        }

        // rollback (dockerd and cri-dockerd stopped again)
        sc.stop();
        let mut rb = vec![s("rollback"), s("--backup-dir"), p(&backup)];
        rb.extend(sc.store_flags().into_iter().take(12));
        let out = run(&rb);
        expect_code("rollback", &out, 0);
        assert_eq!(sc.docker_files(), before, "{to}: Docker files restored");
        // the directories stay only where cri-dockerd made them (its start in the 1.24 run)
        if to == "1.24" {
            let left: Vec<_> = fs::read_dir(sc.node.checkpoint_dir())
                .unwrap()
                .flatten()
                .collect();
            assert!(left.is_empty(), "{to}: rollback left {left:?}");
        } else {
            assert!(
                !sc.node.root.exists(),
                "{to}: rollback removes the copied checkpoints and the directories the patch made"
            );
        }
        let shim_after: BTreeMap<PathBuf, Vec<u8>> = fs::read_dir(&sc.node.dockershim_sandbox_dir)
            .unwrap()
            .flatten()
            .map(|e| (e.path(), fs::read(e.path()).unwrap()))
            .collect();
        assert_eq!(
            shim_after, shim_before,
            "{to}: dockershim's files untouched"
        );

        // patch again and tear a bridge sandbox down through cri-dockerd: it reads the copied
        // checkpoint (GetPodPortMappings) and releases the CNI lease
        let backup2 = sc.node.t.join(format!("backup2-{to}"));
        let mut again = patch_args.clone();
        let at = again.iter().position(|a| a == "--backup-dir").unwrap();
        again[at + 1] = p(&backup2);
        expect_code("patch again", &run(&again), 0);
        sc.start();
        sc.check_through_cri(&pids, to, &format!("after the second patch to {to}"));
        let bridge = &sc.pods[1];
        let leases = sc
            .node
            .t
            .join("var/lib/cni/networks")
            .join(&sc.node.network);
        assert!(leases.join(&bridge.ip).exists(), "{}", leases.display());
        sc.cri()
            .stop_pod_sandbox(&bridge.sandbox)
            .unwrap_or_else(|e| {
                panic!(
                    "{to}: StopPodSandbox through the copied checkpoint: {e}\n{}",
                    sc.node.log_tail()
                )
            });
        assert!(
            !leases.join(&bridge.ip).exists(),
            "{to}: the bridge pod's lease is released"
        );
        assert!(
            sc.node.checkpoint_dir().join(&bridge.sandbox).exists(),
            "{to}: cri-dockerd rejected the carried-over checkpoint:\n{}",
            sc.node.log_tail()
        );
        // and verify --live now fails, naming the sandbox the kubelet would recreate
        let out = run(&[s("verify"), s("--live"), s("--report"), p(&report)]);
        expect_code("verify --live with a stopped sandbox", &out, 4);
        let all = format!("{}{}", out.stdout, out.stderr);
        assert!(
            all.contains(&bridge.sandbox) && all.contains("not ready"),
            "{to}: {all}"
        );
    }
}

/// Issue 36: a node already on cri-dockerd (kubelet 1.24, this one just switched) whose hashes
/// are also 1.23's (1.21–1.24 hash these specs alike) is read, by the hashes alone, as a
/// dockershim node, and planned for the switch it already made. The installed kubelet's own
/// `--version` (offline; online the Node's report) settles it: 1.24, no switch.
fn already_switched_node_is_not_switched_again(sc: &Scenario) {
    let plan = |kubelet: &Path| -> Value {
        let mut a = vec![
            s("plan"),
            s("--pods"),
            p(&sc.pods_file),
            s("--to"),
            s("1.25"),
            s("--kubelet-path"),
            p(kubelet),
            s("-o"),
            s("json"),
        ];
        a.extend(sc.store_flags());
        let out = run(&a);
        expect_code("plan of the switched node", &out, 0);
        serde_json::from_str(&out.stdout).unwrap()
    };
    let switch_codes = |plan: &Value| -> Vec<String> {
        plan["hazards"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["code"].as_str().unwrap().to_string())
            .filter(|c| c == "cri-dockerd-checkpoints" || c == "kubelet-flags-change")
            .collect()
    };
    // the hashes alone cannot tell: both sides of 1.24 are candidates, and the oldest is the
    // plan's `from` (what keeps it from planning the switch again is then only cri-dockerd's
    // root holding the checkpoints, `cri-dockerd-already`)
    let blind = plan(&sc.node.t.join("no-kubelet-here"));
    let candidates = blind["from_candidates"].as_array().unwrap();
    assert!(
        candidates.contains(&json!("1.23")) && candidates.contains(&json!("1.24")),
        "the stored hashes allow both sides of 1.24: {candidates:?}"
    );
    assert_ne!(blind["from"], json!("1.24"), "{}", blind["from"]);
    // the installed kubelet's --version: 1.24, no switch
    let kubelet = sc.node.t.join("kubelet-1.24");
    fs::write(&kubelet, "#!/bin/sh\necho Kubernetes v1.24.17\n").unwrap();
    fs::set_permissions(
        &kubelet,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let seen = plan(&kubelet);
    assert_eq!(
        seen["from"],
        json!("1.24"),
        "the installed kubelet's version decides among {}",
        seen["from_candidates"]
    );
    assert!(
        switch_codes(&seen).is_empty() && seen["cri_dockerd"].is_null(),
        "a node already on cri-dockerd is not planned for the switch again: {} {}",
        seen["hazards"],
        seen["cri_dockerd"]
    );
    assert!(
        seen["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w.as_str().unwrap().contains("the installed kubelet")),
        "the plan says who decided: {}",
        seen["warnings"]
    );
}

/// Why patch rewrites the checksum: a dockershim checkpoint copied byte for byte into
/// cri-dockerd's root fails cri-dockerd's checksum check (go-spew names dockershim's Go types
/// in it): the first teardown of that sandbox logs "checkpoint is corrupted" and deletes it,
/// and with it the sandbox's port mappings (its hostPorts are then never unmapped). The
/// converted copy survives the same teardown (cri_dockerd_switch_keeps_every_container_and_sandbox).
#[test]
fn a_verbatim_dockershim_checkpoint_is_deleted_by_cri_dockerd() {
    root_or_fail();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut sc = Scenario::new("v1");
    sc.cri = None;
    sc.node.stop();
    let bridge = sc.pods[1].sandbox.clone();
    let own = sc.node.checkpoint_dir().join(&bridge);
    let cp = SandboxCheckpoint::parse(&fs::read(&own).unwrap()).unwrap();
    fs::write(&own, cp.for_dockershim()).unwrap();
    sc.cri = Some(sc.node.start());
    sc.cri().stop_pod_sandbox(&bridge).unwrap();
    assert!(
        !own.exists(),
        "cri-dockerd kept a checkpoint with dockershim's checksum"
    );
    assert!(
        fs::read_to_string(&sc.node.log)
            .unwrap()
            .contains("checkpoint is corrupted"),
        "{}",
        sc.node.log_tail()
    );
}

/// `upgrade` across the switch in one window, on the real node: dockerd runs from its "unit"
/// (a shell script here) with no cri-dockerd, kubelet 1.23 (the stand-in of testtools::kubelet,
/// as no kubelet binary runs on this machine) runs with kubeadm's flag file holding
/// `--network-plugin=cni`. `upgrade --to 1.31` with a kubelet 1.31 binary that refuses the
/// dockershim flags and needs a runtime endpoint: the preflight checks it against the command
/// line the rewritten flag file will give, the window stops kubelet, cri-dockerd (not running)
/// and dockerd, patches, carries the checkpoints over, installs the binary, rewrites the flag
/// file, starts dockerd and cri-dockerd, verifies through cri-dockerd and starts the new
/// kubelet, which connects to cri-dockerd. Checked: the same container processes with the 1.31
/// hashes and every sandbox ready with its IP, through cri-dockerd; the new kubelet runs and
/// talks to cri-dockerd's socket; the flag file as kubelet 1.31 needs it.
///
/// Then a second node, to 1.24, where the new kubelet never becomes healthy: the window rolls back —
/// the Docker files, the kubelet binary and the flag file byte for byte, no checkpoint left in
/// cri-dockerd's root, the old kubelet running on dockershim again, every container the same
/// process.
#[test]
fn upgrade_switches_a_dockershim_node_to_cri_dockerd_in_one_window() {
    use testtools::kubelet::{sh, PidFileGuard, StandIn};
    root_or_fail();
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for healthy in [true, false] {
        // to 1.31 (hashes rewritten, no --container-runtime flag any more); the failing one to
        // 1.24, with a budget that ends its wait for the broken kubelet sooner
        let (tag, to, budget) = if healthy {
            ("u31", "1.31", "60")
        } else {
            ("f24", "1.24", "25")
        };
        let mut sc = Scenario::new(tag);
        let pids = sc.pids();
        sc.leave_as_kubelet_1_23_and_stop();
        let [dpid, cpid] = sc.node.script_pidfiles();
        let t = sc.node.t.clone();
        let kubelet_dir = t.join("kubelet-standin");
        fs::create_dir_all(&kubelet_dir).unwrap();
        let mut kubelet = StandIn::new(&kubelet_dir, "1.23.17");
        // stops the script-started kubelet, cri-dockerd and dockerd before the harness's own
        // guards clean up the containers
        let _scripts = PidFileGuard(vec![kubelet.pidfile.clone(), cpid.clone(), dpid.clone()]);
        sh(&sc.node.start_docker_script());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while sc.node.docker.client().ping().is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "dockerd did not answer"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let flags = t.join("var/lib/kubelet/kubeadm-flags.env");
        fs::create_dir_all(flags.parent().unwrap()).unwrap();
        let original_flags = format!(
            "KUBELET_KUBEADM_ARGS=\"--network-plugin=cni --pod-infra-container-image={}\"\n",
            cd::PAUSE_IMAGE
        );
        fs::write(&flags, &original_flags).unwrap();
        kubelet.env_file = Some(flags.clone());
        kubelet.start();
        assert_eq!(
            kubelet.running_with(),
            (s("v1.23.17"), s("dockershim")),
            "kubelet 1.23 runs on its dockershim"
        );
        let new = if healthy {
            kubelet.binary_without_dockershim("kubelet-1.31", "1.31.0")
        } else {
            // answers --version, exits at start: the health endpoint never answers
            let b = kubelet_dir.join("kubelet-1.24-broken");
            testtools::kubelet::write_exe(
                &b,
                b"#!/bin/sh\nfor a in \"$@\"; do case \"$a\" in --network-plugin*) exit 1;; --version) echo Kubernetes v1.24.0; exit 0;; esac; done\necho 'E0101 broken build' >&2; exit 1\n",
            );
            b
        };
        let docker_before = sc.docker_files();
        let kubelet_before = fs::read(&kubelet.path).unwrap();
        let state = t.join("state/upgrade.json");
        let mut a = vec![
            s("upgrade"),
            s("--pods"),
            p(&sc.pods_file),
            s("--from"),
            s(FROM),
            s("--to"),
            s(to),
            s("--kubelet-path"),
            p(&kubelet.path),
            s("--kubelet-binary"),
            p(&new),
            s("--kubelet-flags-file"),
            p(&flags),
            s("--state"),
            p(&state),
            // beside the state file: a run that finishes a killed one believes only a
            // backup there (or under the default backup root)
            s("--backup-dir"),
            p(&t.join("state/backup-upgrade")),
            s("--budget"),
            s(budget),
            s("--stop-kubelet"),
            kubelet.stop_cmd(),
            s("--start-kubelet"),
            kubelet.start_cmd(),
            s("--stop-runtime"),
            sc.node.stop_script(),
            s("--start-runtime"),
            sc.node.start_script(),
            s("--kubelet-pidfile"),
            p(&kubelet.pidfile),
            s("--kubelet-healthz"),
            kubelet.healthz(),
        ];
        a.extend(sc.store_flags());
        let out = run(&a);
        eprintln!(
            "upgrade ({tag}): exit {}\n{}{}",
            out.code, out.stdout, out.stderr
        );
        let st: Value = serde_json::from_slice(&fs::read(&state).unwrap()).unwrap();
        // the window's services are the scripts' from here on: cri-dockerd is reached at its
        // socket directly
        sc.cri = Some(CriClient::connect(&sc.node.endpoint()).expect("cri-dockerd answers"));
        if healthy {
            expect_code("upgrade across the switch", &out, 0);
            assert_eq!(st["phase"], json!("done"), "{st:#}");
            sc.check_through_cri(&pids, to, "after upgrade");
            assert!(
                st["rewritten"].as_u64().unwrap() > 0,
                "1.23 → 1.31 rewrites hashes: {st:#}"
            );
            assert_eq!(
                kubelet.running_with(),
                (s("v1.31.0"), sc.node.endpoint()),
                "the new kubelet runs and talks to cri-dockerd"
            );
            assert_eq!(
                fs::read_to_string(&flags).unwrap(),
                format!(
                    "KUBELET_KUBEADM_ARGS=\"--pod-infra-container-image={} --container-runtime-endpoint={}\"\n",
                    cd::PAUSE_IMAGE,
                    sc.node.endpoint()
                ),
                "the flag file as kubelet 1.31 needs it (it has no --container-runtime)"
            );
            for pod in &sc.pods {
                assert!(
                    sc.node.checkpoint_dir().join(&pod.sandbox).is_file(),
                    "{}: checkpoint carried over",
                    pod.name
                );
            }
        } else {
            expect_code("upgrade whose new kubelet never gets healthy", &out, 3);
            assert_eq!(st["phase"], json!("rolled-back"), "{st:#}");
            assert_eq!(st["failure"]["step"], json!("wait-healthy"), "{st:#}");
            assert_eq!(
                fs::read_to_string(&flags).unwrap(),
                original_flags,
                "the flag file byte for byte"
            );
            assert!(
                fs::read(&kubelet.path).unwrap() == kubelet_before,
                "the old kubelet binary byte for byte"
            );
            assert_eq!(
                kubelet.running_with(),
                (s("v1.23.17"), s("dockershim")),
                "the old kubelet runs on dockershim again"
            );
            let after = sc.docker_files();
            if st["store_restored"] == json!("bytes") {
                assert!(after == docker_before, "the Docker files byte for byte");
            }
            assert!(
                fs::read_dir(sc.node.checkpoint_dir())
                    .map(|mut d| d.next().is_none())
                    .unwrap_or(true),
                "no checkpoint left in cri-dockerd's root"
            );
            // every container the same process with its 1.23 hash again, as dockerd reports
            // it (the old kubelet's dockershim reads dockerd, not cri-dockerd)
            let c = sc.node.docker.client();
            for ctr in &sc.ctrs {
                let v: Value = c
                    .call("GET", &format!("/containers/{}/json", ctr.id), None)
                    .unwrap();
                assert_eq!(
                    v["Config"]["Labels"]["annotation.io.kubernetes.container.hash"],
                    json!(hash(&ctr.spec, FROM)),
                    "after the rollback: hash of {}",
                    ctr.name
                );
                assert_eq!(
                    v["State"]["Pid"].as_u64(),
                    Some(u64::from(pids[&ctr.id].0)),
                    "after the rollback: {} is the same process",
                    ctr.name
                );
            }
        }
    }
}
