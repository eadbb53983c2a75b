//! The one sequence every write to a store follows, written once.
//!
//! A store write of kubelet-rehash (`patch`, `rollback`, `rollback --values`, and the ones
//! `upgrade` makes through them) is safe only when its steps come in this order:
//!
//! 1. the store's lock ([`crate::lock`]) — a second run refuses instead of interleaving;
//! 2. the [interrupted-run](crate::inflight) check — a run killed half-way left the store
//!    old-or-new: a patch refuses, naming the one command that undoes it; a rollback of that
//!    run's backup is the run being finished; a rollback of another backup refuses;
//! 3. the runtime is stopped — writing under a running runtime races it;
//! 4. the caller's own checks (the plan's hazards, …), which may still refuse: nothing was
//!    written so far, not even a temp sweep;
//! 5. the temps of killed runs are swept (only those whose pid is gone);
//! 6. the backup ([`crate::backup`]) is created, and the in-flight marker written, before the
//!    first write: a kill from there on is found by the next run on this store;
//! 7. the writes; then [`Session::finish`] removes the marker.
//!
//! [`Session`] is that sequence: callers hold one and never call the lock, marker or backup
//! steps themselves. Where the lock files and markers live is a [`StateDirs`], passed in, not
//! a process-wide setting, so a program (or a test) that works on a node mounted at a host
//! root keeps its markers on that node's disk.

use crate::backup::{self, Backup};
use crate::error::StoreError;
use crate::inflight::{self, Marker, Operation};
use crate::lock::StoreLock;
use std::path::{Path, PathBuf};

/// What a [`Session`] needs of a store: where it is, whose it is, whether its runtime runs,
/// and how to sweep the temps of killed runs from its files' directories. Every runtime
/// back-end's store is one.
pub trait Guarded {
    /// The store root (the lock and the marker are keyed by it).
    fn root(&self) -> &Path;
    /// The runtime's name, as markers and manifests record it (`docker`, `containerd`, `crio`).
    fn runtime_name(&self) -> &'static str;
    /// Refuses ([`StoreError::RuntimeRunning`]) while the runtime that owns the store runs.
    fn ensure_stopped(&self) -> Result<(), StoreError>;
    /// Removes the temp files killed runs left beside the store's files (only those whose pid
    /// is gone); returns how many.
    fn sweep_stale_temps(&self) -> Result<usize, StoreError>;
}

/// Where a run keeps what outlives it: the store locks' pid files and the in-flight markers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateDirs {
    /// The lock files' directory ([`crate::lock::lock_dir`] by default).
    pub locks: PathBuf,
    /// The in-flight markers' directory ([`crate::inflight::state_dir`] by default). A run on
    /// a node mounted at a host root keeps them inside it (a Job's own `/var/lib` is gone with
    /// its container).
    pub inflight: PathBuf,
}

impl StateDirs {
    /// This machine's defaults: `KUBELET_REHASH_LOCK_DIR` / `KUBELET_REHASH_STATE_DIR` when
    /// set, root's directories for root, the invoking user's otherwise.
    pub fn local() -> StateDirs {
        StateDirs {
            locks: crate::lock::lock_dir(),
            inflight: inflight::state_dir(),
        }
    }

    /// The defaults, with the markers in `dir`.
    pub fn with_inflight(self, dir: impl Into<PathBuf>) -> StateDirs {
        StateDirs {
            inflight: dir.into(),
            ..self
        }
    }
}

impl Default for StateDirs {
    fn default() -> Self {
        StateDirs::local()
    }
}

/// Holds the lock of the store at `root` without writing it: for a run that plans under the
/// lock and may then write (through a [`Session`], which takes the same lock again: it is
/// re-entrant within a process), or one that stops services around its writes (`upgrade`).
pub fn hold(root: &Path, dirs: &StateDirs) -> Result<StoreLock, StoreError> {
    StoreLock::acquire(root, &dirs.locks)
}

/// What the session is for; decides what an interrupted run's marker means.
#[derive(Debug, Clone, Copy)]
pub enum Intent<'a> {
    /// A patch: refused while an interrupted run may have left the store half-written.
    Patch,
    /// A byte rollback ([`Operation::Rollback`]) or value rollback
    /// ([`Operation::RollbackValues`]) of `backup`: the interrupted run of that backup is the
    /// one this finishes; another backup's refuses, naming its command.
    Rollback {
        /// Which rollback.
        operation: Operation,
        /// The backup it restores.
        backup: &'a Path,
    },
}

/// One write to one store, from its lock to its end (see the module doc). Dropped without
/// [`Session::finish`] — an error return or a panic — it removes its marker only when the
/// store cannot have been written; killed, it leaves the marker for the next run.
pub struct Session {
    _lock: StoreLock,
    root: PathBuf,
    runtime: &'static str,
    dirs: StateDirs,
    intent_backup: Option<PathBuf>,
    operation: Operation,
    /// The interrupted run this one finishes (its marker, and what it recorded).
    resumed: Option<(PathBuf, Marker)>,
    /// Our marker, once written (or the resumed one, once taken over).
    marker: Option<PathBuf>,
    /// Whether the marker is the one this run wrote (a resumed one is the killed run's).
    ours: bool,
    may_have_written: bool,
    /// A patch's backup: once its manifest exists, the store may have been written.
    patch_backup: Option<PathBuf>,
    swept: usize,
    finished: bool,
}

impl Session {
    /// Steps 1–5 of the module doc: lock, interrupted-run check, runtime stopped, `checks`
    /// (the caller's refusals), temp sweep (beside the store's files and, for a rollback, in
    /// its backup). Nothing of the store is written; a refusal leaves everything as it was.
    pub fn begin<S, E>(
        store: &S,
        intent: Intent<'_>,
        dirs: &StateDirs,
        checks: impl FnOnce() -> Result<(), E>,
    ) -> Result<Session, E>
    where
        S: Guarded + ?Sized,
        E: From<StoreError>,
    {
        let root = store.root();
        // Held to the end: a second run on this store refuses at once instead of interleaving.
        let lock = hold(root, dirs)?;
        // The lock is ours, so the run that left a marker is gone.
        let resumed = match (interrupted(root, &dirs.inflight)?, intent) {
            (None, _) => None,
            (Some((path, m)), Intent::Patch) => return Err(m.refusal(&path).into()),
            (Some((path, m)), Intent::Rollback { backup, .. })
                if inflight::same_backup(&m.backup_dir, backup) =>
            {
                Some((path, m))
            }
            (Some((path, m)), Intent::Rollback { .. }) => return Err(m.refusal(&path).into()),
        };
        store.ensure_stopped()?;
        checks()?;
        let mut swept = store.sweep_stale_temps()?;
        let (operation, intent_backup) = match intent {
            Intent::Patch => (Operation::Patch, None),
            Intent::Rollback { operation, backup } => {
                // temps of a killed rollback's writes into its backup (kept newer files)
                swept += crate::atomic::sweep_stale_temps(backup, 1)?;
                (operation, Some(backup.to_path_buf()))
            }
        };
        Ok(Session {
            _lock: lock,
            root: root.to_path_buf(),
            runtime: store.runtime_name(),
            dirs: dirs.clone(),
            intent_backup,
            operation,
            resumed,
            marker: None,
            ours: false,
            may_have_written: false,
            patch_backup: None,
            swept,
            finished: false,
        })
    }

    /// How many temps of killed runs [`Session::begin`] removed.
    pub fn swept_temps(&self) -> usize {
        self.swept
    }

    /// The interrupted run this rollback finishes, as its marker recorded it.
    pub fn resumed(&self) -> Option<&Marker> {
        self.resumed.as_ref().map(|(_, m)| m)
    }

    /// A patch's step 6: creates its backup in `backup_dir`, then writes the marker (durable
    /// before the first write: the backup's commit precedes it).
    pub fn begin_patch(&mut self, backup_dir: &Path) -> Result<Backup, StoreError> {
        let bk = Backup::create(backup_dir, self.runtime, &self.root)?;
        self.mark(Operation::Patch, backup_dir)?;
        self.patch_backup = Some(backup_dir.to_path_buf());
        Ok(bk)
    }

    /// A rollback's step 6: writes its marker, or takes over the interrupted run's it finishes.
    pub fn begin_rollback(&mut self) -> Result<(), StoreError> {
        if let Some((path, _)) = self.resumed.take() {
            self.marker = Some(path);
            self.ours = false;
            self.may_have_written = true;
            return Ok(());
        }
        let backup = self.intent_backup.clone().ok_or_else(|| {
            StoreError::Refused("a rollback session without its backup (a bug)".to_string())
        })?;
        self.mark(self.operation, &backup)
    }

    /// A further backup within this session (a value rollback's own undo backup), after its
    /// marker was written.
    pub fn backup(&self, dir: &Path) -> Result<Backup, StoreError> {
        if self.marker.is_none() {
            return Err(StoreError::Refused(
                "a backup before the in-flight marker (a bug)".to_string(),
            ));
        }
        Backup::create(dir, self.runtime, &self.root)
    }

    /// Records whether the store may have been written by now: a failure after that keeps the
    /// marker for the next run (a refusal decided before the first write does not).
    pub fn set_may_have_written(&mut self, written: bool) {
        self.may_have_written = written;
    }

    /// Step 7: the store is consistent again; the marker goes, then the lock.
    pub fn finish(mut self) -> Result<(), StoreError> {
        self.finished = true;
        if let Some(path) = &self.marker {
            inflight::end(path)?;
        }
        Ok(())
    }

    fn mark(&mut self, operation: Operation, backup_dir: &Path) -> Result<(), StoreError> {
        let path = inflight::begin(
            &self.dirs.inflight,
            operation,
            self.runtime,
            &self.root,
            backup_dir,
        )?;
        self.marker = Some(path);
        self.ours = true;
        Ok(())
    }
}

impl Drop for Session {
    /// Runs when the run returns an error (or panics), never when it is killed: then the
    /// process is alive and can tell whether it left the store as it found it.
    fn drop(&mut self) {
        if self.finished || !self.ours {
            return;
        }
        let Some(path) = &self.marker else { return };
        // A patch that failed after committing its backup (a read-only or full file system at
        // its first write) may still have changed nothing: every file holds its original.
        let written = self.may_have_written
            || self.patch_backup.as_ref().is_some_and(|b| {
                b.join(backup::MANIFEST_NAME).exists() && !backup::all_original(b).unwrap_or(false)
            });
        if !written {
            // Nothing of the store was written: the marker would only stop the next run.
            let _ = inflight::end(path);
        }
    }
}

/// The marker of an earlier run on the store at `root` that may have written it (one whose
/// backup has no manifest wrote nothing: it is removed and `None` returned). A marker whose
/// backup directory is gone cannot be undone by us: refused, naming the file to remove once
/// the store was checked.
fn interrupted(root: &Path, state_dir: &Path) -> Result<Option<(PathBuf, Marker)>, StoreError> {
    let Some((path, m)) = inflight::find(state_dir, root)? else {
        return Ok(None);
    };
    if !m.backup_dir.exists() {
        return Err(StoreError::Refused(format!(
            "an interrupted run of kubelet-rehash (pid {}) on the store at {} left marker {}, but its backup {} is gone, so kubelet-rehash cannot finish or undo it; check the store with `kubelet-rehash plan`, then remove {}",
            m.pid,
            m.store_root.display(),
            path.display(),
            m.backup_dir.display(),
            path.display()
        )));
    }
    if !m.may_have_written() {
        inflight::end(&path)?;
        return Ok(None);
    }
    Ok(Some((path, m)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// A store of files in a directory, whose runtime runs while `running` is set.
    struct Dir {
        root: PathBuf,
        running: Cell<bool>,
    }

    impl Guarded for Dir {
        fn root(&self) -> &Path {
            &self.root
        }
        fn runtime_name(&self) -> &'static str {
            "docker"
        }
        fn ensure_stopped(&self) -> Result<(), StoreError> {
            if self.running.get() {
                return Err(StoreError::RuntimeRunning {
                    runtime: "docker",
                    evidence: "the test says so".to_string(),
                });
            }
            Ok(())
        }
        fn sweep_stale_temps(&self) -> Result<usize, StoreError> {
            crate::atomic::sweep_stale_temps(&self.root, 1)
        }
    }

    fn setup() -> (tempfile::TempDir, Dir, StateDirs) {
        let d = tempfile::tempdir().unwrap();
        let root = d.path().join("store");
        std::fs::create_dir(&root).unwrap();
        std::fs::write(root.join("config.v2.json"), b"old").unwrap();
        let dirs = StateDirs {
            locks: d.path().join("locks"),
            inflight: d.path().join("inflight"),
        };
        let store = Dir {
            root,
            running: Cell::new(false),
        };
        (d, store, dirs)
    }

    fn no_checks() -> Result<(), StoreError> {
        Ok(())
    }

    fn markers(dirs: &StateDirs) -> usize {
        std::fs::read_dir(&dirs.inflight).map_or(0, |r| r.count())
    }

    /// A patch writes through its session: backup first, marker, write, finish.
    fn patch(store: &Dir, dirs: &StateDirs, backup: &Path, kill: bool) {
        let mut s = Session::begin(store, Intent::Patch, dirs, no_checks).unwrap();
        let mut bk = s.begin_patch(backup).unwrap();
        let file = store.root.join("config.v2.json");
        let (old, meta) = crate::atomic::read_regular_nofollow(&file).unwrap();
        bk.save(&file, &old, meta, Some(backup::sha256_hex(b"new")))
            .unwrap();
        bk.commit().unwrap();
        crate::atomic::replace_file(&file, b"new", meta).unwrap();
        bk.finish().unwrap();
        if kill {
            // what a SIGKILL leaves: nothing runs, not even Drop
            std::mem::forget(s);
            return;
        }
        s.finish().unwrap();
    }

    #[test]
    fn a_finished_session_leaves_no_marker_and_the_next_one_goes_on() {
        let (d, store, dirs) = setup();
        patch(&store, &dirs, &d.path().join("bk1"), false);
        assert_eq!(markers(&dirs), 0, "finish removes the marker");
        let s = Session::begin(&store, Intent::Patch, &dirs, no_checks)
            .expect("a patch after a finished one goes on");
        drop(s);
    }

    #[test]
    fn a_killed_patch_refuses_the_next_patch_and_its_rollback_resumes_it() {
        let (d, store, dirs) = setup();
        let bk = d.path().join("bk1");
        patch(&store, &dirs, &bk, true);
        assert_eq!(markers(&dirs), 1, "a killed run leaves its marker");
        let e = Session::begin(&store, Intent::Patch, &dirs, no_checks)
            .err()
            .expect("a patch after a killed one refuses");
        assert!(
            e.to_string().contains(&format!(
                "kubelet-rehash rollback --backup-dir {}",
                std::fs::canonicalize(&bk).unwrap().display()
            )),
            "the refusal names the one command that undoes it: {e}"
        );
        let other = d.path().join("other");
        std::fs::create_dir(&other).unwrap();
        let rollback = |backup| Intent::Rollback {
            operation: Operation::Rollback,
            backup,
        };
        assert!(
            Session::begin(&store, rollback(&other), &dirs, no_checks).is_err(),
            "a rollback of another backup refuses"
        );
        let mut s = Session::begin(&store, rollback(&bk), &dirs, no_checks)
            .expect("the rollback of the killed run's backup finishes it");
        assert!(s.resumed().is_some(), "it is the killed run's resumption");
        s.begin_rollback().unwrap();
        s.finish().unwrap();
        assert_eq!(
            markers(&dirs),
            0,
            "the finished rollback removed the marker"
        );
    }

    #[test]
    fn refusals_come_before_anything_is_written() {
        let (d, store, dirs) = setup();
        store.running.set(true);
        let e = Session::begin(&store, Intent::Patch, &dirs, no_checks)
            .err()
            .expect("a running runtime refuses");
        assert!(matches!(e, StoreError::RuntimeRunning { .. }), "{e}");
        store.running.set(false);
        let stale = store.root.join(".config.v2.json.rehash-tmp-999999999");
        std::fs::write(&stale, b"x").unwrap();
        let e = Session::begin(&store, Intent::Patch, &dirs, || {
            Err(StoreError::Refused("blocked".into()))
        })
        .err()
        .expect("the caller's check refuses");
        assert!(e.to_string().contains("blocked"), "{e}");
        assert_eq!(
            markers(&dirs),
            0,
            "no marker before the caller's checks passed"
        );
        assert!(!d.path().join("bk").exists(), "no backup either");
        assert!(stale.exists(), "no temp swept before the checks passed");
    }

    #[test]
    fn a_failed_session_that_wrote_nothing_removes_its_marker() {
        let (d, store, dirs) = setup();
        let mut s = Session::begin(&store, Intent::Patch, &dirs, no_checks).unwrap();
        let _bk = s.begin_patch(&d.path().join("bk")).unwrap();
        assert_eq!(markers(&dirs), 1);
        drop(s);
        assert_eq!(
            markers(&dirs),
            0,
            "no manifest: nothing can have been written"
        );
    }

    #[test]
    fn the_lock_is_held_for_the_session() {
        let (_d, store, dirs) = setup();
        let s = Session::begin(&store, Intent::Patch, &dirs, no_checks).unwrap();
        let lock_files: Vec<_> = std::fs::read_dir(&dirs.locks).unwrap().collect();
        assert_eq!(
            lock_files.len(),
            1,
            "the pid file is in the session's lock dir"
        );
        drop(s);
    }
}
