//! The contract every runtime back-end keeps, and nothing else: the back-ends import this
//! module (and the crate root's record types), never the registry ([`crate::runtime`]) that
//! names them all, so no back-end depends on another or on the list of runtimes.

use crate::{RuntimeStore, StoreError};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// Which container runtime owns a store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RuntimeKind {
    /// Docker (dockershim or cri-dockerd).
    Docker,
    /// containerd with its CRI plugin.
    Containerd,
    /// CRI-O.
    Crio,
}

impl RuntimeKind {
    /// The canonical name (`docker`, `containerd`, `crio`), as reports and manifests write it.
    pub fn name(self) -> &'static str {
        match self {
            RuntimeKind::Docker => "docker",
            RuntimeKind::Containerd => "containerd",
            RuntimeKind::Crio => "crio",
        }
    }
}

/// Everything an operator may tell us about a runtime's environment. Each back-end reads the
/// fields that concern it and ignores the others, so a caller needs no per-runtime knowledge.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreOptions {
    /// The runtime's API socket: running check, and the endpoint `verify --live` asks.
    pub socket: Option<PathBuf>,
    /// The runtime's pid file (dockerd, crio), for the running check.
    pub pidfile: Option<PathBuf>,
    /// Docker: `--live-restore` as dockerd runs with it (overrides daemon.json).
    pub live_restore: Option<bool>,
    /// Docker: the daemon.json to read `live-restore` from.
    pub daemon_json: Option<PathBuf>,
    /// CRI-O: the containers/storage runroot (discovered when absent).
    pub runroot: Option<PathBuf>,
    /// The node's `/` as seen from here: the back-ends resolve the fixed node paths they read
    /// themselves (`/proc` for pid files' pids, CRI-O's version file) inside it.
    pub host: crate::node::HostRoot,
}

/// What one runtime's running daemon says about one container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveContainer {
    /// The runtime's container id.
    pub id: String,
    /// `io.kubernetes.container.hash` as the runtime serves it to the kubelet.
    pub hash: Option<String>,
    /// `io.kubernetes.container.hashWithoutResources`, when present.
    pub hash_without_resources: Option<String>,
    /// Whether the runtime reports the container running.
    pub running: bool,
    /// The container's init process id, when the runtime reports one.
    pub pid: Option<u32>,
}

/// One runtime's fixed facts and entry points.
pub trait Runtime: Send + Sync {
    /// Which runtime this is.
    fn kind(&self) -> RuntimeKind;
    /// Where the store lives on a stock node (the other distributions' places are in
    /// [`crate::layout`]).
    fn default_root(&self) -> &'static Path;
    /// The API endpoint of a stock node (`unix://…`).
    fn default_endpoint(&self) -> String;
    /// Whether `root` has this runtime's store layout (used to detect the runtime).
    fn looks_like(&self, root: &Path) -> bool;
    /// What a root must contain, for the message when detection finds nothing.
    fn layout_hint(&self) -> String;
    /// Opens the store at `root`.
    fn open(
        &self,
        root: &Path,
        options: &StoreOptions,
    ) -> Result<Box<dyn RuntimeStore>, StoreError>;
    /// Asks the running runtime at `endpoint` for every container it knows.
    fn live_containers(&self, endpoint: &str) -> Result<Vec<LiveContainer>, StoreError>;
    /// The systemd unit of the runtime's daemon on a stock node (`upgrade` stops and starts
    /// it).
    fn service_unit(&self) -> &'static str;
    /// What keeps the node's containers running while the daemon is stopped.
    fn containers_outlive_the_daemon(&self) -> ContainersOutlive;
    /// For a runtime whose containers outlive the daemon only
    /// [`ContainersOutlive::WithLiveRestore`]: what the running daemon at `endpoint` says.
    fn ask_live_restore(&self, endpoint: &str) -> LiveRestoreAnswer {
        LiveRestoreAnswer::Unknown(format!(
            "{} has no live-restore to ask about at {endpoint}",
            self.service_unit()
        ))
    }
    /// Whether kubelets before 1.24 speak to this runtime through their built-in dockershim,
    /// and later ones through cri-dockerd (a separate service, stopped and started with it).
    fn behind_dockershim(&self) -> bool {
        false
    }
    /// About how many bytes a patch's backup of the store at `root` takes for `rewrites`
    /// rewritten containers (`upgrade` checks the free space before the window).
    fn backup_estimate(&self, root: &Path, rewrites: usize) -> u64 {
        let _ = root;
        // one small document (config.v2.json, config.json) per rewritten container
        rewrites as u64 * 64 * 1024
    }
}

/// What a running daemon says of its live-restore ([`Runtime::ask_live_restore`]); each
/// holds the sentence for the operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LiveRestoreAnswer {
    /// On: stopping the daemon keeps the containers.
    On(String),
    /// Off: stopping the daemon kills every container.
    Off(String),
    /// The daemon could not be asked.
    Unknown(String),
}

/// What keeps a runtime's containers running while its daemon is stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContainersOutlive {
    /// Each container has a shim or monitor process of its own (containerd-shim, conmon):
    /// stopping the daemon leaves them running, whatever stops it.
    Always,
    /// Only the daemon's live-restore setting does (dockerd): without it, stopping the daemon
    /// kills every container, so it must be asked first.
    WithLiveRestore,
}

impl StoreOptions {
    /// These options, with what they leave out taken from `defaults`.
    pub fn or(self, defaults: StoreOptions) -> StoreOptions {
        StoreOptions {
            socket: self.socket.or(defaults.socket),
            pidfile: self.pidfile.or(defaults.pidfile),
            live_restore: self.live_restore.or(defaults.live_restore),
            daemon_json: self.daemon_json.or(defaults.daemon_json),
            runroot: self.runroot.or(defaults.runroot),
            host: if self.host.dir().is_some() {
                self.host
            } else {
                defaults.host
            },
        }
    }
}

/// `unix://<path>` for a socket path.
pub fn unix_endpoint(socket: &Path) -> String {
    format!("unix://{}", socket.display())
}

/// Refuses a batch of rewrites that names one id twice, whatever the two values: the one
/// contract of every back-end, checked before any file is opened for writing. Identical
/// duplicates are refused too: a caller that lists a record twice has a bug worth seeing.
pub fn validate(rewrites: &[crate::Rewrite]) -> Result<(), StoreError> {
    let mut seen = std::collections::HashSet::with_capacity(rewrites.len());
    for rw in rewrites {
        if !seen.insert(rw.id.as_str()) {
            return Err(StoreError::Refused(format!(
                "record {} is given twice in one patch",
                rw.id
            )));
        }
    }
    Ok(())
}
