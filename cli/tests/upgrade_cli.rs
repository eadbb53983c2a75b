//! `kubelet-rehash upgrade` without daemons: bad input is exit 2 before anything is read, a
//! preflight refusal is exit 3 with nothing stopped (the service commands never run), and
//! `-o json` prints the state file (docs/upgrade.md). The window itself is tested in
//! rehash/tests/upgrade_faults.rs and, on real daemons, in upgrade_live.rs.

mod under_test;

use serde_json::Value;
use std::path::Path;
use std::process::Command;
use under_test::bin;

fn fixture_copy(t: &Path) -> std::path::PathBuf {
    let src = testtools::fixtures_dir().join("nodes/containerd-1.7");
    assert!(Command::new("cp")
        .arg("-a")
        .arg(&src)
        .arg(t)
        .status()
        .unwrap()
        .success());
    t.join("containerd-1.7")
}

/// The upgrade command line for the fixture copy, every service command touching a marker.
fn args(t: &Path, node: &Path) -> Vec<String> {
    let marker = |what: &str| format!("touch {}/ran-{what}", t.display());
    [
        "upgrade",
        "--pods",
        &node.join("pods.json").display().to_string(),
        "--to",
        "1.31",
        "--root",
        &node.join("var/lib/containerd").display().to_string(),
        "--runtime-socket",
        &t.join("none.sock").display().to_string(),
        "--kubelet-dir",
        &t.join("no-kubelet-dir").display().to_string(),
        "--manifests",
        &t.join("no-manifests").display().to_string(),
        "--kubelet-path",
        &t.join("kubelet").display().to_string(),
        "--state",
        &t.join("state.json").display().to_string(),
        "--backup-dir",
        &t.join("backup").display().to_string(),
        "--stop-kubelet",
        &marker("stop-kubelet"),
        "--start-kubelet",
        &marker("start-kubelet"),
        "--stop-runtime",
        &marker("stop-runtime"),
        "--start-runtime",
        &marker("start-runtime"),
        "--accept-restarts",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

fn run(args: &[String]) -> (i32, String, String) {
    let o = Command::new(bin()).args(args).output().unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn nothing_ran(t: &Path) {
    for e in std::fs::read_dir(t).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        assert!(!name.starts_with("ran-"), "a service command ran: {name}");
    }
}

#[test]
fn a_preflight_refusal_stops_nothing_and_says_why_in_the_state() {
    let t = tempfile::tempdir().unwrap();
    let node = fixture_copy(t.path());
    for d in ["no-kubelet-dir", "no-manifests"] {
        std::fs::create_dir_all(t.path().join(d)).unwrap();
    }
    let before =
        std::fs::read(node.join("var/lib/containerd/io.containerd.metadata.v1.bolt/meta.db"))
            .unwrap();
    let mut a = args(t.path(), &node);
    a.extend(["-o".into(), "json".into()]);
    let (code, stdout, stderr) = run(&a);
    // The copied node's containers do not run on this machine: their pids do not exist.
    assert_eq!(code, 3, "{stdout}\n{stderr}");
    assert!(
        stderr.contains("refused, nothing stopped") && stderr.contains("process does not exist"),
        "{stderr}"
    );
    let printed: Value = serde_json::from_str(&stdout).unwrap();
    let on_disk: Value =
        serde_json::from_slice(&std::fs::read(t.path().join("state.json")).unwrap()).unwrap();
    assert_eq!(printed, on_disk, "-o json prints the state file");
    assert_eq!(on_disk["format"], 1);
    assert_eq!(on_disk["phase"], "refused");
    assert_eq!(on_disk["failure"]["step"], "preflight");
    assert_eq!(on_disk["steps"][0]["outcome"], "failed");
    assert_eq!(on_disk["from"], "1.30");
    assert!(on_disk["summary"]["containers"].as_u64().unwrap() > 0);
    nothing_ran(t.path());
    assert!(!t.path().join("backup").exists());
    assert_eq!(
        std::fs::read(node.join("var/lib/containerd/io.containerd.metadata.v1.bolt/meta.db"))
            .unwrap(),
        before
    );
}

#[test]
fn bad_input_is_exit_2_before_anything_is_read() {
    let t = tempfile::tempdir().unwrap();
    let node = fixture_copy(t.path());
    // the node's own directories exist: each case below fails for its own reason alone
    for d in ["no-kubelet-dir", "no-manifests"] {
        std::fs::create_dir_all(t.path().join(d)).unwrap();
    }
    let base = args(t.path(), &node);
    let with = |extra: &[&str]| {
        let mut a = base.clone();
        a.extend(extra.iter().map(|s| s.to_string()));
        a
    };
    for (what, a) in [
        ("a budget of 0", with(&["--budget", "0"])),
        // Duration::from_secs_f64 panicked on it (exit 101), nothing stopped
        ("a budget of 1e30", with(&["--budget", "1e30"])),
        ("a budget of NaN", with(&["--budget", "NaN"])),
        ("a hold of 0 s", with(&["--hold-ready-max", "0"])),
        ("a hold of 1e30 s", with(&["--hold-ready-max", "1e30"])),
        (
            "https healthz",
            with(&["--kubelet-healthz", "https://127.0.0.1:10250/healthz"]),
        ),
        ("unknown --to", with(&["--to", "1.99"])),
        // issue 35: exited 3 (a refusal) though a missing file is bad input
        (
            "a --kubelet-binary that is not there",
            with(&["--kubelet-binary", "/nonexistent/kubelet"]),
        ),
        (
            "a --kubelet-binary that is a directory",
            with(&["--kubelet-binary", "/"]),
        ),
    ] {
        let (code, _, stderr) = run(&a);
        assert_eq!(code, 2, "{what}: {stderr}");
        let flag = a[a.len() - 2].as_str();
        assert!(
            stderr.contains(flag),
            "{what}: the usage error names {flag}: {stderr}"
        );
    }
    // --pods with --kubeconfig (issue 36: one source of pods; with --pods the heartbeat is
    // renewed with the node's kubelet kubeconfig, found as without --pods)
    let (code, _, stderr) = run(&with(&["--kubeconfig", "/nonexistent/kubelet.conf"]));
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("--kubeconfig") && stderr.contains("--pods"),
        "the usage error names both flags: {stderr}"
    );
    nothing_ran(t.path());
    // a stop command without its start command
    let mut a = base.clone();
    let i = a.iter().position(|x| x == "--start-runtime").unwrap();
    a.drain(i..i + 2);
    let (code, _, stderr) = run(&a);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("go together"), "{stderr}");
    // a pods file that is not one
    std::fs::write(t.path().join("bad.json"), "not json").unwrap();
    let mut a = base.clone();
    let i = a.iter().position(|x| x == "--pods").unwrap();
    a[i + 1] = t.path().join("bad.json").display().to_string();
    let (code, _, stderr) = run(&a);
    assert_eq!(code, 2, "{stderr}");
    // a state file that is not one is never overwritten
    std::fs::write(t.path().join("state.json"), "{\"format\": 7}").unwrap();
    let (code, _, stderr) = run(&base);
    assert_eq!(code, 2, "{stderr}");
    assert_eq!(
        std::fs::read_to_string(t.path().join("state.json")).unwrap(),
        "{\"format\": 7}"
    );
    // rollback --state of no state file
    let (code, _, stderr) = run(&[
        "rollback".into(),
        "--state".into(),
        t.path().join("none.json").display().to_string(),
    ]);
    assert_eq!(code, 2, "{stderr}");
    nothing_ran(t.path());
}
