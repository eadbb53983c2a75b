//! `verify --live --report FILE` works from the report alone and refuses, exit 2, any report it
//! could check nothing with, before it asks any runtime. (The passing case, against real
//! containerd and dockerd, is in e2e_live.rs.)

mod under_test;

use std::path::Path;
use std::process::Command;
use under_test::bin;

fn verify_live(report: &Path) -> (i32, String) {
    let out = Command::new(bin())
        .args(["verify", "--live", "--report"])
        .arg(report)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A plan report of the bundled containerd node (nothing written).
fn plan_report() -> serde_json::Value {
    let node = testtools::fixtures_dir().join("nodes/containerd-1.7");
    let out = Command::new(bin())
        .current_dir(&node)
        .args([
            "plan",
            "--pods",
            "pods.json",
            "--to",
            "1.31",
            "--root",
            "var/lib/containerd",
            "--runtime-socket",
            "no-runtime.sock",
            "-o",
            "json",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4), "the plan runs");
    serde_json::from_slice(&out.stdout).unwrap()
}

#[test]
fn verify_live_refuses_reports_it_cannot_check() {
    let tmp = tempfile::tempdir().unwrap();
    let write = |name: &str, v: &serde_json::Value| {
        let p = tmp.path().join(name);
        std::fs::write(&p, serde_json::to_vec(v).unwrap()).unwrap();
        p
    };
    let plan = plan_report();

    let (code, err) = verify_live(&write("plan.json", &plan));
    assert_eq!(code, 2, "a plan report is refused: {err}");
    assert!(err.contains("not a patch report"), "{err}");

    let mut no_rewrites = plan.clone();
    no_rewrites["stage"] = "patch".into();
    no_rewrites["records"] = serde_json::json!([]);
    let (code, err) = verify_live(&write("empty.json", &no_rewrites));
    assert_eq!(code, 2, "a patch report without rewrites is refused: {err}");
    assert!(err.contains("no rewritten containers"), "{err}");

    let mut no_runtime = plan.clone();
    no_runtime["stage"] = "patch".into();
    no_runtime.as_object_mut().unwrap().remove("runtime");
    let (code, err) = verify_live(&write("no-runtime.json", &no_runtime));
    assert_eq!(
        code, 2,
        "a report without its runtime never falls back to a default: {err}"
    );
    assert!(err.contains("runtime"), "{err}");

    let mut other_format = plan.clone();
    other_format["format"] = 2.into();
    let (code, err) = verify_live(&write("format2.json", &other_format));
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("format 2"), "{err}");

    let (code, err) = verify_live(&write("list.json", &serde_json::json!([1, 2])));
    assert_eq!(code, 2, "{err}");

    // A real patch report whose runtime is gone: a failure to ask (exit 1), not a pass.
    let mut patched = plan;
    patched["stage"] = "patch".into();
    patched["endpoint"] = format!("unix://{}", tmp.path().join("gone.sock").display()).into();
    let (code, err) = verify_live(&write("patched.json", &patched));
    assert_eq!(code, 1, "an unreachable runtime is a failure: {err}");
    assert!(
        err.contains("gone.sock"),
        "the message names the endpoint asked: {err}"
    );
}

#[test]
fn verify_without_live_still_needs_to() {
    // (the pods default to the API server's, read with the kubelet's kubeconfig)
    let out = Command::new(bin()).args(["verify"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--to"), "{err}");
}
