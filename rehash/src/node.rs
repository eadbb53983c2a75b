//! Finding and opening a node's store. Which runtime, where its root is and what options it
//! reads are all decided by `storepatch`'s runtime descriptors; this only combines them.

use crate::error::Error;
use std::path::{Path, PathBuf};
use storepatch::{RuntimeKind, RuntimeStore, StoreOptions};

/// Where a node's store is: any part left `None` is found (the runtime from the root's
/// layout, the root from the runtime's default, or the one store at the default roots).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreLocation {
    /// The runtime, when known.
    pub runtime: Option<RuntimeKind>,
    /// The store root (Docker data-root, containerd root, CRI-O graphroot), when known.
    pub root: Option<PathBuf>,
    /// Sockets, pid files and runtime-specific settings.
    pub options: StoreOptions,
}

impl StoreLocation {
    /// A store of a known runtime at a known root, with default options.
    pub fn new(runtime: RuntimeKind, root: impl Into<PathBuf>) -> Self {
        StoreLocation {
            runtime: Some(runtime),
            root: Some(root.into()),
            options: StoreOptions::default(),
        }
    }

    /// Opens the store (reads nothing yet).
    pub fn open(&self) -> Result<Box<dyn RuntimeStore>, Error> {
        let (kind, root) = storepatch::runtime::locate(self.runtime, self.root.as_deref())?;
        Ok(kind.runtime().open(&root, &self.options)?)
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
