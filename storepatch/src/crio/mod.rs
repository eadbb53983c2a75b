//! CRI-O back-end: the kubelet's hashes in `<graphroot>/<driver>-containers/<id>/userdata/config.json`.
//!
//! What CRI-O does (observed on a real CRI-O 1.30.14, fixture `fixtures/nodes/crio-1.30`, and read in its
//! source v1.24–v1.36; see docs/research/stores.md §4):
//!
//! * At create time CRI-O saves the container's OCI spec twice, byte-identical: in the graphroot
//!   (`/var/lib/containers/storage/overlay-containers/<id>/userdata/config.json`, persistent) and
//!   in the runroot (`/run/containers/storage/...`, tmpfs, the runc bundle). Format: Go
//!   `json.MarshalIndent(spec, "", "\t")`, no trailing newline, `annotations` keys sorted.
//! * The spec `annotations` hold every kubelet annotation as a plain key **and**
//!   `io.kubernetes.cri-o.Annotations`, a JSON *string* holding the kubelet's annotation map
//!   (compact Go JSON). At restart `LoadContainer` reads only the graphroot copy, and what the CRI
//!   reports (`ListContainers`, `ContainerStatus`) is that embedded string. The plain key only
//!   feeds the verbose runtime spec; the runroot copy is read by runc once, at `runc create`.
//! * If `LoadContainer` fails (e.g. the embedded string does not decode) CRI-O **deletes the
//!   container's storage** while its process keeps running. So every write is proven first: the
//!   new file and its embedded string are parsed and compared with the original with only the
//!   hash values changed, and a record whose embedded string is not a JSON object of strings is
//!   [`RecordKind::Undecodable`](crate::RecordKind::Undecodable) and never written.
//!
//! What this back-end writes: in the graphroot `config.json` the plain
//! `io.kubernetes.container.hash` and the one inside `io.kubernetes.cri-o.Annotations` (and
//! `hashWithoutResources`, matched by key, where the record carries it and the rewrite gives a
//! value), and the same in the runroot copy when it exists. Every other byte stays identical:
//! the values are replaced in place at spans found by [`crate::jsonspan`].
//!
//! Not written: `userdata/state.json` (CRI-O regenerates it from `runc state` at every start, so
//! for running containers it gets the old values back whatever we do; nothing answers the CRI from
//! it), runc's own state, `volatile-containers.json` (no annotations), and never
//! `/var/run/crio/version` or `/var/lib/crio/clean.shutdown`.
//!
//! **Runroot discovery** ([`CrioStore::open`]): when the graphroot path ends in
//! `var/lib/containers/storage` (the default `/var/lib/containers/storage`, or a copy of a node
//! laid out as `<node>/var/lib/containers/storage`), the node root `<node>` is what precedes it
//! and the runroot is the first directory of `<node>/run/containers/storage` and
//! `<node>/var/run/containers/storage` (for `<node>` = `/` that is CRI-O's default
//! `/run/containers/storage`). For any other graphroot no runroot is assumed (a scan warns); give
//! it with [`CrioOptions::runroot`]. The same node root locates the version file
//! (`<node>/var/run/crio/version`, else `<node>/run/crio/version`) and
//! `<node>/var/lib/crio/clean.shutdown` for the scan's warnings; with a non-standard graphroot the
//! default absolute paths are used.
//!
//! **Version-file guard** ([`RuntimeStore::precheck`]): a patch is refused (nothing written)
//! when the version file is missing, unreadable or not a JSON version string: any CRI-O then
//! removes every pod at its next start (`internal_wipe = true`, the default; proven on a real
//! CRI-O 1.30.14 by cli/tests/crio_live.rs), so no rewrite could keep a container and a
//! "patched" exit would mislead. A version file naming a major.minor only wipes under a CRI-O of
//! another major.minor, which the tool cannot see from the store: that stays a warning.
//!
//! **Running check** ([`RuntimeStore::ensure_stopped`]): CRI-O takes no lock and writes no pid
//! file by itself. It counts as running when its socket (default `/var/run/crio/crio.sock`)
//! accepts a connection, or when a pid file is configured and names a live process whose
//! `comm` is `crio`.

mod apply;
mod classify;
mod edit;
mod layout;
mod running;
pub mod runtime;
#[cfg(test)]
mod tests;

use crate::backup::Backup;
use crate::{
    ApplyOutcome, Rewrite, RuntimeKind, RuntimeStore, ScanReport, StoreError, StoreRecord,
};
use layout::is_dir;
use rayon::prelude::*;
use std::fs;
use std::path::{Path, PathBuf};

/// CRI-O's default graphroot (containers/storage `root`).
pub const DEFAULT_GRAPHROOT: &str = "/var/lib/containers/storage";
/// CRI-O's default runroot (containers/storage `runroot`, tmpfs).
pub const DEFAULT_RUNROOT: &str = "/run/containers/storage";
/// CRI-O's default CRI socket (`[crio.api] listen`).
pub const DEFAULT_SOCKET: &str = "/var/run/crio/crio.sock";
/// CRI-O's default `version_file` (tmpfs).
pub const DEFAULT_VERSION_FILE: &str = "/var/run/crio/version";
/// CRI-O's default `clean_shutdown_file`.
pub const DEFAULT_CLEAN_SHUTDOWN_FILE: &str = "/var/lib/crio/clean.shutdown";

/// The spec annotation holding the kubelet's annotations as a JSON string (what the CRI reports).
pub const CRIO_ANNOTATIONS: &str = "io.kubernetes.cri-o.Annotations";
/// The spec annotation holding the kubelet's labels as a JSON string.
pub const CRIO_LABELS: &str = "io.kubernetes.cri-o.Labels";
/// The spec annotation holding the CRI metadata (`name`, `attempt`, …) as a JSON string.
pub const CRIO_METADATA: &str = "io.kubernetes.cri-o.Metadata";
/// `container` or `sandbox`.
pub const CRIO_CONTAINER_TYPE: &str = "io.kubernetes.cri-o.ContainerType";
/// CRI-O's image name annotation.
pub const CRIO_IMAGE_NAME: &str = "io.kubernetes.cri-o.ImageName";
/// CRI-O's container id annotation.
pub const CRIO_CONTAINER_ID: &str = "io.kubernetes.cri-o.ContainerID";
/// Containers of other managers (podman: `libpod`) are ignored by CRI-O, and by us.
pub const CONTAINER_MANAGER: &str = "io.container.manager";

/// Where the pieces of a CRI-O node are, beyond the graphroot.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CrioOptions {
    /// containers/storage runroot; `None`: discovered (see the module docs).
    pub runroot: Option<PathBuf>,
    /// CRI socket; `None`: [`DEFAULT_SOCKET`].
    pub socket: Option<PathBuf>,
    /// A pid file naming the crio process, when the service manager writes one.
    pub pidfile: Option<PathBuf>,
    /// The node's `/` (under a host root): CRI-O's version file, clean-shutdown marker and the
    /// procfs its pid is looked up in are resolved inside it.
    pub host: crate::node::HostRoot,
}

/// A CRI-O store: graphroot, optional runroot, and how to tell whether CRI-O runs.
#[derive(Debug, Clone)]
pub struct CrioStore {
    graphroot: PathBuf,
    runroot: Option<PathBuf>,
    /// Why there is no runroot, for the scan's warnings.
    runroot_note: Option<String>,
    socket: PathBuf,
    pidfile: Option<PathBuf>,
    version_file: PathBuf,
    clean_shutdown_file: PathBuf,
    /// The procfs the pid file's pid is looked up in.
    proc: PathBuf,
    /// What `apply` replaces the files through.
    storage: crate::atomic::Backend,
}

impl RuntimeStore for CrioStore {
    fn kind(&self) -> RuntimeKind {
        RuntimeKind::Crio
    }

    fn endpoint(&self) -> String {
        crate::contract::unix_endpoint(&self.socket)
    }

    /// `<driver>-containers/<id>/userdata/.config.json.rehash-tmp-<pid>` of killed runs, in
    /// the graphroot and the runroot.
    fn sweep_stale_temps(&self) -> Result<usize, StoreError> {
        let mut ignored = Vec::new();
        let mut removed = 0;
        for d in self.container_dirs(&mut ignored)? {
            removed += crate::atomic::sweep_stale_temps(&d, 3)?;
            if let (Some(runroot), Some(driver)) = (&self.runroot, d.file_name()) {
                removed += crate::atomic::sweep_stale_temps(&runroot.join(driver), 3)?;
            }
        }
        Ok(removed)
    }

    fn root(&self) -> &Path {
        &self.graphroot
    }

    fn scan(&self) -> Result<ScanReport, StoreError> {
        if !is_dir(&self.graphroot) {
            return Err(StoreError::RootMissing(self.graphroot.clone()));
        }
        let mut warnings = Vec::new();
        let mut dirs = Vec::new();
        for d in self.container_dirs(&mut warnings)? {
            let rd = fs::read_dir(&d).map_err(|e| StoreError::io(&d, e))?;
            for entry in rd {
                let entry = entry.map_err(|e| StoreError::io(&d, e))?;
                let ft = entry
                    .file_type()
                    .map_err(|e| StoreError::io(entry.path(), e))?;
                // Files beside the container directories: volatile-containers.json,
                // containers.json, containers.lock.
                if ft.is_dir() || ft.is_symlink() {
                    dirs.push(entry.path());
                }
            }
        }
        dirs.sort();
        let records: Vec<StoreRecord> = dirs.par_iter().map(|d| self.scan_one(d)).collect();
        warnings.extend(self.hazards());
        Ok(ScanReport { records, warnings })
    }

    fn ensure_stopped(&self) -> Result<(), StoreError> {
        running::ensure_stopped(&self.socket, self.pidfile.as_deref(), &self.proc)
    }

    /// Refuses a node whose version file makes every CRI-O wipe it (module docs).
    fn precheck(&self) -> Result<(), StoreError> {
        self.check_version_file()
    }

    fn apply(&self, rewrites: &[Rewrite], backup: &mut Backup) -> Result<ApplyOutcome, StoreError> {
        self.ensure_stopped()?;
        crate::contract::validate(rewrites)?;
        self.apply_rewrites(rewrites, backup)
    }
}
