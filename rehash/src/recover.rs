//! Crash recovery by the command the tool names: every `patch`, `rollback` and
//! `rollback --values` writes an in-flight marker ([`storepatch::inflight`]) before its first
//! write to a store and removes it when it has finished. The next run on that store (under
//! the store lock, so the marker's run is gone) finds it:
//!
//! * `patch` refuses (exit 3) naming `kubelet-rehash rollback --backup-dir DIR`, the one
//!   command that undoes an interrupted patch or finishes an interrupted rollback, unless the
//!   killed run cannot have written anything (its backup has no manifest yet: the manifest is
//!   committed before the first write), when the marker is removed and the patch goes on;
//! * `rollback` of the marker's backup is the run being finished: a file whose patched bytes
//!   the manifest never recorded (a bolt commit just before the kill) is that run's own write
//!   and is restored without `--accept-unrecorded`; a rollback of another backup refuses,
//!   naming the marker's command.

use crate::error::Error;
use std::path::{Path, PathBuf};
use storepatch::inflight::{self, Marker, Operation};
use storepatch::StoreError;

/// The marker of an earlier run on the store at `root` that may have written it (one whose
/// backup has no manifest wrote nothing: it is removed and `None` returned). A marker whose
/// backup directory is gone cannot be undone by us: refused, naming the file to remove once
/// the store was checked.
fn interrupted(root: &Path) -> Result<Option<(PathBuf, Marker)>, Error> {
    let Some((path, m)) = inflight::find(root)? else {
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
        ))
        .into());
    }
    if !m.may_have_written() {
        inflight::end(&path)?;
        return Ok(None);
    }
    Ok(Some((path, m)))
}

/// `patch`'s check before it plans to write: refuses while an interrupted run's marker says
/// the store may be half-written.
pub(crate) fn refuse_if_interrupted(root: &Path) -> Result<(), Error> {
    match interrupted(root)? {
        Some((path, m)) => Err(m.refusal(&path).into()),
        None => Ok(()),
    }
}

/// `rollback` (or `rollback --values`) of `backup_dir`: the marker of the interrupted run
/// this rollback finishes, when it is that backup's; a refusal naming the marker's command
/// when it is another backup's.
pub(crate) fn interrupted_run_of(
    root: &Path,
    backup_dir: &Path,
) -> Result<Option<(PathBuf, Marker)>, Error> {
    match interrupted(root)? {
        Some((path, m)) if inflight::same_backup(&m.backup_dir, backup_dir) => Ok(Some((path, m))),
        Some((path, m)) => Err(m.refusal(&path).into()),
        None => Ok(None),
    }
}

/// The marker of this run, removed when the run finishes ([`InFlight::finish`]) or, when the
/// run fails without having written the store, when dropped. A run killed or failed after its
/// first write keeps it for the next run to find.
pub(crate) struct InFlight {
    path: PathBuf,
    /// Whether this run wrote the marker (a resumed run's marker is the killed run's).
    ours: bool,
    /// Whether the store may have been written; until then a failure removes our marker.
    pub(crate) may_have_written: bool,
    /// A patch's backup, whose manifest, once it exists, means the store may be written.
    patch_backup: Option<PathBuf>,
    finished: bool,
}

impl InFlight {
    /// Writes this run's marker, before its first write to the store at `root`.
    pub(crate) fn begin(
        operation: Operation,
        runtime: &str,
        root: &Path,
        backup_dir: &Path,
    ) -> Result<InFlight, Error> {
        let path = inflight::begin(operation, runtime, root, backup_dir)?;
        Ok(InFlight {
            path,
            ours: true,
            may_have_written: false,
            patch_backup: (operation == Operation::Patch).then(|| backup_dir.to_path_buf()),
            finished: false,
        })
    }

    /// Takes over the marker of the interrupted run this run finishes.
    pub(crate) fn resume(path: PathBuf) -> InFlight {
        InFlight {
            path,
            ours: false,
            may_have_written: true,
            patch_backup: None,
            finished: false,
        }
    }

    /// The run finished: the store is consistent again; the marker goes.
    pub(crate) fn finish(mut self) -> Result<(), Error> {
        self.finished = true;
        inflight::end(&self.path)?;
        Ok(())
    }
}

impl Drop for InFlight {
    /// Runs when the run returns an error (or panics), never when it is killed: then the
    /// process is alive and can tell whether it left the store as it found it.
    fn drop(&mut self) {
        if self.finished || !self.ours {
            return;
        }
        // A patch that failed after committing its backup (a read-only or full file system at
        // its first write) may still have changed nothing: every file holds its original.
        let written = self.may_have_written
            || self.patch_backup.as_ref().is_some_and(|b| {
                b.join(storepatch::backup::MANIFEST_NAME).exists()
                    && !storepatch::backup::all_original(b).unwrap_or(false)
            });
        if !written {
            // Nothing of the store was written: the marker would only stop the next run.
            let _ = inflight::end(&self.path);
        }
    }
}
