//! A private containerd per release line under a temporary directory (root, state, socket,
//! cgroup parent of its own), kubelet-shaped images and CRI configs, and a Drop guard that stops
//! pods, containerd and shims and unmounts everything even when a check fails.
//!
//! Needs root and the runtimes that `scripts/setup-containerd.sh` puts under
//! `.cache/runtimes/`.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::cri::{v1, CriTestCalls};
use sha2::{Digest, Sha256};
use storepatch::live::cri::CriClient;

/// The kubelet's hash annotation.
pub const HASH: &str = "io.kubernetes.container.hash";
/// The kubelet's hash-without-resources annotation (1.27–1.30).
pub const HASH_WR: &str = "io.kubernetes.container.hashWithoutResources";
/// The sandbox image [`build_image`] makes (pinned as the CRI's sandbox image).
pub const PAUSE_IMAGE: &str = "docker.io/library/storetest-pause:1.0";
/// The container image [`build_image`] makes.
pub const APP_IMAGE: &str = "docker.io/library/storetest-app:1.0";
/// What to do when a runtime is missing, for panic messages.
pub const SETUP: &str = "run scripts/setup-containerd.sh (as root) first";

/// One line at a time: the lines share the host's cgroup tree and /run/containerd/s.
pub static SERIAL: Mutex<()> = Mutex::new(());

/// The workspace root (fixtures/, .cache/).
pub fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// A containerd release line under test.
#[derive(Clone, Copy)]
pub struct Line {
    /// The version `containerd --version` must report, e.g. `1.7.24`.
    pub version: &'static str,
    /// containerd 2.x reads config version 3 (the CRI plugin split in three).
    pub config_v3: bool,
}

fn runtime_bin(line: Line) -> PathBuf {
    let dir = workspace()
        .join(".cache/runtimes")
        .join(format!("containerd-{}", line.version))
        .join("usr/bin");
    for b in ["containerd", "ctr", "containerd-shim-runc-v2"] {
        assert!(
            dir.join(b).exists(),
            "containerd {}: {} is missing; {SETUP}",
            line.version,
            dir.join(b).display()
        );
    }
    let out = Command::new(dir.join("containerd"))
        .arg("--version")
        .output()
        .unwrap_or_else(|e| panic!("{}: {e}; {SETUP}", dir.join("containerd").display()));
    let v = String::from_utf8_lossy(&out.stdout);
    assert!(
        v.contains(line.version),
        "{} reports {v:?}, not {}; {SETUP}",
        dir.join("containerd").display(),
        line.version
    );
    for tool in ["/usr/sbin/runc", "/bin/busybox"] {
        assert!(Path::new(tool).exists(), "{tool} is missing; {SETUP}");
    }
    assert!(
        unsafe { libc::geteuid() } == 0,
        "the live containerd test needs root (it starts containerd, runc and mounts)"
    );
    dir
}

// ---------------------------------------------------------------------------------------------
// images: OCI layout tars with one uncompressed layer holding static busybox
// ---------------------------------------------------------------------------------------------

/// Lowercase hex sha256 of `b`.
pub fn sha256_hex(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

fn put_blob(layout: &Path, bytes: &[u8]) -> (String, usize) {
    let hex = sha256_hex(bytes);
    fs::write(layout.join("blobs/sha256").join(&hex), bytes).unwrap();
    (format!("sha256:{hex}"), bytes.len())
}

/// Runs `cmd`, panics naming `what` unless it succeeds; returns its stdout.
pub fn run_ok(cmd: &mut Command, what: &str) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("{what}: cannot run: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Writes `<dir>/<tag>.tar`, an OCI image layout naming `name` (`repo:tag`).
pub fn build_image(dir: &Path, name: &str, role: &str) -> PathBuf {
    let work = dir.join(format!("img-{role}"));
    let rootfs = work.join("rootfs");
    for d in ["bin", "etc", "tmp", "dev", "proc", "sys"] {
        fs::create_dir_all(rootfs.join(d)).unwrap();
    }
    fs::copy("/bin/busybox", rootfs.join("bin/busybox")).unwrap();
    for l in ["sh", "sleep", "true", "cat", "ls"] {
        std::os::unix::fs::symlink("busybox", rootfs.join("bin").join(l)).unwrap();
    }
    fs::write(rootfs.join("etc/passwd"), "root:x:0:0:root:/:/bin/sh\n").unwrap();
    fs::write(rootfs.join("etc/group"), "root:x:0:\n").unwrap();
    let layer = work.join("layer.tar");
    run_ok(
        Command::new("tar")
            .args(["--owner=0", "--group=0", "--numeric-owner", "--sort=name"])
            .args(["--mtime=@0", "-C"])
            .arg(&rootfs)
            .arg("-cf")
            .arg(&layer)
            .arg("."),
        "tar of the image layer",
    );
    let layout = work.join("layout");
    fs::create_dir_all(layout.join("blobs/sha256")).unwrap();
    let (layer_digest, layer_size) = put_blob(&layout, &fs::read(&layer).unwrap());
    let config = serde_json::json!({
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Env": ["PATH=/bin"],
            "Entrypoint": ["/bin/sh", "-c",
                "trap 'exit 0' TERM INT; while true; do sleep 3600 & wait $!; done"],
            "Labels": {"storepatch.test.role": role}
        },
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
        "history": [{"created_by": "storepatch containerd_live test"}]
    });
    let (config_digest, config_size) = put_blob(&layout, config.to_string().as_bytes());
    let manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": config_digest, "size": config_size},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": layer_digest, "size": layer_size}]
    });
    let (manifest_digest, manifest_size) = put_blob(&layout, manifest.to_string().as_bytes());
    let tag = name.rsplit(':').next().unwrap();
    let index = serde_json::json!({
        "schemaVersion": 2,
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
                       "digest": manifest_digest, "size": manifest_size,
                       "platform": {"architecture": "amd64", "os": "linux"},
                       "annotations": {"io.containerd.image.name": name,
                                       "org.opencontainers.image.ref.name": tag}}]
    });
    fs::write(layout.join("index.json"), index.to_string()).unwrap();
    fs::write(
        layout.join("oci-layout"),
        r#"{"imageLayoutVersion":"1.0.0"}"#,
    )
    .unwrap();
    let tar = dir.join(format!("{role}.tar"));
    run_ok(
        Command::new("tar")
            .args(["--owner=0", "--group=0", "--numeric-owner", "-C"])
            .arg(&layout)
            .arg("-cf")
            .arg(&tar)
            .arg("."),
        "tar of the OCI layout",
    );
    tar
}

// ---------------------------------------------------------------------------------------------
// the containerd instance
// ---------------------------------------------------------------------------------------------

/// Where one containerd instance keeps its files.
pub struct Paths {
    /// The instance's temporary directory; every other path is under it.
    pub t: PathBuf,
    /// containerd's `root` (meta.db, snapshots, content).
    pub root: PathBuf,
    /// containerd's `state`.
    pub state: PathBuf,
    /// The gRPC (CRI) socket.
    pub sock: PathBuf,
    /// containerd's log (all starts appended).
    pub log: PathBuf,
    /// The generated config.toml.
    pub config: PathBuf,
    /// Top cgroup (under every controller) the pods' cgroup parents live in.
    pub cgroup_top: String,
}

fn write_config(line: Line, p: &Paths) {
    let t = p.t.display();
    let common = format!(
        r#"root = "{root}"
state = "{state}"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.nri.v1.nri", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{sock}"

[ttrpc]
  address = "{sock}.ttrpc"

[debug]
  address = "{t}/debug.sock"
  level = "debug"
"#,
        root = p.root.display(),
        state = p.state.display(),
        sock = p.sock.display(),
    );
    let plugins = if line.config_v3 {
        format!(
            r#"
[plugins."io.containerd.internal.v1.opt"]
  path = "{t}/opt"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "{PAUSE_IMAGE}"

[plugins."io.containerd.cri.v1.runtime"]
  enable_selinux = false
  restrict_oom_score_adj = true
  enable_cdi = false
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["{t}/cni/bin"]
    conf_dir = "{t}/cni/net.d"
  [plugins."io.containerd.cri.v1.runtime".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
        Root = "{t}/runc"
        SystemdCgroup = false

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
"#
        )
    } else {
        format!(
            r#"
[plugins."io.containerd.internal.v1.opt"]
  path = "{t}/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{t}/cni/bin"
    conf_dir = "{t}/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = "{t}/runc"
        SystemdCgroup = false
"#
        )
    };
    let version = if line.config_v3 { 3 } else { 2 };
    fs::write(&p.config, format!("version = {version}\n{common}{plugins}")).unwrap();
}

/// A private containerd of one release line and everything it leaves behind.
pub struct Harness {
    /// The release line it runs.
    pub line: Line,
    /// The line's `usr/bin` (containerd, ctr, shim).
    pub bin: PathBuf,
    /// Its files.
    pub p: Paths,
    /// The running containerd, when started.
    pub daemon: Option<Child>,
    /// Keeps the temporary directory until the guard is done with it.
    _tmp: tempfile::TempDir,
    /// Sandboxes the test ran: stopped and removed on drop.
    pub sandboxes: Vec<String>,
    /// Timings and facts for the report, printed at the end.
    pub notes: Vec<String>,
}

impl Harness {
    /// A fresh directory and config for `line`; containerd is not started yet. Panics (with
    /// [`SETUP`]) when the line's binaries, runc or busybox are missing or not root.
    pub fn new(line: Line) -> Harness {
        let bin = runtime_bin(line);
        // short path: unix socket paths are limited to 108 bytes
        let tmp = tempfile::Builder::new()
            .prefix(&format!("spctd-{}-", line.version))
            .tempdir_in("/tmp")
            .unwrap();
        let t = tmp.path().to_path_buf();
        let p = Paths {
            root: t.join("root"),
            state: t.join("state"),
            sock: t.join("c.sock"),
            log: t.join("containerd.log"),
            config: t.join("config.toml"),
            cgroup_top: format!(
                "kubepods-storepatch-{}-{}",
                line.version.replace('.', "_"),
                std::process::id()
            ),
            t,
        };
        for d in ["cni/bin", "cni/net.d", "opt", "runc", "log/pods"] {
            fs::create_dir_all(p.t.join(d)).unwrap();
        }
        write_config(line, &p);
        Harness {
            line,
            bin,
            p,
            daemon: None,
            _tmp: tmp,
            sandboxes: Vec::new(),
            notes: Vec::new(),
        }
    }

    /// The CRI endpoint, `unix://<sock>`.
    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.p.sock.display())
    }

    /// `PATH` for containerd and ctr: the line's binaries first.
    pub fn path_env(&self) -> String {
        // the line's own shim first: containerd looks shims up in PATH
        format!("{}:/usr/sbin:/usr/bin:/sbin:/bin", self.bin.display())
    }

    /// containerd's error lines so far (CNI's "no network config" excluded: host network).
    pub fn log_errors(&self) -> Vec<String> {
        fs::read_to_string(&self.p.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("level=error") || l.contains("level=fatal"))
            .filter(|l| !l.to_lowercase().contains("cni"))
            .map(String::from)
            .collect()
    }

    /// The last 40 lines of the log, for failure messages.
    pub fn log_tail(&self) -> String {
        let s = fs::read_to_string(&self.p.log).unwrap_or_default();
        let lines: Vec<&str> = s.lines().collect();
        let from = lines.len().saturating_sub(40);
        lines[from..].join("\n")
    }

    /// Starts containerd and waits until the CRI answers `Version`.
    pub fn start(&mut self) -> CriClient {
        assert!(self.daemon.is_none(), "containerd already running");
        let started = Instant::now();
        let _ = fs::remove_file(&self.p.sock);
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.p.log)
            .unwrap();
        let mut cmd = Command::new(self.bin.join("containerd"));
        cmd.arg("--config")
            .arg(&self.p.config)
            .env_clear()
            .env("PATH", self.path_env())
            .env("HOME", &self.p.t)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        crate::in_own_session(&mut cmd);
        let child = cmd.spawn().expect("spawn containerd");
        self.daemon = Some(child);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(st) = self.daemon.as_mut().unwrap().try_wait().unwrap() {
                self.daemon = None;
                panic!(
                    "containerd {} exited at start ({st}); log:\n{}",
                    self.line.version,
                    self.log_tail()
                );
            }
            if self.p.sock.exists() {
                if let Ok(c) = CriClient::connect(&self.endpoint()) {
                    if let Ok(v) = c.version() {
                        self.notes.push(format!(
                            "start: {} {} (CRI {}) answered after {:.2}s",
                            v.runtime_name,
                            v.runtime_version,
                            v.runtime_api_version,
                            started.elapsed().as_secs_f64()
                        ));
                        return c;
                    }
                }
            }
            assert!(
                Instant::now() < deadline,
                "containerd {} did not answer the CRI within 60 s; log:\n{}",
                self.line.version,
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// SIGTERM to containerd's pid, and wait for it to exit (SIGKILL after 30 s).
    pub fn stop(&mut self) {
        let Some(child) = self.daemon.take() else {
            return;
        };
        let took = crate::sigterm_and_wait(child, "containerd");
        self.notes.push(format!(
            "stop: containerd exited {:.2}s after SIGTERM",
            took.as_secs_f64()
        ));
    }

    /// `ctr images import` of the OCI tar `tar` as `name` into the `k8s.io` namespace.
    pub fn ctr_import(&self, tar: &Path, name: &str) {
        let base = name.rsplit_once(':').unwrap().0;
        run_ok(
            Command::new(self.bin.join("ctr"))
                .env("PATH", self.path_env())
                .arg("-a")
                .arg(&self.p.sock)
                .args(["-n", "k8s.io", "images", "import", "--base-name", base])
                .arg(tar),
            &format!("ctr images import {name}"),
        );
    }

    /// containerd's bolt metadata file.
    pub fn meta_db(&self) -> PathBuf {
        self.p.root.join("io.containerd.metadata.v1.bolt/meta.db")
    }

    /// The shims serving our socket: `containerd-shim-runc-v2 … -address <sock> …`.
    pub fn shim_pids(&self) -> Vec<u32> {
        let sock = self.p.sock.to_string_lossy().into_owned();
        let mut out = Vec::new();
        for (pid, args) in processes() {
            if args.first().is_some_and(|a| a.contains("containerd-shim"))
                && args.windows(2).any(|w| w[0] == "-address" && w[1] == sock)
            {
                out.push(pid);
            }
        }
        out.sort();
        out
    }
}

/// (pid, argv) of every process.
pub fn processes() -> Vec<(u32, Vec<String>)> {
    let mut out = Vec::new();
    if let Ok(rd) = fs::read_dir("/proc") {
        for e in rd.flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Ok(raw) = fs::read(e.path().join("cmdline")) else {
                continue;
            };
            let args = raw
                .split(|b| *b == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect();
            out.push((pid, args));
        }
    }
    out
}

/// (ppid, start time in clock ticks since boot) of a live process.
pub fn proc_stat(pid: u32) -> Option<(u32, u64)> {
    let s = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // after "pid (comm) ": state=0, ppid=1, ..., starttime=19
    Some((f.get(1)?.parse().ok()?, f.get(19)?.parse().ok()?))
}

/// Every descendant of `roots` (children first-found, grandchildren after).
pub fn descendants(roots: &[u32]) -> Vec<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for (pid, _) in processes() {
        if let Some((ppid, _)) = proc_stat(pid) {
            children.entry(ppid).or_default().push(pid);
        }
    }
    let mut out = Vec::new();
    let mut stack: Vec<u32> = roots.to_vec();
    while let Some(p) = stack.pop() {
        for c in children.get(&p).cloned().unwrap_or_default() {
            out.push(c);
            stack.push(c);
        }
    }
    out
}

impl Drop for Harness {
    fn drop(&mut self) {
        // 1. gracefully through the CRI when containerd runs
        if self.daemon.is_some() {
            if let Ok(c) =
                CriClient::connect_with_timeout(&self.endpoint(), Duration::from_secs(30))
            {
                let ids: Vec<String> = c
                    .list_pod_sandbox()
                    .map(|v| v.into_iter().map(|s| s.id).collect())
                    .unwrap_or_else(|_| self.sandboxes.clone());
                for id in ids {
                    let _ = c.stop_pod_sandbox(&id);
                    let _ = c.remove_pod_sandbox(&id);
                }
            }
            if let Some(mut child) = self.daemon.take() {
                unsafe {
                    libc::kill(child.id() as i32, libc::SIGTERM);
                }
                let deadline = Instant::now() + Duration::from_secs(20);
                while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(50));
                }
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        // 2. whatever is left: container processes under our shims, then the shims (by pid)
        let shims = self.shim_pids();
        let mut victims = descendants(&shims);
        victims.reverse();
        for pid in victims.iter().chain(shims.iter()) {
            unsafe {
                libc::kill(*pid as i32, libc::SIGKILL);
            }
        }
        if !shims.is_empty() {
            std::thread::sleep(Duration::from_millis(300));
        }
        // shims killed that way leave their sockets behind: containerd names them
        // /run/containerd/s/<sha256(<grpc address>/<namespace>/<sandbox id>)>
        if !shims.is_empty() {
            for sb in &self.sandboxes {
                let key = format!("{}/k8s.io/{sb}", self.p.sock.display());
                let _ = fs::remove_file(
                    Path::new("/run/containerd/s").join(sha256_hex(key.as_bytes())),
                );
            }
        }
        // 3. every mount under our directory, deepest first
        let t = self.p.t.to_string_lossy().into_owned();
        let mounts = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let mut points: Vec<String> = mounts
            .lines()
            .filter_map(|l| l.split(' ').nth(4).map(unescape_mount))
            .filter(|m| m.starts_with(&t))
            .collect();
        points.sort_by_key(|m| std::cmp::Reverse(m.len()));
        for m in points {
            let c = std::ffi::CString::new(m).unwrap();
            unsafe {
                libc::umount2(c.as_ptr(), libc::MNT_DETACH);
            }
        }
        // 4. the pods' cgroups, depth first, in every v1 controller
        if let Ok(rd) = fs::read_dir("/sys/fs/cgroup") {
            for ctl in rd.flatten() {
                rmdir_tree(&ctl.path().join(&self.p.cgroup_top));
            }
        }
        let _ = fs::remove_dir_all(self.p.t.join("root"));
        if std::thread::panicking() {
            eprintln!(
                "containerd {} log tail ({}):\n{}",
                self.line.version,
                self.p.log.display(),
                self.log_tail()
            );
        }
    }
}

/// A mount point as /proc/self/mountinfo escapes it, unescaped.
pub fn unescape_mount(s: &str) -> String {
    s.replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}

/// Removes the cgroup directory tree at `p`: kills every process still in it
/// ([`reap_cgroup_tree`]), then removes the directories deepest first (files are not touched).
pub fn rmdir_tree(p: &Path) {
    if !p.is_dir() {
        return;
    }
    reap_cgroup_tree(p);
    remove_cgroup_dirs(p);
}

fn remove_cgroup_dirs(p: &Path) {
    if let Ok(rd) = fs::read_dir(p) {
        for e in rd.flatten() {
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                remove_cgroup_dirs(&e.path());
            }
        }
        let _ = fs::remove_dir(p);
    }
}

/// Every pid in the cgroup tree at `p` (its `cgroup.procs` and those of every cgroup below).
pub fn cgroup_tree_pids(p: &Path) -> Vec<u32> {
    let mut out: Vec<u32> = fs::read_to_string(p.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect();
    if let Ok(rd) = fs::read_dir(p) {
        for e in rd.flatten() {
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                out.extend(cgroup_tree_pids(&e.path()));
            }
        }
    }
    out
}

/// SIGKILLs every process left in the cgroup tree at `p` until none is (10 s at most). A
/// container whose shim died (killed by a test, or by a failed one's cleanup) is handed to
/// init, where no process tree says it is ours any more: its cgroup still does, and a test
/// harness's cgroups are its own, so everything in them is its to kill, also when a test
/// failed half-way.
pub fn reap_cgroup_tree(p: &Path) {
    let me = std::process::id();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let pids: Vec<u32> = cgroup_tree_pids(p)
            .into_iter()
            .filter(|pid| *pid != me)
            .collect();
        if pids.is_empty() || Instant::now() > deadline {
            return;
        }
        for pid in pids {
            unsafe {
                libc::kill(pid as i32, libc::SIGKILL);
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

// ---------------------------------------------------------------------------------------------
// kubelet-shaped CRI configs (kuberuntime generatePodSandboxConfig / generateContainerConfig)
// ---------------------------------------------------------------------------------------------

/// A host-network pod sandbox config as the kubelet makes it, its log directory created.
pub fn pod_config(h: &Harness, ns: &str, name: &str, uid: &str) -> v1::PodSandboxConfig {
    pod_config_in(&h.p.t, &h.p.cgroup_top, ns, name, uid, true)
}

/// [`pod_config`] for any runtime: kubelet files under `t`, the pod cgroup under
/// `/<cgroup_top>/besteffort/`; `host_network` false puts the pod in a network namespace of its
/// own (the CNI network), with its name as hostname, as the kubelet does.
pub fn pod_config_in(
    t: &Path,
    cgroup_top: &str,
    ns: &str,
    name: &str,
    uid: &str,
    host_network: bool,
) -> v1::PodSandboxConfig {
    let log_dir = t.join(format!("log/pods/{ns}_{name}_{uid}"));
    fs::create_dir_all(&log_dir).unwrap();
    let mut labels = HashMap::new();
    labels.insert("app".to_string(), name.to_string());
    labels.insert("io.kubernetes.pod.name".into(), name.into());
    labels.insert("io.kubernetes.pod.namespace".into(), ns.into());
    labels.insert("io.kubernetes.pod.uid".into(), uid.into());
    let mut annotations = HashMap::new();
    annotations.insert(
        "kubernetes.io/config.seen".to_string(),
        "2026-11-30T10:00:00.000000000Z".to_string(),
    );
    annotations.insert("kubernetes.io/config.source".into(), "api".into());
    v1::PodSandboxConfig {
        metadata: Some(v1::PodSandboxMetadata {
            name: name.into(),
            uid: uid.into(),
            namespace: ns.into(),
            attempt: 0,
        }),
        // the kubelet sends no hostname for host-network pods (runc refuses one without a UTS ns)
        hostname: if host_network {
            String::new()
        } else {
            name.to_string()
        },
        log_directory: log_dir.display().to_string(),
        labels,
        annotations,
        linux: Some(v1::LinuxPodSandboxConfig {
            cgroup_parent: format!("/{cgroup_top}/besteffort/pod{uid}"),
            security_context: Some(v1::LinuxSandboxSecurityContext {
                namespace_options: Some(namespaces(host_network)),
                ..Default::default()
            }),
            sysctls: HashMap::new(),
        }),
    }
}

fn namespaces(host_network: bool) -> v1::NamespaceOption {
    v1::NamespaceOption {
        network: if host_network {
            v1::NamespaceMode::Node as i32
        } else {
            v1::NamespaceMode::Pod as i32
        },
        pid: v1::NamespaceMode::Container as i32,
        ipc: v1::NamespaceMode::Pod as i32,
        target_id: String::new(),
    }
}

/// One container to create.
pub struct Spec {
    /// Its name in the pod.
    pub name: String,
    /// The stored `io.kubernetes.container.hash`.
    pub hash: String,
    /// The stored `io.kubernetes.container.hashWithoutResources`, if any.
    pub hash_wr: Option<String>,
    /// The `io.kubernetes.container.ports` annotation, if any.
    pub ports: Option<&'static str>,
    /// `StartContainer` too (else it stays CONTAINER_CREATED, as kubelet's 2nd step pending).
    pub start: bool,
}

/// A [`Spec`] without ports.
pub fn spec(name: &str, hash: &str, hash_wr: Option<&str>, start: bool) -> Spec {
    Spec {
        name: name.into(),
        hash: hash.into(),
        hash_wr: hash_wr.map(String::from),
        ports: None,
        start,
    }
}

/// A container config as the kubelet makes it for `spec` in `pod` (image `image_id`), with
/// its termination-log and hosts files created.
pub fn container_config(
    h: &Harness,
    pod: &v1::PodSandboxConfig,
    image_id: &str,
    spec: &Spec,
) -> v1::ContainerConfig {
    container_config_in(&h.p.t, pod, image_id, spec)
}

/// [`container_config`] for any runtime, kubelet files under `t`; the container joins the
/// pod's network namespace (the node's for a host-network pod).
pub fn container_config_in(
    t: &Path,
    pod: &v1::PodSandboxConfig,
    image_id: &str,
    spec: &Spec,
) -> v1::ContainerConfig {
    let meta = pod.metadata.as_ref().unwrap();
    let host_network = pod
        .linux
        .as_ref()
        .and_then(|l| l.security_context.as_ref())
        .and_then(|s| s.namespace_options.as_ref())
        .is_none_or(|n| n.network == v1::NamespaceMode::Node as i32);
    let kubelet_pod = t.join(format!("kubelet/pods/{}", meta.uid));
    let term = kubelet_pod.join(format!("containers/{}/4f3c2a1b", spec.name));
    let name: &str = &spec.name;
    fs::create_dir_all(term.parent().unwrap()).unwrap();
    fs::write(&term, b"").unwrap();
    // the kubelet makes the container's log directory (conmon does not; containerd would)
    fs::create_dir_all(Path::new(&pod.log_directory).join(&spec.name)).unwrap();
    let hosts = kubelet_pod.join("etc-hosts");
    fs::write(&hosts, "127.0.0.1\tlocalhost\n").unwrap();
    let mut labels = HashMap::new();
    labels.insert("io.kubernetes.pod.name".to_string(), meta.name.clone());
    labels.insert("io.kubernetes.pod.namespace".into(), meta.namespace.clone());
    labels.insert("io.kubernetes.pod.uid".into(), meta.uid.clone());
    labels.insert("io.kubernetes.container.name".into(), name.into());
    let mut a = HashMap::new();
    a.insert(HASH.to_string(), spec.hash.clone());
    if let Some(w) = &spec.hash_wr {
        a.insert(HASH_WR.to_string(), w.clone());
    }
    a.insert("io.kubernetes.container.restartCount".into(), "0".into());
    a.insert(
        "io.kubernetes.container.terminationMessagePath".into(),
        "/dev/termination-log".into(),
    );
    a.insert(
        "io.kubernetes.container.terminationMessagePolicy".into(),
        "File".into(),
    );
    a.insert(
        "io.kubernetes.pod.terminationGracePeriod".into(),
        "30".into(),
    );
    if let Some(p) = spec.ports {
        a.insert("io.kubernetes.container.ports".into(), p.into());
    }
    let env = |k: &str, v: &str| v1::KeyValue {
        key: k.into(),
        value: v.into(),
    };
    let mount = |ctr: &str, host: &Path| v1::Mount {
        container_path: ctr.into(),
        host_path: host.display().to_string(),
        readonly: false,
        selinux_relabel: false,
    };
    v1::ContainerConfig {
        metadata: Some(v1::ContainerMetadata {
            name: name.into(),
            attempt: 0,
        }),
        image: Some(v1::ImageSpec {
            image: image_id.into(),
            annotations: HashMap::new(),
            // every caller creates APP_IMAGE's containers; the kubelet (1.28+) names the
            // image as the pod spec does here
            user_specified_image: APP_IMAGE.into(),
        }),
        envs: vec![
            env("KUBERNETES_SERVICE_HOST", "10.96.0.1"),
            env("KUBERNETES_SERVICE_PORT", "443"),
            env("KUBERNETES_PORT", "tcp://10.96.0.1:443"),
        ],
        mounts: vec![
            mount("/etc/hosts", &hosts),
            mount("/dev/termination-log", &term),
        ],
        labels,
        annotations: a,
        log_path: format!("{}/0.log", spec.name),
        linux: Some(v1::LinuxContainerConfig {
            resources: Some(v1::LinuxContainerResources {
                cpu_period: 100_000,
                cpu_shares: 2,
                oom_score_adj: 1000,
                ..Default::default()
            }),
            security_context: Some(v1::LinuxContainerSecurityContext {
                namespace_options: Some(namespaces(host_network)),
                masked_paths: [
                    "/proc/acpi",
                    "/proc/kcore",
                    "/proc/keys",
                    "/proc/latency_stats",
                    "/proc/timer_list",
                    "/proc/timer_stats",
                    "/proc/sched_debug",
                    "/proc/scsi",
                    "/sys/firmware",
                ]
                .map(String::from)
                .to_vec(),
                readonly_paths: [
                    "/proc/asound",
                    "/proc/bus",
                    "/proc/fs",
                    "/proc/irq",
                    "/proc/sys",
                    "/proc/sysrq-trigger",
                ]
                .map(String::from)
                .to_vec(),
                ..Default::default()
            }),
        }),
        ..Default::default()
    }
}

/// meta.db's active meta page: (txid, freelist pgid).
pub fn meta_page(db: &Path) -> (u64, u64) {
    let b = fs::read(db).unwrap();
    let page = |n: usize| {
        let ps = u32::from_le_bytes(b[16 + 8..16 + 12].try_into().unwrap()) as usize;
        // page header (16 bytes), then magic, version, pageSize, flags (4 bytes each),
        // root bucket (16), freelist pgid, high-water pgid, txid, checksum (8 each)
        let m = &b[n * ps + 16..];
        let freelist = u64::from_le_bytes(m[32..40].try_into().unwrap());
        let txid = u64::from_le_bytes(m[48..56].try_into().unwrap());
        (txid, freelist)
    };
    let (a, b2) = (page(0), page(1));
    if a.0 >= b2.0 {
        a
    } else {
        b2
    }
}

/// How a meta page's freelist pgid reads in a report.
pub fn freelist_name(pgid: u64) -> String {
    if pgid == u64::MAX {
        "not synced (0xFFFF…, NoFreelistSync)".to_string()
    } else {
        format!("synced (pgid {pgid})")
    }
}

/// The CRI's image id of `name`, waiting up to 20 s for the CRI to see an import.
pub fn wait_image(cri: &CriClient, name: &str, v: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(img) = cri.image_status(name).expect("ImageStatus") {
            return img.id;
        }
        assert!(
            Instant::now() < deadline,
            "containerd {v}: imported {name} is not known to the CRI after 20 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
