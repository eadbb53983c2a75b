//! The golden set: hashes, hashed texts and JSON encodings produced by the real Kubernetes type
//! definitions of every version 1.8–1.36 (see fixtures/golden/README.md). Every one of them
//! must be reproduced byte for byte.

use hashcompat::{decode, hash_versions, parse_json, KubeletVersion};
mod golden_set;

use golden_set::{expected, golden_dir, specs};
use std::collections::HashMap;

/// Where two byte strings first differ, with context, so a mismatch is debuggable.
fn first_difference(want: &[u8], got: &[u8]) -> String {
    let i = want
        .iter()
        .zip(got)
        .position(|(a, b)| a != b)
        .unwrap_or(want.len().min(got.len()));
    let ctx = |b: &[u8]| {
        let lo = i.saturating_sub(60);
        let hi = (i + 60).min(b.len());
        String::from_utf8_lossy(&b[lo..hi]).into_owned()
    };
    format!(
        "first difference at byte {i} (want len {}, got len {}):\n  want …{}…\n  got  …{}…",
        want.len(),
        got.len(),
        ctx(want),
        ctx(got)
    )
}

#[test]
fn every_golden_hash_of_every_version() {
    let expected = expected();
    let versions = KubeletVersion::all();
    let mut checked = 0;
    let mut failures = Vec::new();
    for spec in specs() {
        let doc = parse_json(spec.line.as_bytes()).expect("golden line parses");
        let container = doc.get("container").expect("golden line has a container");
        let results = hash_versions(container, &versions);
        for (v, r) in versions.iter().zip(results) {
            let key = (spec.id.clone(), v.to_string());
            let Some((want, want_wr)) = expected.get(&key) else {
                failures.push(format!("{} {v}: no golden line", spec.id));
                continue;
            };
            checked += 1;
            match r {
                Ok(h) => {
                    let got = h.hash.to_string();
                    let got_wr = h.hash_without_resources.map(|x| x.to_string());
                    if &got != want || &got_wr != want_wr {
                        failures.push(format!(
                            "{} {v}: hash {got} (want {want}), without_resources {got_wr:?} (want {want_wr:?})",
                            spec.id
                        ));
                    }
                }
                Err(e) => failures.push(format!("{} {v}: error {e}", spec.id)),
            }
        }
    }
    assert_eq!(
        checked,
        expected.len(),
        "every golden (spec, version) pair was checked"
    );
    assert!(
        failures.is_empty(),
        "{} of {checked} golden hashes differ; first ones:\n{}",
        failures.len(),
        failures
            .iter()
            .take(25)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// Every reference text under spew/ and json/, byte for byte.
#[test]
fn every_reference_text_byte_for_byte() {
    let specs: HashMap<String, String> = specs().into_iter().map(|s| (s.id, s.line)).collect();
    let mut checked = 0;
    let mut failures = Vec::new();
    for kind in ["spew", "json"] {
        let root = golden_dir().join(kind);
        let mut dirs: Vec<_> = std::fs::read_dir(&root)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        dirs.sort();
        for dir in dirs {
            let version: KubeletVersion =
                dir.file_name().unwrap().to_str().unwrap().parse().unwrap();
            for f in std::fs::read_dir(&dir).unwrap() {
                let path = f.unwrap().path();
                let name = path.file_name().unwrap().to_str().unwrap().to_string();
                let (stem, wr) = match name.rsplit_once('.').map(|(s, _)| s) {
                    Some(s) => match s.strip_suffix(".without_resources") {
                        Some(id) => (id.to_string(), true),
                        None => (s.to_string(), false),
                    },
                    None => continue,
                };
                let line = specs
                    .get(&stem)
                    .unwrap_or_else(|| panic!("{name}: no spec {stem}"));
                let doc = parse_json(line.as_bytes()).unwrap();
                let d = decode(doc.get("container").unwrap(), version).unwrap();
                let ex = d.explain(version);
                let part = if wr {
                    ex.without_resources.expect("version has without_resources")
                } else {
                    ex.hash
                };
                let got = if kind == "spew" {
                    part.text
                } else {
                    part.json.expect("JSON form")
                };
                let want = std::fs::read(&path).unwrap();
                checked += 1;
                if got != want {
                    failures.push(format!(
                        "{kind}/{version}/{name}: {}",
                        first_difference(&want, &got)
                    ));
                }
            }
        }
    }
    assert!(checked > 1000, "reference files found: {checked}");
    assert!(
        failures.is_empty(),
        "{} of {checked} reference texts differ:\n{}",
        failures.len(),
        failures
            .iter()
            .take(10)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
}

fn hash_of(id: &str, version: &str) -> (String, Option<String>) {
    let line = specs()
        .into_iter()
        .find(|s| s.id.starts_with(id))
        .unwrap()
        .line;
    let doc = parse_json(line.as_bytes()).unwrap();
    let v: KubeletVersion = version.parse().unwrap();
    let h = hashcompat::hash_node(doc.get("container").unwrap(), v).unwrap();
    (
        h.hash.to_string(),
        h.hash_without_resources.map(|x| x.to_string()),
    )
}

/// The JSON sample of the kubelet's TestConsistentHashContainer (container_hash_test.go).
const CONSISTENT_HASH_SAMPLE: &str = r#"{"name": "test_container", "image": "foo/image:v1",
  "command": ["/bin/testcmd"], "args": ["/bin/sh", "-c", "echo abc"],
  "ports": [{"containerPort": 8001}],
  "env": [{"name": "ENV_FOO", "value": "bar"},
          {"name": "ENV_BAR", "valueFrom": {"secretKeyRef": {"name": "foo", "key": "bar", "optional": true}}}],
  "resources": {"limits": {"foo": "1G"}, "requests": {"foo": "500M"}}}"#;

fn sample_hash(version: &str) -> (String, Option<String>) {
    let v: KubeletVersion = version.parse().unwrap();
    let h = hashcompat::hash_container_bytes(CONSISTENT_HASH_SAMPLE.as_bytes(), v).unwrap();
    (
        h.hash.to_string(),
        h.hash_without_resources.map(|x| x.to_string()),
    )
}

/// Constants of the kubelet's own unit tests (helpers_test.go, container_hash_test.go).
#[test]
fn upstream_test_vectors() {
    for minor in 16..=30 {
        let v = format!("1.{minor}");
        assert_eq!(
            hash_of("r010", &v).0,
            "3c42280f",
            "TestHashContainer at {v}"
        );
        assert_eq!(
            sample_hash(&v).0,
            "311670a",
            "TestConsistentHashContainer at {v}"
        );
    }
    for minor in 27..=30 {
        let v = format!("1.{minor}");
        assert_eq!(
            hash_of("r010", &v).1.as_deref(),
            Some("3c42280f"),
            "without resources {v}"
        );
        assert_eq!(
            sample_hash(&v).1.as_deref(),
            Some("e8022015"),
            "without resources {v}"
        );
    }
    for minor in 31..=36 {
        let v = format!("1.{minor}");
        assert_eq!(
            hash_of("r010", &v).0,
            "8e45cbd0",
            "TestHashContainer at {v}"
        );
        assert_eq!(
            sample_hash(&v).0,
            "8e45cbd0",
            "TestConsistentHashContainer at {v}"
        );
    }
}

/// Hashes seen on real nodes (see fixtures/golden/README.md, "Cross-checks").
#[test]
fn real_node_observations() {
    assert_eq!(
        hash_of("w001", "1.16").0,
        "c3e9fd0c",
        "kubectl run apache on a 1.16 node"
    );
    assert_eq!(
        hash_of("w002", "1.16").0,
        "6da723ca",
        "kubeadm 1.16 kube-scheduler"
    );
    assert_eq!(
        hash_of("w003", "1.16").0,
        "3d3a9263",
        "kubeadm 1.16 kube-proxy"
    );
}
