//! The real node: systemd units (`systemctl stop|start`), or the operator's commands, run with
//! `sh -c` in a process group of their own (a Ctrl-C at the terminal reaches the upgrade, which
//! goes back to a safe state, and not a half-run `systemctl`).

use super::{NodeControl, NodeError};
use std::cell::Cell;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use storepatch::{ContainersOutlive, LiveRestoreAnswer, RuntimeKind};

/// The kubelet's health endpoint on a stock node (`healthzBindAddress`:`healthzPort`).
pub const DEFAULT_HEALTHZ: &str = "http://127.0.0.1:10248/healthz";

/// cri-dockerd's systemd units, as its packages install them.
pub const CRI_DOCKERD_UNITS: &str = "cri-docker.socket cri-docker.service";

/// How long one service command may take before its process group is killed.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(120);

/// Service control and process view of this machine (or of the node mounted at a host root).
#[derive(Debug, Clone)]
pub struct SystemNode {
    /// Shell command that stops the kubelet.
    pub stop_kubelet: String,
    /// Shell command that starts the kubelet.
    pub start_kubelet: String,
    /// Shell command that stops the runtime.
    pub stop_runtime: String,
    /// Shell command that starts the runtime.
    pub start_runtime: String,
    /// The runtime's stop command was given by the operator: it is trusted to leave the
    /// containers running (the test still checks their pids after it).
    pub runtime_commands_given: bool,
    /// The runtime's systemd unit (`containerd`, `crio`, `docker`).
    pub runtime_unit: String,
    /// Docker: the command that stops cri-dockerd's units, run before [`Self::stop_runtime`]
    /// once the plan switches the node to cri-dockerd (systemd defaults; `None` with the
    /// operator's runtime commands, which are trusted to cover cri-dockerd).
    pub stop_cri_dockerd: Option<String>,
    /// Docker: the command that starts cri-dockerd's units, run after
    /// [`Self::start_runtime`] once the plan switches the node to cri-dockerd.
    pub start_cri_dockerd: Option<String>,
    /// Set by [`NodeControl::switching_to_cri_dockerd`].
    pub cri_dockerd_switch: Cell<bool>,
    /// Prefix of every systemctl command (`chroot /host ` from a Job that mounts the node).
    pub systemctl: String,
    /// The running kubelet's pid file, when it has one.
    pub kubelet_pidfile: Option<PathBuf>,
    /// The kubelet's process name (`/proc/PID/comm`) when there is no pid file.
    pub kubelet_process: String,
    /// The `/proc` of the node's pid namespace.
    pub proc_dir: PathBuf,
}

impl SystemNode {
    /// systemd's units for `runtime`; `host_root` (a Job's mount of the node's `/`) runs
    /// `systemctl` chrooted there.
    pub fn systemd(runtime: RuntimeKind, host_root: Option<&Path>) -> Self {
        let systemctl = match host_root.filter(|h| *h != Path::new("/")) {
            Some(h) => format!("chroot {} systemctl", shell_quote(&h.display().to_string())),
            None => "systemctl".to_string(),
        };
        let unit = runtime.runtime().service_unit().to_string();
        // Mirantis' packaging (cri-dockerd 0.4.1 packaging/systemd): a socket-activated
        // service; the socket is stopped with it, or a connection would start it again.
        let (stop_cri_dockerd, start_cri_dockerd) = if runtime.runtime().behind_dockershim() {
            (
                Some(format!("{systemctl} stop {CRI_DOCKERD_UNITS}")),
                Some(format!("{systemctl} start {CRI_DOCKERD_UNITS}")),
            )
        } else {
            (None, None)
        };
        SystemNode {
            stop_kubelet: format!("{systemctl} stop kubelet"),
            start_kubelet: format!("{systemctl} start kubelet"),
            stop_runtime: format!("{systemctl} stop {unit}"),
            start_runtime: format!("{systemctl} start {unit}"),
            runtime_commands_given: false,
            runtime_unit: unit,
            stop_cri_dockerd,
            start_cri_dockerd,
            cri_dockerd_switch: Cell::new(false),
            systemctl,
            kubelet_pidfile: None,
            kubelet_process: "kubelet".into(),
            proc_dir: PathBuf::from("/proc"),
        }
    }
}

/// `s` as one single-quoted shell word.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Runs `sh -c cmd` in its own process group; its output is kept for the error message.
fn run_shell(cmd: &str) -> Result<(), NodeError> {
    let (ok, out) = run_captured(Command::new("sh").arg("-c").arg(cmd), COMMAND_TIMEOUT)
        .map_err(|e| NodeError::failure(format!("`{cmd}`: {e}")))?;
    if ok {
        Ok(())
    } else {
        Err(NodeError::failure(format!(
            "`{cmd}` failed: {}",
            out.trim()
        )))
    }
}

/// What a kubelet binary says of itself: the version word of `BINARY --version`
/// (`Kubernetes v1.36.3` → `v1.36.3`), the command killed after 10 s.
pub fn kubelet_version_of(binary: &Path) -> Result<String, String> {
    let (ok, out) = run_captured(
        Command::new(binary).arg("--version"),
        Duration::from_secs(10),
    )?;
    if !ok {
        return Err(format!(
            "`{} --version` failed: {}",
            binary.display(),
            out.trim()
        ));
    }
    out.split_whitespace()
        .find(|w| w.starts_with("v1.") && w[1..].parse::<hashcompat::KubeletVersion>().is_ok())
        .map(str::to_string)
        .ok_or_else(|| {
            format!(
                "`{} --version` names no kubelet version: {}",
                binary.display(),
                out.trim()
            )
        })
}

/// Runs `cmd` (stdin closed, both output streams captured into one) in a process group of its
/// own, killing the group after `timeout`.
///
/// The output is everything the command wrote before it exited. A daemon it started in the
/// background inherits the pipes and keeps them open, so their end of file may never come: the
/// pipes are read here, as the output arrives, and once the command has exited what they
/// still hold is taken at once (the command's writes are all in them by then). No time is
/// guessed for that: reader threads given a fixed moment after the exit lost the output of a
/// `kubelet --version` on a loaded machine, whose preflight then refused the binary.
fn run_captured(cmd: &mut Command, timeout: Duration) -> Result<(bool, String), String> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| e.to_string())?;
    let mut pipes: Vec<File> = vec![
        OwnedFd::from(child.stdout.take().expect("piped")).into(),
        OwnedFd::from(child.stderr.take().expect("piped")).into(),
    ];
    let mut out = Vec::new();
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(st) = child.try_wait().map_err(|e| e.to_string())? {
            break st;
        }
        if Instant::now() > deadline {
            // SAFETY: kill(2) of the process group this child leads.
            unsafe { libc::kill(-(child.id() as i32), libc::SIGKILL) };
            let _ = child.wait();
            return Err(format!(
                "did not finish within {} s; killed",
                timeout.as_secs()
            ));
        }
        read_ready(&mut pipes, &mut out, Duration::from_millis(20)).map_err(|e| e.to_string())?;
    };
    drain(&pipes, &mut out).map_err(|e| e.to_string())?;
    Ok((status.success(), String::from_utf8_lossy(&out).into_owned()))
}

/// Waits up to `wait` for output on `pipes` and reads what one read of each ready pipe
/// gives; a pipe at its end of file is dropped from `pipes`. With no pipe left, just waits.
fn read_ready(pipes: &mut Vec<File>, out: &mut Vec<u8>, wait: Duration) -> std::io::Result<()> {
    if pipes.is_empty() {
        std::thread::sleep(wait);
        return Ok(());
    }
    let mut fds: Vec<libc::pollfd> = pipes
        .iter()
        .map(|p| libc::pollfd {
            fd: p.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    // SAFETY: `fds` is a valid array of `fds.len()` pollfd, over descriptors `pipes` owns.
    let n = unsafe {
        libc::poll(
            fds.as_mut_ptr(),
            fds.len() as libc::nfds_t,
            wait.as_millis() as i32,
        )
    };
    if n < 0 {
        let e = std::io::Error::last_os_error();
        return match e.kind() {
            std::io::ErrorKind::Interrupted => Ok(()),
            _ => Err(e),
        };
    }
    let mut eof = Vec::new();
    for (i, p) in fds.iter().enumerate() {
        if p.revents == 0 {
            continue;
        }
        let mut buf = [0u8; 65536];
        let mut f = &pipes[i];
        match f.read(&mut buf) {
            Ok(0) => eof.push(i),
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    for i in eof.into_iter().rev() {
        pipes.remove(i);
    }
    Ok(())
}

/// Takes what `pipes` hold now, without waiting for more: after the command's exit, all it
/// wrote. Bounded (by the largest pipe buffer Linux allows by default, fs.pipe-max-size)
/// against a daemon it left behind
/// that writes on and on.
fn drain(pipes: &[File], out: &mut Vec<u8>) -> std::io::Result<()> {
    const MAX_PIPE_BUFFER: usize = 1 << 20;
    for p in pipes {
        let mut fds = [libc::pollfd {
            fd: p.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        let mut taken = 0;
        let mut buf = [0u8; 65536];
        let mut f = p;
        while taken < MAX_PIPE_BUFFER {
            // SAFETY: one valid pollfd over a descriptor `pipes` owns; a zero timeout.
            let n = unsafe { libc::poll(fds.as_mut_ptr(), 1, 0) };
            if n < 0 {
                let e = std::io::Error::last_os_error();
                if e.kind() == std::io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            if n == 0 {
                break; // empty, and a writer still holds it: nothing more is there now
            }
            // readable (data, or the end of file): this read does not block
            match f.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    out.extend_from_slice(&buf[..n]);
                    taken += n;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}

impl NodeControl for SystemNode {
    fn stop_kubelet(&self) -> Result<(), NodeError> {
        run_shell(&self.stop_kubelet)
    }
    fn start_kubelet(&self) -> Result<(), NodeError> {
        run_shell(&self.start_kubelet)
    }
    fn stop_runtime(&self) -> Result<(), NodeError> {
        // cri-dockerd first: it is dockerd's client, as the kubelet is cri-dockerd's
        if let Some(c) = self
            .stop_cri_dockerd
            .as_ref()
            .filter(|_| self.cri_dockerd_switch.get())
        {
            run_shell(c)?;
        }
        run_shell(&self.stop_runtime)
    }
    fn start_runtime(&self) -> Result<(), NodeError> {
        run_shell(&self.start_runtime)?;
        match self
            .start_cri_dockerd
            .as_ref()
            .filter(|_| self.cri_dockerd_switch.get())
        {
            Some(c) => run_shell(c),
            None => Ok(()),
        }
    }
    fn switching_to_cri_dockerd(&self) {
        self.cri_dockerd_switch.set(true);
    }

    fn runtime_keeps_containers(
        &self,
        kind: RuntimeKind,
        endpoint: &str,
    ) -> Result<String, NodeError> {
        let runtime = kind.runtime();
        if runtime.containers_outlive_the_daemon() == ContainersOutlive::WithLiveRestore {
            return match runtime.ask_live_restore(endpoint) {
                LiveRestoreAnswer::On(evidence) => Ok(evidence),
                LiveRestoreAnswer::Off(why) => Err(NodeError::refused(why)),
                LiveRestoreAnswer::Unknown(why) => Err(NodeError::failure(why)),
            };
        }
        if self.runtime_commands_given {
            return Ok("the runtime's stop command was given (--stop-runtime): trusted, and the containers' pids are checked after it".into());
        }
        let cmd = format!("{} show -p KillMode {}", self.systemctl, self.runtime_unit);
        let (ok, out) = run_captured(Command::new("sh").arg("-c").arg(&cmd), COMMAND_TIMEOUT)
            .map_err(|e| NodeError::failure(format!("`{cmd}`: {e}")))?;
        let mode = out.trim().strip_prefix("KillMode=").map(str::to_string);
        match (ok, mode.as_deref()) {
            (true, Some("process" | "none")) => Ok(format!("unit {} has KillMode={}", self.runtime_unit, mode.unwrap_or_default())),
            (true, Some(m)) => Err(NodeError::refused(format!(
                "unit {} has KillMode={m}: stopping it kills every container; give it KillMode=process (a drop-in: [Service] KillMode=process) or pass --stop-runtime",
                self.runtime_unit
            ))),
            _ => Err(NodeError::failure(format!("cannot read the KillMode of unit {} (`{cmd}`: {}); pass --stop-runtime/--start-runtime on nodes without systemd", self.runtime_unit, out.trim()))),
        }
    }

    fn kubelet_pid(&self) -> Option<u32> {
        if let Some(f) = &self.kubelet_pidfile {
            let pid: u32 = std::fs::read_to_string(f).ok()?.trim().parse().ok()?;
            return self.pid_alive(pid).then_some(pid);
        }
        // Without a pid file, only the one process of that name: of several (a second node's
        // kubelet on the same machine, a containerized one beside the node's) the lowest pid
        // is a guess, and the window would stop, watch and judge another node's kubelet.
        match crate::node::pids_named(&self.proc_dir, &self.kubelet_process).as_slice() {
            [one] => Some(*one),
            _ => None,
        }
    }

    fn cmdline(&self, pid: u32) -> Option<Vec<String>> {
        crate::node::cmdline(&self.proc_dir, pid)
    }

    fn pid_alive(&self, pid: u32) -> bool {
        // A zombie has exited: only its parent has not reaped it yet.
        match std::fs::read_to_string(self.proc_dir.join(pid.to_string()).join("stat")) {
            Ok(s) => s
                .rfind(')')
                .and_then(|i| s[i + 1..].split_whitespace().next())
                .is_some_and(|state| state != "Z" && state != "X"),
            Err(_) => false,
        }
    }

    fn run_binary(&self, binary: &Path, args: &[String]) -> Result<(bool, String), NodeError> {
        run_captured(Command::new(binary).args(args), Duration::from_secs(30))
            .map_err(NodeError::failure)
    }

    fn healthy(&self, url: &str) -> bool {
        http_ok(url, Duration::from_secs(2))
    }
}

/// Whether `GET url` (plain `http://host:port/path`) answers 200.
pub fn http_ok(url: &str, timeout: Duration) -> bool {
    let Some(rest) = url.strip_prefix("http://") else {
        return false;
    };
    let (hostport, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let addr = if hostport.contains(':') {
        hostport.to_string()
    } else {
        format!("{hostport}:80")
    };
    let Ok(mut addrs) = std::net::ToSocketAddrs::to_socket_addrs(&addr) else {
        return false;
    };
    let Some(sa) = addrs.next() else {
        return false;
    };
    let Ok(mut s) = std::net::TcpStream::connect_timeout(&sa, timeout) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(timeout));
    let _ = s.set_write_timeout(Some(timeout));
    let req = format!("GET {path} HTTP/1.0\r\nHost: {hostport}\r\nConnection: close\r\n\r\n");
    if s.write_all(req.as_bytes()).is_err() {
        return false;
    }
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    text.lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .is_some_and(|code| code == "200")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_words_are_quoted() {
        assert_eq!(shell_quote("/host"), "'/host'");
        assert_eq!(shell_quote("a'b"), r"'a'\''b'");
    }

    #[test]
    fn a_command_that_leaves_a_daemon_behind_returns_when_it_exits() {
        let t0 = Instant::now();
        let (ok, out) = run_captured(
            Command::new("sh").arg("-c").arg("sleep 5 & echo started"),
            Duration::from_secs(10),
        )
        .unwrap();
        assert!(ok);
        assert!(out.contains("started"), "{out}");
        assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    }

    #[test]
    fn all_a_command_printed_before_it_exited_is_kept_on_a_busy_machine() {
        // CPU hogs on every core, so a reader thread may not run for a while after the exit:
        // the output must come from the pipe itself then (CI saw `kubelet --version` print
        // nothing with a fixed 30 ms grace while Kubernetes builds ran beside the tests).
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        let hogs: Vec<_> = (0..cores * 4)
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut x = 0u64;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                    }
                    x
                })
            })
            .collect();
        let mut missed = 0;
        for _ in 0..40 {
            let (ok, out) = run_captured(
                Command::new("sh").arg("-c").arg("echo Kubernetes v1.31.0"),
                Duration::from_secs(30),
            )
            .unwrap();
            assert!(ok);
            if out.trim() != "Kubernetes v1.31.0" {
                missed += 1;
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for h in hogs {
            h.join().unwrap();
        }
        assert_eq!(missed, 0, "runs whose output was lost");
    }

    fn fake_systemctl(dir: &Path, out: &str, code: i32) -> SystemNode {
        use std::os::unix::fs::PermissionsExt;
        let script = dir.join("systemctl");
        std::fs::write(&script, format!("#!/bin/sh\necho '{out}'\nexit {code}\n")).unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        SystemNode {
            systemctl: script.display().to_string(),
            ..SystemNode::systemd(RuntimeKind::Containerd, None)
        }
    }

    #[test]
    fn a_docker_node_switching_to_cri_dockerd_stops_and_starts_its_units_around_dockerd() {
        let t = tempfile::tempdir().unwrap();
        let log = t.path().join("log");
        let n = SystemNode::systemd(RuntimeKind::Docker, None);
        assert_eq!(
            n.stop_cri_dockerd.as_deref(),
            Some("systemctl stop cri-docker.socket cri-docker.service")
        );
        assert_eq!(
            n.start_cri_dockerd.as_deref(),
            Some("systemctl start cri-docker.socket cri-docker.service")
        );
        let echo = |w: &str| format!("echo {w} >> {}", shell_quote(&log.display().to_string()));
        let n = SystemNode {
            stop_runtime: echo("stop-docker"),
            start_runtime: echo("start-docker"),
            stop_cri_dockerd: Some(echo("stop-cri-dockerd")),
            start_cri_dockerd: Some(echo("start-cri-dockerd")),
            ..n
        };
        let ran = || std::fs::read_to_string(&log).unwrap_or_default();
        n.stop_runtime().unwrap();
        n.start_runtime().unwrap();
        assert_eq!(
            ran(),
            "stop-docker\nstart-docker\n",
            "no switch: dockerd alone"
        );
        std::fs::remove_file(&log).unwrap();
        n.switching_to_cri_dockerd();
        n.stop_runtime().unwrap();
        n.start_runtime().unwrap();
        assert_eq!(
            ran(),
            "stop-cri-dockerd\nstop-docker\nstart-docker\nstart-cri-dockerd\n"
        );
        assert!(SystemNode::systemd(RuntimeKind::Containerd, None)
            .stop_cri_dockerd
            .is_none());
    }

    #[test]
    fn the_runtime_unit_kill_mode_decides() {
        let t = tempfile::tempdir().unwrap();
        let n = fake_systemctl(t.path(), "KillMode=process", 0);
        assert!(n
            .runtime_keeps_containers(RuntimeKind::Containerd, "")
            .is_ok());
        let n = fake_systemctl(t.path(), "KillMode=none", 0);
        assert!(n.runtime_keeps_containers(RuntimeKind::Crio, "").is_ok());
        let n = fake_systemctl(t.path(), "KillMode=control-group", 0);
        let e = n
            .runtime_keeps_containers(RuntimeKind::Containerd, "")
            .unwrap_err();
        assert!(
            e.message().contains("control-group") && e.message().contains("kills every container"),
            "{e}"
        );
        let n = fake_systemctl(t.path(), "Failed to connect to bus", 1);
        let e = n
            .runtime_keeps_containers(RuntimeKind::Containerd, "")
            .unwrap_err();
        assert!(e.message().contains("--stop-runtime"), "{e}");
        // an operator's stop command is trusted (the window checks the pids after it)
        let mut n = fake_systemctl(t.path(), "KillMode=control-group", 0);
        n.runtime_commands_given = true;
        assert!(n
            .runtime_keeps_containers(RuntimeKind::Containerd, "")
            .is_ok());
        // Docker: only dockerd's own live-restore counts, whatever stops it
        let e = n
            .runtime_keeps_containers(
                RuntimeKind::Docker,
                &format!("unix://{}/none.sock", t.path().display()),
            )
            .unwrap_err();
        assert!(e.message().contains("live-restore"), "{e}");
    }

    #[test]
    fn healthz_is_a_200() {
        for (status, want) in [("200 OK", true), ("500 Internal Server Error", false)] {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let url = format!("http://{}/healthz", l.local_addr().unwrap());
            let server = std::thread::spawn(move || {
                let (mut s, _) = l.accept().unwrap();
                let mut buf = [0u8; 1024];
                let n = s.read(&mut buf).unwrap();
                assert!(String::from_utf8_lossy(&buf[..n]).starts_with("GET /healthz HTTP/1.0"));
                s.write_all(format!("HTTP/1.1 {status}\r\nContent-Length: 2\r\n\r\nok").as_bytes())
                    .unwrap();
            });
            assert_eq!(http_ok(&url, Duration::from_secs(5)), want, "{status}");
            server.join().unwrap();
        }
        assert!(!http_ok(
            "http://127.0.0.1:1/healthz",
            Duration::from_secs(1)
        ));
        assert!(!http_ok(
            "https://127.0.0.1/healthz",
            Duration::from_secs(1)
        ));
    }

    #[test]
    fn a_zombie_is_not_alive_and_the_pidfile_names_the_kubelet() {
        let n = SystemNode::systemd(RuntimeKind::Containerd, None);
        assert!(n.pid_alive(std::process::id()));
        let mut child = Command::new("true").spawn().unwrap();
        let pid = child.id();
        // not reaped yet: a zombie
        std::thread::sleep(Duration::from_millis(300));
        assert!(!n.pid_alive(pid), "a zombie has exited");
        child.wait().unwrap();
        let t = tempfile::tempdir().unwrap();
        let pidfile = t.path().join("kubelet.pid");
        std::fs::write(&pidfile, format!("{}\n", std::process::id())).unwrap();
        let n = SystemNode {
            kubelet_pidfile: Some(pidfile),
            ..n
        };
        assert_eq!(n.kubelet_pid(), Some(std::process::id()));
        assert!(n.cmdline(std::process::id()).is_some_and(|a| !a.is_empty()));
    }

    /// A /proc with a process named `kubelet` at each of `pids`.
    fn proc_with_kubelets(pids: &[u32]) -> tempfile::TempDir {
        let t = tempfile::tempdir().unwrap();
        for pid in pids {
            let d = t.path().join(pid.to_string());
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("comm"), "kubelet\n").unwrap();
        }
        t
    }

    #[test]
    fn without_a_pidfile_only_a_single_kubelet_is_the_nodes() {
        let one = proc_with_kubelets(&[4242]);
        let n = SystemNode {
            proc_dir: one.path().to_path_buf(),
            ..SystemNode::systemd(RuntimeKind::Containerd, None)
        };
        assert_eq!(n.kubelet_pid(), Some(4242), "the one kubelet is the node's");
        let two = proc_with_kubelets(&[4242, 5151]);
        let n = SystemNode {
            proc_dir: two.path().to_path_buf(),
            ..SystemNode::systemd(RuntimeKind::Containerd, None)
        };
        assert_eq!(
            n.kubelet_pid(),
            None,
            "of two kubelets neither is taken for the node's without a pid file"
        );
    }

    #[test]
    fn all_the_output_written_before_the_exit_is_taken_though_a_daemon_holds_the_pipes() {
        let t0 = Instant::now();
        let (ok, out) = run_captured(
            Command::new("sh")
                .arg("-c")
                .arg("sleep 5 & head -c 300000 /dev/zero | tr '\\0' a; echo end >&2"),
            Duration::from_secs(10),
        )
        .unwrap();
        assert!(ok);
        assert_eq!(out.len(), 300_004, "every byte, through the pipes' buffers");
        assert_eq!(out.bytes().filter(|b| *b == b'a').count(), 300_000);
        assert!(out.ends_with("end\n"), "both streams");
        assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    }

    /// What a pipe holds when the command has exited is taken at once and in full, however
    /// late this thread gets to it, and without waiting for an end of file that a writer
    /// left behind (here: this test's write end, still open) holds off.
    #[test]
    fn what_the_pipes_hold_at_the_exit_is_drained_without_waiting() {
        let (r, mut w) = std::io::pipe().unwrap();
        let data = vec![b'x'; 60_000];
        w.write_all(&data).unwrap();
        w.write_all(b"Kubernetes v1.31.0\n").unwrap();
        let pipes = [File::from(OwnedFd::from(r))];
        let mut out = Vec::new();
        let t0 = Instant::now();
        drain(&pipes, &mut out).unwrap();
        assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
        assert_eq!(out.len(), 60_019);
        assert!(out.ends_with(b"Kubernetes v1.31.0\n"));
        // nothing more, the writer still open: returns, empty
        let mut more = Vec::new();
        drain(&pipes, &mut more).unwrap();
        assert!(more.is_empty());
        drop(w);
    }

    #[test]
    fn a_hanging_command_is_killed() {
        let r = run_captured(
            Command::new("sh").arg("-c").arg("sleep 30"),
            Duration::from_millis(300),
        );
        assert!(r.unwrap_err().contains("killed"));
    }
}
