//! The kubelet stand-in of the `upgrade` tests. There is no kubelet binary for this machine (a
//! real one needs an API server to register with), so "the kubelet" is a small Python program
//! the test installs at the node's kubelet path. It does what `upgrade` relies on:
//! - parses every flag before anything else and fails on one its version removed, as the
//!   kubelet does (so `NEW <the running kubelet's args> --version` fails for them);
//! - answers `--version` as `Kubernetes vX.Y.Z`;
//! - otherwise, when given `--container-runtime-endpoint=unix://…`, connects to that socket
//!   first and exits when nothing answers (the kubelet cannot start without its runtime), then
//!   serves `/healthz` on `--healthz-port` and writes its version into `--running-marker`.
//!
//! It is started and stopped by shell commands (`upgrade --start-kubelet` / `--stop-kubelet`),
//! with its arguments from an EnvironmentFile-style flag file when [`StandIn::env_file`] is set,
//! as systemd starts a kubeadm node's kubelet: so a rewritten flag file is what the next start
//! runs with.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The dockershim-only flags kubelet 1.24 removed (kubelet 1.24+ stand-ins refuse them).
pub const DOCKERSHIM_FLAGS: [&str; 8] = [
    "--network-plugin",
    "--cni-conf-dir",
    "--cni-bin-dir",
    "--cni-cache-dir",
    "--network-plugin-mtu",
    "--docker-endpoint",
    "--image-pull-progress-deadline",
    "--experimental-dockershim-root-directory",
];

/// The stand-in program of kubelet `version` (`X.Y.Z`), refusing the flags in `removed`;
/// with `needs_endpoint` it also refuses to run without `--container-runtime-endpoint` (a
/// kubelet with no dockershim has no runtime of its own).
pub fn program(version: &str, removed: &[&str], needs_endpoint: bool) -> String {
    Program {
        version,
        removed,
        needs_endpoint,
        crash: false,
    }
    .text()
}

/// A stand-in's behaviour, for [`Program::text`].
pub struct Program<'a> {
    /// What `--version` reports (`X.Y.Z`).
    pub version: &'a str,
    /// The flags it refuses (this version removed them).
    pub removed: &'a [&'a str],
    /// It refuses to run without `--container-runtime-endpoint`.
    pub needs_endpoint: bool,
    /// It answers `--version`, then exits at start (a broken build): never healthy.
    pub crash: bool,
}

fn py_bool(b: bool) -> &'static str {
    if b {
        "True"
    } else {
        "False"
    }
}

impl Program<'_> {
    /// The program's text. `--running-marker` is optional: without it nothing is written.
    pub fn text(&self) -> String {
        let Program {
            version,
            removed,
            needs_endpoint,
            crash,
        } = self;
        let needs = py_bool(*needs_endpoint);
        let crash = py_bool(*crash);
        format!(
            r#"#!/usr/bin/env python3
# A kubelet stand-in (testtools/src/kubelet.rs): no kubelet binary runs on this machine.
import http.server, os, socket, sys, time
VERSION = "v{version}"
REMOVED = {removed:?}
NEEDS_ENDPOINT = {needs}
CRASH = {crash}
flags = [a for a in sys.argv[1:] if a.startswith("--")]
for a in flags:
    if a.split("=", 1)[0] in REMOVED:
        sys.stderr.write("Error: failed to parse kubelet flag: unknown flag: %s\n" % a.split("=", 1)[0])
        sys.exit(1)
if "--version" in flags:
    print("Kubernetes " + VERSION)
    sys.exit(0)
if CRASH:
    sys.stderr.write("E0101 kubelet: failed to run Kubelet: a broken build\n")
    sys.exit(1)
opt = dict(a[2:].split("=", 1) for a in flags if "=" in a)
endpoint = opt.get("container-runtime-endpoint")
if NEEDS_ENDPOINT and endpoint is None:
    sys.stderr.write("E0101 kubelet: no --container-runtime-endpoint: this kubelet has no dockershim\n")
    sys.exit(1)
if endpoint is not None and endpoint.startswith("unix://"):
    deadline = time.time() + 20
    while True:
        s = socket.socket(socket.AF_UNIX)
        try:
            s.connect(endpoint[len("unix://"):])
            s.close()
            break
        except OSError as e:
            s.close()
            if time.time() > deadline:
                sys.stderr.write("E0101 kubelet: failed to connect to the runtime at %s: %s\n" % (endpoint, e))
                sys.exit(1)
            time.sleep(0.1)
class Healthz(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        ok = self.path == "/healthz"
        self.send_response(200 if ok else 404)
        self.end_headers()
        self.wfile.write(b"ok" if ok else b"not found")
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(("127.0.0.1", int(opt["healthz-port"])), Healthz)
if "running-marker" in opt:
    # written whole, then renamed: the test waits for the name and reads it at once
    with open(opt["running-marker"] + ".tmp", "w") as f:
        f.write(VERSION + " " + (endpoint or "dockershim"))
    os.replace(opt["running-marker"] + ".tmp", opt["running-marker"])
server.serve_forever()
"#
        )
    }
}

/// A node's kubelet: the stand-in installed at the node's kubelet path, with the files its
/// start and stop commands use.
pub struct StandIn {
    /// Where the node's kubelet binary is installed (`upgrade --kubelet-path`).
    pub path: PathBuf,
    /// The old binary's bytes.
    pub old: Vec<u8>,
    /// The old binary's version, `vX.Y.Z`.
    pub old_version: String,
    /// Its healthz port.
    pub port: u16,
    /// The pid file its start command writes (`upgrade --kubelet-pidfile`).
    pub pidfile: PathBuf,
    /// What the running stand-in writes: its version and runtime endpoint.
    pub marker: PathBuf,
    /// Its log.
    pub log: PathBuf,
    /// Extra flags on the running kubelet's command line.
    pub extra: Vec<String>,
    /// A kubelet flag file (`NAME="--flag ..."` lines) whose variables the start command
    /// passes, as systemd's `EnvironmentFile=` + `$KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS`.
    pub env_file: Option<PathBuf>,
    /// The test's directory (new binaries are written there).
    pub dir: PathBuf,
}

impl StandIn {
    /// Installs kubelet `from_version` (`X.Y.Z`, accepting every flag) at
    /// `dir/node/usr/bin/kubelet`.
    pub fn new(dir: &Path, from_version: &str) -> StandIn {
        let bin = dir.join("node/usr/bin");
        fs::create_dir_all(&bin).unwrap();
        let path = bin.join("kubelet");
        let old = program(from_version, &[], false).into_bytes();
        write_exe(&path, &old);
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        StandIn {
            path,
            old,
            old_version: format!("v{from_version}"),
            port,
            pidfile: dir.join("kubelet.pid"),
            marker: dir.join("kubelet.running"),
            log: dir.join("kubelet.log"),
            extra: Vec::new(),
            env_file: None,
            dir: dir.to_path_buf(),
        }
    }

    /// A new kubelet binary of `version` (`X.Y.Z`) at `dir/name`: from 1.24 it refuses the
    /// dockershim flags; before, `--network-plugin` is still known.
    pub fn binary(&self, name: &str, version: &str) -> PathBuf {
        let minor: u32 = version
            .split('.')
            .nth(1)
            .and_then(|m| m.parse().ok())
            .expect("a version X.Y.Z");
        let p = self.dir.join(name);
        let removed: &[&str] = if minor >= 24 {
            &DOCKERSHIM_FLAGS
        } else {
            &["--network-plugin"]
        };
        write_exe(&p, program(version, removed, false).as_bytes());
        p
    }

    /// A new kubelet of `version` with no dockershim: it refuses the dockershim flags and needs
    /// a runtime endpoint that answers.
    pub fn binary_without_dockershim(&self, name: &str, version: &str) -> PathBuf {
        let p = self.dir.join(name);
        write_exe(&p, program(version, &DOCKERSHIM_FLAGS, true).as_bytes());
        p
    }

    /// The start command (`sh -c`): the kubelet in the background, its pid in [`Self::pidfile`].
    pub fn start_cmd(&self) -> String {
        let (source, vars) = match &self.env_file {
            Some(f) => (
                format!("set -a; . {}; set +a; ", f.display()),
                " $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS",
            ),
            None => (String::new(), ""),
        };
        format!(
            "{source}{} --healthz-port={} --running-marker={} {}{vars} >>{} 2>&1 </dev/null & echo $! > {}",
            self.path.display(),
            self.port,
            self.marker.display(),
            self.extra.join(" "),
            self.log.display(),
            self.pidfile.display()
        )
    }

    /// The stop command.
    pub fn stop_cmd(&self) -> String {
        stop_script(&self.pidfile)
    }

    /// Its health endpoint.
    pub fn healthz(&self) -> String {
        format!("http://127.0.0.1:{}/healthz", self.port)
    }

    /// Starts it and waits until it runs (30 s).
    pub fn start(&self) {
        let _ = fs::remove_file(&self.marker);
        sh(&self.start_cmd());
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.marker.exists() {
            assert!(
                Instant::now() < deadline,
                "the kubelet stand-in did not start: {}",
                fs::read_to_string(&self.log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops and starts it.
    pub fn restart(&self) {
        sh(&self.stop_cmd());
        self.start();
    }

    /// The version of the kubelet that runs now (its process alive, its marker written).
    pub fn running(&self) -> String {
        self.running_with().0
    }

    /// The version and the runtime endpoint (`dockershim` when none was given) of the kubelet
    /// that runs now.
    pub fn running_with(&self) -> (String, String) {
        let pid: u32 = fs::read_to_string(&self.pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(
            pid_running(pid),
            "no kubelet runs (pid {pid} is gone): {}",
            fs::read_to_string(&self.log).unwrap_or_default()
        );
        let m = fs::read_to_string(&self.marker).unwrap();
        let (v, e) = m.split_once(' ').unwrap_or((&m, ""));
        (v.to_string(), e.to_string())
    }
}

/// Sends SIGTERM to the pid in `pidfile` and waits until the process is gone (a zombie counts
/// as gone: only its parent, init, has not reaped it yet).
pub fn stop_script(pidfile: &Path) -> String {
    let p = pidfile.display();
    format!(
        "pid=$(cat {p} 2>/dev/null) || exit 0; kill -TERM \"$pid\" 2>/dev/null; while [ -d /proc/$pid ] && ! grep -q ') Z' /proc/$pid/stat 2>/dev/null; do sleep 0.05; done"
    )
}

/// Runs `cmd` with `sh -c`; panics when it fails.
pub fn sh(cmd: &str) {
    let st = Command::new("sh").arg("-c").arg(cmd).status().unwrap();
    assert!(st.success(), "`{cmd}` failed: {st}");
}

/// Whether `pid` exists and is not a zombie.
pub fn pid_running(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        s.rfind(')')
            .is_some_and(|i| !s[i + 1..].trim_start().starts_with('Z'))
    })
}

/// Writes an executable file.
pub fn write_exe(p: &Path, bytes: &[u8]) {
    // The program the tests run is written by `install`, never through a descriptor of this
    // process: a child another test thread forks meanwhile inherits every open descriptor until
    // its exec, and running the file then fails with ETXTBSY ("Text file busy") on a loaded
    // machine. What this process writes is only the staging copy, never run.
    let staging = p.with_extension("staging");
    fs::write(&staging, bytes).unwrap();
    let st = Command::new("install")
        .args(["-m", "0755"])
        .arg(&staging)
        .arg(p)
        .status()
        .unwrap();
    assert!(
        st.success(),
        "install {} {}: {st}",
        staging.display(),
        p.display()
    );
    fs::remove_file(&staging).unwrap();
}

/// Stops what shell scripts started (runtime, kubelet stand-in), by the pids in their pid
/// files, when the test ends or fails, before the harness guards clean up the rest.
pub struct PidFileGuard(pub Vec<PathBuf>);

impl Drop for PidFileGuard {
    fn drop(&mut self) {
        for f in &self.0 {
            let Some(pid) = fs::read_to_string(f)
                .ok()
                .and_then(|s| s.trim().parse::<i32>().ok())
            else {
                continue;
            };
            // SAFETY: kill(2) of a pid our own script started.
            unsafe { libc::kill(pid, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(30);
            while pid_running(pid as u32) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            if pid_running(pid as u32) {
                // SAFETY: as above.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
}
