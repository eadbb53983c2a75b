//! containerd's place in [`crate::runtime`]: a root holds `meta.db`; the CRI answers
//! `verify --live`.

use super::{ContainerdOptions, ContainerdStore, DEFAULT_SOCKET, META_DB};
use crate::runtime::{LiveContainer, Runtime, StoreOptions};
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
        crate::runtime::unix_endpoint(Path::new(DEFAULT_SOCKET))
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
    fn live_containers(&self, endpoint: &str) -> Result<Vec<LiveContainer>, StoreError> {
        crate::live::runtime::cri_live_containers(endpoint)
    }
}
