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
//!
//! Here are the entry points and what callers see; a run (`run.rs`) takes its phases from
//! `preflight.rs`, `window.rs` (its steps a table) and `undo.rs` (going back, a table too).
//! A failed step keeps its error typed ([`NodeError`], [`crate::Error`]) with its
//! [`ErrorClass`] until the state file records its text.

mod flags;
pub mod hold;
mod preflight;
mod run;
mod state;
mod step_error;
mod system;
mod undo;
mod window;

pub use flags::KubeletFlags;
pub use hold::{
    Beat, GoOn, HoldEnd, HoldLog, HoldReady, NodeHeartbeat, RenewalRecord, DEFAULT_HOLD_MAX,
};

pub use state::{
    FlagsFileRecord, Measured, Phase, Progressed, Step, StepFailure, StepOutcome, StepRecord,
    UpgradeState, STATE_FORMAT,
};
pub use step_error::NodeError;
pub use system::{kubelet_version_of, SystemNode, DEFAULT_HEALTHZ};

use crate::error::{Error, ErrorClass};
use crate::node::StoreLocation;
use crate::plan::{From, NodeFiles, Plan};
use crate::verify::LiveVerification;
use hashcompat::KubeletVersion;
use run::Run;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::time::Duration;
use step_error::StepError;
use storepatch::RuntimeKind;

/// The service control and process view of a node: the test seam of [`upgrade`]. Its errors
/// are [`NodeError`]s: a failed service command is a failure, a node that is not safe to go
/// on with a refusal; either way the preflight refuses with nothing stopped, and the window
/// goes back.
pub trait NodeControl {
    /// Stops the kubelet (returns when the stop command returned).
    fn stop_kubelet(&self) -> Result<(), NodeError>;
    /// Starts the kubelet.
    fn start_kubelet(&self) -> Result<(), NodeError>;
    /// Stops the container runtime.
    fn stop_runtime(&self) -> Result<(), NodeError>;
    /// Starts the container runtime.
    fn start_runtime(&self) -> Result<(), NodeError>;
    /// Why stopping the runtime will not kill the containers (`Ok(how we know)`), or why it
    /// would (`Err`): a containerd/CRI-O unit's `KillMode`, Docker's live-restore.
    fn runtime_keeps_containers(
        &self,
        kind: RuntimeKind,
        endpoint: &str,
    ) -> Result<String, NodeError>;
    /// The running kubelet's pid, when one runs.
    fn kubelet_pid(&self) -> Option<u32>;
    /// A process's command line (argv), when it exists.
    fn cmdline(&self, pid: u32) -> Option<Vec<String>>;
    /// Whether a process exists.
    fn pid_alive(&self, pid: u32) -> bool;
    /// Runs a binary with arguments: whether it exited 0, and what it printed (both streams).
    fn run_binary(&self, binary: &Path, args: &[String]) -> Result<(bool, String), NodeError>;
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
    fn before(&self, _step: Step) -> Result<(), NodeError> {
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
    /// Move checkpoints the target kubelet rejects into the backup (see [`crate::BackupOptions`]).
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
    /// The class of the error behind `result` (the refusal, or the first failure of a run that
    /// went back), when this process met it; `None` when it was done, or when the cause is
    /// one a killed run recorded (the state file keeps its text only). The exit code follows
    /// `result`, not this.
    pub cause_class: Option<ErrorClass>,
}

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
            cause_class: None,
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
    // A cause the killed run recorded stays the cause; this one is only for a run killed
    // before anything failed.
    let step = run.state.last_step();
    let cause = StepError::failure(
        "an earlier run was killed mid-window; rolled back by `rollback --state`",
    );
    Ok(run.roll_back(step, cause))
}

/// Removes the temp files killed runs left beside the kubelet binary (the staged new binary,
/// a half-made restore): only ours (`.<name>.rehash-tmp-<pid>`), only of dead pids. Best
/// effort: a leftover costs disk space, not safety.
fn sweep_kubelet_temps(kubelet_path: &Path) {
    if let Some(dir) = kubelet_path.parent().filter(|d| !d.as_os_str().is_empty()) {
        let _ = storepatch::atomic::sweep_stale_temps(dir, 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_grows_at_1_32() {
        assert_eq!(default_budget("1.31".parse().unwrap()).as_secs(), 40);
        assert_eq!(default_budget("1.32".parse().unwrap()).as_secs(), 50);
    }
}
