//! The containerd back-end's CRI extension (`io.cri-containerd.container.metadata`): decode
//! and the surgical hash-annotation edit.
//!
//! Input: raw bytes of the protobuf `Any`; or, when the input starts with `{`, the JSON of a
//! metadata document, wrapped in a valid `Any` with the container type_url (structured mode).
//!
//! Invariants: no panic; an edit is produced only for a value that decodes; the edited `Any`
//! keeps every byte outside the JSON (type_url, framing, unknown fields) except the varint
//! length; its JSON is the original JSON with exactly the annotation value tokens replaced
//! (byte model) and parses to the original document with only those annotation values
//! changed (serde_json Value model); completeness: a container value that decodes and carries
//! the hash annotation as a string is always editable.
#![no_main]

use kubelet_rehash_fuzz::is_token_replacement;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use storepatch::containerd::cri;
use storepatch::{HASH_ANNOTATION, HASH_WITHOUT_RESOURCES_ANNOTATION};

const NEW_VALUES: [&str; 4] = ["deadbeef", "0", "ffffffffffffffff", "8e45cbd0"];

fn wrap(json: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(json.len() + 64);
    out.push(0x0a);
    cri::put_varint(&mut out, cri::CONTAINER_TYPE_URL.len() as u64);
    out.extend_from_slice(cri::CONTAINER_TYPE_URL.as_bytes());
    out.push(0x12);
    cri::put_varint(&mut out, json.len() as u64);
    out.extend_from_slice(json);
    out
}

fuzz_target!(|data: &[u8]| {
    let raw = if data.first() == Some(&b'{') {
        wrap(data)
    } else {
        data.to_vec()
    };
    let layout = cri::any_layout(&raw);
    let decoded = cri::decode(&raw, cri::CONTAINER_TYPE_URL);
    let _ = cri::decode(&raw, cri::SANDBOX_TYPE_URL);
    // the streaming decoder answers only as the tree decoder (the reference) does
    if let Ok(layout) = &layout {
        let json = &raw[layout.value.clone()];
        if let Some(fast) = cri::decode_json_streaming(json) {
            match cri::decode_json_tree(json) {
                Ok((reference, _)) => assert_eq!(fast, reference, "the streaming decoder read other fields than the tree decoder"),
                Err(e) => panic!("the streaming decoder accepted a document the tree decoder refuses: {e}"),
            }
        }
    }

    // pick new values from the input, so the fuzzer can also hit "same as before"
    let pick = data.iter().fold(0usize, |a, &b| a.wrapping_add(b as usize));
    let new_hash = NEW_VALUES[pick % NEW_VALUES.len()];
    let new_hwr = NEW_VALUES[(pick / 7) % NEW_VALUES.len()];
    let has_hwr = matches!(&decoded, Ok(d) if d.annotations.contains_key(HASH_WITHOUT_RESOURCES_ANNOTATION));
    let mut changes: Vec<(&str, &str)> = vec![(HASH_ANNOTATION, new_hash)];
    if has_hwr && pick % 2 == 0 {
        changes.push((HASH_WITHOUT_RESOURCES_ANNOTATION, new_hwr));
    }

    let result = cri::rewrite_extension(&raw, &changes);
    if let Ok(d) = &decoded {
        if d.annotations.contains_key(HASH_ANNOTATION) {
            if let Err(e) = &result {
                panic!("a decodable container value carrying the hash annotation was refused: {e}");
            }
        }
    }
    let Ok(out) = result else {
        return;
    };
    let d = decoded.expect("an edit was produced for a value that does not decode");
    let layout = layout.expect("decodes, so its layout parses");
    let old_json = &raw[layout.value.clone()];
    let (_, old_doc) = cri::decode_json_tree(old_json).expect("it decoded");

    // framing: every byte outside the JSON but the length varint is kept
    let new_layout = cri::any_layout(&out).expect("the edited Any parses");
    assert_eq!(new_layout.type_url, layout.type_url);
    assert_eq!(
        out[..layout.len_prefix.start],
        raw[..layout.len_prefix.start]
    );
    assert_eq!(new_layout.len_prefix.start, layout.len_prefix.start);
    assert_eq!(out[new_layout.value.end..], raw[layout.value.end..]);
    let new_json = &out[new_layout.value.clone()];

    // byte model: only the annotation value tokens changed
    let model: Vec<(String, String)> = changes
        .iter()
        .map(|(k, v)| (d.annotations[*k].clone(), v.to_string()))
        .collect();
    assert!(
        is_token_replacement(old_json, new_json, &model),
        "the edit changed more than the annotation value tokens:\nold {}\nnew {}",
        String::from_utf8_lossy(old_json),
        String::from_utf8_lossy(new_json)
    );

    // Value model: the original document with only those annotation values changed
    let mut expect: Value = serde_json::from_slice(old_json).expect("it decoded");
    assert_eq!(expect, old_doc);
    {
        let ann = expect
            .get_mut("Metadata")
            .and_then(|m| m.get_mut("Config"))
            .and_then(|c| c.get_mut("annotations"))
            .and_then(Value::as_object_mut)
            .expect("annotations object");
        for (k, v) in &changes {
            assert!(ann.contains_key(*k));
            ann.insert((*k).to_string(), Value::String((*v).to_string()));
        }
    }
    let got: Value = serde_json::from_slice(new_json).expect("the edited JSON parses");
    assert_eq!(got, expect, "the edited document differs from the model");
    let d2 = cri::decode(&out, cri::CONTAINER_TYPE_URL).expect("the edited value decodes");
    for (k, v) in &changes {
        assert_eq!(d2.annotations.get(*k).map(String::as_str), Some(*v));
    }
    assert_eq!(d2.id, d.id);
    assert_eq!(d2.labels, d.labels);
});
