//! Proof on a real dockerd 20.10 (Debian 12 `docker.io`; install with scripts/setup-docker.sh):
//! a private dockerd with live-restore runs a dockershim-shaped pod (sandbox + two
//! containers); dockerd is stopped (the containers keep running), the hashes are rewritten
//! through the library, dockerd is started again and must report the new hashes for the same,
//! still running processes. Then rollback, restart, and the old hashes are back.
//!
//! Everything lives under one temp dir: data-root, exec-root, pidfile, socket. The guard's Drop
//! removes the containers, stops dockerd, kills what is left of our processes by pid (found by
//! that unique path), unmounts what dockerd mounted there and removes the dir, even when an
//! assertion fails.

use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use storepatch::backup::{self, Backup, RollbackAction};
use storepatch::docker::{DockerOptions, DockerStore, HASH_LABEL};
use storepatch::live::docker::DockerClient;
use storepatch::{RecordKind, Rewrite, RuntimeStore, StoreError};

const SETUP: &str = "run scripts/setup-docker.sh (as root) first";

fn find_dockerd() -> PathBuf {
    for d in [
        "/usr/sbin",
        "/usr/bin",
        "/sbin",
        "/bin",
        "/usr/local/sbin",
        "/usr/local/bin",
    ] {
        let p = Path::new(d).join("dockerd");
        if p.is_file() {
            return p;
        }
    }
    panic!("dockerd not found: {SETUP}");
}

fn pid_alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks existence.
    unsafe { libc::kill(pid as i32, 0) == 0 }
}

/// A private dockerd and everything it leaves behind.
struct Daemon {
    dir: tempfile::TempDir,
    dockerd: PathBuf,
    child: Option<Child>,
    starts: u32,
    container_ids: Vec<String>,
    container_pids: Vec<u32>,
}

impl Daemon {
    fn new() -> Daemon {
        let dir = tempfile::Builder::new()
            .prefix("sp-dlive-")
            .tempdir_in("/tmp")
            .unwrap();
        for d in ["data", "exec", "kubelet"] {
            fs::create_dir_all(dir.path().join(d)).unwrap();
        }
        Daemon {
            dir,
            dockerd: find_dockerd(),
            child: None,
            starts: 0,
            container_ids: Vec::new(),
            container_pids: Vec::new(),
        }
    }
    fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }
    fn data_root(&self) -> PathBuf {
        self.path("data")
    }
    fn pidfile(&self) -> PathBuf {
        self.path("docker.pid")
    }
    fn socket(&self) -> PathBuf {
        self.path("docker.sock")
    }
    fn client(&self) -> DockerClient {
        DockerClient::new(self.socket()).with_timeout(Duration::from_secs(60))
    }
    fn log_tail(&self) -> String {
        let mut s = String::new();
        for n in 1..=self.starts {
            let text =
                fs::read_to_string(self.path(&format!("dockerd-{n}.log"))).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            s.push_str(&format!("--- dockerd-{n}.log (tail)\n"));
            for l in &lines[lines.len().saturating_sub(15)..] {
                s.push_str(l);
                s.push('\n');
            }
        }
        s
    }

    fn start(&mut self) {
        self.starts += 1;
        let log = fs::File::create(self.path(&format!("dockerd-{}.log", self.starts))).unwrap();
        let mut cmd = Command::new(&self.dockerd);
        cmd.arg("--data-root")
            .arg(self.data_root())
            .arg("--exec-root")
            .arg(self.path("exec"))
            .arg("--pidfile")
            .arg(self.pidfile())
            .arg("-H")
            .arg(format!("unix://{}", self.socket().display()))
            .arg("--config-file")
            .arg(self.path("daemon.json"))
            .args([
                "--live-restore",
                "--iptables=false",
                "--ip-masq=false",
                "--bridge=none",
                "--storage-driver=vfs",
            ])
            .env(
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            )
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        // SAFETY: setsid is async-signal-safe; a new session keeps dockerd out of our group.
        unsafe {
            cmd.pre_exec(|| {
                libc::setsid();
                Ok(())
            });
        }
        if !self.path("daemon.json").exists() {
            fs::write(self.path("daemon.json"), b"{}\n").unwrap();
        }
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start dockerd: {e}; {SETUP}"));
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            if self.client().ping().is_ok() {
                return;
            }
            if let Some(st) = self.child.as_mut().unwrap().try_wait().unwrap() {
                self.child = None;
                panic!("dockerd exited at start ({st}):\n{}", self.log_tail());
            }
            assert!(
                Instant::now() < deadline,
                "dockerd did not answer in 90 s:\n{}",
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// SIGTERM to dockerd's pid and wait for it to exit (with live-restore the containers
    /// keep running).
    fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        // SAFETY: plain kill(2) of our own child.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if child.try_wait().unwrap().is_some() {
                break;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "dockerd did not exit within 60 s of SIGTERM:\n{}",
                    self.log_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        // Its managed containerd exits shortly after it.
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self
            .our_processes(|cmd| cmd.contains("containerd") && !cmd.contains("shim"))
            .is_empty()
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Pids of processes whose command line names our temp dir and matches `pred`.
    fn our_processes(&self, pred: impl Fn(&str) -> bool) -> Vec<u32> {
        let me = self.dir.path().to_string_lossy().into_owned();
        let mut v = Vec::new();
        for e in fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Ok(raw) = fs::read(format!("/proc/{pid}/cmdline")) else {
                continue;
            };
            let cmd = String::from_utf8_lossy(&raw).replace('\0', " ");
            if cmd.contains(&me) && pred(&cmd) {
                v.push(pid);
            }
        }
        v
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // 1. Remove our containers through dockerd when it runs (cleans its cgroups too).
        if self.child.is_some() {
            let c = self.client().with_timeout(Duration::from_secs(30));
            for id in &self.container_ids {
                let _ = c.request("DELETE", &format!("/containers/{id}?force=1"), None);
            }
        }
        // 2. Stop dockerd.
        if let Some(mut child) = self.child.take() {
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(30);
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        // 3. Kill what is left: the container processes we recorded, then every process that
        //    names our dir (shims, managed containerd), by pid.
        for &pid in &self.container_pids {
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
        for _ in 0..50 {
            let left = self.our_processes(|_| true);
            if left.is_empty() {
                break;
            }
            for pid in left {
                unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        // 4. Unmount everything dockerd mounted under our dir, deepest first.
        let me = self.dir.path().to_string_lossy().into_owned();
        let mut mounts: Vec<String> = fs::read_to_string("/proc/self/mountinfo")
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split(' ').nth(4).map(String::from))
            .filter(|m| m.starts_with(&me))
            .collect();
        mounts.sort_by_key(|m| std::cmp::Reverse(m.len()));
        for m in mounts {
            let c = std::ffi::CString::new(m).unwrap();
            unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) };
        }
        // 5. Empty cgroups dockerd made for our containers (default parent /docker/<id>).
        if let Ok(hier) = fs::read_dir("/sys/fs/cgroup") {
            let hier: Vec<PathBuf> = hier.flatten().map(|e| e.path()).collect();
            for id in &self.container_ids {
                for h in &hier {
                    let _ = fs::remove_dir(h.join("docker").join(id));
                }
            }
        }
        // The TempDir removes the directory.
    }
}

/// A ustar archive of a one-binary root filesystem: /bin/busybox plus sh and sleep links.
fn busybox_rootfs_tar() -> Vec<u8> {
    let busybox = fs::read("/bin/busybox").unwrap_or_else(|e| panic!("/bin/busybox: {e}; {SETUP}"));
    assert!(
        busybox.len() > 64 && !busybox.windows(16).any(|w| w == b"/lib64/ld-linux-"),
        "/bin/busybox is not the static build (busybox-static); {SETUP}"
    );
    let mut out = Vec::new();
    let mut entry = |name: &str, mode: u32, kind: u8, link: &str, data: &[u8]| {
        let mut h = [0u8; 512];
        h[..name.len()].copy_from_slice(name.as_bytes());
        let octal = |h: &mut [u8; 512], at: usize, len: usize, v: u64| {
            let s = format!("{:0w$o}\0", v, w = len - 1);
            h[at..at + len].copy_from_slice(s.as_bytes());
        };
        octal(&mut h, 100, 8, mode as u64);
        octal(&mut h, 108, 8, 0);
        octal(&mut h, 116, 8, 0);
        octal(&mut h, 124, 12, data.len() as u64);
        octal(&mut h, 136, 12, 1_700_000_000);
        h[148..156].copy_from_slice(b"        ");
        h[156] = kind;
        h[157..157 + link.len()].copy_from_slice(link.as_bytes());
        h[257..263].copy_from_slice(b"ustar\0");
        h[263..265].copy_from_slice(b"00");
        let sum: u32 = h.iter().map(|&b| b as u32).sum();
        h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
        out.extend_from_slice(&h);
        out.extend_from_slice(data);
        out.resize(out.len().div_ceil(512) * 512, 0);
    };
    for d in ["bin/", "etc/", "tmp/", "proc/", "sys/", "dev/"] {
        entry(d, if d == "tmp/" { 0o1777 } else { 0o755 }, b'5', "", b"");
    }
    entry("bin/busybox", 0o755, b'0', "", &busybox);
    entry("bin/sh", 0o777, b'2', "busybox", b"");
    entry("bin/sleep", 0o777, b'2', "busybox", b"");
    entry(
        "etc/passwd",
        0o644,
        b'0',
        "",
        b"root:x:0:0:root:/:/bin/sh\n",
    );
    entry("etc/group", 0o644, b'0', "", b"root:x:0:\n");
    out.extend_from_slice(&[0u8; 1024]);
    out
}

const UID: &str = "7d0e8c1a-1111-4a4a-9b9b-000000000001";
const LOOP: &str = "trap \"exit 0\" TERM INT; while true; do sleep 3600 & wait $!; done";

fn create(c: &DockerClient, name: &str, body: Value) -> String {
    let v: Value = c
        .call(
            "POST",
            &format!("/containers/create?name={name}"),
            Some(("application/json", &serde_json::to_vec(&body).unwrap())),
        )
        .unwrap_or_else(|e| panic!("create {name}: {e}"));
    v["Id"].as_str().unwrap().to_string()
}

fn container_labels(name: &str, hash: &str, sandbox: &str, logdir: &Path) -> Value {
    let mut l = json!({
        "annotation.io.kubernetes.container.hash": hash,
        "annotation.io.kubernetes.container.restartCount": "0",
        "annotation.io.kubernetes.container.terminationMessagePath": "/dev/termination-log",
        "annotation.io.kubernetes.container.terminationMessagePolicy": "File",
        "annotation.io.kubernetes.pod.terminationGracePeriod": "30",
        "io.kubernetes.container.logpath": format!("{}/{name}/0.log", logdir.display()),
        "io.kubernetes.container.name": name,
        "io.kubernetes.docker.type": "container",
        "io.kubernetes.pod.name": "web-0",
        "io.kubernetes.pod.namespace": "default",
        "io.kubernetes.pod.uid": UID,
        "io.kubernetes.sandbox.id": sandbox,
    });
    if name == "nginx" {
        l["annotation.io.kubernetes.container.ports"] =
            json!("[{\"name\":\"http\",\"containerPort\":8080,\"protocol\":\"TCP\"}]");
    } else {
        l["annotation.io.kubernetes.container.preStopHandler"] =
            json!("{\"exec\":{\"command\":[\"/bin/sh\",\"-c\",\"sleep 1 && echo bye\"]}}");
    }
    l
}

#[test]
fn rewrite_on_a_real_dockerd_keeps_containers_running() {
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "the live Docker test needs root (CI runs as root); {SETUP}"
    );
    let mut d = Daemon::new();
    d.start();
    let mut c = d.client();
    let api = c.negotiate().unwrap();
    eprintln!("dockerd API {api}");

    // Image: imported from a tar built now from /bin/busybox.
    let tar = busybox_rootfs_tar();
    let r = c
        .request(
            "POST",
            "/images/create?fromSrc=-&repo=docker.io/library/storetest&tag=1.0",
            Some(("application/x-tar", &tar)),
        )
        .unwrap();
    let text = String::from_utf8_lossy(&r.body);
    assert!(
        r.status == 200 && !text.contains("\"error"),
        "image import: {} {text}",
        r.status
    );
    let img: Value = c
        .call("GET", "/images/docker.io/library/storetest:1.0/json", None)
        .unwrap();
    let image_id = img["Id"].as_str().unwrap().to_string();

    // The pod, shaped like dockershim's.
    let logdir = d.path(&format!("kubelet/log/pods/default_web-0_{UID}"));
    fs::create_dir_all(&logdir).unwrap();
    let sandbox = create(
        &c,
        &format!("k8s_POD_web-0_default_{UID}_0"),
        json!({
            "Image": "docker.io/library/storetest:1.0",
            "Hostname": "",
            "Entrypoint": ["/bin/sh", "-c", LOOP],
            "Env": ["PATH=/bin"],
            "Labels": {
                "annotation.kubernetes.io/config.seen": "2024-05-01T10:00:00.000000000Z",
                "annotation.kubernetes.io/config.source": "api",
                "app": "web",
                "io.kubernetes.container.name": "POD",
                "io.kubernetes.docker.type": "podsandbox",
                "io.kubernetes.pod.name": "web-0",
                "io.kubernetes.pod.namespace": "default",
                "io.kubernetes.pod.uid": UID,
            },
            "HostConfig": {"NetworkMode": "host", "IpcMode": "shareable", "SecurityOpt": ["seccomp=unconfined"]},
        }),
    );
    d.container_ids.push(sandbox.clone());
    c.call::<Value>("POST", &format!("/containers/{sandbox}/start"), None)
        .unwrap();
    let mut old_hash = BTreeMap::new();
    let mut ids = BTreeMap::new();
    for (name, hash) in [("nginx", "3a1f6c2e"), ("sidecar", "5b20d7f1")] {
        let id = create(
            &c,
            &format!("k8s_{name}_web-0_default_{UID}_0"),
            json!({
                "Image": image_id,
                "Entrypoint": ["/bin/sh", "-c"],
                "Cmd": [format!("echo started; {LOOP}")],
                "Env": ["KUBERNETES_SERVICE_HOST=10.96.0.1", "PATH=/bin"],
                "Healthcheck": {"Test": ["NONE"]},
                "Labels": container_labels(name, hash, &sandbox, &logdir),
                "HostConfig": {
                    "NetworkMode": format!("container:{sandbox}"),
                    "IpcMode": format!("container:{sandbox}"),
                    "UTSMode": "host",
                    "RestartPolicy": {"Name": "no"},
                    "SecurityOpt": ["seccomp=unconfined"],
                },
            }),
        );
        d.container_ids.push(id.clone());
        c.call::<Value>("POST", &format!("/containers/{id}/start"), None)
            .unwrap();
        old_hash.insert(id.clone(), hash.to_string());
        ids.insert(name, id);
    }
    let mut pids = BTreeMap::new();
    for id in &d.container_ids.clone() {
        let i = c.inspect(id).unwrap();
        assert!(i.running && i.pid > 0, "{id} not running: {i:?}");
        pids.insert(id.clone(), i.pid);
        d.container_pids.push(i.pid);
    }

    // While dockerd runs: the store refuses to write, live-restore is read from its command line.
    let store_opts = DockerOptions {
        pidfile: d.pidfile(),
        socket: d.socket(),
        daemon_json: d.path("daemon.json"),
        live_restore: None,
    };
    let store = DockerStore::with_options(&d.data_root(), store_opts).unwrap();
    let lr = store.live_restore();
    assert!(lr.is_on(), "{lr:?}");
    let e = store.ensure_stopped().unwrap_err();
    assert!(matches!(e, StoreError::RuntimeRunning { .. }), "{e}");
    let new_hash: BTreeMap<String, String> = [
        (ids["nginx"].clone(), "e1f2a3b4".to_string()),
        (ids["sidecar"].clone(), "0badf00d".to_string()),
    ]
    .into();
    let rewrites: Vec<Rewrite> = new_hash
        .iter()
        .map(|(id, h)| Rewrite {
            id: id.clone(),
            hash: h.clone(),
            hash_without_resources: None,
        })
        .collect();
    let mut refused = Backup::create(&d.path("backup-refused"), "docker", &d.data_root()).unwrap();
    assert!(matches!(
        store.apply(&rewrites, &mut refused),
        Err(StoreError::RuntimeRunning { .. })
    ));

    // Stop dockerd: the containers keep running.
    d.stop();
    for (id, &pid) in &pids {
        assert!(
            pid_alive(pid),
            "container {id} pid {pid} died when dockerd stopped"
        );
    }
    store.ensure_stopped().unwrap();
    let report = store.scan().unwrap();
    assert_eq!(report.records.len(), 3);
    for r in &report.records {
        let want_kind = if r.id == sandbox {
            RecordKind::Sandbox
        } else {
            RecordKind::Container
        };
        assert_eq!(r.kind, want_kind);
        assert_eq!(r.pod_uid.as_deref(), Some(UID));
        assert_eq!(r.pid, Some(pids[&r.id]), "recorded pid of {}", r.id);
        assert_eq!(r.hash.as_ref(), old_hash.get(&r.id));
        if r.kind == RecordKind::Container {
            assert_eq!(r.attempt, Some(0));
        }
    }

    // Rewrite through the library.
    let bdir = d.path("backup");
    let mut b = Backup::create(&bdir, "docker", &d.data_root()).unwrap();
    let t0 = Instant::now();
    let out = store.apply(&rewrites, &mut b).unwrap();
    eprintln!(
        "apply of {} files took {:?}",
        out.files_written,
        t0.elapsed()
    );
    assert_eq!(out.changed.len(), 2);

    // Start dockerd: the new hashes, same processes, still running.
    d.start();
    let c = d.client();
    for (id, &pid) in &pids {
        let i = c.inspect(id).unwrap();
        assert!(i.running, "{id} not running after restart: {i:?}");
        assert_eq!(i.pid, pid, "{id} pid changed");
        assert_eq!(
            i.labels.get(HASH_LABEL),
            new_hash.get(id).or(old_hash.get(id)),
            "{id}"
        );
    }
    let listed = c.list_containers().unwrap();
    assert_eq!(listed.len(), 3);
    for l in &listed {
        assert_eq!(l.state, "running");
        let labels = l.labels.clone().unwrap_or_default();
        assert_eq!(
            labels.get(HASH_LABEL),
            new_hash.get(&l.id).or(old_hash.get(&l.id))
        );
    }
    // dockerd re-serialised every config.v2.json at restore: ours came back byte-identical,
    // which is what lets rollback recognise them.
    let manifest = backup::read_manifest(&bdir).unwrap();
    for e in &manifest.entries {
        let now = backup::sha256_hex(&fs::read(&e.path).unwrap());
        assert_eq!(
            Some(now),
            e.sha256_new,
            "{} after dockerd's restore",
            e.path.display()
        );
    }

    // Rollback: stop, restore, start; the old hashes are back, same processes.
    d.stop();
    for (id, &pid) in &pids {
        assert!(
            pid_alive(pid),
            "container {id} pid {pid} died at the second stop"
        );
    }
    let rb = backup::rollback(&bdir, false).unwrap();
    assert!(
        rb.files.iter().all(|(_, a)| *a == RollbackAction::Restored),
        "{rb:?}"
    );
    assert_eq!(rb.files.len(), 2);
    d.start();
    let c = d.client();
    for (id, &pid) in &pids {
        let i = c.inspect(id).unwrap();
        assert!(i.running, "{id} not running after rollback: {i:?}");
        assert_eq!(i.pid, pid, "{id} pid changed after rollback");
        assert_eq!(i.labels.get(HASH_LABEL), old_hash.get(id), "{id}");
    }
    let _ = std::io::stderr().flush();
    // Orderly teardown; the guard does the rest.
    for id in d.container_ids.clone().iter().rev() {
        c.request("DELETE", &format!("/containers/{id}?force=1"), None)
            .unwrap();
    }
    let left = c.list_containers().unwrap();
    assert!(left.is_empty(), "containers left: {left:?}");
    d.container_ids.clear();
    d.stop();
}
