//! deploy/ansible/ driven for real: Debian's `ansible-core` (scripts/setup-ansible.sh) runs the
//! playbook over four local "nodes" (`ansible_connection=local`), each its own real container
//! runtime with its own root, socket and running kubelet-shaped containers: containerd 1.7.24,
//! dockerd 20.10 (live-restore), containerd 2.1.9 and containerd 1.6.20 (testtools harnesses).
//! Every container carries the real kubelet 1.30 hash of a golden spec, and the pods file of its
//! node lists those specs.
//!
//! There is no kubelet binary for this machine (a real one needs a cluster to register with):
//! each node's "kubelet" is a stand-in, [`testtools::kubelet::Program`], that answers `--version` as a kubelet
//! of its version does (after refusing flags it does not know, as the kubelet parses every flag
//! first) and otherwise serves `/healthz` on the node's own port. The nodes' service commands
//! (`--stop-kubelet` and the others, given through the inventory) start and stop it and the
//! runtime by pid file, as a unit would; `upgrade` installs the new "kubelet" binary over the
//! node's, as it would the real one.
//!
//! Run 1 (`serial: 2`, `max_fail_percentage: 49`): the first batch is the containerd 1.7 node,
//! which goes through, and the Docker node, whose new kubelet reports 1.31 but exits at start
//! (a broken build): `upgrade` finds it unhealthy inside the window, rolls that node back and
//! exits 3; half the batch failed, more than 49 %, so the play stops and the second batch never
//! starts. Checked: the first node runs the new kubelet, every container with its old pid
//! and the target hash as the runtime reports it; the Docker node runs its old kubelet binary
//! (same bytes) and its runtime reports every container with its old pid and old hash; the
//! other two nodes were not touched. Then the Docker node alone with a kubelet 1.32 binary:
//! refused in preflight (exit 3, nothing stopped). Last run (the Docker node given a good
//! kubelet, with the rest of the nodes): every node has gone through, with the same container
//! pids and target hashes.
//!
//! [`the_role_maps_exit_4_as_configured`] runs the role over three local hosts with a stand-in
//! binary for what no real node here can show cheaply: exit 4 under each
//! `kubelet_rehash_on_restarts` (fail stops the rollout, skip goes on, accept passes
//! `--accept-restarts`).
//!
//! Needs root, scripts/setup-docker.sh, scripts/setup-containerd.sh, scripts/setup-ansible.sh.

use hashcompat::KubeletVersion;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use storepatch::live::cri::CriClient;
use testtools::containerd as ctd;
use testtools::cri::CriTestCalls;
use testtools::docker as dkr;

const FROM: &str = "1.30";
const TO: &str = "1.31";
const HASH: &str = "io.kubernetes.container.hash";
const ANSIBLE_SETUP: &str = "run scripts/setup-ansible.sh first";

/// Shell: stops the process in pid file `$1` (SIGTERM, then waits until it is gone or a zombie:
/// this machine's pid 1 may not reap the orphans it inherits).
const STOP_FN: &str = r#"stop_pidfile() {
    pid=$(cat "$1" 2>/dev/null) || return 0
    kill -TERM "$pid" 2>/dev/null || return 0
    i=0
    while st=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) && [ "$st" != Z ]; do
        i=$((i + 1))
        [ "$i" -le 600 ] || { echo "pid $pid still runs 60 s after SIGTERM" >&2; return 1; }
        sleep 0.1
    done
}
# As a Type=notify unit returns at READY=1: until log $1 has line $3 after its first $2 lines.
wait_ready() {
    i=0
    until tail -n "+$(($2 + 1))" "$1" 2>/dev/null | grep -q "$3"; do
        i=$((i + 1))
        [ "$i" -le 600 ] || { echo "no \"$3\" in $1 after 60 s" >&2; return 1; }
        sleep 0.1
    done
}
"#;

fn v(s: &str) -> KubeletVersion {
    s.parse().unwrap()
}

fn golden(id: &str, name: &str) -> Value {
    let path = ctd::workspace().join("fixtures/golden/specs.jsonl");
    let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    for l in text.lines() {
        let rec: Value = serde_json::from_str(l).unwrap();
        if rec["id"] == id {
            let mut spec = rec["container"].clone();
            spec["name"] = json!(name);
            return spec;
        }
    }
    panic!("{}: no spec {id}", path.display());
}

fn hash(spec: &Value, version: &str) -> String {
    hashcompat::hash_container(spec, v(version))
        .unwrap_or_else(|e| panic!("hashcompat {version} of {}: {e}", spec["name"]))
        .hash
        .to_string()
}

/// One container of a node's pod.
struct Ctr {
    name: String,
    spec: Value,
    id: String,
    from_hash: String,
    to_hash: String,
    /// (pid, start time since boot): the same process, not a new one with a reused pid.
    process: (u32, u64),
}

enum Runtime {
    Containerd(ctd::Harness),
    Docker(dkr::Daemon),
}

/// What the runtime reports about one container.
struct Live {
    hash: Option<String>,
    running: bool,
    pid: Option<u32>,
}

struct Node {
    name: String,
    /// The node's own files: usr/bin/kubelet, the service scripts, the role's directory.
    dir: tempfile::TempDir,
    rt: Runtime,
    port: u16,
    ctrs: Vec<Ctr>,
    /// The node's kubelet binary before any upgrade.
    old_kubelet: Vec<u8>,
}

impl Node {
    fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    fn label(&self) -> String {
        match &self.rt {
            Runtime::Containerd(h) => format!("{} (containerd {})", self.name, h.line.version),
            Runtime::Docker(_) => format!("{} (docker 20.10)", self.name),
        }
    }

    fn endpoint(&self) -> String {
        match &self.rt {
            Runtime::Containerd(h) => h.endpoint(),
            Runtime::Docker(d) => format!("unix://{}", d.socket().display()),
        }
    }

    fn live(&self) -> BTreeMap<String, Live> {
        match &self.rt {
            Runtime::Containerd(h) => {
                let cri = CriClient::connect_with_timeout(&h.endpoint(), Duration::from_secs(30))
                    .unwrap_or_else(|e| panic!("{}: CRI: {e}", self.label()));
                // READY=1 comes before the CRI plugin has recovered its state, as for a kubelet
                let deadline = Instant::now() + Duration::from_secs(30);
                let listed = loop {
                    match cri.list_containers() {
                        Ok(l) => break l,
                        Err(e) if Instant::now() < deadline => {
                            let _ = e;
                            std::thread::sleep(Duration::from_millis(100));
                        }
                        Err(e) => panic!("{}: ListContainers: {e}", self.label()),
                    }
                };
                listed
                    .into_iter()
                    .map(|c| {
                        let l = Live {
                            hash: c.annotations.get(HASH).cloned(),
                            running: c.state == "CONTAINER_RUNNING",
                            pid: c.pid,
                        };
                        (c.id, l)
                    })
                    .collect()
            }
            Runtime::Docker(d) => {
                let mut c = d.client();
                c.negotiate()
                    .unwrap_or_else(|e| panic!("{}: dockerd: {e}", self.label()));
                c.inspect_all()
                    .expect("inspect")
                    .into_iter()
                    .map(|i| {
                        let l = Live {
                            hash: i.labels.get(&format!("annotation.{HASH}")).cloned(),
                            running: i.running,
                            pid: (i.pid != 0).then_some(i.pid),
                        };
                        (i.id, l)
                    })
                    .collect()
            }
        }
    }

    /// `upgrade`'s runtime and layout flags and service commands for this node.
    fn upgrade_args(&self) -> Vec<String> {
        let d = |p: &str| self.path(p).display().to_string();
        let mut a: Vec<String> = match &self.rt {
            Runtime::Containerd(h) => vec![
                "--runtime".into(),
                "containerd".into(),
                "--root".into(),
                h.p.root.display().to_string(),
                "--runtime-socket".into(),
                h.p.sock.display().to_string(),
            ],
            Runtime::Docker(dd) => vec![
                "--runtime".into(),
                "docker".into(),
                "--root".into(),
                dd.data_root().display().to_string(),
                "--runtime-socket".into(),
                dd.socket().display().to_string(),
                "--runtime-pidfile".into(),
                dd.pidfile().display().to_string(),
                "--live-restore".into(),
                "true".into(),
                "--daemon-json".into(),
                dd.path("daemon.json").display().to_string(),
            ],
        };
        a.extend([
            "--kubelet-dir".into(),
            d("kubelet"),
            "--manifests".into(),
            d("manifests"),
            "--kubelet-pidfile".into(),
            d("kubelet.pid"),
            "--kubelet-healthz".into(),
            format!("http://127.0.0.1:{}/healthz", self.port),
            "--stop-kubelet".into(),
            format!("{} stop", d("kubeletctl")),
            "--start-kubelet".into(),
            format!("{} start", d("kubeletctl")),
            "--stop-runtime".into(),
            format!("{} stop", d("runtimectl")),
            "--start-runtime".into(),
            format!("{} start", d("runtimectl")),
        ]);
        a
    }

    fn ctl(&self, script: &str, verb: &str) {
        ctd::run_ok(
            Command::new(self.path(script)).arg(verb),
            &format!("{}: {script} {verb}", self.label()),
        );
    }

    fn kubelet_pid(&self) -> Option<u32> {
        let pid: u32 = fs::read_to_string(self.path("kubelet.pid"))
            .ok()?
            .trim()
            .parse()
            .ok()?;
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let state = stat[stat.rfind(')')? + 2..].split_whitespace().next()?;
        (state != "Z").then_some(pid)
    }

    fn installed_kubelet_version(&self) -> String {
        ctd::run_ok(
            Command::new(self.path("usr/bin/kubelet")).arg("--version"),
            &format!("{}: kubelet --version", self.label()),
        )
        .trim()
        .to_string()
    }

    /// The node as `upgrade` must leave it: the kubelet `version` installed, running and
    /// healthy; every container running as the same process with `hashes` (from or to) as
    /// the runtime itself reports them.
    fn check(&self, version: &str, upgraded: bool, when: &str) {
        let label = format!("{} {when}", self.label());
        assert_eq!(
            self.installed_kubelet_version(),
            format!("Kubernetes {version}"),
            "{label}: the installed kubelet"
        );
        if !upgraded {
            assert!(
                fs::read(self.path("usr/bin/kubelet")).unwrap() == self.old_kubelet,
                "{label}: the kubelet binary is not the node's original"
            );
        }
        let pid = self.kubelet_pid();
        assert!(pid.is_some(), "{label}: no kubelet runs");
        assert!(
            healthz(self.port),
            "{label}: the kubelet does not answer /healthz"
        );
        let live = self.live();
        for c in &self.ctrs {
            let l = live
                .get(&c.id)
                .unwrap_or_else(|| panic!("{label}: the runtime lost container {}", c.name));
            let want = if upgraded { &c.to_hash } else { &c.from_hash };
            assert_eq!(
                l.hash.as_ref(),
                Some(want),
                "{label}: container {} reports the wrong hash (from {}, to {})",
                c.name,
                c.from_hash,
                c.to_hash
            );
            assert!(l.running, "{label}: container {} not running", c.name);
            assert_eq!(
                l.pid,
                Some(c.process.0),
                "{label}: container {} has another pid",
                c.name
            );
            assert_eq!(
                ctd::proc_stat(c.process.0).map(|(_, start)| start),
                Some(c.process.1),
                "{label}: pid {} of {} is another process now (restarted)",
                c.process.0,
                c.name
            );
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        // The scripts' daemon and kubelet are not the harness's children: stop them here; the
        // harness then kills what is left of the containers by pid and unmounts.
        for script in ["kubeletctl", "runtimectl"] {
            let _ = Command::new(self.path(script)).arg("stop").status();
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn healthz(port: u16) -> bool {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
            let _ = s.write_all(b"GET /healthz HTTP/1.0\r\nHost: localhost\r\n\r\n");
            let mut buf = String::new();
            let _ = s.read_to_string(&mut buf);
            if buf.starts_with("HTTP/1.0 200") || buf.starts_with("HTTP/1.1 200") {
                return true;
            }
        }
        if Instant::now() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn write_exec(path: &Path, text: &str) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).unwrap();
}

/// The kubelet stand-in of `version` (`X.Y.Z`), which refuses the dockershim flags and, with
/// `crash`, exits at start after answering `--version`.
fn fake_kubelet(version: &str, crash: bool) -> String {
    testtools::kubelet::Program {
        version,
        removed: &testtools::kubelet::DOCKERSHIM_FLAGS,
        needs_endpoint: false,
        crash,
    }
    .text()
}

fn q(p: &Path) -> String {
    format!("'{}'", p.display())
}

/// A node: its runtime with one kubelet-shaped pod of real 1.30 hashes, its pods file, its old
/// kubelet running, and the runtime handed over to the node's own service script.
fn node(name: &str, runtime: Option<ctd::Line>) -> Node {
    let dir = tempfile::Builder::new()
        .prefix(&format!("ansnode-{name}-"))
        .tempdir_in("/tmp")
        .unwrap();
    let uid = format!(
        "a5b1e000-0000-4000-8000-{:0>12x}",
        name.as_bytes()[name.len() - 1]
    );
    let (ns, pod_name) = ("shop", format!("web-{name}"));
    let specs = [
        ("f001-minimal", "app"),
        ("f018-probes-http-exec", "probes"),
        ("f009-env-fieldref", "envfrom"),
    ];
    let mut ctrs: Vec<Ctr> = specs
        .iter()
        .map(|(id, cname)| {
            let spec = golden(id, cname);
            Ctr {
                name: cname.to_string(),
                from_hash: hash(&spec, FROM),
                to_hash: hash(&spec, TO),
                spec,
                id: String::new(),
                process: (0, 0),
            }
        })
        .collect();
    for c in &ctrs {
        assert_ne!(
            c.from_hash, c.to_hash,
            "{}: 1.30 → 1.31 changes every hash",
            c.name
        );
    }
    let d = dir.path();
    let (rt, scheme, runtimectl) = match runtime {
        Some(line) => {
            let mut h = ctd::Harness::new(line);
            let pause_tar = ctd::build_image(&h.p.t, ctd::PAUSE_IMAGE, "pause");
            let app_tar = ctd::build_image(&h.p.t, ctd::APP_IMAGE, "app");
            let cri = h.start();
            h.ctr_import(&pause_tar, ctd::PAUSE_IMAGE);
            h.ctr_import(&app_tar, ctd::APP_IMAGE);
            let app_id = ctd::wait_image(&cri, ctd::APP_IMAGE, line.version);
            ctd::wait_image(&cri, ctd::PAUSE_IMAGE, line.version);
            let pc = ctd::pod_config(&h, ns, &pod_name, &uid);
            let sandbox = cri.run_pod_sandbox(&pc).expect("RunPodSandbox");
            h.sandboxes.push(sandbox.clone());
            for c in ctrs.iter_mut() {
                let spec = ctd::spec(&c.name, &c.from_hash, None, true);
                let cc = ctd::container_config(&h, &pc, &app_id, &spec);
                c.id = cri
                    .create_container(&sandbox, &cc, &pc)
                    .expect("CreateContainer");
                cri.start_container(&c.id).expect("StartContainer");
            }
            drop(cri);
            // from here on the node's own service script runs containerd, as its unit would
            h.stop();
            let script = format!(
                "#!/bin/sh\n# containerd {v} of node {name}, as its unit runs it (cli/tests/ansible_live.rs)\n{STOP_FN}\
                 case \"$1\" in\n\
                 start)\n    rm -f {sock}\n    n=$(cat {log} 2>/dev/null | wc -l)\n    env -i PATH={path} HOME={t} setsid {bin} --config {config} >>{log} 2>&1 </dev/null &\n    echo $! > {pidf}\n    wait_ready {log} \"$n\" 'successfully booted' ;;\n\
                 stop) stop_pidfile {pidf} ;;\n\
                 *) echo \"usage: $0 start|stop\" >&2; exit 2 ;;\nesac\n",
                v = line.version,
                sock = q(&h.p.sock),
                path = h.path_env(),
                t = q(&h.p.t),
                bin = q(&h.bin.join("containerd")),
                config = q(&h.p.config),
                log = q(&h.p.log),
                pidf = q(&d.join("runtime.pid")),
            );
            (Runtime::Containerd(h), "containerd", script)
        }
        None => {
            let mut dd = dkr::Daemon::new();
            dd.start();
            let mut c = dd.client();
            c.negotiate().unwrap();
            let image = dkr::import_busybox_image(&c, "docker.io/library/anstest", "1.0");
            let logdir = dd.path(&format!("kubelet/log/pods/{ns}_{pod_name}_{uid}"));
            fs::create_dir_all(&logdir).unwrap();
            let sandbox = dkr::create(
                &c,
                &format!("k8s_POD_{pod_name}_{ns}_{uid}_0"),
                json!({
                    "Image": image,
                    "Entrypoint": ["/bin/sh", "-c", dkr::LOOP],
                    "Env": ["PATH=/bin"],
                    "Labels": {
                        "annotation.kubernetes.io/config.seen": "2026-01-01T10:00:00.000000000Z",
                        "annotation.kubernetes.io/config.source": "api",
                        "io.kubernetes.container.name": "POD",
                        "io.kubernetes.docker.type": "podsandbox",
                        "io.kubernetes.pod.name": pod_name,
                        "io.kubernetes.pod.namespace": ns,
                        "io.kubernetes.pod.uid": uid,
                    },
                    "HostConfig": {"NetworkMode": "host", "IpcMode": "shareable", "SecurityOpt": ["seccomp=unconfined"]},
                }),
            );
            dd.container_ids.push(sandbox.clone());
            c.call::<Value>("POST", &format!("/containers/{sandbox}/start"), None)
                .unwrap();
            for ct in ctrs.iter_mut() {
                ct.id = dkr::create(
                    &c,
                    &format!("k8s_{}_{pod_name}_{ns}_{uid}_0", ct.name),
                    json!({
                        "Image": image,
                        "Entrypoint": ["/bin/sh", "-c"],
                        "Cmd": [dkr::LOOP],
                        "Env": ["PATH=/bin"],
                        "Healthcheck": {"Test": ["NONE"]},
                        "Labels": {
                            "annotation.io.kubernetes.container.hash": ct.from_hash,
                            "annotation.io.kubernetes.container.restartCount": "0",
                            "annotation.io.kubernetes.container.terminationMessagePath": "/dev/termination-log",
                            "annotation.io.kubernetes.container.terminationMessagePolicy": "File",
                            "annotation.io.kubernetes.pod.terminationGracePeriod": "30",
                            "io.kubernetes.container.logpath": format!("{}/{}/0.log", logdir.display(), ct.name),
                            "io.kubernetes.container.name": ct.name,
                            "io.kubernetes.docker.type": "container",
                            "io.kubernetes.pod.name": pod_name,
                            "io.kubernetes.pod.namespace": ns,
                            "io.kubernetes.pod.uid": uid,
                            "io.kubernetes.sandbox.id": sandbox,
                        },
                        "HostConfig": {
                            "NetworkMode": format!("container:{sandbox}"),
                            "IpcMode": format!("container:{sandbox}"),
                            "UTSMode": "host",
                            "RestartPolicy": {"Name": "no"},
                            "SecurityOpt": ["seccomp=unconfined"],
                        },
                    }),
                );
                dd.container_ids.push(ct.id.clone());
                c.call::<Value>("POST", &format!("/containers/{}/start", ct.id), None)
                    .unwrap();
            }
            let pids: Vec<u32> = c
                .inspect_all()
                .unwrap()
                .iter()
                .filter(|i| i.pid != 0)
                .map(|i| i.pid)
                .collect();
            dd.container_pids.extend(pids);
            dd.stop();
            let exec = dd.path("exec");
            let script = format!(
                "#!/bin/sh\n# dockerd of node {name} (live-restore), as its unit runs it (cli/tests/ansible_live.rs)\n{STOP_FN}\
                 managed_containerd() {{\n    for c in /proc/[0-9]*/cmdline; do\n        a=$(tr '\\0' ' ' 2>/dev/null < \"$c\") || continue\n        case \"$a\" in *containerd-shim*) ;; *{exec}/containerd/*) return 0 ;; esac\n    done\n    return 1\n}}\n\
                 case \"$1\" in\n\
                 start)\n    n=$(cat {log} 2>/dev/null | wc -l)\n    env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin setsid {dockerd} --data-root {data} --exec-root {exec_q} --pidfile {pidf} -H unix://{sock} --config-file {json} --live-restore --iptables=false --ip-masq=false --bridge=none --storage-driver=vfs >>{log} 2>&1 </dev/null &\n    echo $! > {mypid}\n    wait_ready {log} \"$n\" 'API listen on' ;;\n\
                 stop)\n    stop_pidfile {mypid} || exit 1\n    i=0\n    while managed_containerd; do i=$((i + 1)); [ \"$i\" -le 300 ] || {{ echo \"dockerd's containerd still runs\" >&2; exit 1; }}; sleep 0.1; done ;;\n\
                 *) echo \"usage: $0 start|stop\" >&2; exit 2 ;;\nesac\n",
                exec = exec.display(),
                exec_q = q(&exec),
                dockerd = q(&dd.dockerd),
                data = q(&dd.data_root()),
                pidf = q(&dd.pidfile()),
                sock = dd.socket().display(),
                json = q(&dd.path("daemon.json")),
                log = q(&dd.path("dockerd-scripted.log")),
                mypid = q(&d.join("runtime.pid")),
            );
            (Runtime::Docker(dd), "docker", script)
        }
    };
    write_exec(&d.join("runtimectl"), &runtimectl);
    let port = free_port();
    write_exec(
        &d.join("kubeletctl"),
        &format!(
            "#!/bin/sh\n# the kubelet stand-in of node {name}, as its unit runs it\n{STOP_FN}\
             case \"$1\" in\n\
             start)\n    setsid {kubelet} --healthz-port={port} >>{log} 2>&1 </dev/null &\n    echo $! > {pidf} ;;\n\
             stop) stop_pidfile {pidf} ;;\n\
             *) echo \"usage: $0 start|stop\" >&2; exit 2 ;;\nesac\n",
            kubelet = q(&d.join("usr/bin/kubelet")),
            log = q(&d.join("kubelet.log")),
            pidf = q(&d.join("kubelet.pid")),
        ),
    );
    let old_kubelet = fake_kubelet("1.30.8", false);
    write_exec(&d.join("usr/bin/kubelet"), &old_kubelet);
    write_exec(&d.join("kubelet-v1.31.4"), &fake_kubelet("1.31.4", false));
    for sub in ["kubelet", "manifests"] {
        fs::create_dir_all(d.join(sub)).unwrap();
    }
    let pods = json!({
        "apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""},
        "items": [{
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod_name, "namespace": ns, "uid": uid},
            "spec": {
                "containers": ctrs.iter().map(|c| c.spec.clone()).collect::<Vec<_>>(),
                "nodeName": name, "restartPolicy": "Always",
            },
            "status": {
                "phase": "Running",
                "containerStatuses": ctrs.iter().map(|c| json!({
                    "name": c.name, "containerID": format!("{scheme}://{}", c.id),
                    "image": c.spec["image"], "imageID": "", "ready": true, "restartCount": 0,
                    "started": true, "state": {"running": {"startedAt": "2026-01-01T10:00:00Z"}},
                })).collect::<Vec<_>>(),
            },
        }],
    });
    fs::write(
        d.join("pods.json"),
        serde_json::to_vec_pretty(&pods).unwrap(),
    )
    .unwrap();
    let mut n = Node {
        name: name.to_string(),
        dir,
        rt,
        port,
        ctrs,
        old_kubelet: old_kubelet.into_bytes(),
    };
    n.ctl("runtimectl", "start");
    n.ctl("kubeletctl", "start");
    let live = n.live();
    for c in n.ctrs.iter_mut() {
        let pid = live
            .get(&c.id)
            .and_then(|l| l.pid)
            .unwrap_or_else(|| panic!("{name}: container {} has no pid", c.name));
        c.process = (pid, ctd::proc_stat(pid).expect("its /proc stat").1);
    }
    n.check("v1.30.8", false, "before the rollout");
    n
}

/// The inventory: every node a local host with its own files, runtime and services.
fn inventory(nodes: &[Node], dir: &Path) -> PathBuf {
    let hosts: serde_json::Map<String, Value> = nodes
        .iter()
        .map(|n| {
            (
                n.name.clone(),
                json!({
                    "kubelet_rehash_bin": n.path("usr/local/bin/kubelet-rehash"),
                    "kubelet_rehash_dir": n.path("var/lib/kubelet-rehash"),
                    "kubelet_rehash_pods_src": n.path("pods.json"),
                    "kubelet_rehash_kubelet_src": n.path("kubelet-v1.31.4"),
                    "kubelet_rehash_kubelet_path": n.path("usr/bin/kubelet"),
                    "kubelet_rehash_args": n.upgrade_args(),
                }),
            )
        })
        .collect();
    let inv = json!({
        "kubelet_rehash_nodes": {
            "hosts": hosts,
            "vars": {
                "ansible_connection": "local",
                "ansible_python_interpreter": "/usr/bin/python3",
                "kubelet_rehash_become": false,
                // the operator's kubelet version, given: these specs hash alike from 1.21 to
                // 1.30, and on the Docker node a proof from 1.21 would be a dockershim node
                // that needs cri-dockerd (which upgrade refuses to go without)
                "kubelet_rehash_from": FROM,
                "kubelet_rehash_to": TO,
                "kubelet_rehash_binary_src": env!("CARGO_BIN_EXE_kubelet-rehash"),
            },
        },
    });
    // JSON is YAML: the yaml inventory plugin reads it
    let path = dir.join("inventory.yml");
    fs::write(&path, serde_json::to_vec_pretty(&inv).unwrap()).unwrap();
    path
}

struct Run {
    code: i32,
    out: String,
    took: Duration,
}

impl Run {
    /// PLAY RECAP's counters of `host`, or None when the play never reached it.
    fn recap(&self, host: &str) -> Option<BTreeMap<String, u32>> {
        let recap = self.out.rsplit("PLAY RECAP").next()?;
        recap.lines().find_map(|l| {
            let (h, rest) = l.split_once(':')?;
            (h.trim() == host).then(|| {
                rest.split_whitespace()
                    .filter_map(|kv| {
                        let (k, v) = kv.split_once('=')?;
                        Some((k.to_string(), v.parse().ok()?))
                    })
                    .collect()
            })
        })
    }
}

fn ansible_playbook(inventory: &Path, work: &Path, extra: Value, limit: Option<&str>) -> Run {
    let ansible = ctd::workspace().join(".cache/ansible/bin/ansible-playbook");
    assert!(
        ansible.exists(),
        "{} is missing; {ANSIBLE_SETUP}",
        ansible.display()
    );
    let mut cmd = Command::new(&ansible);
    cmd.arg("-i")
        .arg(inventory)
        .arg(ctd::workspace().join("deploy/ansible/playbook.yml"))
        .arg("-e")
        .arg(extra.to_string())
        .env("ANSIBLE_NOCOLOR", "1")
        .env("ANSIBLE_FORCE_COLOR", "0")
        .env("ANSIBLE_LOCAL_TEMP", work.join("ansible-local"))
        .env("ANSIBLE_REMOTE_TMP", work.join("ansible-remote"))
        .env("ANSIBLE_CONFIG", work.join("no-ansible.cfg"));
    if let Some(l) = limit {
        cmd.arg("--limit").arg(l);
    }
    let t0 = Instant::now();
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}; {ANSIBLE_SETUP}", ansible.display()));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Run {
        code: out.status.code().unwrap_or(-1),
        out: text,
        took: t0.elapsed(),
    }
}

#[test]
fn ansible_rolls_upgrade_over_four_real_runtime_nodes_and_stops_at_a_failed_one() {
    let _serial = ctd::SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "the Ansible test starts real runtimes and needs root; {}, {}",
        ctd::SETUP,
        dkr::SETUP
    );
    let work = tempfile::Builder::new()
        .prefix("ansible-live-")
        .tempdir_in("/tmp")
        .unwrap();
    let line = |version, config_v3| Some(ctd::Line { version, config_v3 });
    let nodes = vec![
        node("node-a", line("1.7.24", false)),
        node("node-b", None),
        node("node-c", line("2.1.9", true)),
        node("node-d", line("1.6.20", false)),
    ];
    let names: Vec<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
    // node-b's new kubelet reports the right version but does not start
    write_exec(
        &nodes[1].path("kubelet-v1.31.4"),
        &fake_kubelet("1.31.4", true),
    );
    let inv = inventory(&nodes, work.path());
    let extra = json!({"kubelet_rehash_serial": 2, "kubelet_rehash_max_fail_percentage": 49});

    let first = ansible_playbook(&inv, work.path(), extra.clone(), None);
    let log = &first.out;
    assert_eq!(first.code, 2, "ansible-playbook: some host failed:\n{log}");
    let a = first
        .recap("node-a")
        .unwrap_or_else(|| panic!("no node-a:\n{log}"));
    assert_eq!(a["failed"], 0, "node-a went through:\n{log}");
    assert!(a["changed"] > 0, "node-a changed:\n{log}");
    let b = first
        .recap("node-b")
        .unwrap_or_else(|| panic!("no node-b:\n{log}"));
    assert_eq!(b["failed"], 1, "node-b failed:\n{log}");
    assert!(
        log.contains("(exit 3)") && log.contains("rolled back"),
        "node-b's failure is upgrade's exit 3, mapped by the role:\n{log}"
    );
    for later in ["node-c", "node-d"] {
        assert!(
            first.recap(later).is_none(),
            "max_fail_percentage 49 with half of the first batch failed: {later} must not run:\n{log}"
        );
    }
    nodes[0].check("v1.31.4", true, "after run 1");
    nodes[1].check("v1.30.8", false, "after run 1 (rolled back)");
    for n in &nodes[2..] {
        n.check("v1.30.8", false, "after run 1 (not reached)");
        assert!(
            !n.path("var/lib/kubelet-rehash/state.json").exists(),
            "{}: upgrade never ran there",
            n.label()
        );
    }
    let state: Value = serde_json::from_slice(
        &fs::read(nodes[1].path("var/lib/kubelet-rehash/state.json")).unwrap(),
    )
    .unwrap();
    // the tool's own account (docs/fleet.md): inside the window, undone, the store by bytes
    assert_eq!(state["phase"], "rolled-back", "node-b's state: {state}");
    // dockerd rewrites config.v2.json byte-identically on start, so the bytes come back
    assert_eq!(state["store_restored"], "bytes", "node-b's state: {state}");
    assert_eq!(
        state["failure"]["step"], "wait-healthy",
        "node-b's state: {state}"
    );
    assert_eq!(
        state["rollback_errors"],
        json!([]),
        "node-b's state: {state}"
    );
    eprintln!(
        "run 1: {:.1} s; node-b's state: {}",
        first.took.as_secs_f64(),
        serde_json::to_string(&state).unwrap()
    );

    // node-b given a kubelet of another minor version: refused before anything is stopped
    write_exec(
        &nodes[1].path("kubelet-v1.31.4"),
        &fake_kubelet("1.32.0", false),
    );
    let wrong = ansible_playbook(&inv, work.path(), extra.clone(), Some("node-b"));
    let log = &wrong.out;
    assert_eq!(wrong.code, 2, "ansible-playbook: node-b failed:\n{log}");
    assert!(
        log.contains("(exit 3)") && log.contains("is kubelet 1.32, not 1.31"),
        "node-b refused in preflight:\n{log}"
    );
    nodes[1].check("v1.30.8", false, "after the 1.32 binary was refused");

    // node-b gets a kubelet that starts; the rest of the fleet goes
    write_exec(
        &nodes[1].path("kubelet-v1.31.4"),
        &fake_kubelet("1.31.4", false),
    );
    let second = ansible_playbook(&inv, work.path(), extra, Some("node-b,node-c,node-d"));
    let log = &second.out;
    assert_eq!(second.code, 0, "ansible-playbook:\n{log}");
    for host in &names[1..] {
        let r = second
            .recap(host)
            .unwrap_or_else(|| panic!("no {host}:\n{log}"));
        assert_eq!(r["failed"], 0, "{host}:\n{log}");
        assert!(r["changed"] > 0, "{host} changed:\n{log}");
    }
    for n in &nodes {
        n.check("v1.31.4", true, "after run 2");
        let report = n.path("var/lib/kubelet-rehash/report.json");
        assert!(report.exists(), "{}: the patch report", n.label());
    }
    eprintln!(
        "run 2: {:.1} s; every node on kubelet {TO}, {} containers kept with their pids: {}",
        second.took.as_secs_f64(),
        nodes.iter().map(|n| n.ctrs.len()).sum::<usize>(),
        nodes
            .iter()
            .map(|n| format!("{} at {}", n.label(), n.endpoint()))
            .collect::<Vec<_>>()
            .join(", ")
    );
}

/// The role's exit-code mapping, for every `kubelet_rehash_on_restarts`, with a stand-in for
/// the binary that records its arguments and exits as told (exit 4 needs a node whose pods
/// really changed; the mapping is the role's, not the tool's).
#[test]
fn the_role_maps_exit_4_as_configured() {
    let work = tempfile::Builder::new()
        .prefix("ansible-codes-")
        .tempdir_in("/tmp")
        .unwrap();
    let w = work.path();
    // args: upgrade --pods <host dir>/pods.json ...; exit 4 unless --accept-restarts, or the
    // host's code
    let fake = w.join("kubelet-rehash");
    write_exec(
        &fake,
        "#!/bin/sh\nd=$(dirname \"$3\")\necho \"$@\" > \"$d/args\"\nrc=$(cat \"$d/rc\")\n\
         if [ \"$rc\" = 4 ]; then for a; do [ \"$a\" = --accept-restarts ] && exit 0; done; fi\n\
         echo \"stand-in: exit $rc\" >&2\nexit \"$rc\"\n",
    );
    let hosts = [("h1", 0), ("h2", 4), ("h3", 0)];
    let mut inv_hosts = serde_json::Map::new();
    for (h, _) in hosts {
        fs::create_dir_all(w.join(h)).unwrap();
        fs::write(w.join(h).join("pods.json"), b"{\"items\": []}").unwrap();
        inv_hosts.insert(
            h.to_string(),
            json!({
                "kubelet_rehash_bin": w.join(h).join("bin/kubelet-rehash"),
                "kubelet_rehash_dir": w.join(h).join("work"),
                "kubelet_rehash_pods_src": w.join(h).join("pods.json"),
            }),
        );
    }
    let inv = w.join("inventory.yml");
    fs::write(
        &inv,
        serde_json::to_vec(
            &json!({"kubelet_rehash_nodes": {"hosts": inv_hosts, "vars": {
                "ansible_connection": "local",
                "ansible_python_interpreter": "/usr/bin/python3",
                "kubelet_rehash_become": false,
                "kubelet_rehash_to": TO,
                "kubelet_rehash_binary_src": fake,
            }}}),
        )
        .unwrap(),
    )
    .unwrap();
    let args_of = |h: &str| fs::read_to_string(w.join(h).join("work/args")).ok();
    for (mode, want_rc, h3_runs) in [("fail", 2, false), ("skip", 0, true), ("accept", 0, true)] {
        for (h, rc) in hosts {
            fs::create_dir_all(w.join(h).join("work")).unwrap();
            fs::write(w.join(h).join("work/rc"), rc.to_string()).unwrap();
            let _ = fs::remove_file(w.join(h).join("work/args"));
        }
        let run = ansible_playbook(&inv, w, json!({"kubelet_rehash_on_restarts": mode}), None);
        let log = &run.out;
        assert_eq!(run.code, want_rc, "on_restarts={mode}:\n{log}");
        let h2 = run
            .recap("h2")
            .unwrap_or_else(|| panic!("{mode}: no h2:\n{log}"));
        let accepted = args_of("h2").is_some_and(|a| a.contains("--accept-restarts"));
        assert_eq!(
            accepted,
            mode == "accept",
            "{mode}: --accept-restarts passed?\n{log}"
        );
        match mode {
            "fail" => {
                assert_eq!(h2["failed"], 1, "{log}");
                assert!(log.contains("some containers would restart"), "{log}");
            }
            "skip" => {
                assert_eq!(h2["failed"], 0, "{log}");
                assert!(
                    log.contains("this node is left as it is") && log.contains("stand-in: exit 4"),
                    "{log}"
                );
            }
            _ => assert_eq!(h2["failed"], 0, "{log}"),
        }
        assert_eq!(
            args_of("h3").is_some(),
            h3_runs,
            "{mode}: serial 1, max_fail_percentage 0: h3 runs only when h2 did not fail:\n{log}"
        );
    }
}
