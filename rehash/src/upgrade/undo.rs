//! Going back: undo what the state says was done, in the order that keeps the node safe,
//! and start the runtime and the old kubelet again whatever failed. Also where a run that
//! finishes a killed one decides: forward from a complete patch, else back.

use super::run::{wait_until, Run};
use super::step_error::StepError;
use super::{
    Measured, Phase, Step, StepFailure, UpgradeReport, UpgradeResult, RUNTIME_START_GRACE,
};
use crate::error::Error;
use std::path::Path;
use std::time::Instant;
use storepatch::StoreError;

/// One step of going back.
pub(super) struct UndoStep {
    /// The step, as the state file records it.
    pub(super) step: Step,
    /// What it was doing, as its failure is reported: `stopping the kubelet: <why>`.
    pub(super) doing: &'static str,
    /// Whether it is to be taken, from what the state says was done (read when its turn
    /// comes) and `failed`, the steps of going back that failed before it.
    pub(super) needed: fn(&Run<'_>, &[Step]) -> bool,
    /// What it does.
    pub(super) run: fn(&mut Run<'_>) -> Result<(), StepError>,
}

/// Going back, in order: the new kubelet must not run on the old store, so it stops first;
/// the store is restored only with the runtime stopped; then the old kubelet binary and its
/// flag files; last the runtime and the old kubelet run again, whatever failed above.
pub(super) const UNDO: &[UndoStep] = &[
    UndoStep {
        step: Step::UndoStopKubelet,
        doing: "stopping the kubelet",
        needed: |r, _| r.state.done.kubelet_up && r.wrote_anything(),
        run: |r| r.stop_kubelet(),
    },
    UndoStep {
        step: Step::UndoStopRuntime,
        doing: "stopping the runtime",
        needed: |r, _| r.has_store_backup() && r.state.done.runtime_up,
        run: |r| r.stop_runtime(true),
    },
    UndoStep {
        step: Step::UndoStore,
        doing: "restoring the store",
        needed: |r, failed| r.has_store_backup() && !failed.contains(&Step::UndoStopRuntime),
        run: |r| r.undo_store(),
    },
    UndoStep {
        step: Step::UndoKubeletBinary,
        doing: "restoring the kubelet binary",
        needed: |r, _| r.state.kubelet_backup.is_some() && r.state.done.binary_install_started,
        run: |r| r.undo_binary(),
    },
    UndoStep {
        step: Step::UndoKubeletFlags,
        doing: "restoring the kubelet flag files",
        needed: |r, _| r.state.done.flags_rewrite_started,
        run: |r| r.undo_kubelet_flags(),
    },
    UndoStep {
        step: Step::UndoStartRuntime,
        doing: "starting the runtime",
        needed: |r, _| !r.state.done.runtime_up,
        run: |r| r.start_runtime(true),
    },
    UndoStep {
        step: Step::UndoStartKubelet,
        doing: "starting the kubelet",
        needed: |r, _| !r.state.done.kubelet_up,
        run: |r| r.start_kubelet(),
    },
    UndoStep {
        step: Step::UndoWaitHealthy,
        doing: "the old kubelet",
        needed: |_, failed| !failed.contains(&Step::UndoStartKubelet),
        run: |r| r.wait_healthy(true),
    },
];

impl Run<'_> {
    /// Finishes the run a killed one left unfinished: forward from a complete, read-back
    /// patch inside the window, else back.
    pub(super) fn finish_interrupted_run(&mut self) -> UpgradeReport {
        self.state.notes.push(format!(
            "run {} found this state unfinished (killed?) and finished it",
            std::process::id()
        ));
        // Forward only from inside the window: a run killed while going back goes on back.
        if self.state.phase == Phase::Window
            && self.state.done.patched
            && self.state.report.is_some()
        {
            self.state.phase = Phase::Window;
            self.save();
            match self.forward() {
                Ok(()) => self.finish_done(),
                Err((step, e)) => self.roll_back(step, e),
            }
        } else {
            let step = self.state.last_step();
            self.roll_back(
                step,
                StepError::failure(
                    "an earlier run was killed mid-window before its patch was complete; rolled back",
                ),
            )
        }
    }

    /// Whether the run wrote anything the old kubelet must not see (the store, the kubelet
    /// binary, its flag files).
    fn wrote_anything(&self) -> bool {
        self.state.done.patch_started
            || self.state.done.binary_install_started
            || self.state.done.flags_rewrite_started
    }

    /// Whether the patch made a backup of the store to restore.
    fn has_store_backup(&self) -> bool {
        self.store_backup_dir()
            .join(storepatch::backup::MANIFEST_NAME)
            .is_file()
    }

    /// Undoes whatever the state says was done, and starts the runtime and the old kubelet.
    /// `step` failed with `error`, unless the state has a failure already: a run that
    /// finishes a killed one going back keeps the killed run's reason when it had one.
    pub(super) fn roll_back(&mut self, step: Step, error: StepError) -> UpgradeReport {
        if self.state.failure.is_none() {
            self.cause_class = Some(error.class());
        }
        let first = self
            .state
            .failure
            .get_or_insert_with(|| StepFailure {
                step,
                cause: error.to_string(),
            })
            .clone();
        let (step, cause) = (first.step, first.cause);
        self.state.phase = Phase::RollingBack;
        self.kubelet_down.get_or_insert_with(Instant::now);
        self.save();
        // A killed run may have started a service without recording it: what runs is what
        // counts. A runtime it was starting may not answer yet: given its grace first, so the
        // store is never restored under a runtime that then loads the patched one.
        if !self.state.done.kubelet_up && self.node.kubelet_pid().is_some() {
            self.state.done.kubelet_up = true;
        }
        if !self.state.done.runtime_up {
            let kind = self.store.kind();
            let endpoint = self.endpoint();
            if std::mem::take(&mut self.runtime_maybe_starting) {
                let grace = Instant::now() + RUNTIME_START_GRACE;
                let _ = wait_until(grace, || self.node.runtime_answers(kind, &endpoint));
            }
            if self.node.runtime_answers(kind, &endpoint) || self.store.ensure_stopped().is_err() {
                self.state.done.runtime_up = true;
            }
        }
        self.save();
        let mut failed: Vec<Step> = Vec::new();
        let mut errors: Vec<String> = Vec::new();
        for u in UNDO {
            if !(u.needed)(self, &failed) {
                continue;
            }
            if let Err(e) = self.step(u.step, u.run) {
                errors.push(format!("{}: {e}", u.doing));
                failed.push(u.step);
            }
        }
        self.finish_hold();
        self.kubelet_down = None;
        self.runtime_down = None;
        self.state.measured = Measured::from_steps(&self.state.steps, &self.state.measured);
        if errors.is_empty() {
            self.state.phase = Phase::RolledBack;
            self.save();
            self.report(UpgradeResult::RolledBack { step, cause })
        } else {
            self.state.phase = Phase::Failed;
            self.state.rollback_errors = errors.clone();
            self.save();
            self.report(UpgradeResult::Failed {
                step,
                cause: format!("{cause}; and while going back: {}", errors.join("; ")),
            })
        }
    }

    fn undo_store(&mut self) -> Result<(), StepError> {
        let dir = self.store_backup_dir();
        // Byte rollback first; a runtime that has run since rewrote its store (containerd
        // commits to meta.db at every start), and then the values go back instead.
        let accept_unrecorded = self.resumed && !self.state.done.patched;
        let report = match crate::rollback::rollback(&dir, &self.opts.location, accept_unrecorded) {
            Ok(report) => {
                self.state.store_restored = Some("bytes".into());
                report
            }
            Err(Error::RollbackConflict { .. }) if dir.join("report.json").is_file() => {
                let v = crate::rollback::rollback_values(
                    &dir,
                    self.store,
                    &self.opts.location.state_dirs(),
                )?;
                self.state.store_restored = Some("values".into());
                v.set_aside
            }
            Err(e) => return Err(e.into()),
        };
        for (path, kept) in crate::rollback::kept_newer(&report) {
            self.state.notes.push(format!(
                "{} had been written by the new kubelet since the window: kept at {}, and the checkpoint the patch had set aside is back",
                path.display(),
                kept.display()
            ));
        }
        Ok(())
    }

    fn undo_binary(&mut self) -> Result<(), StepError> {
        let saved = self
            .state
            .kubelet_backup
            .clone()
            .expect("checked by the caller");
        restore_binary(&saved, &self.kubelet_path())?;
        self.state.done.binary_installed = false;
        self.state.done.binary_install_started = false;
        Ok(())
    }
}

/// Puts the saved kubelet back at `path` by a rename over it (from a hard link of the backup
/// beside `path`, or a copy across file systems), or recreates the symbolic link.
fn restore_binary(saved: &str, path: &Path) -> Result<(), StoreError> {
    let dir = path.parent().unwrap_or(Path::new("/"));
    let tmp = dir.join(format!(
        ".{}.rehash-tmp-{}",
        path.file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default(),
        std::process::id()
    ));
    let _ = std::fs::remove_file(&tmp);
    if let Some(target) = saved.strip_prefix("symlink:") {
        std::os::unix::fs::symlink(target, &tmp).map_err(|e| StoreError::io(&tmp, e))?;
    } else {
        let file = Path::new(saved.strip_prefix("file:").unwrap_or(saved));
        if std::fs::hard_link(file, &tmp).is_err() {
            let (bytes, meta) = storepatch::atomic::read_regular_nofollow(file)?;
            return storepatch::atomic::replace_file(path, &bytes, meta);
        }
    }
    std::fs::rename(&tmp, path).map_err(|e| StoreError::io(path, e))?;
    storepatch::atomic::sync_dir(dir)
}

#[cfg(test)]
mod tests {
    use super::super::window::{FORWARD, STOP_AND_PATCH};
    use super::*;

    /// Every step of the window that leaves something to undo names a step of going back,
    /// and going back undoes later steps of the window before earlier ones where the order
    /// matters: the kubelet stops before the store is restored, which comes before the
    /// runtime and the kubelet start again.
    #[test]
    fn every_window_step_with_an_undo_is_undone_in_a_safe_order() {
        let undo: Vec<Step> = UNDO.iter().map(|u| u.step).collect();
        let at = |s: Step| {
            undo.iter()
                .position(|u| *u == s)
                .expect("in the undo table")
        };
        for w in STOP_AND_PATCH.iter().chain(FORWARD) {
            if let Some(u) = w.undone_by {
                assert!(u.is_undo() && !w.step.is_undo(), "{:?} -> {u:?}", w.step);
                at(u);
            }
        }
        assert!(at(Step::UndoStopKubelet) < at(Step::UndoStore));
        assert!(at(Step::UndoStopRuntime) < at(Step::UndoStore));
        assert!(at(Step::UndoStore) < at(Step::UndoStartRuntime));
        assert!(at(Step::UndoStartRuntime) < at(Step::UndoStartKubelet));
        assert!(at(Step::UndoStartKubelet) < at(Step::UndoWaitHealthy));
        assert!(undo.iter().all(|s| s.is_undo()));
    }
}
