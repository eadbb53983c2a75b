//! fixtures/golden/real-kubelet/: specs as the API server served them and the hash the real
//! kubelet of each version (built from Kubernetes' Go modules, scripts/k8s-lab.sh) stored for
//! them, read from the runtime (scripts/real-kubelet-golden.sh regenerates them). A source of
//! golden lines independent of the Go harness that made fixtures/golden: every line must be
//! what `kubelet-rehash hash` computes.

use std::process::{Command, Stdio};

#[test]
fn every_hash_a_real_kubelet_stored_is_what_we_compute() {
    let dir = testtools::fixtures_dir().join("golden/real-kubelet");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "jsonl"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no golden files in {}", dir.display());
    let mut lines = 0;
    for f in &files {
        let version = f.file_stem().unwrap().to_str().unwrap();
        let text = std::fs::read_to_string(f).unwrap();
        let mut child = Command::new(env!("CARGO_BIN_EXE_kubelet-rehash"))
            .args(["hash", "-k", version])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{}: hash failed", f.display());
        let ours: Vec<serde_json::Value> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let want: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(ours.len(), want.len(), "{}: one hash per line", f.display());
        for (o, w) in ours.iter().zip(&want) {
            assert_eq!(o["id"], w["id"]);
            assert_eq!(
                o["hash"],
                w["hash"],
                "{}: {}: the hash real kubelet {version} stored",
                f.display(),
                w["id"]
            );
            lines += 1;
        }
    }
    assert!(lines >= 8, "{lines} golden lines");
}
