//! rollback: restore the backup's bytes, or write the previous hash values back.

use crate::error::Error;
use crate::node::{unix_now, StoreLocation};
use crate::report::{Action, Plan};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use storepatch::backup::RollbackReport;
use storepatch::inflight::Operation;
use storepatch::session::{Intent, Session, StateDirs};
use storepatch::{Hash, Rewrite, RuntimeKind, RuntimeStore, StoreError, StoreRecord};

/// Opens the store a backup was taken of: the manifest's runtime and root. A runtime or root
/// `location` names must be the manifest's (the same directory, however spelled: compared by
/// device and inode), or the rollback is refused naming both: the running check and the
/// writes must be about one store.
pub fn open_backed_up_store(
    backup_dir: &Path,
    location: &StoreLocation,
) -> Result<Box<dyn RuntimeStore>, Error> {
    let manifest = storepatch::backup::read_manifest(backup_dir)?;
    let manifest_path = backup_dir.join(storepatch::backup::MANIFEST_NAME);
    let recorded: RuntimeKind = manifest.runtime.parse().map_err(|_| {
        StoreError::Backup(format!(
            "the manifest names runtime {:?}, which this kubelet-rehash does not know",
            manifest.runtime
        ))
    })?;
    if let Some(given) = location.runtime {
        if given != recorded {
            return Err(Error::BackupStoreMismatch {
                flag: "--runtime",
                given: given.name().into(),
                recorded: format!("runtime {}", recorded.name()),
                manifest: manifest_path,
            });
        }
    }
    if let Some(given) = &location.root {
        if !same_dir(given, &manifest.store_root) {
            return Err(Error::BackupStoreMismatch {
                flag: "--root",
                given: given.display().to_string(),
                recorded: format!("store root {}", manifest.store_root.display()),
                manifest: manifest_path,
            });
        }
    }
    let mut loc = location.clone();
    loc.runtime = Some(recorded);
    loc.root = Some(manifest.store_root.clone());
    loc.open()
}

/// Whether `a` and `b` are one directory (device and inode, so `/var/lib/docker` and a
/// symlink or bind mount of it agree); paths that cannot be read compare as spelled.
fn same_dir(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => (x.dev(), x.ino()) == (y.dev(), y.ino()),
        _ => a == b,
    }
}

/// Restores every file of the backup byte for byte, after checking every one of them (a file
/// that matches neither side of the manifest refuses the whole rollback, naming it).
/// `accept_unrecorded` restores a file whose patched sha256 was never recorded (a crash in
/// the middle of a patch).
pub fn rollback(
    backup_dir: &Path,
    location: &StoreLocation,
    accept_unrecorded: bool,
) -> Result<RollbackReport, Error> {
    let store = open_backed_up_store(backup_dir, location)?;
    // The interrupted run of this backup (a killed patch or rollback) is the one this
    // rollback finishes; another backup's refuses, naming its command.
    let mut session = Session::begin(
        store.as_ref(),
        Intent::Rollback {
            operation: Operation::Rollback,
            backup: backup_dir,
        },
        &location.state_dirs(),
        || Ok::<(), Error>(()),
    )?;
    let resumed = session.resumed().is_some();
    // The checkpoints copied for cri-dockerd are checked before anything is restored and
    // removed after the store's files are back.
    let copies = crate::cri_dockerd::copied_in_backup(backup_dir)?;
    crate::cri_dockerd::check_copies(&copies)?;
    // A file whose patched bytes the manifest never recorded is, when the marker names this
    // backup, what the killed run wrote (only files of this manifest are ever restored).
    let accept_unrecorded = accept_unrecorded || resumed;
    session.begin_rollback()?;
    let report =
        storepatch::backup::rollback_allowing(backup_dir, accept_unrecorded, &set_aside_paths())
            .map_err(|e| {
                // A refusal is decided before the first write; anything else may be after it.
                session.set_may_have_written(!e.is_refusal());
                match e {
                    e @ StoreError::RollbackConflict { .. } => Error::RollbackConflict {
                        source: e,
                        backup_dir: backup_dir.to_path_buf(),
                        unrecorded_accepted: accept_unrecorded,
                    },
                    e => e.into(),
                }
            })?;
    session.set_may_have_written(true);
    crate::cri_dockerd::remove_copies(&copies)?;
    session.finish()?;
    Ok(report)
}

/// The only files a patch sets aside outside the store root: the kubelet's checkpoints,
/// relative to its root directory (a manifest naming any other file outside the store root
/// is refused).
fn set_aside_paths() -> Vec<&'static str> {
    kubeletstate::CheckpointKind::ALL
        .iter()
        .map(|k| k.relative_path())
        .collect()
}

/// The kubelet checkpoints the patch set aside come back with a value rollback too (a byte
/// rollback restores them with every other file); one the newer kubelet wrote in their place
/// is kept in the backup first ([`storepatch::backup::RollbackAction::RestoredOverNewer`]).
fn put_back_set_aside(backup_dir: &Path) -> Result<RollbackReport, Error> {
    storepatch::backup::restore_set_aside(backup_dir, &set_aside_paths()).map_err(|e| match e {
        e @ StoreError::RollbackConflict { .. } => Error::RollbackConflict {
            source: e,
            backup_dir: backup_dir.to_path_buf(),
            unrecorded_accepted: false,
        },
        e => e.into(),
    })
}

/// The set-aside files a rollback found rewritten by a newer kubelet, each with where its
/// bytes were kept: (file, kept copy).
pub fn kept_newer(report: &RollbackReport) -> Vec<(PathBuf, PathBuf)> {
    report
        .files
        .iter()
        .filter_map(|(path, action)| match action {
            storepatch::backup::RollbackAction::RestoredOverNewer { kept } => {
                Some((path.clone(), kept.clone()))
            }
            _ => None,
        })
        .collect()
}

/// What [`rollback_values`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValueRollback {
    /// Containers whose previous hash was written back.
    pub restored: usize,
    /// Containers that already held it.
    pub already: usize,
    /// The backup of this undo (`<backup>/undo-<unix time>`), when something was written.
    pub undo_backup: Option<PathBuf>,
    /// The kubelet checkpoints the patch had set aside, and what their restore did.
    pub set_aside: RollbackReport,
    /// The static pod manifests the patch pinned, and what their restore did.
    pub pinned_manifests: RollbackReport,
}

/// The manifests the patch of `report` pinned come back byte for byte with a value rollback
/// too: they are files beside the store, not values in it.
fn put_back_pinned(backup_dir: &Path, report: &Plan) -> Result<RollbackReport, Error> {
    let paths: Vec<PathBuf> = report
        .static_pod_pins
        .iter()
        .map(|p| PathBuf::from(&p.manifest))
        .collect();
    if paths.is_empty() {
        return Ok(RollbackReport { files: Vec::new() });
    }
    storepatch::backup::restore_paths(backup_dir, &paths).map_err(|e| match e {
        e @ StoreError::RollbackConflict { .. } => Error::RollbackConflict {
            source: e,
            backup_dir: backup_dir.to_path_buf(),
            unrecorded_accepted: false,
        },
        e => e.into(),
    })
}

/// Value-level undo: for every container the patch rewrote (from `report.json` in the backup
/// dir), checks that the store still holds exactly the value the patch wrote, then writes the
/// previous value back through the store's normal apply (with a backup of its own). For stores
/// the runtime has written to since the patch (containerd commits to meta.db at every start),
/// where restoring bytes would lose the runtime's own changes.
pub fn rollback_values(
    backup_dir: &Path,
    store: &dyn RuntimeStore,
    state: &StateDirs,
) -> Result<ValueRollback, Error> {
    let mut session = Session::begin(
        store,
        Intent::Rollback {
            operation: Operation::RollbackValues,
            backup: backup_dir,
        },
        state,
        || Ok::<(), Error>(()),
    )?;
    let report_path = backup_dir.join("report.json");
    // Without the report we cannot know what the patch wrote: refuse, write nothing.
    let bytes = std::fs::read(&report_path).map_err(|e| {
        let then = match session.resumed() {
            // a patch killed before its read-back: the byte rollback undoes it
            Some(m) => format!(
                "; the patch of this backup was interrupted: `kubelet-rehash rollback --backup-dir {}` undoes it",
                m.backup_dir.display()
            ),
            None => String::new(),
        };
        Error::ValueRollbackConflict(format!(
            "{}: {e}: a value rollback needs the patch report{then}",
            report_path.display()
        ))
    })?;
    let report = Plan::from_json(&bytes)
        .map_err(|e| Error::ValueRollbackConflict(format!("{}: {e}", report_path.display())))?;
    let scan = store.scan()?;
    let now: HashMap<&str, &StoreRecord> =
        scan.records.iter().map(|r| (r.id.as_str(), r)).collect();
    let mut undo = Vec::new();
    let mut already = 0;
    let mut conflicts = Vec::new();
    let text = |h: Option<Hash>| h.map(|h| h.to_string());
    for r in report
        .records
        .iter()
        .filter(|r| r.action == Action::Rewrite)
    {
        let id = r.id.as_str();
        let (Some(old), Some(new)) = (r.stored_hash.as_deref(), text(r.target_hash)) else {
            conflicts.push(format!("{id}: the report lacks its hashes"));
            continue;
        };
        let Some(old_hash) = old.parse::<Hash>().ok() else {
            conflicts.push(format!(
                "{id}: the report's previous hash {old:?} is not a kubelet hash"
            ));
            continue;
        };
        let old_wr = r.stored_hash_without_resources.as_deref();
        let new_wr = text(r.target_hash_without_resources);
        let Some(cur) = now.get(id) else {
            conflicts.push(format!("{id}: no longer in the store"));
            continue;
        };
        let cur_h = cur.hash.as_deref();
        let cur_wr = cur.hash_without_resources.as_deref();
        if cur_h == Some(old) && (new_wr.is_none() || cur_wr == old_wr) {
            already += 1;
            continue;
        }
        if cur_h != Some(new.as_str()) || (new_wr.is_some() && cur_wr != new_wr.as_deref()) {
            conflicts.push(format!(
                "{id}: holds {} but the patch wrote {new}: changed since, not ours to undo",
                cur_h.unwrap_or("(none)")
            ));
            continue;
        }
        let old_wr_hash = match (new_wr.is_some(), old_wr) {
            (true, Some(w)) => match w.parse::<Hash>() {
                Ok(h) => Some(h),
                Err(_) => {
                    conflicts.push(format!(
                        "{id}: the report's previous hashWithoutResources {w:?} is not a kubelet hash"
                    ));
                    continue;
                }
            },
            _ => None,
        };
        undo.push(Rewrite {
            id: id.to_string(),
            hash: old_hash,
            hash_without_resources: old_wr_hash,
        });
    }
    if !conflicts.is_empty() {
        return Err(Error::ValueRollbackConflict(conflicts.join("; ")));
    }
    let copies = crate::cri_dockerd::copied_in_backup(backup_dir)?;
    crate::cri_dockerd::check_copies(&copies)?;
    session.begin_rollback()?;
    if undo.is_empty() {
        let set_aside = put_back_set_aside(backup_dir)?;
        let pinned_manifests = put_back_pinned(backup_dir, &report)?;
        crate::cri_dockerd::remove_copies(&copies)?;
        session.finish()?;
        return Ok(ValueRollback {
            restored: 0,
            already,
            undo_backup: None,
            set_aside,
            pinned_manifests,
        });
    }
    let dir = backup_dir.join(format!("undo-{}", unix_now()));
    let mut backup = session.backup(&dir)?;
    // Set-aside checkpoints first: their check refuses before anything is written.
    let set_aside = put_back_set_aside(backup_dir)?;
    session.set_may_have_written(true);
    let pinned_manifests = put_back_pinned(backup_dir, &report)?;
    store.apply(&undo, &mut backup)?;
    crate::cri_dockerd::remove_copies(&copies)?;
    session.finish()?;
    Ok(ValueRollback {
        restored: undo.len(),
        already,
        undo_backup: Some(dir),
        set_aside,
        pinned_manifests,
    })
}
