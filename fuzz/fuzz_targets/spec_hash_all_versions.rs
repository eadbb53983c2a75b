//! Container spec bytes → `parse_json` → `hash_versions` for every supported kubelet version.
//!
//! Invariants: no panic; one result per version; for each (checked) version whose hash is computed, a
//! fresh `decode` + `hashes` gives the same value, the hashed text `explain` shows hashes
//! (FNV-1a 32) to that value (and likewise for `hashWithoutResources`, present exactly for the
//! versions that have it), and the JSON of the JSON forms is valid JSON (Go's `json.Marshal`
//! never writes invalid UTF-8 or lone surrogates).
#![no_main]

use hashcompat::{decode, hash_versions, parse_json, sink, Hash, HashForm, KubeletVersion};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(node) = parse_json(data) else {
        return;
    };
    let versions = KubeletVersion::all();
    let results = hash_versions(&node, &versions);
    assert_eq!(results.len(), versions.len());
    // `hash_versions` covers every version; the costlier cross-checks (a fresh decode and the
    // explained text) run for three versions per input: the oldest, the newest and one picked
    // by the input, so every version is cross-checked over a run.
    let pick = data
        .iter()
        .fold(0usize, |a, &b| a.wrapping_mul(31).wrapping_add(b as usize));
    let chosen = [0, versions.len() - 1, pick % versions.len()];
    for (i, (&v, r)) in versions.iter().zip(&results).enumerate() {
        if !chosen.contains(&i) {
            continue;
        }
        let d = decode(&node, v);
        let h = match r {
            Ok(h) => h,
            Err(e) => {
                assert!(
                    d.is_err(),
                    "{v}: hash_versions failed ({e}) but decode succeeded"
                );
                continue;
            }
        };
        let d = d.unwrap_or_else(|e| panic!("{v}: hash_versions succeeded but decode failed: {e}"));
        assert_eq!(
            d.hashes(v),
            *h,
            "{v}: hashes differ between hash_versions and decode"
        );
        assert_eq!(h.version, v);
        assert_eq!(
            h.hash_without_resources.is_some(),
            v.hash_form() == HashForm::JsonWithoutResources,
            "{v}"
        );
        let e = d.explain(v);
        assert_eq!(
            Hash(sink::fnv32a(&e.hash.text)),
            h.hash,
            "{v}: explained text"
        );
        assert_eq!(e.hash.hash, h.hash, "{v}");
        match (&e.without_resources, h.hash_without_resources) {
            (Some(w), Some(hw)) => {
                assert_eq!(
                    Hash(sink::fnv32a(&w.text)),
                    hw,
                    "{v}: explained text w/o resources"
                );
                assert_eq!(w.hash, hw, "{v}");
            }
            (None, None) => {}
            _ => panic!("{v}: explain and hashes disagree on hashWithoutResources"),
        }
        for t in std::iter::once(&e.hash).chain(e.without_resources.iter()) {
            assert_eq!(t.json.is_some(), v.hash_form() != HashForm::Struct, "{v}");
            if let Some(j) = &t.json {
                if let Err(err) = serde_json::from_slice::<serde_json::Value>(j) {
                    panic!(
                        "{v}: hashed JSON is not valid JSON ({err}): {}",
                        String::from_utf8_lossy(j)
                    );
                }
            }
        }
    }
});
