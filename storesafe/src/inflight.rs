//! In-flight markers: one small file per store, written durably before a run's first write to
//! the store and removed when the run has finished, so that the next run on that store knows
//! that an earlier one was killed half-way, which backup it wrote, and the one command that
//! finishes or undoes it.
//!
//! # Why a marker, and where it lives
//!
//! A killed `patch` leaves a store whose files hold their original or their patched bytes, and
//! a backup whose manifest may not record every new sha256 yet (a bolt commit just before the
//! kill). Without a marker the next `patch` would plan on the half-patched store and its
//! `rollback` would refuse the unrecorded file. With it, the next `patch` refuses (naming
//! `kubelet-rehash rollback --backup-dir DIR`), and that rollback knows the run that backup
//! belongs to was interrupted, so a file whose new bytes were never recorded is the run's own
//! write ([`Marker::backup_dir`] names exactly the backup whose files it was writing).
//!
//! `/var/lib/kubelet-rehash/inflight/<sha256 of the canonical store root>.json` (see
//! [`state_dir`] for unprivileged runs and `KUBELET_REHASH_STATE_DIR`):
//! - on the node's disk, not in `/run` like the locks: a power cut is a kill too, and the
//!   marker must outlive the reboot that follows;
//! - not in the store root (a foreign file in the runtime's data, see [`crate::lock`]) and
//!   not in the backup directory (the next run does not know which backup to look in);
//! - keyed by the store root's canonical path, and the marker records that path and is only
//!   taken for its store when they are equal: device and inode alone are reused (a store
//!   copied into a fresh temp dir may get the inode of a removed one), and a marker must never
//!   stop a run on another store.
//!
//! Markers are read and written only under the store's [`crate::lock::StoreLock`], so a
//! marker found is always one of a run that is gone (or an earlier call of this process).

use crate::atomic::{self, FileMeta};
use crate::error::StoreError;
use serde::{Deserialize, Serialize};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Where root's in-flight markers are.
pub const STATE_DIR: &str = "/var/lib/kubelet-rehash/inflight";

/// The environment variable that moves the markers (tests, or a node whose `/var/lib` is
/// read-only; a container with the node's `/` at a host root sets it to a path inside it).
pub const STATE_DIR_ENV: &str = "KUBELET_REHASH_STATE_DIR";

/// Where this run keeps its markers: `$KUBELET_REHASH_STATE_DIR` when set; [`STATE_DIR`] for
/// root; otherwise a directory of the invoking user's (`$XDG_STATE_HOME/kubelet-rehash/inflight`
/// or `/tmp/kubelet-rehash-<uid>/inflight`, beside the lock directory of [`crate::lock`]),
/// because an unprivileged run (the demo, a copy of a store) cannot create
/// `/var/lib/kubelet-rehash`.
pub fn state_dir() -> PathBuf {
    crate::lock::per_user_dir(STATE_DIR_ENV, STATE_DIR, "XDG_STATE_HOME", "inflight")
}

/// What the interrupted run was doing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Operation {
    /// `patch`: writing the store after committing the backup.
    Patch,
    /// `rollback`: restoring the backup's bytes.
    Rollback,
    /// `rollback --values`: writing the previous hash values back.
    RollbackValues,
}

/// The marker's format.
const FORMAT: u32 = 1;

/// One run in flight on one store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Marker {
    /// Marker format.
    pub format: u32,
    /// What the run was doing.
    pub operation: Operation,
    /// The runtime of the store (`docker`, `containerd`, `crio`).
    pub runtime: String,
    /// The store root, canonical: a marker is this store's only when this is its canonical
    /// root.
    pub store_root: PathBuf,
    /// The backup the run wrote (patch) or restores (rollback), canonical.
    pub backup_dir: PathBuf,
    /// The run's pid.
    pub pid: u32,
    /// When it started (seconds since the epoch).
    pub started_unix: u64,
    /// The kubelet-rehash version that wrote it.
    pub tool_version: String,
}

impl Marker {
    /// The one command that finishes (an interrupted rollback) or undoes (an interrupted
    /// patch) this run.
    pub fn command(&self) -> String {
        let values = if self.operation == Operation::RollbackValues {
            "--values "
        } else {
            ""
        };
        format!(
            "kubelet-rehash rollback {values}--backup-dir {}",
            self.backup_dir.display()
        )
    }

    /// Whether the run can have written the store: its backup's manifest is committed before
    /// a patch's first write (and a rollback reads it before its first).
    pub fn may_have_written(&self) -> bool {
        self.backup_dir.join(crate::backup::MANIFEST_NAME).exists()
    }

    /// The refusal a run that finds this marker gives: what was interrupted and the one
    /// command to run.
    pub fn refusal(&self, marker_path: &Path) -> StoreError {
        let (what, then) = match self.operation {
            Operation::Patch => (
                "patch",
                "undoes it (restores every original byte, also of files the killed run wrote without recording them), then patch again",
            ),
            Operation::Rollback => ("rollback", "finishes it"),
            Operation::RollbackValues => ("value rollback", "finishes it"),
        };
        StoreError::Refused(format!(
            "an interrupted {what} of the {} store at {} (pid {}, started at unix time {}) did not finish, nothing was written now: `{}` {then} (marker {})",
            self.runtime,
            self.store_root.display(),
            self.pid,
            self.started_unix,
            self.command(),
            marker_path.display()
        ))
    }
}

/// A store root's canonical path.
fn canonical(root: &Path) -> Result<PathBuf, StoreError> {
    std::fs::canonicalize(root).map_err(|e| StoreError::io(root, e))
}

/// The marker file a run on the store at `root` writes (whether or not it is there).
pub fn marker_file(root: &Path) -> Result<PathBuf, StoreError> {
    marker_file_in(&state_dir(), root)
}

/// Where the marker of the store at `root` is, in the state directory `state_dir`.
pub fn marker_file_in(state_dir: &Path, root: &Path) -> Result<PathBuf, StoreError> {
    Ok(marker_path(state_dir, &canonical(root)?))
}

/// The marker file, in `state_dir`, of the store whose canonical root is `root`.
fn marker_path(state_dir: &Path, root: &Path) -> PathBuf {
    let key = crate::backup::sha256_hex(root.as_os_str().as_bytes());
    state_dir.join(format!("{}.json", &key[..32]))
}

/// Refuses a state directory or marker that anyone but this user (or root) could have put
/// there, or swapped through a directory above it ([`crate::trust`]): a forged marker could
/// point a rollback's override at a backup of its choosing, and a moved-away one would drop
/// the "undo the interrupted run first" protection.
fn ensure_trusted(path: &Path, meta: &std::fs::Metadata) -> Result<(), StoreError> {
    crate::trust::owner_and_mode(path, meta.uid(), meta.permissions().mode())
        .and_then(|()| crate::trust::parents(path))
        .map_err(|why| {
            StoreError::Refused(format!(
                "{why}: an in-flight marker there proves nothing; use a state directory only root can write"
            ))
        })
}

/// The marker of the store at `root`, if one is there and names that store (a marker of
/// another path is no marker of this store).
pub fn find(state_dir: &Path, root: &Path) -> Result<Option<(PathBuf, Marker)>, StoreError> {
    let root = canonical(root)?;
    let path = marker_path(state_dir, &root);
    // What is at the marker's place decides before anything is opened: nothing (no run is
    // interrupted), a regular file (read and checked), or something no run of ours leaves
    // there (refused, exit 3, naming it: a symlink could point the check elsewhere).
    let meta = match std::fs::symlink_metadata(&path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => {
            return Err(StoreError::Refused(format!(
                "the in-flight state directory {} is not a directory; no interrupted run can be checked (remove it, or set {STATE_DIR_ENV})",
                state_dir.display()
            )))
        }
        Err(e) => return Err(StoreError::io(&path, e)),
    };
    if !meta.file_type().is_file() {
        return Err(StoreError::Refused(format!(
            "{} is {}, not an in-flight marker file; no run of kubelet-rehash leaves that there: remove it",
            path.display(),
            if meta.file_type().is_symlink() {
                "a symbolic link"
            } else if meta.is_dir() {
                "a directory"
            } else {
                "a special file"
            }
        )));
    }
    ensure_trusted(&path, &meta)?;
    let (bytes, _) = atomic::read_regular_nofollow(&path)?;
    let marker: Marker = serde_json::from_slice(&bytes).map_err(|e| {
        StoreError::Refused(format!(
            "{}: not an in-flight marker this kubelet-rehash reads ({e}); remove it if no run of kubelet-rehash is interrupted on {}",
            path.display(),
            root.display()
        ))
    })?;
    if marker.store_root != root {
        return Ok(None);
    }
    Ok(Some((path, marker)))
}

/// Writes the marker of a run on the store at `root` (temp + fsync + rename + directory
/// fsync) before its first write; returns the marker file. `backup_dir` must exist.
pub fn begin(
    state_dir: &Path,
    operation: Operation,
    runtime: &str,
    root: &Path,
    backup_dir: &Path,
) -> Result<PathBuf, StoreError> {
    let root = canonical(root)?;
    let dir = state_dir;
    atomic::create_dir_all_private(dir)?;
    let dmeta = std::fs::symlink_metadata(dir).map_err(|e| StoreError::io(dir, e))?;
    if !dmeta.is_dir() {
        return Err(StoreError::Refused(format!(
            "{} is not a directory",
            dir.display()
        )));
    }
    ensure_trusted(dir, &dmeta)?;
    // temps of killed runs' marker writes
    atomic::sweep_stale_temps(dir, 1)?;
    let marker = Marker {
        format: FORMAT,
        operation,
        runtime: runtime.to_string(),
        store_root: root.clone(),
        backup_dir: canonical(backup_dir)?,
        pid: std::process::id(),
        started_unix: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
    };
    let bytes = serde_json::to_vec_pretty(&marker)
        .map_err(|e| StoreError::Refused(format!("cannot encode the in-flight marker: {e}")))?;
    let path = marker_path(dir, &root);
    atomic::replace_file(&path, &bytes, FileMeta::private())?;
    Ok(path)
}

/// Removes a marker (the run finished), durably.
pub fn end(marker_path: &Path) -> Result<(), StoreError> {
    match std::fs::remove_file(marker_path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(StoreError::io(marker_path, e)),
    }
    if let Some(parent) = marker_path.parent() {
        atomic::sync_dir(parent)?;
    }
    Ok(())
}

/// Whether `a` and `b` name one directory (canonical paths equal; paths that cannot be
/// resolved compare as spelled).
pub fn same_backup(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(x), Ok(y)) => x == y,
        _ => a == b,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_marker_is_found_for_its_store_only_and_removed_by_end() {
        let d = tempfile::tempdir().unwrap();
        let sd = &d.path().join("state");
        let a = d.path().join("a");
        let b = d.path().join("b");
        let bk = d.path().join("bk");
        for p in [&a, &b, &bk] {
            std::fs::create_dir(p).unwrap();
        }
        assert!(find(sd, &a).unwrap().is_none());
        let path = begin(sd, Operation::Patch, "docker", &a, &bk).unwrap();
        let (found, m) = find(sd, &a).unwrap().expect("the marker of a");
        assert_eq!(found, path);
        assert_eq!(m.store_root, std::fs::canonicalize(&a).unwrap());
        assert_eq!(m.pid, std::process::id());
        assert!(
            m.command()
                .ends_with(&format!("--backup-dir {}", m.backup_dir.display())),
            "{}",
            m.command()
        );
        assert!(
            find(sd, &b).unwrap().is_none(),
            "another store has no marker"
        );
        // the same store spelled through a symlink is the same store
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&a, &link).unwrap();
        assert!(find(sd, &link).unwrap().is_some());
        // a marker recording another root (a key collision, a renamed store) is not this one's
        let mut other = m.clone();
        other.store_root = b.clone();
        std::fs::write(&path, serde_json::to_vec(&other).unwrap()).unwrap();
        assert!(
            find(sd, &a).unwrap().is_none(),
            "a marker of another path is ignored"
        );
        end(&path).unwrap();
        assert!(!path.exists());
        end(&path).unwrap();
    }

    #[test]
    fn a_world_writable_marker_is_refused() {
        let d = tempfile::tempdir().unwrap();
        let sd = &d.path().join("state");
        let a = d.path().join("a");
        std::fs::create_dir(&a).unwrap();
        let path = begin(sd, Operation::Rollback, "crio", &a, d.path()).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
        let e = find(sd, &a).unwrap_err();
        assert!(e.to_string().contains("proves nothing"), "{e}");
        end(&path).unwrap();
    }
}
