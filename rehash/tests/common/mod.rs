//! Bundled real nodes copied into temp dirs, as a user's node would look: shared by the
//! workflow and node-shape tests (their byte snapshots are `testtools::tree::snapshot`).

#![allow(dead_code)] // each test binary uses its own subset

use rehash::StoreLocation;
use std::path::{Path, PathBuf};
use std::process::Command;
use storepatch::RuntimeKind;

/// A copy of a bundled node in a temp dir, with a store location whose running check looks
/// at sockets and pid files nobody serves.
pub struct Node {
    pub tmp: tempfile::TempDir,
    pub dir: PathBuf,
    pub location: StoreLocation,
}

/// The in-flight markers of this test process (`KUBELET_REHASH_STATE_DIR`): one private
/// directory per test binary, set before its first node is made, so no test reads or leaves a
/// marker in the machine's `/var/lib/kubelet-rehash` (markers are keyed by the store's
/// canonical path: the tests of one binary never see each other's).
pub fn state_dir() -> &'static Path {
    testtools::private_state_dir()
}

pub fn node(name: &str) -> Node {
    state_dir();
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
    Node { tmp, dir, location }
}
