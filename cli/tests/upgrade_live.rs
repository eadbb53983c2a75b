//! `kubelet-rehash upgrade` end to end on REAL daemons: private containerd 1.6.20, 1.7.24 and
//! 2.1.9, a private dockerd 20.10 (live-restore) and a private CRI-O 1.30.14 (built by
//! scripts/setup-crio.sh) with running, kubelet-shaped containers
//! (the harnesses of crate testtools, the node shape of e2e_live.rs: proven containers, one
//! drifted, one orphan), the runtime started and stopped only by the override commands
//! (`--start-runtime` / `--stop-runtime`, shell scripts over the test's own pid files).
//!
//! There is no kubelet binary for this machine (and a real kubelet would take the machine
//! over), so "the kubelet" is a stand-in ([`testtools::kubelet`]): a small Python program installed at
//! `--kubelet-path` that, like the kubelet, parses every flag before it answers `--version`
//! (the new one rejects `--network-plugin`, which kubelet 1.24 removed), and otherwise serves
//! `/healthz` on a port of the test's choosing and records which version runs. It is started
//! and stopped through `--start-kubelet` / `--stop-kubelet`, so a rollback visibly runs the
//! *old* binary again.
//!
//! Checked after every run: the exit code; every container runs as the same process (pid and
//! /proc start time); the hashes the runtime itself serves (CRI / Engine API) are the target's
//! after an upgrade and the original ones after a rollback; the kubelet binary's bytes; the
//! version of the kubelet that runs; the state file (phase, steps, measured down times within
//! the budget). Failure paths on containerd 1.7: a wrong kubelet binary and a removed flag
//! (refused, the runtime never restarted), SIGTERM to the tool inside the window, SIGINT and
//! then SIGTERM, `kill -9` before and after the patch then `upgrade` / `rollback --state`
//! again, a downgrade with the old binary, and a runtime stop that kills the containers.
//!
//! Needs root, python3, scripts/setup-docker.sh, scripts/setup-containerd.sh and
//! scripts/setup-crio.sh. One runtime at a time (testtools' process-wide lock); Drop guards
//! stop what the scripts started, by pid.

use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use storepatch::live::cri::CriClient;
use testtools::containerd as ctd;
use testtools::cri::CriTestCalls;
use testtools::crio;
use testtools::docker as dkr;
use testtools::kubelet::{
    pid_running, sh, stop_script, write_exe, PidFileGuard as ScriptGuard, StandIn as Kubelet,
};

mod live_node;
mod under_test;

use live_node::{
    alive, bin, check_live, node, patched_values, pids_now, pods_json, stored_values, Ctr, Expect,
    Live, PodDef, HASH, HASH_WR,
};

// ---------------------------------------------------------------------------------------------
// the flow
// ---------------------------------------------------------------------------------------------

// ---------------------------------------------------------------------------------------------
// the runtimes, driven by scripts over the test's own pid files
// ---------------------------------------------------------------------------------------------

trait Runtime {
    fn label(&self) -> String;
    /// `--runtime … --root … --runtime-socket …` for this private daemon.
    fn store_flags(&self) -> Vec<String>;
    /// Every container the runtime lists, by id; `None` while it does not answer.
    fn try_live(&self) -> Option<HashMap<String, Live>>;
    fn live(&self) -> HashMap<String, Live> {
        self.try_live()
            .unwrap_or_else(|| panic!("{}: the runtime does not answer", self.label()))
    }
    fn scheme(&self) -> &'static str;
    fn tmp(&self) -> PathBuf;
    /// `sh -c` command that starts the daemon in the background and writes [`Runtime::pidfile`].
    fn start_cmd(&self) -> String;
    /// The pid file of the daemon the scripts started.
    fn pidfile(&self) -> PathBuf;
    fn stop_cmd(&self) -> String {
        stop_script(&self.pidfile())
    }
    /// The pid of the running daemon.
    fn daemon_pid(&self) -> u32 {
        fs::read_to_string(self.pidfile())
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }
}

/// The shared checks read a runtime through [`live_node::Listing`].
impl<T: Runtime + ?Sized> live_node::Listing for T {
    fn label(&self) -> String {
        Runtime::label(self)
    }
    fn live(&self) -> HashMap<String, Live> {
        Runtime::live(self)
    }
}

struct Containerd {
    h: ctd::Harness,
}

impl Runtime for Containerd {
    fn label(&self) -> String {
        format!("containerd {}", self.h.line.version)
    }
    fn store_flags(&self) -> Vec<String> {
        vec![
            "--runtime".into(),
            "containerd".into(),
            "--root".into(),
            self.h.p.root.display().to_string(),
            "--runtime-socket".into(),
            self.h.p.sock.display().to_string(),
        ]
    }
    fn try_live(&self) -> Option<HashMap<String, Live>> {
        let cri = CriClient::connect(&self.h.endpoint()).ok()?;
        let list = cri.list_containers().ok()?;
        Some(
            list.into_iter()
                .map(|c| {
                    let l = Live {
                        hash: c.annotations.get(HASH).cloned(),
                        hash_wr: c.annotations.get(HASH_WR).cloned(),
                        running: c.state == "CONTAINER_RUNNING",
                        pid: c.pid,
                    };
                    (c.id, l)
                })
                .collect(),
        )
    }
    fn scheme(&self) -> &'static str {
        "containerd"
    }
    fn tmp(&self) -> PathBuf {
        self.h.p.t.clone()
    }
    fn start_cmd(&self) -> String {
        format!(
            "env -i PATH={path} HOME={t} {bin}/containerd --config {config} >>{log} 2>&1 </dev/null & echo $! > {pidfile}",
            path = self.h.path_env(),
            t = self.h.p.t.display(),
            bin = self.h.bin.display(),
            config = self.h.p.config.display(),
            log = self.h.p.log.display(),
            pidfile = self.pidfile().display(),
        )
    }
    fn pidfile(&self) -> PathBuf {
        self.h.p.t.join("containerd.script.pid")
    }
}

impl Containerd {
    fn new(line: ctd::Line, pods: &mut [PodDef], ctrs: &mut [Ctr]) -> Containerd {
        let mut h = ctd::Harness::new(line);
        let pause_tar = ctd::build_image(&h.p.t, ctd::PAUSE_IMAGE, "pause");
        let app_tar = ctd::build_image(&h.p.t, ctd::APP_IMAGE, "app");
        let cri = h.start();
        h.ctr_import(&pause_tar, ctd::PAUSE_IMAGE);
        h.ctr_import(&app_tar, ctd::APP_IMAGE);
        let vv = line.version;
        let app_id = ctd::wait_image(&cri, ctd::APP_IMAGE, vv);
        ctd::wait_image(&cri, ctd::PAUSE_IMAGE, vv);
        for (i, p) in pods.iter_mut().enumerate() {
            let pc = ctd::pod_config(&h, &p.ns, &p.name, &p.uid);
            p.sandbox = cri
                .run_pod_sandbox(&pc)
                .unwrap_or_else(|e| panic!("containerd {vv}: RunPodSandbox {}: {e}", p.name));
            h.sandboxes.push(p.sandbox.clone());
            for c in ctrs.iter_mut().filter(|c| c.pod == i) {
                let spec = ctd::spec(&c.name, &c.stored, c.stored_wr.as_deref(), true);
                let cc = ctd::container_config(&h, &pc, &app_id, &spec);
                c.id = cri
                    .create_container(&p.sandbox, &cc, &pc)
                    .unwrap_or_else(|e| panic!("containerd {vv}: CreateContainer {}: {e}", c.name));
                cri.start_container(&c.id)
                    .unwrap_or_else(|e| panic!("containerd {vv}: StartContainer {}: {e}", c.name));
            }
        }
        // From here on only the scripts start and stop it, as the node's unit would.
        h.stop();
        Containerd { h }
    }
}

struct Docker {
    d: dkr::Daemon,
}

impl Runtime for Docker {
    fn label(&self) -> String {
        "docker 20.10".into()
    }
    fn store_flags(&self) -> Vec<String> {
        vec![
            "--runtime".into(),
            "docker".into(),
            "--root".into(),
            self.d.data_root().display().to_string(),
            "--runtime-socket".into(),
            self.d.socket().display().to_string(),
            "--runtime-pidfile".into(),
            self.d.pidfile().display().to_string(),
            "--daemon-json".into(),
            self.d.path("daemon.json").display().to_string(),
        ]
    }
    fn try_live(&self) -> Option<HashMap<String, Live>> {
        let mut c = self.d.client();
        c.negotiate().ok()?;
        let all = c.inspect_all().ok()?;
        Some(
            all.into_iter()
                .map(|i| {
                    let l = Live {
                        hash: i.labels.get(&format!("annotation.{HASH}")).cloned(),
                        hash_wr: i.labels.get(&format!("annotation.{HASH_WR}")).cloned(),
                        running: i.running,
                        pid: (i.pid != 0).then_some(i.pid),
                    };
                    (i.id, l)
                })
                .collect(),
        )
    }
    fn scheme(&self) -> &'static str {
        "docker"
    }
    fn tmp(&self) -> PathBuf {
        self.d.dir.path().to_path_buf()
    }
    fn start_cmd(&self) -> String {
        format!(
            "{dockerd} --data-root {data} --exec-root {exec} --pidfile {pf} -H unix://{sock} --config-file {cfg} --live-restore --iptables=false --ip-masq=false --bridge=none --storage-driver=vfs >>{log} 2>&1 </dev/null & echo $! > {pidfile}",
            dockerd = self.d.dockerd.display(),
            data = self.d.data_root().display(),
            exec = self.d.path("exec").display(),
            pf = self.d.pidfile().display(),
            sock = self.d.socket().display(),
            cfg = self.d.path("daemon.json").display(),
            log = self.d.path("dockerd-scripts.log").display(),
            pidfile = self.pidfile().display(),
        )
    }
    fn pidfile(&self) -> PathBuf {
        self.d.path("dockerd.script.pid")
    }
}

struct Crio {
    n: crio::Node,
}

impl Runtime for Crio {
    fn label(&self) -> String {
        format!("cri-o {}", crio::VERSION)
    }
    fn store_flags(&self) -> Vec<String> {
        let p = &self.n.p;
        vec![
            "--runtime".into(),
            "crio".into(),
            "--root".into(),
            p.graphroot.display().to_string(),
            "--runroot".into(),
            p.runroot.display().to_string(),
            "--runtime-socket".into(),
            p.sock.display().to_string(),
        ]
    }
    fn try_live(&self) -> Option<HashMap<String, Live>> {
        let cri = CriClient::connect(&self.n.endpoint()).ok()?;
        let list = cri.list_containers().ok()?;
        Some(
            list.into_iter()
                .map(|c| {
                    let l = Live {
                        hash: c.annotations.get(HASH).cloned(),
                        hash_wr: c.annotations.get(HASH_WR).cloned(),
                        running: c.state == "CONTAINER_RUNNING",
                        pid: c.pid,
                    };
                    (c.id, l)
                })
                .collect(),
        )
    }
    fn scheme(&self) -> &'static str {
        "cri-o"
    }
    fn tmp(&self) -> PathBuf {
        self.n.p.t.clone()
    }
    fn start_cmd(&self) -> String {
        let t = &self.n.p.t;
        format!(
            "env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin CONTAINERS_STORAGE_CONF={storage} CONTAINERS_REGISTRIES_CONF={registries} {bin}/crio --config {config} --config-dir {confd} >>{log} 2>&1 </dev/null & echo $! > {pidfile}",
            storage = t.join("etc/containers/storage.conf").display(),
            registries = t.join("etc/containers/registries.conf").display(),
            bin = ctd::workspace().join(".cache/crio/bin").display(),
            config = self.n.p.config.display(),
            confd = t.join("etc/crio/crio.conf.d").display(),
            log = self.n.p.log.display(),
            pidfile = self.pidfile().display(),
        )
    }
    fn pidfile(&self) -> PathBuf {
        self.n.p.t.join("crio.script.pid")
    }
}

impl Crio {
    fn new(pods: &mut [PodDef], ctrs: &mut [Ctr]) -> Crio {
        let mut n = crio::Node::new();
        let pause = ctd::build_image(&n.p.t, crio::PAUSE_IMAGE, "pause");
        let app = ctd::build_image(&n.p.t, crio::APP_IMAGE, "app");
        n.import_image(&pause, crio::PAUSE_IMAGE);
        n.import_image(&app, crio::APP_IMAGE);
        let cri = n.start();
        let app_id = crio::image_id(&cri, crio::APP_IMAGE);
        crio::image_id(&cri, crio::PAUSE_IMAGE);
        for (i, p) in pods.iter_mut().enumerate() {
            let pc = ctd::pod_config_in(&n.p.t, &n.p.cgroup_top, &p.ns, &p.name, &p.uid, true);
            p.sandbox = cri
                .run_pod_sandbox(&pc)
                .unwrap_or_else(|e| panic!("crio: RunPodSandbox {}: {e}", p.name));
            for c in ctrs.iter_mut().filter(|c| c.pod == i) {
                let spec = ctd::spec(&c.name, &c.stored, c.stored_wr.as_deref(), true);
                let cc = ctd::container_config_in(&n.p.t, &pc, &app_id, &spec);
                c.id = cri
                    .create_container(&p.sandbox, &cc, &pc)
                    .unwrap_or_else(|e| panic!("crio: CreateContainer {}: {e}", c.name));
                cri.start_container(&c.id)
                    .unwrap_or_else(|e| panic!("crio: StartContainer {}: {e}", c.name));
            }
        }
        n.stop();
        Crio { n }
    }
}

fn dockershim_labels(p: &PodDef, c: &Ctr, logdir: &Path) -> Value {
    let mut l = json!({
        "annotation.io.kubernetes.container.hash": c.stored,
        "annotation.io.kubernetes.container.restartCount": "0",
        "annotation.io.kubernetes.container.terminationMessagePath": "/dev/termination-log",
        "annotation.io.kubernetes.container.terminationMessagePolicy": "File",
        "annotation.io.kubernetes.pod.terminationGracePeriod": "30",
        "io.kubernetes.container.logpath": format!("{}/{}/0.log", logdir.display(), c.name),
        "io.kubernetes.container.name": c.name,
        "io.kubernetes.docker.type": "container",
        "io.kubernetes.pod.name": p.name,
        "io.kubernetes.pod.namespace": p.ns,
        "io.kubernetes.pod.uid": p.uid,
        "io.kubernetes.sandbox.id": p.sandbox,
    });
    if let Some(w) = &c.stored_wr {
        l[format!("annotation.{HASH_WR}")] = json!(w);
    }
    l
}

impl Docker {
    fn new(pods: &mut [PodDef], ctrs: &mut [Ctr]) -> Docker {
        let mut d = dkr::Daemon::new();
        d.start();
        let mut c = d.client();
        c.negotiate().unwrap();
        let image = dkr::import_busybox_image(&c, "docker.io/library/upgradetest", "1.0");
        for (i, p) in pods.iter_mut().enumerate() {
            let logdir = d.path(&format!("kubelet/log/pods/{}_{}_{}", p.ns, p.name, p.uid));
            fs::create_dir_all(&logdir).unwrap();
            p.sandbox = dkr::create(
                &c,
                &format!("k8s_POD_{}_{}_{}_0", p.name, p.ns, p.uid),
                json!({
                    "Image": image,
                    "Entrypoint": ["/bin/sh", "-c", dkr::LOOP],
                    "Env": ["PATH=/bin"],
                    "Labels": {
                        "annotation.kubernetes.io/config.seen": "2026-01-01T10:00:00.000000000Z",
                        "annotation.kubernetes.io/config.source": "api",
                        "io.kubernetes.container.name": "POD",
                        "io.kubernetes.docker.type": "podsandbox",
                        "io.kubernetes.pod.name": p.name,
                        "io.kubernetes.pod.namespace": p.ns,
                        "io.kubernetes.pod.uid": p.uid,
                    },
                    "HostConfig": {"NetworkMode": "host", "IpcMode": "shareable", "SecurityOpt": ["seccomp=unconfined"]},
                }),
            );
            d.container_ids.push(p.sandbox.clone());
            c.call::<Value>("POST", &format!("/containers/{}/start", p.sandbox), None)
                .unwrap();
            for ct in ctrs.iter_mut().filter(|ct| ct.pod == i) {
                ct.id = dkr::create(
                    &c,
                    &format!("k8s_{}_{}_{}_{}_0", ct.name, p.name, p.ns, p.uid),
                    json!({
                        "Image": image,
                        "Entrypoint": ["/bin/sh", "-c"],
                        "Cmd": [format!("echo started; {}", dkr::LOOP)],
                        "Env": ["KUBERNETES_SERVICE_HOST=10.96.0.1", "PATH=/bin"],
                        "Healthcheck": {"Test": ["NONE"]},
                        "Labels": dockershim_labels(p, ct, &logdir),
                        "HostConfig": {
                            "NetworkMode": format!("container:{}", p.sandbox),
                            "IpcMode": format!("container:{}", p.sandbox),
                            "UTSMode": "host",
                            "RestartPolicy": {"Name": "no"},
                            "SecurityOpt": ["seccomp=unconfined"],
                        },
                    }),
                );
                d.container_ids.push(ct.id.clone());
                c.call::<Value>("POST", &format!("/containers/{}/start", ct.id), None)
                    .unwrap();
            }
        }
        let docker = Docker { d };
        let pids: Vec<u32> = docker.live().values().filter_map(|l| l.pid).collect();
        let mut docker = docker;
        docker.d.container_pids.extend(pids);
        docker.d.stop();
        docker
    }
}

/// Starts the daemon through its script and waits until it answers.
fn start_runtime(rt: &dyn Runtime) {
    sh(&rt.start_cmd());
    let deadline = Instant::now() + Duration::from_secs(90);
    while rt.try_live().is_none() {
        assert!(
            Instant::now() < deadline,
            "{}: does not answer after its start",
            rt.label()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

// ---------------------------------------------------------------------------------------------
// the binary
// ---------------------------------------------------------------------------------------------

struct Out {
    code: i32,
    stdout: String,
    stderr: String,
    took: Duration,
}

fn run(args: &[String]) -> Out {
    run_with(args, &[])
}

fn run_with(args: &[String], env: &[(String, String)]) -> Out {
    let t0 = Instant::now();
    let o = Command::new(bin())
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap();
    Out {
        code: o.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        took: t0.elapsed(),
    }
}

fn expect_code(what: &str, o: &Out, code: i32) {
    assert_eq!(
        o.code, code,
        "{what}: exit {} (expected {code})\nstdout:\n{}\nstderr:\n{}",
        o.code, o.stdout, o.stderr
    );
}

/// One node under test: the runtime, its containers, the kubelet stand-in, the state file.
struct Node<'a> {
    rt: &'a dyn Runtime,
    ctrs: &'a [Ctr],
    kubelet: Kubelet,
    pods_file: PathBuf,
    state: PathBuf,
    runs: usize,
    pids: BTreeMap<String, (u32, u64)>,
}

/// What a run gets besides the node's flags.
#[derive(Default)]
struct Extra {
    to: String,
    kubelet_binary: Option<PathBuf>,
    start_runtime: Option<String>,
    stop_runtime: Option<String>,
    accept_restarts: bool,
    /// Environment of the run (the crash points of the test-built binary).
    env: Vec<(String, String)>,
    /// The start-kubelet command, when not the stand-in's own.
    start_kubelet: Option<String>,
    /// The kubelet's root directory (checkpoints), when not an empty one.
    kubelet_dir: Option<PathBuf>,
    set_aside_checkpoints: bool,
}

impl Node<'_> {
    fn new<'a>(rt: &'a dyn Runtime, pods: &[PodDef], ctrs: &'a [Ctr], from: &str) -> Node<'a> {
        let t = rt.tmp();
        let pods_file = t.join("pods.json");
        fs::write(
            &pods_file,
            serde_json::to_vec_pretty(&pods_json(pods, ctrs, rt.scheme())).unwrap(),
        )
        .unwrap();
        start_runtime(rt);
        let kubelet = Kubelet::new(&t, &format!("{from}.9"));
        kubelet.start();
        let pids = pids_now(rt, ctrs);
        Node {
            rt,
            ctrs,
            kubelet,
            pods_file,
            state: t.join("state/upgrade.json"),
            runs: 0,
            pids,
        }
    }

    fn service_flags(&self, x: &Extra) -> Vec<String> {
        vec![
            "--stop-kubelet".into(),
            self.kubelet.stop_cmd(),
            "--start-kubelet".into(),
            x.start_kubelet
                .clone()
                .unwrap_or_else(|| self.kubelet.start_cmd()),
            "--stop-runtime".into(),
            x.stop_runtime.clone().unwrap_or_else(|| self.rt.stop_cmd()),
            "--start-runtime".into(),
            x.start_runtime
                .clone()
                .unwrap_or_else(|| self.rt.start_cmd()),
            "--kubelet-pidfile".into(),
            self.kubelet.pidfile.display().to_string(),
            "--kubelet-healthz".into(),
            self.kubelet.healthz(),
        ]
    }

    fn upgrade(&mut self, what: &str, x: &Extra) -> Out {
        self.runs += 1;
        let mut a: Vec<String> = vec![
            "upgrade".into(),
            "--pods".into(),
            self.pods_file.display().to_string(),
            "--to".into(),
            x.to.clone(),
            "--kubelet-path".into(),
            self.kubelet.path.display().to_string(),
            "--state".into(),
            self.state.display().to_string(),
            // beside the state file: a run that finishes a killed one believes only a
            // backup there (or under the default backup root)
            "--backup-dir".into(),
            self.state
                .with_file_name(format!("backup-{}", self.runs))
                .display()
                .to_string(),
            "--report".into(),
            self.rt
                .tmp()
                .join(format!("report-{}.json", self.runs))
                .display()
                .to_string(),
            // the kubelet dir and manifests of this machine are not the test node's
            "--kubelet-dir".into(),
            x.kubelet_dir
                .clone()
                .unwrap_or_else(|| self.rt.tmp().join("no-kubelet-dir"))
                .display()
                .to_string(),
            "--manifests".into(),
            self.rt.tmp().join("no-manifests").display().to_string(),
        ];
        fs::create_dir_all(self.rt.tmp().join("no-kubelet-dir")).unwrap();
        fs::create_dir_all(self.rt.tmp().join("no-manifests")).unwrap();
        a.extend(self.rt.store_flags());
        a.extend(self.service_flags(x));
        if let Some(b) = &x.kubelet_binary {
            a.extend(["--kubelet-binary".into(), b.display().to_string()]);
        }
        if x.accept_restarts {
            a.push("--accept-restarts".into());
        }
        if x.set_aside_checkpoints {
            a.push("--set-aside-checkpoints".into());
        }
        let o = run_with(&a, &x.env);
        eprintln!(
            "{} — {what}: exit {} in {:.2} s\n{}{}",
            self.rt.label(),
            o.code,
            o.took.as_secs_f64(),
            o.stdout,
            o.stderr
        );
        o
    }

    fn rollback_state(&self) -> Out {
        let mut a: Vec<String> = vec![
            "rollback".into(),
            "--state".into(),
            self.state.display().to_string(),
        ];
        a.extend(self.rt.store_flags());
        a.extend(self.service_flags(&Extra::default()));
        let o = run(&a);
        eprintln!(
            "{} — rollback --state: exit {}\n{}{}",
            self.rt.label(),
            o.code,
            o.stdout,
            o.stderr
        );
        o
    }

    fn state(&self) -> Value {
        serde_json::from_slice(&fs::read(&self.state).unwrap()).unwrap()
    }

    /// Runtime and kubelet run, every container as the same process with `want`'s hashes.
    fn check(
        &self,
        phase: &str,
        want: &dyn Fn(&Ctr) -> (String, Option<String>),
        kubelet_version: &str,
        binary: &[u8],
    ) {
        assert!(
            pid_running(self.rt.daemon_pid()),
            "{phase}: the runtime runs"
        );
        check_live(self.rt, self.ctrs, &self.pids, want, phase);
        assert_eq!(
            self.kubelet.running(),
            kubelet_version,
            "{phase}: the kubelet that runs"
        );
        assert!(
            fs::read(&self.kubelet.path).unwrap() == binary,
            "{phase}: the kubelet binary's bytes"
        );
    }

    /// The state of a finished run: its phase, every window step's duration, down times
    /// within the budget.
    fn check_state(&self, phase: &str, want_phase: &str) -> Value {
        let st = self.state();
        assert_eq!(st["phase"], want_phase, "{phase}: {st:#}");
        let budget_ms = st["budget_s"].as_f64().unwrap() * 1e3;
        for key in ["kubelet_down_ms", "runtime_down_ms"] {
            if let Some(d) = st[key].as_f64() {
                assert!(d < budget_ms, "{phase}: {key} {d} ms exceeds the budget");
            }
        }
        for s in st["steps"].as_array().unwrap() {
            assert!(
                s["duration_ms"].is_number(),
                "{phase}: step without a duration: {s}"
            );
        }
        st
    }
}

// ---------------------------------------------------------------------------------------------
// the tests
// ---------------------------------------------------------------------------------------------

fn root_or_fail(setup: &str) {
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "the upgrade live tests start real runtimes and need root; {setup}"
    );
    // the kubelet stand-in is a Python program
    assert!(
        Command::new("python3")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success()),
        "python3 is missing: the kubelet stand-in of these tests is a Python program"
    );
}

const SPECS: [(&str, &str); 3] = [
    ("f001-minimal", "app"),
    ("f014-resources-2500m-1536Mi-129M", "res"),
    ("f009-env-fieldref", "envfrom"),
];

/// One upgrade through the window: exit 4 first (the drifted container restarts whatever we
/// do; nothing stopped), then with --accept-restarts: exit 0, every container kept, the
/// runtime serves the target hashes, the new kubelet runs, the window measured.
fn through_the_window(node: &mut Node<'_>, from: &str, to: &str) {
    let new = node.kubelet.binary("kubelet-new", &format!("{to}.0"));
    let old = node.kubelet.old.clone();
    let old_v = node.kubelet.old_version.clone();
    let runtime_pid = node.rt.daemon_pid();
    let mut x = Extra {
        to: to.into(),
        kubelet_binary: Some(new.clone()),
        ..Extra::default()
    };
    let o = node.upgrade("without --accept-restarts", &x);
    expect_code("restarts not accepted", &o, 4);
    assert_eq!(node.rt.daemon_pid(), runtime_pid, "nothing stopped");
    node.check("restarts not accepted", &stored_values, &old_v, &old);

    x.accept_restarts = true;
    let o = node.upgrade("upgrade", &x);
    expect_code("upgrade", &o, 0);
    assert_ne!(
        node.rt.daemon_pid(),
        runtime_pid,
        "the runtime was restarted"
    );
    node.check(
        "after the upgrade",
        &patched_values,
        &format!("v{to}.0"),
        &fs::read(&new).unwrap(),
    );
    let st = node.check_state("after the upgrade", "done");
    let backup = PathBuf::from(st["backup_dir"].as_str().unwrap());
    assert!(
        fs::read(backup.join("kubelet/kubelet")).unwrap() == old,
        "the old kubelet is kept"
    );
    let rewritten = node
        .ctrs
        .iter()
        .filter(|c| matches!(c.expect, Expect::Rewrite { .. }))
        .count();
    assert!(rewritten > 0, "the node has containers to rewrite");
    assert_eq!(st["rewritten"], rewritten);
    assert_eq!(st["verified_live"], rewritten);
    let report: Value = serde_json::from_slice(
        &fs::read(node.rt.tmp().join(format!("report-{}.json", node.runs))).unwrap(),
    )
    .unwrap();
    assert_eq!(report["stage"], "patch", "--report is the patch report");
    eprintln!(
        "{} {from} → {to}: kubelet down {:.0} ms, runtime down {:.0} ms (budget {} s); steps {}",
        node.rt.label(),
        st["kubelet_down_ms"].as_f64().unwrap(),
        st["runtime_down_ms"].as_f64().unwrap(),
        st["budget_s"],
        st["steps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| format!(
                "{} {:.0} ms",
                s["step"].as_str().unwrap(),
                s["duration_ms"].as_f64().unwrap()
            ))
            .collect::<Vec<_>>()
            .join(", ")
    );
}

fn containerd_line(line: ctd::Line, tag: &str, from: &str, to: &str, with_wr: bool) {
    on_containerd(line, tag, from, to, with_wr, |n| {
        through_the_window(n, from, to)
    });
}

/// A node on a private containerd of `line`, its containers running under kubelet `from`
/// (specs that `to` hashes differently), handed to `test`; torn down after it, also when it
/// fails.
fn on_containerd(
    line: ctd::Line,
    tag: &str,
    from: &str,
    to: &str,
    with_wr: bool,
    test: impl FnOnce(&mut Node<'_>),
) {
    let _serial = ctd::SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    root_or_fail(ctd::SETUP);
    let (mut pods, mut ctrs) = node(tag, &SPECS, from, to, with_wr);
    let rt = Containerd::new(line, &mut pods, &mut ctrs);
    let _scripts = ScriptGuard(vec![rt.pidfile(), rt.tmp().join("kubelet.pid")]);
    let mut n = Node::new(&rt, &pods, &ctrs, from);
    test(&mut n);
}

#[test]
fn upgrade_containerd_1_6_20_from_1_29_to_1_31() {
    containerd_line(
        ctd::Line {
            version: "1.6.20",
            config_v3: false,
        },
        "u16",
        "1.29",
        "1.31",
        true,
    );
}

#[test]
fn upgrade_containerd_2_1_9_from_1_30_to_1_34() {
    containerd_line(
        ctd::Line {
            version: "2.1.9",
            config_v3: true,
        },
        "u21",
        "1.30",
        "1.34",
        false,
    );
}

/// To 1.23: from 1.24 a Docker node needs cri-dockerd (0.4 needs Docker 23+; this is 20.10),
/// and `upgrade` refuses to cross without it (tested below).
#[test]
fn upgrade_docker_20_10_from_1_14_to_1_23_and_sigterm_rolls_back() {
    let _serial = ctd::SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    root_or_fail(dkr::SETUP);
    let (mut pods, mut ctrs) = node("u20", &SPECS, "1.14", "1.23", false);
    let rt = Docker::new(&mut pods, &mut ctrs);
    let _scripts = ScriptGuard(vec![rt.pidfile(), rt.tmp().join("kubelet.pid")]);
    let mut n = Node::new(&rt, &pods, &ctrs, "1.14");
    let old = n.kubelet.old.clone();
    let old_v = n.kubelet.old_version.clone();
    // SIGTERM to the tool right after the runtime started: it goes back (dockerd re-serialises
    // config.v2.json byte-identically, so the bytes come back) and starts the old kubelet.
    let new = n.kubelet.binary("kubelet-new", "1.23.17");
    let x = Extra {
        to: "1.23".into(),
        kubelet_binary: Some(new),
        accept_restarts: true,
        start_runtime: Some(format!("{}; kill -TERM $PPID", rt.start_cmd())),
        ..Extra::default()
    };
    let o = n.upgrade("SIGTERM inside the window", &x);
    expect_code("SIGTERM", &o, 3);
    assert!(o.stderr.contains("interrupted"), "{}", o.stderr);
    n.check("after SIGTERM", &stored_values, &old_v, &old);
    n.check_state("after SIGTERM", "rolled-back");
    through_the_window(&mut n, "1.14", "1.23");
}

#[test]
fn upgrade_containerd_1_7_24_every_failure_path() {
    let (from, to) = ("1.30", "1.31");
    let line = ctd::Line {
        version: "1.7.24",
        config_v3: false,
    };
    on_containerd(line, "u17", from, to, true, |n| {
        every_failure_path(n, from, to)
    });
}

fn every_failure_path(n: &mut Node<'_>, from: &str, to: &str) {
    let (rt, ctrs) = (n.rt, n.ctrs);
    let old = n.kubelet.old.clone();
    let old_v = n.kubelet.old_version.clone();
    let new = n.kubelet.binary("kubelet-new", "1.31.0");
    let new_bytes = fs::read(&new).unwrap();
    let up = |x: Extra| Extra {
        to: to.into(),
        kubelet_binary: Some(new.clone()),
        accept_restarts: true,
        ..x
    };

    // 1. a kubelet binary of another minor: refused, the runtime never restarted
    let runtime_pid = rt.daemon_pid();
    let wrong = n.kubelet.binary("kubelet-wrong", "1.30.2");
    let o = n.upgrade(
        "wrong kubelet binary",
        &Extra {
            kubelet_binary: Some(wrong),
            ..up(Extra::default())
        },
    );
    expect_code("wrong kubelet binary", &o, 3);
    assert!(o.stderr.contains("not 1.31"), "{}", o.stderr);
    assert_eq!(rt.daemon_pid(), runtime_pid, "nothing stopped");
    n.check("wrong binary", &stored_values, &old_v, &old);

    // 2. the node's kubelet runs with a flag the new one removed: refused
    n.kubelet.extra = vec!["--network-plugin=cni".into()];
    n.kubelet.restart();
    let o = n.upgrade("removed flag", &up(Extra::default()));
    expect_code("removed flag", &o, 3);
    assert!(
        o.stderr.contains("does not accept") && o.stderr.contains("--network-plugin"),
        "{}",
        o.stderr
    );
    assert_eq!(rt.daemon_pid(), runtime_pid, "nothing stopped");
    n.kubelet.extra.clear();
    n.kubelet.restart();

    // 3. SIGTERM inside the window (after the runtime started on the patched store): back
    let o = n.upgrade(
        "SIGTERM",
        &up(Extra {
            start_runtime: Some(format!("{}; kill -TERM $PPID", rt.start_cmd())),
            ..Extra::default()
        }),
    );
    expect_code("SIGTERM", &o, 3);
    n.check("after SIGTERM", &stored_values, &old_v, &old);
    let st = n.check_state("after SIGTERM", "rolled-back");
    // bytes when containerd has not committed to meta.db since its start, values when it has
    assert!(
        st["store_restored"] == "bytes" || st["store_restored"] == "values",
        "{st:#}"
    );

    // 3b. SIGINT and then SIGTERM right after the runtime stopped (an operator's Ctrl-C, then
    //     a supervisor's stop): one safe way back, nothing written
    let o = n.upgrade(
        "SIGINT then SIGTERM",
        &up(Extra {
            stop_runtime: Some(format!(
                "{}; kill -INT $PPID; sleep 0.1; kill -TERM $PPID",
                rt.stop_cmd()
            )),
            ..Extra::default()
        }),
    );
    expect_code("SIGINT then SIGTERM", &o, 3);
    assert!(o.stderr.contains("interrupted"), "{}", o.stderr);
    n.check("after SIGINT then SIGTERM", &stored_values, &old_v, &old);
    let st = n.check_state("after SIGINT then SIGTERM", "rolled-back");
    assert_eq!(st["done"]["patch_started"], false, "nothing written");

    // 4. kill -9 before the patch (right after the runtime stopped), then `upgrade` again:
    //    nothing was written, so it goes back
    let o = n.upgrade(
        "kill -9 before the patch",
        &up(Extra {
            stop_runtime: Some(format!("{}; kill -9 $PPID", rt.stop_cmd())),
            ..Extra::default()
        }),
    );
    assert_eq!(o.code, -1, "killed by SIGKILL");
    assert_eq!(n.state()["phase"], "window");
    let o = n.upgrade(
        "rerun after kill -9 before the patch",
        &up(Extra::default()),
    );
    expect_code("rerun after kill -9 before the patch", &o, 3);
    n.check(
        "after kill -9 before the patch",
        &stored_values,
        &old_v,
        &old,
    );
    n.check_state("after kill -9 before the patch", "rolled-back");
    let beside: Vec<String> = fs::read_dir(n.kubelet.path.parent().unwrap())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        beside,
        ["kubelet"],
        "the staged binary the killed run left is swept"
    );

    // 5. kill -9 after the patch (right after the runtime started), then `upgrade` again:
    //    the patch was complete and read back, so it goes forward
    let o = n.upgrade(
        "kill -9 after the patch",
        &up(Extra {
            start_runtime: Some(format!("{}; kill -9 $PPID", rt.start_cmd())),
            ..Extra::default()
        }),
    );
    assert_eq!(o.code, -1, "killed by SIGKILL");
    let o = n.upgrade("rerun after kill -9 after the patch", &up(Extra::default()));
    expect_code("rerun after kill -9 after the patch", &o, 0);
    n.check(
        "after kill -9 after the patch",
        &patched_values,
        "v1.31.0",
        &new_bytes,
    );
    let st = n.check_state("after kill -9 after the patch", "done");
    assert_eq!(st["resumed_by"].as_array().unwrap().len(), 1);

    // 6. the way back out: a downgrade to 1.30 with the old binary
    let old_copy = n.kubelet.dir.join("kubelet-1.30");
    write_exe(&old_copy, &old);
    let o = n.upgrade(
        "downgrade",
        &Extra {
            to: from.into(),
            kubelet_binary: Some(old_copy),
            accept_restarts: true,
            ..Extra::default()
        },
    );
    expect_code("downgrade", &o, 0);
    n.check("after the downgrade", &stored_values, &old_v, &old);

    // 7. kill -9 after the patch, then `rollback --state`: back, whatever the patch got to
    let o = n.upgrade(
        "kill -9 after the patch, for rollback",
        &up(Extra {
            start_runtime: Some(format!("{}; kill -9 $PPID", rt.start_cmd())),
            ..Extra::default()
        }),
    );
    assert_eq!(o.code, -1, "killed by SIGKILL");
    let o = n.rollback_state();
    expect_code("rollback --state", &o, 3);
    n.check("after rollback --state", &stored_values, &old_v, &old);
    n.check_state("after rollback --state", "rolled-back");

    // 8. a runtime stop that kills the containers (a unit with KillMode=control-group): caught
    //    before anything is written, runtime and kubelet started again
    let victim = &ctrs[0];
    let (vpid, _) = n.pids[&victim.id];
    let o = n.upgrade(
        "runtime stop kills a container",
        &up(Extra {
            stop_runtime: Some(format!("{}; kill -9 {vpid}", rt.stop_cmd())),
            ..Extra::default()
        }),
    );
    expect_code("runtime stop kills a container", &o, 3);
    assert!(
        o.stderr.contains("killed 1 container") && o.stderr.contains("nothing was written"),
        "{}",
        o.stderr
    );
    assert!(pid_running(rt.daemon_pid()), "the runtime runs again");
    assert_eq!(n.kubelet.running(), old_v);
    let survivors: Vec<Ctr> = ctrs.iter().filter(|c| c.id != victim.id).cloned().collect();
    let pids: BTreeMap<String, (u32, u64)> = n
        .pids
        .iter()
        .filter(|(id, _)| **id != victim.id)
        .map(|(k, v)| (k.clone(), *v))
        .collect();
    check_live(
        rt,
        &survivors,
        &pids,
        &stored_values,
        "after the killing stop",
    );
    alive(rt, &pids, "after the killing stop");
}

/// Issue 35, defect 2: the patch set aside a 1.30 `dra_manager_state` that kubelet 1.31
/// rejects; the new kubelet starts and writes its own; then the run is stopped (SIGTERM) and
/// goes back. The undo must not be a dead end: the new kubelet's file is kept in the backup,
/// ours comes back byte for byte, and the state file says so.
#[test]
fn upgrade_containerd_2_1_9_undo_keeps_the_checkpoint_the_new_kubelet_wrote() {
    let line = ctd::Line {
        version: "2.1.9",
        config_v3: true,
    };
    on_containerd(line, "u-dra", "1.30", "1.31", true, |n| {
        undo_keeps_the_newer_checkpoint(n, "1.31")
    });
}

fn undo_keeps_the_newer_checkpoint(n: &mut Node<'_>, to: &str) {
    let rt = n.rt;
    let old = n.kubelet.old.clone();
    let old_v = n.kubelet.old_version.clone();
    let new = n.kubelet.binary("kubelet-new", "1.31.0");
    let checkpoints = testtools::fixtures_dir().join("checkpoints");
    let ours = fs::read(checkpoints.join("dra-1.30-claim/dra_manager_state")).unwrap();
    let theirs = fs::read(checkpoints.join("dra-1.31-claim/dra_manager_state")).unwrap();
    let kd = rt.tmp().join("kubelet-dir");
    fs::create_dir_all(&kd).unwrap();
    let dra = kd.join("dra_manager_state");
    fs::write(&dra, &ours).unwrap();
    let theirs_file = rt.tmp().join("dra-1.31");
    fs::write(&theirs_file, &theirs).unwrap();

    let o = n.upgrade(
        "the new kubelet writes its checkpoint, then SIGTERM",
        &Extra {
            to: to.into(),
            kubelet_binary: Some(new),
            accept_restarts: true,
            kubelet_dir: Some(kd.clone()),
            set_aside_checkpoints: true,
            // once: the undo starts the old kubelet with the same command
            start_kubelet: Some(format!(
                "{start}; if mv {theirs} {theirs}.used 2>/dev/null; then cp {theirs}.used {dra}; kill -TERM $PPID; fi",
                start = n.kubelet.start_cmd(),
                theirs = theirs_file.display(),
                dra = dra.display()
            )),
            ..Extra::default()
        },
    );
    eprintln!(
        "kubelet stand-in log:\n{}",
        fs::read_to_string(&n.kubelet.log).unwrap_or_default()
    );
    expect_code("SIGTERM after the new kubelet wrote its checkpoint", &o, 3);
    n.check("after going back", &stored_values, &old_v, &old);
    let st = n.check_state("after going back", "rolled-back");
    assert!(
        st["rollback_errors"]
            .as_array()
            .is_none_or(|e| e.is_empty()),
        "going back had no error: {st:#}"
    );
    assert!(
        fs::read(&dra).unwrap() == ours,
        "the checkpoint the patch set aside is back, byte for byte"
    );
    let backup = PathBuf::from(st["backup_dir"].as_str().unwrap());
    let kept: Vec<PathBuf> = fs::read_dir(backup.join("store/written-since"))
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert_eq!(kept.len(), 1, "one file kept: {kept:?}");
    assert!(
        fs::read(&kept[0]).unwrap() == theirs,
        "the new kubelet's checkpoint is kept in the backup, byte for byte"
    );
    let notes = st["notes"].to_string();
    assert!(
        notes.contains("dra_manager_state") && notes.contains(&kept[0].display().to_string()),
        "the state file says what was kept where: {notes}"
    );
}

#[test]
fn upgrade_crio_1_30_14_from_1_30_to_1_31() {
    let _serial = ctd::SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    root_or_fail(crio::SETUP);
    let (mut pods, mut ctrs) = node("uc30", &SPECS, "1.30", "1.31", true);
    let rt = Crio::new(&mut pods, &mut ctrs);
    let _scripts = ScriptGuard(vec![rt.pidfile(), rt.tmp().join("kubelet.pid")]);
    let mut n = Node::new(&rt, &pods, &ctrs, "1.30");
    through_the_window(&mut n, "1.30", "1.31");
}

/// `kill -9` at every durable step inside `upgrade`'s patch step on a real containerd 1.7.24:
/// the test-built binary has storepatch's crash points (storesafe/src/fault.rs;
/// `KUBELET_REHASH_CRASH_AT=N` SIGKILLs the process before its N-th durable write, fsync or
/// rename), so a first run with every point logged finds the points of the patch step — the
/// page backup, the manifest, the bolt commit, the report — and of the state write that
/// records the patch as complete. Then, from the same node each time: upgrade killed at that
/// point, `upgrade` again with the same state file. Checked: the rerun finishes the job the
/// way the state file says (back while the patch was not recorded complete, with exit 3 and
/// every container's original hash as containerd serves it; forward once it was, exit 0 and
/// the target hashes), the same container processes, the runtime and the right kubelet
/// running, the kubelet binary's bytes; a node upgraded forward is taken back down with the
/// old binary (`upgrade --to` the old version) for the next point.
#[test]
fn upgrade_containerd_1_7_24_killed_at_every_durable_step_of_its_patch() {
    let _serial = ctd::SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    root_or_fail(ctd::SETUP);
    let (from, to) = ("1.30", "1.31");
    let line = ctd::Line {
        version: "1.7.24",
        config_v3: false,
    };
    let (mut pods, mut ctrs) = node("u1k", &SPECS, from, to, false);
    let rt = Containerd::new(line, &mut pods, &mut ctrs);
    let _scripts = ScriptGuard(vec![rt.pidfile(), rt.tmp().join("kubelet.pid")]);
    let mut n = Node::new(&rt, &pods, &ctrs, from);
    let old = n.kubelet.old.clone();
    let old_v = n.kubelet.old_version.clone();
    let old_binary = n.rt.tmp().join("kubelet-old");
    write_exe(&old_binary, &old);
    let new = n.kubelet.binary("kubelet-new", "1.31.0");
    let new_bytes = fs::read(&new).unwrap();
    let up = |env: Vec<(String, String)>| Extra {
        to: to.into(),
        kubelet_binary: Some(new.clone()),
        accept_restarts: true,
        env,
        ..Extra::default()
    };
    let down = Extra {
        to: from.into(),
        kubelet_binary: Some(old_binary.clone()),
        accept_restarts: true,
        ..Extra::default()
    };

    // the points of one whole run, in order
    let o = n.upgrade(
        "every point logged",
        &up(vec![("KUBELET_REHASH_CRASH_LOG".into(), "1".into())]),
    );
    expect_code("every point logged", &o, 0);
    let points: Vec<(u64, String)> = o
        .stderr
        .lines()
        .filter_map(|l| l.strip_prefix("kubelet-rehash fault point "))
        .filter_map(|l| l.split_once(": "))
        .map(|(k, name)| (k.parse().unwrap(), name.to_string()))
        .collect();
    let first = points
        .iter()
        .find(|(_, name)| name.starts_with("backup-"))
        .expect("the patch backs up")
        .0;
    let last_bolt = points
        .iter()
        .rev()
        .find(|(_, name)| name.starts_with("bolt-"))
        .expect("the patch commits to meta.db")
        .0;
    // after the commit: the manifest's new digests, the report, and the state write that
    // records the patch complete (four points: write, fsync, rename, fsync-dir)
    let sweep: Vec<u64> = points
        .iter()
        .map(|(k, _)| *k)
        .filter(|k| *k >= first && *k <= last_bolt + 16)
        .collect();
    assert!(
        sweep.len() >= 8,
        "the patch has durable steps to kill at: {points:?}"
    );
    let o = n.upgrade("back down for the sweep", &down);
    expect_code("back down for the sweep", &o, 0);
    n.check("before the sweep", &stored_values, &old_v, &old);

    let (mut back, mut forward) = (0, 0);
    for k in &sweep {
        let name = &points.iter().find(|(p, _)| p == k).unwrap().1;
        let what = format!("killed at point {k} ({name})");
        let o = n.upgrade(
            &what,
            &up(vec![("KUBELET_REHASH_CRASH_AT".into(), k.to_string())]),
        );
        assert_eq!(o.code, -1, "{what}: killed by SIGKILL");
        let left = n.state();
        assert_eq!(
            left["phase"], "window",
            "{what}: the run died in the window"
        );
        let patched = left["done"]["patched"] == true;
        let o = n.upgrade(&format!("rerun after {what}"), &up(Vec::new()));
        if patched {
            expect_code(&format!("rerun after {what}"), &o, 0);
            n.check(&what, &patched_values, "v1.31.0", &new_bytes);
            n.check_state(&what, "done");
            forward += 1;
            let o = n.upgrade(&format!("back down after {what}"), &down);
            expect_code(&format!("back down after {what}"), &o, 0);
        } else {
            expect_code(&format!("rerun after {what}"), &o, 3);
            n.check(&what, &stored_values, &old_v, &old);
            n.check_state(&what, "rolled-back");
            back += 1;
        }
        n.check(
            &format!("{what}, before the next point"),
            &stored_values,
            &old_v,
            &old,
        );
    }
    eprintln!(
        "killed at {} durable steps of the patch: {back} rolled back, {forward} finished forward",
        sweep.len()
    );
    assert!(
        back > 0,
        "kills before the patch was recorded complete went back"
    );
}
