//! `rehash::upgrade` through its test seam ([`NodeControl`]): every bundled node type
//! (containerd 1.6/1.7, Docker 20.10, CRI-O 1.30, real stores copied from real nodes) goes
//! through the window, and every failure path — each step failing, a SIGINT/SIGTERM at each
//! step, the tool killed at each step and run again — ends with the runtime and the old kubelet
//! running, the store and the kubelet binary byte for byte as before, and the right result.
//!
//! The services are a fake that records what runs (no runtime runs on these copies: their
//! running check looks at sockets nobody serves). The new kubelet binary is a real shell
//! script run by the real `run_binary`, which answers `--version` and rejects a flag the new
//! version removed, as a real kubelet does. `verify --live` is answered from the store itself
//! (there is no daemon to ask); cli/tests/upgrade_live.rs asks real daemons.

mod common;

use rehash::cri_dockerd::checkpoint::{CheckpointData, SandboxCheckpoint};
use rehash::cri_dockerd::SwitchOptions;
use rehash::plan::RecordClass;
use rehash::upgrade::{
    KubeletFlags, NodeControl, NodeError, Phase, Step, SystemNode, UpgradeOptions, UpgradeResult,
};
use rehash::{Error, ErrorClass, From, LiveVerification, NodeFiles, Plan};
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use storepatch::RuntimeKind;

const KUBELET_PID: u32 = 4_000_000;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Fault {
    None,
    Fail(Step),
    Signal(Step),
    Kill(Step),
}

struct FakeNode {
    kubelet_up: Cell<bool>,
    runtime_up: Cell<bool>,
    fault: Cell<Fault>,
    /// Dies at this step too (a second fault: killed while going back).
    kill_also: Cell<Option<Step>>,
    /// Stopping the runtime kills the containers (KillMode=control-group).
    runtime_stop_kills: bool,
    /// The watched containers die when the kubelet stops (on their own, not by the runtime).
    kubelet_stop_kills: bool,
    containers_dead: Cell<bool>,
    /// The kubelet that runs never becomes healthy (its start "works", its endpoint never
    /// answers).
    never_healthy: Cell<bool>,
    /// The next kubelet started is such a one.
    sick_next_start: Cell<bool>,
    /// Start commands fail (a broken unit): going back cannot complete.
    starts_fail: Cell<bool>,
    kubelet_args: Vec<String>,
    calls: RefCell<Vec<String>>,
    /// The library said the runtime's stop and start now cover cri-dockerd.
    told_switch: Cell<bool>,
    /// A cri-dockerd that answers at its socket until the runtime's stop covers it.
    cri_dockerd: RefCell<Option<std::os::unix::net::UnixListener>>,
    /// The runtime's stop leaves cri-dockerd running (an operator's command that forgot it).
    stop_leaves_cri_dockerd: bool,
    /// The endpoints `verify --live` was asked at.
    verified_at: RefCell<Vec<Option<String>>>,
    interrupt: &'static AtomicBool,
    real: SystemNode,
}

impl FakeNode {
    fn new(interrupt: &'static AtomicBool) -> Self {
        FakeNode {
            kubelet_up: Cell::new(true),
            runtime_up: Cell::new(true),
            fault: Cell::new(Fault::None),
            kill_also: Cell::new(None),
            runtime_stop_kills: false,
            kubelet_stop_kills: false,
            containers_dead: Cell::new(false),
            never_healthy: Cell::new(false),
            sick_next_start: Cell::new(false),
            starts_fail: Cell::new(false),
            kubelet_args: vec![
                "/usr/bin/kubelet".into(),
                "--config=/var/lib/kubelet/config.yaml".into(),
                "--container-runtime-endpoint=unix:///run/containerd/containerd.sock".into(),
            ],
            calls: RefCell::new(Vec::new()),
            told_switch: Cell::new(false),
            cri_dockerd: RefCell::new(None),
            stop_leaves_cri_dockerd: false,
            verified_at: RefCell::new(Vec::new()),
            interrupt,
            real: SystemNode::systemd(RuntimeKind::Containerd, None),
        }
    }
    fn call(&self, c: &str) {
        self.calls.borrow_mut().push(c.to_string());
    }
    fn safe(&self) -> bool {
        self.kubelet_up.get() && self.runtime_up.get()
    }
}

impl NodeControl for FakeNode {
    fn stop_kubelet(&self) -> Result<(), NodeError> {
        self.call("stop-kubelet");
        self.kubelet_up.set(false);
        if self.kubelet_stop_kills {
            self.containers_dead.set(true);
        }
        Ok(())
    }
    fn start_kubelet(&self) -> Result<(), NodeError> {
        self.call("start-kubelet");
        if self.starts_fail.get() {
            return Err("unit kubelet failed".into());
        }
        self.kubelet_up.set(true);
        self.never_healthy.set(self.sick_next_start.replace(false));
        Ok(())
    }
    fn stop_runtime(&self) -> Result<(), NodeError> {
        self.call("stop-runtime");
        self.runtime_up.set(false);
        if self.told_switch.get() && !self.stop_leaves_cri_dockerd {
            self.cri_dockerd.borrow_mut().take();
        }
        if self.runtime_stop_kills {
            self.containers_dead.set(true);
        }
        Ok(())
    }
    fn start_runtime(&self) -> Result<(), NodeError> {
        self.call("start-runtime");
        if self.starts_fail.get() {
            return Err("unit runtime failed".into());
        }
        self.runtime_up.set(true);
        Ok(())
    }
    fn runtime_keeps_containers(&self, _: RuntimeKind, _: &str) -> Result<String, NodeError> {
        Ok("fake unit: KillMode=process".into())
    }
    fn kubelet_pid(&self) -> Option<u32> {
        self.kubelet_up.get().then_some(KUBELET_PID)
    }
    fn cmdline(&self, pid: u32) -> Option<Vec<String>> {
        (pid == KUBELET_PID).then(|| self.kubelet_args.clone())
    }
    fn pid_alive(&self, pid: u32) -> bool {
        if pid == KUBELET_PID {
            return self.kubelet_up.get();
        }
        !self.containers_dead.get()
    }
    fn run_binary(&self, binary: &Path, args: &[String]) -> Result<(bool, String), NodeError> {
        self.real.run_binary(binary, args)
    }
    fn healthy(&self, _: &str) -> bool {
        self.kubelet_up.get() && !self.never_healthy.get()
    }
    fn runtime_answers(&self, _: RuntimeKind, _: &str) -> bool {
        self.runtime_up.get()
    }
    fn switching_to_cri_dockerd(&self) {
        self.told_switch.set(true);
    }
    fn cri_dockerd_answers(&self, _: &str) -> bool {
        self.runtime_up.get()
    }
    fn verify_live(
        &self,
        report: &Plan,
        endpoint: Option<&str>,
    ) -> Result<LiveVerification, Error> {
        assert!(self.runtime_up.get(), "verify --live with the runtime down");
        self.verified_at
            .borrow_mut()
            .push(endpoint.map(str::to_string));
        // What the runtime would serve is what its store holds.
        Ok(LiveVerification {
            endpoint: "fake".into(),
            checked: report.rewrites().len(),
            problems: Vec::new(),
        })
    }
    fn before(&self, step: Step) -> Result<(), NodeError> {
        if self.kill_also.get() == Some(step) {
            std::panic::panic_any(Killed);
        }
        match self.fault.get() {
            Fault::Fail(s) if s == step => Err(format!("injected failure at {step:?}").into()),
            Fault::Signal(s) if s == step => {
                self.interrupt.store(true, Ordering::SeqCst);
                Ok(())
            }
            Fault::Kill(s) if s == step => {
                // The process dies here: nothing after this point runs, the state file stays
                // as it was last written.
                std::panic::panic_any(Killed);
            }
            _ => Ok(()),
        }
    }
}

struct Killed;

fn flag() -> &'static AtomicBool {
    Box::leak(Box::new(AtomicBool::new(false)))
}

struct Setup {
    node: common::Node,
    pods: Vec<u8>,
    kubelet: PathBuf,
    new_kubelet: PathBuf,
    state: PathBuf,
    backup: PathBuf,
    to: rehash::Version,
}

const OLD_KUBELET: &[u8] = b"#!/bin/sh\necho Kubernetes v1.30.9\n";

fn new_kubelet_script(version: &str) -> String {
    // Parses every flag before it answers --version, as the kubelet does; 1.31 has no
    // --network-plugin (removed in 1.24) to accept.
    format!(
        "#!/bin/sh\nfor a in \"$@\"; do case \"$a\" in --network-plugin*) echo \"Error: unknown flag: --network-plugin\" >&2; exit 1;; esac; done\necho Kubernetes v{version}\n"
    )
}

fn setup(fixture: &str, to: &str) -> Setup {
    let node = common::node(fixture);
    let pods = std::fs::read(node.dir.join("pods.json")).unwrap();
    let bin = node.tmp.path().join("usr/bin");
    std::fs::create_dir_all(&bin).unwrap();
    let kubelet = bin.join("kubelet");
    std::fs::write(&kubelet, OLD_KUBELET).unwrap();
    std::fs::set_permissions(&kubelet, std::fs::Permissions::from_mode(0o755)).unwrap();
    let new_kubelet = node.tmp.path().join("kubelet-new");
    std::fs::write(&new_kubelet, new_kubelet_script(&format!("{to}.0"))).unwrap();
    std::fs::set_permissions(&new_kubelet, std::fs::Permissions::from_mode(0o755)).unwrap();
    let state = node.tmp.path().join("state/upgrade.json");
    // beside the state file: a run that finishes a killed one believes only a backup there
    let backup = node.tmp.path().join("state/backup");
    Setup {
        pods,
        kubelet,
        new_kubelet,
        state,
        backup,
        to: to.parse().unwrap(),
        node,
    }
}

fn options(s: &Setup, interrupt: &'static AtomicBool) -> UpgradeOptions {
    UpgradeOptions {
        pods: s.pods.clone(),
        from: From::Auto,
        to: s.to,
        location: s.node.location.clone(),
        node_files: NodeFiles::default(),
        backup_dir: s.backup.clone(),
        set_aside_checkpoints: false,
        kubelet_path: s.kubelet.clone(),
        new_kubelet: Some(s.new_kubelet.clone()),
        budget: None,
        state_path: s.state.clone(),
        healthz: "http://fake/healthz".into(),
        accept_restarts: true,
        endpoint: None,
        // the node's own paths, never this machine's /var/lib
        cri_dockerd: SwitchOptions {
            host_root: Some(s.node.dir.clone()),
            ..SwitchOptions::default()
        },
        kubelet_flags: KubeletFlags::NodeFiles,
        interrupt,
        hold_ready: None,
    }
}

/// The store's files and the kubelet binary, by bytes.
fn snapshot(s: &Setup) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut m = testtools::tree::snapshot(&s.node.dir);
    m.insert(s.kubelet.clone(), std::fs::read(&s.kubelet).unwrap());
    m
}

fn assert_same(before: &BTreeMap<PathBuf, Vec<u8>>, s: &Setup, what: &str) {
    let after = snapshot(s);
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>(),
        "{what}: the set of files changed"
    );
    for (p, b) in before {
        assert!(after[p] == *b, "{what}: {} changed", p.display());
    }
}

fn pending(s: &Setup) -> usize {
    let store = s.node.location.open().unwrap();
    let plan = Plan::build(&s.pods, store.as_ref(), From::Auto, s.to).unwrap();
    rehash::verify(&plan).pending.len()
}

const WINDOW: [Step; 9] = [
    Step::StopKubelet,
    Step::StopRuntime,
    Step::CheckContainers,
    Step::Patch,
    Step::InstallKubelet,
    Step::StartRuntime,
    Step::VerifyLive,
    Step::StartKubelet,
    Step::WaitHealthy,
];

fn check_done(s: &Setup, fake: &FakeNode, r: &rehash::UpgradeReport, what: &str) {
    assert_eq!(r.result, UpgradeResult::Done, "{what}: {:#?}", r.state);
    assert!(fake.safe(), "{what}: kubelet and runtime run");
    assert_eq!(
        pending(s),
        0,
        "{what}: every proven container holds its target"
    );
    assert_eq!(
        std::fs::read(&s.kubelet).unwrap(),
        std::fs::read(&s.new_kubelet).unwrap(),
        "{what}: the new kubelet is installed"
    );
    assert_eq!(
        std::fs::read(s.backup.join("kubelet/kubelet")).unwrap(),
        OLD_KUBELET,
        "{what}: the old kubelet is kept in the backup"
    );
    let on_disk = rehash::UpgradeState::read(&s.state).unwrap().unwrap();
    assert_eq!(on_disk.phase, Phase::Done);
    assert!(on_disk.kubelet_down_ms.is_some() && on_disk.runtime_down_ms.is_some());
}

#[test]
fn every_bundled_node_type_goes_through_the_window() {
    for (fixture, to) in [
        ("containerd-1.6", "1.31"),
        ("containerd-1.7", "1.31"),
        // 1.23: crossing 1.24 on Docker needs cri-dockerd (refused without it, below; with
        // it, docker_across_1_24_copies_dockershims_checkpoints_and_a_later_failure_removes_them)
        ("docker-20.10", "1.23"),
        ("crio-1.30", "1.31"),
    ] {
        let s = setup(fixture, to);
        let before = pending(&s);
        assert!(before > 0, "{fixture}: something to rewrite");
        let interrupt = flag();
        let fake = FakeNode::new(interrupt);
        let r = rehash::upgrade(&options(&s, interrupt), &fake).unwrap();
        check_done(&s, &fake, &r, fixture);
        let steps: Vec<Step> = r.state.steps.iter().map(|x| x.step).collect();
        let mut want = vec![Step::Preflight];
        want.extend(WINDOW);
        assert_eq!(steps, want, "{fixture}");
        assert_eq!(
            *fake.calls.borrow(),
            [
                "stop-kubelet",
                "stop-runtime",
                "start-runtime",
                "start-kubelet"
            ],
            "{fixture}"
        );
        assert!(r.state.rewritten > 0);
        eprintln!(
            "{fixture} → {to}: {} rewritten; kubelet down {:.0} ms, runtime down {:.0} ms (fake services); steps: {}",
            r.state.rewritten,
            r.state.kubelet_down_ms.unwrap(),
            r.state.runtime_down_ms.unwrap(),
            r.state
                .steps
                .iter()
                .map(|x| format!("{:?} {:.1} ms", x.step, x.duration_ms.unwrap()))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
}

#[test]
fn each_step_failing_rolls_back_to_the_old_node() {
    for step in WINDOW {
        for (fixture, to) in [("containerd-1.7", "1.31"), ("docker-20.10", "1.23")] {
            let s = setup(fixture, to);
            let before = snapshot(&s);
            let interrupt = flag();
            let fake = FakeNode::new(interrupt);
            fake.fault.set(Fault::Fail(step));
            let r = rehash::upgrade(&options(&s, interrupt), &fake).unwrap();
            let what = format!("{fixture}, {step:?} fails");
            match &r.result {
                UpgradeResult::RolledBack { step: at, cause } => {
                    assert_eq!(*at, step, "{what}");
                    assert!(cause.contains("injected"), "{what}: {cause}");
                }
                other => panic!("{what}: {other:?}"),
            }
            assert!(fake.safe(), "{what}: kubelet and runtime run");
            assert_same(&before, &s, &what);
            assert_eq!(r.state.phase, Phase::RolledBack, "{what}");
        }
    }
}

#[test]
fn a_signal_at_each_step_goes_back_to_a_safe_state() {
    for step in WINDOW {
        let s = setup("containerd-1.7", "1.31");
        let before = snapshot(&s);
        let interrupt = flag();
        let fake = FakeNode::new(interrupt);
        fake.fault.set(Fault::Signal(step));
        let r = rehash::upgrade(&options(&s, interrupt), &fake).unwrap();
        let what = format!("signal at {step:?}");
        match &r.result {
            UpgradeResult::RolledBack { cause, .. } => {
                assert!(cause.contains("interrupted"), "{what}: {cause}")
            }
            // A signal during the last step, once the kubelet answered, finds nothing left
            // to do: the node is upgraded and safe.
            UpgradeResult::Done => {
                assert_eq!(step, Step::WaitHealthy, "{what}");
                assert!(fake.safe());
                continue;
            }
            other => panic!("{what}: {other:?}"),
        }
        assert!(fake.safe(), "{what}: kubelet and runtime run");
        assert_same(&before, &s, &what);
        // A second signal while going back changes nothing: undo steps are never cut short.
        assert!(interrupt.load(Ordering::SeqCst));
    }
}

/// Kills the run at `step` (the state file stays as last written, unfinished), then runs
/// `upgrade` again with the same options, or `rollback --state`.
fn killed_then_rerun(
    s: &Setup,
    fake: &FakeNode,
    interrupt: &'static AtomicBool,
    step: Step,
    rerun_with_rollback: bool,
) -> (String, rehash::UpgradeReport) {
    fake.fault.set(Fault::Kill(step));
    let opts = options(s, interrupt);
    let died = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rehash::upgrade(&opts, fake)
    }));
    assert!(died.is_err(), "killed at {step:?}");
    let left = rehash::UpgradeState::read(&s.state).unwrap().unwrap();
    assert!(left.unfinished(), "{step:?}: {:?}", left.phase);
    fake.fault.set(Fault::None);
    let what = format!("killed at {step:?}, rerun with rollback={rerun_with_rollback}");
    let r = if rerun_with_rollback {
        rehash::upgrade::rollback_state(
            &s.state,
            &s.node.location,
            "http://fake/healthz",
            fake,
            interrupt,
        )
        .unwrap()
    } else {
        rehash::upgrade(&opts, fake).unwrap()
    };
    (what, r)
}

#[test]
fn killed_at_each_step_the_next_run_finishes_the_job() {
    for step in WINDOW {
        for rerun_with_rollback in [false, true] {
            let s = setup("containerd-1.7", "1.31");
            let before = snapshot(&s);
            let interrupt = flag();
            let fake = FakeNode::new(interrupt);
            let (what, r) = killed_then_rerun(&s, &fake, interrupt, step, rerun_with_rollback);
            assert!(fake.safe(), "{what}: kubelet and runtime run");
            let patched = step > Step::Patch;
            if patched && !rerun_with_rollback {
                check_done(&s, &fake, &r, &what);
            } else {
                assert!(
                    matches!(r.result, UpgradeResult::RolledBack { .. }),
                    "{what}: {:?}",
                    r.result
                );
                assert_same(&before, &s, &what);
            }
            assert_eq!(r.state.resumed_by.len(), 1, "{what}");
        }
    }
}

#[test]
fn a_runtime_unit_that_kills_its_containers_is_caught_before_anything_is_written() {
    let s = setup("containerd-1.7", "1.31");
    let before = snapshot(&s);
    let interrupt = flag();
    let mut fake = FakeNode::new(interrupt);
    fake.runtime_stop_kills = true;
    let r = rehash::upgrade(&options(&s, interrupt), &fake).unwrap();
    match &r.result {
        UpgradeResult::RolledBack { step, cause } => {
            assert_eq!(*step, Step::CheckContainers);
            assert!(cause.contains("nothing was written"), "{cause}");
            assert!(
                cause.contains("stopping the runtime killed") && cause.contains("KillMode=process"),
                "containers alive until the runtime's stop are blamed on it: {cause}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(fake.safe());
    assert_same(&before, &s, "runtime stop killed the containers");
    assert!(
        !s.backup.join("store").exists(),
        "no backup: nothing was written"
    );
}

/// Issue 51: a watched container that died before the runtime was stopped is not blamed on
/// the runtime's stop (its KillMode is not the cause); the window still stops before
/// anything is written.
#[test]
fn containers_dead_before_the_runtime_stop_are_not_blamed_on_it() {
    let s = setup("containerd-1.7", "1.31");
    let before = snapshot(&s);
    let interrupt = flag();
    let mut fake = FakeNode::new(interrupt);
    fake.kubelet_stop_kills = true;
    let r = rehash::upgrade(&options(&s, interrupt), &fake).unwrap();
    match &r.result {
        UpgradeResult::RolledBack { step, cause } => {
            assert_eq!(*step, Step::CheckContainers);
            assert!(
                cause.contains("died in the window before the runtime was stopped")
                    && !cause.contains("KillMode")
                    && cause.contains("nothing was written"),
                "a container dead before the runtime's stop is not blamed on it: {cause}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(fake.safe());
    assert_same(&before, &s, "containers died before the runtime's stop");
    assert!(
        !s.backup.join("store").exists(),
        "no backup: nothing was written"
    );
}

/// A failed step's error keeps its class to the report, and the state records its text as
/// the step said it: a service command that failed is a failure, containers the runtime's
/// stop killed a refusal.
#[test]
fn a_failed_step_keeps_its_error_class() {
    let s = setup("containerd-1.7", "1.31");
    let interrupt = flag();
    let fake = FakeNode::new(interrupt);
    fake.fault.set(Fault::Fail(Step::Patch));
    let r = rehash::upgrade(&options(&s, interrupt), &fake).unwrap();
    assert!(
        matches!(
            r.result,
            UpgradeResult::RolledBack {
                step: Step::Patch,
                ..
            }
        ),
        "{:?}",
        r.result
    );
    assert_eq!(r.cause_class, Some(ErrorClass::Failure));
    let failure = r.state.failure.as_ref().expect("recorded");
    assert_eq!(failure.cause, "injected failure at Patch");
    let rec = r.state.steps.iter().find(|s| s.step == Step::Patch);
    assert_eq!(
        rec.and_then(|s| s.error.as_deref()),
        Some("injected failure at Patch")
    );

    let s = setup("containerd-1.7", "1.31");
    let interrupt = flag();
    let mut fake = FakeNode::new(interrupt);
    fake.runtime_stop_kills = true;
    let r = rehash::upgrade(&options(&s, interrupt), &fake).unwrap();
    assert!(
        matches!(
            r.result,
            UpgradeResult::RolledBack {
                step: Step::CheckContainers,
                ..
            }
        ),
        "{:?}",
        r.result
    );
    assert_eq!(r.cause_class, Some(ErrorClass::Refused));
}

#[test]
fn a_kubelet_that_never_gets_healthy_is_rolled_back_within_the_budget() {
    let s = setup("containerd-1.7", "1.31");
    let before = snapshot(&s);
    let interrupt = flag();
    let fake = FakeNode::new(interrupt);
    fake.sick_next_start.set(true);
    let mut opts = options(&s, interrupt);
    // The prediction adds three times the preflight plan's measured wall-clock time to the
    // services' times: 5 s leaves room for a plan slowed down by a loaded machine (2 s refused
    // the fast node below whenever the plan took more than about 0.45 s), and is still far
    // below what the defaults predict (20 s).
    opts.budget = Some(Duration::from_secs(5));
    // The defaults predict more than 5 s: measured figures of an earlier run say otherwise.
    let mut earlier = rehash::UpgradeState::read(&s.state).unwrap();
    assert!(earlier.is_none());
    let r = rehash::upgrade(&opts, &fake).unwrap();
    assert!(
        matches!(r.result, UpgradeResult::Refused(ref w) if w.contains("budget")),
        "{:?}",
        r.result
    );
    assert_eq!(
        fake.calls.borrow().len(),
        0,
        "refused before anything stopped"
    );
    // A node measured fast before fits 5 s; its kubelet then never answers.
    earlier = rehash::UpgradeState::read(&s.state).unwrap();
    let mut st = earlier.unwrap();
    st.measured = rehash::upgrade::Measured {
        stop_kubelet_ms: Some(10.0),
        stop_runtime_ms: Some(10.0),
        start_runtime_ms: Some(10.0),
        kubelet_healthy_ms: Some(100.0),
    };
    st.write(&s.state).unwrap();
    // the patch can leave the report in the backup dir: it must be empty for a new run
    let r = rehash::upgrade(&opts, &fake).unwrap();
    match &r.result {
        UpgradeResult::RolledBack { step, cause } => {
            assert_eq!(*step, Step::WaitHealthy);
            assert!(cause.contains("budget"), "{cause}");
        }
        other => panic!("{other:?}"),
    }
    assert!(
        fake.safe() && !fake.never_healthy.get(),
        "the old kubelet answers"
    );
    assert_same(&before, &s, "kubelet never healthy");
}

#[test]
fn preflight_refusals_stop_nothing() {
    // wrong minor
    let s = setup("containerd-1.7", "1.31");
    std::fs::write(&s.new_kubelet, new_kubelet_script("1.30.4")).unwrap();
    let before = snapshot(&s);
    let interrupt = flag();
    let fake = FakeNode::new(interrupt);
    let r = rehash::upgrade(&options(&s, interrupt), &fake).unwrap();
    assert!(
        matches!(&r.result, UpgradeResult::Refused(w) if w.contains("not 1.31")),
        "{:?}",
        r.result
    );
    assert!(fake.calls.borrow().is_empty());
    assert_same(&before, &s, "wrong kubelet minor");

    // Docker across 1.24 without cri-dockerd: the new kubelet would find no runtime
    let s = setup("docker-20.10", "1.31");
    let before = snapshot(&s);
    let interrupt = flag();
    let fake = FakeNode::new(interrupt);
    let r = rehash::upgrade(&options(&s, interrupt), &fake).unwrap();
    assert!(
        matches!(&r.result, UpgradeResult::Refused(w) if w.contains("[cri-dockerd-missing]")),
        "{:?}",
        r.result
    );
    assert!(fake.calls.borrow().is_empty(), "nothing stopped");
    assert_same(&before, &s, "docker across 1.24 without cri-dockerd");

    // a flag the new kubelet removed
    let s = setup("containerd-1.7", "1.31");
    let interrupt = flag();
    let mut fake = FakeNode::new(interrupt);
    fake.kubelet_args.push("--network-plugin=cni".into());
    let r = rehash::upgrade(&options(&s, interrupt), &fake).unwrap();
    assert!(
        matches!(&r.result, UpgradeResult::Refused(w) if w.contains("does not accept") && w.contains("network-plugin")),
        "{:?}",
        r.result
    );
    assert!(fake.calls.borrow().is_empty());

    // some containers restart whatever we do, not accepted (containerd-1.7 has one drifted)
    let s = setup("containerd-1.7", "1.31");
    let interrupt = flag();
    let fake = FakeNode::new(interrupt);
    let mut opts = options(&s, interrupt);
    opts.accept_restarts = false;
    let r = rehash::upgrade(&opts, &fake).unwrap();
    assert!(
        matches!(&r.result, UpgradeResult::RestartsNotAccepted(_)),
        "{:?}",
        r.result
    );
    assert!(fake.calls.borrow().is_empty());
    assert_eq!(r.state.phase, Phase::RestartsNotAccepted);

    // a backup directory that is not empty
    let s = setup("containerd-1.7", "1.31");
    std::fs::create_dir_all(s.backup.join("store")).unwrap();
    let interrupt = flag();
    let fake = FakeNode::new(interrupt);
    let r = rehash::upgrade(&options(&s, interrupt), &fake).unwrap();
    assert!(
        matches!(&r.result, UpgradeResult::Refused(w) if w.contains("not empty")),
        "{:?}",
        r.result
    );

    // a signal before the window
    let s = setup("containerd-1.7", "1.31");
    let interrupt = flag();
    interrupt.store(true, Ordering::SeqCst);
    let fake = FakeNode::new(interrupt);
    let r = rehash::upgrade(&options(&s, interrupt), &fake).unwrap();
    assert!(
        matches!(&r.result, UpgradeResult::Refused(_)),
        "{:?}",
        r.result
    );
    assert!(fake.calls.borrow().is_empty());

    // a pods file that is not JSON: a usage error, nothing stopped
    let s = setup("containerd-1.7", "1.31");
    let interrupt = flag();
    let fake = FakeNode::new(interrupt);
    let mut opts = options(&s, interrupt);
    opts.pods = b"not json".to_vec();
    let e = rehash::upgrade(&opts, &fake).unwrap_err();
    assert_eq!(e.class(), rehash::ErrorClass::Usage, "{e}");
    assert!(fake.calls.borrow().is_empty());
}

#[test]
fn when_going_back_fails_too_the_result_says_so() {
    let s = setup("containerd-1.7", "1.31");
    let interrupt = flag();
    let fake = FakeNode::new(interrupt);
    fake.fault.set(Fault::Fail(Step::VerifyLive));
    fake.starts_fail.set(true);
    // starting fails only after the window's own start: let the forward start succeed
    struct StartsFailAfterVerify<'a>(&'a FakeNode);
    impl NodeControl for StartsFailAfterVerify<'_> {
        fn stop_kubelet(&self) -> Result<(), NodeError> {
            self.0.stop_kubelet()
        }
        fn start_kubelet(&self) -> Result<(), NodeError> {
            self.0.start_kubelet()
        }
        fn stop_runtime(&self) -> Result<(), NodeError> {
            self.0.stop_runtime()
        }
        fn start_runtime(&self) -> Result<(), NodeError> {
            if self.0.calls.borrow().iter().any(|c| c == "start-runtime") {
                return self.0.start_runtime();
            }
            self.0.call("start-runtime");
            self.0.runtime_up.set(true);
            Ok(())
        }
        fn runtime_keeps_containers(&self, k: RuntimeKind, e: &str) -> Result<String, NodeError> {
            self.0.runtime_keeps_containers(k, e)
        }
        fn kubelet_pid(&self) -> Option<u32> {
            self.0.kubelet_pid()
        }
        fn cmdline(&self, pid: u32) -> Option<Vec<String>> {
            self.0.cmdline(pid)
        }
        fn pid_alive(&self, pid: u32) -> bool {
            self.0.pid_alive(pid)
        }
        fn run_binary(&self, b: &Path, a: &[String]) -> Result<(bool, String), NodeError> {
            self.0.run_binary(b, a)
        }
        fn healthy(&self, u: &str) -> bool {
            self.0.healthy(u)
        }
        fn runtime_answers(&self, k: RuntimeKind, e: &str) -> bool {
            self.0.runtime_answers(k, e)
        }
        fn before(&self, step: Step) -> Result<(), NodeError> {
            self.0.before(step)
        }
    }
    let node = StartsFailAfterVerify(&fake);
    let r = rehash::upgrade(&options(&s, interrupt), &node).unwrap();
    match &r.result {
        UpgradeResult::Failed { step, cause } => {
            assert_eq!(*step, Step::VerifyLive);
            assert!(cause.contains("starting the runtime"), "{cause}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(r.state.phase, Phase::Failed);
    assert!(!r.state.rollback_errors.is_empty());
    // the store and the binary were still put back
    assert_eq!(std::fs::read(&s.kubelet).unwrap(), OLD_KUBELET);
    assert!(pending(&s) > 0, "the store holds the old hashes again");
}

#[test]
fn killed_while_going_back_the_next_run_goes_on_back() {
    for undo in [
        Step::UndoStopRuntime,
        Step::UndoStore,
        Step::UndoKubeletBinary,
        Step::UndoStartRuntime,
        Step::UndoStartKubelet,
    ] {
        let s = setup("containerd-1.7", "1.31");
        let before = snapshot(&s);
        let interrupt = flag();
        let fake = FakeNode::new(interrupt);
        // verify --live fails after the runtime started on the patched store; going back dies
        fake.fault.set(Fault::Fail(Step::VerifyLive));
        fake.kill_also.set(Some(undo));
        let opts = options(&s, interrupt);
        let died = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            rehash::upgrade(&opts, &fake)
        }));
        assert!(died.is_err(), "killed at {undo:?}");
        let left = rehash::UpgradeState::read(&s.state).unwrap().unwrap();
        assert_eq!(left.phase, Phase::RollingBack, "{undo:?}");
        fake.fault.set(Fault::None);
        fake.kill_also.set(None);
        let r = rehash::upgrade(&opts, &fake).unwrap();
        let what = format!("killed at {undo:?} while going back");
        assert!(
            matches!(
                r.result,
                UpgradeResult::RolledBack {
                    step: Step::VerifyLive,
                    ..
                }
            ),
            "{what}: {:?}",
            r.result
        );
        assert!(fake.safe(), "{what}: kubelet and runtime run");
        assert_same(&before, &s, &what);
    }
}

/// The bundled Docker 20.10 node (kubelet 1.14) as it is before the switch: a cri-dockerd
/// binary under its root that answers `--version` as 0.4.1 does, and dockershim's checkpoint
/// (dockershim's checksum) for every running sandbox. Returns the sandbox ids.
fn dockershim_node(s: &Setup) -> Vec<String> {
    let bin = s.node.dir.join("usr/bin/cri-dockerd");
    std::fs::create_dir_all(bin.parent().unwrap()).unwrap();
    std::fs::write(&bin, "#!/bin/sh\necho 'cri-dockerd 0.4.1 (v0.4.1)'\n").unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let store = s.node.location.open().unwrap();
    let plan = Plan::build(&s.pods, store.as_ref(), From::Auto, s.to).unwrap();
    let dir = s.node.dir.join("var/lib/dockershim/sandbox");
    std::fs::create_dir_all(&dir).unwrap();
    let mut ids = Vec::new();
    for r in plan
        .records
        .iter()
        .filter(|r| r.kind == RecordClass::Sandbox && r.pid.is_some())
    {
        let cp = SandboxCheckpoint {
            version: "v1".into(),
            name: r.pod.clone().unwrap(),
            namespace: r.namespace.clone().unwrap(),
            data: CheckpointData {
                port_mappings: None,
                host_network: false,
            },
            checksum: 0,
        };
        std::fs::write(dir.join(&r.id), cp.for_dockershim()).unwrap();
        ids.push(r.id.clone());
    }
    assert!(!ids.is_empty(), "the bundled node runs sandboxes");
    std::fs::create_dir_all(s.node.dir.join("var/lib/kubelet")).unwrap();
    std::fs::write(flags_file(s), DOCKERSHIM_FLAGS).unwrap();
    ids
}

/// What kubeadm 1.23 writes into a Docker node's kubelet flag file.
const DOCKERSHIM_FLAGS: &str =
    "KUBELET_KUBEADM_ARGS=\"--network-plugin=cni --pod-infra-container-image=k8s.gcr.io/pause:3.6\"\n";

fn flags_file(s: &Setup) -> PathBuf {
    s.node.dir.join("var/lib/kubelet/kubeadm-flags.env")
}

/// The running kubelet of a dockershim node, started with the flag file's arguments (the
/// new kubelet's script refuses `--network-plugin`).
fn dockershim_kubelet(fake: &mut FakeNode) {
    fake.kubelet_args = vec![
        "/usr/bin/kubelet".into(),
        "--config=/var/lib/kubelet/config.yaml".into(),
        "--network-plugin=cni".into(),
        "--pod-infra-container-image=k8s.gcr.io/pause:3.6".into(),
    ];
}

/// The flag file as kubelet 1.24 gets it after the switch: the node's own socket path (not
/// the test root's: the kubelet runs on the node).
const SWITCHED_FLAGS: &str = "KUBELET_KUBEADM_ARGS=\"--pod-infra-container-image=k8s.gcr.io/pause:3.6 --container-runtime=remote --container-runtime-endpoint=unix:///var/run/cri-dockerd.sock\"\n";

#[test]
fn docker_across_1_24_copies_dockershims_checkpoints_and_a_later_failure_removes_them() {
    let s = setup("docker-20.10", "1.24");
    let ids = dockershim_node(&s);
    let target = s.node.dir.join("var/lib/cri-dockerd/sandbox");
    let interrupt = flag();
    let mut fake = FakeNode::new(interrupt);
    dockershim_kubelet(&mut fake);
    let r = rehash::upgrade(&options(&s, interrupt), &fake).unwrap();
    assert_eq!(r.result, UpgradeResult::Done, "{:#?}", r.state);
    assert_eq!(
        std::fs::read_to_string(flags_file(&s)).unwrap(),
        SWITCHED_FLAGS,
        "the kubelet's flag file loses --network-plugin and names cri-dockerd"
    );
    assert_eq!(
        std::fs::read_to_string(s.backup.join("kubelet/flags-0")).unwrap(),
        DOCKERSHIM_FLAGS,
        "the original flag file is kept in the backup"
    );
    let steps: Vec<Step> = r.state.steps.iter().map(|x| x.step).collect();
    assert!(
        steps
            .windows(2)
            .any(|w| w == [Step::InstallKubelet, Step::KubeletFlags]),
        "the flags are rewritten right after the binary's install: {steps:?}"
    );
    let shim = s.node.dir.join("var/lib/dockershim/sandbox");
    for id in &ids {
        let original = std::fs::read(shim.join(id)).unwrap();
        // with cri-dockerd's checksum, not dockershim's: a plain copy is deleted as corrupted
        assert_eq!(
            std::fs::read(target.join(id)).unwrap(),
            SandboxCheckpoint::parse(&original)
                .unwrap()
                .for_cri_dockerd(),
            "{id}"
        );
    }
    let endpoint = format!(
        "unix://{}",
        s.node.dir.join("var/run/cri-dockerd.sock").display()
    );
    assert_eq!(
        r.state.cri_dockerd_endpoint.as_deref(),
        Some(endpoint.as_str())
    );
    // verified through cri-dockerd, as kubelet 1.24 will talk to it
    assert_eq!(*fake.verified_at.borrow(), [Some(endpoint)]);
    assert!(
        fake.told_switch.get(),
        "the node is told its runtime includes cri-dockerd"
    );

    // The same node again, failing after the patch: the copies go, the originals stay.
    for failing in [
        Step::InstallKubelet,
        Step::KubeletFlags,
        Step::VerifyLive,
        Step::WaitHealthy,
    ] {
        let s = setup("docker-20.10", "1.24");
        dockershim_node(&s);
        let target = s.node.dir.join("var/lib/cri-dockerd/sandbox");
        let before = snapshot(&s);
        let interrupt = flag();
        let mut fake = FakeNode::new(interrupt);
        dockershim_kubelet(&mut fake);
        fake.fault.set(Fault::Fail(failing));
        let r = rehash::upgrade(&options(&s, interrupt), &fake).unwrap();
        assert!(
            matches!(r.result, UpgradeResult::RolledBack { step, .. } if step == failing),
            "{failing:?}: {:#?}",
            r.state
        );
        assert!(r.state.done.patched, "{failing:?}: the patch ran");
        assert!(fake.safe(), "{failing:?}: kubelet and runtime run");
        // the snapshot covers the node's whole root: dockershim's checkpoints byte for byte,
        // and no file left in cri-dockerd's
        assert_same(&before, &s, &format!("{failing:?}"));
        assert!(
            !target.exists() || std::fs::read_dir(&target).unwrap().next().is_none(),
            "{failing:?}: cri-dockerd's sandbox directory is empty"
        );
    }
}

#[test]
fn a_running_cri_dockerd_is_stopped_with_the_runtime_and_refused_in_the_window_if_it_is_not() {
    for stop_leaves_it in [false, true] {
        let s = setup("docker-20.10", "1.24");
        dockershim_node(&s);
        let sock = s.node.dir.join("var/run/cri-dockerd.sock");
        std::fs::create_dir_all(sock.parent().unwrap()).unwrap();
        let before = snapshot(&s);
        let interrupt = flag();
        let mut fake = FakeNode::new(interrupt);
        dockershim_kubelet(&mut fake);
        fake.stop_leaves_cri_dockerd = stop_leaves_it;
        *fake.cri_dockerd.borrow_mut() =
            Some(std::os::unix::net::UnixListener::bind(&sock).unwrap());
        let r = rehash::upgrade(&options(&s, interrupt), &fake).unwrap();
        assert!(fake.safe(), "kubelet and runtime run");
        if stop_leaves_it {
            // written into while cri-dockerd runs, its checkpoints would race its own writes
            match &r.result {
                UpgradeResult::RolledBack { step, cause } => {
                    assert_eq!(*step, Step::Patch, "{cause}");
                    assert!(cause.contains("cri-dockerd-running"), "{cause}");
                }
                other => panic!("{other:?}"),
            }
            assert_same(&before, &s, "cri-dockerd still running at the patch");
        } else {
            // the preflight runs with everything up: the window stops cri-dockerd
            assert_eq!(r.result, UpgradeResult::Done, "{:#?}", r.state);
            assert!(
                r.state
                    .notes
                    .iter()
                    .any(|n| n.contains("cri-dockerd answers")),
                "{:?}",
                r.state.notes
            );
        }
    }
}

#[test]
fn killed_across_the_switch_the_flag_file_goes_forward_or_back_with_the_store() {
    for step in [Step::KubeletFlags, Step::StartRuntime, Step::WaitHealthy] {
        for rerun_with_rollback in [false, true] {
            let s = setup("docker-20.10", "1.24");
            dockershim_node(&s);
            let before = snapshot(&s);
            let interrupt = flag();
            let mut fake = FakeNode::new(interrupt);
            dockershim_kubelet(&mut fake);
            let (what, r) = killed_then_rerun(&s, &fake, interrupt, step, rerun_with_rollback);
            assert!(fake.safe(), "{what}: kubelet and runtime run");
            if rerun_with_rollback {
                assert!(
                    matches!(r.result, UpgradeResult::RolledBack { .. }),
                    "{what}: {:?}",
                    r.result
                );
                // the whole node root, the flag file included, byte for byte
                assert_same(&before, &s, &what);
            } else {
                assert_eq!(r.result, UpgradeResult::Done, "{what}: {:#?}", r.state);
                assert_eq!(
                    std::fs::read_to_string(flags_file(&s)).unwrap(),
                    SWITCHED_FLAGS,
                    "{what}: the finishing run writes the flag file the killed one planned"
                );
            }
        }
    }
}

#[test]
fn the_kubelet_flags_must_be_rewritable_or_left_to_the_operator() {
    // a removed flag on the running kubelet's command line that no flag file sets (the
    // unit's ExecStart): refused, nothing stopped
    let s = setup("docker-20.10", "1.24");
    dockershim_node(&s);
    std::fs::write(flags_file(&s), "KUBELET_KUBEADM_ARGS=\"--v=2\"\n").unwrap();
    let before = snapshot(&s);
    let interrupt = flag();
    let mut fake = FakeNode::new(interrupt);
    dockershim_kubelet(&mut fake);
    let r = rehash::upgrade(&options(&s, interrupt), &fake).unwrap();
    match &r.result {
        UpgradeResult::Refused(why) => assert!(
            why.contains("--network-plugin") && why.contains("--kubelet-flags-file"),
            "the refusal names the flag and the option: {why}"
        ),
        other => panic!("{other:?}"),
    }
    assert!(fake.calls.borrow().is_empty(), "nothing stopped");
    assert_same(&before, &s, "refused");

    // --keep-kubelet-flags: the new kubelet is checked with the command line as it is, and
    // refuses --network-plugin
    let s = setup("docker-20.10", "1.24");
    dockershim_node(&s);
    let before = snapshot(&s);
    let interrupt = flag();
    let mut fake = FakeNode::new(interrupt);
    dockershim_kubelet(&mut fake);
    let mut opts = options(&s, interrupt);
    opts.kubelet_flags = KubeletFlags::Keep;
    let r = rehash::upgrade(&opts, &fake).unwrap();
    match &r.result {
        UpgradeResult::Refused(why) => assert!(
            why.contains("does not accept this node's kubelet command line"),
            "{why}"
        ),
        other => panic!("{other:?}"),
    }
    assert_same(&before, &s, "kept flags refused");

    // An upgrade of a dockershim node given one flag file holding `text` (the node's kubeadm
    // file sets no flag): (the setup, the given file, the node before, the report).
    fn with_given_flags_file(
        text: &str,
    ) -> (
        Setup,
        std::path::PathBuf,
        BTreeMap<std::path::PathBuf, Vec<u8>>,
        rehash::upgrade::UpgradeReport,
    ) {
        let s = setup("docker-20.10", "1.31");
        dockershim_node(&s);
        std::fs::write(flags_file(&s), "# no flags here\n").unwrap();
        let mine = s.node.tmp.path().join("kubelet.env");
        std::fs::write(&mine, text).unwrap();
        let before = snapshot(&s);
        let interrupt = flag();
        let mut fake = FakeNode::new(interrupt);
        dockershim_kubelet(&mut fake);
        fake.kubelet_args.retain(|a| !a.starts_with("--pod-infra"));
        let mut opts = options(&s, interrupt);
        opts.kubelet_flags = KubeletFlags::Files(vec![mine.clone()]);
        let r = rehash::upgrade(&opts, &fake).unwrap();
        (s, mine, before, r)
    }

    // a given file without any flag gets the new ones; the node's kubeadm file is left alone
    let (s, mine, _, r) = with_given_flags_file("KUBELET_EXTRA_ARGS=\"--network-plugin=cni\"\n");
    assert_eq!(r.result, UpgradeResult::Done, "{:#?}", r.state);
    assert_eq!(
        std::fs::read_to_string(&mine).unwrap(),
        "KUBELET_EXTRA_ARGS=\"--container-runtime-endpoint=unix:///var/run/cri-dockerd.sock\"\n",
        "kubelet 1.31 has no --container-runtime"
    );
    assert_eq!(
        std::fs::read_to_string(flags_file(&s)).unwrap(),
        "# no flags here\n"
    );

    // issue 35: a given file whose dockershim flag sits on a line the rewrite cannot parse
    // (`export`) is refused in the preflight, naming the line; nothing stopped or written
    let (s, mine, before, r) =
        with_given_flags_file("export KUBELET_EXTRA_ARGS=\"--network-plugin=cni\"\n");
    match &r.result {
        UpgradeResult::Refused(why) => assert!(
            why.contains("kubelet-flags-unparsed")
                && why.contains("line 1 (export KUBELET_EXTRA_ARGS"),
            "{why}"
        ),
        other => panic!("an unparsed flag line: {other:?}"),
    }
    assert_same(&before, &s, "unparsed flag line refused");
    assert_eq!(
        std::fs::read_to_string(&mine).unwrap(),
        "export KUBELET_EXTRA_ARGS=\"--network-plugin=cni\"\n",
        "the given file is untouched"
    );
}

#[test]
fn a_pod_the_new_kubelet_rejects_at_admission_refuses_the_upgrade_unless_restarts_are_accepted() {
    // pod i selects a label the Node does not have: kubelet 1.31 rejects it when it starts
    let mut s = setup("containerd-1.7", "1.31");
    let mut pods: serde_json::Value = serde_json::from_slice(&s.pods).unwrap();
    let item = &mut pods["items"][0];
    item["spec"]["nodeSelector"] = serde_json::json!({"disktype": "ssd"});
    let name = format!(
        "{}/{}",
        item["metadata"]["namespace"].as_str().unwrap(),
        item["metadata"]["name"].as_str().unwrap()
    );
    s.pods = serde_json::to_vec(&pods).unwrap();
    let node_name = pods["items"][0]["spec"]["nodeName"]
        .as_str()
        .unwrap_or("node");
    let node = serde_json::json!({
        "kind": "Node",
        "metadata": {"name": node_name, "labels": {}},
        "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "250", "ephemeral-storage": "1Ti"}}
    });
    let with_node = |opts: &mut UpgradeOptions| {
        opts.node_files.node_object = Some(
            rehash::admission::NodeObject::parse(&serde_json::to_vec(&node).unwrap()).unwrap(),
        );
    };

    let before = snapshot(&s);
    let interrupt = flag();
    let fake = FakeNode::new(interrupt);
    let mut opts = options(&s, interrupt);
    with_node(&mut opts);
    opts.accept_restarts = false;
    let r = rehash::upgrade(&opts, &fake).unwrap();
    assert!(
        matches!(&r.result, UpgradeResult::Refused(w) if w.contains("[kubelet-rejects-pod-at-admission]") && w.contains(&name)),
        "without --accept-restarts a rejected pod refuses the upgrade, naming it: {:?}",
        r.result
    );
    assert!(fake.calls.borrow().is_empty(), "nothing stopped");
    assert_same(&before, &s, "a rejected pod without --accept-restarts");

    let interrupt = flag();
    let fake = FakeNode::new(interrupt);
    let mut opts = options(&s, interrupt);
    with_node(&mut opts);
    let r = rehash::upgrade(&opts, &fake).unwrap();
    assert!(
        matches!(&r.result, UpgradeResult::Done),
        "--accept-restarts goes through the window knowing: {:?}",
        r.result
    );
}
