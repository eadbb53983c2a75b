//! `upgrade`'s own steps on the real 2,000-container nodes (fixtures/nodes-large): the window
//! with services that stop and start at once, so what is measured is everything but the
//! runtime's and the kubelet's own start/stop — the plan of the stopped store, backup, rewrite,
//! read-back, the binary's install, every atomic write of the state file. The target is under
//! 2 s of kubelet-down time for our part.
//!
//! `verify --live` is answered from the store (there is no daemon here); the real one is a CRI
//! or Engine API listing, measured by cli/tests/upgrade_live.rs.
//!
//! Run: `cargo bench -p rehash --bench upgrade` (RUNS=n, default 3).

use rehash::upgrade::{NodeControl, NodeError, UpgradeOptions, UpgradeResult};
use rehash::{Error, From, LiveVerification, NodeFiles, Plan, StoreLocation};
use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::AtomicBool;
use storepatch::RuntimeKind;

const KUBELET_PID: u32 = 4_000_000;

/// Services that stop and start at once; every container's process exists.
struct InstantNode {
    kubelet_up: Cell<bool>,
    runtime_up: Cell<bool>,
    /// What the new kubelet's `--version` says.
    version: String,
}

impl NodeControl for InstantNode {
    fn stop_kubelet(&self) -> Result<(), NodeError> {
        self.kubelet_up.set(false);
        Ok(())
    }
    fn start_kubelet(&self) -> Result<(), NodeError> {
        self.kubelet_up.set(true);
        Ok(())
    }
    fn stop_runtime(&self) -> Result<(), NodeError> {
        self.runtime_up.set(false);
        Ok(())
    }
    fn start_runtime(&self) -> Result<(), NodeError> {
        self.runtime_up.set(true);
        Ok(())
    }
    fn runtime_keeps_containers(&self, _: RuntimeKind, _: &str) -> Result<String, NodeError> {
        Ok("benchmark".into())
    }
    fn kubelet_pid(&self) -> Option<u32> {
        self.kubelet_up.get().then_some(KUBELET_PID)
    }
    fn cmdline(&self, _: u32) -> Option<Vec<String>> {
        Some(vec![
            "/usr/bin/kubelet".into(),
            "--config=/var/lib/kubelet/config.yaml".into(),
        ])
    }
    fn pid_alive(&self, pid: u32) -> bool {
        pid != KUBELET_PID || self.kubelet_up.get()
    }
    fn run_binary(&self, _: &Path, _: &[String]) -> Result<(bool, String), NodeError> {
        Ok((true, format!("Kubernetes v{}.0", self.version)))
    }
    fn healthy(&self, _: &str) -> bool {
        self.kubelet_up.get()
    }
    fn runtime_answers(&self, _: RuntimeKind, _: &str) -> bool {
        self.runtime_up.get()
    }
    fn verify_live(&self, report: &Plan, _: Option<&str>) -> Result<LiveVerification, Error> {
        Ok(LiveVerification {
            endpoint: "benchmark".into(),
            checked: report.rewrites().len(),
            problems: Vec::new(),
        })
    }
}

fn unpack(archive: &str, into: &Path) -> PathBuf {
    let dir = into.join("node");
    std::fs::create_dir(&dir).unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/nodes-large")
        .join(archive);
    assert!(Command::new("tar")
        .arg("-xzf")
        .arg(&src)
        .arg("-C")
        .arg(&dir)
        .status()
        .unwrap()
        .success());
    dir
}

fn main() {
    let runs: usize = std::env::var("RUNS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3);
    static INTERRUPT: AtomicBool = AtomicBool::new(false);
    for (archive, kind, root, to) in [
        (
            "containerd-1.7-large.tar.gz",
            RuntimeKind::Containerd,
            "var/lib/containerd",
            "1.31",
        ),
        (
            "docker-20.10-large.tar.gz",
            RuntimeKind::Docker,
            "var/lib/docker",
            "1.23",
        ),
    ] {
        let mut downs = Vec::new();
        for run in 0..runs {
            let tmp = tempfile::tempdir().unwrap();
            let dir = unpack(archive, tmp.path());
            let mut location = StoreLocation::new(kind, dir.join(root));
            location.options.socket = Some(tmp.path().join("none.sock"));
            location.options.pidfile = Some(tmp.path().join("none.pid"));
            location.options.live_restore = Some(true);
            let kubelet = tmp.path().join("kubelet");
            let new = tmp.path().join("kubelet-new");
            // kubelet-sized binaries: the install copies and fsyncs 100 MB twice
            std::fs::write(&kubelet, vec![1u8; 100 << 20]).unwrap();
            std::fs::write(&new, vec![2u8; 100 << 20]).unwrap();
            let opts = UpgradeOptions {
                pods: std::fs::read(dir.join("pods.json")).unwrap(),
                from: From::Auto,
                to: to.parse().unwrap(),
                location,
                node_files: NodeFiles::default(),
                backup_dir: tmp.path().join("backup"),
                set_aside_checkpoints: false,
                kubelet_path: kubelet,
                new_kubelet: Some(new),
                budget: None,
                state_path: tmp.path().join("state.json"),
                healthz: "http://benchmark/healthz".into(),
                accept_restarts: true,
                endpoint: None,
                cri_dockerd: rehash::cri_dockerd::SwitchOptions::default(),
                kubelet_flags: rehash::upgrade::KubeletFlags::NodeFiles,
                interrupt: &INTERRUPT,
                hold_ready: None,
            };
            let node = InstantNode {
                kubelet_up: Cell::new(true),
                runtime_up: Cell::new(true),
                version: to.to_string(),
            };
            let r = rehash::upgrade(&opts, &node).unwrap();
            assert_eq!(r.result, UpgradeResult::Done, "{:#?}", r.state);
            let down = r.state.kubelet_down_ms.unwrap();
            let report =
                Plan::from_json(&std::fs::read(r.state.report.as_ref().unwrap()).unwrap()).unwrap();
            let t = &report.timings;
            println!(
                "  patch: scan {:.0} ms, hash {:.0} ms, plan {:.0} ms, backup+apply {:.0} ms, read-back {:.0} ms",
                t.scan_ms,
                t.hash_ms,
                t.plan_ms,
                t.backup_and_apply_ms.unwrap_or(0.0),
                t.verify_ms.unwrap_or(0.0)
            );
            downs.push(down);
            println!(
                "{archive} run {run}: {} rewritten; kubelet-down (our steps) {:.0} ms: {}",
                r.state.rewritten,
                down,
                r.state
                    .steps
                    .iter()
                    .map(|s| format!("{:?} {:.0} ms", s.step, s.duration_ms.unwrap()))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
        downs.sort_by(|a, b| a.partial_cmp(b).unwrap());
        println!(
            "{archive}: median kubelet-down of our steps {:.0} ms over {runs} run(s)",
            downs[downs.len() / 2]
        );
    }
}
