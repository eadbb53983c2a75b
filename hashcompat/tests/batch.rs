//! `hash_many` (interleaved FNV lanes) gives exactly the golden hashes, for every version, in
//! input order, whatever the batch size.

use hashcompat::{decode, hash_many, parse_json, DecodedContainer, KubeletVersion};
mod golden_set;

use golden_set::{expected, specs, Spec};

#[test]
fn hash_many_reproduces_every_golden_hash() {
    let specs = specs();
    let expected = expected();
    let mut checked = 0;
    for v in KubeletVersion::all() {
        let decoded: Vec<DecodedContainer> = specs
            .iter()
            .map(|s| {
                let doc = parse_json(s.line.as_bytes()).unwrap();
                decode(doc.get("container").unwrap(), v).unwrap()
            })
            .collect();
        let refs: Vec<&DecodedContainer> = decoded.iter().collect();
        // Whole corpus at once, then odd batch sizes (lanes idle, stragglers).
        for size in [refs.len(), 1, 3, 7, 9, 17] {
            let got: Vec<_> = refs.chunks(size).flat_map(|c| hash_many(c, v)).collect();
            assert_eq!(got.len(), specs.len());
            for (Spec { id, .. }, h) in specs.iter().zip(&got) {
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
