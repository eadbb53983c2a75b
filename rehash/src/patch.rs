//! patch: refuse while the runtime runs, pre-check, back up, rewrite, read back.

use crate::error::Error;
use crate::progress::{Event, Progress};
use crate::report::{PhaseTiming, Plan, Stage};
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;
use storepatch::session::{Intent, Session, StateDirs};
use storepatch::{RuntimeStore, Severity, StoreRecord};

/// Where the backup goes, and what else the patch may do to the node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupOptions {
    /// Must not exist, or be empty; created 0700.
    pub dir: PathBuf,
    /// Move every kubelet checkpoint the target kubelet rejects (hazard
    /// `checkpoint-rejected`) into the backup, so the new kubelet starts without it (it
    /// rebuilds the state); `rollback` puts the files back byte for byte. Without it such a
    /// plan is refused.
    pub set_aside_checkpoints: bool,
    /// Go on past the pods the target kubelet rejects at admission (hazard
    /// `kubelet-rejects-pod-at-admission`, [`crate::admission`]): their containers restart
    /// whatever the patch does, and the operator has said so (`--accept-restarts`). Without
    /// it such a plan is refused.
    pub accept_restarts: bool,
    /// Back up containerd's meta.db as a whole copy instead of the pages its transaction
    /// overwrites (`--backup full`); either way `rollback` restores it byte for byte.
    pub bolt_full_copy: bool,
    /// Where the store's lock and the run's in-flight marker live
    /// ([`crate::StoreLocation::state_dirs`] for a node at a host root).
    pub state: StateDirs,
}

impl BackupOptions {
    /// A backup in `dir`, nothing set aside, this machine's state directories.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        BackupOptions {
            dir: dir.into(),
            set_aside_checkpoints: false,
            accept_restarts: false,
            bolt_full_copy: false,
            state: StateDirs::local(),
        }
    }
}

/// The hazard code whose files `set_aside_checkpoints` moves into the backup.
const REJECTED_CHECKPOINT: &str = "checkpoint-rejected";

/// What [`patch`] did.
#[derive(Debug, Clone, PartialEq)]
pub struct PatchReport {
    /// The plan with the patch's backup dir and timings filled in: the report `patch` writes.
    pub report: Plan,
    /// Records whose values changed.
    pub changed: usize,
    /// Records that already held their targets (a rerun).
    pub already: usize,
    /// Temp files of an interrupted earlier run that were removed first.
    pub swept_temps: usize,
    /// Where the backup and `report.json` are; `None` when nothing needed rewriting.
    pub backup_dir: Option<PathBuf>,
    /// Kubelet checkpoint files moved into the backup.
    pub set_aside: Vec<PathBuf>,
}

/// Rewrites every hash `plan` proved, on the store it was made from: refuses while the
/// runtime runs and when its pre-check fails (nothing written), backs up every file before
/// the first write, rewrites atomically, reads the store back and checks that every rewrite
/// holds its target, and stores the report beside the backup. Safe to run twice.
///
/// `plan` must be made from `store` after the runtime stopped: a plan made earlier may miss a
/// container the runtime changed since. [`crate::plan_and_patch`] does both in one call.
pub fn patch(
    plan: &Plan,
    store: &dyn RuntimeStore,
    backup: &BackupOptions,
    progress: &dyn Progress,
) -> Result<PatchReport, Error> {
    let t0 = Instant::now();
    if plan.runtime != store.kind() || plan.root != store.root().display().to_string() {
        return Err(Error::PlanMismatch {
            plan_runtime: plan.runtime.name(),
            plan_root: plan.root.clone(),
            store_runtime: store.kind().name(),
            store_root: store.root().display().to_string(),
        });
    }
    let mut report = plan.clone();
    report.stage = Stage::Patch;
    let rewrites = plan.rewrites();
    let set_aside: Vec<PathBuf> = if backup.set_aside_checkpoints {
        plan.hazards
            .iter()
            .filter(|h| h.code == REJECTED_CHECKPOINT)
            .flat_map(|h| h.files.iter().map(PathBuf::from))
            .collect()
    } else {
        Vec::new()
    };
    let switch = plan.cri_dockerd.as_ref();
    // The session refuses an interrupted run's store (naming the command that undoes it) and
    // a running runtime, then these checks of ours, before it sweeps anything.
    let mut session = Session::begin(store, Intent::Patch, &backup.state, || {
        store.precheck()?;
        let blocking: Vec<String> = plan
            .hazards
            .iter()
            .filter(|h| h.severity == Severity::Block)
            .filter(|h| !(backup.set_aside_checkpoints && h.code == REJECTED_CHECKPOINT))
            .filter(|h| !(backup.accept_restarts && h.code == crate::admission::REJECTED))
            .map(|h| format!("[{}] {}", h.code, h.message))
            .collect();
        if !blocking.is_empty() {
            return Err(Error::Blocked(blocking));
        }
        if let Some(s) = switch {
            crate::cri_dockerd::check_sources(s)?;
        }
        Ok(())
    })?;
    // The static pod manifests to pin, each edit made again from the file as it is now and
    // proven to be the planned one before anything is written (a manifest changed since the
    // plan refuses the whole patch).
    let mut pins = Vec::new();
    let mut pin_errors = Vec::new();
    for pin in &plan.static_pod_pins {
        match crate::static_pods::redo_pin(pin) {
            Ok(Some(edit)) => pins.push((pin, edit)),
            Ok(None) => {}
            Err(e) => pin_errors.push(format!("[static-pod-pin-refused] {e}")),
        }
    }
    if !pin_errors.is_empty() {
        return Err(Error::Blocked(pin_errors));
    }
    let carry_over = switch.is_some_and(|s| s.checkpoints.iter().any(|c| !c.present));
    let swept_temps = session.swept_temps();
    if swept_temps > 0 {
        progress.event(Event::SweptStaleTemps(swept_temps));
    }
    let total = |report: &mut Plan| {
        report.timings.total_ms = plan.timings.total_ms + t0.elapsed().as_secs_f64() * 1e3;
    };
    if rewrites.is_empty() && set_aside.is_empty() && !carry_over && pins.is_empty() {
        progress.event(Event::NothingToRewrite);
        total(&mut report);
        return Ok(PatchReport {
            report,
            changed: 0,
            already: 0,
            swept_temps,
            backup_dir: None,
            set_aside,
        });
    }
    let t_apply = Instant::now();
    progress.event(Event::RewriteStarted {
        rewrites: rewrites.len(),
    });
    // The backup, then the marker: a kill from here on is found by the next run on this store.
    let mut bk = session.begin_patch(&backup.dir)?;
    bk.set_bolt_full_copy(backup.bolt_full_copy);
    // The checkpoints' copies go into the same backup, committed with the store's copies
    // before the first write; the files are removed only after the store was rewritten.
    let mut set_aside_bytes = Vec::with_capacity(set_aside.len());
    for path in &set_aside {
        let (bytes, meta) = storepatch::atomic::read_regular_nofollow(path)?;
        bk.save_set_aside(path, &bytes, meta)?;
        set_aside_bytes.push(bytes);
    }
    // The manifests' originals too, with the sha256 of what is written: a byte rollback
    // restores them like the store's files (their directory is recorded as one of the
    // backup's roots, the only place outside the store it restores to).
    for (pin, (original, meta, pinned)) in &pins {
        let path = std::path::Path::new(&pin.manifest);
        if let Some(dir) = path.parent() {
            bk.add_root(dir);
        }
        bk.save(
            path,
            original,
            *meta,
            Some(storepatch::backup::sha256_hex(pinned)),
        )?;
    }
    let outcome = if rewrites.is_empty() {
        // nothing of the store to rewrite: the backup still commits before any checkpoint is
        // set aside or copied
        bk.commit()?;
        storepatch::ApplyOutcome::default()
    } else {
        store.apply(&rewrites, &mut bk)?
    };
    // The checkpoints cri-dockerd needs, after the store's rewrite (whose backup is committed
    // by now), each listed in the backup before it is written.
    if let Some(s) = switch.filter(|_| carry_over) {
        let copied = crate::cri_dockerd::carry_over(s, &bk)?;
        progress.event(Event::CriDockerdCheckpointsCopied(copied.len()));
    }
    for (path, bytes) in set_aside.iter().zip(&set_aside_bytes) {
        remove_set_aside(path, bytes)?;
    }
    // The pins, after the store (whose backup, the manifests' included, is committed by now):
    // each manifest replaced atomically with its mode and owner, through a temp file whose
    // name starts with `.` (`.<name>.rehash-tmp-<pid>`), which the kubelet's file source
    // ignores, so a running kubelet never reads half a manifest or a second copy of the pod.
    for (pin, (_, meta, pinned)) in &pins {
        storepatch::atomic::replace_file(std::path::Path::new(&pin.manifest), pinned, *meta)?;
    }
    if !pins.is_empty() {
        bk.finish()?;
        progress.event(Event::StaticPodUidsPinned(pins.len()));
    }
    if !set_aside.is_empty() {
        bk.finish()?;
        progress.event(Event::CheckpointsSetAside(set_aside.len()));
    }
    progress.event(Event::RewriteFinished {
        changed: outcome.changed.len(),
        already: outcome.already.len(),
    });
    report.timings.backup_and_apply_ms = Some(t_apply.elapsed().as_secs_f64() * 1e3);
    report.timings.apply_phases = outcome
        .phases
        .iter()
        .map(|&(phase, ms)| PhaseTiming {
            phase: phase.to_string(),
            ms,
        })
        .collect();
    report.backup_dir = Some(backup.dir.display().to_string());

    // Read back what the runtime will read: every rewrite must now hold its target.
    progress.event(Event::ReadBackStarted);
    let t_verify = Instant::now();
    let ids: Vec<&str> = rewrites.iter().map(|rw| rw.id.as_str()).collect();
    let after = store.read_back(&ids)?;
    let by_id: HashMap<&str, &StoreRecord> = after.iter().map(|r| (r.id.as_str(), r)).collect();
    let bad: Vec<String> = rewrites
        .iter()
        .filter(|rw| {
            !by_id.get(rw.id.as_str()).is_some_and(|r| {
                r.hash.as_deref() == Some(rw.hash.to_string().as_str())
                    && (rw.hash_without_resources.is_none()
                        || r.hash_without_resources
                            == rw.hash_without_resources.map(|h| h.to_string()))
            })
        })
        .map(|rw| rw.id.clone())
        .collect();
    let bad_pins: Vec<String> = pins
        .iter()
        .filter(|(pin, _)| !matches!(crate::static_pods::redo_pin(pin), Ok(None)))
        .map(|(pin, _)| pin.manifest.clone())
        .collect();
    report.timings.verify_ms = Some(t_verify.elapsed().as_secs_f64() * 1e3);
    total(&mut report);
    bk.attach_with("report.json", &mut |w| report.write_json(w))?;
    if !bad_pins.is_empty() {
        return Err(Error::ReadBack {
            ids: bad_pins,
            backup_dir: backup.dir.clone(),
            report: Box::new(report),
        });
    }
    if !bad.is_empty() {
        // The marker stays: the store is not what the plan wanted, the message names the
        // rollback.
        return Err(Error::ReadBack {
            ids: bad,
            backup_dir: backup.dir.clone(),
            report: Box::new(report),
        });
    }
    session.finish()?;
    Ok(PatchReport {
        report,
        changed: outcome.changed.len(),
        already: outcome.already.len(),
        swept_temps,
        backup_dir: Some(backup.dir.clone()),
        set_aside,
    })
}

/// Removes a checkpoint whose copy is committed in the backup — only if it still holds the
/// bytes that were copied (a kubelet started meanwhile may have written another one).
fn remove_set_aside(path: &std::path::Path, copied: &[u8]) -> Result<(), Error> {
    let (now, _) = storepatch::atomic::read_regular_nofollow(path)?;
    if now != copied {
        return Err(Error::Checkpoint(format!(
            "{} changed while it was being set aside (is a kubelet running?); it was left in place, the backup holds the earlier copy",
            path.display()
        )));
    }
    std::fs::remove_file(path).map_err(|e| Error::Io {
        path: path.to_path_buf(),
        source: e,
    })?;
    if let Some(parent) = path.parent() {
        storepatch::atomic::sync_dir(parent)?;
    }
    Ok(())
}
