//! Bundled real nodes copied into temp dirs, as a user's node would look, and byte snapshots
//! of them: shared by the workflow and node-shape tests.

#![allow(dead_code)] // each test binary uses its own subset

use rehash::StoreLocation;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use storepatch::RuntimeKind;

pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures")
}

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
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let d = tempfile::Builder::new()
            .prefix("kubelet-rehash-test-state-")
            .tempdir()
            .unwrap()
            .keep();
        std::env::set_var(storepatch::inflight::STATE_DIR_ENV, &d);
        d
    })
}

pub fn node(name: &str) -> Node {
    state_dir();
    let tmp = tempfile::tempdir().unwrap();
    let st = Command::new("cp")
        .arg("-a")
        .arg(fixtures().join("nodes").join(name))
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

/// Every file under the node's directory, with its bytes.
pub fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    walk(dir)
        .into_iter()
        .map(|p| {
            let b = std::fs::read(&p).unwrap();
            (p, b)
        })
        .collect()
}

pub fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let t = e.file_type().unwrap();
        if t.is_dir() {
            out.extend(walk(&e.path()));
        } else if t.is_file() {
            out.push(e.path());
        }
    }
    out
}
