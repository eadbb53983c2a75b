//! `hash_many` (interleaved FNV lanes) gives exactly the golden hashes, for every version, in
//! input order, whatever the batch size.

use hashcompat::{decode, hash_many, parse_json, DecodedContainer, KubeletVersion};
use std::collections::HashMap;
use std::path::Path;

fn read(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../fixtures/golden")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn hash_many_reproduces_every_golden_hash() {
    let specs: Vec<(String, String)> = read("specs.jsonl")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (v["id"].as_str().unwrap().to_string(), l.to_string())
        })
        .collect();
    let expected: HashMap<(String, String), (String, Option<String>)> = read("hashes.jsonl")
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
        .collect();
    let mut checked = 0;
    for v in KubeletVersion::all() {
        let decoded: Vec<DecodedContainer> = specs
            .iter()
            .map(|(_, l)| {
                let doc = parse_json(l.as_bytes()).unwrap();
                decode(doc.get("container").unwrap(), v).unwrap()
            })
            .collect();
        let refs: Vec<&DecodedContainer> = decoded.iter().collect();
        // Whole corpus at once, then odd batch sizes (lanes idle, stragglers).
        for size in [refs.len(), 1, 3, 7, 9, 17] {
            let got: Vec<_> = refs.chunks(size).flat_map(|c| hash_many(c, v)).collect();
            assert_eq!(got.len(), specs.len());
            for ((id, _), h) in specs.iter().zip(&got) {
                let (want, want_wr) = &expected[&(id.clone(), v.to_string())];
                assert_eq!(h.version, v);
                assert_eq!(&h.hash.to_string(), want, "{id} {v} batch size {size}");
                assert_eq!(
                    &h.hash_without_resources.map(|x| x.to_string()),
                    want_wr,
                    "{id} {v} batch size {size}"
                );
                checked += 1;
            }
        }
    }
    assert_eq!(checked, expected.len() * 6);
    assert!(hash_many(&[], "1.22".parse().unwrap()).is_empty());
}
