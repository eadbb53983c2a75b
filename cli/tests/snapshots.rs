//! What operators read is reviewed, not incidental: every `--help` text, the plan table and
//! the JSON report of each bundled node, and the patch report, as insta snapshots
//! (`cli/tests/snapshots/`). A change to any of them fails here until the new text is
//! accepted (`INSTA_UPDATE=always cargo test -p kubelet-rehash --test snapshots`, then review
//! the diff in git; or `cargo insta review`).
//!
//! The commands run inside each node's directory with relative paths, so no checkout path
//! appears in the output; timings and the temp backup path are redacted.

mod under_test;

use std::path::Path;
use std::process::Command;
use testtools::fixtures_dir;
use under_test::{kubelet_rehash, NODES};

/// Runs the binary in `dir` with a running check pointed at nothing.
fn run_in(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let out = kubelet_rehash()
        .current_dir(dir)
        .args(args)
        .args([
            "--runtime-socket",
            "no-runtime.sock",
            "--runtime-pidfile",
            "no-runtime.pid",
        ])
        .output()
        .expect("the binary runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).expect("stdout is UTF-8"),
        String::from_utf8(out.stderr).expect("stderr is UTF-8"),
    )
}

/// The report as printed, with every timing (the only part that changes run to run) replaced
/// by `"[ms]"`. Redacting by hand keeps the snapshot the report's own text: the workspace's
/// serde_json has `arbitrary_precision`, which insta's own JSON rendering would show.
fn without_timings(json: &str) -> String {
    let mut report: serde_json::Value = serde_json::from_str(json).expect("the report is JSON");
    let timings = report["timings"]
        .as_object_mut()
        .expect("the report has timings");
    assert!(!timings.is_empty(), "the report has timings");
    for (k, v) in timings.iter_mut() {
        if k == "apply_phases" {
            // (the steps' names stay: they are the store's, the same every run)
            for step in v.as_array_mut().expect("apply_phases is a list") {
                assert!(
                    step["ms"].is_number(),
                    "a step's timing is a number: {step}"
                );
                step["ms"] = serde_json::Value::String("[ms]".into());
            }
            continue;
        }
        assert!(v.is_number(), "a timing is a number: {v}");
        *v = serde_json::Value::String("[ms]".into());
    }
    serde_json::to_string_pretty(&report).unwrap()
}

#[test]
fn help_texts() {
    for sub in [
        None,
        Some("plan"),
        Some("patch"),
        Some("verify"),
        Some("rollback"),
        Some("upgrade"),
        Some("guard"),
        Some("hash"),
        Some("versions"),
        Some("completions"),
    ] {
        let mut cmd = kubelet_rehash();
        cmd.args(sub).arg("--help");
        let out = cmd.output().expect("the binary runs");
        assert!(out.status.success(), "--help of {sub:?} exits 0");
        let name = format!("help-{}", sub.unwrap_or("main"));
        insta::assert_snapshot!(name, String::from_utf8(out.stdout).unwrap());
    }
}

#[test]
fn plan_table_and_report_of_every_bundled_node() {
    for (node, to, store) in NODES {
        let dir = fixtures_dir().join("nodes").join(node);
        let mut args = vec!["plan", "--pods", "pods.json", "--to", to];
        args.extend(store);
        if node.starts_with("docker") {
            // the dockershim → cri-dockerd switch reads these; inside the node's copy (none
            // exists there), not on the machine running the test
            args.extend([
                "--cri-dockerd",
                "usr/bin/cri-dockerd",
                "--dockershim-checkpoints",
                "var/lib/dockershim/sandbox",
                "--cri-dockerd-root",
                "var/lib/cri-dockerd",
            ]);
        }
        let (code, table, err) = run_in(&dir, &args);
        assert!(
            code == 0 || code == 4,
            "{node}: plan exits 0 or 4, not {code}: {err}"
        );
        insta::assert_snapshot!(format!("plan-table-{node}"), table);
        args.extend(["-o", "json"]);
        let (code, json, err) = run_in(&dir, &args);
        assert!(code == 0 || code == 4, "{node}: plan -o json: {err}");
        insta::assert_snapshot!(format!("plan-report-{node}"), without_timings(&json));
    }
}

#[test]
fn patch_report_of_the_containerd_node() {
    let tmp = tempfile::tempdir().unwrap();
    let st = Command::new("cp")
        .arg("-a")
        .arg(fixtures_dir().join("nodes/containerd-1.7"))
        .arg(tmp.path())
        .status()
        .unwrap();
    assert!(st.success());
    let dir = tmp.path().join("containerd-1.7");
    let (code, json, err) = run_in(
        &dir,
        &[
            "patch",
            "--pods",
            "pods.json",
            "--to",
            "1.31",
            "--runtime",
            "containerd",
            "--root",
            "var/lib/containerd",
            "--backup-dir",
            "backup",
            "-o",
            "json",
        ],
    );
    assert_eq!(code, 4, "one container's spec really changed: {err}");
    insta::assert_snapshot!("patch-stderr-containerd-1.7", err);
    insta::assert_snapshot!("patch-report-containerd-1.7", without_timings(&json));
}
