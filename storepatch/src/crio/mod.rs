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
//!   [`RecordKind::Undecodable`] and never written.
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
//! **Running check** ([`RuntimeStore::ensure_stopped`]): CRI-O takes no lock and writes no pid
//! file by itself. It counts as running when its socket (default `/var/run/crio/crio.sock`)
//! accepts a connection, or when a pid file is configured and names a live process whose
//! `comm` is `crio`.

pub mod runtime;

use crate::atomic::{self, FileMeta};
use crate::backup::{self, Backup};
use crate::jsonspan;
use crate::{
    ApplyOutcome, RecordKind, Rewrite, RuntimeKind, RuntimeStore, ScanReport, StoreError,
    StoreRecord, HASH_ANNOTATION, HASH_WITHOUT_RESOURCES_ANNOTATION,
};
use rayon::prelude::*;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::fs;
use std::ops::Range;
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
pub const CRIO_IMAGE_NAME: &str = "io.kubernetes.cri-o.ImageName";
pub const CRIO_CONTAINER_ID: &str = "io.kubernetes.cri-o.ContainerID";
/// Containers of other managers (podman: `libpod`) are ignored by CRI-O, and by us.
pub const CONTAINER_MANAGER: &str = "io.container.manager";

const LABEL_POD_NAME: &str = "io.kubernetes.pod.name";
const LABEL_POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
const LABEL_POD_UID: &str = "io.kubernetes.pod.uid";
const LABEL_CONTAINER_NAME: &str = "io.kubernetes.container.name";

/// The two annotations a rewrite may change, in this order everywhere below.
const HASH_KEYS: [&str; 2] = [HASH_ANNOTATION, HASH_WITHOUT_RESOURCES_ANNOTATION];

/// Where the pieces of a CRI-O node are, beyond the graphroot.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CrioOptions {
    /// containers/storage runroot; `None`: discovered (see the module docs).
    pub runroot: Option<PathBuf>,
    /// CRI socket; `None`: [`DEFAULT_SOCKET`].
    pub socket: Option<PathBuf>,
    /// A pid file naming the crio process, when the service manager writes one.
    pub pidfile: Option<PathBuf>,
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
}

fn is_dir(p: &Path) -> bool {
    fs::metadata(p).map(|m| m.is_dir()).unwrap_or(false)
}

/// `<node>` when `graphroot` is `<node>/var/lib/containers/storage`.
fn node_root_of(graphroot: &Path) -> Option<PathBuf> {
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
        let (version_file, clean_shutdown_file) = match &node {
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
        })
    }

    pub fn graphroot(&self) -> &Path {
        &self.graphroot
    }

    pub fn runroot(&self) -> Option<&Path> {
        self.runroot.as_deref()
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// The CRI-O version file this store's warnings talk about (never written).
    pub fn version_file(&self) -> &Path {
        &self.version_file
    }

    /// `<graphroot>/<driver>-containers` directories (normally only `overlay-containers`).
    fn container_dirs(&self, warnings: &mut Vec<String>) -> Result<Vec<PathBuf>, StoreError> {
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
                warnings.push(format!(
                    "{} is a symbolic link; not followed (it could point outside the store), its containers are not scanned",
                    path.display()
                ));
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
    fn find_container_dir(&self, id: &str) -> Result<PathBuf, StoreError> {
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
    fn runroot_config(&self, container_dir: &Path) -> Result<Option<PathBuf>, StoreError> {
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

    fn scan_one(&self, container_dir: &Path) -> StoreRecord {
        let id = container_dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let cfg = container_dir.join("userdata").join("config.json");
        let location = cfg.display().to_string();
        if let Err(e) = check_components(&self.graphroot, &cfg) {
            let mut r = StoreRecord::new(&id, RecordKind::Undecodable, &location);
            r.problem = Some(e.to_string());
            return r;
        }
        let bytes = match atomic::read_regular_nofollow(&cfg) {
            Ok((b, _)) => b,
            Err(StoreError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                let mut r = StoreRecord::new(&id, RecordKind::NotKubernetes, &location);
                r.problem = Some("no userdata/config.json: not a container CRI-O created".into());
                return r;
            }
            Err(e) => {
                let mut r = StoreRecord::new(&id, RecordKind::Undecodable, &location);
                r.problem = Some(e.to_string());
                return r;
            }
        };
        let mut record = analyse(&id, &location, &bytes).record;
        if record.kind == RecordKind::Container {
            let state = container_dir.join("userdata").join("state.json");
            if let Ok((b, _)) = atomic::read_regular_nofollow(&state) {
                match serde_json::from_slice::<Value>(&b) {
                    Ok(v) => {
                        // `pid` while running; CRI-O keeps only `initPid` once the
                        // container exited (what its verbose status reports).
                        record.pid = ["pid", "initPid"].iter().find_map(|k| {
                            v.get(*k)
                                .and_then(Value::as_u64)
                                .filter(|p| *p > 0)
                                .and_then(|p| u32::try_from(p).ok())
                        });
                    }
                    Err(e) => append_problem(
                        &mut record,
                        format!("{}: not valid JSON ({e}); pid unknown", state.display()),
                    ),
                }
            }
        }
        record
    }

    fn warnings(&self) -> Vec<String> {
        let mut w = Vec::new();
        if let Some(n) = &self.runroot_note {
            w.push(n.clone());
        }
        let vf = self.version_file.display();
        match fs::read(&self.version_file) {
            Ok(bytes) => {
                let text = String::from_utf8_lossy(&bytes);
                let version = serde_json::from_str::<String>(text.trim())
                    .unwrap_or_else(|_| text.trim().to_string());
                let mm = major_minor(&version);
                w.push(format!(
                    "CRI-O version file {vf} says {version:?}: a CRI-O whose major.minor is not {} (an in-place CRI-O upgrade), or any CRI-O after a reboot (the file is on tmpfs and will be gone), removes every pod at its first start when internal_wipe = true (the default), whatever the hashes say. Upgrade only the kubelet, keep CRI-O at {} until the pods are adopted. kubelet-rehash never touches this file.",
                    mm.as_deref().unwrap_or("the same"),
                    mm.as_deref().unwrap_or("the same version"),
                ));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => w.push(format!(
                "CRI-O version file {vf} is missing: a CRI-O started now with internal_wipe = true (the default) removes every pod at start, whatever the hashes say (rewriting them cannot prevent that). kubelet-rehash never creates or touches this file."
            )),
            Err(e) => w.push(format!(
                "CRI-O version file {vf} cannot be read ({e}): if CRI-O finds it missing or naming another major.minor at start it removes every pod (internal_wipe = true, the default)."
            )),
        }
        let supported = self
            .clean_shutdown_file
            .with_file_name("clean.shutdown.supported");
        if supported.exists() && !self.clean_shutdown_file.exists() {
            w.push(format!(
                "{} is missing while {} exists: CRI-O did not shut down cleanly (or is running); with internal_repair = true it checks, repairs or wipes the storage at its next start. kubelet-rehash never touches this marker.",
                self.clean_shutdown_file.display(),
                supported.display()
            ));
        }
        w
    }

    /// Reads, analyses and edits one config.json (graphroot or runroot copy) for `rw`.
    fn plan_file(&self, path: &Path, id: &str, rw: &Rewrite) -> Result<PlannedFile, StoreError> {
        let location = path.display().to_string();
        let (bytes, meta) = atomic::read_regular_nofollow(path)?;
        let a = analyse(id, &location, &bytes);
        let refuse = |reason: String| StoreError::Refused(format!("{location}: {reason}"));
        match a.record.kind {
            RecordKind::Container => {}
            RecordKind::Undecodable => {
                return Err(refuse(format!(
                    "container {id} is undecodable ({}); it is never written",
                    a.record.problem.as_deref().unwrap_or("unknown reason")
                )))
            }
            ref k => {
                return Err(refuse(format!(
                    "record {id} is a {k:?}, not a kubelet container; nothing to rewrite"
                )))
            }
        }
        let edit = a
            .edit
            .as_ref()
            .expect("a container analysis carries edit spans");
        if edit.inner[0].is_none() {
            return Err(refuse(format!(
                "container {id} has no {HASH_ANNOTATION} inside {CRIO_ANNOTATIONS}; refusing to add one"
            )));
        }
        let (new_hash, new_hwr) = (
            rw.hash.to_string(),
            rw.hash_without_resources.map(|h| h.to_string()),
        );
        let new_values = [Some(new_hash.as_str()), new_hwr.as_deref()];
        let new_bytes = apply_edit(&bytes, edit, &new_values).map_err(|e| StoreError::Verify {
            location: location.clone(),
            reason: e.to_string(),
        })?;
        verify_edit(&a, &bytes, &new_bytes, &new_values, id, &location)?;
        Ok(PlannedFile {
            path: path.to_path_buf(),
            original: bytes,
            new: new_bytes,
            meta,
            record: a.record,
            runroot: false,
        })
    }

    /// Plans the files of one rewrite: the runroot copy (when it exists) first, then the
    /// graphroot copy, both proven; nothing is written.
    fn plan_rewrite(&self, rw: &Rewrite) -> Result<Vec<PlannedFile>, StoreError> {
        let dir = self.find_container_dir(&rw.id)?;
        let cfg = dir.join("userdata").join("config.json");
        check_components(&self.graphroot, &cfg)?;
        let graph = self.plan_file(&cfg, &rw.id, rw)?;
        let Some(run_cfg) = self.runroot_config(&dir)? else {
            return Ok(vec![graph]);
        };
        let mut run = self.plan_file(&run_cfg, &rw.id, rw)?;
        let (g, r) = (&graph.record, &run.record);
        if (&g.pod_uid, &g.container, g.attempt) != (&r.pod_uid, &r.container, r.attempt) {
            return Err(StoreError::Corrupt {
                location: run_cfg.display().to_string(),
                reason: format!(
                    "the runroot copy names pod uid {:?} container {:?} attempt {:?}, the graphroot copy {:?} {:?} {:?}",
                    r.pod_uid, r.container, r.attempt, g.pod_uid, g.container, g.attempt
                ),
            });
        }
        run.runroot = true;
        Ok(vec![run, graph])
    }
}

struct PlannedFile {
    path: PathBuf,
    original: Vec<u8>,
    new: Vec<u8>,
    meta: FileMeta,
    record: StoreRecord,
    /// The runroot copy (else the graphroot one).
    runroot: bool,
}

fn major_minor(version: &str) -> Option<String> {
    let mut it = version.split(['.', '+', '-']);
    let major = it.next()?.trim_start_matches('v');
    let minor = it.next()?;
    if major.chars().all(|c| c.is_ascii_digit()) && minor.chars().all(|c| c.is_ascii_digit()) {
        Some(format!("{major}.{minor}"))
    } else {
        None
    }
}

fn append_problem(r: &mut StoreRecord, p: String) {
    r.problem = Some(match r.problem.take() {
        Some(old) => format!("{old}; {p}"),
        None => p,
    });
}

/// containers/storage ids are hex; anything with a path separator or a dot name is not one.
fn valid_id(id: &str) -> bool {
    !id.is_empty() && id != "." && id != ".." && !id.contains('/') && !id.contains('\0')
}

/// Refuses a symbolic link (or a non-directory) at any component of `path` below `root`
/// except the last one (the file itself is opened with `O_NOFOLLOW`).
fn check_components(root: &Path, path: &Path) -> Result<(), StoreError> {
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

/// Byte spans of the values a rewrite may replace.
#[derive(Debug, Clone)]
struct EditSpans {
    /// Plain top-level annotation values (`"…"`), per [`HASH_KEYS`].
    plain: [Option<Range<usize>>; 2],
    /// Values inside the embedded string, as raw file spans (`\"…\"`), per [`HASH_KEYS`].
    inner: [Option<Range<usize>>; 2],
}

struct Analysis {
    record: StoreRecord,
    /// The whole document, parsed (for containers).
    doc: Option<Value>,
    /// The embedded annotation map (for containers).
    embedded: BTreeMap<String, String>,
    edit: Option<EditSpans>,
}

fn undecodable(id: &str, location: &str, why: String) -> Analysis {
    let mut r = StoreRecord::new(id, RecordKind::Undecodable, location);
    r.problem = Some(why);
    Analysis {
        record: r,
        doc: None,
        embedded: BTreeMap::new(),
        edit: None,
    }
}

fn not_kubernetes(id: &str, location: &str, why: String) -> Analysis {
    let mut r = StoreRecord::new(id, RecordKind::NotKubernetes, location);
    r.problem = Some(why);
    Analysis {
        record: r,
        doc: None,
        embedded: BTreeMap::new(),
        edit: None,
    }
}

/// Decodes a JSON string annotation into a map of strings, as CRI-O's
/// `json.Unmarshal(…, &map[string]string)` must succeed on it.
fn string_map(
    ann: &serde_json::Map<String, Value>,
    key: &str,
) -> Result<BTreeMap<String, String>, String> {
    let Some(s) = ann.get(key).and_then(Value::as_str) else {
        return Err(format!(
            "annotation {key} is missing; CRI-O cannot load this container (it would delete it at start)"
        ));
    };
    serde_json::from_str::<BTreeMap<String, String>>(s).map_err(|e| {
        format!("annotation {key} is not a JSON object of strings ({e}); CRI-O cannot load this container (it would delete it at start)")
    })
}

/// Classifies one `config.json` and, for a kubelet container, finds the spans to edit.
fn analyse(id: &str, location: &str, bytes: &[u8]) -> Analysis {
    let doc: Value = match serde_json::from_slice(bytes) {
        Ok(v) => v,
        Err(e) => return undecodable(id, location, format!("config.json is not valid JSON ({e})")),
    };
    let Some(obj) = doc.as_object() else {
        return undecodable(id, location, "config.json is not a JSON object".into());
    };
    let ann = match obj.get("annotations") {
        None | Some(Value::Null) => {
            return not_kubernetes(id, location, "the spec has no annotations".into())
        }
        Some(Value::Object(m)) => m,
        Some(_) => {
            return undecodable(
                id,
                location,
                "spec annotations are not a JSON object".into(),
            )
        }
    };
    if let Some((k, _)) = ann.iter().find(|(_, v)| !v.is_string()) {
        return undecodable(
            id,
            location,
            format!("spec annotation {k} is not a string; CRI-O cannot decode this spec"),
        );
    }
    let get = |k: &str| ann.get(k).and_then(Value::as_str);
    if let Some(m) = get(CONTAINER_MANAGER) {
        if m != "cri-o" {
            return not_kubernetes(
                id,
                location,
                format!("{CONTAINER_MANAGER} is {m:?}: not a CRI-O container (CRI-O ignores it)"),
            );
        }
    }
    let Some(ctype) = get(CRIO_CONTAINER_TYPE) else {
        return not_kubernetes(
            id,
            location,
            format!("no {CRIO_CONTAINER_TYPE} annotation: not created through CRI-O"),
        );
    };
    let kind = match ctype {
        "container" => RecordKind::Container,
        "sandbox" => RecordKind::Sandbox,
        other => return undecodable(id, location, format!("{CRIO_CONTAINER_TYPE} is {other:?}")),
    };
    let labels = match string_map(ann, CRIO_LABELS) {
        Ok(m) => m,
        Err(e) => return undecodable(id, location, e),
    };
    let metadata: Value = match get(CRIO_METADATA).map(serde_json::from_str::<Value>) {
        Some(Ok(v @ Value::Object(_))) => v,
        Some(Ok(_)) => {
            return undecodable(
                id,
                location,
                format!("annotation {CRIO_METADATA} is not a JSON object"),
            )
        }
        Some(Err(e)) => {
            return undecodable(
                id,
                location,
                format!("annotation {CRIO_METADATA} is not JSON ({e})"),
            )
        }
        None => {
            return undecodable(
                id,
                location,
                format!("annotation {CRIO_METADATA} is missing"),
            )
        }
    };
    let embedded = match string_map(ann, CRIO_ANNOTATIONS) {
        Ok(m) => m,
        Err(e) => return undecodable(id, location, e),
    };

    let mut r = StoreRecord::new(id, kind.clone(), location);
    r.namespace = labels.get(LABEL_POD_NAMESPACE).cloned();
    r.pod = labels.get(LABEL_POD_NAME).cloned();
    r.pod_uid = labels.get(LABEL_POD_UID).cloned();
    r.attempt = match metadata.get("attempt") {
        None | Some(Value::Null) => Some(0),
        Some(v) => v.as_u64().and_then(|a| u32::try_from(a).ok()),
    };
    r.image = get(CRIO_IMAGE_NAME)
        .filter(|s| !s.is_empty())
        .map(str::to_string);
    if let Some(cid) = get(CRIO_CONTAINER_ID) {
        if cid != id {
            r.problem = Some(format!(
                "{CRIO_CONTAINER_ID} is {cid} but the record's directory is {id}"
            ));
        }
    }
    let mut missing: Vec<&str> = [LABEL_POD_UID, LABEL_POD_NAME, LABEL_POD_NAMESPACE]
        .into_iter()
        .filter(|k| !labels.contains_key(*k))
        .collect();
    if kind == RecordKind::Sandbox {
        return Analysis {
            record: if missing.len() == 3 {
                let mut r = r;
                r.kind = RecordKind::NotKubernetes;
                r.problem = Some("a sandbox without kubelet pod labels".into());
                r
            } else if !missing.is_empty() {
                let mut r = r;
                r.kind = RecordKind::Undecodable;
                r.problem = Some(format!("sandbox labels lack {}", missing.join(", ")));
                r
            } else {
                r
            },
            doc: None,
            embedded: BTreeMap::new(),
            edit: None,
        };
    }
    r.container = labels.get(LABEL_CONTAINER_NAME).cloned();
    if r.container.is_none() {
        missing.push(LABEL_CONTAINER_NAME);
    }
    r.hash = embedded.get(HASH_ANNOTATION).cloned();
    r.hash_without_resources = embedded.get(HASH_WITHOUT_RESOURCES_ANNOTATION).cloned();
    if !missing.is_empty() {
        let kubelet = embedded
            .keys()
            .any(|k| k.starts_with("io.kubernetes.container."));
        let mut r = r;
        if kubelet {
            r.kind = RecordKind::Undecodable;
            r.problem = Some(format!(
                "carries kubelet annotations but its {CRIO_LABELS} lack {}; cannot tell which pod it belongs to",
                missing.join(", ")
            ));
        } else {
            r.kind = RecordKind::NotKubernetes;
            r.problem = Some(format!("no kubelet labels ({})", missing.join(", ")));
        }
        return Analysis {
            record: r,
            doc: None,
            embedded: BTreeMap::new(),
            edit: None,
        };
    }

    // Spans. serde_json accepted the document, so the scanner fails only where CRI-O (Go)
    // would read it differently: a repeated or differently-cased `annotations` field, or a
    // non-string duplicate of an annotation (see crate::jsonspan).
    let spans = match find_spans(bytes) {
        Ok(s) => s,
        Err(e) => return undecodable(id, location, e),
    };
    for (i, key) in HASH_KEYS.iter().enumerate() {
        let plain = get(key);
        let inner = embedded.get(*key).map(String::as_str);
        if let (Some(p), Some(v)) = (plain, inner) {
            if p != v {
                append_problem(
                    &mut r,
                    format!("top-level {key} is {p} but {CRIO_ANNOTATIONS} (what CRI-O reports) says {v}"),
                );
            }
        }
        debug_assert_eq!(spans.plain[i].is_some(), plain.is_some());
    }
    Analysis {
        record: r,
        doc: Some(doc),
        embedded,
        edit: Some(spans),
    }
}

fn find_spans(bytes: &[u8]) -> Result<EditSpans, String> {
    let ann = jsonspan::root(bytes)
        .and_then(|root| root.object_field("annotations"))
        .map_err(|e| format!("config.json: {e}"))?
        .ok_or_else(|| "config.json has no annotations".to_string())?;
    let plain_value = |key: &str| -> Result<Option<Range<usize>>, String> {
        let m = ann
            .get_string(key)
            .map_err(|e| format!("annotations: {e}"))?;
        Ok(m.map(|m| m.value.clone()))
    };
    let plain = [plain_value(HASH_KEYS[0])?, plain_value(HASH_KEYS[1])?];
    let emb = plain_value(CRIO_ANNOTATIONS)?.ok_or_else(|| format!("no {CRIO_ANNOTATIONS}"))?;
    let decoded = jsonspan::decode_string(bytes, emb.start)
        .map_err(|e| format!("{CRIO_ANNOTATIONS}: {e}"))?;
    let inner_doc = jsonspan::root(decoded.text.as_bytes())
        .map_err(|e| format!("{CRIO_ANNOTATIONS} content: {}", decoded.raw_error(e)))?;
    let inner_value = |key: &str| -> Result<Option<Range<usize>>, String> {
        let m = inner_doc
            .get_string(key)
            .map_err(|e| format!("inside {CRIO_ANNOTATIONS}: {}", decoded.raw_error(e)))?;
        Ok(m.map(|m| decoded.raw_span(&m.value)))
    };
    let inner = [inner_value(HASH_KEYS[0])?, inner_value(HASH_KEYS[1])?];
    Ok(EditSpans { plain, inner })
}

/// Replaces the spans' values with `new_values` (per [`HASH_KEYS`]; `None` keeps a value).
fn apply_edit(
    bytes: &[u8],
    spans: &EditSpans,
    new_values: &[Option<&str>; 2],
) -> Result<Vec<u8>, jsonspan::SpanError> {
    let mut edits = Vec::new();
    for (i, v) in new_values.iter().enumerate() {
        let Some(v) = v else { continue };
        if let Some(r) = &spans.plain[i] {
            edits.push(jsonspan::Edit::string(r.clone(), v)?);
        }
        if let Some(r) = &spans.inner[i] {
            edits.push(jsonspan::Edit::embedded_string(r.clone(), v)?);
        }
    }
    jsonspan::splice(bytes, edits)
}

/// Proves `new` is `original` with only the hash values changed: both the file and its embedded
/// annotation string parse, the embedded map equals the original's with the values set, and the
/// rest of the document is equal. Also re-classifies the new file and checks its identity.
fn verify_edit(
    a: &Analysis,
    original: &[u8],
    new: &[u8],
    new_values: &[Option<&str>; 2],
    id: &str,
    location: &str,
) -> Result<(), StoreError> {
    let fail = |reason: String| StoreError::Verify {
        location: location.to_string(),
        reason,
    };
    let mut expected_doc = a
        .doc
        .clone()
        .ok_or_else(|| fail("no parsed original".into()))?;
    let mut expected_emb = a.embedded.clone();
    {
        let ann = expected_doc
            .get_mut("annotations")
            .and_then(Value::as_object_mut)
            .ok_or_else(|| fail("original has no annotations".into()))?;
        for (i, key) in HASH_KEYS.iter().enumerate() {
            let Some(v) = new_values[i] else { continue };
            if let Some(slot) = ann.get_mut(*key) {
                *slot = Value::String(v.to_string());
            }
            if let Some(slot) = expected_emb.get_mut(*key) {
                *slot = v.to_string();
            }
        }
        ann.insert(CRIO_ANNOTATIONS.into(), Value::Null);
    }
    let mut new_doc: Value = serde_json::from_slice(new)
        .map_err(|e| fail(format!("the rewritten file does not parse ({e})")))?;
    let new_ann = new_doc
        .get_mut("annotations")
        .and_then(Value::as_object_mut)
        .ok_or_else(|| fail("the rewritten file has no annotations object".into()))?;
    let new_emb_str = new_ann
        .get(CRIO_ANNOTATIONS)
        .and_then(Value::as_str)
        .ok_or_else(|| {
            fail(format!(
                "the rewritten file has no {CRIO_ANNOTATIONS} string"
            ))
        })?;
    let new_emb: BTreeMap<String, String> = serde_json::from_str(new_emb_str).map_err(|e| {
        fail(format!(
            "the rewritten {CRIO_ANNOTATIONS} is not a JSON object of strings ({e})"
        ))
    })?;
    if new_emb != expected_emb {
        return Err(fail(format!(
            "the rewritten {CRIO_ANNOTATIONS} differs from the original in more than the hash values"
        )));
    }
    new_ann.insert(CRIO_ANNOTATIONS.into(), Value::Null);
    if new_doc != expected_doc {
        return Err(fail(
            "the rewritten document differs from the original in more than the hash values".into(),
        ));
    }
    let changed: usize = original.len().abs_diff(new.len());
    let again = analyse(id, location, new);
    let (o, n) = (&a.record, &again.record);
    if n.kind != RecordKind::Container
        || (
            n.namespace.as_ref(),
            n.pod.as_ref(),
            n.pod_uid.as_ref(),
            n.container.as_ref(),
        ) != (
            o.namespace.as_ref(),
            o.pod.as_ref(),
            o.pod_uid.as_ref(),
            o.container.as_ref(),
        )
        || n.hash.as_deref() != new_values[0]
    {
        return Err(fail(format!(
            "re-reading the rewritten file gives {:?} {:?} hash {:?} (length changed by {changed})",
            n.kind, n.container, n.hash
        )));
    }
    Ok(())
}

impl RuntimeStore for CrioStore {
    fn kind(&self) -> RuntimeKind {
        RuntimeKind::Crio
    }

    fn endpoint(&self) -> String {
        crate::runtime::unix_endpoint(&self.socket)
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
        warnings.extend(self.warnings());
        Ok(ScanReport { records, warnings })
    }

    fn ensure_stopped(&self) -> Result<(), StoreError> {
        match std::os::unix::net::UnixStream::connect(&self.socket) {
            Ok(_) => {
                return Err(StoreError::RuntimeRunning {
                    runtime: "crio",
                    evidence: format!("{} accepts connections", self.socket.display()),
                })
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
                ) => {}
            Err(e) => {
                return Err(StoreError::Refused(format!(
                    "cannot tell whether CRI-O runs: connecting to {} failed ({e})",
                    self.socket.display()
                )))
            }
        }
        if let Some(pidfile) = &self.pidfile {
            let text = match fs::read_to_string(pidfile) {
                Ok(t) => t,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
                Err(e) => return Err(StoreError::io(pidfile, e)),
            };
            let pid: u32 = text.trim().parse().map_err(|_| {
                StoreError::Refused(format!(
                    "pid file {} holds {:?}, not a pid; cannot tell whether CRI-O runs",
                    pidfile.display(),
                    text.trim()
                ))
            })?;
            if let Ok(comm) = fs::read_to_string(format!("/proc/{pid}/comm")) {
                if comm.trim() == "crio" {
                    return Err(StoreError::RuntimeRunning {
                        runtime: "crio",
                        evidence: format!(
                            "pid {pid} from {} is a live crio process",
                            pidfile.display()
                        ),
                    });
                }
            }
        }
        Ok(())
    }

    fn apply(&self, rewrites: &[Rewrite], backup: &mut Backup) -> Result<ApplyOutcome, StoreError> {
        self.ensure_stopped()?;
        crate::runtime::validate(rewrites)?;

        // Phase 1: read, edit and prove every file; nothing is written on any error. Files are
        // planned in parallel; the first error in `rewrites` order is reported, as a
        // one-by-one plan would.
        let plans: Vec<Result<Vec<PlannedFile>, StoreError>> = rewrites
            .par_iter()
            .map(|rw| self.plan_rewrite(rw))
            .collect();
        let mut outcome = ApplyOutcome::default();
        let mut writes: Vec<PlannedFile> = Vec::new();
        for (rw, files) in rewrites.iter().zip(plans) {
            let changes: Vec<PlannedFile> =
                files?.into_iter().filter(|f| f.new != f.original).collect();
            if changes.is_empty() {
                outcome.already.push(rw.id.clone());
            } else {
                outcome.changed.push(rw.id.clone());
                writes.extend(changes);
            }
        }

        // Phase 2: back up every file, durably, before the first write.
        let items: Vec<backup::SaveItem> = writes
            .iter()
            .map(|f| backup::SaveItem {
                path: &f.path,
                original: &f.original,
                meta: f.meta,
                new: Some(&f.new),
            })
            .collect();
        backup.save_many(&items)?;
        backup.commit()?;

        // Phase 3: stage every new file without a per-file fsync (a full disk fails here and
        // changes nothing), make them all durable with one syncfs per file system, rename them
        // on a pool of I/O threads, syncfs again (atomic::replace_many_in_waves). Every new
        // byte is durable before the first rename, so a crash leaves each file old or new.
        // runc reads the runroot copy only at create time: every runroot copy is renamed
        // before the first graphroot copy, so the authoritative graphroot copies are the last
        // to change.
        let mut run_wave = Vec::new();
        let mut graph_wave = Vec::new();
        for f in &writes {
            let r = atomic::Replacement {
                path: &f.path,
                bytes: &f.new,
                meta: f.meta,
            };
            if f.runroot {
                run_wave.push(r);
            } else {
                graph_wave.push(r);
            }
        }
        atomic::replace_many_in_waves(&[&run_wave, &graph_wave])?;

        // Phase 4: re-read what was written.
        let reread: Vec<Result<(), StoreError>> = writes
            .par_iter()
            .map(|f| {
                let (now, _) = atomic::read_regular_nofollow(&f.path)?;
                if now != f.new {
                    return Err(StoreError::Verify {
                        location: f.path.display().to_string(),
                        reason: "the file does not hold the bytes just written".into(),
                    });
                }
                Ok(())
            })
            .collect();
        reread.into_iter().collect::<Result<(), _>>()?;
        let written: HashMap<&Path, u64> = writes
            .iter()
            .map(|f| (f.path.as_path(), f.new.len() as u64))
            .collect();
        outcome.files_written = written.len();
        outcome.bytes_written = written.values().sum();
        backup.finish()?;
        Ok(outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = "{\n\t\"ociVersion\": \"1.2.0\",\n\t\"annotations\": {\n\t\t\"io.kubernetes.container.hash\": \"aa\",\n\t\t\"io.kubernetes.container.hashWithoutResources\": \"aa\",\n\t\t\"io.kubernetes.container.name\": \"c\",\n\t\t\"io.kubernetes.cri-o.Annotations\": \"{\\\"io.kubernetes.container.hash\\\":\\\"aa\\\",\\\"io.kubernetes.container.hashWithoutResources\\\":\\\"aa\\\",\\\"x\\\":\\\"\\\\u003c\\\"}\",\n\t\t\"io.kubernetes.cri-o.ContainerType\": \"container\",\n\t\t\"io.kubernetes.cri-o.Labels\": \"{\\\"io.kubernetes.container.name\\\":\\\"c\\\",\\\"io.kubernetes.pod.name\\\":\\\"p\\\",\\\"io.kubernetes.pod.namespace\\\":\\\"ns\\\",\\\"io.kubernetes.pod.uid\\\":\\\"u\\\"}\",\n\t\t\"io.kubernetes.cri-o.Metadata\": \"{\\\"name\\\":\\\"c\\\",\\\"attempt\\\":2}\"\n\t}\n}";

    #[test]
    fn analyse_and_edit_by_key() {
        let a = analyse("id", "mem", DOC.as_bytes());
        assert_eq!(
            a.record.kind,
            RecordKind::Container,
            "{:?}",
            a.record.problem
        );
        assert_eq!(a.record.hash.as_deref(), Some("aa"));
        assert_eq!(a.record.attempt, Some(2));
        let vals = [Some("bbbb"), None];
        let new = apply_edit(DOC.as_bytes(), a.edit.as_ref().unwrap(), &vals).unwrap();
        verify_edit(&a, DOC.as_bytes(), &new, &vals, "id", "mem").unwrap();
        let text = String::from_utf8(new).unwrap();
        let expect = DOC
            .replacen("hash\": \"aa\"", "hash\": \"bbbb\"", 1)
            .replacen("hash\\\":\\\"aa\\\"", "hash\\\":\\\"bbbb\\\"", 1);
        assert_eq!(
            text, expect,
            "only the two hash values changed; hashWithoutResources kept"
        );
    }

    #[test]
    fn verify_catches_a_bad_edit() {
        let a = analyse("id", "mem", DOC.as_bytes());
        let vals = [Some("bb"), None];
        // Break the embedded string the way the real CRI-O test did (unquoted value).
        let bad = DOC.replacen("hash\\\":\\\"aa\\\"", "hash\\\":bb", 1);
        let e = verify_edit(&a, DOC.as_bytes(), bad.as_bytes(), &vals, "id", "mem").unwrap_err();
        assert!(
            e.to_string().contains("not a JSON object of strings"),
            "{e}"
        );
        // Change another value as well.
        let other = apply_edit(DOC.as_bytes(), a.edit.as_ref().unwrap(), &vals).unwrap();
        let other = String::from_utf8(other)
            .unwrap()
            .replacen("1.2.0", "1.2.1", 1);
        let e = verify_edit(&a, DOC.as_bytes(), other.as_bytes(), &vals, "id", "mem").unwrap_err();
        assert!(e.to_string().contains("more than the hash values"), "{e}");
    }

    #[test]
    fn a_duplicate_annotation_reads_and_edits_as_its_last_occurrence() {
        // Go's map decoding (and serde_json) keep the last of duplicate keys: that is the value
        // to classify and to edit; the earlier one stays as it is.
        let dup = DOC.replacen(
            "\t\t\"io.kubernetes.container.name\": \"c\",\n",
            "\t\t\"io.kubernetes.container.hash\": \"cc\",\n\t\t\"io.kubernetes.container.name\": \"c\",\n",
            1,
        );
        let a = analyse("id", "mem", dup.as_bytes());
        assert_eq!(a.record.kind, RecordKind::Container);
        assert!(a.record.problem.as_ref().unwrap().contains("is cc but"));
        let vals = [Some("bbbb"), None];
        let new = apply_edit(dup.as_bytes(), a.edit.as_ref().unwrap(), &vals).unwrap();
        verify_edit(&a, dup.as_bytes(), &new, &vals, "id", "mem").unwrap();
        let expect = dup
            .replacen("hash\": \"cc\"", "hash\": \"bbbb\"", 1)
            .replacen("hash\\\":\\\"aa\\\"", "hash\\\":\\\"bbbb\\\"", 1);
        assert_eq!(String::from_utf8(new).unwrap(), expect);
        assert!(
            expect.contains("hash\": \"aa\""),
            "the first duplicate is kept"
        );
    }

    #[test]
    fn a_repeated_annotations_field_is_undecodable() {
        // Go merges both objects into the spec's one annotations map; serde_json keeps the last.
        let dup = DOC.replacen(
            "\t\"ociVersion\"",
            "\t\"Annotations\": {},\n\t\"ociVersion\"",
            1,
        );
        let a = analyse("id", "mem", dup.as_bytes());
        assert_eq!(a.record.kind, RecordKind::Undecodable);
        let problem = a.record.problem.unwrap();
        assert!(
            problem.contains("\"annotations\" appears 2 times"),
            "{problem}"
        );
    }

    #[test]
    fn node_root_and_major_minor() {
        assert_eq!(
            node_root_of(Path::new("/var/lib/containers/storage")),
            Some(PathBuf::from("/"))
        );
        assert_eq!(
            node_root_of(Path::new("/x/n/var/lib/containers/storage")),
            Some(PathBuf::from("/x/n"))
        );
        assert_eq!(node_root_of(Path::new("/mnt/storage")), None);
        assert_eq!(major_minor("1.30.14+unknown").as_deref(), Some("1.30"));
        assert_eq!(major_minor("garbage"), None);
    }
}
