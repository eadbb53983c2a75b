//! The binary the output tests (`snapshots.rs`, `hash_cmd.rs`) run: this build's, or a release
//! artifact. scripts/test-release.sh points `KUBELET_REHASH_BIN` at each extracted release
//! binary, and `KUBELET_REHASH_RUNNER` at qemu-aarch64-static for the arm64 one (empty: none), so the
//! artifacts must print exactly the reviewed snapshots and golden hashes this build prints.

use std::process::Command;

/// A command that runs the binary under test (no arguments yet).
pub fn kubelet_rehash() -> Command {
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
