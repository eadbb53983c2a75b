use super::classify::analyse;
use super::edit::{apply_edit, verify_edit};
use super::layout::{major_minor, node_root_of};
use crate::RecordKind;
use std::path::{Path, PathBuf};

const DOC: &str = "{\n\t\"ociVersion\": \"1.2.0\",\n\t\"annotations\": {\n\t\t\"io.kubernetes.container.hash\": \"aa\",\n\t\t\"io.kubernetes.container.hashWithoutResources\": \"aa\",\n\t\t\"io.kubernetes.container.name\": \"c\",\n\t\t\"io.kubernetes.cri-o.Annotations\": \"{\\\"io.kubernetes.container.hash\\\":\\\"aa\\\",\\\"io.kubernetes.container.hashWithoutResources\\\":\\\"aa\\\",\\\"x\\\":\\\"\\\\u003c\\\"}\",\n\t\t\"io.kubernetes.cri-o.ContainerType\": \"container\",\n\t\t\"io.kubernetes.cri-o.Labels\": \"{\\\"io.kubernetes.container.name\\\":\\\"c\\\",\\\"io.kubernetes.pod.name\\\":\\\"p\\\",\\\"io.kubernetes.pod.namespace\\\":\\\"ns\\\",\\\"io.kubernetes.pod.uid\\\":\\\"u\\\"}\",\n\t\t\"io.kubernetes.cri-o.Metadata\": \"{\\\"name\\\":\\\"c\\\",\\\"attempt\\\":2}\"\n\t}\n}";

#[test]
fn analyse_and_edit_by_key() {
    let a = analyse("id", "mem", DOC.as_bytes());
    assert_eq!(
        a.record.kind,
        RecordKind::Container,
        "{:?}",
        a.record.problem
    );
    assert_eq!(a.record.hash.as_deref(), Some("aa"));
    assert_eq!(a.record.attempt, Some(2));
    let vals = [Some("bbbb"), None];
    let new = apply_edit(DOC.as_bytes(), a.edit.as_ref().unwrap(), &vals).unwrap();
    verify_edit(&a, DOC.as_bytes(), &new, &vals, "id", "mem").unwrap();
    let text = String::from_utf8(new).unwrap();
    let expect = DOC
        .replacen("hash\": \"aa\"", "hash\": \"bbbb\"", 1)
        .replacen("hash\\\":\\\"aa\\\"", "hash\\\":\\\"bbbb\\\"", 1);
    assert_eq!(
        text, expect,
        "only the two hash values changed; hashWithoutResources kept"
    );
}

#[test]
fn verify_catches_a_bad_edit() {
    let a = analyse("id", "mem", DOC.as_bytes());
    let vals = [Some("bb"), None];
    // Break the embedded string the way the real CRI-O test did (unquoted value).
    let bad = DOC.replacen("hash\\\":\\\"aa\\\"", "hash\\\":bb", 1);
    let e = verify_edit(&a, DOC.as_bytes(), bad.as_bytes(), &vals, "id", "mem").unwrap_err();
    assert!(
        e.to_string().contains("not a JSON object of strings"),
        "{e}"
    );
    // Change another value as well.
    let other = apply_edit(DOC.as_bytes(), a.edit.as_ref().unwrap(), &vals).unwrap();
    let other = String::from_utf8(other)
        .unwrap()
        .replacen("1.2.0", "1.2.1", 1);
    let e = verify_edit(&a, DOC.as_bytes(), other.as_bytes(), &vals, "id", "mem").unwrap_err();
    assert!(e.to_string().contains("more than the hash values"), "{e}");
}

#[test]
fn a_duplicate_annotation_reads_and_edits_as_its_last_occurrence() {
    // Go's map decoding (and serde_json) keep the last of duplicate keys: that is the value
    // to classify and to edit; the earlier one stays as it is.
    let dup = DOC.replacen(
        "\t\t\"io.kubernetes.container.name\": \"c\",\n",
        "\t\t\"io.kubernetes.container.hash\": \"cc\",\n\t\t\"io.kubernetes.container.name\": \"c\",\n",
        1,
    );
    let a = analyse("id", "mem", dup.as_bytes());
    assert_eq!(a.record.kind, RecordKind::Container);
    assert!(a.record.problem.as_ref().unwrap().contains("is cc but"));
    let vals = [Some("bbbb"), None];
    let new = apply_edit(dup.as_bytes(), a.edit.as_ref().unwrap(), &vals).unwrap();
    verify_edit(&a, dup.as_bytes(), &new, &vals, "id", "mem").unwrap();
    let expect = dup
        .replacen("hash\": \"cc\"", "hash\": \"bbbb\"", 1)
        .replacen("hash\\\":\\\"aa\\\"", "hash\\\":\\\"bbbb\\\"", 1);
    assert_eq!(String::from_utf8(new).unwrap(), expect);
    assert!(
        expect.contains("hash\": \"aa\""),
        "the first duplicate is kept"
    );
}

#[test]
fn a_repeated_annotations_field_is_undecodable() {
    // Go merges both objects into the spec's one annotations map; serde_json keeps the last.
    let dup = DOC.replacen(
        "\t\"ociVersion\"",
        "\t\"Annotations\": {},\n\t\"ociVersion\"",
        1,
    );
    let a = analyse("id", "mem", dup.as_bytes());
    assert_eq!(a.record.kind, RecordKind::Undecodable);
    let problem = a.record.problem.unwrap();
    assert!(
        problem.contains("\"annotations\" appears 2 times"),
        "{problem}"
    );
}

#[test]
fn node_root_and_major_minor() {
    assert_eq!(
        node_root_of(Path::new("/var/lib/containers/storage")),
        Some(PathBuf::from("/"))
    );
    assert_eq!(
        node_root_of(Path::new("/x/n/var/lib/containers/storage")),
        Some(PathBuf::from("/x/n"))
    );
    assert_eq!(node_root_of(Path::new("/mnt/storage")), None);
    assert_eq!(major_minor("1.30.14+unknown").as_deref(), Some("1.30"));
    assert_eq!(major_minor("garbage"), None);
}
