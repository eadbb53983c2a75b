//! One run of `upgrade`: what it was given, what it has done so far (the state file, rewritten
//! at every step), and the order of its phases: the preflight ([`super::preflight`]), the
//! window ([`super::window`]), and going back ([`super::undo`]) when the window fails.

use super::preflight::Preflight;
use super::step_error::StepError;
use super::{
    default_budget, Measured, NodeControl, Phase, Step, StepFailure, StepOutcome, StepRecord,
    UpgradeOptions, UpgradeReport, UpgradeResult, UpgradeState,
};
use super::{hold, state};
use crate::error::{Error, ErrorClass};
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use storepatch::RuntimeStore;

/// One run: the options, the node, the store, and the state it writes as it goes.
pub(super) struct Run<'a> {
    pub(super) opts: &'a UpgradeOptions,
    pub(super) node: &'a dyn NodeControl,
    pub(super) store: &'a dyn RuntimeStore,
    pub(super) state: UpgradeState,
    pub(super) budget: Duration,
    /// When the kubelet was stopped, in this process (the state holds the wall clock).
    pub(super) kubelet_down: Option<Instant>,
    pub(super) runtime_down: Option<Instant>,
    /// The pids of the containers that must survive, from the preflight plan, and of the
    /// running sandboxes and unproven containers, watched too.
    pub(super) kept_pids: Vec<(String, u32)>,
    /// Those of them already dead when the runtime was stopped: they died on their own (or
    /// with the kubelet's stop), not by the runtime's stop.
    pub(super) dead_before_runtime_stop: Vec<String>,
    pub(super) preflight_restarts: usize,
    /// A run that resumes a killed one: its byte rollback may meet a file the killed patch
    /// wrote without recording its sha256.
    pub(super) resumed: bool,
    /// The killed run died while starting the runtime: its start command may have run, and
    /// the runtime may still be coming up (a second start would fail on its lock).
    pub(super) runtime_maybe_starting: bool,
    /// When this run took over a killed one.
    pub(super) resumed_at: Option<Instant>,
    /// The new kubelet binary, written and made durable beside the installed one during the
    /// preflight: the window's install is then one rename.
    pub(super) staged_kubelet: Option<storepatch::atomic::StagedFile>,
    /// The node's heartbeat renewed while the kubelet is down.
    pub(super) holder: Option<hold::Holder>,
    /// The state file, shared with the holder's writes.
    pub(super) sink: std::sync::Arc<hold::SharedState>,
    /// The class of what ended this run short, when this process met it.
    pub(super) cause_class: Option<ErrorClass>,
}

impl<'a> Run<'a> {
    pub(super) fn new(
        opts: &'a UpgradeOptions,
        node: &'a dyn NodeControl,
        store: &'a dyn RuntimeStore,
        previous: Option<&UpgradeState>,
    ) -> Self {
        // Held Ready, the window is bounded by the hold's maximum, not the grace period.
        let budget = opts.budget.unwrap_or_else(|| match &opts.hold_ready {
            Some(h) => h.max,
            None => default_budget(opts.to),
        });
        let mut state = UpgradeState::new(opts, store, budget);
        if let Some(p) = previous {
            state.measured = p.measured.clone();
        }
        Run::with_state(opts, node, store, state, budget)
    }

    /// A run over `state` that has done nothing yet in this process.
    fn with_state(
        opts: &'a UpgradeOptions,
        node: &'a dyn NodeControl,
        store: &'a dyn RuntimeStore,
        state: UpgradeState,
        budget: Duration,
    ) -> Self {
        Run {
            opts,
            node,
            store,
            state,
            budget,
            kubelet_down: None,
            runtime_down: None,
            kept_pids: Vec::new(),
            dead_before_runtime_stop: Vec::new(),
            preflight_restarts: 0,
            resumed: false,
            runtime_maybe_starting: false,
            resumed_at: None,
            staged_kubelet: None,
            holder: None,
            sink: Default::default(),
            cause_class: None,
        }
    }

    pub(super) fn resume(
        opts: &'a UpgradeOptions,
        node: &'a dyn NodeControl,
        store: &'a dyn RuntimeStore,
        mut state: UpgradeState,
    ) -> Self {
        let budget = Duration::from_secs_f64(state.budget_s);
        state.pid = std::process::id();
        state.resumed_by.push(std::process::id());
        let now = state::unix_ms();
        let runtime_maybe_starting = state.steps.iter().any(|s| {
            s.outcome == StepOutcome::Running
                && matches!(s.step, Step::StartRuntime | Step::UndoStartRuntime)
        });
        for s in state
            .steps
            .iter_mut()
            .filter(|s| s.outcome == StepOutcome::Running)
        {
            s.outcome = StepOutcome::Killed;
            s.ended_unix_ms = Some(now);
            s.duration_ms = Some(now.saturating_sub(s.started_unix_ms) as f64);
            s.error = Some("the run died in this step (killed?)".into());
        }
        // The down times go on counting from the wall clock the killed run recorded.
        let since = |unix_ms: Option<u64>| {
            unix_ms.map(|t| {
                let ago = state::unix_ms().saturating_sub(t);
                Instant::now()
                    .checked_sub(Duration::from_millis(ago))
                    .unwrap_or_else(Instant::now)
            })
        };
        let kubelet_down = since(state.kubelet_stopped_unix_ms).filter(|_| !state.done.kubelet_up);
        let runtime_down = since(state.runtime_stopped_unix_ms).filter(|_| !state.done.runtime_up);
        if state.cri_dockerd_endpoint.is_some() {
            node.switching_to_cri_dockerd();
        }
        Run {
            kubelet_down,
            runtime_down,
            resumed: true,
            runtime_maybe_starting,
            resumed_at: Some(Instant::now()),
            ..Run::with_state(opts, node, store, state, budget)
        }
    }

    pub(super) fn save(&mut self) {
        self.state.updated_unix_ms = state::unix_ms();
        if let Some(t) = self.kubelet_down {
            self.state.kubelet_down_ms = Some(ms(t.elapsed()));
        }
        if let Some(t) = self.runtime_down {
            self.state.runtime_down_ms = Some(ms(t.elapsed()));
        }
        // A state that cannot be written is not a reason to leave the node half-done: the
        // run goes on, and says so in the final report.
        if let Some(h) = &self.holder {
            self.state.hold_ready = Some(h.log());
        }
        if let Err(e) = self.sink.write(&self.opts.state_path, &self.state) {
            let msg = e.to_string();
            if !self.state.state_write_errors.contains(&msg) {
                self.state.state_write_errors.push(msg);
            }
        }
    }

    /// Runs `f` as `step`: recorded (start, end, outcome) in the state file around it, the
    /// test seam and the interrupt flag checked first.
    pub(super) fn step<T>(
        &mut self,
        step: Step,
        f: impl FnOnce(&mut Self) -> Result<T, StepError>,
    ) -> Result<T, StepError> {
        self.state.steps.push(StepRecord::begin(step));
        self.save();
        let t0 = Instant::now();
        let out = if self.interrupted() && !step.is_undo() {
            Err(StepError::interrupted())
        } else {
            match self.node.before(step) {
                Err(e) => Err(e.into()),
                Ok(()) => f(self),
            }
        };
        let rec = self.state.steps.last_mut().expect("begun above");
        rec.end(t0.elapsed(), out.as_ref().err().map(|e| e.to_string()));
        self.save();
        out
    }

    /// The containers the window must keep whose process is gone, as `id (pid N)`.
    pub(super) fn dead_kept_containers(&self) -> Vec<String> {
        self.kept_pids
            .iter()
            .filter(|(_, pid)| !self.node.pid_alive(*pid))
            .map(|(id, pid)| format!("{id} (pid {pid})"))
            .collect()
    }

    pub(super) fn interrupted(&self) -> bool {
        self.opts.interrupt.load(Ordering::SeqCst)
    }

    /// Records a preflight that stopped the run (nothing was stopped): its class, the phase
    /// the state ends in, and the cause.
    fn preflight_failed(&mut self, class: ErrorClass, phase: Phase, cause: String) {
        self.cause_class = Some(class);
        self.state.phase = phase;
        self.state.failure = Some(StepFailure {
            step: Step::Preflight,
            cause,
        });
        self.save();
    }

    pub(super) fn go(&mut self) -> Result<UpgradeReport, Error> {
        self.state.phase = Phase::Preflight;
        self.save();
        match self.preflight() {
            Ok(()) => {}
            Err(Preflight::Usage(e)) => {
                self.preflight_failed(e.class(), Phase::Refused, e.to_string());
                return Err(e);
            }
            Err(Preflight::Refused(why)) => {
                self.preflight_failed(ErrorClass::Refused, Phase::Refused, why.clone());
                return Ok(self.report(UpgradeResult::Refused(why)));
            }
            Err(Preflight::Restarts(why)) => {
                self.preflight_failed(ErrorClass::Refused, Phase::RestartsNotAccepted, why.clone());
                return Ok(self.report(UpgradeResult::RestartsNotAccepted(why)));
            }
        }
        if self.interrupted() {
            let why = "interrupted (SIGINT/SIGTERM) before the window; nothing stopped".to_string();
            self.cause_class = Some(ErrorClass::Refused);
            self.state.phase = Phase::Refused;
            self.state.failure = Some(StepFailure {
                step: Step::Preflight,
                cause: why.clone(),
            });
            self.save();
            return Ok(self.report(UpgradeResult::Refused(why)));
        }
        self.state.phase = Phase::Window;
        self.save();
        Ok(match self.window() {
            Ok(()) => self.finish_done(),
            Err((step, e)) => self.roll_back(step, e),
        })
    }

    pub(super) fn report(&self, result: UpgradeResult) -> UpgradeReport {
        UpgradeReport {
            result,
            state: self.state.clone(),
            cause_class: self.cause_class,
        }
    }

    pub(super) fn finish_done(&mut self) -> UpgradeReport {
        self.finish_hold();
        self.state.phase = Phase::Done;
        self.kubelet_down = None;
        self.runtime_down = None;
        self.state.measured = Measured::from_steps(&self.state.steps, &self.state.measured);
        self.save();
        self.report(UpgradeResult::Done)
    }

    pub(super) fn endpoint(&self) -> String {
        self.opts
            .endpoint
            .clone()
            .unwrap_or_else(|| self.store.endpoint())
    }

    /// When the window's waits give up: the budget from the kubelet's stop; for a run that
    /// finishes a killed one, the budget from its own start (the budget may be spent already,
    /// and giving up at once would turn a finished patch into a rollback).
    pub(super) fn deadline(&self) -> Instant {
        match self.resumed_at {
            Some(t) => t + self.budget,
            None => self.kubelet_down.unwrap_or_else(Instant::now) + self.budget,
        }
    }

    /// From the kubelet's stop on, the heartbeat is renewed by this run (not by a run that
    /// finishes a killed one: it does not know which processes to watch, and the node had
    /// its grace period run out or not already).
    pub(super) fn start_hold(&mut self) {
        if self.holder.is_some() || self.resumed {
            return;
        }
        if let Some(hold) = &self.opts.hold_ready {
            self.holder = Some(hold::Holder::start(
                hold,
                &self.kept_pids,
                &self.node.proc_dir(),
                self.sink.clone(),
            ));
            self.save();
        }
    }

    /// Waits (up to two renewal intervals) for the started kubelet's own renewal, then stops
    /// holding and records how it ended.
    pub(super) fn finish_hold(&mut self) {
        if let Some(h) = self.holder.take() {
            let wait = Duration::from_secs_f64(h.log().interval_s * 2.0);
            self.state.hold_ready = Some(h.finish(wait));
            self.save();
        }
    }

    /// This run's backup directory: the state's, so a run that finishes a killed one uses
    /// the killed run's backups whatever it was given itself.
    pub(super) fn backup_dir(&self) -> PathBuf {
        PathBuf::from(&self.state.backup_dir)
    }

    pub(super) fn store_backup_dir(&self) -> PathBuf {
        self.backup_dir().join("store")
    }

    pub(super) fn kubelet_path(&self) -> PathBuf {
        PathBuf::from(&self.state.kubelet_path)
    }

    pub(super) fn new_kubelet(&self) -> Option<PathBuf> {
        self.state.new_kubelet.as_ref().map(PathBuf::from)
    }

    pub(super) fn kubelet_backup_path(&self) -> PathBuf {
        self.backup_dir().join("kubelet").join("kubelet")
    }
}

/// The first few of a long list, and how many more.
pub(super) fn first_few(items: &[String]) -> String {
    const SHOWN: usize = 5;
    let mut s = items
        .iter()
        .take(SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if items.len() > SHOWN {
        s.push_str(&format!(" and {} more", items.len() - SHOWN));
    }
    s
}

pub(super) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Polls `done` every 50 ms until it holds (`Ok`) or `deadline` passes (`Err`).
pub(super) fn wait_until(deadline: Instant, mut done: impl FnMut() -> bool) -> Result<(), ()> {
    loop {
        if done() {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(());
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A kubelet binary: mode 0755, owned by whoever runs the upgrade (root on a node).
pub(super) fn binary_meta() -> storepatch::atomic::FileMeta {
    storepatch::atomic::FileMeta {
        mode: 0o755,
        ..storepatch::atomic::FileMeta::private()
    }
}
