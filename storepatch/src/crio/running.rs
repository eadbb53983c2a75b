//! Is CRI-O running? It takes no lock and writes no pid file by itself: its socket accepting a
//! connection, or a configured pid file naming a live process whose `comm` is `crio`.

use crate::StoreError;
use std::fs;
use std::path::Path;

/// `Err(StoreError::RuntimeRunning)` with the evidence when CRI-O runs; a refusal when it
/// cannot tell (the socket answers with another error, the pid file holds no pid).
/// `proc` is the procfs of CRI-O's pid namespace (the node's under a host root; see
/// [`crate::node::procfs`]).
pub(super) fn ensure_stopped(
    socket: &Path,
    pidfile: Option<&Path>,
    proc: &Path,
) -> Result<(), StoreError> {
    match std::os::unix::net::UnixStream::connect(socket) {
        Ok(_) => {
            return Err(StoreError::RuntimeRunning {
                runtime: "crio",
                evidence: format!("{} accepts connections", socket.display()),
            })
        }
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
            ) => {}
        Err(e) => {
            return Err(StoreError::Refused(format!(
                "cannot tell whether CRI-O runs: connecting to {} failed ({e})",
                socket.display()
            )))
        }
    }
    if let Some(pidfile) = pidfile {
        let text = match fs::read_to_string(pidfile) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(StoreError::io(pidfile, e)),
        };
        let pid: u32 = text.trim().parse().map_err(|_| {
            StoreError::Refused(format!(
                "pid file {} holds {:?}, not a pid; cannot tell whether CRI-O runs",
                pidfile.display(),
                text.trim()
            ))
        })?;
        let comm_file = crate::node::procfs(proc).join(pid.to_string()).join("comm");
        if let Ok(comm) = fs::read_to_string(comm_file) {
            if comm.trim() == "crio" {
                return Err(StoreError::RuntimeRunning {
                    runtime: "crio",
                    evidence: format!(
                        "pid {pid} from {} is a live crio process",
                        pidfile.display()
                    ),
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nodes_procfs_answers_for_the_pid_file() {
        let d = tempfile::tempdir().unwrap();
        let sock = d.path().join("crio.sock");
        let pidfile = d.path().join("crio.pid");
        // No process of ours has this pid; on the node it is crio.
        let pid = "2147483000";
        std::fs::write(&pidfile, pid).unwrap();
        let node_proc = d.path().join("proc");
        std::fs::create_dir_all(node_proc.join("1")).unwrap();
        std::fs::create_dir_all(node_proc.join(pid)).unwrap();
        std::fs::write(node_proc.join(pid).join("comm"), "crio\n").unwrap();
        assert!(ensure_stopped(&sock, Some(&pidfile), Path::new("/proc")).is_ok());
        let e = ensure_stopped(&sock, Some(&pidfile), &node_proc).unwrap_err();
        assert!(matches!(e, StoreError::RuntimeRunning { .. }), "{e}");
        std::fs::write(node_proc.join(pid).join("comm"), "sleep\n").unwrap();
        assert!(ensure_stopped(&sock, Some(&pidfile), &node_proc).is_ok());
    }
}
