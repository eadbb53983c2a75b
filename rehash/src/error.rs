//! One error type for the whole workflow. Every variant belongs to an [`ErrorClass`], which is
//! what a caller acts on (the CLI maps it to its documented exit codes in one place); the
//! message says what to do.

use std::path::PathBuf;
use storepatch::layout::DetectError;
use storepatch::StoreError;

/// What kind of "no" an error is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorClass {
    /// Something broke (I/O, a damaged store, a read-back that disagrees): exit 1.
    Failure,
    /// The request itself is wrong (bad pods file, unknown root, not a report): exit 2.
    Usage,
    /// Refused on purpose, nothing written (runtime running, pre-check, conflict): exit 3.
    Refused,
}

/// Why a workflow step did not happen.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The pods file cannot be used.
    #[error(transparent)]
    Pods(#[from] crate::pods::PodsError),

    /// A kubelet checkpoint file cannot be judged (not JSON, unknown shape, a symlink, …):
    /// exit 2, nothing read as a guess.
    #[error("kubelet checkpoint: {0}")]
    Checkpoint(String),

    /// A path argument names nothing usable (a `--kubelet-binary` that is not there or not a
    /// file): exit 2, nothing stopped.
    #[error("{0}")]
    Argument(String),

    /// The pods file is not this node's (exit 3: refused, nothing read as a guess).
    #[error("pods file: {0}")]
    ForeignPods(String),

    /// The plan has `block` hazards the patch was not told how to deal with; nothing written.
    #[error("refused, nothing written: {}", .0.join("; "))]
    Blocked(Vec<String>),

    /// `From::Auto` found no container whose stored hash any version reproduces.
    #[error("--from auto: no container's stored hash matches any kubelet version {}–{} for the pod specs given; is this the right pods file for this node? Give --from to see per-container reasons", hashcompat::KubeletVersion::oldest(), hashcompat::KubeletVersion::newest())]
    NothingProven,

    /// `From::Auto`: the containers prove different versions.
    #[error("--from auto: the containers do not agree on one kubelet version (the others agree on {agreed}): {disagreeing}; give --from explicitly")]
    FromDisagreement {
        /// The versions most containers agree on.
        agreed: String,
        /// The containers that disagree, and with what.
        disagreeing: String,
    },

    /// No store could be found or chosen.
    #[error(transparent)]
    Detect(#[from] DetectError),

    /// The store refused or failed.
    #[error(transparent)]
    Store(#[from] StoreError),

    /// A file given as a report is not one this version reads.
    #[error("report: {reason}")]
    Report {
        /// What is wrong with it.
        reason: String,
    },

    /// A file given as an `upgrade` state file is not one this version reads (or not a file).
    #[error("state file: {0}")]
    State(String),

    /// An `upgrade` state file another user could have written or swapped, or one naming
    /// paths outside what a run records: never believed, since root writes where it says.
    #[error("state file refused, nothing done: {0}")]
    UntrustedState(String),

    /// `verify --live` was given a report it cannot check anything with.
    #[error("{0}")]
    NothingToVerify(String),

    /// The plan given to `patch` was made from another store.
    #[error("the plan was made for the {plan_runtime} store at {plan_root}, not for the {store_runtime} store at {store_root}; plan this store")]
    PlanMismatch {
        /// The plan's runtime.
        plan_runtime: &'static str,
        /// The plan's root.
        plan_root: String,
        /// The store's runtime.
        store_runtime: &'static str,
        /// The store's root.
        store_root: String,
    },

    /// After the rewrite, reading the store back does not give the targets. The report
    /// (with the backup directory) is carried so it can still be written.
    #[error("after the rewrite {} record(s) do not hold their target hash: {}; roll back with `kubelet-rehash rollback --backup-dir {}`", ids.len(), ids.join(", "), backup_dir.display())]
    ReadBack {
        /// The records that do not hold their target.
        ids: Vec<String>,
        /// The backup of the originals.
        backup_dir: PathBuf,
        /// The patch report as far as it got.
        report: Box<crate::report::Plan>,
    },

    /// Byte rollback found a file changed since the patch; nothing was restored.
    #[error("{source}. {}", rollback_hint(backup_dir, *unrecorded_accepted))]
    RollbackConflict {
        /// The store's refusal, naming the file.
        source: StoreError,
        /// The backup that was not restored.
        backup_dir: PathBuf,
        /// Whether files whose new bytes were never recorded were already accepted (the
        /// rollback of an interrupted run, or `--accept-unrecorded`).
        unrecorded_accepted: bool,
    },

    /// `rollback --root`/`--runtime` name another store than the backup's manifest: the
    /// running check would look at one store while the manifest's is written. Nothing read
    /// or written.
    #[error("refused, nothing restored: {flag} {given} does not match the backup's {recorded} (from its manifest {manifest}); give the store the backup was taken of, or leave {flag} out")]
    BackupStoreMismatch {
        /// `--root` or `--runtime`.
        flag: &'static str,
        /// What the flag named.
        given: String,
        /// What the manifest records.
        recorded: String,
        /// The manifest.
        manifest: PathBuf,
    },

    /// A value rollback found containers it must not touch; nothing was written.
    #[error("value rollback refused, nothing written: {0}")]
    ValueRollbackConflict(String),

    /// Reading or writing a file of ours failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// The class a caller acts on.
    pub fn class(&self) -> ErrorClass {
        match self {
            Error::Pods(_)
            | Error::Argument(_)
            | Error::Checkpoint(_)
            | Error::Detect(_)
            | Error::Report { .. }
            | Error::State(_)
            | Error::NothingToVerify(_)
            | Error::PlanMismatch { .. } => ErrorClass::Usage,
            Error::NothingProven
            | Error::Blocked(_)
            | Error::ForeignPods(_)
            | Error::FromDisagreement { .. }
            | Error::RollbackConflict { .. }
            | Error::BackupStoreMismatch { .. }
            | Error::ValueRollbackConflict(_)
            | Error::UntrustedState(_) => ErrorClass::Refused,
            // A root that is not there is a wrong argument, not a refusal (docs: exit 2).
            Error::Store(StoreError::RootMissing(_)) => ErrorClass::Usage,
            Error::Store(e) if e.is_refusal() => ErrorClass::Refused,
            Error::Store(_) | Error::ReadBack { .. } | Error::Io { .. } => ErrorClass::Failure,
        }
    }
}

/// The one command that gets past a refused byte rollback, by how far the patch got: without
/// `report.json` the patch was interrupted before its read-back (a crash), so a value rollback
/// cannot know what was written, while a file whose new bytes were never recorded (a bolt
/// commit just before the kill) is exactly what `--accept-unrecorded` restores; with the report
/// the patch finished, and a changed file means the runtime has written since.
///
/// When unrecorded files were already accepted, a conflict is a file someone else changed:
/// no flag of ours gets past it.
fn rollback_hint(backup_dir: &std::path::Path, unrecorded_accepted: bool) -> String {
    let d = backup_dir.display();
    if unrecorded_accepted && !backup_dir.join("report.json").is_file() {
        return "The file named holds bytes that neither the original nor the interrupted patch of this backup wrote: something else changed it since (has the runtime run?); nothing was restored".to_string();
    }
    if backup_dir.join("report.json").is_file() {
        format!("If the runtime has run since the patch (containerd commits to meta.db at every start), `rollback --values --backup-dir {d}` writes the old hash values back instead, after checking that every rewritten container still holds exactly the value we wrote")
    } else {
        format!("The patch of this backup did not finish (it has no report.json: interrupted?). If the file named holds what that run wrote without recording it, `rollback --accept-unrecorded --backup-dir {d}` restores the originals; if the runtime has run since, stop it first")
    }
}
