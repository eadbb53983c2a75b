//! A private CRI-O 1.30.14 (built by `scripts/setup-crio.sh` into `.cache/crio/bin/`) on a
//! node laid out under a temporary directory `<t>` exactly as on a real node, so the tool finds
//! everything the way it does on `/`: graphroot `<t>/var/lib/containers/storage`, runroot
//! `<t>/run/containers/storage`, version file `<t>/var/run/crio/version`, clean-shutdown marker
//! `<t>/var/lib/crio/clean.shutdown`, socket `<t>/var/run/crio/crio.sock`, namespaces pinned
//! under `<t>/var/run/{netns,ipcns,utsns}`, runc root `<t>/run/runc`, a CNI conf dir with a
//! bridge of its own name and subnet, and a cgroup parent of its own. A Drop guard stops CRI-O
//! by pid, kills the conmons it left (and their containers), unmounts everything under `<t>`
//! and removes the bridge, even when a check fails.
//!
//! CRI-O runs as in the scenario of `fixtures/nodes/README.md` ("The CRI-O scenario"): cgroupfs,
//! `drop_infra_ctr` (no pause process; pinns holds the namespaces), conmon and runc from Debian,
//! images imported with CRI-O's own `copyimg` (no registry), a policy accepting them.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::containerd::{descendants, processes, rmdir_tree, run_ok, unescape_mount};
use crate::cri::CriTestCalls;
use storepatch::live::cri::CriClient;

/// What to do when CRI-O is missing, for panic messages.
pub const SETUP: &str = "run scripts/setup-crio.sh (as root) first";
/// The sandbox image CRI-O is configured with (imported, never pulled).
pub const PAUSE_IMAGE: &str = crate::containerd::PAUSE_IMAGE;
/// The container image.
pub const APP_IMAGE: &str = crate::containerd::APP_IMAGE;
/// The CRI-O version the setup builds.
pub const VERSION: &str = "1.30.14";

static INSTANCE: AtomicU32 = AtomicU32::new(0);

fn bin_dir() -> PathBuf {
    crate::containerd::workspace().join(".cache/crio/bin")
}

/// A CRI-O built from the Go module proxy by scripts/setup-crio-module.sh:
/// `.cache/runtimes/crio-<version>/usr/bin`.
pub fn module_build(version: &str) -> PathBuf {
    crate::containerd::workspace().join(format!(".cache/runtimes/crio-{version}/usr/bin"))
}

/// Where one CRI-O node keeps its files (every path under `t`).
pub struct Paths {
    /// The node's temporary directory, standing in for `/`.
    pub t: PathBuf,
    /// containers/storage graphroot.
    pub graphroot: PathBuf,
    /// containers/storage runroot.
    pub runroot: PathBuf,
    /// The CRI socket.
    pub sock: PathBuf,
    /// CRI-O's version file (its wipe check).
    pub version_file: PathBuf,
    /// CRI-O's clean-shutdown marker.
    pub clean_shutdown: PathBuf,
    /// crio.conf.
    pub config: PathBuf,
    /// CRI-O's stderr, every start appended.
    pub log: PathBuf,
    /// Top cgroup the pods' cgroup parents live in.
    pub cgroup_top: String,
    /// The CNI network (and conflist) name.
    pub network: String,
    /// The CNI bridge interface.
    pub bridge: String,
    /// The bridge's subnet.
    pub subnet: String,
}

/// A private CRI-O node.
pub struct Node {
    /// Where its crio, pinns and copyimg are.
    pub bins: PathBuf,
    /// The version CRI-O must report.
    pub version: String,
    /// Its files.
    pub p: Paths,
    /// The running crio, when started.
    pub daemon: Option<Child>,
    _tmp: tempfile::TempDir,
    /// Timings and facts for the report.
    pub notes: Vec<String>,
}

impl Node {
    /// A fresh node directory and config; CRI-O is not started. Panics (with [`SETUP`]) when
    /// the binaries, conmon, runc, the CNI plugins or busybox are missing, or not root.
    pub fn new() -> Node {
        Node::with_build(bin_dir(), VERSION)
    }

    /// [`Node::new`] running another CRI-O build: `bins` holds its crio, pinns and copyimg,
    /// and CRI-O must report `version`.
    pub fn with_build(bins: PathBuf, version: &str) -> Node {
        for b in ["crio", "pinns", "copyimg"] {
            assert!(
                bins.join(b).exists(),
                "{} is missing; {SETUP}",
                bins.join(b).display()
            );
        }
        for tool in [
            "/usr/bin/conmon",
            "/usr/sbin/runc",
            "/usr/lib/cni/bridge",
            "/usr/lib/cni/host-local",
            "/usr/lib/cni/loopback",
            "/bin/busybox",
        ] {
            assert!(Path::new(tool).exists(), "{tool} is missing; {SETUP}");
        }
        assert!(
            unsafe { libc::geteuid() } == 0,
            "the live CRI-O test needs root (crio, conmon, runc, mounts, network namespaces)"
        );
        let n = INSTANCE.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        // socket paths are limited to 108 bytes: a short prefix
        let tmp = tempfile::Builder::new()
            .prefix("rhcrio-")
            .tempdir_in("/tmp")
            .unwrap();
        let t = tmp.path().to_path_buf();
        // A name and subnet no other test or node uses: the pid and the instance, in a range
        // (10.233/16) no runtime here defaults to (CRI-O 10.85, podman 10.88, docker 172.17).
        let slot = (pid.wrapping_mul(7).wrapping_add(n)) % 250 + 1;
        let p = Paths {
            graphroot: t.join("var/lib/containers/storage"),
            runroot: t.join("run/containers/storage"),
            sock: t.join("var/run/crio/crio.sock"),
            version_file: t.join("var/run/crio/version"),
            clean_shutdown: t.join("var/lib/crio/clean.shutdown"),
            config: t.join("etc/crio/crio.conf"),
            log: t.join("crio.log"),
            cgroup_top: format!("kubepods-rhcrio-{pid}-{n}"),
            network: format!("rhcrio-{pid}-{n}"),
            bridge: format!("rhc{}", (pid % 100_000) * 10 + n % 10),
            subnet: format!("10.233.{slot}.0/24"),
            t,
        };
        for d in [
            "var/lib/containers/storage",
            "run/containers/storage",
            "var/run/crio/exits",
            "var/lib/crio",
            "var/log/crio/pods",
            "etc/crio/crio.conf.d",
            "etc/cni/net.d",
            "var/lib/cni/networks",
            "run/runc",
            "log/pods",
        ] {
            fs::create_dir_all(p.t.join(d)).unwrap();
        }
        write_config(&p, &bins);
        Node {
            bins,
            version: version.to_string(),
            p,
            daemon: None,
            _tmp: tmp,
            notes: Vec::new(),
        }
    }

    /// The CRI endpoint, `unix://<sock>`.
    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.p.sock.display())
    }

    /// `copyimg` of the OCI archive `tar` into the node's containers/storage as `name`, while
    /// CRI-O is stopped. Runs in a mount namespace of its own where /var/lib is a read-only
    /// tmpfs: containers/image would otherwise create its blob-info cache in the host's
    /// /var/lib/containers/cache; unable to, it keeps the cache in memory.
    pub fn import_image(&self, tar: &Path, name: &str) {
        assert!(self.daemon.is_none(), "import images before CRI-O starts");
        let copyimg = self.bins.join("copyimg");
        let script = format!(
            "mount --make-rprivate / && mount -t tmpfs -o ro tmpfs /var/lib && exec {} --root {} --runroot {} --storage-driver overlay --signature-policy {} --image-name {name} --import-from oci-archive:{}",
            copyimg.display(),
            self.p.graphroot.display(),
            self.p.runroot.display(),
            self.p.t.join("etc/containers/policy.json").display(),
            tar.display()
        );
        run_ok(
            Command::new("unshare")
                .args(["-m", "sh", "-c", &script])
                .env(
                    "CONTAINERS_STORAGE_CONF",
                    self.p.t.join("etc/containers/storage.conf"),
                ),
            &format!("copyimg {name}"),
        );
    }

    /// Starts crio and waits until its CRI answers `Version` (60 s at most).
    pub fn start(&mut self) -> CriClient {
        assert!(self.daemon.is_none(), "CRI-O already runs");
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.p.log)
            .unwrap();
        let started = Instant::now();
        let mut cmd = Command::new(self.bins.join("crio"));
        cmd.arg("--config")
            .arg(&self.p.config)
            .arg("--config-dir")
            .arg(self.p.t.join("etc/crio/crio.conf.d"))
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env(
                "CONTAINERS_STORAGE_CONF",
                self.p.t.join("etc/containers/storage.conf"),
            )
            .env(
                "CONTAINERS_REGISTRIES_CONF",
                self.p.t.join("etc/containers/registries.conf"),
            )
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        crate::in_own_session(&mut cmd);
        self.daemon = Some(cmd.spawn().expect("start crio"));
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(st) = self.daemon.as_mut().unwrap().try_wait().unwrap() {
                self.daemon = None;
                panic!("crio exited at start ({st}); log:\n{}", self.log_tail());
            }
            if self.p.sock.exists() {
                if let Ok(c) = CriClient::connect(&self.endpoint()) {
                    if let Ok(v) = c.version() {
                        assert_eq!(
                            (v.runtime_name.as_str(), v.runtime_version.as_str()),
                            ("cri-o", self.version.as_str()),
                            "{SETUP}"
                        );
                        self.notes.push(format!(
                            "start: {} {} answered after {:.2}s",
                            v.runtime_name,
                            v.runtime_version,
                            started.elapsed().as_secs_f64()
                        ));
                        return c;
                    }
                }
            }
            assert!(
                Instant::now() < deadline,
                "crio did not answer the CRI within 60 s; log:\n{}",
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// SIGTERM to crio's pid; waits for it to exit (SIGKILL and a panic after 30 s).
    pub fn stop(&mut self) {
        let Some(child) = self.daemon.take() else {
            return;
        };
        let took = crate::sigterm_and_wait(child, "crio");
        self.notes.push(format!(
            "stop: crio exited {:.2}s after SIGTERM",
            took.as_secs_f64()
        ));
    }

    /// The pid of the running crio.
    pub fn pid(&self) -> Option<u32> {
        self.daemon.as_ref().map(|c| c.id())
    }

    /// The last 60 lines of CRI-O's log.
    pub fn log_tail(&self) -> String {
        let text = fs::read_to_string(&self.p.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(60)..].join("\n")
    }

    /// CRI-O's log so far.
    pub fn log(&self) -> String {
        fs::read_to_string(&self.p.log).unwrap_or_default()
    }

    /// The conmon processes of this node (their arguments name paths under `<t>`).
    pub fn conmon_pids(&self) -> Vec<u32> {
        let t = self.p.t.to_string_lossy().into_owned();
        let mut out: Vec<u32> = processes()
            .into_iter()
            .filter(|(_, args)| {
                args.first().is_some_and(|a| a.ends_with("conmon"))
                    && args.iter().any(|a| a.starts_with(&t))
            })
            .map(|(pid, _)| pid)
            .collect();
        out.sort();
        out
    }

    /// `<graphroot>/overlay-containers/<id>/userdata/config.json`.
    pub fn graph_config(&self, id: &str) -> PathBuf {
        self.p
            .graphroot
            .join("overlay-containers")
            .join(id)
            .join("userdata/config.json")
    }

    /// `<runroot>/overlay-containers/<id>/userdata/config.json` (the runc bundle).
    pub fn run_config(&self, id: &str) -> PathBuf {
        self.p
            .runroot
            .join("overlay-containers")
            .join(id)
            .join("userdata/config.json")
    }
}

impl Default for Node {
    fn default() -> Self {
        Self::new()
    }
}

/// crio.conf with `@NAME@` placeholders, shared with scripts/k8s-lab.sh.
const CRIO_CONF_TEMPLATE: &str = include_str!("../data/crio.conf.in");

fn write_config(p: &Paths, bins: &Path) {
    let t = p.t.display();
    fs::create_dir_all(p.t.join("etc/containers")).unwrap();
    fs::write(
        p.t.join("etc/containers/policy.json"),
        r#"{"default":[{"type":"insecureAcceptAnything"}]}"#,
    )
    .unwrap();
    // the node's own: no host /etc/containers/{storage,registries}.conf reaches it
    fs::write(
        p.t.join("etc/containers/storage.conf"),
        format!(
            "[storage]\ndriver = \"overlay\"\ngraphroot = \"{}\"\nrunroot = \"{}\"\n",
            p.graphroot.display(),
            p.runroot.display()
        ),
    )
    .unwrap();
    fs::write(p.t.join("etc/containers/registries.conf"), "").unwrap();
    // the template the real-node lab's CRI-O uses too (scripts/k8s-lab.sh)
    let conf = [
        ("@GRAPHROOT@", p.graphroot.display().to_string()),
        ("@RUNROOT@", p.runroot.display().to_string()),
        ("@VERSION_FILE@", p.version_file.display().to_string()),
        ("@CLEAN_SHUTDOWN@", p.clean_shutdown.display().to_string()),
        ("@SOCK@", p.sock.display().to_string()),
        ("@PINNS@", bins.join("pinns").display().to_string()),
        ("@PAUSE_IMAGE@", PAUSE_IMAGE.to_string()),
        ("@NETWORK@", p.network.clone()),
        ("@NETWORK_DIR@", format!("{t}/etc/cni/net.d")),
        ("@CNI_BIN@", "/usr/lib/cni".to_string()),
        ("@T@", t.to_string()),
    ]
    .iter()
    .fold(CRIO_CONF_TEMPLATE.to_string(), |c, (k, v)| c.replace(k, v));
    fs::write(&p.config, conf).unwrap();
    let conflist = serde_json::json!({
        "cniVersion": "1.0.0",
        "name": p.network,
        "plugins": [
            {
                "type": "bridge",
                "bridge": p.bridge,
                "isGateway": true,
                "ipMasq": false,
                "ipam": {
                    "type": "host-local",
                    "dataDir": format!("{t}/var/lib/cni/networks"),
                    "ranges": [[{"subnet": p.subnet}]],
                }
            },
            {"type": "loopback"}
        ]
    });
    fs::write(
        p.t.join(format!("etc/cni/net.d/10-{}.conflist", p.network)),
        serde_json::to_vec_pretty(&conflist).unwrap(),
    )
    .unwrap();
}

impl Drop for Node {
    fn drop(&mut self) {
        // 1. the pods, through the CRI, when CRI-O runs (it stops their conmons itself)
        if self.daemon.is_some() {
            if let Ok(c) =
                CriClient::connect_with_timeout(&self.endpoint(), Duration::from_secs(30))
            {
                // killed at once: the test is over, no grace period to wait for
                for ctr in c.list_containers().unwrap_or_default() {
                    let _ = c.stop_container(&ctr.id, 0);
                }
                for sb in c.list_pod_sandbox().unwrap_or_default() {
                    let _ = c.stop_pod_sandbox(&sb.id);
                    let _ = c.remove_pod_sandbox(&sb.id);
                }
            }
            // its pods are gone, so nothing is left that a clean stop would save; after a
            // teardown like this CRI-O 1.30 takes some 6 s to exit on SIGTERM
            if let Some(mut child) = self.daemon.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        // 2. what is left: container processes under our conmons, then the conmons, by pid
        let conmons = self.conmon_pids();
        let mut victims = descendants(&conmons);
        victims.reverse();
        for pid in victims.iter().chain(conmons.iter()) {
            unsafe {
                libc::kill(*pid as i32, libc::SIGKILL);
            }
        }
        if !conmons.is_empty() {
            std::thread::sleep(Duration::from_millis(300));
        }
        // 3. every mount under the node (overlays, shm, pinned namespaces), deepest first
        let t = self.p.t.to_string_lossy().into_owned();
        let mounts = fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let mut points: Vec<String> = mounts
            .lines()
            .filter_map(|l| l.split(' ').nth(4).map(unescape_mount))
            .filter(|m| m.starts_with(&t))
            .collect();
        points.sort_by_key(|m| std::cmp::Reverse(m.len()));
        points.dedup();
        for m in points {
            let c = std::ffi::CString::new(m).unwrap();
            unsafe {
                libc::umount2(c.as_ptr(), libc::MNT_DETACH);
            }
        }
        // 4. the pods' cgroups in every v1 controller, the bridge, the CNI result cache
        if let Ok(rd) = fs::read_dir("/sys/fs/cgroup") {
            for ctl in rd.flatten() {
                rmdir_tree(&ctl.path().join(&self.p.cgroup_top));
            }
        }
        let _ = Command::new("ip")
            .args(["link", "del", &self.p.bridge])
            .stderr(Stdio::null())
            .status();
        if let Ok(rd) = fs::read_dir("/var/lib/cni/results") {
            for e in rd.flatten() {
                if e.file_name()
                    .to_string_lossy()
                    .starts_with(&format!("{}-", self.p.network))
                {
                    let _ = fs::remove_file(e.path());
                }
            }
        }
        if std::thread::panicking() {
            eprintln!(
                "crio log tail ({}):\n{}",
                self.p.log.display(),
                self.log_tail()
            );
        }
    }
}

/// Waits (20 s at most) until the CRI knows image `name`; returns its id.
pub fn image_id(cri: &CriClient, name: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(img) = cri.image_status(name).expect("ImageStatus") {
            return img.id;
        }
        assert!(
            Instant::now() < deadline,
            "crio: image {name} imported with copyimg is unknown to the CRI"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
