//! One exclusive lock per store, for every runtime, taken by every run that writes a store
//! (`patch`, `rollback`, `rollback --values`) from before its plan to its end: two runs on one
//! store (an automation retry overlapping a manual run) would otherwise interleave their
//! rewrites and leave a store half at one target, half at the other.
//!
//! # Where the lock lives, and why
//!
//! `/run/kubelet-rehash/locks/<st_dev>-<st_ino>.lock` (see [`lock_dir`] for unprivileged runs
//! and `KUBELET_REHASH_LOCK_DIR`), keyed by the store root's device and
//! inode, `flock(LOCK_EX | LOCK_NB)`, the holder's pid written into it:
//! - not in the store root: a file of ours there is a foreign file in the runtime's data
//!   (CRI-O's graphroot is containers/storage's, whose tools list what they find), and a
//!   killed run would leave it behind in the store;
//! - not beside the backup: every run has its own backup directory (the default one is named
//!   by the time), so two runs would take two different locks;
//! - keyed by device and inode rather than by path: `/var/lib/docker`, a symlink to it and a
//!   bind mount of it are one store and get one lock;
//! - under `/run` (a tmpfs): a lock means nothing after a reboot, and a file left by a killed
//!   run costs nothing; the file is never removed, so no run can lock an unlinked inode while
//!   another locks its replacement (the classic flock-and-unlink race);
//! - flock, not a pid file: the kernel releases it when the holder dies, however it dies.
//!
//! The store root directory itself is flocked too, first: `/run` is per container, so two
//! privileged Jobs on one node (each with the node's `/` at `/host`) would each find their own
//! empty lock directory, while the root directory is one inode for every mount namespace that
//! sees it. The file in `/run` then only tells a second run of the same namespace the holder's
//! pid. No runtime flocks its own root directory (containerd locks meta.db, containers/storage
//! its `*.lock` files), so this takes nothing from them.
//!
//! containerd's own flock on meta.db (the "is containerd running" check) is unchanged: that
//! one is taken only for the instant of the check, this one for the whole run.
//!
//! Within one process the lock is re-entrant (a counted guard), so a caller that holds it
//! from its plan on can call the library's `patch`, which takes it too.

use crate::atomic;
use crate::error::StoreError;
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Where root's store locks are.
pub const LOCK_DIR: &str = "/run/kubelet-rehash/locks";

/// The environment variable that moves the lock files (a node whose `/run` is read-only).
pub const LOCK_DIR_ENV: &str = "KUBELET_REHASH_LOCK_DIR";

/// Where this run keeps its lock files: `$KUBELET_REHASH_LOCK_DIR` when set; [`LOCK_DIR`] for
/// root; otherwise a directory of the invoking user's (`$XDG_RUNTIME_DIR/kubelet-rehash/locks`,
/// or `/tmp/kubelet-rehash-<uid>/locks`), because an unprivileged run (the demo, a copy of a
/// store) cannot create `/run/kubelet-rehash`. Exclusion never rests on this directory — the
/// flock on the store root directory excludes runs whatever their lock directory — so a run
/// with another one only loses the holder's pid from the refusal message.
pub fn lock_dir() -> PathBuf {
    per_user_dir(LOCK_DIR_ENV, LOCK_DIR, "XDG_RUNTIME_DIR", "locks")
}

/// The directory choice shared by the lock files and the in-flight markers
/// ([`crate::inflight::state_dir`]): `$env` when set and not empty; `root_dir` for root;
/// otherwise `$xdg/kubelet-rehash/<leaf>` or `/tmp/kubelet-rehash-<uid>/<leaf>` (not `$HOME`:
/// runuser and su without a login shell keep the caller's).
pub(crate) fn per_user_dir(env: &str, root_dir: &str, xdg: &str, leaf: &str) -> PathBuf {
    if let Some(dir) = std::env::var_os(env).filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    // SAFETY: geteuid cannot fail.
    let uid = unsafe { libc::geteuid() };
    if uid == 0 {
        return PathBuf::from(root_dir);
    }
    match std::env::var_os(xdg).filter(|d| !d.is_empty()) {
        Some(base) => Path::new(&base).join("kubelet-rehash").join(leaf),
        None => PathBuf::from(format!("/tmp/kubelet-rehash-{uid}/{leaf}")),
    }
}

/// How long a holder of unknown pid is waited for (see [`StoreLock::acquire`]).
const UNKNOWN_HOLDER_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// A store root's device and inode.
type StoreKey = (u64, u64);

/// Locks this process holds: store → (its locked file, its locked root directory, how many
/// guards hold it).
static HELD: Mutex<Option<HashMap<StoreKey, Held>>> = Mutex::new(None);

/// The locked pid file, the locked root directory, and the count of guards.
type Held = (File, File, usize);

/// The exclusive lock of one store, held until dropped.
#[derive(Debug)]
pub struct StoreLock {
    key: StoreKey,
    path: PathBuf,
}

impl StoreLock {
    /// Takes the lock of the store at `root`, at once or not at all, its pid file in
    /// `lock_dir` ([`crate::StateDirs::locks`]): when another process holds it,
    /// [`StoreError::Locked`] names that process's pid (a holder of unknown pid is waited for
    /// up to 2 s first: it may be a forked child about to exec). Callers hold it through
    /// [`crate::Session`] or [`crate::session::hold`].
    pub(crate) fn acquire(root: &Path, lock_dir: &Path) -> Result<StoreLock, StoreError> {
        let meta = std::fs::metadata(root).map_err(|e| StoreError::io(root, e))?;
        let key = (meta.dev(), meta.ino());
        let dir = lock_dir;
        let path = dir.join(format!("{}-{}.lock", key.0, key.1));
        let mut held = HELD.lock().unwrap_or_else(|p| p.into_inner());
        let held = held.get_or_insert_with(HashMap::new);
        if let Some((_, _, n)) = held.get_mut(&key) {
            *n += 1;
            return Ok(StoreLock { key, path });
        }
        let root_dir = File::open(root).map_err(|e| StoreError::io(root, e))?;
        let t0 = std::time::Instant::now();
        // SAFETY: a valid fd for the duration of the call.
        while unsafe { libc::flock(root_dir.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::EWOULDBLOCK) {
                return Err(StoreError::io(root, err));
            }
            // The pid is known when the holder runs in this mount namespace: then it holds the
            // pid file's lock too (a file nobody holds names a finished run).
            let pid = File::open(&path)
                .ok()
                .and_then(|mut f| {
                    // SAFETY: a valid fd for the duration of the call.
                    let free =
                        unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) } == 0;
                    let mut text = String::new();
                    (!free && f.read_to_string(&mut text).is_ok())
                        .then(|| text.trim().parse().ok())
                        .flatten()
                })
                // A holder that has flocked the pid file but not yet written its pid leaves the
                // previous holder's in it; this process is never the other holder (re-entrant).
                .filter(|pid| *pid != std::process::id());
            // A holder of unknown pid is a run in another mount namespace — or a child a
            // process forked while it held the lock, which shares the directory's open file
            // (and so its flock) until its exec closes it: that one lets go within moments,
            // so it is waited for, briefly, before the refusal.
            if pid.is_some() || t0.elapsed() >= UNKNOWN_HOLDER_GRACE {
                return Err(StoreError::Locked {
                    root: root.to_path_buf(),
                    pid,
                    lock: root.to_path_buf(),
                });
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        atomic::create_dir_all_private(dir)?;
        let dmeta = std::fs::symlink_metadata(dir).map_err(|e| StoreError::io(dir, e))?;
        // SAFETY: geteuid cannot fail.
        let me = unsafe { libc::geteuid() };
        if !dmeta.is_dir()
            || (dmeta.uid() != me && dmeta.uid() != 0)
            || dmeta.permissions().mode() & 0o022 != 0
        {
            return Err(StoreError::Refused(format!(
                "{} is not a directory owned by this user or root and writable by no one else; a lock there proves nothing",
                dir.display()
            )));
        }
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|e| StoreError::io(&path, e))?;
        // Blocking: whoever holds the pid file's lock for real holds the root directory's too,
        // which is ours now; anyone else on it is a refused run reading the holder's pid for
        // its message, for an instant (refusing here would let that reader win the store).
        // SAFETY: a valid fd for the duration of the call.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(StoreError::io(&path, std::io::Error::last_os_error()));
        }
        let pid = format!("{}\n", std::process::id());
        file.set_len(0)
            .and_then(|_| file.rewind())
            .and_then(|_| file.write_all(pid.as_bytes()))
            .map_err(|e| StoreError::io(&path, e))?;
        held.insert(key, (file, root_dir, 1));
        Ok(StoreLock { key, path })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for StoreLock {
    fn drop(&mut self) {
        let mut held = HELD.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(map) = held.as_mut() {
            if let Some((_, _, n)) = map.get_mut(&self.key) {
                *n -= 1;
                if *n == 0 {
                    // Closing the file and the directory releases both flocks.
                    map.remove(&self.key);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reentrant_in_one_process_and_released_on_drop() {
        let d = tempfile::tempdir().unwrap();
        let a = StoreLock::acquire(d.path(), &lock_dir()).unwrap();
        let b = StoreLock::acquire(d.path(), &lock_dir()).expect("re-entrant within a process");
        assert_eq!(a.path(), b.path());
        let pid: u32 = std::fs::read_to_string(a.path())
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert_eq!(pid, std::process::id());
        // another open file description (what another process has) is refused while held
        let other = File::open(a.path()).unwrap();
        let try_other =
            || unsafe { libc::flock(other.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
        // the store root directory is locked too (what a run in another mount namespace,
        // with another /run, meets)
        let root_dir = File::open(d.path()).unwrap();
        let try_root =
            || unsafe { libc::flock(root_dir.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
        assert!(!try_root(), "the root directory is locked while held");
        drop(a);
        assert!(!try_other(), "still held by the second guard");
        assert!(!try_root(), "still held by the second guard");
        drop(b);
        assert!(try_other(), "released with the last guard");
        assert!(try_root(), "the root directory too");
    }
}
