//! The golden set of fixtures/golden, as the test files that check against it read it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

pub fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/golden")
}

pub struct Spec {
    pub id: String,
    pub line: String,
}

pub fn specs() -> Vec<Spec> {
    std::fs::read_to_string(golden_dir().join("specs.jsonl"))
        .expect("fixtures/golden/specs.jsonl")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            Spec {
                id: v["id"].as_str().unwrap().to_string(),
                line: l.to_string(),
            }
        })
        .collect()
}

/// (id, version) -> (hash, hash_without_resources)
pub fn expected() -> HashMap<(String, String), (String, Option<String>)> {
    std::fs::read_to_string(golden_dir().join("hashes.jsonl"))
        .expect("fixtures/golden/hashes.jsonl")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (
                (
                    v["id"].as_str().unwrap().to_string(),
                    v["version"].as_str().unwrap().to_string(),
                ),
                (
                    v["hash"].as_str().unwrap().to_string(),
                    v.get("hash_without_resources")
                        .and_then(|h| h.as_str())
                        .map(str::to_string),
                ),
            )
        })
        .collect()
}
