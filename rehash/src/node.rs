//! Finding and opening a node's store. Which runtime, where its root is and what options it
//! reads are all decided by `storepatch`'s runtime descriptors; this only combines them. Also
//! what witnesses of the node's kubelet say of it ([`ApiFacts`], [`InstalledKubelet`]), as
//! plain data that the plan and its hazard checks judge.

use crate::error::Error;
use std::path::{Path, PathBuf};
use storepatch::layout::DetectError;
use storepatch::layout::HostRoot;
use storepatch::session::StateDirs;
use storepatch::{RuntimeKind, RuntimeStore, StoreOptions};

/// The installed kubelet binary and its own `--version` (`Kubernetes v1.36.3`): offline, the
/// witness of the running kubelet's version where the stored hashes allow several (1.23 and
/// 1.24 hash every spec alike). A binary replaced on disk before the kubelet was restarted
/// says the new version: the hashes then disagree, and the plan blocks naming both.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InstalledKubelet {
    /// The binary.
    pub path: String,
    /// Its `--version` output's version word (`v1.36.3`).
    pub version: String,
}

/// What the API server said of itself and of the node (issue 36), as plain data: the
/// `nodeapi` crate asks, the plan judges.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApiFacts {
    /// The API server's URL.
    pub server: String,
    /// Who asked (the client certificate's subject).
    pub identity: String,
    /// The API server's `gitVersion` (`v1.37.2`).
    pub server_version: String,
    /// The Node's name.
    pub node: String,
    /// The Node's `status.nodeInfo.kubeletVersion` (`v1.36.3`; empty when never reported).
    pub node_kubelet_version: String,
}

/// Where a node's store is: any part left `None` is found (the runtime from the root's
/// layout, the root from the layouts of the runtime, or the one store among every known
/// layout: [`storepatch::layout`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreLocation {
    /// The runtime, when known.
    pub runtime: Option<RuntimeKind>,
    /// The store root (Docker data-root, containerd root, CRI-O graphroot), when known. Taken
    /// as given, also with a host root.
    pub root: Option<PathBuf>,
    /// Sockets, pid files and runtime-specific settings; what is left `None` comes from the
    /// node's layout. Taken as given, also with a host root.
    pub options: StoreOptions,
    /// Where the node's `/` is mounted (`None` or `/`: this machine's own). Every default path
    /// (configuration files, roots, sockets, pid files) is resolved inside it.
    pub host_root: Option<PathBuf>,
    /// Where writes to the store keep their lock and in-flight marker, when placed explicitly
    /// (`None`: [`StoreLocation::state_dirs`] decides).
    pub state: Option<StateDirs>,
}

impl StoreLocation {
    /// A store of a known runtime at a known root, with default options.
    pub fn new(runtime: RuntimeKind, root: impl Into<PathBuf>) -> Self {
        StoreLocation {
            runtime: Some(runtime),
            root: Some(root.into()),
            options: StoreOptions::default(),
            host_root: None,
            state: None,
        }
    }

    /// The host root to resolve default paths in.
    pub fn host(&self) -> Result<HostRoot, Error> {
        match &self.host_root {
            Some(dir) => Ok(HostRoot::new(dir).map_err(DetectError::from)?),
            None => Ok(HostRoot::none()),
        }
    }

    /// [`default_backup_dir`] on the node: inside the host root when there is one, so the
    /// backup stays on the node's disk and not in a Job's container.
    pub fn default_backup_dir(&self, runtime: RuntimeKind) -> Result<PathBuf, Error> {
        let dir = default_backup_dir(runtime);
        self.host()?.resolve(&dir).map_err(|e| Error::Io {
            path: dir,
            source: e,
        })
    }

    /// Where a write to this store keeps its lock and in-flight marker: [`Self::state`] when
    /// set, else this machine's directories, except that with a host root the markers belong
    /// on the node's disk, like the default backup directory (a Job's own `/var/lib` is gone
    /// with its container), unless `KUBELET_REHASH_STATE_DIR` places them explicitly.
    pub fn state_dirs(&self) -> StateDirs {
        if let Some(state) = &self.state {
            return state.clone();
        }
        let local = StateDirs::local();
        if self.host_root.is_none()
            || std::env::var_os(storepatch::inflight::STATE_DIR_ENV).is_some()
        {
            return local;
        }
        let on_node = self
            .host()
            .ok()
            .and_then(|h| h.resolve(Path::new(storepatch::inflight::STATE_DIR)).ok());
        match on_node {
            Some(dir) => local.with_inflight(dir),
            None => local,
        }
    }

    /// Finds the store ([`storepatch::layout::find`]) and opens it (reads no record yet).
    pub fn open(&self) -> Result<Box<dyn RuntimeStore>, Error> {
        let found = storepatch::layout::find(&self.host()?, self.runtime, self.root.as_deref())?;
        let options = self.options.clone().or(found.defaults);
        Ok(found.kind.runtime().open(&found.root, &options)?)
    }
}

/// The default place for a patch's backup: `/var/lib/kubelet-rehash/backups/<runtime>-<unix
/// time>`, on the node's own disk, so it survives the reboot a kernel upgrade in the same
/// window may bring.
pub fn default_backup_dir(runtime: RuntimeKind) -> PathBuf {
    Path::new("/var/lib/kubelet-rehash/backups").join(format!("{}-{}", runtime.name(), unix_now()))
}

pub(crate) fn unix_now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The pids of the processes under `proc_dir` whose `comm` is `name`, in ascending order.
pub fn pids_named(proc_dir: &Path, name: &str) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir(proc_dir) else {
        return Vec::new();
    };
    let mut found: Vec<u32> = entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            std::fs::read_to_string(proc_dir.join(pid.to_string()).join("comm"))
                .is_ok_and(|c| c.trim() == name)
        })
        .collect();
    found.sort_unstable();
    found
}

/// A process's command line (`/proc/PID/cmdline`), the program first; `None` when unreadable
/// or empty (a kernel thread, a zombie).
pub fn cmdline(proc_dir: &Path, pid: u32) -> Option<Vec<String>> {
    let raw = std::fs::read(proc_dir.join(pid.to_string()).join("cmdline")).ok()?;
    let args: Vec<String> = raw
        .split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect();
    (!args.is_empty()).then_some(args)
}

/// The running kubelet's command line without the program: the one whose pid `pidfile`
/// holds, else the only process named `kubelet` under `proc_dir` (the host's `/proc`). Several
/// kubelets (a containerized one beside the node's, the lab's concurrent runs) and none are
/// both `None`: a command line that may be another kubelet's is not read.
pub fn running_kubelet_args(proc_dir: &Path, pidfile: Option<&Path>) -> Option<Vec<String>> {
    let pid: u32 = match pidfile {
        Some(f) => std::fs::read_to_string(f).ok()?.trim().parse().ok()?,
        None => match pids_named(proc_dir, "kubelet").as_slice() {
            [one] => *one,
            _ => return None,
        },
    };
    cmdline(proc_dir, pid).map(|args| args.into_iter().skip(1).collect())
}
