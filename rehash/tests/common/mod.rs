//! Bundled real nodes copied into temp dirs, as a user's node would look: shared by the
//! workflow and node-shape tests (their byte snapshots are `testtools::tree::snapshot`).

#![allow(dead_code)] // each test binary uses its own subset

use rehash::{BackupOptions, StoreLocation};
use std::path::{Path, PathBuf};
use std::process::Command;
use storepatch::session::StateDirs;
use storepatch::RuntimeKind;

/// A copy of a bundled node in a temp dir, with a store location whose running check looks
/// at sockets and pid files nobody serves.
pub struct Node {
    pub tmp: tempfile::TempDir,
    pub dir: PathBuf,
    pub location: StoreLocation,
}

pub fn node(name: &str) -> Node {
    let tmp = tempfile::tempdir().unwrap();
    let st = Command::new("cp")
        .arg("-a")
        .arg(testtools::fixtures_dir().join("nodes").join(name))
        .arg(tmp.path())
        .status()
        .unwrap();
    assert!(st.success(), "cp -a {name}");
    let dir = tmp.path().join(name);
    let (runtime, root) = match name.split('-').next().unwrap() {
        "containerd" => (RuntimeKind::Containerd, "var/lib/containerd"),
        "docker" => (RuntimeKind::Docker, "var/lib/docker"),
        _ => (RuntimeKind::Crio, "var/lib/containers/storage"),
    };
    let mut location = StoreLocation::new(runtime, dir.join(root));
    location.options.socket = Some(tmp.path().join("no-runtime.sock"));
    location.options.pidfile = Some(tmp.path().join("no-runtime.pid"));
    if runtime == RuntimeKind::Docker {
        location.options.live_restore = Some(true);
    }
    if runtime == RuntimeKind::Crio {
        location.options.runroot = Some(dir.join("run/containers/storage"));
    }
    // The node's locks and in-flight markers stay in its temp dir, given to the library
    // (StoreLocation::state, BackupOptions::state), never through a process-wide variable: no
    // test reads or leaves a marker in the machine's /var/lib/kubelet-rehash, and no two
    // tests share one.
    location.state = Some(StateDirs {
        locks: tmp.path().join("state/locks"),
        inflight: tmp.path().join("state/inflight"),
    });
    Node { tmp, dir, location }
}

impl Node {
    /// Backup options for a backup at `name` in the node's temp dir, with the node's state
    /// directories.
    pub fn backup(&self, name: impl AsRef<Path>) -> BackupOptions {
        BackupOptions {
            state: self.location.state_dirs(),
            ..BackupOptions::new(self.tmp.path().join(name))
        }
    }
}
