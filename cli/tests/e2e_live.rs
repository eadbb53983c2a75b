//! The `kubelet-rehash` binary end to end on REAL daemons: a private dockerd 20.10 (live-restore,
//! dockershim-shaped pods) and private containerd 1.6.20, 1.7.24 and 2.1.9 (kubelet-shaped pods
//! through the CRI), the harnesses of storepatch's live tests (crate testtools).
//!
//! Each container's stored hash is the REAL kubelet hash (hashcompat) of a golden container spec
//! (fixtures/golden/specs.jsonl) for the FROM version; the pods file lists those specs with pod
//! uid/name/namespace matching the runtime's labels and a status naming every container
//! (`docker://<id>`, `containerd://<id>`) as running. One container is drifted (it carries the
//! hash of a different spec: `unproven`), one is orphaned (its pod has no such container).
//!
//! Flow per runtime: `plan -o json` (actions, hashes, FROM found by `--from auto`), `patch` while
//! the runtime runs (exit 3, store unchanged), stop the runtime by pid (containers keep running),
//! `patch` + `rollback` before the runtime ever ran on the patched store (byte-exact), `patch`
//! again (report), `patch` a second time (nothing to do, store unchanged), start the runtime,
//! `verify --live` (exit 0) and an independent check through the CRI / Engine API: every
//! rewritten container reports its target hash, every other one its old hash, all run with the
//! same pid (same process: /proc start time). Then `rollback` while the runtime runs (exit 3),
//! stop, `rollback`: Docker restores the old labels (dockerd re-serialises config.v2.json
//! byte-identically), containerd refuses (it committed its own transaction at start) and
//! nothing changes; start again and check the runtime's view. Finally the way back out of an
//! upgrade: patch to TO, start, then patch down to FROM (a downgrade), start: every container
//! reports its original hash with the same pid.
//!
//! Needs root, scripts/setup-docker.sh and scripts/setup-containerd.sh. The runtimes run one
//! after another (one process-wide lock); Drop guards clean up even on failure.

use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use storepatch::live::cri::CriClient;
use testtools::containerd as ctd;
use testtools::cri::CriTestCalls;
use testtools::docker as dkr;

mod live_node;
mod under_test;

use live_node::{
    alive, bin, check_live, hashes, node, patched_values, pids_now, pods_json, stored_values, Ctr,
    Expect, Live, PodDef, HASH, HASH_WR,
};

// ---------------------------------------------------------------------------------------------
// the runtimes
// ---------------------------------------------------------------------------------------------

trait Runtime {
    fn label(&self) -> String;
    fn start(&mut self);
    fn stop(&mut self);
    /// `--runtime … --root … --runtime-socket …` for this private daemon.
    fn store_flags(&self) -> Vec<String>;
    fn endpoint(&self) -> String;
    /// The store files a patch may write, with their bytes.
    fn snapshot(&self) -> BTreeMap<PathBuf, Vec<u8>>;
    /// Every container the runtime lists, by id.
    fn live(&self) -> HashMap<String, Live>;
    fn scheme(&self) -> &'static str;
    fn tmp(&self) -> PathBuf;
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
    cri: Option<CriClient>,
}

impl Runtime for Containerd {
    fn label(&self) -> String {
        format!("containerd {}", self.h.line.version)
    }
    fn start(&mut self) {
        self.cri = Some(self.h.start());
    }
    fn stop(&mut self) {
        self.cri = None;
        self.h.stop();
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
    fn endpoint(&self) -> String {
        self.h.endpoint()
    }
    fn snapshot(&self) -> BTreeMap<PathBuf, Vec<u8>> {
        let db = self.h.meta_db();
        [(db.clone(), fs::read(&db).unwrap())].into()
    }
    fn live(&self) -> HashMap<String, Live> {
        let cri = self.cri.as_ref().expect("containerd runs");
        cri.list_containers()
            .expect("ListContainers")
            .into_iter()
            .map(|c| {
                let l = Live {
                    hash: c.annotations.get(HASH).cloned(),
                    hash_wr: c.annotations.get(HASH_WR).cloned(),
                    running: c.state == "CONTAINER_RUNNING",
                    pid: c.pid,
                };
                (c.id, l)
            })
            .collect()
    }
    fn scheme(&self) -> &'static str {
        "containerd"
    }
    fn tmp(&self) -> PathBuf {
        self.h.p.t.clone()
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
        Containerd { h, cri: Some(cri) }
    }
}

struct Docker {
    d: dkr::Daemon,
    client: Option<storepatch::live::docker::DockerClient>,
}

impl Runtime for Docker {
    fn label(&self) -> String {
        "docker 20.10".into()
    }
    fn start(&mut self) {
        self.d.start();
        let mut c = self.d.client();
        c.negotiate().unwrap();
        self.client = Some(c);
    }
    fn stop(&mut self) {
        self.client = None;
        self.d.stop();
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
            "--live-restore".into(),
            "true".into(),
            "--daemon-json".into(),
            self.d.path("daemon.json").display().to_string(),
        ]
    }
    fn endpoint(&self) -> String {
        format!("unix://{}", self.d.socket().display())
    }
    fn snapshot(&self) -> BTreeMap<PathBuf, Vec<u8>> {
        let mut m = BTreeMap::new();
        for e in fs::read_dir(self.d.data_root().join("containers"))
            .unwrap()
            .flatten()
        {
            // the file a patch writes (dockerd itself rewrites hostconfig.json at restore)
            let p = e.path().join("config.v2.json");
            if let Ok(b) = fs::read(&p) {
                m.insert(p, b);
            }
        }
        m
    }
    fn live(&self) -> HashMap<String, Live> {
        let c = self.client.as_ref().expect("dockerd runs");
        c.inspect_all()
            .expect("inspect")
            .into_iter()
            .map(|i| {
                let l = Live {
                    hash: i.labels.get(&format!("annotation.{HASH}")).cloned(),
                    hash_wr: i.labels.get(&format!("annotation.{HASH_WR}")).cloned(),
                    running: i.running,
                    pid: (i.pid != 0).then_some(i.pid),
                };
                (i.id, l)
            })
            .collect()
    }
    fn scheme(&self) -> &'static str {
        "docker"
    }
    fn tmp(&self) -> PathBuf {
        self.d.dir.path().to_path_buf()
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
        let image = dkr::import_busybox_image(&c, "docker.io/library/e2etest", "1.0");
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
        let mut docker = Docker { d, client: Some(c) };
        // the guard kills these by pid if anything goes wrong
        let pids: Vec<u32> = docker.live().values().filter_map(|l| l.pid).collect();
        docker.d.container_pids.extend(pids);
        docker
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

fn run(what: &str, args: &[String]) -> Out {
    let t0 = Instant::now();
    let o = Command::new(bin())
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run {}: {e}", bin()));
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

fn args(parts: &[&[String]]) -> Vec<String> {
    parts.iter().flat_map(|p| p.iter().cloned()).collect()
}

fn s(x: &str) -> String {
    x.to_string()
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1e3)
}

// ---------------------------------------------------------------------------------------------
// checks
// ---------------------------------------------------------------------------------------------

/// The plan report: FROM found, every record's action and hashes as expected.
fn check_report(label: &str, rep: &Value, pods: &[PodDef], ctrs: &[Ctr], from: &str, to: &str) {
    assert!(
        rep["from_candidates"]
            .as_array()
            .is_some_and(|a| a.contains(&json!(from))),
        "{label}: --from auto found {} / {}, expected {from} among them",
        rep["from"],
        rep["from_candidates"]
    );
    assert_eq!(rep["to"], json!(to), "{label}: to");
    let records = rep["records"].as_array().expect("records");
    assert_eq!(
        records.len(),
        ctrs.len() + pods.len(),
        "{label}: {} records, expected {} containers + {} sandboxes",
        records.len(),
        ctrs.len(),
        pods.len()
    );
    for p in pods {
        let r = records.iter().find(|r| r["id"] == json!(p.sandbox));
        let r = r.unwrap_or_else(|| panic!("{label}: no record for sandbox {}", p.sandbox));
        assert_eq!(r["action"], "sandbox", "{label}: sandbox {}", p.name);
        assert_eq!(r["kind"], "sandbox");
    }
    for c in ctrs {
        let r = records.iter().find(|r| r["id"] == json!(c.id));
        let r = r.unwrap_or_else(|| panic!("{label}: no record for {} ({})", c.name, c.id));
        let what = format!("{label}: record of {}/{}", pods[c.pod].name, c.name);
        assert_eq!(r["kind"], "container", "{what}");
        assert_eq!(r["pod_uid"], json!(pods[c.pod].uid), "{what}");
        assert_eq!(r["pod"], json!(pods[c.pod].name), "{what}");
        assert_eq!(r["namespace"], json!(pods[c.pod].ns), "{what}");
        assert_eq!(r["container"], json!(c.name), "{what}");
        assert_eq!(r["stored_hash"], json!(c.stored), "{what}");
        assert_eq!(
            r["stored_hash_without_resources"],
            json!(c.stored_wr),
            "{what}"
        );
        let action = match &c.expect {
            Expect::Rewrite { target, target_wr } => {
                assert_eq!(r["target_hash"], json!(target), "{what}");
                assert_eq!(
                    r["target_hash_without_resources"],
                    json!(target_wr),
                    "{what}"
                );
                assert_eq!(r["from_hash"], json!(c.stored), "{what}: from_hash");
                "rewrite"
            }
            Expect::Unchanged => {
                assert_eq!(r["target_hash"], json!(c.stored), "{what}");
                "unchanged"
            }
            Expect::Unproven => {
                let (t, _) = hashes(c.spec.as_ref().unwrap(), to);
                assert_eq!(r["target_hash"], json!(t), "{what}");
                assert_ne!(r["from_hash"], json!(c.stored), "{what}");
                "unproven"
            }
            Expect::Orphan => "orphan",
        };
        assert_eq!(r["action"], action, "{what}: {}", r["reason"]);
        if c.spec.is_some() {
            assert_eq!(r["state"], "running", "{what}: state from the pods file");
        }
    }
    let restart_after = rep["summary"]["would_restart_after_rewrite"].as_u64();
    assert_eq!(
        restart_after,
        Some(1),
        "{label}: only the drifted container restarts: {}",
        rep["summary"]
    );
}

// ---------------------------------------------------------------------------------------------
// the flow
// ---------------------------------------------------------------------------------------------

fn flow(rt: &mut dyn Runtime, pods: &[PodDef], ctrs: &[Ctr], from: &str, to: &str) {
    let label = rt.label();
    let mut notes: Vec<String> = Vec::new();
    let total = Instant::now();
    let t = rt.tmp();
    let pods_file = t.join("pods.json");
    fs::write(
        &pods_file,
        serde_json::to_vec_pretty(&pods_json(pods, ctrs, rt.scheme())).unwrap(),
    )
    .unwrap();
    let store = rt.store_flags();
    let common = args(&[
        &[
            s("--pods"),
            pods_file.display().to_string(),
            s("--to"),
            s(to),
        ],
        &store,
    ]);
    let pids = pids_now(rt, ctrs);
    let rewrites = ctrs
        .iter()
        .filter(|c| matches!(c.expect, Expect::Rewrite { .. }))
        .count();
    assert!(
        rewrites >= 1,
        "{label}: the scenario must rewrite something"
    );

    // 1. plan (the runtime runs; plan only reads)
    let o = run(
        "plan",
        &args(&[&[s("plan")], &common, &[s("-o"), s("json")]]),
    );
    expect_code(&format!("{label}: plan"), &o, 4);
    let rep: Value = serde_json::from_str(&o.stdout).expect("plan -o json");
    check_report(&format!("{label} plan"), &rep, pods, ctrs, from, to);
    notes.push(format!(
        "plan {} (from auto: {} → {})",
        ms(o.took),
        rep["from"],
        rep["to"]
    ));
    let table = run("plan table", &args(&[&[s("plan")], &common]));
    expect_code(&format!("{label}: plan (table)"), &table, 4);
    assert!(
        table.stdout.contains(&format!(
            "without rewrite {} of {} containers would restart",
            rep["summary"]["would_restart_without_rewrite"], rep["summary"]["containers"]
        )) && table.stdout.contains("after rewrite 1 will"),
        "{label}: plan table sentence:\n{}",
        table.stdout
    );

    // 2. patch while the runtime runs: refused, nothing written. The running daemon may
    // commit to its own store meanwhile (containerd's GC), so the proof that *we* wrote
    // nothing is the fault-point log: not one durable step was taken.
    let b0 = t.join("backup-running");
    let o = {
        let t0 = Instant::now();
        let out = Command::new(bin())
            .args(args(&[
                &[s("patch")],
                &common,
                &[s("--backup-dir"), b0.display().to_string()],
            ]))
            .env("KUBELET_REHASH_CRASH_LOG", "1")
            .output()
            .expect("run patch");
        Out {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            took: t0.elapsed(),
        }
    };
    expect_code(&format!("{label}: patch while the runtime runs"), &o, 3);
    assert!(
        o.stderr.to_lowercase().contains("running") || o.stderr.contains("flock"),
        "{label}: refusal names the running runtime: {}",
        o.stderr
    );
    assert!(
        !o.stderr.contains("fault point"),
        "{label}: a refused patch took a durable step: {}",
        o.stderr
    );
    assert!(
        fs::read_dir(&b0)
            .map(|mut d| d.next().is_none())
            .unwrap_or(true),
        "{label}: a refused patch wrote a backup"
    );

    // 3. stop the runtime by pid: the containers keep running
    let t0 = Instant::now();
    rt.stop();
    notes.push(format!("runtime stop {}", ms(t0.elapsed())));
    alive(rt, &pids, "after the runtime stopped");
    let s0 = rt.snapshot();

    // 4. patch + rollback before the runtime ran on the patched store: byte-exact
    let b1 = t.join("backup-1");
    let o = run(
        "patch 1",
        &args(&[
            &[s("patch")],
            &common,
            &[s("--backup-dir"), b1.display().to_string()],
        ]),
    );
    expect_code(&format!("{label}: patch (to roll back)"), &o, 4);
    let s1 = rt.snapshot();
    assert_ne!(s1, s0, "{label}: patch changed nothing");
    let o = run(
        "rollback 1",
        &args(&[
            &[s("rollback"), s("--backup-dir"), b1.display().to_string()],
            &store,
        ]),
    );
    expect_code(&format!("{label}: rollback of an unstarted patch"), &o, 0);
    assert!(rt.snapshot() == s0, "{label}: rollback is not byte-exact");
    notes.push(format!(
        "rollback before restart: byte-exact in {}",
        ms(o.took)
    ));

    // 5. the real patch, with a report
    let b2 = t.join("backup-2");
    let report = t.join("report.json");
    let o = run(
        "patch 2",
        &args(&[
            &[s("patch")],
            &common,
            &[
                s("--backup-dir"),
                b2.display().to_string(),
                s("--report"),
                report.display().to_string(),
                s("-o"),
                s("json"),
            ],
        ]),
    );
    expect_code(&format!("{label}: patch"), &o, 4);
    let rep: Value = serde_json::from_slice(&fs::read(&report).unwrap()).expect("report");
    check_report(&format!("{label} patch report"), &rep, pods, ctrs, from, to);
    assert_eq!(rep["backup_dir"], json!(b2.display().to_string()));
    assert!(
        b2.join("report.json").is_file(),
        "{label}: no report in the backup dir"
    );
    notes.push(format!(
        "patch {} ({} rewrites; backup+apply {:.1} ms, verify {:.1} ms by the tool)",
        ms(o.took),
        rewrites,
        rep["timings"]["backup_and_apply_ms"]
            .as_f64()
            .unwrap_or(f64::NAN),
        rep["timings"]["verify_ms"].as_f64().unwrap_or(f64::NAN)
    ));
    let patched = rt.snapshot();
    // After the patch, `--from auto` must find the node's kubelet from the rewritten hashes
    // (also where a hashWithoutResources stays behind that the target kubelet no longer writes).
    let after = common.clone();
    // offline verify: every proven container holds its target
    let o = run("verify", &args(&[&[s("verify")], &after]));
    expect_code(&format!("{label}: verify (offline)"), &o, 0);
    // safe to run twice: nothing to do, the store stays as it is
    let b3 = t.join("backup-3");
    let o = run(
        "patch again",
        &args(&[
            &[s("patch")],
            &after,
            &[s("--backup-dir"), b3.display().to_string()],
        ]),
    );
    expect_code(&format!("{label}: second patch"), &o, 4);
    assert!(
        rt.snapshot() == patched,
        "{label}: a second patch changed the store"
    );

    // 6. start the runtime on the patched store; verify --live; the runtime's own view
    let t0 = Instant::now();
    rt.start();
    notes.push(format!("runtime start {}", ms(t0.elapsed())));
    // exactly as the README and docs/fleet.md give it: the report alone names the runtime,
    // its endpoint (the --runtime-socket the patch was given), the containers and their pids
    assert_eq!(
        rep["endpoint"],
        json!(rt.endpoint()),
        "{label}: the patch report names the endpoint verify --live asks"
    );
    let o = run(
        "verify --live",
        &[
            s("verify"),
            s("--live"),
            s("--report"),
            report.display().to_string(),
        ],
    );
    expect_code(&format!("{label}: verify --live"), &o, 0);
    assert!(
        o.stdout
            .contains(&format!("verified live: {rewrites} rewritten")),
        "{label}: verify --live output: {}",
        o.stdout
    );
    notes.push(format!("verify --live {}", ms(o.took)));
    check_live(rt, ctrs, &pids, &patched_values, "after patch + restart");

    // 7. rollback while the runtime runs: refused
    let o = run(
        "rollback (running)",
        &args(&[
            &[s("rollback"), s("--backup-dir"), b2.display().to_string()],
            &store,
        ]),
    );
    expect_code(&format!("{label}: rollback while the runtime runs"), &o, 3);

    // 8. stop; rollback after the runtime ran on the patched store
    rt.stop();
    alive(rt, &pids, "after the second stop");
    let ran = rt.snapshot();
    let o = run(
        "rollback 2",
        &args(&[
            &[s("rollback"), s("--backup-dir"), b2.display().to_string()],
            &store,
        ]),
    );
    let want: &dyn Fn(&Ctr) -> (String, Option<String>) = if rt.scheme() == "docker" {
        // dockerd re-serialised config.v2.json byte-identically: the rollback applies
        expect_code(&format!("{label}: rollback after dockerd ran"), &o, 0);
        let now = rt.snapshot();
        let differ: Vec<String> = now
            .iter()
            .filter(|(p, b)| s0.get(*p) != Some(*b))
            .map(|(p, _)| p.display().to_string())
            .collect();
        assert!(
            differ.is_empty(),
            "{label}: rollback is not byte-exact: {differ:#?}"
        );
        notes.push("rollback after dockerd ran: byte-exact".into());
        &stored_values
    } else if ran == patched {
        // containerd did not commit to meta.db while it ran (its GC had nothing to do): the
        // file is still exactly what the patch wrote, so the byte rollback applies
        expect_code(
            &format!("{label}: rollback after containerd ran (file untouched)"),
            &o,
            0,
        );
        assert!(rt.snapshot() == s0, "{label}: rollback is not byte-exact");
        notes.push("rollback after containerd ran without writing: byte-exact".into());
        &stored_values
    } else {
        // containerd wrote meta.db meanwhile (its own commit, or pages of an unfinished
        // transaction over pages the original tree uses): a byte rollback would drop its
        // transaction or break the tree, so the page rollback refuses (the whole file's sha256)
        expect_code(&format!("{label}: rollback after containerd ran"), &o, 3);
        assert!(
            o.stderr.contains("meta.db"),
            "{label}: the refusal names meta.db: {}",
            o.stderr
        );
        assert!(
            o.stderr.contains("rollback --values --backup-dir"),
            "{label}: after a finished patch the refusal names the value rollback: {}",
            o.stderr
        );
        assert!(
            rt.snapshot() == ran,
            "{label}: a refused rollback changed meta.db"
        );
        notes.push("rollback after containerd ran: refused (exit 3), meta.db unchanged".into());
        // the value-level undo writes the previous hashes back, keeping containerd's own commit
        let o = run(
            "rollback --values",
            &args(&[
                &[
                    s("rollback"),
                    s("--values"),
                    s("--backup-dir"),
                    b2.display().to_string(),
                ],
                &store,
            ]),
        );
        expect_code(
            &format!("{label}: rollback --values after containerd ran"),
            &o,
            0,
        );
        assert!(
            o.stdout.contains(&format!(
                "restored the previous hash of {rewrites} container(s)"
            )),
            "{label}: rollback --values output: {}",
            o.stdout
        );
        notes.push(format!(
            "rollback --values after containerd ran {}",
            ms(o.took)
        ));
        &stored_values
    };

    // 9. start again: the runtime reports what the store now holds, same processes
    rt.start();
    check_live(rt, ctrs, &pids, want, "after the rollback");

    // 10. backing out an upgrade the runtime has already run with: upgrade again (runtime
    // restarted on it), then downgrade to the node's own kubelet (`--to FROM`, `--from auto`
    // finds TO): the runtime reports every original hash, the same processes run.
    let mut through =
        |step: &str, target: &str, want: &dyn Fn(&Ctr) -> (String, Option<String>)| {
            rt.stop();
            alive(rt, &pids, &format!("stopped for the {step}"));
            let report = t.join(format!("report-{step}.json"));
            let o = run(
                step,
                &args(&[
                    &[
                        s("patch"),
                        s("--pods"),
                        pods_file.display().to_string(),
                        s("--to"),
                        s(target),
                    ],
                    &store,
                    &[
                        s("--backup-dir"),
                        t.join(format!("backup-{step}")).display().to_string(),
                        s("--report"),
                        report.display().to_string(),
                    ],
                ]),
            );
            expect_code(&format!("{label}: {step} patch --to {target}"), &o, 4);
            let rep: Value = serde_json::from_slice(&fs::read(&report).unwrap()).unwrap();
            let rewritten = rep["records"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|r| r["action"] == "rewrite")
                .count();
            assert_eq!(
                rewritten, rewrites,
                "{label}: the {step} rewrites every proven container"
            );
            rt.start();
            let o = run(
                &format!("verify --live after the {step}"),
                &[
                    s("verify"),
                    s("--live"),
                    s("--report"),
                    report.display().to_string(),
                ],
            );
            expect_code(&format!("{label}: verify --live after the {step}"), &o, 0);
            check_live(rt, ctrs, &pids, want, &format!("after the {step}"));
        };
    through("upgrade", to, &patched_values);
    through("downgrade", from, &stored_values);
    notes.push(format!("upgrade {from} -> {to} then downgrade -> {from} on the live runtime: same pids, original hashes"));
    notes.push(format!("whole flow {:.1} s", total.elapsed().as_secs_f64()));
    for n in &notes {
        eprintln!("e2e {label}: {n}");
    }
}

fn root_or_fail(setup: &str) {
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "the end-to-end tests start real runtimes and need root; {setup}"
    );
}

fn containerd_line(line: ctd::Line, tag: &str, from: &str, to: &str, with_wr: bool) {
    let _serial = ctd::SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    root_or_fail(ctd::SETUP);
    let specs = [
        ("f001-minimal", "app"),
        ("f018-probes-http-exec", "probes"),
        ("f014-resources-2500m-1536Mi-129M", "res"),
        ("f022-securitycontext-full", "sc"),
        ("f009-env-fieldref", "envfrom"),
    ];
    let (mut pods, mut ctrs) = node(tag, &specs, from, to, with_wr);
    let mut rt = Containerd::new(line, &mut pods, &mut ctrs);
    flow(&mut rt, &pods, &ctrs, from, to);
    let errors = rt.h.log_errors();
    assert!(
        !errors.iter().any(|e| {
            let l = e.to_lowercase();
            l.contains("failed to load container") || l.contains("failed to recover")
        }),
        "containerd {}: the CRI plugin failed to load a container: {errors:?}",
        line.version
    );
}

#[test]
fn e2e_containerd_1_6_20_from_1_29_to_1_30() {
    // the last JSON kubelets: hash and hashWithoutResources both rewritten, some unchanged
    containerd_line(
        ctd::Line {
            version: "1.6.20",
            config_v3: false,
        },
        "a16",
        "1.29",
        "1.30",
        true,
    );
}

#[test]
fn e2e_containerd_1_7_24_from_1_30_to_1_31() {
    containerd_line(
        ctd::Line {
            version: "1.7.24",
            config_v3: false,
        },
        "a17",
        "1.30",
        "1.31",
        true,
    );
}

#[test]
fn e2e_containerd_2_1_9_from_1_30_to_1_34() {
    containerd_line(
        ctd::Line {
            version: "2.1.9",
            config_v3: true,
        },
        "a21",
        "1.30",
        "1.34",
        false,
    );
}

/// containerd 2.3.7 (the first LTS) and 2.4.2, built from the Go module proxy
/// (scripts/setup-containerd-module.sh).
#[test]
fn e2e_containerd_2_3_7_from_1_30_to_1_31() {
    containerd_line(
        ctd::Line {
            version: "2.3.7",
            config_v3: true,
        },
        "a23",
        "1.30",
        "1.31",
        false,
    );
}

#[test]
fn e2e_containerd_2_4_2_from_1_30_to_1_37() {
    containerd_line(
        ctd::Line {
            version: "2.4.2",
            config_v3: true,
        },
        "a24",
        "1.30",
        "1.37",
        false,
    );
}

/// To 1.23, the newest kubelet that talks to Docker itself: from 1.24 the kubelet reaches
/// Docker through cri-dockerd, whose 0.4 needs Docker 23+ (this is Debian 12's 20.10);
/// `cri_dockerd_live.rs` runs 1.23 → 1.24 and → 1.31 on Docker 26 through a real cri-dockerd.
#[test]
fn e2e_docker_20_10_from_1_14_to_1_23() {
    let _serial = ctd::SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    root_or_fail(dkr::SETUP);
    let specs = [
        ("f001-minimal", "app"),
        ("f014-resources-2500m-1536Mi-129M", "res"),
        ("f008-env-values", "env"),
        ("f009-env-fieldref", "envfrom"),
    ];
    let (mut pods, mut ctrs) = node("d20", &specs, "1.14", "1.23", false);
    let mut rt = Docker::new(&mut pods, &mut ctrs);
    flow(&mut rt, &pods, &ctrs, "1.14", "1.23");
}
