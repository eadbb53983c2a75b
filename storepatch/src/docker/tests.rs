use super::*;

#[test]
fn attempt_from_dockershim_names() {
    assert_eq!(attempt_from_name("/k8s_POD_web-0_default_uid_3"), Some(3));
    assert_eq!(attempt_from_name("/k8s_nginx_web_default_uid_0"), Some(0));
    assert_eq!(attempt_from_name("/plain"), None);
}

#[test]
fn ids_and_hashes_are_checked() {
    assert!(check_plain_id("..").is_err());
    assert!(check_plain_id("a/b").is_err());
    assert!(check_plain_id("").is_err());
    assert!(check_plain_id("1336f9653190").is_ok());
    assert!(check_hash_value("x", "hash", "3a1f6c2e").is_ok());
    assert!(check_hash_value("x", "hash", "3A1F6C2E").is_err());
    assert!(check_hash_value("x", "hash", "\",\"evil\":\"").is_err());
    assert!(check_hash_value("x", "hash", "").is_err());
}
