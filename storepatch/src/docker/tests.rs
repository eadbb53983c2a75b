use super::*;

#[test]
fn attempt_from_dockershim_names() {
    assert_eq!(attempt_from_name("/k8s_POD_web-0_default_uid_3"), Some(3));
    assert_eq!(attempt_from_name("/k8s_nginx_web_default_uid_0"), Some(0));
    assert_eq!(attempt_from_name("/plain"), None);
}

#[test]
fn ids_are_checked_and_hashes_print_as_the_kubelet_writes_them() {
    assert!(check_plain_id("..").is_err());
    assert!(check_plain_id("a/b").is_err());
    assert!(check_plain_id("").is_err());
    assert!(check_plain_id("1336f9653190").is_ok());
    // A new value is a `Hash`: it can only print as the kubelet writes one (lowercase hex),
    // so no label text can be injected through it.
    assert_eq!(crate::Hash(0x3A1F6C2E).to_string(), "3a1f6c2e");
    assert_eq!(crate::Hash(0x7).to_string(), "7");
}

#[test]
fn config_labels_borrow_the_file_and_decode_escapes() {
    let bytes = br#"{"ID":"c1","Config":{"Labels":{"io.kubernetes.pod.name":"web-0","io.kubernetes.pod.namespace":"d\u0065fault","io.kubernetes.pod.name":"web-1"}}}"#;
    let cfg: ConfigV2<'_> = serde_json::from_slice(bytes).unwrap();
    let labels = cfg.config.unwrap().labels.unwrap();
    let name = labels.get("io.kubernetes.pod.name").unwrap();
    assert_eq!(
        name.0, "web-1",
        "a repeated label keeps its last value, as Go's map decoding"
    );
    assert!(
        matches!(name.0, Cow::Borrowed(_)),
        "a plain label value borrows the file's bytes"
    );
    let namespace = labels.get("io.kubernetes.pod.namespace").unwrap();
    assert_eq!(namespace.0, "default", "an escaped label value is decoded");
    assert!(
        matches!(namespace.0, Cow::Owned(_)),
        "an escaped value cannot borrow"
    );
    let wrong = serde_json::from_slice::<ConfigV2<'_>>(br#"{"Config":{"Labels":{"a":1}}}"#);
    assert!(
        wrong.err().is_some_and(|e| e.is_data()),
        "a label that is not a string is a data error, reported as a field of the wrong type"
    );
}
