//! Bytes as a Docker `config.v2.json` → the Docker back-end's in-memory label edit
//! (`storepatch::docker::edit_config`, the pure core of `DockerStore::apply`).
//!
//! Invariants: no panic; an edit is produced only for a document that parses, whose `ID` is
//! the container's, and which is a dockershim/cri-dockerd container with a string hash label;
//! the result equals the original bytes with exactly the changed label value tokens replaced
//! (byte model), and re-parses to the original document with only those labels changed
//! (serde_json Value model).
#![no_main]

use kubelet_rehash_fuzz::is_token_replacement;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use storepatch::docker::{self, DOCKER_TYPE_LABEL, HASH_LABEL, HASH_WITHOUT_RESOURCES_LABEL};
use storepatch::{Hash, Rewrite};

const NEW_VALUES: [&str; 4] = ["deadbeef", "0", "ffffffff", "3c42280f"];

fn new_value(pick: usize) -> Hash {
    NEW_VALUES[pick % NEW_VALUES.len()]
        .parse()
        .expect("a kubelet hash")
}

fuzz_target!(|data: &[u8]| {
    let doc: Option<Value> = serde_json::from_slice(data).ok();
    let id = doc
        .as_ref()
        .and_then(|d| d.get("ID"))
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty() && !s.contains('/') && s.len() <= 255 && *s != "." && *s != "..")
        .unwrap_or("0123abcd")
        .to_string();
    let pick = data.iter().fold(0usize, |a, &b| a.wrapping_add(b as usize));
    let rw = Rewrite {
        id,
        hash: new_value(pick),
        hash_without_resources: (pick % 3 != 0).then(|| new_value(pick / 5)),
    };
    let result = docker::edit_config(data, &rw, "fuzz/config.v2.json");
    let Ok(new) = result else {
        return;
    };
    let doc = doc.expect("an edit was produced for a document that does not parse");
    assert_eq!(doc.get("ID").and_then(Value::as_str), Some(rw.id.as_str()));
    let labels = doc
        .get("Config")
        .and_then(|c| c.get("Labels"))
        .and_then(Value::as_object)
        .expect("an edit was produced without a Config.Labels object");
    assert_eq!(
        labels.get(DOCKER_TYPE_LABEL).and_then(Value::as_str),
        Some("container"),
        "an edit was produced for something that is not a container"
    );
    let old_hash = labels
        .get(HASH_LABEL)
        .and_then(Value::as_str)
        .expect("an edit was produced without a string hash label");

    // the reference model: which labels change, and to what
    let mut changes: Vec<(String, String)> = Vec::new();
    let new_hash = rw.hash.to_string();
    if old_hash != new_hash {
        changes.push((old_hash.to_string(), new_hash.clone()));
    }
    let mut expect = doc.clone();
    let ex_labels = expect
        .get_mut("Config")
        .and_then(|c| c.get_mut("Labels"))
        .and_then(Value::as_object_mut)
        .unwrap();
    ex_labels.insert(HASH_LABEL.to_string(), Value::String(new_hash));
    if let Some(h) = rw.hash_without_resources.map(|h| h.to_string()) {
        match labels.get(HASH_WITHOUT_RESOURCES_LABEL) {
            Some(Value::String(old)) => {
                if *old != h {
                    changes.push((old.clone(), h.clone()));
                }
                ex_labels.insert(
                    HASH_WITHOUT_RESOURCES_LABEL.to_string(),
                    Value::String(h.clone()),
                );
            }
            None => {}
            Some(other) => {
                panic!("an edit was produced although {HASH_WITHOUT_RESOURCES_LABEL} is {other}")
            }
        }
    }
    let reparsed: Value = serde_json::from_slice(&new).expect("the edited bytes parse");
    assert_eq!(
        reparsed, expect,
        "the edited document differs from the model"
    );
    assert!(
        is_token_replacement(data, &new, &changes),
        "the edit changed more bytes than the label value tokens:\nold {}\nnew {}",
        String::from_utf8_lossy(data),
        String::from_utf8_lossy(&new)
    );
    // idempotent: editing the result again changes nothing
    let again = docker::edit_config(&new, &rw, "fuzz/config.v2.json").expect("re-edit");
    assert_eq!(again, new, "a second edit changed the bytes again");
});
