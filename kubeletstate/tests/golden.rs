//! The verdicts and checksums of fixtures/checkpoints, made by real Go code
//! (tools/kubelet-checkpoints/run.sh), reproduced by the crate; and single-byte changes of
//! each accepted file rejected.

use std::path::{Path, PathBuf};

use kubeletstate::{judge, CheckpointKind, KubeletVersion, Verdict};
use serde::Deserialize;

#[derive(Deserialize)]
struct GoVerdict {
    target: String,
    verdict: String,
    #[serde(default)]
    error: String,
    computed_checksum: u64,
}

#[derive(Deserialize)]
struct Case {
    case: String,
    file: String,
    written_by: String,
    verdicts: Vec<GoVerdict>,
}

fn checkpoints_dir() -> PathBuf {
    testtools::fixtures_dir().join("checkpoints")
}

fn kind_of(file: &str) -> CheckpointKind {
    CheckpointKind::ALL
        .into_iter()
        .find(|k| k.relative_path() == file)
        .unwrap_or_else(|| panic!("no kind for {file}"))
}

fn cases() -> Vec<(Case, Vec<u8>)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(checkpoints_dir()).unwrap() {
        let dir = entry.unwrap().path();
        let case: Case =
            serde_json::from_slice(&std::fs::read(dir.join("verdicts.json")).unwrap()).unwrap();
        let bytes = std::fs::read(dir.join(&case.file)).unwrap();
        out.push((case, bytes));
    }
    out.sort_by(|a, b| a.0.case.cmp(&b.0.case));
    out
}

fn target(v: &str) -> KubeletVersion {
    v.parse().unwrap()
}

#[test]
fn every_golden_case_gets_the_go_verdict_and_checksum() {
    let cases = cases();
    assert_eq!(
        cases.len(),
        25,
        "fixtures/checkpoints has the 25 generated cases"
    );
    let mut checked = 0;
    for (case, bytes) in &cases {
        let kind = kind_of(&case.file);
        for go in &case.verdicts {
            let (j, format) = judge(Path::new(&case.file), kind, bytes, target(&go.target))
                .unwrap_or_else(|e| panic!("{}: {e}", case.case));
            let ours = match &j.verdict {
                Verdict::Accepted => "accepted",
                Verdict::Rejected { .. } => "rejected",
                other => panic!("{} -> {}: {other:?}", case.case, go.target),
            };
            assert_eq!(
                ours, go.verdict,
                "{} (written by {}, {format}) read by {}: Go says {} {}, we say {:?}",
                case.case, case.written_by, go.target, go.verdict, go.error, j.verdict
            );
            assert_eq!(
                j.computed_checksum.unwrap_or(0),
                go.computed_checksum,
                "{} read by {}: checksum computed",
                case.case,
                go.target
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 49);
}

/// The version pairs the upstream reports name, as the golden data decides them.
#[test]
fn the_upstream_pairs_are_decided_as_reported() {
    let verdict_of = |case: &str, t: &str| {
        let (c, bytes) = cases().into_iter().find(|(c, _)| c.case == case).unwrap();
        judge(Path::new(&c.file), kind_of(&c.file), &bytes, target(t))
            .unwrap()
            .0
            .verdict
    };
    // kubernetes#127653: 1.30 -> 1.31 DRA.
    assert!(matches!(
        verdict_of("dra-1.30-claim", "1.31"),
        Verdict::Rejected { .. }
    ));
    assert!(matches!(
        verdict_of("dra-1.30-empty", "1.31"),
        Verdict::Rejected { .. }
    ));
    assert_eq!(verdict_of("dra-1.30-claim", "1.30"), Verdict::Accepted);
    // kubernetes#123552: ResourceHandle gained StructuredData in 1.30, so 1.29's claims fail.
    assert!(matches!(
        verdict_of("dra-1.29-claim", "1.30"),
        Verdict::Rejected { .. }
    ));
    // Downgrade 1.31 -> 1.30.
    assert!(matches!(
        verdict_of("dra-1.31-claim", "1.30"),
        Verdict::Rejected { .. }
    ));
    // CHANGELOG-1.32: 1.31 -> 1.32 pod status, and back.
    assert!(matches!(
        verdict_of("status-1.31-resized", "1.32"),
        Verdict::Rejected { .. }
    ));
    assert!(matches!(
        verdict_of("status-1.32-resized", "1.31"),
        Verdict::Rejected { .. }
    ));
    // 1.33 reads another file.
    assert!(matches!(
        verdict_of("status-1.31-resized", "1.33"),
        Verdict::NotRead { .. }
    ));
    // From 1.33 the allocation manager's own files: read by 1.33+, not by 1.32.
    assert_eq!(verdict_of("allocated-1.33", "1.36"), Verdict::Accepted);
    assert!(matches!(
        verdict_of("allocated-1.33", "1.32"),
        Verdict::NotRead { .. }
    ));
    // #86676 / #86689: 1.17 -> 1.18 fine, 1.18 -> 1.17 not.
    assert_eq!(verdict_of("cpu-1.17-static", "1.31"), Verdict::Accepted);
    assert!(matches!(
        verdict_of("cpu-1.18-static", "1.17"),
        Verdict::Rejected { .. }
    ));
    // #102880: 1.19 -> 1.20 rejected, from 1.23 read through the fallback.
    assert!(matches!(
        verdict_of("device-1.19", "1.20"),
        Verdict::Rejected { .. }
    ));
    assert!(matches!(
        verdict_of("device-1.19", "1.22"),
        Verdict::Rejected { .. }
    ));
    assert_eq!(verdict_of("device-1.19", "1.30"), Verdict::Accepted);
}

fn replace_once(bytes: &[u8], from: &[u8], to: &[u8]) -> Option<Vec<u8>> {
    let at = bytes.windows(from.len()).position(|w| w == from)?;
    let mut out = bytes[..at].to_vec();
    out.extend_from_slice(to);
    out.extend_from_slice(&bytes[at + from.len()..]);
    Some(out)
}

/// The stored checksum with its last digit changed.
fn other_checksum(bytes: &[u8]) -> Vec<u8> {
    let text = std::str::from_utf8(bytes).unwrap();
    // "sum": also finds a member spelled with U+212A for its k.
    let key = text.rfind("sum\":").expect("a checksum member") + "sum\":".len();
    let end = key + text[key..].bytes().take_while(u8::is_ascii_digit).count();
    let mut out = bytes.to_vec();
    out[end - 1] = if out[end - 1] == b'9' {
        b'8'
    } else {
        out[end - 1] + 1
    };
    if &text[key..end] == "0" {
        out[end - 1] = b'7';
    }
    out
}

#[test]
fn a_changed_byte_in_an_accepted_file_is_rejected() {
    let mut mutated = 0;
    for (case, bytes) in cases() {
        let kind = kind_of(&case.file);
        for go in case.verdicts.iter().filter(|v| v.verdict == "accepted") {
            let mut variants = vec![("checksum digit", other_checksum(&bytes))];
            // One hex digit of the pod UID (a map key or value the checksum covers, or a byte
            // of the enveloped data).
            if let Some(v) = replace_once(&bytes, b"a6f5e0f2", b"b6f5e0f2") {
                variants.push(("pod UID byte", v));
            }
            if let Some(v) = replace_once(&bytes, b"\"2-3\"", b"\"2-4\"") {
                variants.push(("cpu set byte", v));
            }
            for (what, variant) in variants {
                let (j, _) = judge(Path::new(&case.file), kind, &variant, target(&go.target))
                    .unwrap_or_else(|e| panic!("{} {what}: {e}", case.case));
                assert!(
                    matches!(j.verdict, Verdict::Rejected { .. }),
                    "{} read by {} with a changed {what}: {:?}",
                    case.case,
                    go.target,
                    j.verdict
                );
                mutated += 1;
            }
        }
    }
    assert!(mutated >= 30, "{mutated} mutations checked");
}
