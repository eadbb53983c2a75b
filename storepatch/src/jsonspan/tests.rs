use super::*;

fn keys<'a>(o: &'a Object<'_>) -> Vec<&'a str> {
    o.members.iter().map(|m| m.key.as_ref()).collect()
}

fn at(doc: &[u8], span: &Span) -> String {
    String::from_utf8_lossy(&doc[span.clone()]).into_owned()
}

fn refused(doc: &[u8]) -> SpanError {
    root(doc).expect_err(&String::from_utf8_lossy(doc))
}

#[test]
fn members_kinds_and_spans_of_nested_values() {
    let doc =
        br#"{"a":1,"b":{"c":[1,-2.5e+3,{"d":null}],"e":{}},"f":"x\"y","g":[],"h":true,"i":false}"#;
    let o = root(doc).unwrap();
    assert_eq!(keys(&o), ["a", "b", "f", "g", "h", "i"]);
    let kinds: Vec<Kind> = o.members.iter().map(|m| m.kind).collect();
    use Kind::*;
    assert_eq!(kinds, [Number, Object, String, Array, Bool, Bool]);
    assert_eq!(
        at(doc, &o.members[1].value),
        r#"{"c":[1,-2.5e+3,{"d":null}],"e":{}}"#
    );
    assert_eq!(at(doc, &o.members[2].value), r#""x\"y""#);
    assert_eq!(o.span, 0..doc.len());
    assert_eq!(o.members[1].key_at, 7);
    // nested objects are listed only when asked for, with spans into the same input
    let b = o.object_field("b").unwrap().unwrap();
    assert_eq!(keys(&b), ["c", "e"]);
    assert_eq!(at(doc, &b.span), at(doc, &o.members[1].value));
    let e = object_path(doc, &["b", "e"]).unwrap().unwrap();
    assert!(e.members.is_empty());
    assert_eq!(at(doc, &e.span), "{}");
}

#[test]
fn whitespace_is_the_four_json_characters_anywhere_between_tokens() {
    let doc = b" \t\r\n{ \"a\" \n:\t[ 1 ,\r\n2 ] ,\"b\":\"s\" \t} \n";
    let o = root(doc).unwrap();
    assert_eq!(keys(&o), ["a", "b"]);
    assert_eq!(at(doc, &o.members[0].value), "[ 1 ,\r\n2 ]");
    assert_eq!(at(doc, &o.members[1].value), "\"s\"");
    assert_eq!(o.span, 4..doc.len() - 2);
    // form feed, vertical tab and NBSP are not JSON whitespace
    for ws in ["\u{c}", "\u{b}", "\u{a0}"] {
        let doc = format!("{{\"a\":{ws}1}}");
        let e = refused(doc.as_bytes());
        assert_eq!((e.at, e.reason), (5, Reason::Expected("a value")), "{ws:?}");
    }
    let e = refused(b"{}\x0c");
    assert_eq!((e.at, e.reason), (2, Reason::TrailingData));
}

#[test]
fn escapes_decode_and_keys_match_decoded() {
    let lit = br#""a\"\\\/\b\f\n\r\t\u0041\u00e9\u20ac\ud83d\ude00z""#;
    let d = decode_string(lit, 0).unwrap();
    assert_eq!(d.text, "a\"\\/\u{8}\u{c}\n\r\tA\u{e9}\u{20ac}\u{1f600}z");
    assert_eq!(d.span, 0..lit.len());
    assert_eq!(d.text, serde_json::from_slice::<String>(lit).unwrap());
    // a key is compared decoded, however it was escaped
    let doc = br#"{"h\u0061sh":"1","\u00e9t\u00E9":"2","plain":"3"}"#;
    let o = root(doc).unwrap();
    assert_eq!(keys(&o), ["hash", "\u{e9}t\u{e9}", "plain"]);
    assert!(matches!(o.members[0].key, Cow::Owned(_)));
    assert!(matches!(o.members[2].key, Cow::Borrowed("plain")));
    assert_eq!(at(doc, &o.get("hash").unwrap().value), r#""1""#);
    // raw UTF-8 is kept as it is
    let d = decode_string("\"é€😀\"".as_bytes(), 0).unwrap();
    assert_eq!(d.text, "é€😀");
}

#[test]
fn decoded_offsets_map_an_embedded_document_back_to_the_file() {
    // CRI-O's shape: a JSON document inside a string, with escapes of its own
    let file = br#"{"e":"{\"k\":\"v\u00e9\",\"h\":\"ab\",\"x\":\"\\u003c\"}"}"#;
    let outer = root(file).unwrap();
    let d = decode_string(file, outer.get("e").unwrap().value.start).unwrap();
    assert_eq!(d.text, r#"{"k":"vé","h":"ab","x":"\u003c"}"#);
    let inner = root(d.text.as_bytes()).unwrap();
    assert_eq!(
        at(file, &d.raw_span(&inner.get("h").unwrap().value)),
        r#"\"ab\""#
    );
    assert_eq!(
        at(file, &d.raw_span(&inner.get("k").unwrap().value)),
        r#"\"v\u00e9\""#
    );
    assert_eq!(
        at(file, &d.raw_span(&inner.get("x").unwrap().value)),
        r#"\"\\u003c\""#
    );
    assert_eq!(
        at(file, &d.raw_span(&inner.span)),
        &at(file, &d.span)[1..d.span.len() - 1]
    );
    // an error inside the embedded document points into the file
    let file = br#"{"e":"{\"k\":tru}"}"#;
    let d = decode_string(file, 5).unwrap();
    let e = root(d.text.as_bytes()).unwrap_err();
    assert_eq!((e.at, &e.reason), (5, &Reason::Expected("a value")));
    let e = d.raw_error(e);
    assert_eq!(e.at, 13);
    assert_eq!(&file[e.at..e.at + 3], b"tru");
}

#[test]
fn map_keys_last_duplicate_wins_as_in_go_and_serde_json() {
    let doc = br#"{"k":"first","o":{},"k":"second","x":1,"k":"third"}"#;
    let o = root(doc).unwrap();
    assert_eq!(o.members.len(), 5, "every duplicate is listed");
    let last = o.get_string("k").unwrap().unwrap();
    assert_eq!(at(doc, &last.value), r#""third""#);
    assert_eq!(last.key_at, doc.len() - r#""k":"third"}"#.len());
    // serde_json reads the same one, so a verification by re-parsing agrees with the edit
    let v: serde_json::Value = serde_json::from_slice(doc).unwrap();
    assert_eq!(v["k"], "third");
    let edited = splice(doc, vec![Edit::string(last.value.clone(), "new").unwrap()]).unwrap();
    assert_eq!(
        edited, br#"{"k":"first","o":{},"k":"second","x":1,"k":"new"}"#,
        "the earlier duplicates keep their bytes"
    );
    let v: serde_json::Value = serde_json::from_slice(&edited).unwrap();
    assert_eq!(v["k"], "new");
    // keys are exact for maps: another spelling is another key
    assert!(o.get("K").is_none());
    // Go's map[string]string decoding fails on a non-string member even if a later one is a
    // string; so does the lookup
    let doc = br#"{"k":5,"k":"s"}"#;
    let e = root(doc).unwrap().get_string("k").unwrap_err();
    assert_eq!(
        (e.at, e.reason),
        (
            5,
            Reason::NotAString {
                key: "k".into(),
                value: Kind::Number
            }
        )
    );
    assert!(root(doc).unwrap().get_string("absent").unwrap().is_none());
    assert_eq!(
        root(doc).unwrap().check_string_map().unwrap_err().at,
        5,
        "the map as a whole"
    );
    // null sets an entry to "" in Go, and a later string overwrites it; a null last is no string
    let doc = br#"{"k":null,"k":"s","n":null}"#;
    let o = root(doc).unwrap();
    assert_eq!(
        at(doc, &o.get_string("k").unwrap().unwrap().value),
        r#""s""#
    );
    o.check_string_map().unwrap();
    let e = o.get_string("n").unwrap_err();
    assert_eq!(
        (e.at, e.reason.to_string().as_str()),
        (22, "the value of \"n\" is null, not a string")
    );
}

#[test]
fn struct_fields_refuse_what_go_would_merge_or_fold() {
    let ok = br#"{"Config":{"Labels":{"a":"b"}},"Other":1}"#;
    assert_eq!(
        keys(&object_path(ok, &["Config", "Labels"]).unwrap().unwrap()),
        ["a"]
    );
    // Go decodes both objects into the one struct; serde_json keeps the second only
    let twice = br#"{"Config":{"Labels":{"a":"b"}},"Config":{}}"#;
    let e = object_path(twice, &["Config", "Labels"]).unwrap_err();
    assert_eq!(
        (e.at, e.reason),
        (
            1,
            Reason::AmbiguousField {
                field: "Config".into(),
                members: 2
            }
        )
    );
    // Go matches field names case-insensitively, with Unicode simple folding
    for key in ["config", "CONFIG", "\\u0043onfig", "conf\\u0130g"] {
        let doc = format!(r#"{{"Config":{{}},"{key}":{{}}}}"#);
        let e = root(doc.as_bytes()).unwrap().field("Config").unwrap_err();
        assert!(
            matches!(e.reason, Reason::AmbiguousField { members: 2, .. }),
            "{doc}: {e}"
        );
    }
    let kelvin = "{\"\u{212a}ind\":1}";
    let e = root(kelvin.as_bytes()).unwrap().field("kind").unwrap_err();
    assert_eq!(
        e.reason,
        Reason::FieldCase {
            field: "kind".into(),
            key: "\u{212a}ind".into()
        }
    );
    let long_s = "{\"annotation\u{17f}\":{}}";
    let e = root(long_s.as_bytes())
        .unwrap()
        .object_field("annotations")
        .unwrap_err();
    assert!(matches!(e.reason, Reason::FieldCase { .. }), "{e}");
    // a field that is null or absent reads as empty, anything but an object is refused
    assert!(object_path(br#"{"Config":null}"#, &["Config", "Labels"])
        .unwrap()
        .is_none());
    assert!(object_path(br#"{"Other":{}}"#, &["Config"])
        .unwrap()
        .is_none());
    let e = object_path(br#"{"Config":[]}"#, &["Config"]).unwrap_err();
    assert_eq!(
        (e.at, e.reason),
        (
            10,
            Reason::FieldNotAnObject {
                field: "Config".into(),
                value: Kind::Array
            }
        )
    );
}

#[test]
fn go_field_folding() {
    assert!(go_fold_eq("Metadata", "metadata"));
    assert!(go_fold_eq("annotations", "ANNOTATIONS"));
    assert!(go_fold_eq("Kind", "\u{212a}IND"));
    assert!(go_fold_eq("Labels", "Label\u{17f}"));
    assert!(go_fold_eq("Config", "Conf\u{130}g"));
    assert!(!go_fold_eq("Config", "Configs"));
    assert!(!go_fold_eq("Config", "Confiq"));
    assert!(!go_fold_eq("", "a"));
}

#[test]
fn invalid_input_is_refused_with_its_position() {
    use Reason::*;
    let cases: &[(&[u8], usize, Reason)] = &[
        (b"", 0, Truncated),
        (b"  ", 2, Truncated),
        (b"[1]", 0, NotAnObject),
        (b"\"s\"", 0, NotAnObject),
        (b"{", 1, Truncated),
        (b"{\"a\"", 4, Truncated),
        (b"{\"a\":", 5, Truncated),
        (b"{\"a\":1", 6, Truncated),
        (b"{\"a\":\"x", 7, Truncated),
        (b"{\"a\":\"x\\", 7, Truncated),
        (b"{\"a\":\"\\u00", 6, Truncated),
        (b"{\"a\":tr", 7, Truncated),
        (b"{\"a\":-", 6, Truncated),
        (b"{\"a\":1}}", 7, TrailingData),
        (b"{\"a\":1} x", 8, TrailingData),
        (b"{a:1}", 1, Expected("a string")),
        (b"{\"a\" 1}", 5, Expected("':'")),
        (b"{\"a\":1 \"b\":2}", 7, Expected("',' or '}'")),
        (b"{\"a\":[1 2]}", 8, Expected("',' or ']'")),
        (b"{\"a\":1,}", 7, Expected("a string")),
        (b"{\"a\":[1,]}", 8, Expected("a value")),
        (b"{\"a\":tru}", 5, Expected("a value")),
        (b"{\"a\":nul}", 5, Expected("a value")),
        (b"{\"a\":'x'}", 5, Expected("a value")),
        (b"{\"a\":01}", 5, BadNumber),
        (b"{\"a\":1.}", 5, BadNumber),
        (b"{\"a\":.5}", 5, Expected("a value")),
        (b"{\"a\":1e}", 5, BadNumber),
        (b"{\"a\":+1}", 5, Expected("a value")),
        (b"{\"a\":1x}", 5, BadNumber),
        (b"{\"a\":\"x\ny\"}", 7, ControlCharacter),
        (b"{\"a\":\"\\x\"}", 6, BadEscape),
        (b"{\"a\":\"\\u00g0\"}", 6, BadEscape),
        (b"{\"a\":\"\\ud800\"}", 6, LoneSurrogate),
        (b"{\"a\":\"\\udc00\"}", 6, LoneSurrogate),
        (b"{\"a\":\"\\ud800\\u0041\"}", 6, LoneSurrogate),
        (b"{\"a\":\"ok\xff\"}", 8, NotUtf8),
        (b"{\"\xc3\":1}", 2, NotUtf8),
    ];
    for (doc, pos, reason) in cases {
        let e = refused(doc);
        assert_eq!(
            (e.at, &e.reason),
            (*pos, reason),
            "{:?}",
            String::from_utf8_lossy(doc)
        );
        assert!(
            serde_json::from_slice::<serde_json::Value>(doc).is_err()
                || matches!(reason, NotAnObject),
            "serde_json accepts {:?}",
            String::from_utf8_lossy(doc)
        );
    }
    let e = refused(b"{\"a\":1");
    assert_eq!(
        e.to_string(),
        "unexpected end of data (truncated?) at byte 6"
    );
}

#[test]
fn depth_is_limited_at_serde_jsons_limit() {
    let nested = |n: usize| format!("{{\"a\":{}1{}}}", "[".repeat(n), "]".repeat(n));
    // serde_json accepts this, so must we
    let deepest = nested(MAX_DEPTH - 2);
    assert!(serde_json::from_str::<serde_json::Value>(&deepest).is_ok());
    root(deepest.as_bytes()).unwrap();
    let e = refused(nested(MAX_DEPTH).as_bytes());
    assert_eq!((e.at, e.reason), (5 + MAX_DEPTH - 1, Reason::TooDeep));
    assert!(serde_json::from_str::<serde_json::Value>(&nested(MAX_DEPTH)).is_err());
}

#[test]
fn edits_replace_only_their_spans() {
    let doc = br#"{"a":"old","b":{"c":"keep"},"d":"old2"}"#;
    let o = root(doc).unwrap();
    let a = o.get_string("a").unwrap().unwrap().value.clone();
    let d = o.get_string("d").unwrap().unwrap().value.clone();
    // given out of order, lengths change
    let out = splice(
        doc,
        vec![
            Edit::string(d.clone(), "n").unwrap(),
            Edit::string(a.clone(), "0123456789abcdef").unwrap(),
        ],
    )
    .unwrap();
    assert_eq!(out, br#"{"a":"0123456789abcdef","b":{"c":"keep"},"d":"n"}"#);
    assert_eq!(splice(doc, vec![]).unwrap(), doc);
    let e = splice(
        doc,
        vec![
            Edit::string(a.clone(), "x").unwrap(),
            Edit::string(a.start + 1..a.end, "y").unwrap(),
        ],
    )
    .unwrap_err();
    assert_eq!((e.at, e.reason), (a.start + 1, Reason::EditSpan));
    let e = splice(doc, vec![Edit::string(0..doc.len() + 1, "x").unwrap()]).unwrap_err();
    assert_eq!(e.reason, Reason::EditSpan);
    // values that would need an escape are refused: Go's escape form depends on its version
    for v in [
        "a\"b", "a\\b", "<", ">", "&", "\u{8}", "\n", "\u{7f}", "é", "\u{2028}",
    ] {
        let e = Edit::string(a.clone(), v).unwrap_err();
        assert_eq!((e.at, e.reason), (a.start, Reason::NeedsEscaping(v.into())));
    }
}

#[test]
fn embedded_edits_are_escaped_once_more() {
    let file = br#"{"e":"{\"h\":\"ab\",\"k\":\"v\"}"}"#;
    let outer = root(file).unwrap();
    let d = decode_string(file, outer.get_string("e").unwrap().unwrap().value.start).unwrap();
    let inner = root(d.text.as_bytes()).unwrap();
    let h = d.raw_span(&inner.get_string("h").unwrap().unwrap().value);
    let out = splice(file, vec![Edit::embedded_string(h, "ffee").unwrap()]).unwrap();
    assert_eq!(out, br#"{"e":"{\"h\":\"ffee\",\"k\":\"v\"}"}"#);
    let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
    let emb: serde_json::Value = serde_json::from_str(v["e"].as_str().unwrap()).unwrap();
    assert_eq!(emb["h"], "ffee");
}

/// Descending a path re-finds members without re-checking bytes; whatever the skipped values
/// hold (escaped quotes and brackets, `\u` escapes, nested arrays, exponents, literals), it
/// finds exactly the members a checking scan of the same object finds.
#[test]
fn descending_finds_what_a_checking_scan_finds() {
    let doc = br#"{"A": {"s": "x\"}]\\", "u": "\u0022}", "n": [1, -2.5e+3, [true, null, {"q": "]"}]], "B": {"k": "v\"", "C": {"x": "1", "y": 2e5}}, "z": false}}"#;
    let b = root(doc).unwrap().path(&["A", "B"]).unwrap().unwrap();
    let checked = object_at(doc, b.span.start).unwrap();
    assert_eq!(b, checked, "same object, same members");
    let c = b.path(&["C"]).unwrap().unwrap();
    assert_eq!(c, object_at(doc, c.span.start).unwrap());
    assert_eq!(&doc[c.get("x").unwrap().value.clone()], br#""1""#);
    assert_eq!(&doc[c.get("y").unwrap().value.clone()], b"2e5");
}

/// `root_of_valid` skips the byte checks `root` makes, on the caller's word that serde_json
/// parsed the bytes. That is sound only if every document serde_json accepts is one `root`
/// accepts too, with the same members: checked here on every one-byte change of a document
/// shaped like containerd's CRI metadata (escapes, numbers, nesting, duplicates) that serde_json
/// still parses.
#[test]
fn what_serde_json_accepts_scans_the_same_without_the_byte_checks() {
    let base = br#"{"Version":"v1","Metadata":{"ID":"c1","Config":{"metadata":{"name":"app","attempt":3},"annotations":{"io.kubernetes.container.hash":"1a2b3c4d","k\u00e9y":"v\"\\\/\n","dup":"a","dup":"b"},"args":["-x",-1.5e+3,true,null,[],{}]}},"z":0}"#;
    let replacements = b" \t\n\r\"\\/{}[]:,0123456789.eE+-abnrtfuxlsz\x7f\xc3\xa9\xff";
    let mut accepted = 0;
    for at in 0..base.len() {
        for &r in replacements.iter().chain(std::iter::once(&0u8)) {
            let mut doc = base.to_vec();
            if r == 0 {
                doc.remove(at);
            } else if doc[at] == r {
                continue;
            } else {
                doc[at] = r;
            }
            if serde_json::from_slice::<serde_json::Value>(&doc).is_err() {
                continue;
            }
            accepted += 1;
            let shown = String::from_utf8_lossy(&doc).into_owned();
            let checked = match root(&doc) {
                Ok(o) => o,
                Err(e) => {
                    panic!("serde_json accepts what the checking scan refuses ({e}): {shown}")
                }
            };
            let trusted = root_of_valid(&doc).expect("a document the checking scan accepts");
            assert_eq!(trusted, checked, "same members, kinds and spans: {shown}");
            let path = ["Metadata", "Config", "annotations"];
            assert_eq!(
                trusted.clone().path(&path),
                checked.clone().path(&path),
                "same lookup along the path: {shown}"
            );
        }
    }
    assert!(
        accepted > 500,
        "enough changed documents still parse to say something ({accepted})"
    );
    // What a Value parse refuses and an IgnoredAny parse lets through (a lone surrogate, a key
    // that is not UTF-8): why `root_of_valid` is only for bytes parsed into a Value.
    for doc in [&br#"{"a":"\ud800"}"#[..], b"{\"\xc3\":1}"] {
        let shown = String::from_utf8_lossy(doc).into_owned();
        assert!(
            serde_json::from_slice::<serde_json::Value>(doc).is_err(),
            "Value refuses {shown}"
        );
        assert!(
            serde_json::from_slice::<serde::de::IgnoredAny>(doc).is_ok(),
            "IgnoredAny lets {shown} through"
        );
        assert!(root(doc).is_err(), "the checking scan refuses {shown}");
    }
}
