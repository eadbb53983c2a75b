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
