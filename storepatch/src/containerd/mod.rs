//! containerd back-end: the CRI plugin's container extension inside
//! `<root>/io.containerd.metadata.v1.bolt/meta.db` (containerd 1.1 – 2.x; docs/research/stores.md
//! §1, §2, §5). The bolt file is read and written by our own small bolt engine ([`bolt`], the
//! `boltfile` crate; its docs say why not bbolt-rs), which keeps whichever freelist layout it
//! finds (synced, containerd ≤ 1.6; `NoFreelistSync`, 1.7 and 2.x).
//!
//! * [`ContainerdStore::scan`]: every namespace's containers; CRI containers (extension
//!   `io.cri-containerd.container.metadata`) with identity, hashes, image and the pid from the
//!   CRI status checkpoint; sandboxes; others as not-Kubernetes; broken ones as undecodable.
//! * [`ContainerdStore::apply`]: all rewrites in ONE copy-on-write bolt transaction, holding
//!   meta.db's flock (so a containerd started meanwhile waits, as it does for itself). Each
//!   value is changed only in the annotation values and re-decoded and compared with the
//!   expected document before anything is written; the planned tree passes the bbolt
//!   consistency check (by its new pages, on the scan's check of the old tree:
//!   `check_planned`) and is re-read before the commit; the backup is durable before the
//!   first write: by default the original bytes of every page the transaction overwrites and
//!   the file's length ([`crate::backup::PageUndo`]), or a byte copy of the whole file
//!   ([`Backup::set_bolt_full_copy`], `--backup full`); the commit is bbolt's data-pages →
//!   fdatasync → meta → fdatasync, so a crash leaves the old or the new database. Rollback is
//!   [`crate::backup::rollback`], giving back the original file byte for byte either way.

/// The bolt engine, the [`boltfile`] crate (re-exported under its old path).
pub use boltfile as bolt;
pub mod cri;
mod proof;
pub mod runtime;

use crate::atomic::FileMeta;
use crate::backup::{self as bolt_undo, chunk_digest, Backup};
use crate::error::StoreError;
use crate::{
    ApplyOutcome, RecordKind, Rewrite, RuntimeKind, RuntimeStore, ScanReport, StoreRecord,
    HASH_ANNOTATION, HASH_WITHOUT_RESOURCES_ANNOTATION,
};
use bolt::{check::CheckReport, write, Db, Root, View};
use std::collections::{BTreeMap, HashMap};
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// containerd's default CRI/gRPC socket.
pub const DEFAULT_SOCKET: &str = "/run/containerd/containerd.sock";
/// meta.db, relative to the containerd root.
pub const META_DB: &str = "io.containerd.metadata.v1.bolt/meta.db";
/// The CRI plugin's per-container directories (status checkpoints), relative to the root.
pub const CRI_CONTAINERS: &str = "io.containerd.grpc.v1.cri/containers";

const KIND_LABEL: &str = "io.cri-containerd.kind";
const POD_NAME: &str = "io.kubernetes.pod.name";
const POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
const POD_UID: &str = "io.kubernetes.pod.uid";
const CONTAINER_NAME: &str = "io.kubernetes.container.name";

/// Options of [`ContainerdStore::with_options`].
#[derive(Debug, Clone, Default)]
pub struct ContainerdOptions {
    /// containerd's gRPC socket, probed by the running check (default [`DEFAULT_SOCKET`]).
    pub socket: Option<PathBuf>,
}

/// containerd's metadata store under a containerd root (e.g. `/var/lib/containerd`).
#[derive(Debug, Clone)]
pub struct ContainerdStore {
    root: PathBuf,
    db_path: PathBuf,
    socket: PathBuf,
    /// What this run already decoded (shared by clones): one decode per record and run.
    decoded: std::sync::Arc<std::sync::Mutex<Decoded>>,
}

/// The hash annotations of one container extension value, as decoded (or as the apply wrote
/// them), and the sha256 of that value.
#[derive(Debug, Clone)]
struct Hashes {
    ns: String,
    /// The sha256 of the value's bytes. `None` only in a scan's hashes whose read the scan
    /// kept ([`ScanRead`]): the apply that takes that read over has the very bytes decoded,
    /// and one that does not decodes again; only a scan whose read is not kept pays for it.
    sha256: Option<[u8; 32]>,
    hash: Option<String>,
    hash_without_resources: Option<String>,
}

/// One decode per record and run: the scan's decoded hashes, reused by the apply for a value
/// whose bytes are still the ones decoded (same sha256); and the values the apply left (the
/// ones it wrote, verified on disk after the commit, and the ones already current), which the
/// read-back compares by sha256 instead of decoding them again (the values themselves are not
/// kept: on a 2,000-container node they are megabytes). A value that differs is decoded as
/// before.
#[derive(Debug, Default)]
struct Decoded {
    scanned: HashMap<String, Hashes>,
    applied: HashMap<String, Hashes>,
    /// What the last scan read of the file, for the apply that follows ([`ScanRead`]).
    read: Option<ScanRead>,
}

/// What a scan read of meta.db under the shared lock: its consistency check and its records.
/// The apply that follows reuses them instead of checking and walking the whole file again
/// (about a tenth of a patch on a 2,000-container node), but only for the very file the scan
/// read: same inode, length, mtime and ctime, both meta pages byte for byte, and a ctime
/// older than the scan by more than the file system's timestamp tick, so that no write after
/// the scan can have left the ctime as it was (the "racy" case git's index also guards).
/// Every bbolt commit rewrites a meta page; any other write moves the ctime.
#[derive(Debug)]
struct ScanRead {
    identity: FileIdentity,
    meta_pages: Vec<u8>,
    check: bolt::check::CheckReport,
    found: Vec<Found>,
}

/// How far a file's ctime must lie before the scan for a later write to be sure to change it,
/// on a file system that keeps whole seconds (ext4 with 128-byte inodes): a second plus the
/// kernel's coarse clock lag, with room.
const RACY_MARGIN_SECONDS: std::time::Duration = std::time::Duration::from_secs(2);

/// The same where the file's timestamps have a fraction of a second, so the file system keeps
/// them finer than a second: 10 ms at the coarsest (exFAT), behind a coarse clock that lags by
/// a jiffy (at most 10 ms).
const RACY_MARGIN_FINE: std::time::Duration = std::time::Duration::from_millis(100);

/// The fields of a file's status that any write or replacement changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileIdentity {
    dev: u64,
    ino: u64,
    len: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl FileIdentity {
    fn of(m: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        FileIdentity {
            dev: m.dev(),
            ino: m.ino(),
            len: m.len(),
            mtime: (m.mtime(), m.mtime_nsec()),
            ctime: (m.ctime(), m.ctime_nsec()),
        }
    }

    /// Whether the file was last changed long enough before `at` that any write since would
    /// have moved its ctime ([`RACY_MARGIN_FINE`], or [`RACY_MARGIN_SECONDS`] when neither
    /// timestamp has a fraction: a file system that may keep whole seconds only).
    fn settled_before(&self, at: std::time::SystemTime) -> bool {
        let Ok(at) = at.duration_since(std::time::UNIX_EPOCH) else {
            return false;
        };
        let margin = if self.mtime.1 != 0 || self.ctime.1 != 0 {
            RACY_MARGIN_FINE
        } else {
            RACY_MARGIN_SECONDS
        };
        let Some(limit) = at.checked_sub(margin) else {
            return false;
        };
        let newest = self.mtime.max(self.ctime);
        newest.0 >= 0
            && (newest.0 as u64, newest.1 as u32) < (limit.as_secs(), limit.subsec_nanos())
    }
}

fn sha256(b: &[u8]) -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(b).into()
}

impl ApplyStats {
    /// The steps of the apply for the report ([`crate::ApplyOutcome::phases`]): `edit`,
    /// `page_plan` and `commit` are what a bbolt transaction does (bench-node.sh compares
    /// their sum with Go's `db.Update`); `read` (lock, and the scan's check and records taken
    /// over or redone), `check` (the planned tree checked before any write), `backup` and
    /// `read_back` are what this tool adds for safety.
    pub fn phases(&self) -> Vec<(&'static str, f64)> {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        vec![
            ("read", ms(self.t_read)),
            ("edit", ms(self.t_json)),
            ("page_plan", ms(self.t_plan.saturating_sub(self.t_json))),
            ("check", ms(self.t_verify)),
            ("backup", ms(self.t_backup)),
            ("commit", ms(self.t_commit)),
            ("read_back", ms(self.t_after)),
        ]
    }
}

/// Timings and figures of one [`ContainerdStore::apply_detailed`].
#[derive(Debug, Clone, Default)]
pub struct ApplyStats {
    /// CRI containers found in meta.db.
    pub containers_seen: usize,
    /// Extension values rewritten.
    pub values_changed: usize,
    /// Whether the file keeps its freelist on disk (containerd 1.6) or not (NoFreelistSync).
    pub freelist_synced: bool,
    /// Transaction id of the meta page before the write.
    pub txid_before: u64,
    /// Transaction id after it (one more).
    pub txid_after: u64,
    /// Page high-water mark before.
    pub hwm_before: u64,
    /// Page high-water mark after (grows only when no free page fits).
    pub hwm_after: u64,
    /// Free pages the transaction reused.
    pub pages_reused: u64,
    /// Pages added at the end of the file.
    pub pages_appended: u64,
    /// Pages written in all.
    pub pages_written: u64,
    /// Bytes written to meta.db.
    pub bytes_written: u64,
    /// File length before.
    pub file_len_before: u64,
    /// File length after.
    pub file_len_after: u64,
    /// open + consistency check + collect records (or the proof that the scan's still hold).
    pub t_read: Duration,
    /// JSON rewrites + their verification (part of `t_plan`).
    pub t_json: Duration,
    /// JSON rewrites + their verification + copy-on-write plan.
    pub t_plan: Duration,
    /// consistency check + re-read of the planned tree.
    pub t_verify: Duration,
    /// backup copy + sync.
    pub t_backup: Duration,
    /// the bolt commit (writes + 2 fdatasync).
    pub t_commit: Duration,
    /// re-read from disk + sha256 + manifest.
    pub t_after: Duration,
    /// Whether the apply reused the scan's consistency check and records, the file being the
    /// very one the scan read (see `ScanRead`), instead of reading it again.
    pub read_reused: bool,
    /// Values the apply decoded itself: the scan of this store had not decoded the same bytes
    /// (0 when the scan ran first and nothing changed meanwhile: one decode per record and run).
    pub values_decoded: usize,
}

/// One container bucket as found in meta.db.
#[derive(Debug)]
struct Found {
    ns: String,
    id: String,
    /// The extension value, copied out of the map: the records are decoded after the walk,
    /// and reading them through the map would make every page they lie in resident again
    /// (they are spread over the whole file).
    ext: Option<(&'static str, Vec<u8>)>,
    ext_problem: Option<String>,
    labels: BTreeMap<String, String>,
    image: Option<String>,
}

impl Found {
    fn ext(&self) -> Option<(&'static str, &[u8])> {
        self.ext.as_ref().map(|(name, v)| (*name, v.as_slice()))
    }
}

fn corrupt(path: &Path, e: impl std::fmt::Display) -> StoreError {
    StoreError::Corrupt {
        location: path.display().to_string(),
        reason: e.to_string(),
    }
}

fn lossy(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// `flock(fd, op | LOCK_NB)`: Ok(true) locked, Ok(false) held by someone else.
fn try_flock(file: &File, op: libc::c_int) -> std::io::Result<bool> {
    loop {
        // SAFETY: plain syscall on a valid fd.
        let rc = unsafe { libc::flock(file.as_raw_fd(), op | libc::LOCK_NB) };
        if rc == 0 {
            return Ok(true);
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EWOULDBLOCK) => return Ok(false),
            Some(libc::EINTR) => continue,
            _ => return Err(e),
        }
    }
}

/// An open meta.db whose flock is released explicitly on drop. Closing our fd is not enough:
/// a flock belongs to the open file description, and a process forked by another thread
/// (between fork and exec) holds a copy of the fd, so the lock would outlive our close and a
/// later check would see "containerd is running". `LOCK_UN` releases it for every copy.
struct Flocked(File);

impl std::ops::Deref for Flocked {
    type Target = File;
    fn deref(&self) -> &File {
        &self.0
    }
}

impl Drop for Flocked {
    fn drop(&mut self) {
        // SAFETY: plain syscall on a valid fd; unlocking an unlocked file is a no-op.
        unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_UN) };
    }
}

/// A key and its value, copied out of their page.
type KeyValue = (Vec<u8>, Vec<u8>);

/// Every container bucket of every namespace. The pages are read with `pread`
/// ([`View::for_each_copied`]), not through the mapping: what is kept is copied out anyway,
/// and the containers' pages lie all over the file, so under the mapping's residency budget
/// the walk would map and drop the same granules again and again.
fn collect(view: &View<'_>, root: Root<'_>) -> Result<Vec<Found>, bolt::BoltError> {
    // (key, value) of the bucket elements of `root`
    let buckets_of = |r: Root<'_>| -> Result<Vec<KeyValue>, bolt::BoltError> {
        let mut out = Vec::new();
        view.for_each_copied(r, &mut |e| {
            if e.is_bucket() {
                out.push((e.key.to_vec(), e.value.to_vec()));
            }
            Ok(())
        })?;
        Ok(out)
    };
    let v1 = view
        .bucket_copied(root, b"v1", "bucket v1")?
        .ok_or_else(|| bolt::BoltError::new("bucket v1", "missing: this is not a containerd metadata store (schema v1), or containerd never initialised it"))?;
    let (v1, _) = bolt::bucket_root(&v1, "bucket v1")?;
    let mut out = Vec::new();
    for (nskey, nsval) in buckets_of(v1)? {
        let ns = lossy(&nskey);
        let (nsr, _) = bolt::bucket_root(&nsval, &format!("bucket v1/{ns}"))?;
        let at = format!("bucket v1/{ns}/containers");
        let Some(containers) = view.bucket_copied(nsr, b"containers", &at)? else {
            continue;
        };
        let (containers, _) = bolt::bucket_root(&containers, &at)?;
        for (ckey, cval) in buckets_of(containers)? {
            let id = lossy(&ckey);
            let at = format!("bucket v1/{ns}/containers/{id}");
            let (cr, _) = bolt::bucket_root(&cval, &at)?;
            let mut f = Found {
                ns: ns.clone(),
                id,
                ext: None,
                ext_problem: None,
                labels: BTreeMap::new(),
                image: None,
            };
            let mut subs = Vec::new();
            view.for_each_copied(cr, &mut |e| {
                match (e.key, e.is_bucket()) {
                    (b"image", false) => f.image = Some(lossy(e.value)),
                    (b"labels", true) | (b"extensions", true) => {
                        subs.push((e.key.to_vec(), e.value.to_vec()))
                    }
                    _ => {}
                }
                Ok(())
            })?;
            for (skey, sval) in subs {
                let (sr, _) = bolt::bucket_root(&sval, &format!("{at}/{}", lossy(&skey)))?;
                if skey == b"labels" {
                    view.for_each_copied(sr, &mut |e| {
                        if !e.is_bucket() {
                            f.labels.insert(lossy(e.key), lossy(e.value));
                        }
                        Ok(())
                    })?;
                } else {
                    for name in [cri::CONTAINER_EXT, cri::SANDBOX_EXT] {
                        if f.ext.is_some() {
                            break;
                        }
                        match view.get_copied(sr, name.as_bytes())? {
                            Some(e) if e.is_bucket() => {
                                f.ext_problem =
                                    Some(format!("extension {name} is a bucket, not a value"))
                            }
                            Some(e) => f.ext = Some((name, e.value)),
                            None => {}
                        }
                    }
                }
            }
            out.push(f);
        }
    }
    Ok(out)
}

impl ContainerdStore {
    /// A store under the containerd `root`; the running check probes [`DEFAULT_SOCKET`].
    pub fn open(root: &Path) -> Result<Self, StoreError> {
        Self::with_options(root, ContainerdOptions::default())
    }

    /// A store under `root` with the given options; refuses a meta.db that is a symlink, not a regular file, or outside the root.
    pub fn with_options(root: &Path, options: ContainerdOptions) -> Result<Self, StoreError> {
        if !root.is_dir() {
            return Err(StoreError::RootMissing(root.to_path_buf()));
        }
        let db_path = root.join(META_DB);
        match std::fs::symlink_metadata(&db_path) {
            Ok(m) if m.is_file() => {}
            Ok(m) if m.file_type().is_symlink() => {
                return Err(corrupt(
                    &db_path,
                    "is a symbolic link; refusing to follow it",
                ))
            }
            Ok(_) => return Err(corrupt(&db_path, "is not a regular file")),
            Err(e) => return Err(StoreError::io(&db_path, e)),
        }
        // Never follow a symlinked directory out of the root (the root itself may be a link).
        let db_dir = db_path.parent().expect("META_DB has a directory");
        let real_root = std::fs::canonicalize(root).map_err(|e| StoreError::io(root, e))?;
        let real_dir = std::fs::canonicalize(db_dir).map_err(|e| StoreError::io(db_dir, e))?;
        if !real_dir.starts_with(&real_root) {
            return Err(corrupt(
                db_dir,
                format!(
                    "resolves to {}, outside the containerd root {}; refusing to follow it",
                    real_dir.display(),
                    real_root.display()
                ),
            ));
        }
        Ok(ContainerdStore {
            root: root.to_path_buf(),
            db_path,
            socket: options
                .socket
                .unwrap_or_else(|| PathBuf::from(DEFAULT_SOCKET)),
            decoded: Default::default(),
        })
    }

    /// `<root>/io.containerd.metadata.v1.bolt/meta.db`.
    pub fn meta_db_path(&self) -> &Path {
        &self.db_path
    }

    fn open_db_file(&self, write: bool) -> Result<File, StoreError> {
        OpenOptions::new()
            .read(true)
            .write(write)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&self.db_path)
            .map_err(|e| StoreError::io(&self.db_path, e))
    }

    fn running(&self, evidence: String) -> StoreError {
        StoreError::RuntimeRunning {
            runtime: "containerd",
            evidence,
        }
    }

    fn locked_evidence(&self) -> String {
        format!(
            "{} is flock-ed by another process (containerd holds that lock for as long as it runs)",
            self.db_path.display()
        )
    }

    fn check_socket(&self) -> Result<(), StoreError> {
        if std::os::unix::net::UnixStream::connect(&self.socket).is_ok() {
            return Err(self.running(format!(
                "socket {} accepts connections",
                self.socket.display()
            )));
        }
        Ok(())
    }

    /// Runs bbolt's consistency check on the current meta.db (read-only, shared lock when
    /// free, else a private copy). For tests and the live-daemon checks.
    pub fn check_file(&self) -> Result<CheckReport, StoreError> {
        let (db, _, _lock) = self.read_db()?;
        Ok(bolt::check::check(&db.view(), &db.meta))
    }

    /// meta.db opened for reading: mapped under a shared flock when it is free, otherwise a
    /// private snapshot (second value: a warning).
    fn read_db(&self) -> Result<(Db, Option<crate::Hazard>, Flocked), StoreError> {
        let file = Flocked(self.open_db_file(false)?);
        let locked =
            try_flock(&file, libc::LOCK_SH).map_err(|e| StoreError::io(&self.db_path, e))?;
        if locked {
            let db = Db::map_with_budget(&file, READ_RESIDENCY_BUDGET)
                .map_err(|e| corrupt(&self.db_path, e))?;
            // The caller keeps `file` (and with it the shared lock) while it reads, so a
            // containerd started meanwhile waits instead of reusing pages under us.
            Ok((db, None, file))
        } else {
            let bytes =
                std::fs::read(&self.db_path).map_err(|e| StoreError::io(&self.db_path, e))?;
            let db = Db::from_bytes(bytes).map_err(|e| corrupt(&self.db_path, e))?;
            Ok((
                db,
                Some(
                    crate::Hazard::warn(
                        "containerd-meta-db-locked",
                        format!(
                            "{}; scanned a snapshot that may already be stale",
                            self.locked_evidence()
                        ),
                    )
                    .about(&self.db_path),
                ),
                file,
            ))
        }
    }

    fn pid_of(&self, id: &str) -> (Option<u32>, Option<String>) {
        let p = self.root.join(CRI_CONTAINERS).join(id).join("status");
        let bytes = match crate::atomic::read_noatime(&p) {
            Ok(b) => b,
            Err(_) => return (None, None),
        };
        // Only `Pid` is kept; the rest is checked as JSON and skipped (parsing the whole
        // status into a tree was a third of the scan's per-container work).
        #[derive(serde::Deserialize)]
        struct CriStatus {
            #[serde(rename = "Pid", default)]
            pid: Option<serde_json::Value>,
        }
        match serde_json::from_slice::<CriStatus>(&bytes) {
            Ok(v) => match v.pid.and_then(|p| p.as_u64()) {
                Some(0) | None => (None, None),
                Some(pid) => (u32::try_from(pid).ok(), None),
            },
            Err(e) => (
                None,
                Some(format!(
                    "CRI status file {} does not decode: {e}",
                    p.display()
                )),
            ),
        }
    }

    /// The record of `f`, with the hash annotations of a decoded container value.
    fn record_decoded(&self, f: &Found) -> (StoreRecord, Option<Hashes>) {
        let location = format!("{}:v1/{}/containers/{}", self.db_path.display(), f.ns, f.id);
        let mut r = StoreRecord::new(f.id.clone(), RecordKind::NotKubernetes, location);
        r.image = f.image.clone();
        let kind_label = f.labels.get(KIND_LABEL).map(String::as_str);
        let Some((ext, raw)) = f.ext() else {
            if let Some(p) = &f.ext_problem {
                r.kind = RecordKind::Undecodable;
                r.problem = Some(p.clone());
            } else if matches!(kind_label, Some("container") | Some("sandbox")) {
                r.kind = RecordKind::Undecodable;
                r.problem = Some(format!(
                    "labelled {KIND_LABEL}={} but carries no CRI extension; the CRI plugin skips it",
                    kind_label.unwrap_or_default()
                ));
            }
            return (r, None);
        };
        let mut hashes = None;
        let sandbox = ext == cri::SANDBOX_EXT;
        let url = if sandbox {
            cri::SANDBOX_TYPE_URL
        } else {
            cri::CONTAINER_TYPE_URL
        };
        match cri::decode(raw, url) {
            Err(e) => {
                r.kind = RecordKind::Undecodable;
                r.problem = Some(format!(
                    "extension {ext}: {e}; the CRI plugin would drop this record on restart"
                ));
            }
            Ok(d) => {
                let label = |k: &str| d.labels.get(k).or_else(|| f.labels.get(k)).cloned();
                r.pod = label(POD_NAME);
                r.namespace = label(POD_NAMESPACE);
                r.pod_uid = label(POD_UID);
                r.attempt = d.attempt;
                if sandbox {
                    r.kind = RecordKind::Sandbox;
                    r.pod = r.pod.or(d.meta_name.clone());
                    r.namespace = r.namespace.or(d.meta_namespace.clone());
                    r.pod_uid = r.pod_uid.or(d.meta_uid.clone());
                } else {
                    r.kind = RecordKind::Container;
                    r.container = d.meta_name.clone().or_else(|| label(CONTAINER_NAME));
                    r.hash = d.annotations.get(HASH_ANNOTATION).cloned();
                    r.hash_without_resources = d
                        .annotations
                        .get(HASH_WITHOUT_RESOURCES_ANNOTATION)
                        .cloned();
                    if r.image.is_none() {
                        r.image = d.config_image.clone();
                    }
                    let (pid, problem) = self.pid_of(&f.id);
                    r.pid = pid;
                    r.problem = problem;
                    if d.id.as_deref().is_some_and(|id| id != f.id) {
                        r.problem = Some(format!(
                            "metadata ID {:?} differs from the bucket name",
                            d.id.unwrap_or_default()
                        ));
                    }
                    if r.hash.is_none() {
                        r.problem
                            .get_or_insert_with(|| format!("no {HASH_ANNOTATION} annotation"));
                    }
                    hashes = Some(Hashes {
                        ns: f.ns.clone(),
                        sha256: None,
                        hash: r.hash.clone(),
                        hash_without_resources: r.hash_without_resources.clone(),
                    });
                }
            }
        }
        (r, hashes)
    }

    /// The decodes this store's runs keep ([`Decoded`]); a panic elsewhere while it was held
    /// leaves nothing half-done in it that a later run could misread (every user replaces
    /// whole maps), so a poisoned lock is taken as it is.
    fn decode_cache(&self) -> std::sync::MutexGuard<'_, Decoded> {
        self.decoded.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// [`RuntimeStore::apply`] with timings and bolt figures.
    pub fn apply_detailed(
        &self,
        rewrites: &[Rewrite],
        backup: &mut Backup,
    ) -> Result<(ApplyOutcome, ApplyStats), StoreError> {
        let mut st = ApplyStats::default();
        let t0 = Instant::now();
        crate::contract::validate(rewrites)?;
        let file = Flocked(self.open_db_file(true)?);
        if !try_flock(&file, libc::LOCK_EX).map_err(|e| StoreError::io(&self.db_path, e))? {
            return Err(self.running(self.locked_evidence()));
        }
        self.check_socket()?;
        let status = file
            .metadata()
            .map_err(|e| StoreError::io(&self.db_path, e))?;
        let fmeta = FileMeta::of(&status);
        let db = Db::map(&file).map_err(|e| corrupt(&self.db_path, e))?;
        st.txid_before = db.meta.txid;
        st.hwm_before = db.meta.hwm;
        st.freelist_synced = db.meta.freelist_synced();
        st.file_len_before = db.data.len() as u64;
        let view = db.view();
        let identity = FileIdentity::of(&status);
        let scan_read = self.decode_cache().read.take().filter(|r| {
            r.identity == identity && r.meta_pages.as_slice() == meta_pages(&db.data, &db.meta)
        });
        st.read_reused = scan_read.is_some();
        let (report, found) = match scan_read {
            Some(r) => (r.check, r.found),
            None => {
                let report = bolt::check::check_indexed(&view, &db.meta);
                let found = if report.is_ok() {
                    collect(&view, db.root()).map_err(|e| corrupt(&self.db_path, e))?
                } else {
                    Vec::new()
                };
                (report, found)
            }
        };
        if !report.is_ok() {
            return Err(corrupt(
                &self.db_path,
                format!(
                    "fails bbolt's consistency check, refusing to write: {}",
                    report.summary()
                ),
            ));
        }
        st.containers_seen = found.len();
        let mut by_id: HashMap<&str, Vec<&Found>> = HashMap::new();
        for f in &found {
            by_id.entry(f.id.as_str()).or_default().push(f);
        }
        st.t_read = t0.elapsed();

        let t1 = Instant::now();
        let mut outcome = ApplyOutcome::default();
        // Resolve every request first (cheap, serial), then decode, rewrite and verify the
        // values in parallel; errors name the first failing container in request order.
        let mut targets: Vec<(&Rewrite, &Found, String, &[u8])> =
            Vec::with_capacity(rewrites.len());
        for rw in rewrites {
            let cands = by_id.get(rw.id.as_str()).map(Vec::as_slice).unwrap_or(&[]);
            let f = match cands {
                [] => return Err(StoreError::UnknownRecord(rw.id.clone())),
                [f] => *f,
                many => {
                    return Err(StoreError::Refused(format!(
                        "container id {} exists in {} namespaces ({}); refusing to guess",
                        rw.id,
                        many.len(),
                        many.iter()
                            .map(|f| f.ns.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )))
                }
            };
            let loc = format!("{}:v1/{}/containers/{}", self.db_path.display(), f.ns, f.id);
            let raw = match f.ext() {
                Some((cri::CONTAINER_EXT, raw)) => raw,
                Some(_) => {
                    return Err(StoreError::Refused(format!(
                        "{loc} is a pod sandbox; it carries no container hash"
                    )))
                }
                None => {
                    return Err(StoreError::Refused(format!(
                        "{loc} carries no CRI container extension (not a Kubernetes container)"
                    )))
                }
            };
            targets.push((rw, f, loc, raw));
        }
        use rayon::prelude::*;
        let scanned = std::mem::take(&mut self.decode_cache().scanned);
        // A value the scan decoded is taken as decoded when it is the very bytes the scan
        // read: by construction when the apply took over the scan's read (its records are
        // those the scan decoded), else by their sha256 (the file may have changed between).
        let same_read = st.read_reused;
        let results: Vec<Result<Rewritten, StoreError>> = targets
            .par_iter()
            .map(|(rw, f, loc, raw)| {
                let known = scanned
                    .get(&f.id)
                    .filter(|h| h.ns == f.ns && (same_read || h.sha256 == Some(sha256(raw))));
                new_value(rw, loc, raw, known)
            })
            .collect();
        drop(scanned);
        st.values_decoded = results
            .iter()
            .filter(|r| r.as_ref().is_ok_and(|r| r.decoded))
            .count();
        st.t_json = t1.elapsed();
        let mut edits = write::Edits::default();
        // (each written value's bucket path and sha256: the values themselves live in the
        // edits, then in the planned pages, and are not held a third time)
        let mut expected: Vec<(Vec<Vec<u8>>, [u8; 32])> = Vec::new();
        // (each value's hashes with the sha256 of the bytes the file will hold)
        let mut applied: Vec<(String, Hashes)> = Vec::new();
        for ((rw, f, _, _), res) in targets.iter().zip(results) {
            let Rewritten {
                value, mut hashes, ..
            } = res?;
            hashes.ns = f.ns.clone();
            let Some(new_raw) = value else {
                outcome.already.push(rw.id.clone());
                applied.push((rw.id.clone(), hashes));
                continue;
            };
            let path: Vec<Vec<u8>> = vec![
                b"v1".to_vec(),
                f.ns.as_bytes().to_vec(),
                b"containers".to_vec(),
                f.id.as_bytes().to_vec(),
                b"extensions".to_vec(),
            ];
            let pref: Vec<&[u8]> = path.iter().map(Vec::as_slice).collect();
            let digest = hashes.sha256.expect("new_value hashed the value it made");
            edits.put(&pref, cri::CONTAINER_EXT.as_bytes(), new_raw);
            expected.push((path, digest));
            applied.push((rw.id.clone(), hashes));
            outcome.changed.push(rw.id.clone());
        }
        // The records' copied values are not needed past this point: not held through the
        // commit (on a 2,000-container node they are megabytes).
        drop(targets);
        drop(by_id);
        drop(found);
        if edits.is_empty() {
            st.t_plan = t1.elapsed();
            self.remember_applied(applied);
            return Ok((outcome, st));
        }
        let plan = write::plan(&db, &report, &edits).map_err(|e| corrupt(&self.db_path, e))?;
        // (the plan's pages hold the new values now; `expected` keeps the one other copy)
        drop(edits);
        st.t_plan = t1.elapsed();
        let by_page = !backup.bolt_full_copy();
        // The page backup records a digest of the file the commit leaves; the chunks the
        // commit does not write are hashed now, on a second thread, while the plan is checked
        // and the backup and the commit wait for their fsyncs.
        let prehash = by_page
            .then(|| {
                let ps = plan.new_meta.page_size as u64;
                let writes = plan
                    .pages
                    .iter()
                    .map(|(id, buf)| (id * ps, buf.len() as u64))
                    .chain(std::iter::once((plan.new_meta.page * ps, ps)));
                PreHash::start(&file, db.data.len() as u64, writes)
            })
            .transpose()
            .map_err(|e| StoreError::io(&self.db_path, e))?;

        // Verify the new tree before a single byte is written.
        let t2 = Instant::now();
        let meta_page = plan.new_meta.encode();
        let planned = plan.view(&db.data).with_residency(db.residency());
        // (the tree's check and the values' check read the same planned pages: at once)
        let (rep2, values) = rayon::join(
            || bolt::check::check_planned(&planned, &plan.new_meta, &report),
            || verify_values(&planned, Root::Page(plan.new_meta.root), &expected),
        );
        if !rep2.is_ok() {
            return Err(StoreError::Verify {
                location: self.db_path.display().to_string(),
                reason: format!(
                    "the planned transaction fails bbolt's consistency check: {}",
                    rep2.summary()
                ),
            });
        }
        values.map_err(|reason| StoreError::Verify {
            location: self.db_path.display().to_string(),
            reason,
        })?;
        st.t_verify = t2.elapsed();

        let t3 = Instant::now();
        if by_page {
            backup.save_pages(
                &self.db_path,
                &crate::backup::FileBytes {
                    file: &file,
                    len: db.data.len() as u64,
                },
                fmeta,
                page_undo_plan(&db, &plan, &meta_page),
            )?;
        } else {
            backup.save(&self.db_path, &db.data, fmeta, None)?;
            // The new file's sha256 is known only after the commit: record where it writes,
            // so a rollback after a crash mid-commit can tell its writes from anyone else's.
            let ps = plan.new_meta.page_size as u64;
            let ranges = plan
                .pages
                .iter()
                .map(|(id, buf)| [id * ps, buf.len() as u64])
                .chain(std::iter::once([plan.new_meta.page * ps, ps]))
                .collect();
            backup.set_write_intent(
                &self.db_path,
                crate::backup::WriteIntent {
                    ranges,
                    size_after: (db.data.len() as u64).max(plan.new_meta.hwm * ps),
                },
            );
        }
        backup.commit()?;
        // the backup read its pages straight from the map, not through a view
        db.release();
        st.t_backup = t3.elapsed();

        let t4 = Instant::now();
        let mut storage = crate::fault::bolt_storage(&file);
        let cs = write::commit_with(&mut storage, &db.data, &plan).map_err(|e| {
            StoreError::io(
                &self.db_path,
                std::io::Error::new(e.source.kind(), format!("bolt commit: {e}")),
            )
        })?;
        st.t_commit = t4.elapsed();
        // The planned pages are on disk now: not held through the read-back (on a
        // 2,000-container node they are ~25 MB, the largest thing this process holds).
        let new_meta = plan.new_meta;
        st.txid_after = new_meta.txid;
        st.hwm_after = new_meta.hwm;
        st.pages_reused = plan.reused_pages;
        st.pages_appended = plan.appended_pages;
        drop(plan);
        crate::heap::return_freed();

        let t5 = Instant::now();
        drop(db);
        let after =
            Db::map(&file).map_err(|e| corrupt(&self.db_path, format!("after commit: {e}")))?;
        if after.meta.txid != new_meta.txid || after.meta.root != new_meta.root {
            return Err(StoreError::Verify {
                location: self.db_path.display().to_string(),
                reason: format!(
                    "after commit the file's newest meta is txid {}, expected {}",
                    after.meta.txid, new_meta.txid
                ),
            });
        }
        // The value read-back and the file's digest at once (the chunks the commit wrote; the
        // others were hashed meanwhile): the hash reads the file with pread, not through the
        // map, so it adds nothing to our residency (and on a 2-core node it costs the
        // read-back's time, not its own).
        let len_after = after.data.len() as u64;
        let (values, whole) = std::thread::scope(|scope| {
            let hashing = scope.spawn(|| match prehash {
                Some(pre) => pre.finish(&file, len_after),
                None => file_sha256(&file, len_after),
            });
            let values = verify_values(&after.view(), after.root(), &expected);
            (values, hashing.join())
        });
        values.map_err(|reason| StoreError::Verify {
            location: self.db_path.display().to_string(),
            reason: format!("after commit: {reason}"),
        })?;
        let whole = match whole {
            Ok(r) => r.map_err(|e| StoreError::io(&self.db_path, e))?,
            Err(panic) => std::panic::resume_unwind(panic),
        };
        if by_page {
            backup.set_pages_after(&self.db_path, &after.data, whole);
        } else {
            backup.set_new_sha256(&self.db_path, whole);
        }
        after.release();
        backup.finish()?;
        // every written value was just read back from the file (its sha256)
        self.remember_applied(applied);
        st.t_after = t5.elapsed();

        st.values_changed = outcome.changed.len();
        st.pages_written = cs.pages_written;
        st.bytes_written = cs.bytes_written;
        st.file_len_after = cs.file_len_after;
        outcome.files_written = 1;
        outcome.bytes_written = cs.bytes_written;
        outcome.phases = st.phases();
        Ok((outcome, st))
    }
}

impl ContainerdStore {
    /// Keeps what the apply left for [`RuntimeStore::read_back`]: each value's hashes and the
    /// sha256 of the bytes it left in the file.
    fn remember_applied(&self, applied: Vec<(String, Hashes)>) {
        let mut cache = self.decode_cache();
        cache.applied = applied.into_iter().collect();
    }
}

/// What the page backup of `plan`'s transaction on `db` records: every page it writes inside
/// the current file, both meta pages, and the meta page it writes (`meta_page`).
fn page_undo_plan<'a>(
    db: &Db,
    plan: &write::Plan,
    meta_page: &'a [u8],
) -> bolt_undo::PageUndoPlan<'a> {
    let ps = plan.new_meta.page_size as u64;
    bolt_undo::PageUndoPlan {
        page_size: ps,
        ranges: bolt_undo::undo_ranges(
            db.data.len() as u64,
            ps,
            plan.pages
                .iter()
                .map(|(id, buf)| (id * ps, buf.len() as u64)),
        ),
        new_meta_offset: plan.new_meta.page * ps,
        new_meta: meta_page,
    }
}

/// What [`new_value`] makes of one value.
struct Rewritten {
    /// The rewritten value (`None`: it already holds the target hashes).
    value: Option<Vec<u8>>,
    /// The hash annotations the value holds after the rewrite (the decoded ones with the
    /// spliced values in place: the proof shows nothing else changed), and the sha256 of the
    /// bytes the file holds after it (the new value, or the unchanged one).
    hashes: Hashes,
    /// Whether the value was decoded here (the scan's decode was not at hand).
    decoded: bool,
}

/// The rewritten extension value for `rw`, decoded (or, when `known` was decoded from these
/// same bytes by this run's scan, taken from there), rewritten surgically and verified.
fn new_value(
    rw: &Rewrite,
    loc: &str,
    raw: &[u8],
    known: Option<&Hashes>,
) -> Result<Rewritten, StoreError> {
    let bad = |e: String| StoreError::Corrupt {
        location: loc.to_string(),
        reason: format!(
            "extension {}: {e}; refusing to rewrite it",
            cri::CONTAINER_EXT
        ),
    };
    let layout = cri::any_layout(raw).map_err(bad)?;
    if layout.type_url != cri::CONTAINER_TYPE_URL {
        return Err(bad(format!(
            "type_url is {:?}, the CRI plugin only loads {:?}",
            layout.type_url,
            cri::CONTAINER_TYPE_URL
        )));
    }
    // The scan decoded these very bytes (the caller made sure) with the whole decoder; else decode
    // them now. The field scan of decode_json runs in proof::rewrite_proven when there is
    // something to change.
    let annotations: BTreeMap<String, String> = match known {
        Some(k) => [
            (HASH_ANNOTATION, &k.hash),
            (HASH_WITHOUT_RESOURCES_ANNOTATION, &k.hash_without_resources),
        ]
        .into_iter()
        .filter_map(|(name, v)| Some((name.to_string(), v.clone()?)))
        .collect(),
        None => {
            cri::decode_json_unscanned(&raw[layout.value.clone()])
                .map_err(bad)?
                .annotations
        }
    };
    let d = cri::Decoded {
        annotations,
        ..Default::default()
    };
    let new_hash = rw.hash.to_string();
    let new_hwr = rw.hash_without_resources.map(|h| h.to_string());
    let mut changes: Vec<(&str, &str)> = Vec::new();
    match d.annotations.get(HASH_ANNOTATION) {
        None => {
            return Err(StoreError::Corrupt {
                location: loc.to_string(),
                reason: format!("no {HASH_ANNOTATION} annotation to rewrite"),
            })
        }
        Some(cur) if *cur == new_hash => {}
        Some(_) => changes.push((HASH_ANNOTATION, new_hash.as_str())),
    }
    if let (Some(new), Some(cur)) = (
        &new_hwr,
        d.annotations.get(HASH_WITHOUT_RESOURCES_ANNOTATION),
    ) {
        if cur != new {
            changes.push((HASH_WITHOUT_RESOURCES_ANNOTATION, new.as_str()));
        }
    }
    let mut hashes = Hashes {
        ns: String::new(),
        sha256: None,
        hash: d.annotations.get(HASH_ANNOTATION).cloned(),
        hash_without_resources: d
            .annotations
            .get(HASH_WITHOUT_RESOURCES_ANNOTATION)
            .cloned(),
    };
    // (each value's sha256 is taken here, on the pool's threads: 2,000 values of 10 KB are
    // 20 MB of hashing, which the serial loop that gathers the edits did alone)
    if changes.is_empty() {
        hashes.sha256 = Some(sha256(raw));
        return Ok(Rewritten {
            value: None,
            hashes,
            decoded: known.is_none(),
        });
    }
    let value =
        proof::rewrite_proven(raw, &layout, &d.annotations, &changes).map_err(|reason| {
            StoreError::Verify {
                location: loc.to_string(),
                reason,
            }
        })?;
    for (k, v) in changes {
        match k {
            HASH_ANNOTATION => hashes.hash = Some(v.to_string()),
            _ => hashes.hash_without_resources = Some(v.to_string()),
        }
    }
    hashes.sha256 = Some(sha256(&value));
    Ok(Rewritten {
        value: Some(value),
        hashes,
        decoded: known.is_none(),
    })
}

/// What [`lookup`] finds.
enum Lookup<'a> {
    /// The bucket at this depth of the path is missing (or not a bucket).
    NoBucket(usize),
    /// The last bucket has no plain value under the key.
    NoValue,
    /// The value.
    Value(&'a [u8]),
}

/// The [`chunk_digest`] of meta.db after a commit, its unwritten chunks hashed while the
/// commit is made: [`PreHash::start`] hashes, on a thread of its own, every whole chunk of the
/// file as it is that none of the commit's writes touches (those bytes are the same after
/// it: the commit writes nowhere else, under our exclusive lock); [`PreHash::finish`] hashes
/// the rest after the commit and combines them. Dropped unfinished, the thread stops at its
/// next chunk.
struct PreHash {
    thread: Option<std::thread::JoinHandle<std::io::Result<Vec<Option<chunk_digest::ChunkSha>>>>>,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl PreHash {
    fn start(
        file: &File,
        len: u64,
        writes: impl IntoIterator<Item = (u64, u64)>,
    ) -> std::io::Result<PreHash> {
        let touched = chunk_digest::touched(len, writes);
        let file = file.try_clone()?;
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::Builder::new()
            .name("meta.db hash".into())
            .spawn(move || {
                let mut buf = Vec::new();
                let mut out = Vec::with_capacity(touched.len());
                for (i, t) in touched.iter().enumerate() {
                    let i = i as u64;
                    // a partial last chunk grows if the commit extends the file
                    let whole = (i + 1) * chunk_digest::CHUNK <= len;
                    if stopped.load(std::sync::atomic::Ordering::Relaxed) {
                        break;
                    }
                    out.push(match (*t, whole) {
                        (false, true) => {
                            Some(chunk_digest::chunk_of_file(&file, i, len, &mut buf)?)
                        }
                        _ => None,
                    });
                }
                Ok(out)
            })?;
        Ok(PreHash {
            thread: Some(thread),
            stop,
        })
    }

    /// The digest of the file now `len` bytes long.
    fn finish(mut self, file: &File, len: u64) -> std::io::Result<String> {
        let thread = self.thread.take().expect("finished once");
        let early = match thread.join() {
            Ok(r) => r?,
            Err(panic) => std::panic::resume_unwind(panic),
        };
        // The chunks left (those the commit wrote: 31 MB on the 2,000-container node) are
        // hashed on the pool's threads, beside the read-back's value checks: hashed on this
        // thread alone they outlasted those checks by half their time.
        use rayon::prelude::*;
        let shas = (0..chunk_digest::chunks(len))
            .into_par_iter()
            .map_init(Vec::new, |buf, i| match early.get(i as usize) {
                Some(Some(sha)) if (i + 1) * chunk_digest::CHUNK <= len => Ok(*sha),
                _ => chunk_digest::chunk_of_file(file, i, len, buf),
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok(chunk_digest::combine(len, &shas))
    }
}

impl Drop for PreHash {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The hex sha256 of the first `len` bytes of `file`, read with pread a MiB at a time.
fn file_sha256(file: &File, len: u64) -> std::io::Result<String> {
    use sha2::Digest;
    use std::os::unix::fs::FileExt;
    let mut h = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut at = 0u64;
    while at < len {
        let want = buf.len().min((len - at) as usize);
        let n = file.read_at(&mut buf[..want], at)?;
        if n == 0 {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("meta.db ends at {at} while hashing its {len} bytes"),
            ));
        }
        h.update(&buf[..n]);
        at += n as u64;
    }
    Ok(hex::encode(h.finalize()))
}

/// How much of meta.db a read-only walk (scan, read-back, check) may keep resident: more than
/// the apply's [`bolt::RESIDENCY_BUDGET`], since a read holds nothing of the size of the
/// apply's planned pages. Every granule dropped is mapped again at the next read of it (the
/// tree's pages are spread over the whole file): on the 2,000-container node (67 MB meta.db,
/// 32 granules) the scan dropped 4,283 granules with 32 MiB and 1,492 with 48 MiB, and `plan`
/// took 0.25–0.27 s and 0.22 s at 48 and 59 MB of peak RSS; the `patch`'s peak (its apply)
/// stayed where it was.
const READ_RESIDENCY_BUDGET: usize = 48 << 20;

/// Both meta pages of a bolt file (what every commit rewrites one of).
fn meta_pages<'a>(data: &'a [u8], meta: &bolt::Meta) -> &'a [u8] {
    &data[..(2 * meta.page_size as usize).min(data.len())]
}

/// The value `key` in the bucket at `path` below `root`, looked up as containerd does.
fn lookup<'a>(
    view: &View<'a>,
    root: Root<'a>,
    path: &[&[u8]],
    key: &str,
) -> Result<Lookup<'a>, bolt::BoltError> {
    let mut r = root;
    for (depth, b) in path.iter().enumerate() {
        match view.bucket(r, b, "read back")? {
            Some(next) => r = next,
            None => return Ok(Lookup::NoBucket(depth)),
        }
    }
    Ok(match view.get(r, key.as_bytes())? {
        Some(e) if !e.is_bucket() => Lookup::Value(e.value),
        _ => Lookup::NoValue,
    })
}

/// Whether every value at its bucket path under `root` has its expected sha256. The pages are
/// read with `pread` where the view has its file (the values lie all over it), on rayon's
/// threads, [`VERIFY_SLICE`] values a task, in path order so that a task's values share the
/// pages down to them; the error named is the first in path order.
fn verify_values(
    view: &View<'_>,
    root: Root<'_>,
    expected: &[(Vec<Vec<u8>>, [u8; 32])],
) -> Result<(), String> {
    use rayon::prelude::*;
    let mut in_order: Vec<&(Vec<Vec<u8>>, [u8; 32])> = expected.iter().collect();
    in_order.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    in_order
        .par_chunks(VERIFY_SLICE)
        .map(|slice| verify_slice(view, root, slice))
        .collect::<Vec<_>>()
        .into_iter()
        .collect()
}

/// Values one task of [`verify_values`] checks.
const VERIFY_SLICE: usize = 128;

/// [`verify_values`] of one slice (sorted by path), in order. A value's path is
/// `<parent buckets>/<record>/<tail buckets>` (`v1/<ns>/containers/<id>/extensions`): the
/// parent buckets are looked up once per slice, the records of one parent in one descent of
/// its tree ([`View::get_each_copied`]: each of its pages read once, not once per value).
fn verify_slice(
    view: &View<'_>,
    root: Root<'_>,
    slice: &[&(Vec<Vec<u8>>, [u8; 32])],
) -> Result<(), String> {
    fn root_of<'r>(root: Root<'r>, bucket: &'r Option<Vec<u8>>) -> Result<Root<'r>, String> {
        match bucket {
            None => Ok(root),
            Some(v) => Ok(bolt::bucket_root(v, "verify").map_err(|e| e.to_string())?.0),
        }
    }
    let shown = |path: &[Vec<u8>]| path.iter().map(|p| lossy(p)).collect::<Vec<_>>().join("/");
    let mut rest = slice;
    while let Some((first, _)) = rest.first() {
        let Some(split) = first.len().checked_sub(2) else {
            return Err(format!(
                "{} is not a path to a record's bucket",
                shown(first)
            ));
        };
        let parent = &first[..split];
        let n = rest
            .iter()
            .take_while(|(p, _)| p.len() == first.len() && &p[..split] == parent)
            .count();
        let (group, after) = rest.split_at(n);
        rest = after;
        // the value of the parent bucket (its header, maybe an inline page)
        let mut bucket: Option<Vec<u8>> = None;
        for b in parent {
            bucket = Some(
                view.bucket_copied(root_of(root, &bucket)?, b, "verify")
                    .map_err(|e| e.to_string())?
                    .ok_or_else(|| format!("bucket {} vanished", lossy(b)))?,
            );
        }
        let records: Vec<&[u8]> = group.iter().map(|(p, _)| p[split].as_slice()).collect();
        // (a mismatch found inside the descent, which stops it)
        let mut wrong: Option<String> = None;
        let walked = view.get_each_copied(root_of(root, &bucket)?, &records, &mut |i, elem| {
            let (path, digest) = group[i];
            let vanished = |what: &[u8]| {
                bolt::BoltError::new("verify", format!("bucket {} vanished", lossy(what)))
            };
            let elem = elem
                .filter(|e| e.is_bucket())
                .ok_or_else(|| vanished(&path[split]))?;
            let mut r = bolt::bucket_root(elem.value, "verify")?.0;
            let mut tail_value: Vec<u8>;
            for b in &path[split + 1..] {
                tail_value = view
                    .bucket_copied(r, b, "verify")?
                    .ok_or_else(|| vanished(b))?;
                r = bolt::bucket_root(&tail_value, "verify")?.0;
            }
            let got = view.get_copied(r, cri::CONTAINER_EXT.as_bytes())?;
            if got.map(|e| sha256(&e.value)) != Some(*digest) {
                wrong = Some(format!(
                    "value at {}/{} does not read back as written",
                    shown(path),
                    cri::CONTAINER_EXT
                ));
                return Err(bolt::BoltError::new("verify", "stopped"));
            }
            Ok(())
        });
        if let Some(w) = wrong {
            return Err(w);
        }
        walked.map_err(|e| e.to_string())?;
    }
    Ok(())
}

impl RuntimeStore for ContainerdStore {
    fn kind(&self) -> RuntimeKind {
        RuntimeKind::Containerd
    }

    /// A patch writes meta.db in place, but a rollback puts the original back by temp +
    /// rename: a rollback killed before its rename leaves `.meta.db.rehash-tmp-<pid>` beside
    /// it (only those of dead pids are removed).
    fn sweep_stale_temps(&self) -> Result<usize, StoreError> {
        let dir = self.db_path.parent().expect("META_DB has a directory");
        crate::atomic::sweep_stale_temps(dir, 1)
    }

    fn root(&self) -> &Path {
        &self.root
    }

    fn scan(&self) -> Result<ScanReport, StoreError> {
        let started = std::time::SystemTime::now();
        let (db, warning, lock) = self.read_db()?;
        // (taken now, under the lock: what the file is while we read it)
        let identity = lock.metadata().ok().map(|m| FileIdentity::of(&m));
        let mut report = ScanReport::default();
        let warning_free = warning.is_none();
        report.warnings.extend(warning);
        let view = db.view();
        // The check, and the records' collection and decoding, at once: the walks read the
        // same file with pread, and the decoding is the scan's largest part. The collection
        // runs on a tree not yet checked, so its page reads are bounded (a tree of this many
        // pages needs each once, and its lookups a few per container): a shared or cyclic
        // page ends it with an error instead of a walk without end, and the check's finding
        // is what is reported, as when it ran first.
        let budget = std::sync::atomic::AtomicU64::new(4 * db.meta.hwm + 100_000);
        let bounded = View {
            read_budget: Some(&budget),
            ..view
        };
        let (check, collected) = rayon::join(
            || bolt::check::check_indexed(&view, &db.meta),
            || {
                let found = collect(&bounded, db.root())?;
                // Decoding ~2.7 KB of JSON and reading a status file per container: parallel.
                use rayon::prelude::*;
                let decoded: Vec<(StoreRecord, Option<Hashes>)> =
                    found.par_iter().map(|f| self.record_decoded(f)).collect();
                Ok::<_, bolt::BoltError>((found, decoded))
            },
        );
        if !check.structural.is_empty() {
            return Err(corrupt(
                &self.db_path,
                format!("damaged bolt file: {}", check.summary()),
            ));
        }
        if !check.freelist.is_empty() {
            report.warnings.push(
                crate::Hazard::block(
                    "containerd-freelist-inconsistent",
                    format!(
                        "{}: the freelist is inconsistent ({}); containerd can read the file but this tool will not write it",
                        self.db_path.display(),
                        check.summary()
                    ),
                )
                .about(&self.db_path),
            );
        }
        let (found, mut decoded) = collected.map_err(|e| corrupt(&self.db_path, e))?;
        // A snapshot read of a locked file, or a file changed just before the scan, is not
        // worth keeping: the apply reads it again, and tells the values decoded here by their
        // sha256 (taken now, for this case only).
        let keep = identity
            .as_ref()
            .is_some_and(|id| warning_free && id.settled_before(started));
        if !keep {
            use rayon::prelude::*;
            decoded
                .par_iter_mut()
                .zip(found.par_iter())
                .for_each(|((_, h), f)| {
                    if let (Some(h), Some((_, raw))) = (h, f.ext()) {
                        h.sha256 = Some(sha256(raw));
                    }
                });
        }
        let mut cache = self.decode_cache();
        cache.scanned.clear();
        cache.applied.clear();
        cache.read = identity.filter(|_| keep).map(|identity| ScanRead {
            identity,
            meta_pages: meta_pages(&db.data, &db.meta).to_vec(),
            check,
            found,
        });
        for (r, h) in decoded {
            if let Some(h) = h {
                cache.scanned.insert(r.id.clone(), h);
            }
            report.records.push(r);
        }
        // The decoding ran on every thread, and glibc keeps what each thread freed in that
        // thread's arena, where the apply's allocations (on this thread) do not reuse it.
        crate::heap::return_freed();
        Ok(report)
    }

    fn ensure_stopped(&self) -> Result<(), StoreError> {
        let file = Flocked(self.open_db_file(false)?);
        if !try_flock(&file, libc::LOCK_EX).map_err(|e| StoreError::io(&self.db_path, e))? {
            return Err(self.running(self.locked_evidence()));
        }
        drop(file);
        self.check_socket()
    }

    fn endpoint(&self) -> String {
        crate::contract::unix_endpoint(&self.socket)
    }

    fn apply(&self, rewrites: &[Rewrite], backup: &mut Backup) -> Result<ApplyOutcome, StoreError> {
        self.apply_detailed(rewrites, backup).map(|(o, _)| o)
    }

    fn read_back(&self, ids: &[&str]) -> Result<Vec<StoreRecord>, StoreError> {
        self.read_back_hashes(ids)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The read-back finds every value by its path and compares its sha256: the true digests
    /// pass (read with pread from the mapped file, and from the bytes in memory), and a wrong
    /// digest, a record that is not there and a path without a record level are each named.
    #[test]
    fn the_value_read_back_names_what_does_not_read_back() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(
            "../fixtures/nodes/containerd-1.7/var/lib/containerd/io.containerd.metadata.v1.bolt/meta.db",
        );
        let file = std::fs::File::open(&path).unwrap();
        let mapped = Db::map(&file).unwrap();
        let in_memory = Db::from_bytes(std::fs::read(&path).unwrap()).unwrap();
        let found = collect(&in_memory.view(), in_memory.root()).unwrap();
        let mut expected: Vec<(Vec<Vec<u8>>, [u8; 32])> = found
            .iter()
            .filter_map(|f| {
                let (cri::CONTAINER_EXT, raw) = f.ext()? else {
                    return None;
                };
                let path = ["v1", &f.ns, "containers", &f.id, "extensions"]
                    .map(|p| p.as_bytes().to_vec())
                    .to_vec();
                Some((path, sha256(raw)))
            })
            .collect();
        assert!(
            expected.len() >= 5,
            "the node's containers: {}",
            expected.len()
        );
        // not in path order, as the apply lists them
        expected.reverse();
        for db in [&mapped, &in_memory] {
            let (view, root) = (db.view(), db.root());
            assert_eq!(
                verify_values(&view, root, &expected),
                Ok(()),
                "the true digests"
            );

            let mut wrong = expected.clone();
            wrong[2].1[0] ^= 1;
            let err = verify_values(&view, root, &wrong).unwrap_err();
            let id = String::from_utf8_lossy(&wrong[2].0[3]).into_owned();
            assert!(
                err.contains(&id) && err.contains("does not read back as written"),
                "a wrong digest names its value: {err}"
            );

            let mut absent = expected.clone();
            absent[1].0[3] = b"no-such-container".to_vec();
            let err = verify_values(&view, root, &absent).unwrap_err();
            assert!(
                err.contains("bucket no-such-container vanished"),
                "an absent record is named: {err}"
            );

            let short = vec![(vec![b"v1".to_vec()], [0; 32])];
            let err = verify_values(&view, root, &short).unwrap_err();
            assert!(err.contains("not a path to a record"), "{err}");
        }
    }

    /// A file is taken as unchanged since a scan only when a write after the scan must have
    /// moved its ctime: changed more than the file system's tick before the scan (100 ms where
    /// timestamps carry a fraction, 2 s where they may be whole seconds), never when ahead of it.
    #[test]
    fn a_file_changed_within_a_timestamp_tick_of_the_scan_is_never_taken_as_settled() {
        let scan = std::time::UNIX_EPOCH + std::time::Duration::new(1_000_000, 500_000_000);
        let at = |ctime: (i64, i64)| FileIdentity {
            dev: 1,
            ino: 2,
            len: 3,
            mtime: ctime,
            ctime,
        };
        assert!(
            at((1_000_000, 300_000_000)).settled_before(scan),
            "200 ms before, fine timestamps"
        );
        assert!(
            !at((1_000_000, 450_000_000)).settled_before(scan),
            "50 ms before, fine timestamps"
        );
        assert!(
            !at((999_999, 0)).settled_before(scan),
            "1.5 s before, whole seconds"
        );
        assert!(
            at((999_998, 0)).settled_before(scan),
            "2.5 s before, whole seconds"
        );
        assert!(
            !at((1_000_001, 0)).settled_before(scan),
            "ahead of the scan"
        );
        let mut newer_mtime = at((999_990, 1));
        newer_mtime.mtime = (1_000_000, 499_000_000);
        assert!(
            !newer_mtime.settled_before(scan),
            "the newer of mtime and ctime counts"
        );
    }

    /// A copy of our fd (what a child forked by another thread holds until it execs) must not
    /// keep meta.db locked once we are done with it: a later running check would otherwise
    /// refuse, blaming a containerd that is not there.
    #[test]
    fn dropped_lock_is_released_even_when_the_fd_was_copied() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("meta.db");
        std::fs::write(&path, b"x").unwrap();
        let open = || File::open(&path).unwrap();

        let ours = Flocked(open());
        assert!(try_flock(&ours, libc::LOCK_EX).unwrap(), "fresh file locks");
        // SAFETY: dup of a valid fd; the copy shares the open file description, as fork does.
        let copy = unsafe { libc::dup(ours.as_raw_fd()) };
        assert!(copy >= 0);
        assert!(
            !try_flock(&open(), libc::LOCK_EX).unwrap(),
            "while we hold it, another open file description cannot lock"
        );
        drop(ours);
        let relocked = try_flock(&open(), libc::LOCK_EX).unwrap();
        // SAFETY: closing the fd we dup-ed above.
        unsafe { libc::close(copy) };
        assert!(
            relocked,
            "after drop the lock is gone although a copy of the fd is still open"
        );
    }
}
