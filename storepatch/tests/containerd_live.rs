//! The containerd back-end against REAL containerd, driven through the CRI like the kubelet:
//! 1.6.20 (Debian 12, synced freelist), 1.7.24 (Debian trixie) and 2.1.9 (Debian sid), the last
//! two opening meta.db with `NoFreelistSync`.
//!
//! Flow per line: run host-network pods with kubelet-shaped configs, stop containerd (SIGTERM;
//! shims and containers keep running), rewrite every container's hash through
//! `ContainerdStore`, start containerd, and check through the CRI that every rewritten
//! annotation is reported, every container is RUNNING with the same pid and none is missing;
//! then roll back and check the old values come back with the same pids.
//!
//! Needs root and the runtimes that `scripts/setup-containerd.sh` puts under
//! `.cache/runtimes/`. The three lines run one after another (a process-wide lock), each with
//! its own root, state, socket and cgroup parent under a fresh temporary directory. A Drop
//! guard stops pods, containerd and shims and unmounts everything even when a check fails.

use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use storepatch::backup::{self, Backup};
use storepatch::containerd::{ContainerdOptions, ContainerdStore};
use storepatch::live::cri::{v1, CriClient, CriContainer};
use storepatch::{RecordKind, Rewrite, RuntimeStore, StoreError};

const HASH: &str = "io.kubernetes.container.hash";
const HASH_WR: &str = "io.kubernetes.container.hashWithoutResources";
const PAUSE_IMAGE: &str = "docker.io/library/storetest-pause:1.0";
const APP_IMAGE: &str = "docker.io/library/storetest-app:1.0";
/// Extra pods whose containers are created but not started.
const BULK_PODS: usize = 4;
const BULK_CONTAINERS: usize = 6;
const SETUP: &str = "run scripts/setup-containerd.sh (as root) first";

/// One line at a time: the lines share the host's cgroup tree and /run/containerd/s.
static SERIAL: Mutex<()> = Mutex::new(());

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

#[derive(Clone, Copy)]
struct Line {
    version: &'static str,
    /// containerd 2.x reads config version 3 (the CRI plugin split in three).
    config_v3: bool,
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

fn sha256_hex(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

fn put_blob(layout: &Path, bytes: &[u8]) -> (String, usize) {
    let hex = sha256_hex(bytes);
    fs::write(layout.join("blobs/sha256").join(&hex), bytes).unwrap();
    (format!("sha256:{hex}"), bytes.len())
}

fn run_ok(cmd: &mut Command, what: &str) -> String {
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
fn build_image(dir: &Path, name: &str, role: &str) -> PathBuf {
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

struct Paths {
    t: PathBuf,
    root: PathBuf,
    state: PathBuf,
    sock: PathBuf,
    log: PathBuf,
    config: PathBuf,
    /// Top cgroup (under every controller) the pods' cgroup parents live in.
    cgroup_top: String,
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

/// A pod container as the test created it.
#[derive(Debug, Clone)]
struct Created {
    id: String,
    sandbox: String,
    name: String,
    hash: String,
    hash_wr: Option<String>,
    running: bool,
}

struct Harness {
    line: Line,
    bin: PathBuf,
    p: Paths,
    daemon: Option<Child>,
    /// Keeps the temporary directory until the guard is done with it.
    _tmp: tempfile::TempDir,
    sandboxes: Vec<String>,
    /// Timings and facts for the report, printed at the end.
    notes: Vec<String>,
}

impl Harness {
    fn new(line: Line) -> Harness {
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

    fn endpoint(&self) -> String {
        format!("unix://{}", self.p.sock.display())
    }

    fn path_env(&self) -> String {
        // the line's own shim first: containerd looks shims up in PATH
        format!("{}:/usr/sbin:/usr/bin:/sbin:/bin", self.bin.display())
    }

    /// containerd's error lines so far (CNI's "no network config" excluded: host network).
    fn log_errors(&self) -> Vec<String> {
        fs::read_to_string(&self.p.log)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.contains("level=error") || l.contains("level=fatal"))
            .filter(|l| !l.to_lowercase().contains("cni"))
            .map(String::from)
            .collect()
    }

    fn log_tail(&self) -> String {
        let s = fs::read_to_string(&self.p.log).unwrap_or_default();
        let lines: Vec<&str> = s.lines().collect();
        let from = lines.len().saturating_sub(40);
        lines[from..].join("\n")
    }

    /// Starts containerd and waits until the CRI answers `Version`.
    fn start(&mut self) -> CriClient {
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
        // its own session, so signals to the test's process group never reach it
        unsafe {
            cmd.pre_exec(|| {
                libc::setsid();
                Ok(())
            });
        }
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
    fn stop(&mut self) {
        let Some(mut child) = self.daemon.take() else {
            return;
        };
        let t0 = Instant::now();
        unsafe {
            libc::kill(child.id() as i32, libc::SIGTERM);
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if child.try_wait().unwrap().is_some() {
                break;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("containerd did not exit within 30 s of SIGTERM; killed it");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        self.notes.push(format!(
            "stop: containerd exited {:.2}s after SIGTERM",
            t0.elapsed().as_secs_f64()
        ));
    }

    fn ctr_import(&self, tar: &Path, name: &str) {
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

    fn meta_db(&self) -> PathBuf {
        self.p.root.join("io.containerd.metadata.v1.bolt/meta.db")
    }

    /// The shims serving our socket: `containerd-shim-runc-v2 … -address <sock> …`.
    fn shim_pids(&self) -> Vec<u32> {
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
fn processes() -> Vec<(u32, Vec<String>)> {
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
fn proc_stat(pid: u32) -> Option<(u32, u64)> {
    let s = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // after "pid (comm) ": state=0, ppid=1, ..., starttime=19
    Some((f.get(1)?.parse().ok()?, f.get(19)?.parse().ok()?))
}

fn descendants(roots: &[u32]) -> Vec<u32> {
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

fn unescape_mount(s: &str) -> String {
    s.replace("\\040", " ")
        .replace("\\011", "\t")
        .replace("\\012", "\n")
        .replace("\\134", "\\")
}

fn rmdir_tree(p: &Path) {
    if let Ok(rd) = fs::read_dir(p) {
        for e in rd.flatten() {
            if e.file_type().map(|t| t.is_dir()).unwrap_or(false) {
                rmdir_tree(&e.path());
            }
        }
        let _ = fs::remove_dir(p);
    }
}

// ---------------------------------------------------------------------------------------------
// kubelet-shaped CRI configs (kuberuntime generatePodSandboxConfig / generateContainerConfig)
// ---------------------------------------------------------------------------------------------

fn pod_config(h: &Harness, ns: &str, name: &str, uid: &str) -> v1::PodSandboxConfig {
    let log_dir = h.p.t.join(format!("log/pods/{ns}_{name}_{uid}"));
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
        hostname: String::new(),
        log_directory: log_dir.display().to_string(),
        labels,
        annotations,
        linux: Some(v1::LinuxPodSandboxConfig {
            cgroup_parent: format!("/{}/besteffort/pod{uid}", h.p.cgroup_top),
            security_context: Some(v1::LinuxSandboxSecurityContext {
                namespace_options: Some(host_network_ns()),
                ..Default::default()
            }),
            sysctls: HashMap::new(),
        }),
    }
}

fn host_network_ns() -> v1::NamespaceOption {
    v1::NamespaceOption {
        network: v1::NamespaceMode::Node as i32,
        pid: v1::NamespaceMode::Container as i32,
        ipc: v1::NamespaceMode::Pod as i32,
        target_id: String::new(),
    }
}

struct Spec {
    name: String,
    hash: String,
    hash_wr: Option<String>,
    ports: Option<&'static str>,
    /// `StartContainer` too (else it stays CONTAINER_CREATED, as kubelet's 2nd step pending).
    start: bool,
}

fn spec(name: &str, hash: &str, hash_wr: Option<&str>, start: bool) -> Spec {
    Spec {
        name: name.into(),
        hash: hash.into(),
        hash_wr: hash_wr.map(String::from),
        ports: None,
        start,
    }
}

fn container_config(
    h: &Harness,
    pod: &v1::PodSandboxConfig,
    image_id: &str,
    spec: &Spec,
) -> v1::ContainerConfig {
    let meta = pod.metadata.as_ref().unwrap();
    let kubelet_pod = h.p.t.join(format!("kubelet/pods/{}", meta.uid));
    let term = kubelet_pod.join(format!("containers/{}/4f3c2a1b", spec.name));
    let name: &str = &spec.name;
    fs::create_dir_all(term.parent().unwrap()).unwrap();
    fs::write(&term, b"").unwrap();
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
                namespace_options: Some(host_network_ns()),
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

// ---------------------------------------------------------------------------------------------
// checks
// ---------------------------------------------------------------------------------------------

/// What the CRI reports for each of `created`, keyed by id; fails on anything missing, not
/// RUNNING, with another pid than `pids`, or with other hash annotations than `want`.
fn check_cri(
    h: &Harness,
    cri: &CriClient,
    created: &[Created],
    pids: &BTreeMap<String, (u32, u64)>,
    want: &HashMap<String, (String, Option<String>)>,
    phase: &str,
) {
    let v = h.line.version;
    let listed = cri.list_containers().expect("ListContainers");
    let by_id: HashMap<&str, &CriContainer> = listed.iter().map(|c| (c.id.as_str(), c)).collect();
    assert_eq!(
        listed.len(),
        created.len(),
        "containerd {v} {phase}: CRI lists {} containers, the test created {}: {:?}",
        listed.len(),
        created.len(),
        listed.iter().map(|c| &c.id).collect::<Vec<_>>()
    );
    for c in created {
        let got = by_id.get(c.id.as_str()).unwrap_or_else(|| {
            panic!(
                "containerd {v} {phase}: container {} ({}) is missing from ListContainers",
                c.id, c.name
            )
        });
        assert_eq!(
            got.pod_sandbox_id, c.sandbox,
            "containerd {v} {phase}: sandbox of {}",
            c.name
        );
        let (want_hash, want_wr) = &want[&c.id];
        assert_eq!(
            got.annotations.get(HASH),
            Some(want_hash),
            "containerd {v} {phase}: ListContainers hash of {}",
            c.name
        );
        assert_eq!(
            got.annotations.get(HASH_WR),
            want_wr.as_ref(),
            "containerd {v} {phase}: ListContainers hashWithoutResources of {}",
            c.name
        );
        if !c.running {
            assert_eq!(
                (got.state.as_str(), got.pid),
                ("CONTAINER_CREATED", None),
                "containerd {v} {phase}: {} was only created",
                c.name
            );
        } else {
            assert_eq!(
                got.state, "CONTAINER_RUNNING",
                "containerd {v} {phase}: {} is not running",
                c.name
            );
            let (pid, start) = pids[&c.id];
            assert_eq!(
                got.pid,
                Some(pid),
                "containerd {v} {phase}: pid of {} changed",
                c.name
            );
            assert_eq!(
                proc_stat(pid).map(|s| s.1),
                Some(start),
                "containerd {v} {phase}: process {pid} of {} is not the same process",
                c.name
            );
        }
        // ContainerStatus reads the same metadata: it must agree
        let st = cri
            .container_status(&c.id, false)
            .expect("ContainerStatus")
            .status
            .expect("ContainerStatus.status");
        assert_eq!(
            st.annotations.get(HASH),
            Some(want_hash),
            "containerd {v} {phase}: ContainerStatus hash of {}",
            c.name
        );
        assert_eq!(
            st.annotations.get(HASH_WR),
            want_wr.as_ref(),
            "containerd {v} {phase}: ContainerStatus hashWithoutResources of {}",
            c.name
        );
    }
    let sandboxes = cri.list_pod_sandbox().expect("ListPodSandbox");
    let ready = sandboxes.iter().filter(|s| s.state == 0).count();
    assert_eq!(
        ready,
        h.sandboxes.len(),
        "containerd {v} {phase}: {ready} sandboxes READY, expected {}",
        h.sandboxes.len()
    );
}

/// meta.db's active meta page: (txid, freelist pgid).
fn meta_page(db: &Path) -> (u64, u64) {
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

fn freelist_name(pgid: u64) -> String {
    if pgid == u64::MAX {
        "not synced (0xFFFF…, NoFreelistSync)".to_string()
    } else {
        format!("synced (pgid {pgid})")
    }
}

fn rewrites_to(
    created: &[Created],
    values: &HashMap<String, (String, Option<String>)>,
) -> Vec<Rewrite> {
    created
        .iter()
        .map(|c| Rewrite {
            id: c.id.clone(),
            hash: values[&c.id].0.clone(),
            hash_without_resources: values[&c.id].1.clone(),
        })
        .collect()
}

fn sorted(v: &[String]) -> Vec<String> {
    let mut v = v.to_vec();
    v.sort();
    v
}

fn sorted_ids(created: &[Created]) -> Vec<String> {
    sorted(&created.iter().map(|c| c.id.clone()).collect::<Vec<_>>())
}

/// Every container process alive as the same process, and the same shims.
fn check_processes(h: &Harness, pids: &BTreeMap<String, (u32, u64)>, shims: &[u32], phase: &str) {
    let v = h.line.version;
    for (id, (pid, start)) in pids {
        assert_eq!(
            proc_stat(*pid).map(|s| s.1),
            Some(*start),
            "containerd {v} {phase}: container {id} (pid {pid}) is gone"
        );
    }
    assert_eq!(
        h.shim_pids(),
        shims,
        "containerd {v} {phase}: shims changed"
    );
}

/// bbolt's consistency rules on the current meta.db.
fn assert_check_ok(h: &Harness, store: &ContainerdStore, phase: &str) {
    let r = store.check_file().expect("check_file");
    assert!(
        r.is_ok(),
        "containerd {} {phase}: meta.db fails the bolt check: {}",
        h.line.version,
        r.summary()
    );
}

/// The CRI's image id of `name`, waiting up to 20 s for the CRI to see an import.
fn wait_image(cri: &CriClient, name: &str, v: &str) -> String {
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

fn run_line(line: Line) {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let v = line.version;
    let total = Instant::now();
    let mut h = Harness::new(line);

    // images
    let t0 = Instant::now();
    let pause_tar = build_image(&h.p.t, PAUSE_IMAGE, "pause");
    let app_tar = build_image(&h.p.t, APP_IMAGE, "app");
    let cri = h.start();
    h.ctr_import(&pause_tar, PAUSE_IMAGE);
    h.ctr_import(&app_tar, APP_IMAGE);
    // the CRI learns about imported images from containerd's events (2.x: asynchronously)
    let app_id = wait_image(&cri, APP_IMAGE, v);
    wait_image(&cri, PAUSE_IMAGE, v);
    h.notes.push(format!(
        "images built + imported in {:.2}s",
        t0.elapsed().as_secs_f64()
    ));

    // pods, as the kubelet creates them
    let t0 = Instant::now();
    let mut app = spec("app", "3a1f6c2e", Some("9b2d4e61"), true);
    app.ports = Some(r#"[{"name":"http","containerPort":8080,"protocol":"TCP"}]"#);
    let mut pods: Vec<(String, String, String, Vec<Spec>)> = vec![
        (
            "shop".into(),
            "web-5d8f7c9b6-x2k4p".into(),
            "7d0e8c1a-3b2f-4c6d-9e8f-000000000001".into(),
            vec![app, spec("istio-proxy", "c0ffee01", None, true)],
        ),
        (
            "kube-system".into(),
            "kube-proxy-8xk2q".into(),
            "7d0e8c1a-3b2f-4c6d-9e8f-000000000002".into(),
            // hash and hashWithoutResources may be equal: both must be found and rewritten
            vec![spec("kube-proxy", "5e7a9c13", Some("5e7a9c13"), true)],
        ),
    ];
    // more pods whose containers are only created: more extension buckets (about 2 KB each,
    // their own leaf pages) so the rewrite spans many pages of a bigger file
    for p in 0..BULK_PODS {
        let specs = (0..BULK_CONTAINERS)
            .map(|c| {
                let hash = format!("{:08x}", 0x6000_0000u32 + (p * 16 + c) as u32);
                let wr =
                    (c % 2 == 0).then(|| format!("{:08x}", 0x7000_0000u32 + (p * 16 + c) as u32));
                spec(&format!("worker-{c}"), &hash, wr.as_deref(), false)
            })
            .collect();
        pods.push((
            "jobs".into(),
            format!("batch-{p}-7c9d"),
            format!("7d0e8c1a-3b2f-4c6d-9e8f-1000000000{p:02}"),
            specs,
        ));
    }
    let mut created = Vec::new();
    for (ns, name, uid, specs) in &pods {
        let (ns, name, uid) = (ns.as_str(), name.as_str(), uid.as_str());
        let pc = pod_config(&h, ns, name, uid);
        let sb = cri
            .run_pod_sandbox(&pc)
            .unwrap_or_else(|e| panic!("containerd {v}: RunPodSandbox {ns}/{name}: {e}"));
        h.sandboxes.push(sb.clone());
        for s in specs {
            let cc = container_config(&h, &pc, &app_id, s);
            let id = cri
                .create_container(&sb, &cc, &pc)
                .unwrap_or_else(|e| panic!("containerd {v}: CreateContainer {}: {e}", s.name));
            if s.start {
                cri.start_container(&id)
                    .unwrap_or_else(|e| panic!("containerd {v}: StartContainer {}: {e}", s.name));
            }
            created.push(Created {
                id,
                sandbox: sb.clone(),
                name: format!("{name}/{}", s.name),
                hash: s.hash.clone(),
                hash_wr: s.hash_wr.clone(),
                running: s.start,
            });
        }
    }
    h.notes.push(format!(
        "{} pods / {} containers ({} started) created in {:.2}s",
        h.sandboxes.len(),
        created.len(),
        created.iter().filter(|c| c.running).count(),
        t0.elapsed().as_secs_f64()
    ));
    let before = cri.list_containers().expect("ListContainers");
    let mut pids = BTreeMap::new();
    for c in before.iter().filter(|c| c.state == "CONTAINER_RUNNING") {
        let pid = c
            .pid
            .unwrap_or_else(|| panic!("containerd {v}: no pid for running {}", c.name));
        let (_, start) = proc_stat(pid).expect("container process");
        pids.insert(c.id.clone(), (pid, start));
    }
    let mut old: HashMap<String, (String, Option<String>)> = created
        .iter()
        .map(|c| (c.id.clone(), (c.hash.clone(), c.hash_wr.clone())))
        .collect();
    check_cri(&h, &cri, &created, &pids, &old, "after creation");
    let shims_before = h.shim_pids();

    // while containerd runs, the library refuses (containerd holds meta.db's flock)
    let store = ContainerdStore::with_options(
        &h.p.root,
        ContainerdOptions {
            socket: Some(h.p.sock.clone()),
        },
    )
    .expect("ContainerdStore::open");
    let db = h.meta_db();
    match store.ensure_stopped() {
        Err(StoreError::RuntimeRunning { evidence, .. }) => h.notes.push(format!(
            "running check while containerd runs: refused ({evidence})"
        )),
        other => panic!("containerd {v}: ensure_stopped while containerd runs gave {other:?}"),
    }
    let probe_rw: Vec<Rewrite> = created
        .iter()
        .map(|c| Rewrite {
            id: c.id.clone(),
            hash: "0badc0de".into(),
            hash_without_resources: None,
        })
        .collect();
    let before_refusal = fs::read(&db).unwrap();
    let e = store
        .apply(
            &probe_rw,
            &mut Backup::create(&h.p.t.join("backup-refused"), "containerd", &h.p.root).unwrap(),
        )
        .expect_err("apply while containerd runs must be refused");
    assert!(
        matches!(e, StoreError::RuntimeRunning { .. }),
        "containerd {v}: apply while running: {e}"
    );
    assert_eq!(
        fs::read(&db).unwrap(),
        before_refusal,
        "refused apply wrote meta.db"
    );
    drop(cri);

    // stop containerd: shims and containers keep running
    h.stop();
    check_processes(&h, &pids, &shims_before, "after SIGTERM to containerd");
    let (txid, freelist) = meta_page(&db);
    h.notes.push(format!(
        "meta.db written by containerd: {} bytes, txid {txid}, freelist {}",
        fs::metadata(&db).unwrap().len(),
        freelist_name(freelist)
    ));
    if v != "1.6.20" {
        assert_eq!(
            freelist,
            u64::MAX,
            "containerd {v} is expected to open meta.db with NoFreelistSync"
        );
    } else {
        assert_ne!(freelist, u64::MAX, "containerd 1.6 syncs its freelist");
    }
    let original_db = fs::read(&db).unwrap();

    // scan through the library
    store.ensure_stopped().expect("containerd is stopped");
    let report = store.scan().expect("scan");
    for c in &created {
        let r = report
            .records
            .iter()
            .find(|r| r.id == c.id)
            .unwrap_or_else(|| panic!("containerd {v}: scan misses container {}", c.name));
        assert_eq!(r.kind, RecordKind::Container, "{}", c.name);
        assert_eq!(
            r.hash.as_deref(),
            Some(c.hash.as_str()),
            "scan hash of {}",
            c.name
        );
        assert_eq!(
            r.hash_without_resources, c.hash_wr,
            "scan hashWithoutResources of {}",
            c.name
        );
        let (pod, ctr) = c.name.split_once('/').unwrap();
        assert_eq!(r.container.as_deref(), Some(ctr), "scan container name");
        assert_eq!(r.pod.as_deref(), Some(pod), "scan pod name of {}", c.name);
        if c.running {
            assert_eq!(
                r.pid,
                Some(pids[&c.id].0),
                "scan pid (CRI status file) of {}",
                c.name
            );
        }
    }
    for sb in &h.sandboxes {
        assert!(
            report
                .records
                .iter()
                .any(|r| &r.id == sb && r.kind == RecordKind::Sandbox),
            "containerd {v}: scan does not list sandbox {sb} as a sandbox"
        );
    }

    // 1. rewrite every container, new distinct values
    let mut new: HashMap<String, (String, Option<String>)> = created
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let hash = format!("{:08x}", 0xd1ce_0000u32 + i as u32);
            let wr = c
                .hash_wr
                .as_ref()
                .map(|_| format!("{:08x}", 0xfeed_0000u32 + i as u32));
            (c.id.clone(), (hash, wr))
        })
        .collect();
    let to_new = rewrites_to(&created, &new);
    let bdir = h.p.t.join("backup-1");
    let mut bk = Backup::create(&bdir, "containerd", &h.p.root).expect("backup");
    let t0 = Instant::now();
    let (outcome, stats) = store.apply_detailed(&to_new, &mut bk).expect("apply");
    let apply_s = t0.elapsed().as_secs_f64();
    assert_eq!(
        sorted(&outcome.changed),
        sorted_ids(&created),
        "containerd {v}: apply changed"
    );
    let (txid2, freelist2) = meta_page(&db);
    assert_eq!(
        freelist2 == u64::MAX,
        freelist == u64::MAX,
        "containerd {v}: apply changed the freelist layout"
    );
    h.notes.push(format!(
        "apply: {} containers in {apply_s:.3}s (commit {:.1} ms), {} pages / {} bytes written, \
         meta.db {} -> {} bytes, txid {txid} -> {txid2}, freelist {}",
        outcome.changed.len(),
        stats.t_commit.as_secs_f64() * 1e3,
        stats.pages_written,
        outcome.bytes_written,
        original_db.len(),
        fs::metadata(&db).unwrap().len(),
        freelist_name(freelist2)
    ));
    assert_check_ok(&h, &store, "after apply");
    // idempotent: a second run changes nothing and writes nothing
    let after_apply = fs::read(&db).unwrap();
    let again = store
        .apply(
            &to_new,
            &mut Backup::create(&h.p.t.join("backup-1b"), "containerd", &h.p.root).unwrap(),
        )
        .expect("second apply");
    assert!(
        again.changed.is_empty(),
        "containerd {v}: second apply changed {:?}",
        again.changed
    );
    assert_eq!(sorted(&again.already), sorted_ids(&created));
    assert_eq!(
        fs::read(&db).unwrap(),
        after_apply,
        "idempotent apply rewrote meta.db"
    );

    // start containerd on the rewritten file: new values, same processes
    let cri = h.start();
    let mut all = created.clone();
    check_cri(&h, &cri, &all, &pids, &new, "after rewrite + restart");
    assert_eq!(h.shim_pids(), shims_before, "containerd {v}: shims changed");
    // containerd writes on top of our transaction: the kubelet creates and starts one more
    // container in the first pod; it must survive every later step
    let (ns0, pod0, uid0) = (&pods[0].0, &pods[0].1, &pods[0].2);
    let pc0 = pod_config(&h, ns0, pod0, uid0);
    let late = spec("late", "1a7e0001", Some("1a7e0002"), true);
    let cc = container_config(&h, &pc0, &app_id, &late);
    let late_id = cri
        .create_container(&h.sandboxes[0], &cc, &pc0)
        .unwrap_or_else(|e| panic!("containerd {v}: CreateContainer late after the rewrite: {e}"));
    cri.start_container(&late_id)
        .unwrap_or_else(|e| panic!("containerd {v}: StartContainer late after the rewrite: {e}"));
    let late_pid = cri
        .container_status(&late_id, true)
        .ok()
        .and_then(|r| storepatch::live::cri::pid_from_info(&r.info))
        .unwrap_or_else(|| panic!("containerd {v}: no pid for the late container"));
    pids.insert(late_id.clone(), (late_pid, proc_stat(late_pid).unwrap().1));
    let late_values = (late.hash.clone(), late.hash_wr.clone());
    new.insert(late_id.clone(), late_values.clone());
    old.insert(late_id.clone(), late_values);
    all.push(Created {
        id: late_id,
        sandbox: h.sandboxes[0].clone(),
        name: format!("{pod0}/late"),
        hash: late.hash,
        hash_wr: late.hash_wr,
        running: true,
    });
    check_cri(
        &h,
        &cri,
        &all,
        &pids,
        &new,
        "after a container was added on the rewritten file",
    );
    drop(cri);
    h.stop();
    check_processes(&h, &pids, &shims_before, "after the second stop");
    let (txid3, freelist3) = meta_page(&db);
    assert_check_ok(&h, &store, "after containerd ran on the rewritten file");
    h.notes.push(format!(
        "containerd ran on the rewritten file and committed its own transaction(s): txid {txid2} -> {txid3}, freelist {}",
        freelist_name(freelist3)
    ));

    // 2. byte rollback once containerd has written the file: refused, nothing restored
    //    (restoring would silently drop whatever containerd wrote since the patch)
    let ran = fs::read(&db).unwrap();
    match backup::rollback(&bdir, false) {
        Err(StoreError::RollbackConflict { path, .. }) => {
            assert_eq!(path, db, "containerd {v}: the conflict names meta.db");
            h.notes.push(
                "rollback after containerd wrote meta.db: refused (RollbackConflict), nothing restored"
                    .into(),
            );
        }
        Ok(r) => {
            assert_eq!(fs::read(&db).unwrap(), original_db);
            h.notes.push(format!(
                "rollback after containerd ran: restored {:?}",
                r.files
            ));
        }
        Err(e) => panic!("containerd {v}: rollback after containerd ran: {e}"),
    }
    if fs::read(&db).unwrap() == ran {
        // the operator's way back then: rewrite the old values (with a new backup)
        let to_old = rewrites_to(&created, &old);
        let mut bk2 = Backup::create(&h.p.t.join("backup-2"), "containerd", &h.p.root).unwrap();
        let o = store
            .apply(&to_old, &mut bk2)
            .expect("rewrite back to the old values");
        assert_eq!(sorted(&o.changed), sorted_ids(&created));
        assert_check_ok(&h, &store, "after rewriting the old values back");
        let cri = h.start();
        check_cri(
            &h,
            &cri,
            &all,
            &pids,
            &old,
            "after rewriting back + restart",
        );
        drop(cri);
        h.stop();
        check_processes(&h, &pids, &shims_before, "after the third stop");

        // 3. rewrite again, then roll back from that backup before containerd runs
        let pre = fs::read(&db).unwrap();
        let bdir3 = h.p.t.join("backup-3");
        let mut bk3 = Backup::create(&bdir3, "containerd", &h.p.root).unwrap();
        let o = store
            .apply(&to_new, &mut bk3)
            .expect("apply before rollback");
        assert_eq!(sorted(&o.changed), sorted_ids(&created));
        let t0 = Instant::now();
        let r = backup::rollback(&bdir3, false).expect("rollback");
        h.notes.push(format!(
            "rollback of an unstarted patch: {:?} in {:.3}s",
            r.files,
            t0.elapsed().as_secs_f64()
        ));
        assert_eq!(
            fs::read(&db).unwrap(),
            pre,
            "containerd {v}: rollback did not restore meta.db byte for byte"
        );
    }
    drop(store);
    let cri = h.start();
    check_cri(&h, &cri, &all, &pids, &old, "after rollback + restart");
    assert_eq!(h.shim_pids(), shims_before, "containerd {v}: shims changed");
    drop(cri);

    for n in &h.notes {
        eprintln!("containerd {v}: {n}");
    }
    let errors = h.log_errors();
    for e in &errors {
        eprintln!("containerd {v}: log error: {e}");
    }
    // the CRI plugin logs and SKIPS a container whose extension it cannot load
    assert!(
        !errors.iter().any(|e| {
            let l = e.to_lowercase();
            l.contains("failed to load container")
                || l.contains("failed to load sandbox")
                || l.contains("failed to recover")
        }),
        "containerd {v}: the CRI plugin failed to load a container or sandbox"
    );
    eprintln!(
        "containerd {v}: whole flow {:.1}s",
        total.elapsed().as_secs_f64()
    );
    // the guard stops pods, containerd and shims
    drop(h);
    let _ = std::io::stderr().flush();
}

#[test]
fn containerd_1_6_20_live_rewrite_and_rollback() {
    run_line(Line {
        version: "1.6.20",
        config_v3: false,
    });
}

#[test]
fn containerd_1_7_24_live_rewrite_and_rollback() {
    run_line(Line {
        version: "1.7.24",
        config_v3: false,
    });
}

#[test]
fn containerd_2_1_9_live_rewrite_and_rollback() {
    run_line(Line {
        version: "2.1.9",
        config_v3: true,
    });
}
