//! containerd's place in [`crate::runtime`]: a root holds `meta.db`; the CRI answers
//! `verify --live`.

use super::{ContainerdOptions, ContainerdStore, DEFAULT_SOCKET, META_DB};
use crate::contract::{ContainersOutlive, LiveContainer, Runtime, StoreOptions};
use crate::{RuntimeKind, RuntimeStore, StoreError};
use std::path::Path;

/// containerd 1.6–2.x with its CRI plugin.
pub struct Containerd;

/// The containerd descriptor.
pub static CONTAINERD: Containerd = Containerd;

impl Runtime for Containerd {
    fn kind(&self) -> RuntimeKind {
        RuntimeKind::Containerd
    }
    fn default_root(&self) -> &'static Path {
        Path::new("/var/lib/containerd")
    }
    fn default_endpoint(&self) -> String {
        crate::contract::unix_endpoint(Path::new(DEFAULT_SOCKET))
    }
    fn looks_like(&self, root: &Path) -> bool {
        root.join(META_DB).is_file()
    }
    fn layout_hint(&self) -> String {
        format!("a containerd root (no {META_DB})")
    }
    fn open(
        &self,
        root: &Path,
        options: &StoreOptions,
    ) -> Result<Box<dyn RuntimeStore>, StoreError> {
        Ok(Box::new(ContainerdStore::with_options(
            root,
            ContainerdOptions {
                socket: options.socket.clone(),
            },
        )?))
    }
    fn service_unit(&self) -> &'static str {
        "containerd"
    }
    fn containers_outlive_the_daemon(&self) -> ContainersOutlive {
        ContainersOutlive::Always
    }
    fn backup_estimate(&self, root: &Path, rewrites: usize) -> u64 {
        let _ = rewrites;
        // the pages a transaction rewrites are backed up, bounded by the whole meta.db (a
        // `--backup full` copy): the estimate is the bound
        std::fs::metadata(root.join(META_DB)).map_or(0, |m| m.len())
    }
    fn live_containers(&self, endpoint: &str) -> Result<Vec<LiveContainer>, StoreError> {
        crate::live::cri_runtime::cri_live_containers(endpoint)
    }
}
