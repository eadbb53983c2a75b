//! Is CRI-O running? It takes no lock and writes no pid file by itself: its socket accepting a
//! connection, or a configured pid file naming a live process whose `comm` is `crio`.

use crate::StoreError;
use std::fs;
use std::path::Path;

/// `Err(StoreError::RuntimeRunning)` with the evidence when CRI-O runs; a refusal when it
/// cannot tell (the socket answers with another error, the pid file holds no pid).
pub(super) fn ensure_stopped(socket: &Path, pidfile: Option<&Path>) -> Result<(), StoreError> {
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
        if let Ok(comm) = fs::read_to_string(format!("/proc/{pid}/comm")) {
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
