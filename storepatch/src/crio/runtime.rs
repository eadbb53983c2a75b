//! CRI-O's place in [`crate::runtime`]: a graphroot holds `overlay-containers/`; the CRI
//! answers `verify --live`.

use super::{CrioOptions, CrioStore, DEFAULT_GRAPHROOT, DEFAULT_SOCKET};
use crate::contract::{ContainersOutlive, LiveContainer, Runtime, StoreOptions};
use crate::{RuntimeKind, RuntimeStore, StoreError};
use std::path::Path;

/// CRI-O (containers/storage graphroot and runroot).
pub struct Crio;

/// The CRI-O descriptor.
pub static CRIO: Crio = Crio;

impl Runtime for Crio {
    fn kind(&self) -> RuntimeKind {
        RuntimeKind::Crio
    }
    fn default_root(&self) -> &'static Path {
        Path::new(DEFAULT_GRAPHROOT)
    }
    fn default_endpoint(&self) -> String {
        crate::contract::unix_endpoint(Path::new(DEFAULT_SOCKET))
    }
    fn looks_like(&self, root: &Path) -> bool {
        root.join("overlay-containers").is_dir()
    }
    fn layout_hint(&self) -> String {
        "a CRI-O graphroot (no overlay-containers/)".into()
    }
    fn open(
        &self,
        root: &Path,
        options: &StoreOptions,
    ) -> Result<Box<dyn RuntimeStore>, StoreError> {
        Ok(Box::new(CrioStore::with_options(
            root,
            CrioOptions {
                runroot: options.runroot.clone(),
                socket: options.socket.clone(),
                pidfile: options.pidfile.clone(),
                host: options.host.clone(),
            },
        )?))
    }
    fn service_unit(&self) -> &'static str {
        "crio"
    }
    fn containers_outlive_the_daemon(&self) -> ContainersOutlive {
        ContainersOutlive::Always
    }
    fn live_containers(&self, endpoint: &str) -> Result<Vec<LiveContainer>, StoreError> {
        crate::live::cri_runtime::cri_live_containers(endpoint)
    }
}
