//! The runtime versions `kubelet-rehash --version` names as tested come from the bundled real
//! nodes (`fixtures/nodes/*/expected.json`, the version each runtime reported about itself), so
//! the claim cannot drift from the fixtures the tests run on: adding a node adds its runtime.

use std::fmt::Write;
use std::path::Path;

fn main() {
    let nodes = manifest_dir().join("../fixtures/nodes");
    println!("cargo:rerun-if-changed={}", nodes.display());
    let mut rows = Vec::new();
    for entry in std::fs::read_dir(&nodes).expect("fixtures/nodes must exist") {
        let dir = entry.expect("readable fixtures/nodes").path();
        let expected = dir.join("expected.json");
        if !expected.is_file() {
            continue;
        }
        println!("cargo:rerun-if-changed={}", expected.display());
        let text = std::fs::read_to_string(&expected).expect("readable expected.json");
        let doc: serde_json::Value =
            serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", expected.display()));
        let node = doc["scenario"]
            .as_str()
            .unwrap_or_else(|| panic!("{}: no scenario", expected.display()));
        let (runtime, version) = runtime_of(&doc["runtime"])
            .unwrap_or_else(|| panic!("{}: runtime of an unknown shape", expected.display()));
        let from = doc["from_kubelet"]
            .as_str()
            .unwrap_or_else(|| panic!("{}: no from_kubelet", expected.display()));
        let targets: Vec<String> = doc["summary_per_target"]
            .as_object()
            .unwrap_or_else(|| panic!("{}: no summary_per_target", expected.display()))
            .keys()
            .cloned()
            .collect();
        rows.push((node.to_owned(), runtime, version, from.to_owned(), targets));
    }
    assert!(!rows.is_empty(), "no fixtures/nodes/*/expected.json");
    rows.sort();
    let mut out = String::from("&[\n");
    for (node, runtime, version, from, mut targets) in rows {
        targets.sort_by_key(|t| minor(t));
        writeln!(
            out,
            "    TestedNode {{ node: {node:?}, runtime: {runtime:?}, version: {version:?}, from: {from:?}, targets: &{targets:?} }},"
        )
        .unwrap();
    }
    out.push(']');
    let dest = Path::new(&std::env::var("OUT_DIR").unwrap()).join("tested_nodes.rs");
    std::fs::write(dest, out).unwrap();
}

/// CRI nodes recorded `Version` (`runtime_name`, `runtime_version`); the Docker node recorded
/// the Engine API's `/version` (`Version`, with `Components[].Name == "Engine"`).
fn runtime_of(v: &serde_json::Value) -> Option<(String, String)> {
    if let (Some(name), Some(version)) = (v["runtime_name"].as_str(), v["runtime_version"].as_str())
    {
        return Some((name.to_owned(), version.to_owned()));
    }
    let engine = v["Components"]
        .as_array()?
        .iter()
        .find(|c| c["Name"] == "Engine")?;
    Some(("docker".to_owned(), engine["Version"].as_str()?.to_owned()))
}

fn minor(t: &str) -> u32 {
    t.rsplit('.')
        .next()
        .and_then(|m| m.parse().ok())
        .unwrap_or_else(|| panic!("target {t:?} is not a kubelet major.minor"))
}

/// The package's directory, read when the script runs, never when it was compiled: cargo may
/// reuse this script's binary, compiled for another checkout, when two checkouts share a target
/// directory (`CARGO_TARGET_DIR`), and `env!` would then read that other (perhaps deleted)
/// checkout's files.
fn manifest_dir() -> std::path::PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .expect("cargo sets CARGO_MANIFEST_DIR for build scripts")
        .into()
}
