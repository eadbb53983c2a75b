//! Harnesses of the live tests (storepatch/tests/{docker_live,containerd_live}.rs,
//! cli/tests/e2e_live.rs and cli/tests/crio_live.rs): private runtime daemons on paths of their own, the images and
//! kubelet-shaped configs they run, and Drop guards that stop and clean up everything they
//! started, by pid, even when a check fails.
//!
//! The CRI calls only tests make ([`cri::CriTestCalls`]) live here too, built on the generic call
//! the product's client keeps (`storepatch::live::cri::CriClient::unary`), so storepatch's
//! public API carries only what `verify --live` needs. Docker's harness drives dockerd with
//! `storepatch::live::docker::DockerClient::request` / `call`.
//!
//! The harnesses need root and the runtimes the setup scripts install
//! (scripts/setup-docker.sh, scripts/setup-containerd.sh, scripts/setup-crio.sh).
//!
//! The file-level tests of storepatch and the crates above it share the rest: where the bundled
//! fixtures are ([`fixtures_dir`]) and byte snapshots of the trees they patch ([`tree`]).
#![deny(missing_docs)]

pub mod apiserver;
pub mod containerd;
pub mod cri;
pub mod cri_dockerd;
pub mod crio;
pub mod docker;
pub mod grow;
pub mod kubelet;
pub mod node_tree;
pub mod rng;
pub mod tree;
pub use rng::Rng;

/// The repository's `fixtures/` directory: the real nodes, stores, checkpoints and golden
/// hashes every crate's tests read.
pub fn fixtures_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures")
}

/// `v` as the fixtures of `fixtures/nodes` keep JSON: 4-space indent, a final newline (keys
/// sorted, as serde_json's map is).
pub fn fixture_json(v: &serde_json::Value) -> Vec<u8> {
    let mut out = Vec::new();
    let fmt = serde_json::ser::PrettyFormatter::with_indent(b"    ");
    let mut ser = serde_json::Serializer::with_formatter(&mut out, fmt);
    serde::Serialize::serialize(v, &mut ser).unwrap();
    out.push(b'\n');
    out
}

/// The bytes of a gzip-compressed fixture (`gzip -dc`; the large bundled stores are kept
/// compressed).
pub fn gunzip(p: &std::path::Path) -> Vec<u8> {
    let out = std::process::Command::new("gzip")
        .arg("-dc")
        .arg(p)
        .output()
        .expect("run gzip");
    assert!(out.status.success(), "gzip -dc {}", p.display());
    out.stdout
}

/// Makes `cmd` start its child in a session of its own, so signals sent to the test's process
/// group (a Ctrl-C, a harness's kill) never reach the private daemon: its Drop guard stops it.
pub fn in_own_session(cmd: &mut std::process::Command) -> &mut std::process::Command {
    use std::os::unix::process::CommandExt;
    // SAFETY: setsid is async-signal-safe, the only call between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::setsid();
            Ok(())
        })
    }
}

/// Stops a private daemon the way its unit would: SIGTERM, then waits for it to exit; after
/// 30 s kills it and panics (a runtime that ignores SIGTERM fails the test, it is not waited
/// out). Returns how long it took, for the test's notes.
pub fn sigterm_and_wait(mut child: std::process::Child, name: &str) -> std::time::Duration {
    use std::time::{Duration, Instant};
    let t0 = Instant::now();
    // SAFETY: kill(2) on the pid of a child we still own (not yet waited for).
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let deadline = t0 + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{name} did not exit within 30 s of SIGTERM; killed it");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    t0.elapsed()
}

/// The in-flight markers of this test process: a private directory, named in
/// `KUBELET_REHASH_STATE_DIR` (storepatch::inflight) for the whole process the first time this
/// is called, so every run of the binary (and of the library) the tests start keeps its markers
/// there instead of the machine's `/var/lib/kubelet-rehash/inflight`, and markers of killed runs
/// never outlive the tests in a place other runs read. Markers are keyed by the store's
/// canonical path, so the tests of one process never see each other's.
pub fn private_state_dir() -> &'static std::path::Path {
    static DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let d = tempfile::Builder::new()
            .prefix("kubelet-rehash-test-state-")
            .tempdir()
            .expect("a temp dir for the in-flight markers")
            .keep();
        std::env::set_var(storepatch::inflight::STATE_DIR_ENV, &d);
        d
    })
}
