//! Docker back-end: dockershim (kubelet ≤ 1.23) and cri-dockerd keep the kubelet's hash as the
//! label `annotation.io.kubernetes.container.hash` in
//! `<data-root>/containers/<id>/config.v2.json`. dockerd cannot change labels (moby#21721), so
//! the file is edited while dockerd is stopped (with `live-restore`, the containers keep
//! running) and dockerd reads it back when it restores.
//!
//! Only the label value bytes change: every other byte of the file stays identical (dockerd
//! re-serialises the file at restore and produces the same bytes). Each edit is checked by
//! re-parsing the result and comparing it with the original document with that one value
//! changed.

pub mod running;
pub mod runtime;

pub use running::LiveRestore;

use crate::atomic::{self, FileMeta};
use crate::backup::{self, Backup};
use crate::jsonspan;
use crate::{
    ApplyOutcome, RecordKind, Rewrite, RuntimeKind, RuntimeStore, ScanReport, StoreError,
    StoreRecord,
};
use rayon::prelude::*;
use serde::Deserialize;
use std::borrow::Cow;
use std::collections::HashMap;
use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

/// The label holding `io.kubernetes.container.hash` (dockershim's `annotation.` prefix).
pub const HASH_LABEL: &str = "annotation.io.kubernetes.container.hash";
/// The label holding `io.kubernetes.container.hashWithoutResources`.
pub const HASH_WITHOUT_RESOURCES_LABEL: &str =
    "annotation.io.kubernetes.container.hashWithoutResources";
/// The kubelet's restart count label.
pub const RESTART_COUNT_LABEL: &str = "annotation.io.kubernetes.container.restartCount";
/// `podsandbox` or `container`, set by dockershim and cri-dockerd on everything they create.
pub const DOCKER_TYPE_LABEL: &str = "io.kubernetes.docker.type";
/// Pod name label (dockershim / cri-dockerd).
pub const POD_NAME_LABEL: &str = "io.kubernetes.pod.name";
/// Pod namespace label.
pub const POD_NAMESPACE_LABEL: &str = "io.kubernetes.pod.namespace";
/// Pod uid label.
pub const POD_UID_LABEL: &str = "io.kubernetes.pod.uid";
/// Container name label.
pub const CONTAINER_NAME_LABEL: &str = "io.kubernetes.container.name";
/// dockerd's per-container config, which holds the labels.
pub const CONFIG_FILE: &str = "config.v2.json";

/// Where dockerd keeps its pidfile, socket and configuration, and what its flags say about
/// `live-restore`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DockerOptions {
    /// dockerd's pid file (running check; its command line tells live-restore).
    pub pidfile: PathBuf,
    /// The API socket (`-H unix://…`).
    pub socket: PathBuf,
    /// dockerd's configuration file.
    pub daemon_json: PathBuf,
    /// `--live-restore` as given on dockerd's command line; overrides daemon.json.
    pub live_restore: Option<bool>,
    /// The procfs of dockerd's pid namespace, where the pidfile's pid is looked up
    /// ([`crate::node::procfs`]): the node's `/proc` under a host root.
    pub proc: PathBuf,
    /// The node's `/` (under a host root): a `--config-file` on the running dockerd's command
    /// line is resolved inside it.
    pub host: crate::node::HostRoot,
}

impl Default for DockerOptions {
    fn default() -> Self {
        DockerOptions {
            pidfile: "/var/run/docker.pid".into(),
            socket: "/var/run/docker.sock".into(),
            daemon_json: "/etc/docker/daemon.json".into(),
            live_restore: None,
            proc: "/proc".into(),
            host: crate::node::HostRoot::none(),
        }
    }
}

/// A Docker data-root (`/var/lib/docker` by default).
#[derive(Debug, Clone)]
pub struct DockerStore {
    root: PathBuf,
    /// The data-root with symlinks resolved: every path we touch is built from it.
    real_root: PathBuf,
    opts: DockerOptions,
    /// The hash labels of the files `apply` wrote, as its read-back after the renames found
    /// them (id → labels): the patch's read-back of the same files answers from here instead
    /// of reading and scanning every file a second time.
    read_after_write: std::sync::Arc<std::sync::Mutex<HashMap<String, readback::Labels>>>,
    /// What `apply` replaces the files through.
    storage: atomic::Backend,
}

/// What the scan reads of a config.v2.json. Strings are borrowed from the file's bytes where
/// their JSON needs no unescaping (every label of a kubelet container): the scan decodes a
/// file per container on rayon's threads, and a String per label key and value was most of
/// its allocations.
#[derive(Deserialize)]
struct ConfigV2<'a> {
    #[serde(rename = "ID", borrow)]
    id: Option<Text<'a>>,
    #[serde(rename = "Name", default, borrow)]
    name: Option<Text<'a>>,
    #[serde(rename = "State")]
    state: Option<StateV2>,
    #[serde(rename = "Config", borrow)]
    config: Option<ContainerConfig<'a>>,
    #[serde(rename = "Image", default, borrow)]
    image: Option<Text<'a>>,
}

#[derive(Deserialize)]
struct StateV2 {
    #[serde(rename = "Pid", default)]
    pid: i64,
}

#[derive(Deserialize)]
struct ContainerConfig<'a> {
    #[serde(rename = "Labels", default, borrow)]
    labels: Option<HashMap<Text<'a>, Text<'a>>>,
    #[serde(rename = "Image", default, borrow)]
    image: Option<Text<'a>>,
}

/// A JSON string borrowed from the input where it needs no unescaping, owned otherwise
/// (serde's own `Cow` borrows only as a field's very type: not inside a map, nor an `Option`).
#[derive(PartialEq, Eq, Hash)]
struct Text<'a>(Cow<'a, str>);

impl std::ops::Deref for Text<'_> {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for Text<'_> {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: serde::de::Error>(
                self,
                v: &'de str,
            ) -> Result<Self::Value, E> {
                Ok(Text(Cow::Borrowed(v)))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Text(Cow::Owned(v.to_string())))
            }
        }
        d.deserialize_str(Visitor)
    }
}

/// A container id we may join to a path: one plain name, nothing that could walk elsewhere.
fn check_plain_id(id: &str) -> Result<(), StoreError> {
    if id.is_empty()
        || id == "."
        || id == ".."
        || id.contains('/')
        || id.contains('\0')
        || id.len() > 255
    {
        return Err(StoreError::UnknownRecord(format!(
            "{id:?} (not a container id: it would name a path outside containers/)"
        )));
    }
    Ok(())
}

/// The attempt number at the end of a dockershim name `k8s_…_<attempt>`.
fn attempt_from_name(name: &str) -> Option<u32> {
    let name = name.strip_prefix('/').unwrap_or(name);
    if !name.starts_with("k8s_") {
        return None;
    }
    name.rsplit('_').next()?.parse().ok()
}

/// One file we are about to write.
struct Planned {
    id: String,
    path: PathBuf,
    original: Vec<u8>,
    meta: FileMeta,
    new: Vec<u8>,
}

impl DockerStore {
    /// A store at `data_root` with the default pidfile, socket and daemon.json.
    pub fn open(data_root: &Path) -> Result<Self, StoreError> {
        Self::with_options(data_root, DockerOptions::default())
    }

    /// A store at `data_root` with the given dockerd locations.
    pub fn with_options(data_root: &Path, opts: DockerOptions) -> Result<Self, StoreError> {
        let real_root = match fs::canonicalize(data_root) {
            Ok(p) if p.is_dir() => p,
            Ok(_) => return Err(StoreError::RootMissing(data_root.to_path_buf())),
            Err(e) if e.kind() == ErrorKind::NotFound => {
                return Err(StoreError::RootMissing(data_root.to_path_buf()))
            }
            Err(e) => return Err(StoreError::io(data_root, e)),
        };
        Ok(DockerStore {
            root: data_root.to_path_buf(),
            real_root,
            opts,
            read_after_write: Default::default(),
            storage: atomic::Backend::posix(),
        })
    }

    /// The store with its files replaced through `storage` (a test's crash simulation,
    /// `atomic::sim`) instead of the plain system calls.
    pub fn with_storage(mut self, storage: atomic::Backend) -> Self {
        self.storage = storage;
        self
    }

    /// The dockerd locations this store checks.
    pub fn options(&self) -> &DockerOptions {
        &self.opts
    }

    /// What we know about `live-restore` (flag, running dockerd's command line, daemon.json).
    pub fn live_restore(&self) -> LiveRestore {
        running::live_restore(
            self.opts.live_restore,
            &self.opts.pidfile,
            &self.opts.daemon_json,
            &self.opts.proc,
            &self.opts.host,
        )
    }

    /// `<data-root>/containers`, checked to be a real directory inside the data-root.
    fn containers_dir(&self) -> Result<PathBuf, StoreError> {
        let dir = self.real_root.join("containers");
        let meta = match fs::symlink_metadata(&dir) {
            Ok(m) => m,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                return Err(StoreError::Corrupt {
                    location: dir.display().to_string(),
                    reason: "does not exist: is this a Docker data-root?".into(),
                })
            }
            Err(e) => return Err(StoreError::io(&dir, e)),
        };
        if meta.file_type().is_symlink() {
            let target = fs::canonicalize(&dir).map_err(|e| StoreError::io(&dir, e))?;
            if !target.starts_with(&self.real_root) {
                return Err(StoreError::Corrupt {
                    location: dir.display().to_string(),
                    reason: format!(
                        "is a symbolic link to {}, outside the data-root; refusing",
                        target.display()
                    ),
                });
            }
            return Ok(target);
        }
        if !meta.is_dir() {
            return Err(StoreError::Corrupt {
                location: dir.display().to_string(),
                reason: "is not a directory".into(),
            });
        }
        Ok(dir)
    }

    /// Checks `containers/<id>` is a real directory (not a symlink) and returns its
    /// config.v2.json path. `Ok(None)` when there is no such directory.
    fn config_path(containers: &Path, id: &str) -> Result<Option<PathBuf>, StoreError> {
        let dir = containers.join(id);
        match fs::symlink_metadata(&dir) {
            Ok(m) if m.file_type().is_symlink() => {
                let target = fs::read_link(&dir)
                    .map(|t| t.display().to_string())
                    .unwrap_or_else(|_| "?".into());
                Err(StoreError::Corrupt {
                    location: dir.display().to_string(),
                    reason: format!(
                        "is a symbolic link (to {target}); refusing to follow it out of containers/"
                    ),
                })
            }
            Ok(m) if !m.is_dir() => Err(StoreError::Corrupt {
                location: dir.display().to_string(),
                reason: "is not a directory".into(),
            }),
            Ok(_) => Ok(Some(dir.join(CONFIG_FILE))),
            Err(e) if e.kind() == ErrorKind::NotFound => Ok(None),
            Err(e) => Err(StoreError::io(&dir, e)),
        }
    }

    fn scan_one(containers: &Path, id: &str) -> StoreRecord {
        let location = containers.join(id).join(CONFIG_FILE);
        let undecodable = |problem: String| {
            let mut r =
                StoreRecord::new(id, RecordKind::Undecodable, location.display().to_string());
            r.problem = Some(problem);
            r
        };
        let path = match Self::config_path(containers, id) {
            Ok(Some(p)) => p,
            Ok(None) => return undecodable("vanished during the scan".into()),
            Err(e) => return undecodable(e.to_string()),
        };
        let bytes = match atomic::read_regular_nofollow(&path) {
            Ok((b, _)) => b,
            Err(StoreError::Io { source, .. }) if source.kind() == ErrorKind::NotFound => {
                return undecodable(format!(
                    "{}: missing (dockerd cannot load this container either)",
                    path.display()
                ))
            }
            Err(e) => return undecodable(format!("cannot read it: {e}")),
        };
        let cfg: ConfigV2 = match serde_json::from_slice(&bytes) {
            Ok(c) => c,
            Err(e) => {
                let what = if e.is_eof() {
                    "is truncated"
                } else if e.is_data() {
                    "has a field of the wrong type"
                } else {
                    "is not valid JSON"
                };
                return undecodable(format!("{}: {what} ({e})", path.display()));
            }
        };
        match cfg.id.as_deref() {
            Some(i) if i == id => {}
            Some(i) => {
                return undecodable(format!(
                    "{}: its ID is {i}, not the directory name {id} (dockerd refuses it: \"Container is stored at\")",
                    path.display()
                ))
            }
            None => return undecodable(format!("{}: has no ID", path.display())),
        }
        let labels = cfg.config.as_ref().and_then(|c| c.labels.as_ref());
        let label = |k: &str| labels.and_then(|l| l.get(k)).map(|v| v.to_string());
        let kind = match label(DOCKER_TYPE_LABEL).as_deref() {
            Some("container") => RecordKind::Container,
            Some("podsandbox") => RecordKind::Sandbox,
            Some(other) => {
                return undecodable(format!(
                    "{}: label {DOCKER_TYPE_LABEL}={other:?} is neither \"container\" nor \"podsandbox\"",
                    path.display()
                ))
            }
            None => RecordKind::NotKubernetes,
        };
        let mut r = StoreRecord::new(id, kind.clone(), location.display().to_string());
        r.image = cfg
            .config
            .as_ref()
            .and_then(|c| c.image.as_deref())
            .filter(|s| !s.is_empty())
            .or(cfg.image.as_deref().filter(|s| !s.is_empty()))
            .map(str::to_string);
        r.pid = cfg
            .state
            .as_ref()
            .map(|s| s.pid)
            .filter(|&p| p > 0 && p <= u32::MAX as i64)
            .map(|p| p as u32);
        if kind == RecordKind::NotKubernetes {
            if label(POD_UID_LABEL).is_some() {
                r.problem = Some(format!(
                    "has Kubernetes pod labels but no {DOCKER_TYPE_LABEL} label: not created by dockershim or cri-dockerd; never touched"
                ));
            }
            return r;
        }
        r.namespace = label(POD_NAMESPACE_LABEL);
        r.pod = label(POD_NAME_LABEL);
        r.pod_uid = label(POD_UID_LABEL);
        if kind == RecordKind::Sandbox {
            r.attempt = cfg.name.as_deref().and_then(attempt_from_name);
            return r;
        }
        r.container = label(CONTAINER_NAME_LABEL);
        r.hash = label(HASH_LABEL);
        r.hash_without_resources = label(HASH_WITHOUT_RESOURCES_LABEL);
        let restart = label(RESTART_COUNT_LABEL);
        r.attempt = restart
            .as_deref()
            .and_then(|s| s.parse().ok())
            .or_else(|| cfg.name.as_deref().and_then(attempt_from_name));
        let mut problems = Vec::new();
        if r.hash.is_none() {
            problems.push(format!(
                "carries no {HASH_LABEL} label: cannot be rewritten"
            ));
        }
        if let Some(rc) = restart.filter(|s| s.parse::<u32>().is_err()) {
            problems.push(format!("{RESTART_COUNT_LABEL}={rc:?} is not a number"));
        }
        for (k, v) in [
            (POD_UID_LABEL, &r.pod_uid),
            (CONTAINER_NAME_LABEL, &r.container),
        ] {
            if v.is_none() {
                problems.push(format!("has no {k} label"));
            }
        }
        if !problems.is_empty() {
            r.problem = Some(problems.join("; "));
        }
        r
    }

    /// Reads, edits and verifies the file at `path` (resolved by `apply` for `rw`); writes
    /// nothing. `new == original` when the record already holds the requested values.
    fn plan_one(path: &Path, rw: &Rewrite) -> Result<Planned, StoreError> {
        let location = path.display().to_string();
        let corrupt = |reason: String| StoreError::Corrupt {
            location: location.clone(),
            reason,
        };
        let (original, meta) = atomic::read_regular_nofollow(path).map_err(|e| match e {
            StoreError::Io { source, .. } if source.kind() == ErrorKind::NotFound => {
                corrupt("missing: the container directory holds no config.v2.json".into())
            }
            other => other,
        })?;
        let new = edit_config(&original, rw, &location)?;
        Ok(Planned {
            id: rw.id.clone(),
            path: path.to_path_buf(),
            original,
            meta,
            new,
        })
    }
}

/// The in-memory core of [`DockerStore::apply`] for one container: edits the hash labels of
/// the `config.v2.json` bytes `original` as `rw` asks and proves the result at the byte level
/// ([`crate::splice_proof`]: only those label values changed, every other byte is kept).
/// Returns the new bytes, equal to `original` when the labels already hold the values.
/// `location` names the file in errors. Writes nothing; public for the fuzz targets.
pub fn edit_config(original: &[u8], rw: &Rewrite, location: &str) -> Result<Vec<u8>, StoreError> {
    let new_hash = rw.hash.to_string();
    let new_hwr = rw.hash_without_resources.map(|h| h.to_string());
    let corrupt = |reason: String| StoreError::Corrupt {
        location: location.to_string(),
        reason,
    };
    // The document as serde_json reads it, without building its tree: the same documents are
    // refused (syntax, number range, depth), at a fraction of the cost. The byte scanner below
    // then reads what Go's decoder reads and refuses where the two could disagree.
    serde_json::from_slice::<serde::de::IgnoredAny>(original).map_err(|e| {
        corrupt(if e.is_eof() {
            format!("is truncated ({e}); not rewritten")
        } else {
            format!("is not valid JSON ({e}); not rewritten")
        })
    })?;
    let scan_error = |e: jsonspan::SpanError| corrupt(format!("{e}; not rewritten"));
    let root = jsonspan::root(original).map_err(scan_error)?;
    let text = |m: &jsonspan::Member<'_>| -> Result<String, StoreError> {
        Ok(jsonspan::decode_string(original, m.value.start)
            .map_err(scan_error)?
            .text)
    };
    let id = match root.field("ID").map_err(scan_error)? {
        Some(m) if m.kind == jsonspan::Kind::String => Some(text(m)?),
        _ => None,
    };
    if id.as_deref() != Some(rw.id.as_str()) {
        return Err(corrupt(format!(
            "its ID field is not {} (the directory name); not rewritten",
            rw.id
        )));
    }
    let labels = match root.path(&["Config", "Labels"]) {
        Ok(Some(labels)) => labels,
        Ok(None) => {
            return Err(StoreError::Refused(format!(
                "{location}: has no Config.Labels: not a Kubernetes container; not rewritten"
            )))
        }
        Err(jsonspan::SpanError {
            reason: jsonspan::Reason::FieldNotAnObject { field, value },
            ..
        }) => {
            let field = if field == "Labels" {
                "Config.Labels"
            } else {
                "Config"
            };
            return Err(corrupt(format!(
                "{field} is {}, not an object; not rewritten",
                value.name()
            )));
        }
        Err(e) => return Err(scan_error(e)),
    };
    let label = |key: &str| -> Result<Option<(jsonspan::Span, String)>, StoreError> {
        match labels.get_string(key).map_err(scan_error)? {
            Some(m) => Ok(Some((m.value.clone(), text(m)?))),
            None => Ok(None),
        }
    };
    match label(DOCKER_TYPE_LABEL)? {
        Some((_, t)) if t == "container" => {}
        Some((_, t)) if t == "podsandbox" => {
            return Err(StoreError::Refused(format!(
                "{location}: {} is a pod sandbox; sandboxes carry no container hash",
                rw.id
            )))
        }
        Some((_, t)) => {
            return Err(corrupt(format!(
                "label {DOCKER_TYPE_LABEL} is {t:?}, not \"container\"; not rewritten"
            )))
        }
        None => {
            return Err(StoreError::Refused(format!(
                "{location}: has no {DOCKER_TYPE_LABEL} label: not created by dockershim or cri-dockerd; never touched"
            )))
        }
    }
    let mut wanted: Vec<(jsonspan::Span, String, &str)> = Vec::new();
    match label(HASH_LABEL)? {
        Some((span, old)) if old != new_hash => wanted.push((span, old, &new_hash)),
        Some(_) => {}
        None => return Err(corrupt(format!("has no {HASH_LABEL} label; not rewritten"))),
    }
    if let Some(new_hwr) = &new_hwr {
        match label(HASH_WITHOUT_RESOURCES_LABEL)? {
            Some((span, old)) if old != *new_hwr => wanted.push((span, old, new_hwr)),
            Some(_) => {}
            // The kubelet's feature gate decided not to write it: leave it absent.
            None => {}
        }
    }
    if wanted.is_empty() {
        return Ok(original.to_vec());
    }
    let mut edits = Vec::with_capacity(wanted.len());
    let mut splices = Vec::with_capacity(wanted.len());
    for (span, old, value) in &wanted {
        splices.push(crate::splice_proof::Spliced {
            span: span.clone(),
            old,
            new: value,
        });
        edits.push(jsonspan::Edit::string(span.clone(), value).map_err(scan_error)?);
    }
    let new = jsonspan::splice(original, edits).map_err(scan_error)?;
    // Proved at the byte level (no second parse): only the label values changed.
    crate::splice_proof::prove(original, &new, &splices).map_err(|reason| StoreError::Verify {
        location: location.to_string(),
        reason: format!(
            "the edited document differs from the original in more than the hash labels: {reason}"
        ),
    })?;
    Ok(new)
}

impl RuntimeStore for DockerStore {
    fn kind(&self) -> RuntimeKind {
        RuntimeKind::Docker
    }

    /// `containers/<id>/.config.v2.json.rehash-tmp-<pid>` of killed runs.
    fn sweep_stale_temps(&self) -> Result<usize, StoreError> {
        crate::atomic::sweep_stale_temps(&self.containers_dir()?, 2)
    }

    fn root(&self) -> &Path {
        &self.root
    }

    fn scan(&self) -> Result<ScanReport, StoreError> {
        let containers = self.containers_dir()?;
        let mut ids = Vec::new();
        for entry in fs::read_dir(&containers).map_err(|e| StoreError::io(&containers, e))? {
            let entry = entry.map_err(|e| StoreError::io(&containers, e))?;
            let name = entry.file_name();
            let name = name.to_string_lossy();
            // Our own (or dockerd's) temp files never live here, but skip hidden entries.
            if name.starts_with('.') {
                continue;
            }
            ids.push(name.into_owned());
        }
        let mut records: Vec<StoreRecord> = ids
            .par_iter()
            .map(|id| Self::scan_one(&containers, id))
            .collect();
        records.sort_by(|a, b| a.id.cmp(&b.id));
        let mut warnings = Vec::new();
        warnings.extend(self.live_restore().hazard());
        // Undecodable records are reported by the plan, with their ids (one hazard, not two).
        Ok(ScanReport { records, warnings })
    }

    fn ensure_stopped(&self) -> Result<(), StoreError> {
        match running::dockerd_running(&self.opts.pidfile, &self.opts.socket, &self.opts.proc) {
            Some(evidence) => Err(StoreError::RuntimeRunning {
                runtime: "docker",
                evidence,
            }),
            None => Ok(()),
        }
    }

    fn endpoint(&self) -> String {
        crate::contract::unix_endpoint(&self.opts.socket)
    }

    /// With live-restore *known* off (flag, running dockerd's command line or daemon.json),
    /// stopping dockerd has already killed every container, and its restart recreates nothing
    /// the kubelet would adopt: refuse rather than pretend to help. When it is only unknown,
    /// the scan's loud warning stands and the patch goes on: the operator stopped dockerd
    /// knowingly. The same [`DockerStore::live_restore`] feeds both, so plan and patch agree.
    fn precheck(&self) -> Result<(), StoreError> {
        match self.live_restore() {
            LiveRestore::Off(src) => Err(StoreError::Refused(format!(
                "dockerd live-restore is off ({src}); stopping dockerd kills every container, so there is nothing to keep. If dockerd does run with --live-restore, say so with the live-restore option (--live-restore true)"
            ))),
            LiveRestore::On(_) | LiveRestore::Unknown(_) => Ok(()),
        }
    }

    fn read_back(&self, ids: &[&str]) -> Result<Vec<StoreRecord>, StoreError> {
        self.read_back_labels(ids)
    }

    /// Reads, edits and proves the files a wave (256 files) at a time: each wave's
    /// originals go into the backup's pack and its new bytes into temp files beside their
    /// targets, then the wave's bytes are dropped, so memory does not grow with the node. Only
    /// when every file is planned and staged does the backup commit (one flush for the copies
    /// and the staged files), and only then are the files renamed (atomic::StagedBatch).
    fn apply(&self, rewrites: &[Rewrite], backup: &mut Backup) -> Result<ApplyOutcome, StoreError> {
        let mut lap = crate::Lap::start();
        // What an earlier apply read answers nothing after this one starts writing.
        self.read_after_write
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
        self.ensure_stopped()?;
        let containers = self.containers_dir()?;
        crate::contract::validate(rewrites)?;
        // Every target resolved first: the file systems to flush are opened before any write.
        let paths: Vec<PathBuf> = rewrites
            .iter()
            .map(|rw| {
                check_plain_id(&rw.id)?;
                Self::config_path(&containers, &rw.id)?
                    .ok_or_else(|| StoreError::UnknownRecord(rw.id.clone()))
            })
            .collect::<Result<_, _>>()?;
        let path_refs: Vec<&Path> = paths.iter().map(PathBuf::as_path).collect();
        let mut outcome = ApplyOutcome::default();
        let mut batch = atomic::StagedBatch::open_on(&path_refs, self.storage.clone())?;
        // (id, path, sha256 of the new bytes) of every file that changes, in request order
        let mut changed: Vec<(String, PathBuf, String)> = Vec::new();
        let mut pack = backup.pack();
        for (wave, wave_paths) in rewrites.chunks(APPLY_WAVE).zip(paths.chunks(APPLY_WAVE)) {
            // (the error of the first failing file in request order, as a serial loop gives)
            let planned: Vec<Planned> = wave
                .par_iter()
                .zip(wave_paths)
                .map(|(rw, path)| Self::plan_one(path, rw))
                .collect::<Vec<_>>()
                .into_iter()
                .collect::<Result<_, _>>()?;
            let (wave_changed, already): (Vec<Planned>, Vec<Planned>) = planned
                .into_iter()
                .partition(|p| !crate::bytes::equal(&p.new, &p.original));
            outcome.already.extend(already.into_iter().map(|p| p.id));
            let items: Vec<backup::SaveItem> = wave_changed
                .iter()
                .map(|p| backup::SaveItem {
                    path: &p.path,
                    original: &p.original,
                    meta: p.meta,
                    new: Some(&p.new),
                })
                .collect();
            let shas = pack.add(&items)?;
            let reps: Vec<atomic::Replacement> = wave_changed
                .iter()
                .map(|p| atomic::Replacement {
                    path: &p.path,
                    bytes: &p.new,
                    meta: p.meta,
                })
                .collect();
            batch.stage(&reps)?;
            outcome.bytes_written += wave_changed.iter().map(|p| p.new.len() as u64).sum::<u64>();
            for (p, sha) in wave_changed.into_iter().zip(shas) {
                changed.push((p.id, p.path, sha.expect("every staged file has new bytes")));
            }
        }
        pack.close()?;
        lap.split("edit_and_stage", &mut outcome.phases);
        // The copies and the staged files made durable by one flush when they share a file
        // system, then the manifest: the backup is complete before the first rename.
        backup.commit()?;
        lap.split("backup_commit", &mut outcome.phases);
        if changed.is_empty() {
            backup.finish()?;
            return Ok(outcome);
        }
        // dockerd must not have come up while we prepared.
        self.ensure_stopped()?;
        // Renamed over the originals on a pool of I/O threads, then one more syncfs: any crash
        // leaves every file either old or new.
        batch.commit()?;
        lap.split("rename", &mut outcome.phases);
        outcome.files_written = changed.len();
        // Read back what we wrote: every file must hold the bytes the backup recorded as new.
        // The labels of those bytes are kept for the patch's read-back (read_back_labels).
        // (bytes whose labels do not scan are left to that read-back, which names the error)
        type Read = Result<(String, Option<readback::Labels>), String>;
        let read: Vec<Read> = atomic::on_io_threads(|| {
            changed
                .par_iter()
                .map(
                    |(id, path, sha)| match atomic::read_regular_nofollow(path) {
                        Ok((b, _)) if backup::sha256_hex(&b) == *sha => {
                            Ok((id.clone(), readback::labels_of(&b).ok()))
                        }
                        Ok(_) => Err(format!(
                            "{}: holds other bytes than written",
                            path.display()
                        )),
                        Err(e) => Err(e.to_string()),
                    },
                )
                .collect()
        });
        let mut mismatched = Vec::new();
        let mut labels = HashMap::with_capacity(read.len());
        for r in read {
            match r {
                Ok((id, Some(l))) => {
                    labels.insert(id, l);
                }
                Ok((_, None)) => {}
                Err(e) => mismatched.push(e),
            }
        }
        if !mismatched.is_empty() {
            return Err(StoreError::Corrupt {
                location: mismatched.join(", "),
                reason: format!(
                    "read-back after the write did not give the written bytes; the backup in {} can restore the originals",
                    backup.dir().display()
                ),
            });
        }
        *self
            .read_after_write
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = labels;
        backup.finish()?;
        lap.split("read_back", &mut outcome.phases);
        outcome.changed = changed.into_iter().map(|(id, _, _)| id).collect();
        Ok(outcome)
    }
}

/// How many `config.v2.json` files [`DockerStore::apply`] holds in memory at once (original and
/// new bytes, ~2 KB each on a real node): enough to keep the cores and the I/O threads busy.
const APPLY_WAVE: usize = 256;

mod readback;
#[cfg(test)]
mod tests;
