//! scan_dir on kubelet directories built from the golden files, and bad input.

use std::path::{Path, PathBuf};

use kubeletstate::{scan_dir, CheckpointKind, Error, KubeletVersion, Severity, Verdict};

fn golden(case: &str, file: &str) -> Vec<u8> {
    std::fs::read(
        testtools::fixtures_dir()
            .join("checkpoints")
            .join(case)
            .join(file),
    )
    .unwrap()
}

fn v(s: &str) -> KubeletVersion {
    s.parse().unwrap()
}

/// A kubelet directory as 1.30 leaves it: DRA, pod status (the 1.27-1.31 format), CPU and
/// device checkpoints, the golden files themselves.
fn node_1_30() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let put = |rel: &str, bytes: Vec<u8>| {
        let p = dir.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    };
    put(
        "dra_manager_state",
        golden("dra-1.30-claim", "dra_manager_state"),
    );
    put(
        "pod_status_manager_state",
        golden("status-1.31-resized", "pod_status_manager_state"),
    );
    put(
        "cpu_manager_state",
        golden("cpu-1.18-static", "cpu_manager_state"),
    );
    let dev = "device-plugins/kubelet_internal_checkpoint";
    put(dev, golden("device-1.20", dev));
    dir
}

#[test]
fn upgrade_to_1_31_blocks_on_the_dra_checkpoint_only() {
    let node = node_1_30();
    let findings = scan_dir(node.path(), v("1.31")).unwrap();
    assert_eq!(findings.len(), 4);
    let blocking: Vec<_> = findings
        .iter()
        .filter(|f| f.severity == Severity::Block)
        .collect();
    assert_eq!(blocking.len(), 1, "{findings:#?}");
    let dra = blocking[0];
    assert_eq!(dra.kind, CheckpointKind::DraManager);
    assert_eq!(dra.path, node.path().join("dra_manager_state"));
    assert!(matches!(dra.verdict, Verdict::Rejected { .. }));
    assert_eq!(
        dra.reference,
        "https://github.com/kubernetes/kubernetes/issues/127653"
    );
    assert!(dra.remedy.contains("dra_manager_state"), "{}", dra.remedy);
    assert!(dra.format.contains("1.27-1.30"), "{}", dra.format);
    for f in findings
        .iter()
        .filter(|f| f.kind != CheckpointKind::DraManager)
    {
        assert_eq!(f.verdict, Verdict::Accepted, "{f:#?}");
        assert_eq!(f.severity, Severity::None);
        assert!(f.remedy.is_empty());
    }
}

#[test]
fn upgrade_to_1_32_blocks_on_dra_and_pod_status() {
    let node = node_1_30();
    let findings = scan_dir(node.path(), v("1.32")).unwrap();
    let mut blocking: Vec<_> = findings
        .iter()
        .filter(|f| f.severity == Severity::Block)
        .map(|f| f.kind)
        .collect();
    blocking.sort_by_key(|k| k.relative_path());
    assert_eq!(
        blocking,
        [CheckpointKind::DraManager, CheckpointKind::PodStatusManager]
    );
}

#[test]
fn downgrade_to_1_17_blocks_on_the_cpu_manager_and_warns_on_devices() {
    let node = node_1_30();
    let findings = scan_dir(node.path(), v("1.17")).unwrap();
    let by_kind = |k| findings.iter().find(|f| f.kind == k).unwrap();
    let cpu = by_kind(CheckpointKind::CpuManager);
    assert_eq!(cpu.severity, Severity::Block);
    let dev = by_kind(CheckpointKind::DeviceManager);
    assert!(matches!(dev.verdict, Verdict::Rejected { .. }));
    assert_eq!(dev.severity, Severity::Warn, "the device manager runs on");
    assert!(matches!(
        by_kind(CheckpointKind::DraManager).verdict,
        Verdict::NotRead { .. }
    ));
}

#[test]
fn the_findings_serialize_for_the_report() {
    let node = node_1_30();
    let findings = scan_dir(node.path(), v("1.31")).unwrap();
    let json = serde_json::to_value(&findings).unwrap();
    let dra = json
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["kind"] == "dra_manager")
        .unwrap();
    assert_eq!(dra["verdict"], "rejected");
    assert_eq!(dra["severity"], "block");
    assert!(dra["reason"].as_str().unwrap().contains("corrupted"));
}

#[test]
fn an_empty_kubelet_dir_has_no_findings() {
    let dir = tempfile::tempdir().unwrap();
    assert!(scan_dir(dir.path(), v("1.31")).unwrap().is_empty());
}

#[test]
fn a_missing_or_non_directory_kubelet_dir_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let err = scan_dir(&dir.path().join("nope"), v("1.31")).unwrap_err();
    assert!(matches!(err, Error::NoKubeletDir { .. }), "{err}");
    std::fs::write(dir.path().join("file"), b"").unwrap();
    let err = scan_dir(&dir.path().join("file"), v("1.31")).unwrap_err();
    assert!(err.to_string().contains("not a directory"), "{err}");
}

#[test]
fn a_symlinked_kubelet_dir_is_followed() {
    let node = node_1_30();
    let parent = tempfile::tempdir().unwrap();
    let link = parent.path().join("kubelet");
    std::os::unix::fs::symlink(node.path(), &link).unwrap();
    assert_eq!(scan_dir(&link, v("1.31")).unwrap().len(), 4);
}

fn scan_err(setup: impl FnOnce(&Path)) -> (Error, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    setup(dir.path());
    let err = scan_dir(dir.path(), v("1.31")).unwrap_err();
    (err, dir.path().to_path_buf())
}

#[test]
fn a_symlinked_checkpoint_is_refused_not_followed() {
    let (err, dir) = scan_err(|d| {
        std::fs::write(
            d.join("elsewhere"),
            golden("cpu-1.18-static", "cpu_manager_state"),
        )
        .unwrap();
        std::os::unix::fs::symlink(d.join("elsewhere"), d.join("cpu_manager_state")).unwrap();
    });
    assert!(
        matches!(&err, Error::Symlink { path } if *path == dir.join("cpu_manager_state")),
        "{err}"
    );
    assert!(err.to_string().contains("symbolic link"));
}

#[test]
fn a_symlinked_device_plugins_dir_is_refused() {
    let (err, dir) = scan_err(|d| {
        std::fs::create_dir(d.join("real")).unwrap();
        std::os::unix::fs::symlink(d.join("real"), d.join("device-plugins")).unwrap();
    });
    assert!(
        matches!(&err, Error::Symlink { path } if *path == dir.join("device-plugins")),
        "{err}"
    );
}

#[test]
fn a_dangling_symlink_is_refused_too() {
    let (err, _) = scan_err(|d| {
        std::os::unix::fs::symlink(d.join("missing"), d.join("dra_manager_state")).unwrap();
    });
    assert!(matches!(err, Error::Symlink { .. }), "{err}");
}

#[test]
fn a_fifo_is_not_a_checkpoint() {
    let (err, _) = scan_err(|d| {
        let path = std::ffi::CString::new(d.join("cpu_manager_state").to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
    });
    assert!(matches!(err, Error::NotRegular { .. }), "{err}");
}

#[test]
fn a_file_that_is_not_json_is_a_clear_error() {
    let (err, _) =
        scan_err(|d| std::fs::write(d.join("dra_manager_state"), b"\x00\x01garbage").unwrap());
    assert!(matches!(err, Error::NotJson { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("dra_manager_state: not a kubelet checkpoint"),
        "{err}"
    );
    let (err, _) = scan_err(|d| {
        std::fs::write(d.join("pod_status_manager_state"), br#"{"checksum": 1"#).unwrap()
    });
    assert!(matches!(err, Error::NotJson { .. }), "{err}");
}

#[test]
fn json_of_an_unknown_shape_is_a_clear_error() {
    for (file, text) in [
        ("dra_manager_state", "[1,2]"),
        ("dra_manager_state", r#"{"foo": 1}"#),
        ("pod_status_manager_state", r#""text""#),
        ("cpu_manager_state", r#"{"cpus": "0-3"}"#),
        ("memory_manager_state", r#"{"numa": {}}"#),
    ] {
        let (err, _) = scan_err(|d| std::fs::write(d.join(file), text).unwrap());
        assert!(
            matches!(err, Error::UnknownShape { .. }),
            "{file} {text}: {err}"
        );
        assert!(err.to_string().contains("unknown shape"), "{err}");
    }
    let (err, _) = scan_err(|d| {
        std::fs::create_dir(d.join("device-plugins")).unwrap();
        std::fs::write(
            d.join("device-plugins/kubelet_internal_checkpoint"),
            r#"{"Checksum": 1}"#,
        )
        .unwrap()
    });
    assert!(matches!(err, Error::UnknownShape { .. }), "{err}");
}

#[test]
fn a_type_mismatch_is_a_rejection_as_in_go() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("pod_status_manager_state"),
        br#"{"allocationEntries": {"p": {"c": {"cpu": "not-a-quantity"}}}, "checksum": 1}"#,
    )
    .unwrap();
    std::fs::write(
        dir.path().join("cpu_manager_state"),
        br#"{"policyName": 7, "checksum": 1}"#,
    )
    .unwrap();
    std::fs::write(
        dir.path().join("dra_manager_state"),
        br#"{"version": "v1", "checksum": 99999999999}"#,
    )
    .unwrap();
    let findings = scan_dir(dir.path(), v("1.31")).unwrap();
    for f in &findings {
        match f.kind {
            CheckpointKind::PodStatusManager | CheckpointKind::CpuManager => {
                let Verdict::Rejected { reason } = &f.verdict else {
                    panic!("{f:#?}")
                };
                assert!(
                    reason.contains("cannot unmarshal") || reason.contains("quantit"),
                    "{reason}"
                );
            }
            // 99999999999 overflows the envelope's uint32 Checksum.
            CheckpointKind::DraManager => {
                let Verdict::Rejected { reason } = &f.verdict else {
                    panic!("{f:#?}")
                };
                assert!(reason.contains("uint32"), "{reason}");
            }
            _ => unreachable!(),
        }
    }
    assert_eq!(findings.len(), 3);
}

#[test]
fn an_undecidable_structured_handle_is_a_warning_not_a_guess() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("dra_manager_state"),
        br#"{"version":"v1","entries":[{"ResourceHandles":[{"structuredData":{"nodeName":"n"}}]}],"checksum":1}"#,
    )
    .unwrap();
    let f = &scan_dir(dir.path(), v("1.30")).unwrap()[0];
    assert!(matches!(f.verdict, Verdict::Undetermined { .. }), "{f:#?}");
    assert_eq!(f.severity, Severity::Warn);
    // 1.31 ignores the entries: decided.
    let f = &scan_dir(dir.path(), v("1.31")).unwrap()[0];
    assert!(matches!(f.verdict, Verdict::Rejected { .. }), "{f:#?}");
}

fn module_case(case: &str, file: &str) -> Vec<u8> {
    std::fs::read(
        testtools::fixtures_dir()
            .join("checkpoints-module")
            .join(case)
            .join(file),
    )
    .unwrap()
}

/// A kubelet directory as 1.36 with PodLevelResourceManagers leaves it: CPU V3 and memory V2,
/// both with pod entries, written by the real 1.36.5 code; `config` is its config.yaml.
fn node_1_36_pod_level(config: Option<&str>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (case, file) in [
        ("cpu-static-1.36-plrm", "cpu_manager_state"),
        ("memory-static-1.36-plrm", "memory_manager_state"),
    ] {
        std::fs::write(dir.path().join(file), module_case(case, file)).unwrap();
    }
    if let Some(c) = config {
        std::fs::write(dir.path().join("config.yaml"), c).unwrap();
    }
    dir
}

fn verdicts(dir: &Path, target: &str) -> Vec<(CheckpointKind, &'static str)> {
    scan_dir(dir, v(target))
        .unwrap()
        .into_iter()
        .map(|f| {
            let name = match f.verdict {
                Verdict::Accepted => "accepted",
                Verdict::Rejected { .. } => "rejected",
                Verdict::NotRead { .. } => "not read",
                Verdict::Undetermined { .. } => "undetermined",
            };
            (f.kind, name)
        })
        .collect()
}

#[test]
fn the_kubelets_config_yaml_decides_how_1_36_reads_the_pod_level_checkpoints() {
    let kubeadm = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nfeatureGates:\n  PodLevelResourceManagers: true\ncpuManagerPolicy: static\n";
    let json =
        r#"{"kind":"KubeletConfiguration","featureGates":{"PodLevelResourceManagers":true}}"#;
    let both = |name| {
        vec![
            (CheckpointKind::CpuManager, name),
            (CheckpointKind::MemoryManager, name),
        ]
    };
    for config in [kubeadm, json, &json.replace(":true", ": true")] {
        let node = node_1_36_pod_level(Some(config));
        assert_eq!(
            verdicts(node.path(), "1.36"),
            both("accepted"),
            "kubelet 1.36 with the gate on (config.yaml {config:?}) reads its own pod-level checkpoints"
        );
        assert_eq!(
            verdicts(node.path(), "1.35"),
            both("rejected"),
            "a back-out to 1.35 refuses them, gate or not"
        );
        assert_eq!(verdicts(node.path(), "1.37"), both("accepted"));
    }
    for config in [
        None,
        Some("featureGates:\n  PodLevelResourceManagers: false\n"),
        Some("featureGates:\n  PodLevelResources: true\n"),
    ] {
        let node = node_1_36_pod_level(config);
        assert_eq!(
            verdicts(node.path(), "1.36"),
            both("rejected"),
            "kubelet 1.36 without the gate (config.yaml {config:?}) refuses the pod-level checkpoints"
        );
    }
}
