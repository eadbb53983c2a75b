//! patch: refuse while the runtime runs, pre-check, back up, rewrite, read back.

use crate::error::Error;
use crate::hazard::Severity;
use crate::plan::{Plan, Stage};
use crate::progress::{Event, Progress};
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Instant;
use storepatch::{RuntimeStore, StoreRecord};

/// Where the backup goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupOptions {
    /// Must not exist, or be empty; created 0700.
    pub dir: PathBuf,
}

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
    store.ensure_stopped()?;
    store.precheck()?;
    let blocking: Vec<String> = plan
        .hazards
        .iter()
        .filter(|h| h.severity == Severity::Block)
        .map(|h| format!("[{}] {}", h.code, h.message))
        .collect();
    if !blocking.is_empty() {
        return Err(Error::Blocked(blocking));
    }
    let swept_temps = store.sweep_stale_temps()?;
    if swept_temps > 0 {
        progress.event(Event::SweptStaleTemps(swept_temps));
    }
    let total = |report: &mut Plan| {
        report.timings.total_ms = plan.timings.total_ms + t0.elapsed().as_secs_f64() * 1e3;
    };
    if rewrites.is_empty() {
        progress.event(Event::NothingToRewrite);
        total(&mut report);
        return Ok(PatchReport {
            report,
            changed: 0,
            already: 0,
            swept_temps,
            backup_dir: None,
        });
    }
    let t_apply = Instant::now();
    progress.event(Event::RewriteStarted {
        rewrites: rewrites.len(),
    });
    let mut bk =
        storepatch::backup::Backup::create(&backup.dir, store.kind().name(), store.root())?;
    let outcome = store.apply(&rewrites, &mut bk)?;
    progress.event(Event::RewriteFinished {
        changed: outcome.changed.len(),
        already: outcome.already.len(),
    });
    report.timings.backup_and_apply_ms = Some(t_apply.elapsed().as_secs_f64() * 1e3);
    report.backup_dir = Some(backup.dir.display().to_string());

    // Read back what the runtime will read: every rewrite must now hold its target.
    progress.event(Event::ReadBackStarted);
    let t_verify = Instant::now();
    let after = store.scan()?;
    let by_id: HashMap<&str, &StoreRecord> =
        after.records.iter().map(|r| (r.id.as_str(), r)).collect();
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
    report.timings.verify_ms = Some(t_verify.elapsed().as_secs_f64() * 1e3);
    total(&mut report);
    bk.attach("report.json", &report.to_json())?;
    if !bad.is_empty() {
        return Err(Error::ReadBack {
            ids: bad,
            backup_dir: backup.dir.clone(),
            report: Box::new(report),
        });
    }
    Ok(PatchReport {
        report,
        changed: outcome.changed.len(),
        already: outcome.already.len(),
        swept_temps,
        backup_dir: Some(backup.dir.clone()),
    })
}
