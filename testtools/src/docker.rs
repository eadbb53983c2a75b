//! A private dockerd 20.10 (Debian 12 `docker.io`; scripts/setup-docker.sh) with live-restore,
//! everything under one temporary directory (data-root, exec-root, pidfile, socket), an image
//! built from static busybox, and a Drop guard that removes the containers, stops dockerd,
//! kills what is left of our processes by pid, unmounts and removes the directory even when an
//! assertion fails.

use serde_json::Value;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use storepatch::live::docker::DockerClient;

/// What to do when dockerd or busybox is missing, for panic messages.
pub const SETUP: &str = "run scripts/setup-docker.sh (as root) first";

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

/// Whether process `pid` exists.
pub fn pid_alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks existence.
    unsafe { libc::kill(pid as i32, 0) == 0 }
}

/// A private dockerd and everything it leaves behind.
pub struct Daemon {
    /// Everything of this dockerd lives here; removed on drop.
    pub dir: tempfile::TempDir,
    /// The dockerd binary.
    pub dockerd: PathBuf,
    /// The running dockerd, when started.
    pub child: Option<Child>,
    /// How many times it was started (each start logs to `dockerd-<n>.log`).
    pub starts: u32,
    /// Containers the test created: removed through dockerd on drop.
    pub container_ids: Vec<String>,
    /// Their processes: killed on drop if still alive.
    pub container_pids: Vec<u32>,
}

impl Daemon {
    /// A fresh directory under /tmp; dockerd is not started yet.
    #[allow(clippy::new_without_default)] // creates a directory: not a default value
    pub fn new() -> Daemon {
        Daemon::with_dockerd(find_dockerd())
    }

    /// [`Daemon::new`] running another dockerd binary (a newer Docker unpacked into `.cache`).
    pub fn with_dockerd(dockerd: PathBuf) -> Daemon {
        let dir = tempfile::Builder::new()
            .prefix("sp-dlive-")
            .tempdir_in("/tmp")
            .unwrap();
        for d in ["data", "exec", "kubelet"] {
            fs::create_dir_all(dir.path().join(d)).unwrap();
        }
        Daemon {
            dir,
            dockerd,
            child: None,
            starts: 0,
            container_ids: Vec::new(),
            container_pids: Vec::new(),
        }
    }
    /// Makes `runc` dockerd's default runtime (its daemon.json; before the first start).
    pub fn use_runc(&self, runc: &Path) {
        fs::write(
            self.path("daemon.json"),
            serde_json::json!({"runtimes": {"runc-new": {"path": runc}}, "default-runtime": "runc-new"})
                .to_string(),
        )
        .unwrap();
    }

    /// `p` under the daemon's directory.
    pub fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }
    /// dockerd's `--data-root`.
    pub fn data_root(&self) -> PathBuf {
        self.path("data")
    }
    /// dockerd's `--pidfile`.
    pub fn pidfile(&self) -> PathBuf {
        self.path("docker.pid")
    }
    /// dockerd's API socket.
    pub fn socket(&self) -> PathBuf {
        self.path("docker.sock")
    }
    /// An Engine API client of this dockerd (60 s timeout per call).
    pub fn client(&self) -> DockerClient {
        DockerClient::new(self.socket()).with_timeout(Duration::from_secs(60))
    }
    /// The last lines of every start's log, for failure messages.
    pub fn log_tail(&self) -> String {
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

    /// dockerd's command line here: live-restore, no networking, vfs, every path private.
    pub fn command_line(&self) -> Vec<String> {
        let mut v = vec![
            self.dockerd.display().to_string(),
            "--data-root".into(),
            self.data_root().display().to_string(),
            "--exec-root".into(),
            self.path("exec").display().to_string(),
            "--pidfile".into(),
            self.pidfile().display().to_string(),
            "-H".into(),
            format!("unix://{}", self.socket().display()),
            "--config-file".into(),
            self.path("daemon.json").display().to_string(),
        ];
        v.extend(
            [
                "--live-restore",
                "--iptables=false",
                "--ip-masq=false",
                "--bridge=none",
                "--storage-driver=vfs",
            ]
            .map(String::from),
        );
        v
    }

    /// Starts dockerd ([`Self::command_line`]) and waits until it answers `_ping`.
    pub fn start(&mut self) {
        self.starts += 1;
        let log = fs::File::create(self.path(&format!("dockerd-{}.log", self.starts))).unwrap();
        let argv = self.command_line();
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .env(
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            )
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        crate::in_own_session(&mut cmd);
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
    pub fn stop(&mut self) {
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
    pub fn our_processes(&self, pred: impl Fn(&str) -> bool) -> Vec<u32> {
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
        //    Every container this dockerd knows is ours (its data root is our dir), recorded
        //    or not.
        if self.child.is_some() {
            let c = self.client().with_timeout(Duration::from_secs(30));
            for ct in c.list_containers().unwrap_or_default() {
                if !self.container_ids.contains(&ct.id) {
                    self.container_ids.push(ct.id);
                }
            }
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
        // 3. Kill what is left, by pid: the container processes we recorded; every process
        //    under a process that names our dir (the containers under their shims, recorded or
        //    not: a test that made them through cri-dockerd's CRI never saw their pids),
        //    deepest first; then those processes (shims, managed containerd). Killing a shim
        //    first would hand its container to init, where no later pass could tell it ours:
        //    with its root file system gone, testtools' LOOP then spins forever.
        for &pid in &self.container_pids {
            unsafe { libc::kill(pid as i32, libc::SIGKILL) };
        }
        for _ in 0..50 {
            let ours = self.our_processes(|_| true);
            if ours.is_empty() {
                break;
            }
            let mut under = crate::containerd::descendants(&ours);
            under.reverse();
            for pid in under.into_iter().chain(ours) {
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
                    // a container whose shim died is init's now: its cgroup says it is ours
                    crate::containerd::rmdir_tree(&h.join("docker").join(id));
                }
            }
        }
        // The TempDir removes the directory.
    }
}

/// A ustar archive of a one-binary root filesystem: /bin/busybox plus sh and sleep links.
pub fn busybox_rootfs_tar() -> Vec<u8> {
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

/// A container command that runs until SIGTERM and then exits 0.
pub const LOOP: &str = "trap \"exit 0\" TERM INT; while true; do sleep 3600 & wait $!; done";

/// `POST /containers/create?name=<name>` with `body`; returns the container id.
pub fn create(c: &DockerClient, name: &str, body: Value) -> String {
    let v: Value = c
        .call(
            "POST",
            &format!("/containers/create?name={name}"),
            Some(("application/json", &serde_json::to_vec(&body).unwrap())),
        )
        .unwrap_or_else(|e| panic!("create {name}: {e}"));
    v["Id"].as_str().unwrap().to_string()
}

/// Imports the busybox root filesystem as image `repo:tag`; returns its id.
pub fn import_busybox_image(c: &DockerClient, repo: &str, tag: &str) -> String {
    let tar = busybox_rootfs_tar();
    let r = c
        .request(
            "POST",
            &format!("/images/create?fromSrc=-&repo={repo}&tag={tag}"),
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
        .call("GET", &format!("/images/{repo}:{tag}/json"), None)
        .unwrap();
    img["Id"].as_str().unwrap().to_string()
}

/// The dockerd of a Docker built by scripts/setup-docker-module.sh:
/// `.cache/runtimes/docker-<version>/usr/bin/dockerd` (panics naming the script when missing).
pub fn module_dockerd(version: &str) -> PathBuf {
    module_binary(
        &format!("docker-{version}"),
        "dockerd",
        "setup-docker-module.sh",
        version,
    )
}

/// The runc built by scripts/setup-runc-module.sh: `.cache/runtimes/runc-<version>/usr/bin/runc`
/// (Docker 29's engine needs runc >= 1.2 for its time namespace).
pub fn module_runc(version: &str) -> PathBuf {
    module_binary(
        &format!("runc-{version}"),
        "runc",
        "setup-runc-module.sh",
        version,
    )
}

fn module_binary(dir: &str, bin: &str, script: &str, version: &str) -> PathBuf {
    let p = crate::containerd::workspace().join(format!(".cache/runtimes/{dir}/usr/bin/{bin}"));
    assert!(
        p.is_file(),
        "{} is missing: run scripts/{script} {version} (scripts/test.sh does)",
        p.display()
    );
    p
}
