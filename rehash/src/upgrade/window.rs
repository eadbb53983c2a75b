//! The window: the kubelet and the runtime down, the store patched, the new kubelet installed
//! and started. Its steps are the tables below, taken in order; the first that fails ends the
//! window, and the run goes back ([`super::undo`]).

use super::run::{binary_meta, first_few, ms, wait_until, Run};
use super::step_error::StepError;
use super::{state, Step, ROLLBACK_WAIT, RUNTIME_START_GRACE};
use crate::patch::BackupOptions;
use crate::plan::{From, Plan};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::Instant;
use storepatch::StoreError;

/// One step of the window.
pub(super) struct WindowStep {
    /// The step, as the state file records it.
    pub(super) step: Step,
    /// Whether it is still to be taken: a run that finishes a killed one skips what that run
    /// did, and nothing is installed or rewritten that the run does not change.
    pub(super) pending: fn(&Run<'_>) -> bool,
    /// What it does.
    pub(super) run: fn(&mut Run<'_>) -> Result<(), StepError>,
    /// The step of going back that undoes it, when it leaves anything to undo. Going back
    /// undoes by what the state says was done ([`super::undo::UNDO`]), which this pairing
    /// only documents (and its test checks).
    #[cfg_attr(not(test), allow(dead_code))]
    pub(super) undone_by: Option<Step>,
}

fn always(_: &Run<'_>) -> bool {
    true
}

/// Up to a complete, read-back patch: every step taken, in this order.
pub(super) const STOP_AND_PATCH: &[WindowStep] = &[
    WindowStep {
        step: Step::StopKubelet,
        pending: always,
        run: |r| r.stop_kubelet(),
        undone_by: Some(Step::UndoStartKubelet),
    },
    WindowStep {
        step: Step::StopRuntime,
        pending: always,
        run: |r| r.stop_runtime(false),
        undone_by: Some(Step::UndoStartRuntime),
    },
    WindowStep {
        step: Step::CheckContainers,
        pending: always,
        run: |r| r.check_containers(),
        undone_by: None,
    },
    WindowStep {
        step: Step::Patch,
        pending: always,
        run: |r| r.patch(),
        undone_by: Some(Step::UndoStore),
    },
];

/// From a complete, read-back patch to a healthy new kubelet: the rest of the window, and
/// all a run that finishes a killed one takes when that one's patch was complete.
pub(super) const FORWARD: &[WindowStep] = &[
    WindowStep {
        step: Step::InstallKubelet,
        pending: |r| r.new_kubelet().is_some() && !r.state.done.binary_installed,
        run: |r| r.install_kubelet(),
        undone_by: Some(Step::UndoKubeletBinary),
    },
    WindowStep {
        step: Step::KubeletFlags,
        pending: |r| r.flags_pending(),
        run: |r| r.rewrite_kubelet_flags(),
        undone_by: Some(Step::UndoKubeletFlags),
    },
    WindowStep {
        step: Step::StartRuntime,
        pending: |r| !r.state.done.runtime_up,
        run: |r| r.start_runtime(false),
        undone_by: Some(Step::UndoStopRuntime),
    },
    WindowStep {
        step: Step::VerifyLive,
        pending: always,
        run: |r| r.verify_live(),
        undone_by: None,
    },
    WindowStep {
        step: Step::StartKubelet,
        pending: |r| !r.state.done.kubelet_up,
        run: |r| r.start_kubelet(),
        undone_by: Some(Step::UndoStopKubelet),
    },
    WindowStep {
        step: Step::WaitHealthy,
        pending: always,
        run: |r| r.wait_healthy(false),
        undone_by: None,
    },
];

impl Run<'_> {
    /// The whole window, from the kubelet's stop to the new kubelet's health.
    pub(super) fn window(&mut self) -> Result<(), (Step, StepError)> {
        self.take(STOP_AND_PATCH)?;
        self.forward()
    }

    /// From a complete, read-back patch to a healthy new kubelet.
    pub(super) fn forward(&mut self) -> Result<(), (Step, StepError)> {
        self.take(FORWARD)
    }

    /// Takes the pending steps of `steps` in order, up to the first that fails.
    fn take(&mut self, steps: &[WindowStep]) -> Result<(), (Step, StepError)> {
        for s in steps {
            if (s.pending)(self) {
                self.step(s.step, s.run).map_err(|e| (s.step, e))?;
            }
        }
        Ok(())
    }

    pub(super) fn stop_kubelet(&mut self) -> Result<(), StepError> {
        let pid = self.node.kubelet_pid();
        // Going back may stop a new kubelet again: the window still began at the first stop.
        if self.kubelet_down.is_none() {
            self.kubelet_down = Some(Instant::now());
            self.state.kubelet_stopped_unix_ms = Some(state::unix_ms());
        }
        self.state.done.kubelet_up = false;
        self.save();
        self.node.stop_kubelet()?;
        if let Some(pid) = pid {
            let deadline = self.deadline();
            wait_until(deadline, || !self.node.pid_alive(pid)).map_err(|_| {
                StepError::failure(format!(
                    "the kubelet (pid {pid}) is still running after its stop command"
                ))
            })?;
        }
        self.start_hold();
        Ok(())
    }

    pub(super) fn stop_runtime(&mut self, undo: bool) -> Result<(), StepError> {
        if self.runtime_down.is_none() {
            self.runtime_down = Some(Instant::now());
            self.state.runtime_stopped_unix_ms = Some(state::unix_ms());
        }
        self.state.done.runtime_up = false;
        self.save();
        if !undo {
            self.dead_before_runtime_stop = self.dead_kept_containers();
        }
        self.node.stop_runtime()?;
        let deadline = if undo {
            Instant::now() + ROLLBACK_WAIT
        } else {
            self.deadline()
        };
        let mut last = None;
        wait_until(deadline, || match self.store.ensure_stopped() {
            Ok(()) => true,
            Err(e) => {
                last = Some(e.to_string());
                false
            }
        })
        .map_err(|_| {
            StepError::failure(format!(
                "the runtime did not release its store after its stop command: {}",
                last.unwrap_or_default()
            ))
        })
    }

    fn check_containers(&mut self) -> Result<(), StepError> {
        let dead = self.dead_kept_containers();
        if dead.is_empty() {
            return Ok(());
        }
        // Only those alive until the runtime's stop are blamed on it: a container that died
        // on its own before would send an operator after a KillMode that is fine.
        let (before, at_stop): (Vec<String>, Vec<String>) = dead
            .into_iter()
            .partition(|d| self.dead_before_runtime_stop.contains(d));
        let mut why = Vec::new();
        if !at_stop.is_empty() {
            why.push(format!(
                "stopping the runtime killed {} container(s): {} (the runtime's unit kills its containers on stop: set KillMode=process, or Docker's live-restore)",
                at_stop.len(),
                first_few(&at_stop)
            ));
        }
        if !before.is_empty() {
            why.push(format!(
                "{} container(s) died in the window before the runtime was stopped, on their own or with the kubelet: {}",
                before.len(),
                first_few(&before)
            ));
        }
        Err(StepError::refused(format!(
            "{}; nothing was written",
            why.join("; ")
        )))
    }

    fn patch(&mut self) -> Result<(), StepError> {
        // Planned again from the stopped store: the runtime may have changed it meanwhile.
        // Against the version the preflight found (every candidate of `--from auto` plans the
        // same actions): hashing two versions instead of all of them keeps the window short,
        // and a container changed since is unproven here and counted below.
        let from = match self.state.from {
            Some(v) => From::Version(v),
            None => self.opts.from,
        };
        let plan = self.plan(from)?;
        if plan.summary.would_restart_after_rewrite > self.preflight_restarts
            && !self.opts.accept_restarts
        {
            return Err(StepError::refused(format!(
                "the store changed since the preflight: {}",
                plan.summary.sentence
            )));
        }
        storepatch::atomic::create_dir_all_private(&self.backup_dir())?;
        let mut backup = BackupOptions {
            state: self.opts.location.state_dirs(),
            ..BackupOptions::new(self.store_backup_dir())
        };
        backup.set_aside_checkpoints = self.opts.set_aside_checkpoints;
        backup.accept_restarts = self.opts.accept_restarts;
        self.state.done.patch_started = true;
        self.save();
        let done = crate::patch::patch(&plan, self.store, &backup, &crate::progress::Silent)?;
        self.state.done.patched = true;
        self.state.store_backup_dir = done.backup_dir.as_ref().map(|d| d.display().to_string());
        self.state.rewritten = done.changed;
        self.state.summary = Some(done.report.summary.clone());
        for pin in &done.report.static_pod_pins {
            self.state.notes.push(format!(
                "static pod {}/{}: metadata.uid {} pinned in {} (the original is in the store backup)",
                pin.namespace, pin.name, pin.uid, pin.manifest
            ));
        }
        // verify --live needs the report even when nothing was rewritten: keep it beside the
        // state (the backup has its own copy when there is a backup).
        let report_path = self.backup_dir().join("report.json");
        storepatch::atomic::replace_file(
            &report_path,
            &done.report.to_json(),
            storepatch::atomic::FileMeta::private(),
        )?;
        self.state.report = Some(report_path.display().to_string());
        Ok(())
    }

    fn install_kubelet(&mut self) -> Result<(), StepError> {
        let new = self.new_kubelet().expect("only called with a new kubelet");
        let path = &self.kubelet_path();
        let backup = self.kubelet_backup_path();
        if self.state.kubelet_backup.is_none() {
            storepatch::atomic::create_dir_all_private(backup.parent().expect("has a parent"))?;
            let saved = save_binary(path, &backup)?;
            self.state.kubelet_backup = Some(saved);
            self.save();
        }
        self.state.done.binary_install_started = true;
        self.save();
        match self.staged_kubelet.take() {
            Some(staged) => {
                staged.commit()?;
                storepatch::atomic::sync_dir(path.parent().unwrap_or(Path::new("/")))?;
            }
            // A run that finishes a killed one has nothing staged.
            None => {
                let (bytes, _) = storepatch::atomic::read_regular_nofollow(&new).map_err(|e| {
                    StepError::failure(format!("the new kubelet {}: {e}", new.display()))
                })?;
                storepatch::atomic::replace_file(path, &bytes, binary_meta())?;
            }
        }
        self.state.done.binary_installed = true;
        Ok(())
    }

    pub(super) fn start_runtime(&mut self, undo: bool) -> Result<(), StepError> {
        let kind = self.store.kind();
        let endpoint = self.endpoint();
        if std::mem::take(&mut self.runtime_maybe_starting) {
            let grace = Instant::now() + RUNTIME_START_GRACE;
            let _ = wait_until(grace, || self.node.runtime_answers(kind, &endpoint));
        }
        // A runtime that already runs (a killed run started it; it may not answer yet, but it
        // holds its store) is not started twice: a second one would fail on its lock.
        if !self.node.runtime_answers(kind, &endpoint) && self.store.ensure_stopped().is_ok() {
            self.node.start_runtime()?;
        }
        self.state.done.runtime_up = true;
        self.save();
        let deadline = if undo {
            Instant::now() + ROLLBACK_WAIT
        } else {
            self.deadline()
        };
        wait_until(deadline, || self.node.runtime_answers(kind, &endpoint)).map_err(|_| {
            StepError::failure(format!(
                "the runtime does not answer at {endpoint} after its start command"
            ))
        })?;
        if let Some(t) = self.runtime_down.take() {
            self.state.runtime_down_ms = Some(ms(t.elapsed()));
        }
        Ok(())
    }

    fn verify_live(&mut self) -> Result<(), StepError> {
        let path = self
            .state
            .report
            .clone()
            .ok_or_else(|| StepError::failure("no patch report to verify"))?;
        let bytes = std::fs::read(&path).map_err(|source| crate::error::Error::Io {
            path: PathBuf::from(&path),
            source,
        })?;
        let report = Plan::from_json(&bytes)?;
        // After the switch cri-dockerd must adopt every sandbox and kept container, rewritten
        // or not: there is always something to verify.
        if report.rewrites().is_empty() && report.cri_dockerd.is_none() {
            self.state
                .notes
                .push("nothing was rewritten: nothing to verify live".into());
            return Ok(());
        }
        // `--endpoint` is dockerd's (the runtime's); the target kubelet talks to cri-dockerd,
        // and so does the verification, at the endpoint the switch planned (as `verify --live`
        // of a switch report). A socket-activated cri-dockerd accepts at once; one started by
        // the operator's command may take a moment.
        let endpoint = match &report.cri_dockerd {
            Some(switch) => {
                let ep = switch.endpoint.clone();
                let _ = wait_until(self.deadline(), || self.node.cri_dockerd_answers(&ep));
                Some(ep)
            }
            None => self.opts.endpoint.clone(),
        };
        let v = self.node.verify_live(&report, endpoint.as_deref())?;
        if !v.ok() {
            let p: Vec<String> = v.problems.iter().map(|p| p.to_string()).collect();
            return Err(StepError::failure(format!(
                "verify --live: {}",
                p.join("; ")
            )));
        }
        self.state.verified_live = Some(v.checked);
        Ok(())
    }

    pub(super) fn start_kubelet(&mut self) -> Result<(), StepError> {
        // A kubelet that already runs (a killed run started it, or its stop did not take) is
        // not started twice.
        if !self.node.healthy(&self.opts.healthz) && self.node.kubelet_pid().is_none() {
            self.node.start_kubelet()?;
        }
        if let Some(h) = &self.holder {
            h.kubelet_started();
        }
        self.state.done.kubelet_up = true;
        self.save();
        Ok(())
    }

    pub(super) fn wait_healthy(&mut self, undo: bool) -> Result<(), StepError> {
        let deadline = if undo {
            Instant::now() + ROLLBACK_WAIT
        } else {
            self.deadline()
        };
        let url = self.opts.healthz.clone();
        let interrupt = self.opts.interrupt;
        let mut interrupted = false;
        let ok = wait_until(deadline, || {
            if !undo && interrupt.load(Ordering::SeqCst) {
                interrupted = true;
                return true;
            }
            self.node.healthy(&url)
        });
        if interrupted {
            return Err(StepError::interrupted());
        }
        ok.map_err(|_| {
            StepError::failure(if undo {
                format!(
                    "the kubelet is not healthy at {url} within {} s",
                    ROLLBACK_WAIT.as_secs()
                )
            } else {
                format!(
                    "the kubelet is not healthy at {url} within the budget of {:.0} s",
                    self.budget.as_secs_f64()
                )
            })
        })?;
        if let Some(t) = self.kubelet_down.take() {
            self.state.kubelet_down_ms = Some(ms(t.elapsed()));
        }
        Ok(())
    }
}

/// Saves the installed kubelet at `path` into `backup`: a regular file is hard-linked (the
/// install replaces `path` by a rename, so the old inode keeps the old bytes; a copy when
/// they are on different file systems), a symbolic link is recorded as its target. Returns
/// what the state records: `file:<backup>` or `symlink:<target>`.
fn save_binary(path: &Path, backup: &Path) -> Result<String, StoreError> {
    let meta = std::fs::symlink_metadata(path).map_err(|e| StoreError::io(path, e))?;
    if meta.file_type().is_symlink() {
        let target = std::fs::read_link(path).map_err(|e| StoreError::io(path, e))?;
        return Ok(format!("symlink:{}", target.display()));
    }
    if !meta.file_type().is_file() {
        return Err(StoreError::Refused(format!(
            "{} is not a regular file",
            path.display()
        )));
    }
    let _ = std::fs::remove_file(backup);
    if std::fs::hard_link(path, backup).is_err() {
        let (bytes, fmeta) = storepatch::atomic::read_regular_nofollow(path)?;
        storepatch::atomic::replace_file(backup, &bytes, fmeta)?;
    }
    storepatch::atomic::sync_dir(backup.parent().unwrap_or(Path::new("/")))?;
    Ok(format!("file:{}", backup.display()))
}
