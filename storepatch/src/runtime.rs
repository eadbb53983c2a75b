//! What differs between runtimes beyond their store format, in one place: names, default roots
//! and endpoints, how a root is recognised, how a store is opened from generic options, and how
//! a running runtime is asked about its containers.
//!
//! Callers (the `rehash` workflow, the CLI) only ever hold a [`RuntimeKind`] and a
//! `Box<dyn RuntimeStore>`; every `match` on the kind lives here. Adding a runtime is a
//! back-end module, a [`RuntimeKind`] variant and its arm in [`RuntimeKind::runtime`].

use crate::{RuntimeKind, RuntimeStore, StoreError};
use std::path::{Path, PathBuf};

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
    pub host: crate::layout::HostRoot,
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
}

impl RuntimeKind {
    /// Every runtime, in detection order.
    pub const ALL: [RuntimeKind; 3] = [
        RuntimeKind::Containerd,
        RuntimeKind::Docker,
        RuntimeKind::Crio,
    ];

    /// The runtime's descriptor.
    pub fn runtime(self) -> &'static dyn Runtime {
        match self {
            RuntimeKind::Docker => &crate::docker::runtime::DOCKER,
            RuntimeKind::Containerd => &crate::containerd::runtime::CONTAINERD,
            RuntimeKind::Crio => &crate::crio::runtime::CRIO,
        }
    }

    /// The names an operator may use for this runtime (the first is canonical).
    pub fn aliases(self) -> &'static [&'static str] {
        match self {
            RuntimeKind::Docker => &["docker", "dockershim", "cri-dockerd"],
            RuntimeKind::Containerd => &["containerd"],
            RuntimeKind::Crio => &["crio", "cri-o"],
        }
    }
}

/// `--runtime` spelled in a way we do not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown runtime {0:?}: expected one of {names}", names = RuntimeKind::ALL.iter().map(|k| k.name()).collect::<Vec<_>>().join(", "))]
pub struct UnknownRuntime(pub String);

impl std::str::FromStr for RuntimeKind {
    type Err = UnknownRuntime;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        RuntimeKind::ALL
            .into_iter()
            .find(|k| k.aliases().contains(&s))
            .ok_or_else(|| UnknownRuntime(s.to_string()))
    }
}

/// Why no store could be found or chosen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DetectError {
    /// The root given matches no runtime's layout.
    #[error("{root} is not {hints}; give the runtime explicitly")]
    NotAStore {
        /// The root that was given.
        root: PathBuf,
        /// What each runtime's root would hold.
        hints: String,
    },
    /// No runtime store at any known layout's root.
    #[error("no runtime store found (looked at {roots}); give --runtime and --root, or, in a container, --host-root where the node's / is mounted")]
    NoneFound {
        /// The layouts and roots that were looked at.
        roots: String,
    },
    /// Several known layouts' roots hold stores.
    #[error("more than one runtime store on this node: {found}; pick one with --root (or --runtime, when they are of different runtimes)")]
    Several {
        /// The stores found: runtime, layout and root of each.
        found: String,
    },
    /// The root does not exist.
    #[error("store root {0} does not exist or is not a directory")]
    RootMissing(PathBuf),
    /// A runtime's configuration file exists but cannot be used.
    #[error(transparent)]
    Config(#[from] crate::layout::ConfigError),
    /// `--host-root` cannot be used.
    #[error(transparent)]
    HostRoot(#[from] crate::layout::HostRootError),
    /// A node path could not be resolved inside the host root.
    #[error("{}: cannot be resolved inside the host root: {reason}", path.display())]
    Resolve {
        /// The node path.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// The runtime given does not match the root's layout (a usage error, like a root that
    /// matches no runtime: the flags contradict each other, nothing is read as a guess).
    #[error("--runtime {runtime} does not match {root}: it is not {hint}{detected}")]
    RuntimeMismatch {
        /// The runtime that was given.
        runtime: &'static str,
        /// The root that was given.
        root: PathBuf,
        /// What that runtime's root would hold.
        hint: String,
        /// `; it looks like a … root`, when another runtime's layout matches.
        detected: String,
    },
}

/// The runtime whose layout `root` has.
pub fn detect_kind(root: &Path) -> Result<RuntimeKind, DetectError> {
    RuntimeKind::ALL
        .into_iter()
        .find(|k| k.runtime().looks_like(root))
        .ok_or_else(|| DetectError::NotAStore {
            root: root.to_path_buf(),
            hints: RuntimeKind::ALL
                .iter()
                .map(|k| k.runtime().layout_hint())
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// Decides which runtime and root to use on this machine's own `/`: both given, the runtime
/// whose layout `root` has, or the one store among the known layouts
/// ([`crate::layout::find`], which also gives the socket and the other defaults).
pub fn locate(
    kind: Option<RuntimeKind>,
    root: Option<&Path>,
) -> Result<(RuntimeKind, PathBuf), DetectError> {
    let found = crate::layout::find(&crate::layout::HostRoot::none(), kind, root)?;
    Ok((found.kind, found.root))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Rewrite;
    use hashcompat::Hash;

    #[test]
    fn every_alias_parses_to_its_runtime() {
        for k in RuntimeKind::ALL {
            assert_eq!(
                k.aliases()[0],
                k.name(),
                "the first alias is the canonical name"
            );
            for a in k.aliases() {
                assert_eq!(a.parse::<RuntimeKind>(), Ok(k), "alias {a}");
            }
        }
        assert!("podman".parse::<RuntimeKind>().is_err());
    }

    #[test]
    fn duplicate_ids_are_refused_even_when_identical() {
        let rw = |id: &str, h| Rewrite {
            id: id.into(),
            hash: Hash(h),
            hash_without_resources: None,
        };
        assert!(validate(&[rw("a", 1), rw("b", 1)]).is_ok());
        for batch in [vec![rw("a", 1), rw("a", 1)], vec![rw("a", 1), rw("a", 2)]] {
            let e = validate(&batch).expect_err("a duplicate id must be refused");
            assert!(
                e.is_refusal(),
                "duplicates are a refusal, not a failure: {e}"
            );
        }
    }

    #[test]
    fn locate_detects_each_layout_and_names_what_is_missing() {
        let d = tempfile::tempdir().unwrap();
        let e = locate(None, Some(d.path())).expect_err("an empty dir is no store");
        let msg = e.to_string();
        for k in RuntimeKind::ALL {
            assert!(
                msg.contains(&k.runtime().layout_hint()),
                "message names what a {} root holds: {msg}",
                k.name()
            );
        }
        std::fs::create_dir(d.path().join("containers")).unwrap();
        assert_eq!(locate(None, Some(d.path())).unwrap().0, RuntimeKind::Docker);
        let e = locate(Some(RuntimeKind::Containerd), Some(d.path()))
            .expect_err("a Docker root is no containerd root");
        assert!(
            matches!(e, DetectError::RuntimeMismatch { .. })
                && e.to_string().contains("looks like a docker root"),
            "{e}"
        );
        let gone = d.path().join("gone");
        assert!(matches!(
            locate(Some(RuntimeKind::Docker), Some(&gone)),
            Err(DetectError::RootMissing(_))
        ));
    }
}
