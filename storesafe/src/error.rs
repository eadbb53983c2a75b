//! One error type for every back-end, so the CLI can map errors to its documented exit codes
//! (see [`StoreError::is_refusal`]).

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
/// Why a store operation did not happen.
pub enum StoreError {
    /// The runtime that owns the store runs now: writing would race it.
    #[error("refusing to touch the {runtime} store: the runtime is running ({evidence}); stop it first (its containers keep running with live-restore / shims)")]
    RuntimeRunning {
        /// The runtime's name.
        runtime: &'static str,
        /// What showed it runs (a lock, a socket, a live pid).
        evidence: String,
    },

    #[error("store root {0} does not exist or is not a directory")]
    /// The store root given does not exist.
    RootMissing(PathBuf),

    #[error("{path}: {source}")]
    /// Reading or writing a file failed.
    Io {
        /// The file.
        path: PathBuf,
        #[source]
        /// What the system said.
        source: std::io::Error,
    },

    /// The store (or one record the caller asked to rewrite) is not what the runtime writes.
    #[error("{location}: {reason}")]
    Corrupt {
        /// Where (a file path or a bolt bucket path).
        location: String,
        /// What is wrong.
        reason: String,
    },

    #[error("no record with id {0} in the store (was it removed since the scan?)")]
    /// A rewrite names an id the store does not have.
    UnknownRecord(String),

    /// A pre-check failed; nothing was written.
    #[error("refused: {0}")]
    Refused(String),

    /// Re-reading what we are about to write (or wrote) did not give the intended document.
    #[error("verification of {location} failed: {reason}; nothing was written")]
    Verify {
        /// Where (a file path or a bolt bucket path).
        location: String,
        /// What is wrong.
        reason: String,
    },

    #[error("backup: {0}")]
    /// The backup could not be made or read; nothing was written.
    Backup(String),

    /// Asking a running runtime (`verify --live`) failed.
    #[error("{0}")]
    Live(String),

    /// Another run of kubelet-rehash holds the store's lock ([`crate::lock`]).
    #[error("refusing to touch the store at {}: another kubelet-rehash run (pid {}) holds its lock {}; let it finish (or, if that pid is not kubelet-rehash, find what holds the lock)", root.display(), pid.map_or_else(|| "unknown: in another container or mount namespace?".to_string(), |p| p.to_string()), lock.display())]
    Locked {
        /// The store root.
        root: PathBuf,
        /// The holder's pid, as it wrote it into the lock file.
        pid: Option<u32>,
        /// The lock file.
        lock: PathBuf,
    },

    /// Rollback found a file that matches neither the original nor the written bytes.
    #[error("rollback refused: {path} changed since the patch ({reason}); nothing was restored")]
    RollbackConflict {
        /// The file that changed.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

impl StoreError {
    /// An I/O error on `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        StoreError::Io {
            path: path.into(),
            source,
        }
    }

    /// Errors that mean "we did not do it on purpose" (exit code 3), as opposed to failures.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            StoreError::RuntimeRunning { .. }
                | StoreError::Refused(_)
                | StoreError::RollbackConflict { .. }
                | StoreError::Locked { .. }
                | StoreError::Backup(_)
                | StoreError::RootMissing(_)
        )
    }
}
