//! The state file of `upgrade` (docs/upgrade.md): what a fleet engine polls while the window
//! runs, and what the next run reads to finish a killed one.

use super::UpgradeOptions;
use crate::error::Error;
use crate::plan::Summary;
use hashcompat::KubeletVersion;
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::time::Duration;
use storepatch::{RuntimeKind, RuntimeStore};

/// The version of the state file this crate writes and reads.
pub const STATE_FORMAT: u32 = 1;

/// One step of the upgrade, as the state file names it (ordered as they run).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Step {
    /// Every check, with nothing stopped.
    Preflight,
    /// Stop the kubelet and wait until its process is gone.
    StopKubelet,
    /// Stop the runtime and wait until it released its store.
    StopRuntime,
    /// Every container that must survive still has its process.
    CheckContainers,
    /// Plan the stopped store, back up, rewrite, read back.
    Patch,
    /// Install the new kubelet binary (the old one into the backup).
    InstallKubelet,
    /// Rewrite the kubelet's flag files for cri-dockerd (the dockershim → cri-dockerd
    /// switch; the originals into the backup).
    KubeletFlags,
    /// Start the runtime and wait until its API answers.
    StartRuntime,
    /// `verify --live`.
    VerifyLive,
    /// Start the kubelet.
    StartKubelet,
    /// Wait for the kubelet's health endpoint.
    WaitHealthy,
    /// Going back: stop the kubelet.
    UndoStopKubelet,
    /// Going back: stop the runtime.
    UndoStopRuntime,
    /// Going back: restore the store (bytes, or values when the runtime has written since).
    UndoStore,
    /// Going back: put the old kubelet binary back.
    UndoKubeletBinary,
    /// Going back: put the kubelet's original flag files back.
    UndoKubeletFlags,
    /// Going back: start the runtime.
    UndoStartRuntime,
    /// Going back: start the (old) kubelet.
    UndoStartKubelet,
    /// Going back: wait for the old kubelet's health endpoint.
    UndoWaitHealthy,
}

impl Step {
    /// Whether this is a step of going back (never cut short by a signal).
    pub fn is_undo(self) -> bool {
        matches!(
            self,
            Step::UndoStopKubelet
                | Step::UndoStopRuntime
                | Step::UndoStore
                | Step::UndoKubeletBinary
                | Step::UndoKubeletFlags
                | Step::UndoStartRuntime
                | Step::UndoStartKubelet
                | Step::UndoWaitHealthy
        )
    }
}

/// Where the run is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Phase {
    /// Checking, nothing stopped.
    Preflight,
    /// Inside the window: the kubelet (and maybe the runtime) is down.
    Window,
    /// A step failed; undoing.
    RollingBack,
    /// Finished: upgraded.
    Done,
    /// Finished: refused in preflight, nothing stopped.
    Refused,
    /// Finished: some containers would restart, not accepted; nothing stopped.
    RestartsNotAccepted,
    /// Finished: a step failed, everything was undone.
    RolledBack,
    /// Finished: undoing failed too; `rollback_errors` says what is left.
    Failed,
}

/// How a step ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StepOutcome {
    /// Still running (or the run was killed in it).
    Running,
    /// Done.
    Ok,
    /// Failed: `error` says why.
    Failed,
    /// The run died in it (killed); its end is when the next run found it.
    Killed,
}

/// One step's record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    /// Which step.
    pub step: Step,
    /// Wall clock at its start, Unix milliseconds.
    pub started_unix_ms: u64,
    /// Wall clock at its end.
    pub ended_unix_ms: Option<u64>,
    /// How long it took.
    pub duration_ms: Option<f64>,
    /// How it ended.
    pub outcome: StepOutcome,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl StepRecord {
    pub(crate) fn begin(step: Step) -> Self {
        StepRecord {
            step,
            started_unix_ms: unix_ms(),
            ended_unix_ms: None,
            duration_ms: None,
            outcome: StepOutcome::Running,
            error: None,
        }
    }

    pub(crate) fn end(&mut self, took: Duration, error: Option<String>) {
        self.ended_unix_ms = Some(unix_ms());
        self.duration_ms = Some(took.as_secs_f64() * 1e3);
        self.outcome = if error.is_some() {
            StepOutcome::Failed
        } else {
            StepOutcome::Ok
        };
        self.error = error;
    }
}

/// What has been done to the node, as far as the state file knows (a killed run may have done
/// the next thing without recording it: the next run checks before it acts).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Progressed {
    /// The kubelet is believed to run.
    pub kubelet_up: bool,
    /// The runtime is believed to run.
    pub runtime_up: bool,
    /// The patch began (the backup may exist).
    pub patch_started: bool,
    /// The patch finished and its read-back holds every target.
    pub patched: bool,
    /// The new kubelet binary's install began (the old one is in the backup).
    pub binary_install_started: bool,
    /// The new kubelet binary is installed.
    pub binary_installed: bool,
    /// The rewrite of the kubelet's flag files began (their originals are in the backup).
    #[serde(default)]
    pub flags_rewrite_started: bool,
}

impl Default for Progressed {
    fn default() -> Self {
        Progressed {
            kubelet_up: true,
            runtime_up: true,
            patch_started: false,
            patched: false,
            binary_install_started: false,
            binary_installed: false,
            flags_rewrite_started: false,
        }
    }
}

/// One kubelet flag file the switch rewrites. The edit is a pure function of the original
/// bytes ([`crate::cri_dockerd::flags::edit_flags_file`] with `to`, `endpoint` and `append`),
/// so a run that finishes a killed one writes exactly these bytes, proven by `sha256_new`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlagsFileRecord {
    /// The flag file.
    pub path: String,
    /// Where its original is kept, in this run's backup directory.
    pub backup: String,
    /// sha256 of the original bytes.
    pub sha256_original: String,
    /// sha256 of the rewritten bytes.
    pub sha256_new: String,
    /// The flags it no longer sets.
    pub dropped: Vec<String>,
    /// The flags it now sets.
    pub added: Vec<String>,
    /// cri-dockerd's endpoint as the node's kubelet is given it.
    pub endpoint: String,
    /// Whether the flags were appended as a new `KUBELET_EXTRA_ARGS` line.
    pub append: bool,
    /// The new bytes are in place.
    pub rewritten: bool,
}

/// The step that failed and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepFailure {
    /// The step.
    pub step: Step,
    /// Why.
    pub cause: String,
}

/// How long this node's services took in the last run that measured them: the next preflight
/// predicts its window from these.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Measured {
    /// Stop the kubelet until its process was gone.
    pub stop_kubelet_ms: Option<f64>,
    /// Stop the runtime until its store was released.
    pub stop_runtime_ms: Option<f64>,
    /// Start the runtime until its API answered.
    pub start_runtime_ms: Option<f64>,
    /// Start the kubelet until its health endpoint answered.
    pub kubelet_healthy_ms: Option<f64>,
}

impl Measured {
    pub(crate) fn from_steps(steps: &[StepRecord], before: &Measured) -> Measured {
        let last = |wanted: &[Step]| -> Option<f64> {
            let mut total = None;
            for w in wanted {
                let d = steps
                    .iter()
                    .rev()
                    .find(|s| s.step == *w && s.outcome == StepOutcome::Ok)?
                    .duration_ms?;
                total = Some(total.unwrap_or(0.0) + d);
            }
            total
        };
        Measured {
            stop_kubelet_ms: last(&[Step::StopKubelet]).or(before.stop_kubelet_ms),
            stop_runtime_ms: last(&[Step::StopRuntime]).or(before.stop_runtime_ms),
            start_runtime_ms: last(&[Step::StartRuntime]).or(before.start_runtime_ms),
            kubelet_healthy_ms: last(&[Step::StartKubelet, Step::WaitHealthy])
                .or(before.kubelet_healthy_ms),
        }
    }

    fn pick(v: Option<f64>, default: Duration) -> Duration {
        v.map(|ms| Duration::from_secs_f64(ms / 1e3))
            .unwrap_or(default)
    }
    pub(crate) fn stop_kubelet(&self, d: Duration) -> Duration {
        Self::pick(self.stop_kubelet_ms, d)
    }
    pub(crate) fn stop_runtime(&self, d: Duration) -> Duration {
        Self::pick(self.stop_runtime_ms, d)
    }
    pub(crate) fn start_runtime(&self, d: Duration) -> Duration {
        Self::pick(self.start_runtime_ms, d)
    }
    pub(crate) fn kubelet_healthy(&self, d: Duration) -> Duration {
        Self::pick(self.kubelet_healthy_ms, d)
    }
    pub(crate) fn describe(&self) -> String {
        if self == &Measured::default() {
            "service times not measured on this node yet: defaults assumed".into()
        } else {
            "service times as measured by the last run in the state file".into()
        }
    }
}

/// The state file (`--state`, JSON; docs/upgrade.md).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UpgradeState {
    /// [`STATE_FORMAT`].
    pub format: u32,
    /// The kubelet-rehash version that wrote it.
    pub tool_version: String,
    /// The process that writes it now.
    pub pid: u32,
    /// Runs that found it unfinished and finished it.
    #[serde(default)]
    pub resumed_by: Vec<u32>,
    /// Where the run is.
    pub phase: Phase,
    /// When the run began (Unix ms).
    pub started_unix_ms: u64,
    /// When the file was last written (Unix ms).
    pub updated_unix_ms: u64,
    /// The node's kubelet version, as the plan found it.
    pub from: Option<KubeletVersion>,
    /// The target.
    pub to: KubeletVersion,
    /// The runtime.
    pub runtime: RuntimeKind,
    /// The store root.
    pub root: String,
    /// The kubelet-down budget, seconds.
    pub budget_s: f64,
    /// The kubelet-down window the preflight predicted, seconds.
    pub predicted_window_s: Option<f64>,
    /// This run's backup directory (the store's backup in `store/`, the old kubelet in
    /// `kubelet/`, the patch report `report.json`).
    pub backup_dir: String,
    /// The store's backup, when the patch rewrote something.
    pub store_backup_dir: Option<String>,
    /// The patch report.
    pub report: Option<String>,
    /// The plan switches this Docker node from dockershim to cri-dockerd: cri-dockerd's CRI
    /// endpoint, which the live verification asks (and a resumed run knows the runtime's stop
    /// and start cover cri-dockerd's units).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cri_dockerd_endpoint: Option<String>,
    /// The installed kubelet binary.
    pub kubelet_path: String,
    /// The new kubelet binary installed by this run.
    pub new_kubelet: Option<String>,
    /// Where the old kubelet is kept: `file:<path>` (a copy) or `symlink:<target>`.
    pub kubelet_backup: Option<String>,
    /// The kubelet flag files the dockershim → cri-dockerd switch rewrites (planned in the
    /// preflight, rewritten in the window, put back when going back).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kubelet_flags: Vec<FlagsFileRecord>,
    /// What has been done.
    pub done: Progressed,
    /// Every step so far, in order.
    pub steps: Vec<StepRecord>,
    /// When the kubelet was stopped (Unix ms).
    pub kubelet_stopped_unix_ms: Option<u64>,
    /// When the runtime was stopped (Unix ms).
    pub runtime_stopped_unix_ms: Option<u64>,
    /// How long the kubelet has been (or was) down: the NotReady budget's measure.
    pub kubelet_down_ms: Option<f64>,
    /// How long the runtime has been (or was) down.
    pub runtime_down_ms: Option<f64>,
    /// Containers the patch rewrote.
    #[serde(default)]
    pub rewritten: usize,
    /// Rewritten containers `verify --live` checked.
    pub verified_live: Option<usize>,
    /// How the store was restored when going back: `bytes` or `values`.
    pub store_restored: Option<String>,
    /// The plan's counts.
    pub summary: Option<Summary>,
    /// The plan's hazards, `[code] message`.
    #[serde(default)]
    pub hazards: Vec<String>,
    /// The step that failed and why.
    pub failure: Option<StepFailure>,
    /// What failed while going back.
    #[serde(default)]
    pub rollback_errors: Vec<String>,
    /// The service times the next preflight predicts from.
    #[serde(default)]
    pub measured: Measured,
    /// What the checks found, in sentences.
    #[serde(default)]
    pub notes: Vec<String>,
    /// Writes of this file that failed (the run went on).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub state_write_errors: Vec<String>,
    /// The node held Ready while the kubelet was down: every renewal, and why it ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold_ready: Option<super::hold::HoldLog>,
}

impl UpgradeState {
    pub(crate) fn new(opts: &UpgradeOptions, store: &dyn RuntimeStore, budget: Duration) -> Self {
        let now = unix_ms();
        UpgradeState {
            format: STATE_FORMAT,
            tool_version: env!("CARGO_PKG_VERSION").to_string(),
            pid: std::process::id(),
            resumed_by: Vec::new(),
            phase: Phase::Preflight,
            started_unix_ms: now,
            updated_unix_ms: now,
            from: None,
            to: opts.to,
            runtime: store.kind(),
            root: store.root().display().to_string(),
            budget_s: budget.as_secs_f64(),
            predicted_window_s: None,
            backup_dir: opts.backup_dir.display().to_string(),
            store_backup_dir: None,
            report: None,
            cri_dockerd_endpoint: None,
            kubelet_path: opts.kubelet_path.display().to_string(),
            new_kubelet: opts.new_kubelet.as_ref().map(|p| p.display().to_string()),
            kubelet_backup: None,
            kubelet_flags: Vec::new(),
            done: Progressed::default(),
            steps: Vec::new(),
            kubelet_stopped_unix_ms: None,
            runtime_stopped_unix_ms: None,
            kubelet_down_ms: None,
            runtime_down_ms: None,
            rewritten: 0,
            verified_live: None,
            store_restored: None,
            summary: None,
            hazards: Vec::new(),
            failure: None,
            rollback_errors: Vec::new(),
            measured: Measured::default(),
            notes: Vec::new(),
            state_write_errors: Vec::new(),
            hold_ready: None,
        }
    }

    /// Whether a run stopped inside the window or while going back (it was killed).
    pub fn unfinished(&self) -> bool {
        matches!(self.phase, Phase::Window | Phase::RollingBack)
    }

    /// The step that failed first and why (the preflight, with no cause, when none did).
    pub fn first_failure(&self) -> (Step, String) {
        match &self.failure {
            Some(f) => (f.step, f.cause.clone()),
            None => (Step::Preflight, String::new()),
        }
    }

    /// The step the run was in last.
    pub fn last_step(&self) -> Step {
        self.steps.last().map(|s| s.step).unwrap_or(Step::Preflight)
    }

    /// Reads a state file; `None` when there is none. A file that is not a state file of this
    /// format is a usage error (it is never overwritten as a guess). The file is a trust
    /// boundary, like a backup: `rollback --state` runs as root and writes where it says, so
    /// a state file is believed only when no one but root or the invoking user could have
    /// written or swapped it, and only with the paths a run records (its backup directory
    /// beside it or under the default backup root, every copy it names inside that).
    pub fn read(path: &Path) -> Result<Option<UpgradeState>, Error> {
        let shown = path.display();
        let meta = match std::fs::symlink_metadata(path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => {
                return Err(Error::Io {
                    path: path.to_path_buf(),
                    source: e,
                })
            }
        };
        let kind = meta.file_type();
        if kind.is_symlink() {
            return Err(Error::UntrustedState(format!(
                "{shown} is a symbolic link; a state file is never followed"
            )));
        }
        if kind.is_dir() {
            return Err(Error::State(format!(
                "{shown} is a directory, not a state file"
            )));
        }
        if !kind.is_file() {
            return Err(Error::State(format!(
                "{shown} is not a regular file (a FIFO, device or socket is never opened)"
            )));
        }
        let (bytes, fmeta) =
            storepatch::atomic::read_regular_nofollow(path).map_err(|e| match e {
                storepatch::StoreError::Io { path, source } => Error::Io { path, source },
                // swapped for a link or a special file since the look above
                other => Error::UntrustedState(other.to_string()),
            })?;
        storepatch::trust::owner_and_mode(path, fmeta.uid, fmeta.mode)
            .and_then(|()| storepatch::trust::parents(path))
            .map_err(Error::UntrustedState)?;
        let v: serde_json::Value = serde_json::from_slice(&bytes)
            .map_err(|e| Error::State(format!("{shown}: not an upgrade state file: {e}")))?;
        match v.get("format").and_then(|f| f.as_u64()) {
            Some(f) if f == u64::from(STATE_FORMAT) => {}
            Some(f) => {
                return Err(Error::State(format!(
                    "{shown}: upgrade state format {f}; this kubelet-rehash reads format {STATE_FORMAT}"
                )))
            }
            None => {
                return Err(Error::State(format!(
                    "{shown}: no state format number: not an upgrade state file"
                )))
            }
        }
        let state: UpgradeState = serde_json::from_value(v)
            .map_err(|e| Error::State(format!("{shown}: not an upgrade state file: {e}")))?;
        state.confined(path)?;
        Ok(Some(state))
    }

    /// Whether the paths this state names are the ones a run records: its backup directory
    /// inside the state file's own directory or under the default backup root
    /// ([`backup_dir_allowed`]), trusted like a backup when it exists, and every copy it keeps
    /// (the store's backup, the report, the old kubelet, the original flag files) inside it.
    /// A state naming anything else was not written by a run of ours.
    fn confined(&self, state_path: &Path) -> Result<(), Error> {
        let backup_dir = Path::new(&self.backup_dir);
        backup_dir_allowed(backup_dir, state_path).map_err(Error::UntrustedState)?;
        match std::fs::symlink_metadata(backup_dir) {
            Ok(m) => {
                use std::os::unix::fs::MetadataExt;
                if !m.is_dir() {
                    return Err(Error::UntrustedState(format!(
                        "its backup directory {} is not a directory (a symbolic link is not followed)",
                        backup_dir.display()
                    )));
                }
                storepatch::trust::owner_and_mode(backup_dir, m.uid(), m.mode())
                    .and_then(|()| storepatch::trust::parents(backup_dir))
                    .map_err(Error::UntrustedState)?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(Error::Io {
                    path: backup_dir.to_path_buf(),
                    source: e,
                })
            }
        }
        let mut kept: Vec<(&str, &str)> = Vec::new();
        if let Some(d) = &self.store_backup_dir {
            kept.push(("store_backup_dir", d));
        }
        if let Some(r) = &self.report {
            kept.push(("report", r));
        }
        if let Some(file) = self
            .kubelet_backup
            .as_deref()
            .and_then(|k| k.strip_prefix("file:"))
        {
            kept.push(("kubelet_backup", file));
        }
        for f in &self.kubelet_flags {
            kept.push(("kubelet_flags.backup", &f.backup));
        }
        for (field, p) in kept {
            if !storepatch::trust::lexically_inside(Path::new(p), backup_dir) {
                return Err(Error::UntrustedState(format!(
                    "{}: its {field} {p} is not inside its backup directory {}: a run keeps every copy there",
                    state_path.display(),
                    backup_dir.display()
                )));
            }
        }
        Ok(())
    }
    /// Writes the file atomically (temp + fsync + rename + directory fsync), mode 0600,
    /// missing parents created 0700.
    pub fn write(&self, path: &Path) -> Result<(), storepatch::StoreError> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            storepatch::atomic::create_dir_all_private(parent)?;
        }
        let bytes = serde_json::to_vec_pretty(self).expect("a state always serializes");
        storepatch::atomic::replace_file(path, &bytes, storepatch::atomic::FileMeta::private())
    }

    /// The state as pretty JSON.
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec_pretty(self).expect("a state always serializes")
    }
}

/// The backup directories an `upgrade` run may use with the state file at `state_path`: inside
/// the state file's own directory, or under a default backup root
/// (`/var/lib/kubelet-rehash/backups`, also under a `--host-root`). A run that finishes a
/// killed one believes the backup directory its state names only there, so a run is refused
/// one anywhere else before anything is stopped.
pub fn backup_dir_allowed(backup_dir: &Path, state_path: &Path) -> Result<(), String> {
    let absolute = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let dir = absolute(backup_dir);
    let state_dir = absolute(state_path)
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let mut homes = vec![state_dir.clone()];
    if let Ok(real) = std::fs::canonicalize(&state_dir) {
        homes.push(real);
    }
    let default_root = Path::new("var/lib/kubelet-rehash/backups");
    let inside_home = homes
        .iter()
        .any(|h| storepatch::trust::lexically_inside(&dir, h));
    let under_default = dir
        .ancestors()
        .skip(1)
        .any(|a| a.ends_with(default_root) && storepatch::trust::lexically_inside(&dir, a));
    if inside_home || under_default {
        Ok(())
    } else {
        Err(format!(
            "the backup directory {} is neither inside the state file's directory {} nor under {}: a run that finishes a killed one could not tell it from a forged one",
            backup_dir.display(),
            state_dir.display(),
            Path::new("/").join(default_root).display()
        ))
    }
}

pub(crate) fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
