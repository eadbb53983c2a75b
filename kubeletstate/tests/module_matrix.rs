//! Every (writer, reader) pair of kubelet 1.30-1.38 (1.38.0-beta.0) for every checkpoint file, as the real
//! kubelet code of both versions decides it (fixtures/checkpoints-module, made by
//! tools/kubelet-checkpoints/module/run.sh from k8s.io/kubernetes at each release): the crate
//! must reach the same verdict for every one, with the reader's feature gates.

use std::path::{Path, PathBuf};

use kubeletstate::{judge_with_gates, CheckpointKind, FeatureGates, KubeletVersion, Verdict};
use serde::Deserialize;

#[derive(Deserialize)]
struct GoResult {
    verdict: String,
    #[serde(default)]
    error: String,
}

#[derive(Deserialize)]
struct GoVerdict {
    target: String,
    target_kubernetes: String,
    gates: String,
    result: GoResult,
}

#[derive(Deserialize)]
struct Case {
    case: String,
    file: String,
    written_by: String,
    writer_gates: String,
    verdicts: Vec<GoVerdict>,
}

fn module_checkpoints_dir() -> PathBuf {
    testtools::fixtures_dir().join("checkpoints-module")
}

fn cases() -> Vec<(Case, Vec<u8>)> {
    let mut out = Vec::new();
    for entry in
        std::fs::read_dir(module_checkpoints_dir()).expect("fixtures/checkpoints-module exists")
    {
        let dir = entry.unwrap().path();
        let case: Case =
            serde_json::from_slice(&std::fs::read(dir.join("verdicts.json")).unwrap()).unwrap();
        let bytes = std::fs::read(dir.join(&case.file)).unwrap();
        out.push((case, bytes));
    }
    out.sort_by(|a, b| a.0.case.cmp(&b.0.case));
    out
}

fn gates(text: &str) -> FeatureGates {
    match text {
        "" => FeatureGates::default(),
        "PodLevelResourceManagers=true" => FeatureGates {
            pod_level_resource_managers: Some(true),
        },
        other => panic!("gates {other:?} are not modelled by this test"),
    }
}

fn kind_of(file: &str) -> CheckpointKind {
    CheckpointKind::ALL
        .into_iter()
        .find(|k| k.relative_path().rsplit('/').next() == Some(file))
        .unwrap_or_else(|| panic!("no kind for {file}"))
}

#[test]
fn every_writer_reader_pair_of_1_30_to_1_38_gets_the_real_kubelets_verdict() {
    let cases = cases();
    let mut checked = 0;
    let mut wrong = Vec::new();
    for (case, bytes) in &cases {
        let kind = kind_of(&case.file);
        for go in &case.verdicts {
            let target: KubeletVersion = go.target.parse().unwrap();
            let (j, format) =
                judge_with_gates(Path::new(&case.file), kind, bytes, target, gates(&go.gates))
                    .unwrap_or_else(|e| panic!("{}: {e}", case.case));
            let ours = match &j.verdict {
                Verdict::Accepted => "accepted",
                Verdict::Rejected { .. } => "rejected",
                Verdict::NotRead { .. } => "not_read",
                Verdict::Undetermined { .. } => "undetermined",
            };
            if ours != go.result.verdict {
                wrong.push(format!(
                    "{} (written by {} {}, {format}) read by {} [{}]: kubelet {} says {} {}, we say {:?}",
                    case.case,
                    case.written_by,
                    case.writer_gates,
                    go.target,
                    go.gates,
                    go.target_kubernetes,
                    go.result.verdict,
                    go.result.error,
                    j.verdict
                ));
            }
            checked += 1;
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {checked} verdicts differ from the real kubelet's:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    // the matrix is complete: 9 readers for every case, and each kind written by each version
    // that has it (a case lost from the fixtures would otherwise pass unnoticed)
    assert_eq!(
        cases.len(),
        81,
        "fixtures/checkpoints-module has the 81 generated cases"
    );
    assert_eq!(
        checked, 765,
        "765 (case, reader, gates) verdicts are compared"
    );
}

#[test]
fn the_pod_level_formats_of_1_36_are_refused_by_every_earlier_kubelet_and_by_1_36_without_the_gate()
{
    // the finding the matrix is for, spelled out: a back-out from 1.36 with
    // PodLevelResourceManagers on, or turning the gate off, makes the kubelet refuse to start
    let all = cases();
    let (case, bytes) = all
        .iter()
        .find(|(c, _)| c.case == "cpu-static-1.36-plrm")
        .expect("the case exists");
    for (target, g, accepted) in [
        ("1.35", "", false),
        ("1.30", "", false),
        ("1.36", "", false),
        ("1.36", "PodLevelResourceManagers=true", true),
        ("1.37", "", true),
    ] {
        let (j, _) = judge_with_gates(
            Path::new(&case.file),
            CheckpointKind::CpuManager,
            bytes,
            target.parse().unwrap(),
            gates(g),
        )
        .unwrap();
        assert_eq!(
            j.verdict == Verdict::Accepted,
            accepted,
            "cpu_manager_state of 1.36 with pod-level CPU sets read by {target} [{g}]: {:?}",
            j.verdict
        );
    }
}

#[test]
fn kubelet_1_38_refuses_an_allocation_checkpoint_of_a_version_it_does_not_know() {
    // checkpoint.go GetPodList of 1.38.0-beta.0: "" and "v2" are read, anything else is
    // "unsupported checkpoint version"; the checksum covers Data only, so an edited version
    // passes the checksum and fails there. Older kubelets ignore the member.
    let all = cases();
    let (case, bytes) = all
        .iter()
        .find(|(c, _)| c.case == "allocated-1.38")
        .expect("the case exists");
    let text = String::from_utf8(bytes.clone()).unwrap();
    assert!(text.starts_with(r#"{"version":"v2","#), "{text}");
    let v3 = text.replacen(r#""version":"v2""#, r#""version":"v3""#, 1);
    let judge_at = |bytes: &[u8], target: &str| {
        judge_with_gates(
            Path::new(&case.file),
            CheckpointKind::AllocatedPods,
            bytes,
            target.parse().unwrap(),
            FeatureGates::default(),
        )
        .unwrap()
        .0
        .verdict
    };
    match judge_at(v3.as_bytes(), "1.38") {
        Verdict::Rejected { reason } => assert!(
            reason.contains("unsupported checkpoint version \"v3\""),
            "{reason}"
        ),
        other => panic!("1.38 reads a v3 allocation checkpoint: {other:?}"),
    }
    assert_eq!(
        judge_at(v3.as_bytes(), "1.37"),
        Verdict::Accepted,
        "1.37 ignores the version member"
    );
}
