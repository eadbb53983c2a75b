//! The kubelet-rehash node workflow as a library: plan, patch, verify and roll back the
//! kubelet's container hashes in a node's runtime store, so a kubelet of another minor version
//! adopts every running container instead of restarting it.
//!
//! A fleet agent (a DaemonSet, a Cluster API in-place-update extension, a controller) links
//! this crate and gets typed results; the `kubelet-rehash` command is a thin layer over it.
//! Everything runtime-specific (Docker, containerd, CRI-O) lives behind
//! [`storepatch::RuntimeStore`] and [`storepatch::Runtime`]: this crate never matches on a
//! runtime's kind, it asks the runtime's descriptor (its service unit, what keeps its
//! containers through a stop, its backup's size, whether it sits behind dockershim). The one
//! runtime-specific workflow here, the dockershim → cri-dockerd switch ([`cri_dockerd`]),
//! applies to whichever runtime says it is behind dockershim. Every write to a store goes
//! through one [`storepatch::session::Session`].
//!
//! The steps, for one node:
//! 1. [`StoreLocation::open`] finds the store among the node's known layouts
//!    ([`storepatch::layout::find`]; under [`StoreLocation::host_root`] when the node's `/` is
//!    mounted elsewhere).
//! 2. [`Plan::build`] reads it (never writes) and decides, for every record, what the target
//!    kubelet computes and whether the stored hash is *proven* (what the current kubelet
//!    computes for the spec the API server serves). Only proven hashes are rewritten: an
//!    unproven one means the spec changed, and the restart is the right outcome.
//! 3. [`patch()`] refuses while the runtime runs, backs up, rewrites, and reads back.
//! 4. [`verify()`] (offline) or [`verify_live`] (after the runtime restarted) checks.
//! 5. [`rollback()`] / [`rollback_values`] undo.
//!
//! ```
//! use rehash::{BackupOptions, From, Plan, StoreLocation, Version};
//! use storepatch::RuntimeKind;
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // A copy of the bundled real containerd 1.7 node (kubelet 1.30).
//! let fixture = concat!(env!("CARGO_MANIFEST_DIR"), "/../fixtures/nodes/containerd-1.7");
//! let tmp = tempfile::tempdir()?;
//! let status = std::process::Command::new("cp").arg("-a").arg(fixture).arg(tmp.path()).status()?;
//! assert!(status.success());
//! let node = tmp.path().join("containerd-1.7");
//! let pods = std::fs::read(node.join("pods.json"))?;
//!
//! let mut location = StoreLocation::new(RuntimeKind::Containerd, node.join("var/lib/containerd"));
//! // No containerd runs there: point the running check at a socket nobody listens on.
//! location.options.socket = Some(tmp.path().join("none.sock"));
//! // This example's lock and in-flight markers stay in its temp dir (a node's are in /run and
//! // /var/lib/kubelet-rehash).
//! location.state = Some(storepatch::session::StateDirs {
//!     locks: tmp.path().join("locks"),
//!     inflight: tmp.path().join("inflight"),
//! });
//! let store = location.open()?;
//!
//! let to: Version = "1.31".parse()?;
//! let plan = Plan::build(&pods, store.as_ref(), From::Auto, to)?;
//! assert!(plan.summary.would_restart_without_rewrite > plan.summary.would_restart_after_rewrite);
//!
//! let backup = BackupOptions { state: location.state_dirs(), ..BackupOptions::new(tmp.path().join("backup")) };
//! let done = rehash::patch(&plan, store.as_ref(), &backup, &rehash::Silent)?;
//! assert_eq!(done.changed, plan.rewrites().len());
//!
//! // Planned again, the store has nothing left to rewrite.
//! let after = Plan::build(&pods, store.as_ref(), From::Auto, to)?;
//! assert!(rehash::verify(&after).ok());
//!
//! // And the backup restores every byte.
//! rehash::rollback(&backup.dir, &location, false)?;
//! # Ok(())
//! # }
//! ```
#![deny(missing_docs)]

pub mod admission;
pub mod allocatable;
pub mod cri_dockerd;
pub mod declared_features;
pub mod error;
pub mod hazard;
pub mod node;
pub mod patch;
pub mod plan;
pub mod pods;
pub mod progress;
pub mod report;
pub mod rollback;
pub mod static_pods;
pub mod upgrade;
pub mod verify;

pub use error::{Error, ErrorClass};
pub use hashcompat::{Hash, KubeletVersion as Version};
pub use node::{default_backup_dir, ApiFacts, InstalledKubelet, StoreLocation};
pub use patch::{patch, BackupOptions, PatchReport};
pub use plan::{From, NodeFiles};
pub use progress::{Event, Progress, Silent};
pub use report::{Action, PhaseTiming, Plan, PlanRecord, Stage, Summary, Timings, REPORT_FORMAT};
pub use rollback::{rollback, rollback_values, ValueRollback};
pub use storepatch::{Hazard, Severity};
pub use upgrade::{
    upgrade, NodeControl, NodeError, SystemNode, UpgradeOptions, UpgradeReport, UpgradeResult,
    UpgradeState,
};
pub use verify::{verify, verify_live, LiveProblem, LiveVerification, Verification};

/// Plans and patches in one call, as `kubelet-rehash patch` does: the plan is made from the
/// stopped store right before the rewrite, so it cannot be stale.
pub fn plan_and_patch(
    pods: &[u8],
    store: &dyn storepatch::RuntimeStore,
    from: From,
    to: Version,
    backup: &BackupOptions,
    progress: &dyn Progress,
) -> Result<PatchReport, Error> {
    let plan = Plan::build(pods, store, from, to)?;
    patch(&plan, store, backup, progress)
}
