//! The streaming decoder of the CRI metadata JSON against the tree decoder (the reference):
//! on every extension value containerd wrote in the fixtures it answers, and answers the same;
//! on the documents where skipping a value could accept what the tree decoder refuses, it
//! leaves the answer to the reference. (The fuzz target `cri_extension_edit` checks the same
//! property on generated documents.)

use storepatch::containerd::bolt::{self, Db};
use storepatch::containerd::{cri, META_DB};

use testtools::{fixtures_dir, gunzip};

/// Every CRI extension value (container and sandbox) in the meta.db fixtures written by real
/// containerd: (where, raw Any bytes, type url it must carry).
fn extension_values() -> Vec<(String, Vec<u8>, &'static str)> {
    let mut files: Vec<(String, Vec<u8>)> = Vec::new();
    for v in ["1.6", "1.7"] {
        let p = fixtures_dir().join(format!("nodes/containerd-{v}/var/lib/containerd/{META_DB}"));
        files.push((p.display().to_string(), std::fs::read(&p).unwrap()));
    }
    let store = fixtures_dir().join("stores/containerd-1.6.20");
    for name in ["meta.db.before", "meta.db.nofreelist"] {
        let p = store.join(name);
        files.push((p.display().to_string(), std::fs::read(&p).unwrap()));
    }
    let bulk = store.join("meta-bulk-2000.db.gz");
    files.push((bulk.display().to_string(), gunzip(&bulk)));
    let mut out = Vec::new();
    for (name, bytes) in files {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("meta.db");
        std::fs::write(&path, &bytes).unwrap();
        let kv = bolt::testing::kv_of(&Db::read_path(&path).unwrap()).unwrap();
        for ((_, key), (value, _)) in kv {
            let Some(value) = value else { continue };
            let url = if key == cri::CONTAINER_EXT.as_bytes() {
                cri::CONTAINER_TYPE_URL
            } else if key == cri::SANDBOX_EXT.as_bytes() {
                cri::SANDBOX_TYPE_URL
            } else {
                continue;
            };
            out.push((name.clone(), value, url));
        }
    }
    out
}

#[test]
fn streaming_decoder_answers_every_real_record_as_the_tree_decoder() {
    let values = extension_values();
    assert!(
        values.len() > 2000,
        "the fixtures hold the 2,000-container bulk file and the nodes: {} values",
        values.len()
    );
    for (file, raw, url) in &values {
        let layout = cri::any_layout(raw).unwrap();
        assert_eq!(layout.type_url, *url, "{file}: type url");
        let json = &raw[layout.value.clone()];
        let (reference, _) = cri::decode_json_tree(json)
            .unwrap_or_else(|e| panic!("{file}: a record containerd wrote does not decode: {e}"));
        let fast = cri::decode_json_streaming(json).unwrap_or_else(|| {
            panic!(
                "{file}: the streaming decoder left a record containerd wrote to the reference: {}",
                String::from_utf8_lossy(json)
            )
        });
        assert_eq!(
            fast, reference,
            "{file}: the streaming decoder read other fields than the tree decoder"
        );
        assert_eq!(
            cri::decode(raw, url).unwrap(),
            reference,
            "{file}: decode answers what the reference reads"
        );
    }
}

/// A minimal container document with `extra` spliced into `Metadata.Config`.
fn doc(extra: &str) -> String {
    format!(
        r#"{{"Version":"v1","Metadata":{{"ID":"c1","Name":"n","SandboxID":"s","Config":{{"metadata":{{"name":"app","attempt":2}},"labels":{{"io.kubernetes.pod.uid":"u"}},"annotations":{{"io.kubernetes.container.hash":"1a2b3c4d"}},"image":{{"image":"busybox"}}{extra}}}}}}}"#
    )
}

/// Documents the tree decoder refuses (or reads differently) although a decoder that only
/// skips the values it does not need could accept them.
#[test]
fn streaming_decoder_never_accepts_what_the_reference_refuses() {
    let refused: Vec<(String, &str)> = vec![
        (
            doc(r#","x":"\ud800""#),
            "a lone surrogate in a field nobody reads",
        ),
        (
            doc(r#","x":[1,{"y":"\udfff"}]"#),
            "a lone surrogate nested in an array",
        ),
        (
            doc(r#","labels":{"k":1}"#),
            "a later labels object with a non-string member",
        ),
        (doc(r#","metadata":{"attempt":-1}"#), "a negative attempt"),
        (
            doc(r#","metadata":{"attempt":4294967296}"#),
            "an attempt past uint32",
        ),
        (
            doc(r#","metadata":{"attempt":1.0}"#),
            "a fractional attempt",
        ),
        (
            doc(r#","image":{"image":7}"#),
            "an image that is not a string",
        ),
        (
            doc(r#","metadata":"app""#),
            "metadata that is not an object",
        ),
        (
            r#"{"Version":"v2","Metadata":{}}"#.into(),
            "another Version",
        ),
        (r#"{"Version":"v1"}"#.into(), "no Metadata"),
        (
            r#"{"Version":"v1","Metadata":null}"#.into(),
            "a null Metadata",
        ),
        (
            r#"{"Version":"v1","Metadata":{"ID":5}}"#.into(),
            "a numeric ID",
        ),
        (r#"[1]"#.into(), "not an object"),
        // serde_json's tree decoder (with arbitrary_precision, on in this build) reads an
        // object whose first key is its number token as a number; Go reads an object
        (
            doc(
                r#","annotations":{"$serde_json::private::Number":"809b3ff5","io.kubernetes.container.hash":"1"}"#,
            ),
            "annotations starting with serde_json's number token (the fuzz target's finding)",
        ),
        (
            doc(r#","x":{"$serde_json::private::Number":"abc"}"#),
            "serde_json's number token with a non-number in a field nobody reads",
        ),
        (
            r#"{"$serde_json::private::Number":"1","Version":"v1","Metadata":{}}"#.into(),
            "a document starting with serde_json's number token",
        ),
        (
            r#"{"Version":"v1","Metadata":{}} x"#.into(),
            "trailing bytes",
        ),
    ];
    for (json, what) in &refused {
        assert!(
            cri::decode_json_tree(json.as_bytes()).is_err(),
            "{what}: the reference refuses it (test premise): {json}"
        );
        assert_eq!(
            cri::decode_json_streaming(json.as_bytes()),
            None,
            "{what}: the streaming decoder must leave it to the reference: {json}"
        );
    }
    // invalid UTF-8 in a string nobody reads
    let mut bytes = doc(r#","x":"#).into_bytes();
    let at = bytes.len() - 3;
    bytes.splice(at..at, b"\"\xff\"".iter().copied());
    assert!(
        cri::decode_json_tree(&bytes).is_err(),
        "premise: invalid UTF-8 refused"
    );
    assert_eq!(
        cri::decode_json_streaming(&bytes),
        None,
        "invalid UTF-8 left to the reference"
    );
}

/// Where the tree decoder keeps the last of repeated keys, drops null members and ignores a
/// non-object image, the streaming decoder, when it answers, reads the same.
#[test]
fn streaming_decoder_reads_repeats_nulls_and_escapes_as_the_reference() {
    let agreeing = [
        doc(r#","annotations":{"io.kubernetes.container.hash":"ffff","a":null}"#),
        doc(r#","labels":{"k":"v","k":null,"j":"w"}"#),
        doc(r#","image":7"#),
        doc(r#","image":[{"image":1}]"#),
        doc(r#","metadata":null"#),
        doc(r#","metadata":{"name":"b"}"#),
        doc(r#","metadata":{"attempt":null,"uid":"\u00e9"}"#),
        doc(r#","labels":{"k\"ey":"v\nw","\u0041":"x"}"#),
        r#"{"Version":"v2","Version":"v1","Metadata":{"ID":"a","ID":null}}"#.to_string(),
        r#"{"Metadata":{"Config":null},"Version":"v1"}"#.to_string(),
        r#"{"Version":"v1","Metadata":{"Name":"x"},"Metadata":{"ID":"y"}}"#.to_string(),
        r#"{"Versio\u006e":"v1","Version":"v1","Metadata":{}}"#.to_string(),
    ];
    let mut answered = 0;
    for json in &agreeing {
        let (reference, _) = cri::decode_json_tree(json.as_bytes())
            .unwrap_or_else(|e| panic!("premise: the reference reads {json}: {e}"));
        if let Some(fast) = cri::decode_json_streaming(json.as_bytes()) {
            answered += 1;
            assert_eq!(
                fast, reference,
                "streaming and tree decoders differ on {json}"
            );
        }
    }
    assert!(
        answered >= agreeing.len() - 1,
        "only a key spelled with an escape goes to the reference: {answered} of {} answered",
        agreeing.len()
    );
}
