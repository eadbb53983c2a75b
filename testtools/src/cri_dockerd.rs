//! A private cri-dockerd 0.4.1 (built by `scripts/setup-cri-dockerd.sh` into
//! `.cache/cri-dockerd/bin/`) in front of a private dockerd 26.1.5 ([`crate::docker::Daemon`] on
//! Debian 13's docker.io, unpacked by the same script; live-restore on), as a Docker node runs it
//! after the dockershim → cri-dockerd switch.
//!
//! Everything lives under the dockerd's temporary directory `<t>`, which stands in for the
//! node's `/`: cri-dockerd's root directory `<t>/var/lib/cri-dockerd` (its sandbox checkpoints
//! in `sandbox/`), where dockershim kept them `<t>/var/lib/dockershim/sandbox`, the CRI socket
//! `<t>/var/run/cri-dockerd.sock`, the CNI conf dir `<t>/etc/cni/net.d` with a bridge network of the
//! test's own name and subnet, the CNI cache `<t>/var/lib/cni/cache`, host-local's leases
//! `<t>/var/lib/cni/networks`. The CNI plugins are Debian's, unpacked by the setup script into
//! `.cache/cni/bin` (never the node's `/opt/cni/bin`). A Drop guard stops the sandboxes through
//! the CRI (which releases their addresses), stops cri-dockerd by pid, removes the bridge and
//! the pods' cgroups; the dockerd harness then removes the containers and the directory.

use std::fs;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::containerd::rmdir_tree;
use crate::cri::CriTestCalls;
use crate::docker::Daemon;
use storepatch::live::cri::CriClient;

/// `PATH` of the daemons the scripts start.
const PATH_ENV: &str = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// What to do when cri-dockerd or the CNI plugins are missing, for panic messages.
pub const SETUP: &str =
    "run scripts/setup-docker.sh and scripts/setup-cri-dockerd.sh (as root) first";
/// The cri-dockerd version the setup builds.
pub const VERSION: &str = "0.4.1";
/// The sandbox ("pause") image: static busybox running a loop until SIGTERM.
pub const PAUSE_IMAGE: &str = "rehash-pause:3.6";
/// The containers' image.
pub const APP_IMAGE: &str = "rehash-app:1.0";

static INSTANCE: AtomicU32 = AtomicU32::new(0);

/// `.cache/cri-dockerd/bin/cri-dockerd`.
pub fn binary() -> PathBuf {
    crate::containerd::workspace().join(".cache/cri-dockerd/bin/cri-dockerd")
}

/// The Docker the setup unpacks: cri-dockerd 0.4.1 refuses Docker Engine API < 1.42 (Docker
/// 23.0), so Debian 12's 20.10 cannot run behind it; Debian 13's docker.io 26.1.5 does.
pub const DOCKER_VERSION: &str = "26.1.5";

/// `.cache/runtimes/docker-26.1.5/usr/sbin/dockerd`.
pub fn dockerd() -> PathBuf {
    crate::containerd::workspace().join(format!(
        ".cache/runtimes/docker-{DOCKER_VERSION}/usr/sbin/dockerd"
    ))
}

/// `.cache/cni/bin` (bridge, host-local, loopback).
pub fn cni_bin_dir() -> PathBuf {
    crate::containerd::workspace().join(".cache/cni/bin")
}

/// A private dockerd and the cri-dockerd in front of it.
pub struct Node {
    /// cri-dockerd, when started (dropped first: its sandboxes are stopped through it).
    pub child: Option<Child>,
    /// How many times cri-dockerd was started (each start appends to its log).
    pub starts: u32,
    /// The node's `/` stand-in (the dockerd harness's directory).
    pub t: PathBuf,
    /// `--cri-dockerd-root-directory`.
    pub root: PathBuf,
    /// Where dockershim kept its sandbox checkpoints on this node.
    pub dockershim_sandbox_dir: PathBuf,
    /// The CRI socket.
    pub sock: PathBuf,
    /// cri-dockerd's log.
    pub log: PathBuf,
    /// `--cni-conf-dir`.
    pub cni_conf_dir: PathBuf,
    /// The CNI network (and conflist) name.
    pub network: String,
    /// The CNI bridge interface.
    pub bridge: String,
    /// The bridge's subnet (`10.234.<n>.0/24`).
    pub subnet: String,
    /// Top cgroup the pods' cgroup parents live in.
    pub cgroup_top: String,
    /// The dockerd (dropped after cri-dockerd).
    pub docker: Daemon,
    /// Dropped last, when the dockerd harness has removed every container.
    _cgroups: CgroupCleanup,
}

impl Node {
    /// Starts the private dockerd, imports the two images, writes the CNI conf; cri-dockerd is
    /// not started yet. Panics (with [`SETUP`]) when something is missing or not root.
    #[allow(clippy::new_without_default)] // starts a daemon: not a default value
    pub fn new() -> Node {
        Node::with_dockerd(dockerd())
    }

    /// [`Node::new`] with another dockerd binary (Docker 28.5.2 built by
    /// scripts/setup-docker-module.sh).
    pub fn with_dockerd(dockerd: PathBuf) -> Node {
        Node::with_docker(dockerd, None)
    }

    /// [`Node::with_dockerd`] whose containers run with `runc` instead of the system's (Docker
    /// 29's engine asks for a time namespace, which runc learned in 1.2).
    pub fn with_docker(dockerd: PathBuf, runc: Option<PathBuf>) -> Node {
        assert!(
            unsafe { libc::geteuid() } == 0,
            "the cri-dockerd test needs root (dockerd, network namespaces, CNI)"
        );
        assert!(
            binary().is_file(),
            "{} is missing; {SETUP}",
            binary().display()
        );
        assert!(
            dockerd.is_file(),
            "{} is missing; {SETUP}",
            dockerd.display()
        );
        for b in ["bridge", "host-local", "loopback"] {
            let p = cni_bin_dir().join(b);
            assert!(p.is_file(), "{} is missing; {SETUP}", p.display());
        }
        let mut docker = Daemon::with_dockerd(dockerd);
        let runtime = if !has_cap_sys_resource() {
            Some(write_runc_wrapper(docker.dir.path(), runc.as_deref()))
        } else {
            runc
        };
        if let Some(runtime) = runtime {
            let conf = serde_json::json!({
                "runtimes": {"rehash-runc": {"path": runtime.display().to_string()}},
                "default-runtime": "rehash-runc",
            });
            fs::write(docker.path("daemon.json"), conf.to_string()).unwrap();
        }
        docker.start();
        let t = docker.dir.path().to_path_buf();
        let n = INSTANCE.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        // A name and subnet no other test uses: the pid and the instance, in a range (10.234/16)
        // no runtime here defaults to (the CRI-O harness takes 10.233/16).
        let slot = (pid.wrapping_mul(7).wrapping_add(n)) % 250 + 1;
        let node = Node {
            child: None,
            starts: 0,
            root: t.join("var/lib/cri-dockerd"),
            dockershim_sandbox_dir: t.join("var/lib/dockershim/sandbox"),
            sock: t.join("var/run/cri-dockerd.sock"),
            log: t.join("cri-dockerd.log"),
            cni_conf_dir: t.join("etc/cni/net.d"),
            network: format!("rhcd-{pid}-{n}"),
            bridge: format!("rhd{}", (pid % 100_000) * 10 + n % 10),
            subnet: format!("10.234.{slot}.0/24"),
            cgroup_top: format!("kubepods-rhcd-{pid}-{n}"),
            _cgroups: CgroupCleanup(format!("kubepods-rhcd-{pid}-{n}")),
            t,
            docker,
        };
        for d in [
            "var/run",
            "etc/cni/net.d",
            "var/lib/cni/networks",
            "var/lib/cni/cache",
        ] {
            fs::create_dir_all(node.t.join(d)).unwrap();
        }
        node.write_cni_conf();
        let c = node.docker.client();
        import_image(&c, PAUSE_IMAGE);
        import_image(&c, APP_IMAGE);
        node
    }

    fn write_cni_conf(&self) {
        let conflist = serde_json::json!({
            "cniVersion": "0.4.0",
            "name": self.network,
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": self.bridge,
                    "isGateway": true,
                    "ipMasq": false,
                    "ipam": {
                        "type": "host-local",
                        "dataDir": self.t.join("var/lib/cni/networks").display().to_string(),
                        "ranges": [[{"subnet": self.subnet}]],
                    }
                },
                {"type": "loopback"}
            ]
        });
        fs::write(
            self.cni_conf_dir
                .join(format!("10-{}.conflist", self.network)),
            serde_json::to_vec_pretty(&conflist).unwrap(),
        )
        .unwrap();
    }

    /// The CRI endpoint, `unix://<sock>`.
    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.sock.display())
    }

    /// cri-dockerd's sandbox checkpoint directory.
    pub fn checkpoint_dir(&self) -> PathBuf {
        self.root.join("sandbox")
    }

    /// The flags cri-dockerd runs with here: the same a node's unit gives it after the switch,
    /// with the kubelet's former `--network-plugin`/`--cni-*` flags.
    pub fn flags(&self) -> Vec<String> {
        vec![
            format!("--container-runtime-endpoint={}", self.endpoint()),
            format!(
                "--docker-endpoint=unix://{}",
                self.docker.socket().display()
            ),
            format!("--cri-dockerd-root-directory={}", self.root.display()),
            "--network-plugin=cni".into(),
            format!("--cni-conf-dir={}", self.cni_conf_dir.display()),
            format!("--cni-bin-dir={}", cni_bin_dir().display()),
            format!(
                "--cni-cache-dir={}",
                self.t.join("var/lib/cni/cache").display()
            ),
            format!("--pod-infra-container-image={PAUSE_IMAGE}"),
            // a port of its own (0: any free one), not the node's streaming port
            "--streaming-bind-addr=127.0.0.1".into(),
        ]
    }

    /// Starts cri-dockerd and waits until its CRI answers `Version` (60 s at most).
    pub fn start(&mut self) -> CriClient {
        assert!(self.child.is_none(), "cri-dockerd already runs");
        assert!(self.docker.child.is_some(), "start dockerd first");
        self.starts += 1;
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let mut cmd = Command::new(binary());
        cmd.args(self.flags())
            .env(
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            )
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        crate::in_own_session(&mut cmd);
        self.child = Some(
            cmd.spawn()
                .unwrap_or_else(|e| panic!("cannot start cri-dockerd: {e}; {SETUP}")),
        );
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(st) = self.child.as_mut().unwrap().try_wait().unwrap() {
                self.child = None;
                panic!(
                    "cri-dockerd exited at start ({st}); log:\n{}",
                    self.log_tail()
                );
            }
            if self.sock.exists() {
                if let Ok(c) = CriClient::connect(&self.endpoint()) {
                    if let Ok(v) = c.version() {
                        assert_eq!(v.runtime_name, "docker", "{v:?}");
                        return c;
                    }
                }
            }
            assert!(
                Instant::now() < deadline,
                "cri-dockerd did not answer the CRI within 60 s; log:\n{}",
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The pid files [`Self::start_script`] writes: dockerd's and cri-dockerd's.
    pub fn script_pidfiles(&self) -> [PathBuf; 2] {
        [
            self.t.join("dockerd.script.pid"),
            self.t.join("cri-dockerd.script.pid"),
        ]
    }

    /// A shell command that starts dockerd in the background, as its unit does, and waits for
    /// its socket (60 s); its pid goes to the first of [`Self::script_pidfiles`].
    pub fn start_docker_script(&self) -> String {
        let [dpid, _] = self.script_pidfiles();
        format!(
            "env {PATH_ENV} setsid {dockerd} >>{t}/dockerd-script.log 2>&1 </dev/null & echo $! > {dpid}; \
             i=0; while [ ! -S {dsock} ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done",
            dockerd = self.docker.command_line().join(" "),
            t = self.t.display(),
            dpid = dpid.display(),
            dsock = self.docker.socket().display(),
        )
    }

    /// A shell command that starts dockerd and then cri-dockerd in the background, as a
    /// node's units do after the switch (`upgrade --start-runtime`); their pids go to
    /// [`Self::script_pidfiles`].
    pub fn start_script(&self) -> String {
        let [_, cpid] = self.script_pidfiles();
        format!(
            "{}; env {PATH_ENV} setsid {cd} {flags} >>{log} 2>&1 </dev/null & echo $! > {cpid}",
            self.start_docker_script(),
            cd = binary().display(),
            flags = self.flags().join(" "),
            log = self.log.display(),
            cpid = cpid.display(),
        )
    }

    /// The matching stop command: cri-dockerd first (when it runs), then dockerd, each waited
    /// for (`upgrade --stop-runtime`).
    pub fn stop_script(&self) -> String {
        let [dpid, cpid] = self.script_pidfiles();
        format!(
            "({}); ({})",
            crate::kubelet::stop_script(&cpid),
            crate::kubelet::stop_script(&dpid)
        )
    }

    /// SIGTERM to cri-dockerd's pid; waits for it to exit (SIGKILL and a panic after 30 s).
    pub fn stop(&mut self) {
        if let Some(child) = self.child.take() {
            crate::sigterm_and_wait(child, "cri-dockerd");
        }
    }

    /// The last 30 lines of cri-dockerd's log.
    pub fn log_tail(&self) -> String {
        let text = fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    /// The sandbox config the kubelet sends for a pod, its log directory created; the pod
    /// cgroup under this node's own top cgroup.
    pub fn pod_config(
        &self,
        ns: &str,
        name: &str,
        uid: &str,
        host_network: bool,
    ) -> crate::cri::v1::PodSandboxConfig {
        crate::containerd::pod_config_in(&self.t, &self.cgroup_top, ns, name, uid, host_network)
    }
}

/// Imports the static busybox root filesystem as `name` (`repo:tag`) with a command that loops
/// until SIGTERM: cri-dockerd creates sandboxes (and the kubelet containers without a command)
/// with the image's own command.
pub fn import_image(c: &storepatch::live::docker::DockerClient, name: &str) {
    let (repo, tag) = name.split_once(':').unwrap();
    let cmd = serde_json::to_string(&["/bin/sh", "-c", crate::docker::LOOP]).unwrap();
    let changes = percent_encode(&format!("CMD {cmd}"));
    let r = c
        .request(
            "POST",
            &format!("/images/create?fromSrc=-&repo={repo}&tag={tag}&changes={changes}"),
            Some(("application/x-tar", &crate::docker::busybox_rootfs_tar())),
        )
        .unwrap();
    let text = String::from_utf8_lossy(&r.body);
    assert!(
        r.status == 200 && !text.contains("\"error"),
        "image import {name}: {} {text}",
        r.status
    );
}

/// Whether this process may lower an oom_score_adj (CAP_SYS_RESOURCE, bit 24 of CapEff).
fn has_cap_sys_resource() -> bool {
    let status = fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << 24) != 0)
}

/// cri-dockerd gives every sandbox oom_score_adj -998 (as dockershim did), which runc can only
/// set with CAP_SYS_RESOURCE: in a sandbox without it (this project's build machine) every
/// RunPodSandbox fails with "can't get final child's PID from pipe". Where the capability is
/// missing, dockerd runs this wrapper as its default runtime: it raises a negative
/// `oomScoreAdj` in the bundle's config.json to 0 and runs the real runc. Nothing the tests
/// check (labels, hashes, checkpoints, pids, addresses) depends on the OOM score.
fn write_runc_wrapper(dir: &std::path::Path, runc: Option<&std::path::Path>) -> PathBuf {
    let runc = runc.map(|r| r.display().to_string()).unwrap_or_else(|| {
        ["/usr/sbin/runc", "/usr/bin/runc"]
            .into_iter()
            .find(|p| std::path::Path::new(p).is_file())
            .unwrap_or_else(|| panic!("runc not found; {SETUP}"))
            .to_string()
    });
    let path = dir.join("runc-no-negative-oom");
    let script = include_str!("../data/runc-no-negative-oom.sh.in").replace("@RUNC@", &runc);
    fs::write(&path, script).unwrap();
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
    path
}

fn percent_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

impl Drop for Node {
    fn drop(&mut self) {
        // Stop every sandbox through cri-dockerd while it runs: that tears down the CNI
        // network of each (the bridge's leases are released), as the kubelet would.
        if self.child.is_some() {
            if let Ok(c) =
                CriClient::connect_with_timeout(&self.endpoint(), Duration::from_secs(30))
            {
                for ctr in c.list_containers().unwrap_or_default() {
                    let _ = c.stop_container(&ctr.id, 0);
                    let _ = c.remove_container(&ctr.id);
                }
                for sb in c.list_pod_sandbox().unwrap_or_default() {
                    let _ = c.stop_pod_sandbox(&sb.id);
                    let _ = c.remove_pod_sandbox(&sb.id);
                }
            }
            if let Some(mut child) = self.child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        if std::thread::panicking() {
            eprintln!(
                "cri-dockerd log tail ({}):\n{}",
                self.log.display(),
                self.log_tail()
            );
        }
        // Whatever is left is removed by the dockerd harness: it must know every container.
        if self.docker.child.is_some() {
            if let Ok(all) = self.docker.client().list_containers() {
                for c in all {
                    if !self.docker.container_ids.contains(&c.id) {
                        self.docker.container_ids.push(c.id);
                    }
                }
            }
        }
        let _ = Command::new("ip")
            .args(["link", "del", &self.bridge])
            .stderr(Stdio::null())
            .status();
    }
}

/// Removes the pods' cgroup tree under every controller (after their processes are gone).
struct CgroupCleanup(String);

impl Drop for CgroupCleanup {
    fn drop(&mut self) {
        if let Ok(rd) = fs::read_dir("/sys/fs/cgroup") {
            for ctl in rd.flatten() {
                rmdir_tree(&ctl.path().join(&self.0));
            }
        }
    }
}
