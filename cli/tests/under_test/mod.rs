//! The binary under test, for every test of the cli crate: [`bin`] (this build's binary) and
//! [`kubelet_rehash`] (a command that may run a release artifact instead), and the bundled
//! nodes with their store flags (`snapshots.rs`, `image.rs`). Only the cli crate's own tests
//! can name the binary (`CARGO_BIN_EXE_*` exists there alone), so this is a module of its
//! tests, not part of testtools.
//!
//! The output tests (`snapshots.rs`, `hash_cmd.rs`, `dist.rs`) run [`kubelet_rehash`]: this
//! build's binary, or a release artifact: scripts/test-release.sh points `KUBELET_REHASH_BIN`
//! at each extracted release binary, and `KUBELET_REHASH_RUNNER` at qemu-aarch64-static for
//! the arm64 one (empty: none), so the artifacts must print exactly the reviewed snapshots and
//! golden hashes this build prints.

#![allow(dead_code)] // each test file uses a part

use std::process::Command;

/// This build's binary, whose every run keeps its in-flight markers in this test process's
/// own directory (`testtools::private_state_dir`), never the machine's.
pub fn bin() -> &'static str {
    testtools::private_state_dir();
    env!("CARGO_BIN_EXE_kubelet-rehash")
}

/// A command that runs the binary under test (no arguments yet).
pub fn kubelet_rehash() -> Command {
    // every run of the binary keeps its in-flight markers in this process's own directory
    testtools::private_state_dir();
    let bin = std::env::var_os("KUBELET_REHASH_BIN")
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_kubelet-rehash").into());
    match std::env::var_os("KUBELET_REHASH_RUNNER").filter(|r| !r.is_empty()) {
        Some(runner) => {
            let mut cmd = Command::new(runner);
            cmd.arg(bin);
            cmd
        }
        None => Command::new(bin),
    }
}

/// Each bundled node, the flags that name its store (relative to the node's directory), and
/// the target its snapshot plans for.
pub const NODES: [(&str, &str, &[&str]); 4] = [
    (
        "containerd-1.6",
        "1.31",
        &["--runtime", "containerd", "--root", "var/lib/containerd"],
    ),
    (
        "containerd-1.7",
        "1.31",
        &["--runtime", "containerd", "--root", "var/lib/containerd"],
    ),
    (
        "crio-1.30",
        "1.31",
        &[
            "--runtime",
            "crio",
            "--root",
            "var/lib/containers/storage",
            "--runroot",
            "run/containers/storage",
        ],
    ),
    (
        "docker-20.10",
        "1.24",
        &[
            "--runtime",
            "docker",
            "--root",
            "var/lib/docker",
            "--live-restore",
            "true",
        ],
    ),
];
