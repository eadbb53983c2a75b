//! The write safety every store rewrite shares, whatever the runtime: kubelet-rehash touches a
//! node's container store in a window of seconds, and a store it leaves half-written restarts
//! every container of the node. Everything here imports only itself, so the runtime back-ends
//! (storepatch) and the node workflow (rehash) build on one protocol instead of each
//! re-sequencing it:
//!
//! * [`atomic`]: temp + fsync + rename + directory fsync, the only way a file is replaced;
//! * [`backup`]: every original byte, with a sha256 manifest, committed before the first
//!   write, and the byte-exact rollback;
//! * [`lock`]: one exclusive lock per store, across processes and mount namespaces;
//! * [`inflight`]: the marker a run writes before its first write, so a killed run is found;
//! * [`session`]: the one guard that sequences them — lock, interrupted-run check, runtime
//!   stopped, temp sweep, backup, marker, and the end — so no caller does it by hand;
//! * [`fault`]: the crash points the kill sweeps stop at (feature `crash-points`);
//! * [`trust`], [`bytes`], [`error`]: ownership checks of what we read back, byte helpers,
//!   the one error type.

#![deny(missing_docs)]

pub mod atomic;
pub mod backup;
pub mod bytes;
pub mod error;
pub mod fault;
pub mod inflight;
pub mod lock;
pub mod session;
pub mod trust;

pub use error::StoreError;
pub use session::{Guarded, Intent, Session, StateDirs};
