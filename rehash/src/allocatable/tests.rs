use super::*;

fn v(minor: u32) -> KubeletVersion {
    format!("1.{minor}").parse().unwrap()
}

/// The lab node's capacity as kubelet 1.30 reported it.
fn capacity() -> BTreeMap<String, String> {
    [
        ("cpu", "2"),
        ("ephemeral-storage", "264212084Ki"),
        ("hugepages-1Gi", "0"),
        ("hugepages-2Mi", "0"),
        ("memory", "24683772Ki"),
        ("pods", "110"),
    ]
    .into_iter()
    .map(|(k, q)| (k.to_string(), q.to_string()))
    .collect()
}

fn config(yaml: &str) -> AllocatableConfig {
    AllocatableConfig::parse(&format!(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n{yaml}"
    ))
    .unwrap()
}

#[test]
fn no_reservation_and_no_eviction_leaves_capacity_with_max_pods() {
    let a = config("evictionHard: {}\nmaxPods: 250\n")
        .allocatable(&capacity(), v(31))
        .unwrap();
    assert_eq!(a["cpu"], "2", "cpu untouched");
    assert_eq!(
        a["memory"],
        (24683772u64 * 1024).to_string(),
        "memory in bytes, untouched"
    );
    assert_eq!(a["pods"], "250", "pods is maxPods");
}

#[test]
fn the_default_eviction_thresholds_reserve_memory_and_a_float32_tenth_of_nodefs() {
    let a = config("").allocatable(&capacity(), v(31)).unwrap();
    assert_eq!(
        a["memory"],
        (24683772u64 * 1024 - 100 * 1024 * 1024).to_string(),
        "memory.available<100Mi by default"
    );
    // int64(float64(capacity) * float64(float32(10)/100)), as GetThresholdQuantity
    let cap = 264212084i64 * 1024;
    let tenth = (cap as f64 * f64::from(10.0f32 / 100.0)) as i64;
    assert_ne!(tenth, cap / 10, "float32 rounding shows at this size");
    assert_eq!(
        a["ephemeral-storage"],
        (cap - tenth).to_string(),
        "nodefs.available<10%"
    );
    assert_eq!(a["pods"], "110", "maxPods defaults to 110");
}

#[test]
fn reservations_add_up_and_never_go_below_zero() {
    let a = config(
        "evictionHard: {memory.available: 1Gi}\nsystemReserved: {cpu: 500m, memory: 1Gi}\nkubeReserved: {cpu: 1200m, pid: \"100\"}\n",
    )
    .allocatable(&capacity(), v(31))
    .unwrap();
    assert_eq!(a["cpu"], "300m", "2 - 500m - 1200m");
    assert_eq!(
        a["memory"],
        (24683772u64 * 1024 - 2 * 1024 * 1024 * 1024).to_string()
    );
    assert!(
        !a.contains_key("pid"),
        "a reservation of a resource the node has no capacity of is ignored"
    );
    let a = config("systemReserved: {cpu: \"3\"}\n")
        .allocatable(&capacity(), v(31))
        .unwrap();
    assert_eq!(a["cpu"], "0", "negative allocatable is 0");
}

#[test]
fn pods_per_core_caps_max_pods() {
    let a = config("podsPerCore: 10\n")
        .allocatable(&capacity(), v(31))
        .unwrap();
    assert_eq!(a["pods"], "20", "2 cores × 10");
    let a = config("podsPerCore: 100\nmaxPods: 150\n")
        .allocatable(&capacity(), v(31))
        .unwrap();
    assert_eq!(a["pods"], "150", "maxPods when smaller");
}

#[test]
fn a_partial_eviction_hard_replaces_the_default_unless_merged_from_1_33() {
    let c = config("evictionHard: {memory.available: 200Mi}\nmergeDefaultEvictionSettings: true\n");
    let full = 264212084u64 * 1024;
    assert_eq!(
        c.allocatable(&capacity(), v(32)).unwrap()["ephemeral-storage"],
        full.to_string(),
        "1.32 has no merge: nodefs.available is not set"
    );
    assert_ne!(
        c.allocatable(&capacity(), v(33)).unwrap()["ephemeral-storage"],
        full.to_string(),
        "1.33 merges the default nodefs.available<10%"
    );
}

#[test]
fn hugepages_come_out_of_memory() {
    let mut cap = capacity();
    cap.insert("hugepages-2Mi".into(), "1Gi".into());
    let a = config("evictionHard: {}\n")
        .allocatable(&cap, v(31))
        .unwrap();
    assert_eq!(
        a["memory"],
        (24683772u64 * 1024 - 1024 * 1024 * 1024).to_string()
    );
}

#[test]
fn a_file_that_is_not_a_kubelet_configuration_is_refused() {
    assert!(
        AllocatableConfig::parse("kind: Pod\n").is_err(),
        "another kind"
    );
    assert!(AllocatableConfig::parse("{").is_err(), "not YAML");
    assert!(
        AllocatableConfig::parse("kind: KubeletConfiguration\nmaxPods: many\n").is_err(),
        "a maxPods that is not a number"
    );
}
