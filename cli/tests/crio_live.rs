//! The `kubelet-rehash` binary end to end on a REAL CRI-O 1.30.14 (testtools::crio, built by
//! scripts/setup-crio.sh): pods and containers created through the CRI as a kubelet 1.30 does
//! (its labels and annotations, the real 1.30 hashes of golden specs from
//! fixtures/golden/specs.jsonl), one host-network pod and one on a CNI bridge network; CRI-O is
//! stopped by pid (the containers keep running under conmon), the binary patches the stopped
//! store, CRI-O is started on the result and `verify --live` asks it through its CRI socket.
//!
//! CRI-O is the runtime that punishes a bad write by destroying data: a container whose
//! embedded annotations do not parse is deleted at start, and every pod is removed when the
//! version file is missing or names another major.minor. So every test here also checks that
//! CRI-O lists exactly the containers and pods it listed before (nothing deleted), running as
//! the same processes.
//!
//! Needs root and scripts/setup-crio.sh. One CRI-O at a time (a process-wide lock).

mod under_test;

use hashcompat::KubeletVersion;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::Instant;
use storepatch::live::cri::CriClient;
use testtools::containerd as ctd;
use testtools::cri::{v1, CriTestCalls};
use testtools::crio;
use under_test::bin;

const HASH: &str = "io.kubernetes.container.hash";
const HASH_WR: &str = "io.kubernetes.container.hashWithoutResources";

static SERIAL: Mutex<()> = Mutex::new(());

// ---------------------------------------------------------------------------------------------
// the node
// ---------------------------------------------------------------------------------------------

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

/// (hash, hashWithoutResources) the kubelet `ver` computes for `spec`.
fn hashes(spec: &Value, ver: &str) -> (String, Option<String>) {
    let v: KubeletVersion = ver.parse().unwrap();
    let h = hashcompat::hash_container(spec, v)
        .unwrap_or_else(|e| panic!("hashcompat {ver} of {}: {e}", spec["name"]));
    (
        h.hash.to_string(),
        h.hash_without_resources.map(|x| x.to_string()),
    )
}

struct Pod {
    ns: String,
    name: String,
    uid: String,
    host_network: bool,
    sandbox: String,
}

#[derive(Clone)]
struct Ctr {
    pod: usize,
    name: String,
    /// The pod's spec of it (None: an orphan the pods file does not list).
    spec: Option<Value>,
    /// Created from this spec's hashes (differs from `spec` for the drifted container).
    created_from: Value,
    id: String,
}

/// The node: a host-network pod with three proven containers and an orphan, a pod on the CNI
/// bridge with two proven containers and a drifted one.
struct Scenario {
    node: crio::Node,
    cri: Option<CriClient>,
    pods: Vec<Pod>,
    ctrs: Vec<Ctr>,
    pods_file: PathBuf,
}

/// (hash, hashWithoutResources) as a kubelet `ver` with InPlacePodVerticalScaling writes them.
fn stored_by(c: &Ctr, ver: &str) -> (String, Option<String>) {
    hashes(&c.created_from, ver)
}

impl Scenario {
    fn new(tag: &str, from: &str) -> Scenario {
        Scenario::on(crio::Node::new(), tag, from)
    }

    /// The scenario on a node of another CRI-O build.
    fn on(mut node: crio::Node, tag: &str, from: &str) -> Scenario {
        let pause = ctd::build_image(&node.p.t, crio::PAUSE_IMAGE, "pause");
        let app = ctd::build_image(&node.p.t, crio::APP_IMAGE, "app");
        node.import_image(&pause, crio::PAUSE_IMAGE);
        node.import_image(&app, crio::APP_IMAGE);
        let cri = node.start();
        let app_id = crio::image_id(&cri, crio::APP_IMAGE);
        crio::image_id(&cri, crio::PAUSE_IMAGE);
        let mut pods = vec![
            Pod {
                ns: "shop".into(),
                name: format!("web-{tag}-5d8f7c9b6-x2k4p"),
                uid: format!("c7100000-{tag:0>4}-4c6d-9e8f-000000000001"),
                host_network: true,
                sandbox: String::new(),
            },
            Pod {
                ns: "kube-system".into(),
                name: format!("tools-{tag}-8xk2q"),
                uid: format!("c7100000-{tag:0>4}-4c6d-9e8f-000000000002"),
                host_network: false,
                sandbox: String::new(),
            },
        ];
        let mut ctrs = Vec::new();
        let mut add = |pod: usize, id: &str, name: &str, listed: bool| {
            let s = golden(id, name);
            ctrs.push(Ctr {
                pod,
                name: name.into(),
                spec: listed.then(|| s.clone()),
                created_from: s,
                id: String::new(),
            });
        };
        add(0, "f001-minimal", "app", true);
        add(0, "f018-probes-http-exec", "probes", true);
        add(0, "f014-resources-2500m-1536Mi-129M", "res", true);
        add(0, "f001-minimal", "ghost", false);
        add(1, "f022-securitycontext-full", "sc", true);
        add(1, "f009-env-fieldref", "envfrom", true);
        // drifted: the pod's spec is f005, the container was created from f008
        add(1, "f008-env-values", "shell", true);
        let last = ctrs.len() - 1;
        ctrs[last].spec = Some(golden("f005-command-args-unicode", "shell"));
        for (i, p) in pods.iter_mut().enumerate() {
            let pc = pod_config(&node, p);
            p.sandbox = cri
                .run_pod_sandbox(&pc)
                .unwrap_or_else(|e| panic!("crio: RunPodSandbox {}: {e}", p.name));
            for c in ctrs.iter_mut().filter(|c| c.pod == i) {
                let (h, wr) = stored_by(c, from);
                let spec = ctd::spec(&c.name, &h, wr.as_deref(), true);
                let cc = ctd::container_config_in(&node.p.t, &pc, &app_id, &spec);
                c.id = cri
                    .create_container(&p.sandbox, &cc, &pc)
                    .unwrap_or_else(|e| panic!("crio: CreateContainer {}: {e}", c.name));
                cri.start_container(&c.id)
                    .unwrap_or_else(|e| panic!("crio: StartContainer {}: {e}", c.name));
            }
        }
        // the bridge pod really is on the CNI network: host-local leased it an address there
        let leases: Vec<String> =
            fs::read_dir(node.p.t.join("var/lib/cni/networks").join(&node.p.network))
                .map(|d| {
                    d.flatten()
                        .map(|e| e.file_name().to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default();
        let prefix = node.p.subnet.rsplit_once(".0/").unwrap().0;
        assert!(
            leases.iter().any(|l| l.starts_with(&format!("{prefix}."))),
            "no address of {} leased to the bridge pod: {leases:?}",
            node.p.subnet
        );
        let pods_file = node.p.t.join("pods.json");
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
                let mine: Vec<&Ctr> = self
                    .ctrs
                    .iter()
                    .filter(|c| c.pod == i && c.spec.is_some())
                    .collect();
                json!({
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": p.name, "namespace": p.ns, "uid": p.uid},
                    "spec": {
                        "containers": mine.iter().map(|c| c.spec.clone().unwrap()).collect::<Vec<_>>(),
                        "nodeName": "crio-node",
                        "restartPolicy": "Always",
                        "hostNetwork": p.host_network,
                    },
                    "status": {
                        "phase": "Running",
                        "containerStatuses": mine.iter().map(|c| json!({
                            "name": c.name,
                            "containerID": format!("cri-o://{}", c.id),
                            "image": c.spec.as_ref().unwrap()["image"],
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
        self.cri.as_ref().expect("crio runs")
    }

    fn start(&mut self) {
        self.cri = Some(self.node.start());
    }

    fn stop(&mut self) {
        self.cri = None;
        self.node.stop();
        assert!(
            self.node.p.clean_shutdown.exists(),
            "CRI-O wrote no clean-shutdown marker at SIGTERM"
        );
    }

    /// `--runtime crio --root <graphroot> --runroot <runroot> --runtime-socket <sock>`.
    fn store_flags(&self) -> Vec<String> {
        let p = &self.node.p;
        vec![
            s("--runtime"),
            s("crio"),
            s("--root"),
            p.graphroot.display().to_string(),
            s("--runroot"),
            p.runroot.display().to_string(),
            s("--runtime-socket"),
            p.sock.display().to_string(),
        ]
    }

    fn patch_args(&self, to: &str, backup: &Path) -> Vec<String> {
        let mut a = vec![
            s("patch"),
            s("--pods"),
            self.pods_file.display().to_string(),
            s("--to"),
            s(to),
        ];
        a.extend(self.store_flags());
        a.extend([s("--backup-dir"), backup.display().to_string()]);
        a
    }

    /// Every container's config.json in the graphroot and the runroot (what a patch may write)
    /// and CRI-O's version file (which it never may). Not the clean-shutdown marker: CRI-O
    /// removes it at start and writes it at a clean stop ([`Scenario::stop`] checks it).
    fn snapshot(&self) -> BTreeMap<PathBuf, Vec<u8>> {
        let p = &self.node.p;
        let mut m = BTreeMap::new();
        for root in [&p.graphroot, &p.runroot] {
            let dir = root.join("overlay-containers");
            for e in fs::read_dir(&dir).unwrap().flatten() {
                let cfg = e.path().join("userdata/config.json");
                if let Ok(b) = fs::read(&cfg) {
                    m.insert(cfg, b);
                }
            }
        }
        if let Ok(b) = fs::read(&p.version_file) {
            m.insert(p.version_file.clone(), b);
        }
        m
    }

    /// What CRI-O lists: containers (id → state, hash, hashWithoutResources, pid) and pods
    /// (id → ready).
    fn listing(&self) -> Listing {
        let cri = self.cri();
        let containers = cri
            .list_containers()
            .expect("ListContainers")
            .into_iter()
            .map(|c| {
                let l = Live {
                    hash: c.annotations.get(HASH).cloned(),
                    hash_wr: c.annotations.get(HASH_WR).cloned(),
                    state: c.state.clone(),
                    pid: c.pid,
                };
                (c.id, l)
            })
            .collect();
        let pods = cri
            .list_pod_sandbox()
            .expect("ListPodSandbox")
            .into_iter()
            .map(|p| (p.id, p.state == v1::PodSandboxState::SandboxReady as i32))
            .collect();
        Listing { containers, pods }
    }

    /// (pid, start time) of every container, from CRI-O; all must run.
    fn pids(&self) -> BTreeMap<String, (u32, u64)> {
        let l = self.listing();
        self.ctrs
            .iter()
            .map(|c| {
                let live = &l.containers[&c.id];
                assert_eq!(live.state, "CONTAINER_RUNNING", "{}: {live:?}", c.name);
                let pid = live.pid.unwrap_or_else(|| panic!("no pid for {}", c.name));
                let (_, start) = ctd::proc_stat(pid).expect("container process");
                (c.id.clone(), (pid, start))
            })
            .collect()
    }

    /// CRI-O lists exactly `before`'s containers and pods (none deleted, none new), every pod
    /// ready, every container running as the same process and reporting `want(c)`.
    fn check_live(
        &self,
        before: &Listing,
        pids: &BTreeMap<String, (u32, u64)>,
        want: &dyn Fn(&Ctr) -> (String, Option<String>),
        phase: &str,
    ) {
        let now = self.listing();
        let ids = |m: &BTreeMap<String, Live>| m.keys().cloned().collect::<Vec<_>>();
        assert_eq!(
            ids(&now.containers),
            ids(&before.containers),
            "{phase}: CRI-O's container list changed (deleted or new containers); log:\n{}",
            self.node.log_tail()
        );
        assert_eq!(
            now.pods.keys().collect::<Vec<_>>(),
            before.pods.keys().collect::<Vec<_>>(),
            "{phase}: CRI-O's pod list changed; log:\n{}",
            self.node.log_tail()
        );
        for (id, ready) in &now.pods {
            assert!(*ready, "{phase}: sandbox {id} is not ready");
        }
        for c in &self.ctrs {
            let l = &now.containers[&c.id];
            let (h, wr) = want(c);
            assert_eq!(l.hash.as_ref(), Some(&h), "{phase}: hash of {}", c.name);
            assert_eq!(l.hash_wr, wr, "{phase}: hashWithoutResources of {}", c.name);
            assert_eq!(l.state, "CONTAINER_RUNNING", "{phase}: {} {l:?}", c.name);
            let (pid, start) = pids[&c.id];
            assert_eq!(l.pid, Some(pid), "{phase}: pid of {} changed", c.name);
            assert_eq!(
                ctd::proc_stat(pid).map(|s| s.1),
                Some(start),
                "{phase}: pid {pid} of {} is another process",
                c.name
            );
        }
    }

    fn alive(&self, pids: &BTreeMap<String, (u32, u64)>, phase: &str) {
        for (id, (pid, start)) in pids {
            assert_eq!(
                ctd::proc_stat(*pid).map(|s| s.1),
                Some(*start),
                "{phase}: container {id} (pid {pid}) is gone"
            );
        }
    }
}

impl Ctr {
    /// Proven: the pods file lists it with the spec it was created from (the drifted
    /// container and the orphan are left alone).
    fn proven(&self) -> bool {
        self.spec.as_ref() == Some(&self.created_from)
    }
}

/// What a container holds after a patch from `from` to `to`: proven ones `to`'s hash (and
/// `to`'s hashWithoutResources where `to` computes one, else the stored one stays).
fn values_after(c: &Ctr, from: &str, to: &str) -> (String, Option<String>) {
    let (h, wr) = stored_by(c, from);
    if !c.proven() {
        return (h, wr);
    }
    let (th, twr) = stored_by(c, to);
    (th, twr.or(wr))
}

#[derive(Debug)]
struct Live {
    hash: Option<String>,
    hash_wr: Option<String>,
    state: String,
    pid: Option<u32>,
}

struct Listing {
    containers: BTreeMap<String, Live>,
    pods: BTreeMap<String, bool>,
}

fn pod_config(node: &crio::Node, p: &Pod) -> v1::PodSandboxConfig {
    ctd::pod_config_in(
        &node.p.t,
        &node.p.cgroup_top,
        &p.ns,
        &p.name,
        &p.uid,
        p.host_network,
    )
}

// ---------------------------------------------------------------------------------------------
// the binary
// ---------------------------------------------------------------------------------------------

#[derive(Debug)]
struct Out {
    code: i32,
    stdout: String,
    stderr: String,
}

fn run_cmd(cmd: &mut Command) -> Out {
    let o = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", bin()));
    Out {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
    }
}

fn run(args: &[String]) -> Out {
    run_cmd(Command::new(bin()).args(args))
}

fn expect_code(what: &str, o: &Out, code: i32) {
    assert_eq!(
        o.code, code,
        "{what}: exit {} (expected {code})\nstdout:\n{}\nstderr:\n{}",
        o.code, o.stdout, o.stderr
    );
}

fn s(x: &str) -> String {
    x.to_string()
}

fn root_or_fail() {
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "the CRI-O tests start a real CRI-O and need root; {}",
        crio::SETUP
    );
}

fn verify_live(report: &Path) -> Out {
    run(&[
        s("verify"),
        s("--live"),
        s("--report"),
        report.display().to_string(),
    ])
}

// ---------------------------------------------------------------------------------------------
// the tests
// ---------------------------------------------------------------------------------------------

/// Patch 1.30 → 1.31 on the stopped node, CRI-O adopts it (verify --live), downgrade back to
/// 1.30 and CRI-O adopts that too, then both rollbacks (bytes, then values) with CRI-O started
/// on each result. Refusals on the way: patch and rollback while CRI-O runs.
#[test]
fn crio_patch_verify_downgrade_rollback() {
    patch_verify_downgrade_rollback(crio::Node::new(), "p31");
}

/// CRI-O 1.36.3 built from the Go module proxy (scripts/setup-crio-module.sh): 1.35 moved the
/// user-facing annotations to `cri-o.io/*`, the internal state keys the tool rewrites stayed.
#[test]
fn crio_1_36_patch_verify_downgrade_rollback() {
    patch_verify_downgrade_rollback(crio_1_36(), "q31");
}

/// The CRI-O 1.36.3 node (scripts/setup-crio-module.sh builds it; scripts/test.sh runs that).
fn crio_1_36() -> crio::Node {
    crio::Node::with_build(crio::module_build("1.36.3"), "1.36.3")
}

fn patch_verify_downgrade_rollback(node: crio::Node, tag: &str) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    root_or_fail();
    let t_all = Instant::now();
    let mut sc = Scenario::on(node, tag, "1.30");
    let mut notes = vec![format!(
        "node: {} containers in {} pods, one on CNI bridge {} ({})",
        sc.ctrs.len(),
        sc.pods.len(),
        sc.node.p.bridge,
        sc.node.p.subnet
    )];
    let t = sc.node.p.t.clone();
    let before = sc.listing();
    assert_eq!(before.containers.len(), sc.ctrs.len());
    assert_eq!(before.pods.len(), 2);
    let pids = sc.pids();
    let original = |c: &Ctr| stored_by(c, "1.30");
    sc.check_live(&before, &pids, &original, "as created");
    let rewrites = sc.ctrs.iter().filter(|c| c.proven()).count();
    // every proven container really changes hash from 1.30 to 1.31 (else the test proves less)
    for c in sc.ctrs.iter().filter(|c| c.proven()) {
        assert_ne!(stored_by(c, "1.30").0, stored_by(c, "1.31").0, "{}", c.name);
    }

    // patch while CRI-O runs: refused (exit 3), nothing written, no durable step taken
    let s_running = sc.snapshot();
    let b0 = t.join("bk-running");
    let o = run_cmd(
        Command::new(bin())
            .args(sc.patch_args("1.31", &b0))
            .env("KUBELET_REHASH_CRASH_LOG", "1"),
    );
    expect_code("patch while CRI-O runs", &o, 3);
    assert!(o.stderr.to_lowercase().contains("running"), "{}", o.stderr);
    assert!(!o.stderr.contains("fault point"), "{}", o.stderr);
    assert!(fs::read_dir(&b0)
        .map(|mut d| d.next().is_none())
        .unwrap_or(true));
    assert!(
        sc.snapshot() == s_running,
        "a refused patch wrote to the store"
    );

    // stop CRI-O by pid: every container keeps running under its conmon
    let conmons = sc.node.conmon_pids();
    sc.stop();
    sc.alive(&pids, "after CRI-O stopped");
    assert_eq!(
        sc.node.conmon_pids(),
        conmons,
        "conmons after CRI-O stopped"
    );
    let s0 = sc.snapshot();

    // patch to 1.31
    let b1 = t.join("bk-1.31");
    let r1 = t.join("report-1.31.json");
    let mut a = sc.patch_args("1.31", &b1);
    a.extend([s("--report"), r1.display().to_string()]);
    let t0 = Instant::now();
    let o = run(&a);
    // 4: the drifted container is unproven and will restart
    expect_code("patch --to 1.31", &o, 4);
    notes.push(format!(
        "patch --to 1.31: {:.0} ms",
        t0.elapsed().as_secs_f64() * 1e3
    ));
    let rep: Value = serde_json::from_slice(&fs::read(&r1).unwrap()).unwrap();
    assert_eq!(rep["runtime"], "crio", "{}", rep["runtime"]);
    assert_eq!(rep["endpoint"], json!(sc.node.endpoint()));
    // what verify --live checks comes from the report, with the same fields as for
    // containerd and Docker: the state and the pid CRI-O's store recorded, per container
    let records = rep["records"].as_array().unwrap();
    for c in &sc.ctrs {
        let r = records.iter().find(|r| r["id"] == json!(c.id)).unwrap();
        let want = if c.proven() {
            "rewrite"
        } else if c.spec.is_none() {
            "orphan"
        } else {
            "unproven"
        };
        assert_eq!(r["action"], want, "{}: {}", c.name, r["reason"]);
        if c.spec.is_some() {
            // from the pods file's status (an orphan has none there)
            assert_eq!(r["state"], "running", "{}", c.name);
        }
        assert_eq!(
            r["pid"],
            json!(pids[&c.id].0),
            "{}: the report's pid",
            c.name
        );
        if c.proven() {
            let (h, wr) = stored_by(c, "1.31");
            assert_eq!(r["target_hash"], json!(h), "{}", c.name);
            assert_eq!(r["target_hash_without_resources"], json!(wr), "{}", c.name);
        }
    }
    let patched = sc.snapshot();
    assert_ne!(patched, s0, "the patch wrote nothing");
    let vf = &sc.node.p.version_file;
    assert_eq!(patched.get(vf), s0.get(vf), "the version file was touched");
    let marker = fs::read(&sc.node.p.clean_shutdown).unwrap();

    assert_eq!(
        fs::read(&sc.node.p.clean_shutdown).unwrap(),
        marker,
        "the patch touched the clean-shutdown marker"
    );

    // CRI-O on the patched store: verify --live, and CRI-O's own view
    let t0 = Instant::now();
    sc.start();
    notes.push(format!(
        "crio start on the patched store: {:.2} s",
        t0.elapsed().as_secs_f64()
    ));
    let o = verify_live(&r1);
    expect_code("verify --live after patch --to 1.31", &o, 0);
    assert!(
        o.stdout
            .contains(&format!("verified live: {rewrites} rewritten")),
        "verify --live output: {}",
        o.stdout
    );
    let to31 = |c: &Ctr| values_after(c, "1.30", "1.31");
    sc.check_live(&before, &pids, &to31, "after patch --to 1.31 + start");
    sc.stop();
    let ran = sc.snapshot();
    // CRI-O rewrites only state.json at start: the files the patch wrote come back as written
    assert!(
        ran == patched,
        "CRI-O rewrote a config.json, the version file or the marker"
    );

    // downgrade back to 1.30
    let b2 = t.join("bk-1.30");
    let r2 = t.join("report-1.30.json");
    let mut a = sc.patch_args("1.30", &b2);
    a.extend([s("--report"), r2.display().to_string()]);
    let o = run(&a);
    expect_code("patch --to 1.30 (downgrade)", &o, 4);
    let rep2: Value = serde_json::from_slice(&fs::read(&r2).unwrap()).unwrap();
    assert_eq!(rep2["from"], "1.31", "{}", rep2["from"]);
    sc.start();
    let o = verify_live(&r2);
    expect_code("verify --live after the downgrade", &o, 0);
    assert!(
        o.stdout
            .contains(&format!("verified live: {rewrites} rewritten")),
        "verify --live output: {}",
        o.stdout
    );
    sc.check_live(&before, &pids, &original, "after the downgrade + start");
    // the round trip gives back exactly the bytes CRI-O wrote
    assert!(sc.snapshot() == s0, "1.30 → 1.31 → 1.30 is not byte-exact");

    // rollback while CRI-O runs: refused, nothing written
    let o = run(&[
        vec![s("rollback"), s("--backup-dir"), b2.display().to_string()],
        sc.store_flags(),
    ]
    .concat());
    expect_code("rollback while CRI-O runs", &o, 3);
    assert!(sc.snapshot() == s0);

    // rollback of the downgrade (bytes): back to the 1.31 store
    sc.stop();
    let o = run(&[
        vec![s("rollback"), s("--backup-dir"), b2.display().to_string()],
        sc.store_flags(),
    ]
    .concat());
    expect_code("rollback of the downgrade", &o, 0);
    assert!(
        sc.snapshot() == patched,
        "rollback of the downgrade is not byte-exact"
    );
    sc.start();
    sc.check_live(&before, &pids, &to31, "after rolling back the downgrade");
    sc.stop();

    // rollback --values of the first patch: every container still holds what it wrote
    let o = run(&[
        vec![
            s("rollback"),
            s("--values"),
            s("--backup-dir"),
            b1.display().to_string(),
        ],
        sc.store_flags(),
    ]
    .concat());
    expect_code("rollback --values of the 1.31 patch", &o, 0);
    assert!(
        o.stdout.contains(&format!(
            "restored the previous hash of {rewrites} container(s)"
        )),
        "{}",
        o.stdout
    );
    assert!(
        sc.snapshot() == s0,
        "rollback --values did not restore the values CRI-O wrote"
    );
    sc.start();
    sc.check_live(&before, &pids, &original, "after rollback --values");
    // verify --live can fail on CRI-O: the 1.31 report against the rolled back node
    let o = verify_live(&r1);
    expect_code("verify --live of the rolled back patch", &o, 4);
    assert_eq!(
        o.stdout.matches("FAIL").count(),
        rewrites,
        "one problem per rewritten container: {}",
        o.stdout
    );
    assert!(
        o.stdout.contains("the runtime reports hash"),
        "{}",
        o.stdout
    );
    assert!(
        !sc.node.log().contains("Could not restore"),
        "CRI-O failed to restore something:\n{}",
        sc.node.log_tail()
    );
    notes.extend(sc.node.notes.iter().cloned());
    notes.push(format!("whole test {:.1} s", t_all.elapsed().as_secs_f64()));
    for n in notes {
        eprintln!("crio_live: {n}");
    }
}

/// The version-file hazard on the real daemon. With the version file missing (a reboot, a node
/// copied without its tmpfs) `patch` refuses (exit 3, nothing written). Bypassing that guard —
/// the same rewrite made while the file is present, then the file removed as the refused case
/// had it — real CRI-O removes every pod at start: lists no pod and no container and stops
/// their processes, whatever the hashes say.
#[test]
fn crio_version_file_wipe_is_real_and_refused() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    root_or_fail();
    let mut sc = Scenario::new("vfw", "1.30");
    let t = sc.node.p.t.clone();
    let before = sc.listing();
    let pids = sc.pids();
    sc.stop();
    let vf = sc.node.p.version_file.clone();
    let version = fs::read(&vf).unwrap();
    assert_eq!(
        String::from_utf8_lossy(&version),
        format!("\"{}+unknown\"", crio::VERSION),
        "CRI-O's version file"
    );

    // the guard: no version file, no patch
    fs::remove_file(&vf).unwrap();
    let s0 = sc.snapshot();
    let b0 = t.join("bk-no-version-file");
    let o = run_cmd(
        Command::new(bin())
            .args(sc.patch_args("1.31", &b0))
            .env("KUBELET_REHASH_CRASH_LOG", "1"),
    );
    expect_code("patch without the version file", &o, 3);
    assert!(
        o.stderr.contains("version file") && o.stderr.contains("is missing"),
        "{}",
        o.stderr
    );
    assert!(!o.stderr.contains("fault point"), "{}", o.stderr);
    assert!(fs::read_dir(&b0)
        .map(|mut d| d.next().is_none())
        .unwrap_or(true));
    assert!(sc.snapshot() == s0, "a refused patch wrote to the store");
    assert!(!vf.exists(), "the refused patch created the version file");
    // a version file CRI-O cannot parse wipes as well: refused the same way
    fs::write(&vf, b"not a version").unwrap();
    let o = run(&sc.patch_args("1.31", &t.join("bk-bad-version-file")));
    expect_code("patch with a malformed version file", &o, 3);
    assert!(
        o.stderr.contains("not a JSON version string"),
        "{}",
        o.stderr
    );

    // bypassed: what the patch writes with the file present; the file then gone as above
    fs::write(&vf, &version).unwrap();
    let r = t.join("report.json");
    let mut a = sc.patch_args("1.31", &t.join("bk-bypass"));
    a.extend([s("--report"), r.display().to_string()]);
    let o = run(&a);
    expect_code("patch with the version file present", &o, 4);
    let rep: Value = serde_json::from_slice(&fs::read(&r).unwrap()).unwrap();
    assert!(
        rep["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w.as_str().unwrap().contains("removes every pod")),
        "the report warns of the wipe a CRI-O of another minor would do: {}",
        rep["warnings"]
    );
    fs::remove_file(&vf).unwrap();
    sc.alive(&pids, "before CRI-O starts without its version file");
    sc.start();
    let now = sc.listing();
    assert!(
        now.containers.is_empty() && now.pods.is_empty(),
        "CRI-O without its version file kept {} containers and {} pods of {} and {}",
        now.containers.len(),
        now.pods.len(),
        before.containers.len(),
        before.pods.len()
    );
    let log = sc.node.log();
    let removed = log.matches("Removed pod sandbox").count();
    assert_eq!(
        removed,
        before.pods.len(),
        "CRI-O's log:\n{}",
        sc.node.log_tail()
    );
    // the containers CRI-O managed are stopped with their pods
    let deadline = Instant::now() + std::time::Duration::from_secs(20);
    let alive = || {
        pids.values()
            .filter(|(pid, start)| ctd::proc_stat(*pid).map(|s| s.1) == Some(*start))
            .count()
    };
    while alive() > 0 && Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    assert_eq!(alive(), 0, "containers still running after CRI-O's wipe");
    eprintln!(
        "crio_live: version file missing: patch refused (exit 3, nothing written); bypassed, CRI-O removed {removed} pods and {} containers at start",
        before.containers.len()
    );
}

/// Crash sweep through the binary on the CRI-O node: `patch --to 1.31` SIGKILLed at fault
/// points of an uninterrupted run (`KUBELET_REHASH_CRASH_AT`), CRI-O started on what each kill
/// left: it lists every container and pod (none deleted), each container running as the same
/// process with its old or its new hash; then a rerun of `patch` converges to the
/// uninterrupted result, which CRI-O adopts too. Points: every one up to 40, else 40 evenly
/// spread including the first and the last (each point costs two CRI-O starts).
#[test]
fn crio_crash_sweep_crio_loads_every_container() {
    crash_sweep(crio::Node::new(), "crs");
}

/// The crash sweep on CRI-O 1.36.3: after every kill point, the real CRI-O 1.36 loads every
/// container.
#[test]
fn crio_1_36_crash_sweep_crio_loads_every_container() {
    crash_sweep(crio_1_36(), "crt");
}

fn crash_sweep(node: crio::Node, tag: &str) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    root_or_fail();
    let t_all = Instant::now();
    let mut sc = Scenario::on(node, tag, "1.30");
    let t = sc.node.p.t.clone();
    let before = sc.listing();
    let pids = sc.pids();
    sc.stop();
    let pristine = sc.snapshot();

    // the uninterrupted run: its fault points and its result
    let o = run_cmd(
        Command::new(bin())
            .args(sc.patch_args("1.31", &t.join("bk-reference")))
            .env("KUBELET_REHASH_CRASH_LOG", "1"),
    );
    expect_code("uninterrupted patch", &o, 4);
    let points: Vec<&str> = o
        .stderr
        .lines()
        .filter_map(|l| l.strip_prefix("kubelet-rehash fault point "))
        .collect();
    assert!(points.len() >= 4, "fault points: {points:?}");
    let done = sc.snapshot();
    let restore = |sc: &Scenario| {
        for (p, b) in &pristine {
            fs::write(p, b).unwrap();
        }
        assert!(sc.snapshot() == pristine);
    };
    restore(&sc);
    let n = points.len() as u64;
    let sample: Vec<u64> = if n <= 40 {
        (1..=n).collect()
    } else {
        let mut v: Vec<u64> = (0..40).map(|i| 1 + i * (n - 1) / 39).collect();
        v.dedup();
        v
    };
    let old = |c: &Ctr| stored_by(c, "1.30");
    let new = |c: &Ctr| values_after(c, "1.30", "1.31");
    let mut partial = 0;
    for &k in &sample {
        let at = format!("kill at point {k} ({})", points[k as usize - 1]);
        let bk = t.join(format!("bk-kill-{k}"));
        let r = Command::new(bin())
            .args(sc.patch_args("1.31", &bk))
            .env("KUBELET_REHASH_CRASH_AT", k.to_string())
            .output()
            .unwrap();
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(r.status.signal(), Some(9), "{at}: not killed: {r:?}");
        // every file the patch may write holds its old or its new bytes
        let now = sc.snapshot();
        let mut changed = 0;
        for (p, b) in &now {
            if pristine.get(p) != Some(b) {
                assert_eq!(
                    done.get(p),
                    Some(b),
                    "{at}: {} is neither old nor new",
                    p.display()
                );
                changed += 1;
            }
        }
        if changed > 0 && now != done {
            partial += 1;
        }
        // CRI-O on the crashed store: every container and pod, each hash old or new
        sc.start();
        let l = sc.listing();
        let ids = |m: &BTreeMap<String, Live>| m.keys().cloned().collect::<Vec<_>>();
        assert_eq!(
            ids(&l.containers),
            ids(&before.containers),
            "{at}: containers"
        );
        assert_eq!(
            l.pods.keys().collect::<Vec<_>>(),
            before.pods.keys().collect::<Vec<_>>(),
            "{at}: pods"
        );
        assert!(l.pods.values().all(|r| *r), "{at}: a sandbox is not ready");
        for c in &sc.ctrs {
            let live = &l.containers[&c.id];
            let got = (live.hash.clone().unwrap_or_default(), live.hash_wr.clone());
            assert!(
                got == old(c) || got == new(c),
                "{at}: {} reports {got:?}",
                c.name
            );
            assert_eq!(live.pid, Some(pids[&c.id].0), "{at}: pid of {}", c.name);
            assert_eq!(live.state, "CONTAINER_RUNNING", "{at}: {}", c.name);
        }
        sc.stop();
        // The next patch goes on when the killed run had not written (no manifest yet), or
        // refuses naming the one command that undoes it: that command restores every original
        // byte. Then a patch converges to the uninterrupted result, which CRI-O adopts.
        let rerun = sc.patch_args("1.31", &t.join(format!("bk-rerun-{k}")));
        let mut o = run(&rerun);
        if bk.join("manifest.json").exists() && o.code == 3 {
            let named: Vec<String> = o
                .stderr
                .split('`')
                .nth(1)
                .filter(|c| c.starts_with("kubelet-rehash rollback --backup-dir "))
                .unwrap_or_else(|| panic!("{at}: the refusal names the rollback: {}", o.stderr))
                .split_whitespace()
                .skip(1)
                .map(str::to_string)
                .collect();
            let r = run(&[named, sc.store_flags()].concat());
            expect_code(&format!("{at}: the named rollback"), &r, 0);
            assert!(
                sc.snapshot() == pristine,
                "{at}: the named rollback restores every original byte"
            );
            fs::remove_dir_all(t.join(format!("bk-rerun-{k}"))).ok();
            o = run(&rerun);
        }
        expect_code(&format!("{at}: rerun"), &o, 4);
        assert!(sc.snapshot() == done, "{at}: the rerun did not converge");
        sc.start();
        sc.check_live(&before, &pids, &new, &format!("{at}, rerun"));
        sc.stop();
        restore(&sc);
    }
    assert!(
        !sc.node.log().contains("Could not restore"),
        "CRI-O failed to restore a container:\n{}",
        sc.node.log_tail()
    );
    eprintln!(
        "crio_live: crash sweep: {} of {n} fault points killed, {partial} left a partly patched store, CRI-O started {} times, none deleted; {:.1} s",
        sample.len(),
        sample.len() * 2,
        t_all.elapsed().as_secs_f64()
    );
}
