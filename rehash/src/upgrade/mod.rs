//! `upgrade`: the whole maintenance window of one node in one call — preflight with nothing
//! stopped, then stop the kubelet and the runtime, patch, install the new kubelet binary,
//! start the runtime, verify it live, start the kubelet and wait for its health endpoint; any
//! failure (or a SIGINT/SIGTERM the caller reports through [`UpgradeOptions::interrupt`]) rolls
//! back what was done and starts the runtime and the *old* kubelet again.
//!
//! Everything that touches the node's services and processes goes through [`NodeControl`]:
//! [`SystemNode`] is the real one (systemd units, or the operator's shell commands), and tests
//! drive every failure path through their own implementation ([`NodeControl::before`] is the
//! seam; the real one never fails there). No environment variable changes what it does.
//!
//! Progress is the state file ([`UpgradeState`], docs/upgrade.md), rewritten atomically
//! (temp + fsync + rename) at every step, so a fleet engine can poll it while the work runs,
//! and a run killed with `kill -9` is finished by the next one given the same file: forward
//! when the patch was complete and read back, otherwise back.

mod flags;
pub mod hold;
mod state;
mod system;

pub use flags::KubeletFlags;
pub use hold::{Beat, HoldEnd, HoldLog, HoldReady, NodeHeartbeat, RenewalRecord, DEFAULT_HOLD_MAX};

pub use state::{
    FlagsFileRecord, Measured, Phase, Progressed, Step, StepFailure, StepOutcome, StepRecord,
    UpgradeState, STATE_FORMAT,
};
pub use system::{kubelet_version_of, SystemNode, DEFAULT_HEALTHZ};

use crate::error::Error;
use crate::hazard::Severity;
use crate::node::StoreLocation;
use crate::patch::BackupOptions;
use crate::plan::{From, NodeFiles, Plan};
use crate::pods::ContainerState;
use crate::verify::LiveVerification;
use hashcompat::KubeletVersion;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use storepatch::{RuntimeKind, RuntimeStore, StoreError};

/// The service control and process view of a node: the test seam of [`upgrade`].
pub trait NodeControl {
    /// Stops the kubelet (returns when the stop command returned).
    fn stop_kubelet(&self) -> Result<(), String>;
    /// Starts the kubelet.
    fn start_kubelet(&self) -> Result<(), String>;
    /// Stops the container runtime.
    fn stop_runtime(&self) -> Result<(), String>;
    /// Starts the container runtime.
    fn start_runtime(&self) -> Result<(), String>;
    /// Why stopping the runtime will not kill the containers (`Ok(how we know)`), or why it
    /// would (`Err`): a containerd/CRI-O unit's `KillMode`, Docker's live-restore.
    fn runtime_keeps_containers(&self, kind: RuntimeKind, endpoint: &str)
        -> Result<String, String>;
    /// The running kubelet's pid, when one runs.
    fn kubelet_pid(&self) -> Option<u32>;
    /// A process's command line (argv), when it exists.
    fn cmdline(&self, pid: u32) -> Option<Vec<String>>;
    /// Whether a process exists.
    fn pid_alive(&self, pid: u32) -> bool;
    /// Runs a binary with arguments: whether it exited 0, and what it printed (both streams).
    fn run_binary(&self, binary: &Path, args: &[String]) -> Result<(bool, String), String>;
    /// Whether the kubelet's health endpoint answers `ok`.
    fn healthy(&self, url: &str) -> bool;
    /// The host's `/proc`, where the hold reads the watched containers' processes.
    fn proc_dir(&self) -> PathBuf {
        PathBuf::from("/proc")
    }
    /// Whether the runtime's API answers (after its start).
    fn runtime_answers(&self, kind: RuntimeKind, endpoint: &str) -> bool {
        kind.runtime().live_containers(endpoint).is_ok()
    }
    /// `verify --live` against the restarted runtime.
    fn verify_live(
        &self,
        report: &Plan,
        endpoint: Option<&str>,
    ) -> Result<LiveVerification, Error> {
        crate::verify::verify_live(report, endpoint)
    }
    /// The plan switches this Docker node from dockershim to cri-dockerd: from now on the
    /// runtime's stop and start cover cri-dockerd too (its units with systemd's defaults; the
    /// operator's commands are trusted to).
    fn switching_to_cri_dockerd(&self) {}
    /// Whether cri-dockerd accepts connections at its CRI endpoint (after the runtime's start).
    fn cri_dockerd_answers(&self, endpoint: &str) -> bool {
        crate::verify::endpoint_socket(endpoint)
            .is_some_and(|s| std::os::unix::net::UnixStream::connect(s).is_ok())
    }
    /// Called when `step` begins; an `Err` fails that step. The real node never fails here:
    /// this is where tests inject faults (and signals) at every step.
    fn before(&self, _step: Step) -> Result<(), String> {
        Ok(())
    }
}

/// What [`upgrade`] is asked to do.
#[derive(Debug)]
pub struct UpgradeOptions {
    /// `kubectl get pods -A --field-selector spec.nodeName=NODE -o json`.
    pub pods: Vec<u8>,
    /// The node's kubelet version now.
    pub from: From,
    /// The kubelet version to go to (older than the node's: the downgrade path).
    pub to: KubeletVersion,
    /// The store.
    pub location: StoreLocation,
    /// Static pod manifests and the kubelet's checkpoint directory.
    pub node_files: NodeFiles,
    /// Where this run's backups go (must not exist, or be empty): the store's in `store/`, the
    /// old kubelet binary in `kubelet/`.
    pub backup_dir: PathBuf,
    /// Move checkpoints the target kubelet rejects into the backup (see [`BackupOptions`]).
    pub set_aside_checkpoints: bool,
    /// The installed kubelet binary (resolved on the node already).
    pub kubelet_path: PathBuf,
    /// The new kubelet binary to install, when the kubelet binary changes.
    pub new_kubelet: Option<PathBuf>,
    /// How long the kubelet may be down; `None`: [`default_budget`].
    pub budget: Option<Duration>,
    /// The state file.
    pub state_path: PathBuf,
    /// The kubelet's health endpoint ([`DEFAULT_HEALTHZ`]).
    pub healthz: String,
    /// Go on although the plan says some containers restart anyway.
    pub accept_restarts: bool,
    /// The runtime endpoint `verify --live` asks (default: the store's).
    pub endpoint: Option<String>,
    /// A Docker node crossing 1.23 → 1.24: where dockershim's checkpoints are, cri-dockerd's
    /// binary, root and endpoint ([`crate::cri_dockerd::plan_switch`]).
    pub cri_dockerd: crate::cri_dockerd::SwitchOptions,
    /// The kubelet flag files the switch rewrites.
    pub kubelet_flags: KubeletFlags,
    /// Set by the caller's SIGINT/SIGTERM handler: inside the window the run rolls back to a
    /// safe state; before it, it stops with nothing stopped.
    pub interrupt: &'static AtomicBool,
    /// Renew the node's heartbeat while the kubelet is down ([`hold`]); `None`: the window
    /// must fit the grace period.
    pub hold_ready: Option<HoldReady>,
}

/// The switch's hazard for a cri-dockerd that answers (it must be stopped before the patch).
const CRI_DOCKERD_RUNNING: &str = "cri-dockerd-running";
/// A warning for `plan`/`patch` (cri-dockerd may be installed after the patch, before the new
/// kubelet starts), a refusal for `upgrade`: its window starts the new kubelet, which without
/// cri-dockerd finds no runtime, and its verify step could only fail after the node was down.
const CRI_DOCKERD_MISSING: &str = "cri-dockerd-missing";

/// How long the kubelet may be down before the node goes NotReady: the control plane's
/// node-monitor-grace-period, 40 s, 50 s from Kubernetes 1.32.
pub fn default_budget(to: KubeletVersion) -> Duration {
    if to.minor() >= 32 {
        Duration::from_secs(50)
    } else {
        Duration::from_secs(40)
    }
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpgradeResult {
    /// Upgraded, verified, kubelet healthy (exit 0).
    Done,
    /// Refused in preflight; nothing was stopped (exit 3).
    Refused(String),
    /// The plan says some containers restart and that was not accepted; nothing stopped
    /// (exit 4).
    RestartsNotAccepted(String),
    /// A step of the window failed; everything done was undone and the runtime and the old
    /// kubelet run again (exit 3).
    RolledBack {
        /// The step that failed.
        step: Step,
        /// Why.
        cause: String,
    },
    /// Undoing failed too (exit 1): the state file says what is left.
    Failed {
        /// The step that failed first.
        step: Step,
        /// Why it failed, and what failed while undoing it.
        cause: String,
    },
}

/// What [`upgrade`] returns: how it ended, and the final state (as written to the state file).
#[derive(Debug, Clone)]
pub struct UpgradeReport {
    /// How it ended.
    pub result: UpgradeResult,
    /// The final state.
    pub state: UpgradeState,
}

/// Defaults when no earlier run measured this node: generous, so a first run is not refused
/// for times it has not seen.
const DEFAULT_STOP_KUBELET: Duration = Duration::from_secs(2);
const DEFAULT_STOP_RUNTIME: Duration = Duration::from_secs(3);
const DEFAULT_START_RUNTIME: Duration = Duration::from_secs(5);
const DEFAULT_KUBELET_HEALTHY: Duration = Duration::from_secs(10);

/// How long a run that finishes a killed one waits for a runtime the killed run may have
/// started, before it starts one itself.
const RUNTIME_START_GRACE: Duration = Duration::from_secs(10);

/// How long undoing may wait for a service, per wait: undoing is not held to the budget (the
/// budget was already lost), but must not hang.
const ROLLBACK_WAIT: Duration = Duration::from_secs(60);

/// Runs one node's upgrade window, or finishes the one a killed run left in `state_path`.
/// Usage errors (a bad pods file, an unknown store) are `Err` before anything was stopped;
/// everything else is an [`UpgradeResult`].
pub fn upgrade(opts: &UpgradeOptions, node: &dyn NodeControl) -> Result<UpgradeReport, Error> {
    let store = opts.location.open()?;
    // Held to the end, across the window: a second run waits its turn instead of stopping
    // services under this one.
    let _lock = storepatch::session::hold(store.root(), &opts.location.state_dirs())?;
    let previous = UpgradeState::read(&opts.state_path)?;
    // What a later run believes of this run's state (its backup directory) is checked now,
    // before anything stops, not when that later run needs it.
    state::backup_dir_allowed(&opts.backup_dir, &opts.state_path).map_err(Error::State)?;
    if let Some(prev) = previous.as_ref().filter(|p| p.unfinished()) {
        // The installed kubelet the killed run recorded is the one this run was given: a
        // state naming another file is not this node's run (or was forged).
        if Path::new(&prev.kubelet_path) != opts.kubelet_path {
            return Err(Error::UntrustedState(format!(
                "{}: the unfinished run it records installs the kubelet at {}, not at {} as this run was given: finish it with the same --kubelet-path",
                opts.state_path.display(),
                prev.kubelet_path,
                opts.kubelet_path.display()
            )));
        }
    }
    // A killed run may have left the new kubelet staged beside the installed one.
    let kubelet_path = match previous.as_ref().filter(|p| p.unfinished()) {
        Some(p) => PathBuf::from(&p.kubelet_path),
        None => opts.kubelet_path.clone(),
    };
    sweep_kubelet_temps(&kubelet_path);
    if let Some(prev) = previous.as_ref().filter(|p| p.unfinished()) {
        let here = store.root().display().to_string();
        if prev.root != here || prev.runtime != store.kind() {
            return Err(Error::Report {
                reason: format!(
                    "{}: the unfinished run it records is of the {} store at {}, not of the {} store at {here}: finish it with that store's flags",
                    opts.state_path.display(),
                    prev.runtime.name(),
                    prev.root,
                    store.kind().name()
                ),
            });
        }
        let mut run = Run::resume(opts, node, store.as_ref(), prev.clone());
        return Ok(run.finish_interrupted_run());
    }
    // A new kubelet that is not there is a wrong argument (exit 2), found before anything is
    // read or stopped, not a refusal of the preflight.
    if let Some(new) = &opts.new_kubelet {
        match std::fs::metadata(new) {
            Ok(m) if m.is_file() => {}
            Ok(_) => {
                return Err(Error::Argument(format!(
                    "--kubelet-binary {}: not a regular file",
                    new.display()
                )))
            }
            Err(e) => {
                return Err(Error::Argument(format!(
                    "--kubelet-binary {}: {e}",
                    new.display()
                )))
            }
        }
    }
    let mut run = Run::new(opts, node, store.as_ref(), previous.as_ref());
    run.go()
}

/// Finishes the run a killed `upgrade` left in the state file by going back, whatever it got
/// to (`rollback --state`). A state that is finished is left as it is.
pub fn rollback_state(
    state_path: &Path,
    location: &StoreLocation,
    healthz: &str,
    node: &dyn NodeControl,
    interrupt: &'static AtomicBool,
) -> Result<UpgradeReport, Error> {
    let Some(prev) = UpgradeState::read(state_path)? else {
        return Err(Error::Report {
            reason: format!("{}: no upgrade state file there", state_path.display()),
        });
    };
    let mut location = location.clone();
    if location.root.is_none() {
        location.runtime = Some(prev.runtime);
        location.root = Some(PathBuf::from(&prev.root));
    }
    let store = location.open()?;
    let _lock = storepatch::session::hold(store.root(), &location.state_dirs())?;
    if !prev.unfinished() {
        let (step, cause) = prev.first_failure();
        let result = match prev.phase {
            Phase::Done => UpgradeResult::Done,
            Phase::Failed => UpgradeResult::Failed { step, cause },
            _ => UpgradeResult::RolledBack { step, cause },
        };
        return Ok(UpgradeReport {
            result,
            state: prev,
        });
    }
    let opts = UpgradeOptions {
        pods: Vec::new(),
        from: From::Auto,
        to: prev.to,
        location,
        node_files: NodeFiles::default(),
        backup_dir: PathBuf::from(&prev.backup_dir),
        set_aside_checkpoints: false,
        kubelet_path: PathBuf::from(&prev.kubelet_path),
        new_kubelet: prev.new_kubelet.as_ref().map(PathBuf::from),
        budget: Some(Duration::from_secs_f64(prev.budget_s)),
        state_path: state_path.to_path_buf(),
        healthz: healthz.to_string(),
        accept_restarts: false,
        endpoint: None,
        cri_dockerd: crate::cri_dockerd::SwitchOptions::default(),
        kubelet_flags: KubeletFlags::Keep,
        interrupt,
        hold_ready: None,
    };
    sweep_kubelet_temps(&opts.kubelet_path);
    let mut run = Run::resume(&opts, node, store.as_ref(), prev);
    let (step, cause) = match &run.state.failure {
        Some(f) => (f.step, f.cause.clone()),
        None => (
            run.state.last_step(),
            "an earlier run was killed mid-window; rolled back by `rollback --state`".into(),
        ),
    };
    Ok(run.roll_back(step, cause))
}

/// Why a window step failed.
struct StepError(String);

impl<E: std::fmt::Display> std::convert::From<E> for StepError {
    fn from(e: E) -> Self {
        StepError(e.to_string())
    }
}

struct Run<'a> {
    opts: &'a UpgradeOptions,
    node: &'a dyn NodeControl,
    store: &'a dyn RuntimeStore,
    state: UpgradeState,
    budget: Duration,
    /// When the kubelet was stopped, in this process (the state holds the wall clock).
    kubelet_down: Option<Instant>,
    runtime_down: Option<Instant>,
    /// The pids of the containers that must survive, from the preflight plan.
    kept_pids: Vec<(String, u32)>,
    preflight_restarts: usize,
    /// A run that resumes a killed one: its byte rollback may meet a file the killed patch
    /// wrote without recording its sha256.
    resumed: bool,
    /// The killed run died while starting the runtime: its start command may have run, and
    /// the runtime may still be coming up (a second start would fail on its lock).
    runtime_maybe_starting: bool,
    /// When this run took over a killed one.
    resumed_at: Option<Instant>,
    /// The new kubelet binary, written and made durable beside the installed one during the
    /// preflight: the window's install is then one rename.
    staged_kubelet: Option<storepatch::atomic::StagedFile>,
    /// The node's heartbeat renewed while the kubelet is down.
    holder: Option<hold::Holder>,
    /// The state file, shared with the holder's writes.
    sink: std::sync::Arc<hold::SharedState>,
}

impl<'a> Run<'a> {
    fn new(
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
        Run {
            opts,
            node,
            store,
            state,
            budget,
            kubelet_down: None,
            runtime_down: None,
            kept_pids: Vec::new(),
            preflight_restarts: 0,
            resumed: false,
            runtime_maybe_starting: false,
            resumed_at: None,
            staged_kubelet: None,
            holder: None,
            sink: Default::default(),
        }
    }

    fn resume(
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
            opts,
            node,
            store,
            state,
            budget,
            kubelet_down,
            runtime_down,
            kept_pids: Vec::new(),
            preflight_restarts: 0,
            resumed: true,
            runtime_maybe_starting,
            resumed_at: Some(Instant::now()),
            staged_kubelet: None,
            holder: None,
            sink: Default::default(),
        }
    }

    fn save(&mut self) {
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
    fn step<T>(
        &mut self,
        step: Step,
        f: impl FnOnce(&mut Self) -> Result<T, StepError>,
    ) -> Result<T, StepError> {
        self.state.steps.push(StepRecord::begin(step));
        self.save();
        let t0 = Instant::now();
        let out = if self.interrupted() && !step.is_undo() {
            Err(StepError(
                "interrupted (SIGINT/SIGTERM): going back to a safe state".into(),
            ))
        } else {
            match self.node.before(step) {
                Err(e) => Err(StepError(e)),
                Ok(()) => f(self),
            }
        };
        let rec = self.state.steps.last_mut().expect("begun above");
        rec.end(t0.elapsed(), out.as_ref().err().map(|e| e.0.clone()));
        self.save();
        out
    }

    fn interrupted(&self) -> bool {
        self.opts.interrupt.load(Ordering::SeqCst)
    }

    fn go(&mut self) -> Result<UpgradeReport, Error> {
        self.state.phase = Phase::Preflight;
        self.save();
        match self.preflight() {
            Ok(()) => {}
            Err(Preflight::Usage(e)) => {
                self.state.phase = Phase::Refused;
                self.state.failure = Some(StepFailure {
                    step: Step::Preflight,
                    cause: e.to_string(),
                });
                self.save();
                return Err(e);
            }
            Err(Preflight::Refused(why)) => {
                self.state.phase = Phase::Refused;
                self.state.failure = Some(StepFailure {
                    step: Step::Preflight,
                    cause: why.clone(),
                });
                self.save();
                return Ok(self.report(UpgradeResult::Refused(why)));
            }
            Err(Preflight::Restarts(why)) => {
                self.state.phase = Phase::RestartsNotAccepted;
                self.state.failure = Some(StepFailure {
                    step: Step::Preflight,
                    cause: why.clone(),
                });
                self.save();
                return Ok(self.report(UpgradeResult::RestartsNotAccepted(why)));
            }
        }
        if self.interrupted() {
            let why = "interrupted (SIGINT/SIGTERM) before the window; nothing stopped".to_string();
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
            Err((step, e)) => self.roll_back(step, e.0),
        })
    }

    fn report(&self, result: UpgradeResult) -> UpgradeReport {
        UpgradeReport {
            result,
            state: self.state.clone(),
        }
    }

    fn finish_done(&mut self) -> UpgradeReport {
        self.finish_hold();
        self.state.phase = Phase::Done;
        self.kubelet_down = None;
        self.runtime_down = None;
        self.state.measured = Measured::from_steps(&self.state.steps, &self.state.measured);
        self.save();
        self.report(UpgradeResult::Done)
    }

    // ------------------------------------------------------------------------------------
    // preflight: nothing stopped
    // ------------------------------------------------------------------------------------

    fn preflight(&mut self) -> Result<(), Preflight> {
        let t0 = Instant::now();
        self.state.steps.push(StepRecord::begin(Step::Preflight));
        self.save();
        let out = self.preflight_checks();
        let rec = self.state.steps.last_mut().expect("begun above");
        let err = match &out {
            Ok(()) => None,
            Err(Preflight::Usage(e)) => Some(e.to_string()),
            Err(Preflight::Refused(w)) | Err(Preflight::Restarts(w)) => Some(w.clone()),
        };
        rec.end(t0.elapsed(), err);
        self.save();
        out
    }

    fn preflight_checks(&mut self) -> Result<(), Preflight> {
        let refuse = |s: String| Err(Preflight::Refused(s));
        self.node
            .before(Step::Preflight)
            .map_err(Preflight::Refused)?;
        if self.interrupted() {
            return refuse(
                "interrupted (SIGINT/SIGTERM) before the window; nothing stopped".into(),
            );
        }
        let plan = self.plan(self.opts.from).map_err(Preflight::from)?;
        self.state.from = plan.from;
        self.state.summary = Some(plan.summary.clone());
        self.state.hazards = plan
            .hazards
            .iter()
            .map(|h| format!("[{}] {}", h.code, h.message))
            .collect();
        self.save();
        let blocking: Vec<String> = plan
            .hazards
            .iter()
            .filter(|h| h.severity == Severity::Block || h.code == CRI_DOCKERD_MISSING)
            .filter(|h| !(self.opts.set_aside_checkpoints && h.code == "checkpoint-rejected"))
            // the window stops cri-dockerd with the runtime; the patch step's plan, made with
            // both stopped, refuses if it still answers
            .filter(|h| h.code != CRI_DOCKERD_RUNNING)
            .map(|h| format!("[{}] {}", h.code, h.message))
            .collect();
        if !blocking.is_empty() {
            return refuse(format!("block hazard(s): {}", blocking.join("; ")));
        }
        if plan.hazards.iter().any(|h| h.code == CRI_DOCKERD_RUNNING) {
            self.state.notes.push(
                "cri-dockerd answers now: the runtime's stop in the window stops it too".into(),
            );
        }
        let endpoint = self.endpoint();
        match self
            .node
            .runtime_keeps_containers(self.store.kind(), &endpoint)
        {
            Ok(how) => self
                .state
                .notes
                .push(format!("runtime stop keeps the containers: {how}")),
            Err(why) => return refuse(why),
        }
        if let Err(e) = self.store.precheck() {
            return refuse(e.to_string());
        }
        self.kept_pids = kept_pids(&plan);
        let dead: Vec<String> = self
            .kept_pids
            .iter()
            .filter(|(_, pid)| !self.node.pid_alive(*pid))
            .map(|(id, pid)| format!("{id} (pid {pid})"))
            .collect();
        if !dead.is_empty() {
            return refuse(format!(
                "the runtime records {} running container(s) whose process does not exist: {}; is this the node's store, and is the pods file current?",
                dead.len(),
                first_few(&dead)
            ));
        }
        let running: Option<Vec<String>> = self
            .node
            .kubelet_pid()
            .and_then(|pid| self.node.cmdline(pid))
            .map(|argv| argv.into_iter().skip(1).collect());
        let switched_args = self.plan_kubelet_flags(&plan, running.as_deref())?;
        self.check_new_kubelet(switched_args)?;
        if std::fs::read_dir(&self.opts.backup_dir).is_ok_and(|mut d| d.next().is_some()) {
            return refuse(format!(
                "the backup directory {} is not empty: give each run a new one",
                self.opts.backup_dir.display()
            ));
        }
        self.check_backup_room(&plan)?;
        if let Some(hold) = &self.opts.hold_ready {
            let mut hb = hold.heartbeat.lock().unwrap_or_else(|p| p.into_inner());
            match hb.check() {
                Ok(()) => self.state.notes.push(format!(
                    "holding the node Ready while the kubelet is down: renewing the {} every {:.0} s for at most {:.0} s (a dry-run renewal was allowed)",
                    hb.describe(),
                    hb.interval().as_secs_f64(),
                    hold.max.as_secs_f64()
                )),
                Err(e) => {
                    return refuse(format!(
                        "cannot hold the node Ready: {e}; nothing stopped (--no-hold-ready goes without, inside the grace period)"
                    ))
                }
            }
        }
        let predicted = self.predicted_window(&plan);
        self.state.predicted_window_s = Some(predicted.as_secs_f64());
        if predicted > self.budget {
            return refuse(format!(
                "the predicted kubelet-down window {:.1} s does not fit the budget {:.0} s ({})",
                predicted.as_secs_f64(),
                self.budget.as_secs_f64(),
                self.state.measured.describe()
            ));
        }
        self.preflight_restarts = plan.summary.would_restart_after_rewrite;
        if plan.incomplete() && !self.opts.accept_restarts {
            return Err(Preflight::Restarts(format!(
                "{}; nothing stopped (accept with --accept-restarts)",
                plan.summary.sentence
            )));
        }
        if let Some(new) = &self.opts.new_kubelet {
            // Written and fsynced now, with nothing stopped: a 100 MB binary costs the window
            // one rename instead of a copy.
            let staged = storepatch::atomic::read_regular_nofollow(new).and_then(|(bytes, _)| {
                storepatch::atomic::stage_file(&self.opts.kubelet_path, &bytes, binary_meta())
            });
            match staged {
                Ok(s) => self.staged_kubelet = Some(s),
                Err(e) => {
                    return refuse(format!(
                        "cannot stage the new kubelet beside {}: {e}",
                        self.opts.kubelet_path.display()
                    ))
                }
            }
        }
        Ok(())
    }

    /// The plan, and the dockershim → cri-dockerd switch when the node crosses 1.23 → 1.24
    /// (recorded in the state, and the node told: its runtime stop and start cover
    /// cri-dockerd from then on).
    fn plan(&mut self, from: From) -> Result<Plan, Error> {
        let (mut plan, networks) = Plan::build_with_networks(
            &self.opts.pods,
            self.store,
            from,
            self.opts.to,
            &self.opts.node_files,
        )?;
        crate::cri_dockerd::plan_switch_with_networks(
            &mut plan,
            &networks,
            &self.opts.cri_dockerd,
        )?;
        if let Some(switch) = &plan.cri_dockerd {
            self.state.cri_dockerd_endpoint = Some(switch.endpoint.clone());
            self.node.switching_to_cri_dockerd();
        }
        Ok(plan)
    }

    fn endpoint(&self) -> String {
        self.opts
            .endpoint
            .clone()
            .unwrap_or_else(|| self.store.endpoint())
    }

    /// The new binary reports `--to` and accepts the node's kubelet command line: the
    /// running one's, or `switched_args` (that one as the rewritten flag files give it).
    fn check_new_kubelet(&mut self, switched_args: Option<Vec<String>>) -> Result<(), Preflight> {
        let Some(new) = &self.opts.new_kubelet else {
            return Ok(());
        };
        let (ok, out) = self
            .node
            .run_binary(new, &["--version".to_string()])
            .map_err(|e| Preflight::Refused(format!("{} --version: {e}", new.display())))?;
        if !ok {
            return Err(Preflight::Refused(format!(
                "{} --version failed: {}",
                new.display(),
                out.trim()
            )));
        }
        match version_in(&out) {
            Some((1, minor)) if minor == self.opts.to.minor() => {}
            Some((major, minor)) => {
                return Err(Preflight::Refused(format!(
                    "{} is kubelet {major}.{minor}, not {} (--to)",
                    new.display(),
                    self.opts.to
                )))
            }
            None => {
                return Err(Preflight::Refused(format!(
                    "{} --version printed no kubelet version: {}",
                    new.display(),
                    out.trim()
                )))
            }
        }
        let Some(pid) = self.node.kubelet_pid() else {
            return Err(Preflight::Refused(
                "no running kubelet found, so its command line cannot be checked against the new binary (give the kubelet's pid file)".into(),
            ));
        };
        let Some(argv) = self.node.cmdline(pid) else {
            return Err(Preflight::Refused(format!(
                "cannot read the command line of the kubelet (pid {pid})"
            )));
        };
        let mut args: Vec<String> =
            switched_args.unwrap_or_else(|| argv.into_iter().skip(1).collect());
        args.push("--version".into());
        let (ok, out) = self
            .node
            .run_binary(new, &args)
            .map_err(|e| Preflight::Refused(format!("{}: {e}", new.display())))?;
        if !ok {
            return Err(Preflight::Refused(format!(
                "the new kubelet {} does not accept this node's kubelet command line (it would not start): {}",
                new.display(),
                out.trim()
            )));
        }
        self.state.notes.push(format!(
            "the new kubelet accepts the running kubelet's {} argument(s)",
            args.len() - 1
        ));
        Ok(())
    }

    fn check_backup_room(&mut self, plan: &Plan) -> Result<(), Preflight> {
        let mut need: u64 = 1 << 20;
        need += backup_estimate(self.store, plan);
        if self.opts.new_kubelet.is_some() {
            need += std::fs::metadata(&self.opts.kubelet_path)
                .map(|m| m.len())
                .unwrap_or(0);
        }
        let Some(free) = free_bytes(&self.opts.backup_dir) else {
            return Err(Preflight::Refused(format!(
                "cannot tell the free space for the backup at {}",
                self.opts.backup_dir.display()
            )));
        };
        self.state.notes.push(format!(
            "backup needs about {} KiB, {} KiB free",
            need / 1024,
            free / 1024
        ));
        if free < need {
            return Err(Preflight::Refused(format!(
                "no room for the backup at {}: about {} KiB needed, {} KiB free",
                self.opts.backup_dir.display(),
                need / 1024,
                free / 1024
            )));
        }
        Ok(())
    }

    /// The kubelet-down window: the services' stop and start times (measured by earlier runs
    /// in the state file, else the defaults) plus our own steps, scaled from this node's plan:
    /// backup and rewrite and read-back cost about as much again as the plan's scan, and the
    /// window plans once more.
    fn predicted_window(&self, plan: &Plan) -> Duration {
        let m = &self.state.measured;
        let ours = Duration::from_secs_f64(plan.timings.total_ms.max(1.0) * 3.0 / 1e3);
        let binary = if self.opts.new_kubelet.is_some() {
            Duration::from_millis(500)
        } else {
            Duration::ZERO
        };
        m.stop_kubelet(DEFAULT_STOP_KUBELET)
            + m.stop_runtime(DEFAULT_STOP_RUNTIME)
            + m.start_runtime(DEFAULT_START_RUNTIME)
            + m.kubelet_healthy(DEFAULT_KUBELET_HEALTHY)
            + ours
            + binary
    }

    // ------------------------------------------------------------------------------------
    // the window
    // ------------------------------------------------------------------------------------

    /// When the window's waits give up: the budget from the kubelet's stop; for a run that
    /// finishes a killed one, the budget from its own start (the budget may be spent already,
    /// and giving up at once would turn a finished patch into a rollback).
    fn deadline(&self) -> Instant {
        match self.resumed_at {
            Some(t) => t + self.budget,
            None => self.kubelet_down.unwrap_or_else(Instant::now) + self.budget,
        }
    }

    fn window(&mut self) -> Result<(), (Step, StepError)> {
        let at = |s: Step| move |e: StepError| (s, e);
        self.step(Step::StopKubelet, |r| r.stop_kubelet())
            .map_err(at(Step::StopKubelet))?;
        self.step(Step::StopRuntime, |r| r.stop_runtime(false))
            .map_err(at(Step::StopRuntime))?;
        self.step(Step::CheckContainers, |r| r.check_containers())
            .map_err(at(Step::CheckContainers))?;
        self.step(Step::Patch, |r| r.patch())
            .map_err(at(Step::Patch))?;
        self.forward()
    }

    /// From a complete, read-back patch to a healthy new kubelet.
    fn forward(&mut self) -> Result<(), (Step, StepError)> {
        let at = |s: Step| move |e: StepError| (s, e);
        if self.new_kubelet().is_some() && !self.state.done.binary_installed {
            self.step(Step::InstallKubelet, |r| r.install_kubelet())
                .map_err(at(Step::InstallKubelet))?;
        }
        if self.flags_pending() {
            self.step(Step::KubeletFlags, |r| r.rewrite_kubelet_flags())
                .map_err(at(Step::KubeletFlags))?;
        }
        if !self.state.done.runtime_up {
            self.step(Step::StartRuntime, |r| r.start_runtime(false))
                .map_err(at(Step::StartRuntime))?;
        }
        self.step(Step::VerifyLive, |r| r.verify_live())
            .map_err(at(Step::VerifyLive))?;
        if !self.state.done.kubelet_up {
            self.step(Step::StartKubelet, |r| r.start_kubelet())
                .map_err(at(Step::StartKubelet))?;
        }
        self.step(Step::WaitHealthy, |r| r.wait_healthy(false))
            .map_err(at(Step::WaitHealthy))?;
        Ok(())
    }

    fn stop_kubelet(&mut self) -> Result<(), StepError> {
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
                StepError(format!(
                    "the kubelet (pid {pid}) is still running after its stop command"
                ))
            })?;
        }
        self.start_hold();
        Ok(())
    }

    /// From the kubelet's stop on, the heartbeat is renewed by this run (not by a run that
    /// finishes a killed one: it does not know which processes to watch, and the node had
    /// its grace period run out or not already).
    fn start_hold(&mut self) {
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
    fn finish_hold(&mut self) {
        if let Some(h) = self.holder.take() {
            let wait = Duration::from_secs_f64(h.log().interval_s * 2.0);
            self.state.hold_ready = Some(h.finish(wait));
            self.save();
        }
    }

    fn stop_runtime(&mut self, undo: bool) -> Result<(), StepError> {
        if self.runtime_down.is_none() {
            self.runtime_down = Some(Instant::now());
            self.state.runtime_stopped_unix_ms = Some(state::unix_ms());
        }
        self.state.done.runtime_up = false;
        self.save();
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
            StepError(format!(
                "the runtime did not release its store after its stop command: {}",
                last.unwrap_or_default()
            ))
        })
    }

    fn check_containers(&mut self) -> Result<(), StepError> {
        let dead: Vec<String> = self
            .kept_pids
            .iter()
            .filter(|(_, pid)| !self.node.pid_alive(*pid))
            .map(|(id, pid)| format!("{id} (pid {pid})"))
            .collect();
        if dead.is_empty() {
            return Ok(());
        }
        Err(StepError(format!(
            "stopping the runtime killed {} container(s): {}; nothing was written (the runtime's unit kills its containers on stop: set KillMode=process, or Docker's live-restore)",
            dead.len(),
            first_few(&dead)
        )))
    }

    /// This run's backup directory: the state's, so a run that finishes a killed one uses
    /// the killed run's backups whatever it was given itself.
    fn backup_dir(&self) -> PathBuf {
        PathBuf::from(&self.state.backup_dir)
    }

    fn store_backup_dir(&self) -> PathBuf {
        self.backup_dir().join("store")
    }

    fn kubelet_path(&self) -> PathBuf {
        PathBuf::from(&self.state.kubelet_path)
    }

    fn new_kubelet(&self) -> Option<PathBuf> {
        self.state.new_kubelet.as_ref().map(PathBuf::from)
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
            return Err(StepError(format!(
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
        self.state.done.patch_started = true;
        self.save();
        let done = crate::patch::patch(&plan, self.store, &backup, &crate::progress::Silent)?;
        self.state.done.patched = true;
        self.state.store_backup_dir = done.backup_dir.as_ref().map(|d| d.display().to_string());
        self.state.rewritten = done.changed;
        self.state.summary = Some(done.report.summary.clone());
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

    fn kubelet_backup_path(&self) -> PathBuf {
        self.backup_dir().join("kubelet").join("kubelet")
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
                let (bytes, _) = storepatch::atomic::read_regular_nofollow(&new)
                    .map_err(|e| StepError(format!("the new kubelet {}: {e}", new.display())))?;
                storepatch::atomic::replace_file(path, &bytes, binary_meta())?;
            }
        }
        self.state.done.binary_installed = true;
        Ok(())
    }

    fn start_runtime(&mut self, undo: bool) -> Result<(), StepError> {
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
            StepError(format!(
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
            .ok_or_else(|| StepError("no patch report to verify".into()))?;
        let bytes = std::fs::read(&path).map_err(|e| StepError(format!("{path}: {e}")))?;
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
            return Err(StepError(format!("verify --live: {}", p.join("; "))));
        }
        self.state.verified_live = Some(v.checked);
        Ok(())
    }

    fn start_kubelet(&mut self) -> Result<(), StepError> {
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

    fn wait_healthy(&mut self, undo: bool) -> Result<(), StepError> {
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
            return Err(StepError(
                "interrupted (SIGINT/SIGTERM): going back to a safe state".into(),
            ));
        }
        ok.map_err(|_| {
            StepError(if undo {
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

    // ------------------------------------------------------------------------------------
    // a killed run, and going back
    // ------------------------------------------------------------------------------------

    fn finish_interrupted_run(&mut self) -> UpgradeReport {
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
                Err((step, e)) => self.roll_back(step, e.0),
            }
        } else {
            let step = self.state.last_step();
            self.roll_back(
                step,
                "an earlier run was killed mid-window before its patch was complete; rolled back"
                    .into(),
            )
        }
    }

    /// Undoes whatever the state says was done, and starts the runtime and the old kubelet.
    fn roll_back(&mut self, step: Step, cause: String) -> UpgradeReport {
        // The first failure is the one to report: a run that finishes a killed one going back
        // keeps the killed run's reason when it had one.
        let first = self
            .state
            .failure
            .get_or_insert(StepFailure { step, cause })
            .clone();
        let (step, cause) = (first.step, first.cause);
        self.state.phase = Phase::RollingBack;
        self.kubelet_down.get_or_insert_with(Instant::now);
        self.save();
        let mut errors: Vec<String> = Vec::new();
        let wrote = self.state.done.patch_started
            || self.state.done.binary_install_started
            || self.state.done.flags_rewrite_started;
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
        // 1. the new kubelet must not run on the old store
        if self.state.done.kubelet_up && wrote {
            if let Err(e) = self.step(Step::UndoStopKubelet, |r| r.stop_kubelet()) {
                errors.push(format!("stopping the kubelet: {}", e.0));
            }
        }
        // 2. the store, with the runtime stopped
        let store_backup = self.store_backup_dir();
        let has_backup = store_backup
            .join(storepatch::backup::MANIFEST_NAME)
            .is_file();
        if has_backup {
            let mut stopped = true;
            if self.state.done.runtime_up {
                if let Err(e) = self.step(Step::UndoStopRuntime, |r| r.stop_runtime(true)) {
                    errors.push(format!("stopping the runtime: {}", e.0));
                    stopped = false;
                }
            }
            if stopped {
                if let Err(e) = self.step(Step::UndoStore, |r| r.undo_store()) {
                    errors.push(format!("restoring the store: {}", e.0));
                }
            }
        }
        // 3. the old kubelet binary
        if self.state.kubelet_backup.is_some() && self.state.done.binary_install_started {
            if let Err(e) = self.step(Step::UndoKubeletBinary, |r| r.undo_binary()) {
                errors.push(format!("restoring the kubelet binary: {}", e.0));
            }
        }
        if self.state.done.flags_rewrite_started {
            if let Err(e) = self.step(Step::UndoKubeletFlags, |r| r.undo_kubelet_flags()) {
                errors.push(format!("restoring the kubelet flag files: {}", e.0));
            }
        }
        // 4. the runtime and the old kubelet run again, whatever failed above
        if !self.state.done.runtime_up {
            if let Err(e) = self.step(Step::UndoStartRuntime, |r| r.start_runtime(true)) {
                errors.push(format!("starting the runtime: {}", e.0));
            }
        }
        let mut kubelet_started = true;
        if !self.state.done.kubelet_up {
            if let Err(e) = self.step(Step::UndoStartKubelet, |r| r.start_kubelet()) {
                errors.push(format!("starting the kubelet: {}", e.0));
                kubelet_started = false;
            }
        }
        if kubelet_started {
            if let Err(e) = self.step(Step::UndoWaitHealthy, |r| r.wait_healthy(true)) {
                errors.push(format!("the old kubelet: {}", e.0));
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

enum Preflight {
    Usage(Error),
    Refused(String),
    Restarts(String),
}

impl std::convert::From<Error> for Preflight {
    fn from(e: Error) -> Self {
        match e.class() {
            crate::ErrorClass::Refused => Preflight::Refused(e.to_string()),
            _ => Preflight::Usage(e),
        }
    }
}

/// The containers that must outlive the window: every record the runtime says runs (pod
/// status, or a recorded pid when the status does not list it) whose hash is kept.
fn kept_pids(plan: &Plan) -> Vec<(String, u32)> {
    use crate::plan::Action;
    plan.records
        .iter()
        .filter(|r| matches!(r.action, Action::Rewrite | Action::Unchanged))
        .filter(|r| match r.state {
            Some(s) => s == ContainerState::Running,
            None => true,
        })
        .filter_map(|r| r.pid.filter(|p| *p > 0).map(|p| (r.id.clone(), p)))
        .collect()
}

/// About how many bytes the store's backup takes: containerd copies meta.db whole, the other
/// runtimes one small document per rewritten container.
fn backup_estimate(store: &dyn RuntimeStore, plan: &Plan) -> u64 {
    let db = store.root().join("io.containerd.metadata.v1.bolt/meta.db");
    if store.kind() == RuntimeKind::Containerd {
        return std::fs::metadata(db).map(|m| m.len()).unwrap_or(0);
    }
    plan.rewrites().len() as u64 * 64 * 1024
}

/// Free bytes on the file system `path` (or its nearest existing parent) is on.
fn free_bytes(path: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let mut p = path;
    while !p.exists() {
        p = p.parent()?;
    }
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs writes into the zeroed struct we pass; the path is NUL-terminated.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
        return None;
    }
    Some(s.f_bavail as u64 * s.f_frsize as u64)
}

/// `v1.31.2` (or `1.31`) in what `kubelet --version` printed: `Kubernetes v1.31.2`.
fn version_in(out: &str) -> Option<(u32, u32)> {
    out.split_whitespace().find_map(|w| {
        let w = w.trim_start_matches('v');
        let mut it = w.split('.');
        let major = it.next()?.parse().ok()?;
        let minor: String = it
            .next()?
            .chars()
            .take_while(|c| c.is_ascii_digit())
            .collect();
        Some((major, minor.parse().ok()?))
    })
}

/// The first few of a long list, and how many more.
fn first_few(items: &[String]) -> String {
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

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Polls `done` every 50 ms until it holds (`Ok`) or `deadline` passes (`Err`).
fn wait_until(deadline: Instant, mut done: impl FnMut() -> bool) -> Result<(), ()> {
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

/// Removes the temp files killed runs left beside the kubelet binary (the staged new binary,
/// a half-made restore): only ours (`.<name>.rehash-tmp-<pid>`), only of dead pids. Best
/// effort: a leftover costs disk space, not safety.
fn sweep_kubelet_temps(kubelet_path: &Path) {
    if let Some(dir) = kubelet_path.parent().filter(|d| !d.as_os_str().is_empty()) {
        let _ = storepatch::atomic::sweep_stale_temps(dir, 1);
    }
}

/// A kubelet binary: mode 0755, owned by whoever runs the upgrade (root on a node).
fn binary_meta() -> storepatch::atomic::FileMeta {
    storepatch::atomic::FileMeta {
        mode: 0o755,
        ..storepatch::atomic::FileMeta::private()
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
    use super::*;

    #[test]
    fn kubelet_version_output_is_read() {
        assert_eq!(version_in("Kubernetes v1.31.2\n"), Some((1, 31)));
        assert_eq!(version_in("Kubernetes v1.32.0-eks-abc"), Some((1, 32)));
        assert_eq!(version_in("nothing here"), None);
    }

    #[test]
    fn budget_grows_at_1_32() {
        assert_eq!(default_budget("1.31".parse().unwrap()).as_secs(), 40);
        assert_eq!(default_budget("1.32".parse().unwrap()).as_secs(), 50);
    }
}
