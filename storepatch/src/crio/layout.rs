//! Where a CRI-O node keeps things: the graphroot given, the runroot discovered from it (see the
//! module docs of [`super`]), the version file and clean-shutdown marker the scan warns about,
//! and the paths of each container's `config.json`, refusing symbolic links on the way.

use super::{
    CrioOptions, CrioStore, DEFAULT_CLEAN_SHUTDOWN_FILE, DEFAULT_SOCKET, DEFAULT_VERSION_FILE,
};
use crate::StoreError;
use std::fs;
use std::path::{Path, PathBuf};

pub(super) fn is_dir(p: &Path) -> bool {
    fs::metadata(p).map(|m| m.is_dir()).unwrap_or(false)
}

/// `<node>` when `graphroot` is `<node>/var/lib/containers/storage`.
pub(super) fn node_root_of(graphroot: &Path) -> Option<PathBuf> {
    let suffix = Path::new("var/lib/containers/storage");
    if !graphroot.ends_with(suffix) {
        return None;
    }
    let mut p = graphroot.to_path_buf();
    for _ in 0..4 {
        p.pop();
    }
    if p.as_os_str().is_empty() {
        p = PathBuf::from(".");
    }
    Some(p)
}

impl CrioStore {
    /// Opens the store at `graphroot`, discovering the runroot (module docs) and using the
    /// default socket.
    pub fn open(graphroot: &Path) -> Result<Self, StoreError> {
        Self::with_options(graphroot, CrioOptions::default())
    }

    /// A store at `graphroot` with the given runroot, socket and pid file (the runroot discovered when absent).
    pub fn with_options(graphroot: &Path, options: CrioOptions) -> Result<Self, StoreError> {
        if !is_dir(graphroot) {
            return Err(StoreError::RootMissing(graphroot.to_path_buf()));
        }
        let node = node_root_of(graphroot);
        let (runroot, runroot_note) = match options.runroot {
            Some(r) => {
                if !is_dir(&r) {
                    return Err(StoreError::RootMissing(r));
                }
                (Some(r), None)
            }
            None => match &node {
                Some(n) => {
                    let candidates = [
                        n.join("run/containers/storage"),
                        n.join("var/run/containers/storage"),
                    ];
                    match candidates.iter().find(|c| is_dir(c)) {
                        Some(c) => (Some(c.clone()), None),
                        None => (
                            None,
                            Some(format!(
                                "no CRI-O runroot found at {} or {} (after a reboot the tmpfs runroot is empty); only the graphroot copies of config.json are rewritten",
                                candidates[0].display(),
                                candidates[1].display()
                            )),
                        ),
                    }
                }
                None => (
                    None,
                    Some(format!(
                        "graphroot {} is not <node>/var/lib/containers/storage, so the runroot was not discovered; give it explicitly or the runroot copies of config.json (the runc bundles) are left with the old hashes",
                        graphroot.display()
                    )),
                ),
            },
        };
        let on_node = |p: &str| {
            options
                .host
                .resolve(Path::new(p))
                .map_err(|e| StoreError::io(Path::new(p), e))
        };
        let (version_file, clean_shutdown_file) = match &node {
            // Under a host root the node's own paths (its `/var/run -> /run` link included).
            _ if options.host.dir().is_some() => (
                on_node(DEFAULT_VERSION_FILE)?,
                on_node(DEFAULT_CLEAN_SHUTDOWN_FILE)?,
            ),
            Some(n) => {
                let var_run = n.join("var/run/crio/version");
                let run = n.join("run/crio/version");
                let v = if var_run.exists() || !run.exists() {
                    var_run
                } else {
                    run
                };
                (v, n.join("var/lib/crio/clean.shutdown"))
            }
            None => (
                PathBuf::from(DEFAULT_VERSION_FILE),
                PathBuf::from(DEFAULT_CLEAN_SHUTDOWN_FILE),
            ),
        };
        Ok(CrioStore {
            graphroot: graphroot.to_path_buf(),
            runroot,
            runroot_note,
            socket: options
                .socket
                .unwrap_or_else(|| PathBuf::from(DEFAULT_SOCKET)),
            pidfile: options.pidfile,
            version_file,
            clean_shutdown_file,
            proc: on_node("/proc")?,
            storage: crate::atomic::Backend::posix(),
        })
    }

    /// The store with its files replaced through `storage` (a test's crash simulation,
    /// `atomic::sim`) instead of the plain system calls.
    pub fn with_storage(mut self, storage: crate::atomic::Backend) -> Self {
        self.storage = storage;
        self
    }

    /// The graphroot.
    pub fn graphroot(&self) -> &Path {
        &self.graphroot
    }

    /// The runroot, when there is one.
    pub fn runroot(&self) -> Option<&Path> {
        self.runroot.as_deref()
    }

    /// The CRI socket the running check probes.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The CRI-O version file this store's warnings talk about (never written).
    pub fn version_file(&self) -> &Path {
        &self.version_file
    }

    /// `<graphroot>/<driver>-containers` directories (normally only `overlay-containers`).
    pub(super) fn container_dirs(
        &self,
        warnings: &mut Vec<crate::Hazard>,
    ) -> Result<Vec<PathBuf>, StoreError> {
        let mut out = Vec::new();
        let rd = fs::read_dir(&self.graphroot).map_err(|e| StoreError::io(&self.graphroot, e))?;
        for entry in rd {
            let entry = entry.map_err(|e| StoreError::io(&self.graphroot, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.ends_with("-containers") {
                continue;
            }
            let path = entry.path();
            let meta = fs::symlink_metadata(&path).map_err(|e| StoreError::io(&path, e))?;
            if meta.file_type().is_symlink() {
                warnings.push(
                    crate::Hazard::warn(
                        "crio-containers-dir-symlink",
                        format!(
                            "{} is a symbolic link; not followed (it could point outside the store), its containers are not scanned",
                            path.display()
                        ),
                    )
                    .about(&path),
                );
                continue;
            }
            if meta.is_dir() {
                out.push(path);
            }
        }
        out.sort();
        Ok(out)
    }

    /// Finds `<graphroot>/<driver>-containers/<id>`.
    pub(super) fn find_container_dir(&self, id: &str) -> Result<PathBuf, StoreError> {
        if !valid_id(id) {
            return Err(StoreError::UnknownRecord(id.to_string()));
        }
        let mut ignored = Vec::new();
        for d in self.container_dirs(&mut ignored)? {
            let p = d.join(id);
            if fs::symlink_metadata(&p).is_ok() {
                return Ok(p);
            }
        }
        Err(StoreError::UnknownRecord(id.to_string()))
    }

    /// The runroot copy of `<driver>-containers/<id>/userdata/config.json`, if it exists.
    pub(super) fn runroot_config(
        &self,
        container_dir: &Path,
    ) -> Result<Option<PathBuf>, StoreError> {
        let Some(runroot) = &self.runroot else {
            return Ok(None);
        };
        let id = container_dir.file_name().unwrap_or_default();
        let driver = container_dir
            .parent()
            .and_then(|p| p.file_name())
            .unwrap_or_default();
        let dir = runroot.join(driver);
        if fs::symlink_metadata(&dir).is_err() || fs::symlink_metadata(dir.join(id)).is_err() {
            return Ok(None);
        }
        let cfg = dir.join(id).join("userdata").join("config.json");
        check_components(runroot, &cfg)?;
        match fs::symlink_metadata(&cfg) {
            Ok(_) => Ok(Some(cfg)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(StoreError::io(&cfg, e)),
        }
    }

    pub(super) fn hazards(&self) -> Vec<crate::Hazard> {
        use crate::Hazard;
        let mut w = Vec::new();
        if let Some(n) = &self.runroot_note {
            w.push(Hazard::warn("crio-runroot-not-found", n.clone()));
        }
        let vf = self.version_file.display();
        match fs::read(&self.version_file) {
            Ok(bytes) => {
                let text = String::from_utf8_lossy(&bytes);
                let version = serde_json::from_str::<String>(text.trim())
                    .unwrap_or_else(|_| text.trim().to_string());
                let mm = major_minor(&version);
                w.push(Hazard::warn("crio-version-file", format!(
                    "CRI-O version file {vf} says {version:?}: a CRI-O whose major.minor is not {} (an in-place CRI-O upgrade), or any CRI-O after a reboot (the file is on tmpfs and will be gone), removes every pod at its first start when internal_wipe = true (the default), whatever the hashes say. Upgrade only the kubelet, keep CRI-O at {} until the pods are adopted. kubelet-rehash never touches this file.",
                    mm.as_deref().unwrap_or("the same"),
                    mm.as_deref().unwrap_or("the same version"),
                )).about(&self.version_file));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => w.push(Hazard::warn("crio-version-file-missing", format!(
                "CRI-O version file {vf} is missing: a CRI-O started now with internal_wipe = true (the default) removes every pod at start, whatever the hashes say (rewriting them cannot prevent that). kubelet-rehash never creates or touches this file."
            )).about(&self.version_file)),
            Err(e) => w.push(Hazard::warn("crio-version-file-unreadable", format!(
                "CRI-O version file {vf} cannot be read ({e}): if CRI-O finds it missing or naming another major.minor at start it removes every pod (internal_wipe = true, the default)."
            )).about(&self.version_file)),
        }
        let supported = self
            .clean_shutdown_file
            .with_file_name("clean.shutdown.supported");
        if supported.exists() && !self.clean_shutdown_file.exists() {
            w.push(Hazard::warn("crio-unclean-shutdown", format!(
                "{} is missing while {} exists: CRI-O did not shut down cleanly (or is running); with internal_repair = true it checks, repairs or wipes the storage at its next start. kubelet-rehash never touches this marker.",
                self.clean_shutdown_file.display(),
                supported.display()
            )).about(&self.clean_shutdown_file));
        }
        w
    }
}

impl CrioStore {
    /// `Err(StoreError::Refused)` when CRI-O's `ShouldCrioWipe` is true whatever the binary's
    /// version: the version file is missing, unreadable, or holds no JSON version string.
    pub(super) fn check_version_file(&self) -> Result<(), StoreError> {
        let vf = self.version_file.display();
        let consequence = "so CRI-O removes every pod at its next start (internal_wipe = true, the default) and no rewrite can keep a container. kubelet-rehash never creates or touches this file; nothing was written";
        let bytes = match fs::read(&self.version_file) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(StoreError::Refused(format!(
                    "CRI-O version file {vf} is missing (after a reboot, or a copied node without its tmpfs), {consequence}"
                )))
            }
            Err(e) => {
                return Err(StoreError::Refused(format!(
                    "CRI-O version file {vf} cannot be read ({e}), {consequence}"
                )))
            }
        };
        let version = serde_json::from_slice::<String>(&bytes).ok();
        if version.as_deref().and_then(major_minor).is_none() {
            return Err(StoreError::Refused(format!(
                "CRI-O version file {vf} holds {:?}, not a JSON version string, {consequence}",
                String::from_utf8_lossy(&bytes)
            )));
        }
        Ok(())
    }
}

pub(super) fn major_minor(version: &str) -> Option<String> {
    let mut it = version.split(['.', '+', '-']);
    let major = it.next()?.trim_start_matches('v');
    let minor = it.next()?;
    if major.chars().all(|c| c.is_ascii_digit()) && minor.chars().all(|c| c.is_ascii_digit()) {
        Some(format!("{major}.{minor}"))
    } else {
        None
    }
}

/// containers/storage ids are hex; anything with a path separator or a dot name is not one.
fn valid_id(id: &str) -> bool {
    !id.is_empty() && id != "." && id != ".." && !id.contains('/') && !id.contains('\0')
}

/// Refuses a symbolic link (or a non-directory) at any component of `path` below `root`
/// except the last one (the file itself is opened with `O_NOFOLLOW`).
pub(super) fn check_components(root: &Path, path: &Path) -> Result<(), StoreError> {
    let rel = path.strip_prefix(root).map_err(|_| StoreError::Corrupt {
        location: path.display().to_string(),
        reason: format!("is not below {}", root.display()),
    })?;
    let mut cur = root.to_path_buf();
    let comps: Vec<_> = rel.components().collect();
    for c in &comps[..comps.len().saturating_sub(1)] {
        cur.push(c);
        let meta = fs::symlink_metadata(&cur).map_err(|e| StoreError::io(&cur, e))?;
        if meta.file_type().is_symlink() {
            return Err(StoreError::Corrupt {
                location: cur.display().to_string(),
                reason:
                    "is a symbolic link; refusing to follow it (it could point outside the store)"
                        .into(),
            });
        }
        if !meta.is_dir() {
            return Err(StoreError::Corrupt {
                location: cur.display().to_string(),
                reason: "is not a directory".into(),
            });
        }
    }
    Ok(())
}
