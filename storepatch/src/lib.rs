//! Runtime metadata stores: find the kubelet's container hash where each container runtime
//! persists it, and rewrite it while the runtime is stopped.
//!
//! Every back-end (Docker `config.v2.json`, containerd `meta.db`, CRI-O `config.json`) has the
//! same shape, [`RuntimeStore`], so the workflow and the CLI never care which runtime they talk
//! to. The contract every back-end keeps:
//!
//! * [`RuntimeStore::scan`] never writes and never fails as a whole because one record is bad:
//!   a record it cannot decode is reported with [`RecordKind::Undecodable`] and left alone.
//! * [`RuntimeStore::apply`] refuses while the runtime runs, takes a [`backup::Backup`] of every
//!   file before the first write, writes atomically (temp + fsync + rename + directory fsync, or
//!   one bolt transaction), re-reads what it wrote, and is idempotent.
//! * [`backup::rollback`] restores every original byte for byte, and refuses, naming the file,
//!   when a file matches neither side of the manifest.
//!
//! How the crate is laid out, so that adding a runtime touches its own module and the registry:
//!
//! * the contract — this root's record types and [`contract`] ([`Runtime`], [`RuntimeKind`],
//!   [`StoreOptions`]) — is all a back-end imports, with [`node`] (the host root, the procfs)
//!   and the write safety of the `storesafe` crate ([`atomic`], [`backup`], [`session`], …,
//!   re-exported here);
//! * the back-ends ([`docker`], [`containerd`], [`crio`]) never import each other or the
//!   registry;
//! * the registry — [`runtime`] (a kind's descriptor) and [`layout`] (detecting a runtime,
//!   finding a store among a node's layouts) — is the one place that names every back-end.
//!
//! What differs between runtimes beyond the format (names, default roots and sockets, how a
//! root is recognised, the live client, the service unit, what keeps the containers through a
//! stop) is each back-end's [`Runtime`] descriptor: callers hold a [`RuntimeKind`] and a
//! `Box<dyn RuntimeStore>` and never match on the runtime themselves.
//!
//! ```
//! use storepatch::{backup, Hash, Rewrite, RuntimeKind, StoreOptions};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // A copy of the bundled real Docker 20.10 node (dockerd stopped, live-restore on).
//! let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/nodes/docker-20.10");
//! let tmp = tempfile::tempdir()?;
//! assert!(std::process::Command::new("cp").arg("-a").arg(fixture).arg(tmp.path()).status()?.success());
//! let root = tmp.path().join("docker-20.10/var/lib/docker");
//!
//! let (kind, root) = storepatch::layout::locate(None, Some(&root))?;
//! assert_eq!(kind, RuntimeKind::Docker, "a data-root with containers/ is Docker's");
//! let options = StoreOptions {
//!     socket: Some(tmp.path().join("no-dockerd.sock")),
//!     pidfile: Some(tmp.path().join("no-dockerd.pid")),
//!     live_restore: Some(true),
//!     ..StoreOptions::default()
//! };
//! let store = kind.runtime().open(&root, &options)?;
//!
//! // Rewrite the first container's hash, with a backup first.
//! let scan = store.scan()?;
//! let c = scan.records.iter().find(|r| r.hash.is_some()).expect("a kubelet container");
//! let rewrite = Rewrite { id: c.id.clone(), hash: Hash(0x1234abcd), hash_without_resources: None };
//! let dir = tmp.path().join("backup");
//! let mut bk = backup::Backup::create(&dir, kind.name(), &root)?;
//! let done = store.apply(&[rewrite], &mut bk)?;
//! assert_eq!(done.changed, vec![c.id.clone()]);
//! let again = store.scan()?;
//! assert!(again.records.iter().any(|r| r.id == c.id && r.hash.as_deref() == Some("1234abcd")));
//!
//! // Byte-exact rollback.
//! backup::rollback(&dir, false)?;
//! assert!(store.scan()?.records.iter().any(|r| r.id == c.id && r.hash == c.hash));
//! # Ok(())
//! # }
//! ```

#![deny(missing_docs)]

pub mod containerd;
pub mod contract;
pub mod crio;
pub mod docker;
pub mod hazard;
pub mod heap;
pub mod jsonspan;
pub mod layout;
pub mod live;
pub mod node;
pub mod runtime;
pub mod splice_proof;

// The write safety every back-end shares lives in its own crate beneath this one; its modules
// keep their paths here (`storepatch::backup`, …) for the callers above.
pub use storesafe::{atomic, backup, bytes, error, fault, inflight, lock, session, trust};

pub use contract::{
    ContainersOutlive, LiveContainer, LiveRestoreAnswer, Runtime, RuntimeKind, StoreOptions,
};
pub use error::StoreError;
pub use hashcompat::Hash;
pub use hazard::{Hazard, Severity};

use serde::Serialize;
use std::path::Path;

/// The kubelet's CRI annotation holding `HashContainer`.
pub const HASH_ANNOTATION: &str = "io.kubernetes.container.hash";
/// The kubelet's CRI annotation holding `HashContainerWithoutResources` (1.27–1.30, gate on).
pub const HASH_WITHOUT_RESOURCES_ANNOTATION: &str = "io.kubernetes.container.hashWithoutResources";

/// What a store record is, as far as the kubelet is concerned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RecordKind {
    /// A container the kubelet created: it carries a hash.
    Container,
    /// A pod sandbox (pause container): it has no container hash.
    Sandbox,
    /// A container not created by the kubelet; never touched.
    NotKubernetes,
    /// A record the runtime itself (or we) could not decode; reported, never touched.
    Undecodable,
}

/// One record of a runtime store, as a back-end's scan found it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StoreRecord {
    /// The runtime's container id.
    pub id: String,
    /// What the record is.
    pub kind: RecordKind,
    /// Pod namespace, from the kubelet's labels.
    pub namespace: Option<String>,
    /// Pod name.
    pub pod: Option<String>,
    /// Pod uid: what ties the record to a pod spec.
    pub pod_uid: Option<String>,
    /// Container name.
    pub container: Option<String>,
    /// The kubelet's restart attempt.
    pub attempt: Option<u32>,
    /// Stored `io.kubernetes.container.hash`, as the kubelet wrote it (lowercase hex).
    pub hash: Option<String>,
    /// Stored `io.kubernetes.container.hashWithoutResources`, when present.
    pub hash_without_resources: Option<String>,
    /// The image reference the runtime recorded.
    pub image: Option<String>,
    /// The process id the runtime last recorded for the container, when it records one.
    pub pid: Option<u32>,
    /// Where the record lives (a file path, or a bolt bucket path), for messages.
    pub location: String,
    /// Why the record is [`RecordKind::Undecodable`], or another problem worth reporting.
    pub problem: Option<String>,
    /// Another copy of the record that the runtime's side reads (CRI-O's runroot
    /// `config.json`, the runc bundle), when its hashes differ from `hash` /
    /// `hash_without_resources`. Which of the two a container was created from is then
    /// unknown: the plan accepts the copy only when it already holds the target's hashes (a
    /// patch interrupted between its runroot and graphroot writes); otherwise the container
    /// is unproven and never rewritten.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub other_copy: Option<OtherCopy>,
}

/// A second copy of a record whose stored hashes disagree with the first
/// ([`StoreRecord::other_copy`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OtherCopy {
    /// Where the copy lives (a file path), for messages.
    pub location: String,
    /// Its `io.kubernetes.container.hash`.
    pub hash: Option<String>,
    /// Its `io.kubernetes.container.hashWithoutResources`.
    pub hash_without_resources: Option<String>,
}

impl StoreRecord {
    /// A record with only its id, kind and location filled in.
    pub fn new(id: impl Into<String>, kind: RecordKind, location: impl Into<String>) -> Self {
        StoreRecord {
            id: id.into(),
            kind,
            namespace: None,
            pod: None,
            pod_uid: None,
            container: None,
            attempt: None,
            hash: None,
            hash_without_resources: None,
            image: None,
            pid: None,
            location: location.into(),
            problem: None,
            other_copy: None,
        }
    }

    /// Fills in what a read-back found: the hash annotations, or (the record is then
    /// undecodable) why they could not be read.
    pub fn set_hashes_read(&mut self, read: Result<(Option<String>, Option<String>), String>) {
        match read {
            Ok((hash, hwr)) => {
                self.hash = hash;
                self.hash_without_resources = hwr;
            }
            Err(e) => {
                self.kind = RecordKind::Undecodable;
                self.problem = Some(e);
            }
        }
    }
}

/// Everything a scan found, plus the store's hazards (e.g. `live-restore` off).
#[derive(Debug, Clone, Default, Serialize)]
pub struct ScanReport {
    /// Every record, in the store's order.
    pub records: Vec<StoreRecord>,
    /// Hazards of this store an operator must see.
    pub warnings: Vec<Hazard>,
}

/// The new hash values for one record. `hash_without_resources` is written only where the
/// record already carries that annotation (the kubelet's feature gate decided that, not us);
/// `None` leaves it as it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Rewrite {
    /// The record's id, from [`RuntimeStore::scan`].
    pub id: String,
    /// The new `io.kubernetes.container.hash`; a [`Hash`](struct@Hash) can only hold what a kubelet writes.
    pub hash: Hash,
    /// The new `hashWithoutResources`, written only where the record already carries one.
    pub hash_without_resources: Option<Hash>,
}

/// What [`RuntimeStore::apply`] did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ApplyOutcome {
    /// Records whose stored values changed.
    pub changed: Vec<String>,
    /// Records that already held the requested values (idempotent rerun).
    pub already: Vec<String>,
    /// Files replaced (Docker, CRI-O) or 1 for a bolt transaction that committed.
    pub files_written: usize,
    /// Bytes written to the store.
    pub bytes_written: u64,
    /// The wall time of each step of the apply, in order, in milliseconds (the steps are the
    /// store's own: see each store's `apply`). Reported as `timings.apply_phases` so that an
    /// operator sees where a slow patch spent its window, and so the benchmark can compare
    /// like with like (scripts/bench-node.sh: the bolt transaction alone against Go's).
    #[serde(skip)]
    pub phases: Vec<(&'static str, f64)>,
}

/// A stopwatch read at the end of each step of an apply ([`ApplyOutcome::phases`]).
#[derive(Debug)]
pub(crate) struct Lap(std::time::Instant);

impl Lap {
    /// Starts the first step now.
    pub(crate) fn start() -> Self {
        Lap(std::time::Instant::now())
    }

    /// Ends the step `name` now, starts the next one, and records the one ended in `into`.
    pub(crate) fn split(&mut self, name: &'static str, into: &mut Vec<(&'static str, f64)>) {
        let now = std::time::Instant::now();
        into.push((name, (now - self.0).as_secs_f64() * 1e3));
        self.0 = now;
    }
}

/// Every store is one a [`session::Session`] can guard: the session sequences its lock,
/// running check and temp sweep from these.
impl storesafe::Guarded for dyn RuntimeStore + '_ {
    fn root(&self) -> &Path {
        RuntimeStore::root(self)
    }
    fn runtime_name(&self) -> &'static str {
        self.kind().name()
    }
    fn ensure_stopped(&self) -> Result<(), StoreError> {
        RuntimeStore::ensure_stopped(self)
    }
    fn sweep_stale_temps(&self) -> Result<usize, StoreError> {
        RuntimeStore::sweep_stale_temps(self)
    }
}

/// One runtime's metadata store. Implementations must be usable from several threads.
pub trait RuntimeStore: Send + Sync {
    /// Which runtime owns the store.
    fn kind(&self) -> RuntimeKind;
    /// The store root as given (Docker data-root, containerd root, CRI-O graphroot).
    fn root(&self) -> &Path;
    /// Read every record. Never writes.
    fn scan(&self) -> Result<ScanReport, StoreError>;
    /// `Err(StoreError::RuntimeRunning)` when the runtime owning this store runs now.
    fn ensure_stopped(&self) -> Result<(), StoreError>;
    /// The runtime's API endpoint (`unix://…`) this store's running check probes: where
    /// `verify --live` asks after the restart.
    fn endpoint(&self) -> String;
    /// Runtime-specific reasons not to patch at all, checked after [`RuntimeStore::ensure_stopped`]
    /// and before any write (Docker: live-restore known off).
    fn precheck(&self) -> Result<(), StoreError> {
        Ok(())
    }
    /// Write `rewrites` (ids from [`RuntimeStore::scan`]), backing up into `backup` before the
    /// first write. Refuses while the runtime runs. Unknown ids are an error before any write.
    fn apply(
        &self,
        rewrites: &[Rewrite],
        backup: &mut backup::Backup,
    ) -> Result<ApplyOutcome, StoreError>;
    /// Removes temp files that a killed run left beside the store's files; returns how many.
    /// Only for stopped runtimes. (containerd: a rollback's temp copy of meta.db.)
    fn sweep_stale_temps(&self) -> Result<usize, StoreError> {
        Ok(0)
    }
    /// The records `ids` as the runtime will read them, after [`RuntimeStore::apply`]: what
    /// a patch checks its rewrites against (only ids, hashes and problems need be filled in).
    /// By default the whole store is scanned; a back-end with one file per record reads just
    /// those.
    fn read_back(&self, ids: &[&str]) -> Result<Vec<StoreRecord>, StoreError> {
        let _ = ids;
        Ok(self.scan()?.records)
    }
}
