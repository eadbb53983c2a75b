//! Is dockerd running, and will stopping it keep the containers (`live-restore`)?

use crate::node::procfs;
use std::fs;
use std::io::ErrorKind;
use std::os::unix::net::UnixStream;
use std::path::Path;

/// Evidence that dockerd runs now, or `None`.
///
/// * the pidfile names a live process (dockerd removes its pidfile on a clean exit; a stale
///   pidfile whose pid is gone does not count), or
/// * the API socket accepts a connection (a leftover socket file nobody listens on does not
///   count).
///
/// `proc` is the procfs of the pid namespace the pidfile's pid belongs to (see [`procfs`]).
pub fn dockerd_running(pidfile: &Path, socket: &Path, proc: &Path) -> Option<String> {
    if let Some(pid) = read_pid(pidfile) {
        if process_alive(proc, pid) {
            let comm = fs::read_to_string(procfs(proc).join(pid.to_string()).join("comm"))
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "?".into());
            return Some(format!(
                "pidfile {} names live process {pid} ({comm})",
                pidfile.display()
            ));
        }
    }
    match UnixStream::connect(socket) {
        Ok(_) => Some(format!("socket {} accepts connections", socket.display())),
        Err(_) => None,
    }
}

fn read_pid(pidfile: &Path) -> Option<i32> {
    let text = fs::read_to_string(pidfile).ok()?;
    let pid: i32 = text.trim().parse().ok()?;
    (pid > 0).then_some(pid)
}

/// The pid of the live process the pidfile names, if any (`proc` as for [`dockerd_running`]).
pub fn live_pid(pidfile: &Path, proc: &Path) -> Option<i32> {
    read_pid(pidfile).filter(|&p| process_alive(proc, p))
}

/// Whether `pid` is a live process. A node's procfs is asked by its directory: the pid
/// belongs to the node's pid namespace, which need not be ours, so signalling it would ask
/// about some other process.
fn process_alive(proc: &Path, pid: i32) -> bool {
    let proc = procfs(proc);
    if proc != Path::new("/proc") {
        return proc.join(pid.to_string()).is_dir();
    }
    // SAFETY: signal 0 only checks for existence and permission.
    let rc = unsafe { libc::kill(pid, 0) };
    if rc == 0 {
        return true;
    }
    std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// What we know about dockerd's `live-restore` setting.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case", tag = "state", content = "source")]
pub enum LiveRestore {
    /// On; the string says where we learned it.
    On(String),
    /// Off; the string says where we learned it.
    Off(String),
    /// Could not be determined; the string says why.
    Unknown(String),
}

impl LiveRestore {
    /// Whether live-restore is known to be on.
    pub fn is_on(&self) -> bool {
        matches!(self, LiveRestore::On(_))
    }

    /// The loud warning a plan must carry when live-restore is not known to be on.
    pub fn hazard(&self) -> Option<crate::Hazard> {
        match self {
            LiveRestore::On(_) => None,
            // The pre-check refuses the patch on a known "off": block.
            LiveRestore::Off(src) => Some(crate::Hazard::block("docker-live-restore-off", format!(
                "DANGER: dockerd live-restore is OFF ({src}): stopping dockerd KILLS EVERY CONTAINER on this node, and the rewritten hashes then protect nothing. Enable \"live-restore\": true in daemon.json and reload dockerd (SIGHUP) before stopping it"
            ))),
            LiveRestore::Unknown(why) => Some(crate::Hazard::warn("docker-live-restore-unknown", format!(
                "DANGER: cannot tell whether dockerd live-restore is on ({why}): without it stopping dockerd KILLS EVERY CONTAINER. Check it (docker info: Live Restore Enabled) before stopping dockerd"
            ))),
        }
    }
}

/// No setting anywhere means dockerd's default, off — but only a running dockerd's command
/// line proves no `--live-restore` flag was given. With dockerd stopped (as during a patch)
/// the flag may live in a unit file we do not read: unknown, not off.
fn default_off(cmdline_read: bool, why: String) -> LiveRestore {
    if cmdline_read {
        LiveRestore::Off(format!(
            "{why} and the running dockerd has no --live-restore flag: dockerd's default is off"
        ))
    } else {
        LiveRestore::Unknown(format!(
            "{why}; dockerd's default is off unless it is started with --live-restore (say so with the live-restore option)"
        ))
    }
}

/// Works out `live-restore`: an explicit flag value wins, then the command line of the running
/// dockerd (from the pidfile, looked up in `proc` as for [`dockerd_running`]), then
/// `daemon.json` (absent key or file: dockerd's default, off). A `--config-file` on that
/// command line is a node path: it is resolved inside `host`.
pub fn live_restore(
    flag: Option<bool>,
    pidfile: &Path,
    daemon_json: &Path,
    proc: &Path,
    host: &crate::node::HostRoot,
) -> LiveRestore {
    if let Some(on) = flag {
        let src = "as given on the command line".to_string();
        return if on {
            LiveRestore::On(src)
        } else {
            LiveRestore::Off(src)
        };
    }
    let mut from_cmdline = None;
    let mut cmdline_read = false;
    let mut config_file = daemon_json.to_path_buf();
    let mut from_flag = false;
    if let Some(pid) = live_pid(pidfile, proc) {
        if let Ok(raw) = fs::read(procfs(proc).join(pid.to_string()).join("cmdline")) {
            cmdline_read = true;
            let args: Vec<String> = raw
                .split(|&b| b == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            let mut it = args.iter().peekable();
            while let Some(a) = it.next() {
                match a.as_str() {
                    "--live-restore" | "--live-restore=true" => from_cmdline = Some(true),
                    "--live-restore=false" => from_cmdline = Some(false),
                    "--config-file" => {
                        if let Some(p) = it.peek() {
                            config_file = p.into();
                            from_flag = true;
                        }
                    }
                    s if s.starts_with("--config-file=") => {
                        config_file = s["--config-file=".len()..].into();
                        from_flag = true;
                    }
                    _ => {}
                }
            }
            if from_flag {
                match host.resolve(&config_file) {
                    Ok(p) => config_file = p,
                    Err(e) => {
                        return LiveRestore::Unknown(format!(
                            "the running dockerd's --config-file {}: {e}",
                            config_file.display()
                        ))
                    }
                }
            }
            if let Some(on) = from_cmdline {
                let src = format!("command line of running dockerd pid {pid}");
                return if on {
                    LiveRestore::On(src)
                } else {
                    LiveRestore::Off(src)
                };
            }
        }
    }
    match fs::read(&config_file) {
        Ok(bytes) => match serde_json::from_slice::<serde_json::Value>(&bytes) {
            Ok(v) => match v.get("live-restore") {
                Some(serde_json::Value::Bool(true)) => {
                    LiveRestore::On(format!("{}", config_file.display()))
                }
                Some(serde_json::Value::Bool(false)) => LiveRestore::Off(format!(
                    "{} sets \"live-restore\": false",
                    config_file.display()
                )),
                None => default_off(
                    cmdline_read,
                    format!("{} has no \"live-restore\" key", config_file.display()),
                ),
                Some(other) => LiveRestore::Unknown(format!(
                    "{}: \"live-restore\" is {other}, not a boolean",
                    config_file.display()
                )),
            },
            Err(e) => {
                LiveRestore::Unknown(format!("{} is not valid JSON: {e}", config_file.display()))
            }
        },
        Err(e) if e.kind() == ErrorKind::NotFound => default_off(
            cmdline_read,
            format!("{} does not exist", config_file.display()),
        ),
        Err(e) => LiveRestore::Unknown(format!("cannot read {}: {e}", config_file.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::node::HostRoot;

    fn own() -> &'static Path {
        Path::new("/proc")
    }

    #[test]
    fn a_nodes_procfs_answers_for_the_nodes_pids() {
        let d = tempfile::tempdir().unwrap();
        let pf = d.path().join("docker.pid");
        let sock = d.path().join("docker.sock");
        let dj = d.path().join("daemon.json");
        // A pid no process of ours has, alive in the node's pid namespace only.
        let pid = "2147483000";
        fs::write(&pf, pid).unwrap();
        let node_proc = d.path().join("proc");
        fs::create_dir_all(node_proc.join("1")).unwrap();
        fs::create_dir_all(node_proc.join(pid)).unwrap();
        fs::write(node_proc.join(pid).join("comm"), "dockerd\n").unwrap();
        fs::write(
            node_proc.join(pid).join("cmdline"),
            b"dockerd\0--live-restore\0",
        )
        .unwrap();
        assert_eq!(dockerd_running(&pf, &sock, own()), None, "not alive here");
        let ev = dockerd_running(&pf, &sock, &node_proc).expect("alive on the node");
        assert!(ev.contains("(dockerd)"), "{ev}");
        assert!(
            matches!(live_restore(None, &pf, &dj, &node_proc, &HostRoot::none()), LiveRestore::On(s) if s.contains("command line"))
        );
        // A --config-file on the node's command line is the node's file.
        let host = d.path().join("host");
        fs::create_dir_all(host.join("etc")).unwrap();
        fs::write(host.join("etc/dockerd.json"), br#"{"live-restore": true}"#).unwrap();
        fs::write(
            node_proc.join(pid).join("cmdline"),
            b"dockerd\0--config-file=/etc/dockerd.json\0",
        )
        .unwrap();
        let host = HostRoot::new(&host).unwrap();
        let lr = live_restore(None, &pf, &dj, &node_proc, &host);
        assert!(
            matches!(&lr, LiveRestore::On(s) if s.contains("host/etc/dockerd.json")),
            "{lr:?}"
        );
        let lr = live_restore(None, &pf, &dj, &node_proc, &HostRoot::none());
        assert!(!lr.is_on(), "this machine has no /etc/dockerd.json: {lr:?}");
        // A directory that is no procfs (the node's / mounted without its /proc) is not
        // trusted to say "not running": ours is asked, as on the node itself.
        fs::remove_dir(node_proc.join("1")).unwrap();
        assert_eq!(procfs(&node_proc), Path::new("/proc"));
        assert_eq!(dockerd_running(&pf, &sock, &node_proc), None);
    }

    #[test]
    fn live_restore_sources() {
        let d = tempfile::tempdir().unwrap();
        let pf = d.path().join("none.pid");
        let dj = d.path().join("daemon.json");
        // dockerd stopped and no daemon.json: its unit file may pass --live-restore.
        assert!(
            matches!(
                live_restore(None, &pf, &dj, own(), &HostRoot::none()),
                LiveRestore::Unknown(_)
            ),
            "no setting and no running dockerd is unknown, not off"
        );
        fs::write(
            &dj,
            br#"{"live-restore": true, "storage-driver": "overlay2"}"#,
        )
        .unwrap();
        assert!(live_restore(None, &pf, &dj, own(), &HostRoot::none()).is_on());
        assert!(matches!(
            live_restore(Some(false), &pf, &dj, own(), &HostRoot::none()),
            LiveRestore::Off(_)
        ));
        fs::write(&dj, br#"{"live-restore": "yes"}"#).unwrap();
        assert!(matches!(
            live_restore(None, &pf, &dj, own(), &HostRoot::none()),
            LiveRestore::Unknown(_)
        ));
        fs::write(&dj, b"{not json").unwrap();
        let lr = live_restore(None, &pf, &dj, own(), &HostRoot::none());
        assert!(matches!(lr, LiveRestore::Unknown(_)));
        let w = lr.hazard().unwrap();
        assert_eq!(w.code, "docker-live-restore-unknown");
        assert!(w.message.contains("KILLS EVERY CONTAINER"));
        fs::write(&dj, br#"{}"#).unwrap();
        assert!(matches!(
            live_restore(None, &pf, &dj, own(), &HostRoot::none()),
            LiveRestore::Unknown(_)
        ));
        fs::write(&dj, br#"{"live-restore": false}"#).unwrap();
        let w = live_restore(None, &pf, &dj, own(), &HostRoot::none())
            .hazard()
            .unwrap();
        assert_eq!(
            (w.code.as_str(), w.severity),
            ("docker-live-restore-off", crate::Severity::Block)
        );
        assert!(w.message.contains("live-restore is OFF"));
        // A running process's command line without the flag proves the default (off). Our
        // own test process stands in for dockerd: its command line has no --live-restore.
        fs::write(&pf, std::process::id().to_string()).unwrap();
        fs::write(&dj, br#"{}"#).unwrap();
        assert!(
            matches!(
                live_restore(None, &pf, &dj, own(), &HostRoot::none()),
                LiveRestore::Off(_)
            ),
            "a read command line without the flag and no key is off"
        );
    }

    #[test]
    fn running_detection() {
        let d = tempfile::tempdir().unwrap();
        let pf = d.path().join("docker.pid");
        let sock = d.path().join("docker.sock");
        assert_eq!(dockerd_running(&pf, &sock, own()), None, "nothing there");
        // A stale pidfile (no such process) does not count.
        fs::write(&pf, b"2147483000\n").unwrap();
        assert_eq!(dockerd_running(&pf, &sock, own()), None);
        fs::write(&pf, format!("{}", std::process::id())).unwrap();
        let ev = dockerd_running(&pf, &sock, own()).unwrap();
        assert!(ev.contains("live process"), "{ev}");
        fs::remove_file(&pf).unwrap();
        let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let ev = dockerd_running(&pf, &sock, own()).unwrap();
        assert!(ev.contains("accepts"), "{ev}");
        drop(listener);
        assert_eq!(
            dockerd_running(&pf, &sock, own()),
            None,
            "leftover socket file does not count"
        );
    }
}
