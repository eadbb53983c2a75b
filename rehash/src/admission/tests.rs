//! Each predicate on pods and nodes modelled on the kubelet's own cases
//! (pkg/kubelet/lifecycle/predicate_test.go `TestGeneralPredicates`,
//! `TestRejectPodAdmissionBasedOnOSSelector`, `TestRejectPodAdmissionBasedOnOSField`, 1.30),
//! each with the pod that still fits, which is never flagged.

use super::*;
use serde_json::{json, Value};

fn v(minor: u32) -> KubeletVersion {
    format!("1.{minor}").parse().expect("a supported version")
}

/// A node `machine1` with 10 millicores, 20 bytes of memory, 32 pods (predicate_test.go's
/// `makeAllocatableResources(10, 20, 32, …)`), and `extra` merged in.
fn node(extra: Value) -> NodeObject {
    let mut n = json!({
        "kind": "Node",
        "metadata": {"name": "machine1", "labels": {"kubernetes.io/os": "linux"}},
        "status": {"allocatable": {"cpu": "10m", "memory": "20", "pods": "32"}}
    });
    merge(&mut n, extra);
    NodeObject::parse(&serde_json::to_vec(&n).unwrap()).expect("a Node")
}

fn merge(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (slot, v) => *slot = v,
    }
}

/// A running pod `default/NAME` created at second `at`, with `extra` merged in.
fn pod(name: &str, at: u32, extra: Value) -> Vec<u8> {
    let mut p = json!({
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"),
                     "creationTimestamp": format!("2026-01-01T00:00:{at:02}Z")},
        "spec": {"containers": [{"name": "c", "image": "i"}]},
        "status": {"phase": "Running"}
    });
    merge(&mut p, extra);
    serde_json::to_vec(&p).unwrap()
}

fn requests(cpu: &str, memory: &str) -> Value {
    json!({"spec": {"containers": [{"name": "c", "image": "i",
        "resources": {"requests": {"cpu": cpu, "memory": memory}}}]}})
}

fn rejected(pods: &[Vec<u8>], node: &NodeObject, to: u32) -> Vec<(String, String, String)> {
    let raws: Vec<&[u8]> = pods.iter().map(|p| p.as_slice()).collect();
    predict(&raws, node, v(to))
        .rejected
        .into_iter()
        .map(|r| (r.pod, r.reason, r.message))
        .collect()
}

fn names(r: &[(String, String, String)]) -> Vec<&str> {
    r.iter().map(|x| x.0.as_str()).collect()
}

#[test]
fn quantities_are_read_as_the_kubelet_rounds_them() {
    assert_eq!(parse_quantity_millis("500m"), Some(500), "millicores");
    assert_eq!(parse_quantity_millis("2"), Some(2000), "whole units");
    assert_eq!(parse_quantity_millis("1.5"), Some(1500), "decimals");
    assert_eq!(
        parse_quantity_millis("1Ki"),
        Some(1_024_000),
        "binary suffix"
    );
    assert_eq!(parse_quantity_millis("1e3"), Some(1_000_000), "exponent");
    assert_eq!(parse_quantity_millis("1n"), Some(1), "nano rounds up");
    assert_eq!(amount("memory", "1.5Ki"), Some(1536), "memory in bytes");
    assert_eq!(amount("memory", "1m"), Some(1), "Value() rounds up");
    assert_eq!(parse_quantity_millis("x"), None, "not a quantity");
}

#[test]
fn a_pod_without_requests_ports_or_host_always_fits() {
    // "no resources/port/host requested always fits", next to a pod using 9m/19 of 10m/20
    let pods = [
        pod("used", 0, requests("9m", "19")),
        pod("empty", 1, json!({})),
    ];
    assert!(
        rejected(&pods, &node(json!({})), 30).is_empty(),
        "nothing is rejected when everything fits"
    );
}

#[test]
fn requests_beyond_what_is_left_of_allocatable_are_rejected_in_creation_order() {
    // "not enough cpu and memory resource": 8m/10 asked where 5m/19 are used; the first
    // failure (cpu) is the one reported
    let pods = [
        pod("late", 2, requests("8m", "10")),
        pod("early", 1, requests("5m", "19")),
    ];
    let r = rejected(&pods, &node(json!({})), 30);
    assert_eq!(
        names(&r),
        ["default/late"],
        "the later-created pod is the one that no longer fits"
    );
    assert_eq!(
        r[0].1, "OutOfcpu",
        "the reason names the first resource short"
    );
    assert_eq!(
        r[0].2, "Node didn't have enough resource: cpu, requested: 8, used: 5, capacity: 10",
        "the message is InsufficientResourceError's"
    );
    // what fits exactly is admitted
    let fits = [
        pod("a", 1, requests("5m", "10")),
        pod("b", 2, requests("5m", "10")),
    ];
    assert!(
        rejected(&fits, &node(json!({})), 30).is_empty(),
        "requests that add up to allocatable fit"
    );
}

#[test]
fn the_pod_count_is_checked_against_allocatable_pods() {
    let n = node(json!({"status": {"allocatable": {"pods": "2"}}}));
    let pods = [
        pod("a", 1, json!({})),
        pod("b", 2, json!({})),
        pod("c", 3, json!({})),
    ];
    let r = rejected(&pods, &n, 30);
    assert_eq!(
        names(&r),
        ["default/c"],
        "the third pod exceeds allocatable pods 2"
    );
    assert_eq!(r[0].1, "OutOfpods", "the pod count's reason");
    // terminal pods are not admitted and do not count
    let done = [
        pod("a", 1, json!({})),
        pod("old", 0, json!({"status": {"phase": "Succeeded"}})),
        pod("b", 2, json!({})),
    ];
    assert!(
        rejected(&done, &n, 30).is_empty(),
        "a succeeded pod takes no place"
    );
}

#[test]
fn init_containers_sidecars_and_overhead_count_as_pod_requests_do() {
    // an init container larger than the regular ones decides the request
    let init = json!({"spec": {"initContainers": [{"name": "i", "image": "i",
        "resources": {"requests": {"cpu": "11m"}}}]}});
    assert_eq!(
        names(&rejected(&[pod("p", 1, init)], &node(json!({})), 30)),
        ["default/p"],
        "the largest init container counts"
    );
    // a sidecar adds to the regular containers
    let sidecar = json!({"spec": {
        "initContainers": [{"name": "s", "image": "i", "restartPolicy": "Always", "resources": {"requests": {"cpu": "6m"}}}],
        "containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "5m"}}}]}});
    assert_eq!(
        names(&rejected(&[pod("p", 1, sidecar)], &node(json!({})), 30)),
        ["default/p"],
        "a sidecar's request is summed"
    );
    let overhead = json!({"spec": {"overhead": {"cpu": "6m"},
        "containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "5m"}}}]}});
    assert_eq!(
        names(&rejected(&[pod("p", 1, overhead)], &node(json!({})), 30)),
        ["default/p"],
        "the overhead is added"
    );
}

#[test]
fn extended_resources_the_node_does_not_list_are_dropped_from_containers() {
    // TestRemoveMissingExtendedResources: a cluster-level resource unknown to the node
    let ext = json!({"spec": {"containers": [{"name": "c", "image": "i",
        "resources": {"requests": {"example.com/dongle": "1"}}}]}});
    assert!(
        rejected(&[pod("p", 1, ext.clone())], &node(json!({})), 30).is_empty(),
        "a resource the node does not list is not checked"
    );
    let n = node(json!({"status": {"allocatable": {"example.com/dongle": "0"}}}));
    let r = rejected(&[pod("p", 1, ext)], &n, 30);
    assert_eq!(
        r[0].1, "OutOfexample.com/dongle",
        "a listed extended resource is checked"
    );
}

#[test]
fn node_selector_and_required_affinity_must_match_the_node_labels() {
    let n = node(json!({"metadata": {"labels": {"disk": "ssd", "zone": "a", "gen": "5"}}}));
    let sel = |k: &str, v: &str| json!({"spec": {"nodeSelector": {k: v}}});
    let aff = |terms: Value| {
        json!({"spec": {"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}}})
    };
    let pods = [
        pod("sel-ok", 1, sel("disk", "ssd")),
        pod("sel-gone", 2, sel("disk", "hdd")),
        pod(
            "in-ok",
            3,
            aff(
                json!([{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]}]),
            ),
        ),
        pod(
            "notin",
            4,
            aff(
                json!([{"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a"]}]}]),
            ),
        ),
        pod(
            "or-ok",
            5,
            aff(
                json!([{"matchExpressions": [{"key": "x", "operator": "Exists"}]},
                                    {"matchExpressions": [{"key": "gen", "operator": "Gt", "values": ["4"]}]}]),
            ),
        ),
        pod(
            "absent-ok",
            6,
            aff(json!([{"matchExpressions": [{"key": "x", "operator": "DoesNotExist"}]}])),
        ),
        pod(
            "field-ok",
            7,
            aff(
                json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["machine1"]}]}]),
            ),
        ),
        pod("empty-term", 8, aff(json!([{}]))),
        pod(
            "lt",
            9,
            aff(json!([{"matchExpressions": [{"key": "gen", "operator": "Lt", "values": ["5"]}]}])),
        ),
    ];
    let r = rejected(&pods, &n, 31);
    assert_eq!(
        names(&r),
        [
            "default/sel-gone",
            "default/notin",
            "default/empty-term",
            "default/lt"
        ],
        "exactly the pods whose selector or affinity the labels fail"
    );
    assert_eq!(r[0].1, "NodeAffinity", "the plugin's name is the reason");
    assert_eq!(
        r[0].2, "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector",
        "1.31 words it with the description"
    );
    let old = rejected(&pods[1..2], &n, 30);
    assert_eq!(
        old[0].2, "Predicate NodeAffinity failed",
        "1.30 words it without"
    );
    let older = rejected(&pods[1..2], &n, 17);
    assert_eq!(older[0].1, "MatchNodeSelector", "1.17's predicate name");
}

#[test]
fn a_pod_bound_to_another_node_name_is_rejected() {
    // "host not match"
    let pods = [
        pod("here", 1, json!({"spec": {"nodeName": "machine1"}})),
        pod("there", 2, json!({"spec": {"nodeName": "machine2"}})),
    ];
    let r = rejected(&pods, &node(json!({})), 30);
    assert_eq!(names(&r), ["default/there"], "only the pod bound elsewhere");
    assert_eq!(r[0].1, "NodeName", "its reason");
}

#[test]
fn host_ports_conflict_with_pods_admitted_before() {
    // "hostport conflict": the second pod on port 123 is rejected, another port or protocol
    // or a distinct host IP is not
    let port = |p: i64, proto: &str, ip: &str| {
        json!({"spec": {"containers": [{"name": "c", "image": "i",
        "ports": [{"containerPort": 80, "hostPort": p, "protocol": proto, "hostIP": ip}]}]}})
    };
    let pods = [
        pod("first", 1, port(123, "TCP", "")),
        pod("second", 2, port(123, "TCP", "")),
        pod("udp", 3, port(123, "UDP", "")),
        pod("other", 4, port(124, "TCP", "10.0.0.1")),
        pod("ip2", 5, port(124, "TCP", "10.0.0.2")),
        pod("any", 6, port(124, "TCP", "0.0.0.0")),
    ];
    let r = rejected(&pods, &node(json!({})), 30);
    assert_eq!(
        names(&r),
        ["default/second", "default/any"],
        "only conflicting ports: {r:?}"
    );
    assert_eq!(r[0].1, "NodePorts", "its reason");
}

#[test]
fn untolerated_no_execute_taints_reject_from_1_24_except_static_pods() {
    let n = node(
        json!({"spec": {"taints": [{"key": "foo", "effect": "NoSchedule"}, {"key": "bar", "effect": "NoExecute"}]}}),
    );
    let pods = [
        // "taint/toleration match"
        pod(
            "tolerates",
            1,
            json!({"spec": {"tolerations": [{"key": "foo"}, {"key": "bar"}]}}),
        ),
        // "NoExecute taint/toleration not match"
        pod("plain", 2, json!({})),
        // "static pods ignore taints"
        pod(
            "static",
            3,
            json!({"metadata": {"annotations": {"kubernetes.io/config.source": "file"}}}),
        ),
        pod(
            "exists",
            4,
            json!({"spec": {"tolerations": [{"operator": "Exists"}]}}),
        ),
    ];
    let r = rejected(&pods, &n, 30);
    assert_eq!(
        names(&r),
        ["default/plain"],
        "only the pod that tolerates no NoExecute taint"
    );
    assert_eq!(r[0].1, "TaintToleration", "its reason");
    assert!(
        rejected(&pods, &n, 23).is_empty(),
        "kubelet 1.23 checks no taint at admission"
    );
    let no_schedule = node(
        json!({"spec": {"taints": [{"key": "baz", "effect": "PreferNoSchedule"}, {"key": "foo", "effect": "NoSchedule"}]}}),
    );
    assert!(
        rejected(&pods, &no_schedule, 30).is_empty(),
        "NoSchedule and PreferNoSchedule taints are the scheduler's"
    );
}

#[test]
fn the_os_label_and_field_must_be_linux_from_1_23() {
    // TestRejectPodAdmissionBasedOnOSSelector / …OSField: the pod's own label is read
    let pods = [
        pod(
            "label-ok",
            1,
            json!({"metadata": {"labels": {"kubernetes.io/os": "linux"}}}),
        ),
        pod(
            "label-win",
            2,
            json!({"metadata": {"labels": {"kubernetes.io/os": "windows"}}}),
        ),
        pod("field-ok", 3, json!({"spec": {"os": {"name": "linux"}}})),
        pod("field-win", 4, json!({"spec": {"os": {"name": "windows"}}})),
    ];
    // the node's label is taken as linux even when it says otherwise
    let n = node(json!({"metadata": {"labels": {"kubernetes.io/os": "dummyOS"}}}));
    let r = rejected(&pods, &n, 30);
    assert_eq!(
        names(&r),
        ["default/label-win", "default/field-win"],
        "only the non-Linux pods"
    );
    assert_eq!(
        r[0].1, "PodOSSelectorNodeLabelDoesNotMatch",
        "the label's reason"
    );
    assert_eq!(r[1].1, "PodOSNotSupported", "the field's reason");
    assert!(
        rejected(&pods, &n, 22).is_empty(),
        "kubelet 1.22 has no OS check"
    );
}

#[test]
fn a_critical_pod_short_of_resources_preempts_instead_of_failing() {
    let crit = json!({"spec": {"priority": 2000001000, "containers": [{"name": "c", "image": "i",
        "resources": {"requests": {"cpu": "8m"}}}]}});
    let pods = [pod("used", 1, requests("5m", "1")), pod("crit", 2, crit)];
    let raws: Vec<&[u8]> = pods.iter().map(|p| p.as_slice()).collect();
    let a = predict(&raws, &node(json!({})), v(30));
    assert!(
        a.rejected.is_empty(),
        "a critical pod is not rejected for resources"
    );
    assert_eq!(a.preempting.len(), 1, "its preemption is said");
    assert_eq!(
        hazards(&a, v(30), "machine1")[0].code,
        PREEMPTS,
        "as a warn hazard"
    );
}

#[test]
fn each_rejected_pod_is_a_block_hazard_naming_it() {
    let pods = [pod(
        "gone",
        1,
        json!({"spec": {"nodeSelector": {"disk": "ssd"}}}),
    )];
    let raws: Vec<&[u8]> = pods.iter().map(|p| p.as_slice()).collect();
    let a = predict(&raws, &node(json!({})), v(31));
    let h = hazards(&a, v(31), "machine1");
    assert_eq!(h.len(), 1, "one hazard per rejected pod");
    assert_eq!(h[0].code, REJECTED, "its code");
    assert_eq!(
        h[0].severity,
        storepatch::Severity::Block,
        "a rejection blocks"
    );
    assert!(
        h[0].message.contains("pod default/gone")
            && h[0]
                .message
                .contains("didn't match Pod's node affinity/selector"),
        "the message names the pod and the kubelet's reason: {}",
        h[0].message
    );
    assert_eq!(
        a.rejected[0].uid, "uid-gone",
        "the rejection carries the pod's uid"
    );
}

#[test]
fn a_node_without_allocatable_judges_no_request() {
    // a Node no kubelet wrote (no status.allocatable at all): what it fits is unknown, so
    // neither the pod count nor any request rejects a pod; the other predicates still do
    let mut bare = json!({
        "kind": "Node",
        "metadata": {"name": "machine1", "labels": {"kubernetes.io/os": "linux"}},
        "status": {}
    });
    let n = NodeObject::parse(&serde_json::to_vec(&bare).unwrap()).expect("a Node");
    let pods = [
        pod("big", 1, requests("8", "10Gi")),
        pod("pinned", 2, json!({"spec": {"nodeName": "other-node"}})),
    ];
    assert_eq!(
        names(&rejected(&pods, &n, 36)),
        ["default/pinned"],
        "without allocatable only the predicates that need none reject"
    );
    bare["status"] = json!({"allocatable": {"cpu": "1", "memory": "1Gi", "pods": "10"}});
    let n = NodeObject::parse(&serde_json::to_vec(&bare).unwrap()).expect("a Node");
    assert_eq!(
        names(&rejected(&pods, &n, 36)),
        ["default/big", "default/pinned"],
        "with allocatable the requests are judged"
    );
}

/// A pod with a `RestartAllContainers` restart rule (it needs the feature
/// RestartAllContainersOnContainerExits), `extra` merged in.
fn restart_all_pod(name: &str, at: u32, extra: Value) -> Vec<u8> {
    let mut spec = json!({"spec": {"containers": [{"name": "c", "image": "i", "restartPolicy": "Never",
        "restartPolicyRules": [{"action": "RestartAllContainers",
                                "exitCodes": {"operator": "In", "values": [42]}}]}]}});
    merge(&mut spec, extra);
    pod(name, at, spec)
}

#[test]
fn a_pod_needing_an_undeclared_feature_is_rejected_after_the_predicates() {
    let gates = crate::declared_features::Gates::read(
        Some("featureGates: {RestartAllContainersOnContainerExits: false}"),
        None,
    );
    let features = crate::declared_features::target(v(37), &gates, &[]).expect("1.37 checks");
    let pods = [
        restart_all_pod("needs", 1, json!({})),
        restart_all_pod(
            "needs-and-misplaced",
            2,
            json!({"spec": {"nodeSelector": {"disk": "ssd"}}}),
        ),
        pod("plain", 3, json!({})),
    ];
    let raws: Vec<&[u8]> = pods.iter().map(|p| p.as_slice()).collect();
    let a = predict_with(&raws, &node(json!({})), v(37), Some(&features));
    let got: Vec<(&str, &str)> = a
        .rejected
        .iter()
        .map(|r| (r.pod.as_str(), r.reason.as_str()))
        .collect();
    assert_eq!(
        got,
        [
            ("default/needs", "PodFeatureUnsupported"),
            ("default/needs-and-misplaced", "NodeAffinity")
        ],
        "the feature's pod is rejected for it, the pod the predicates reject first for theirs, the plain pod kept"
    );
    assert_eq!(
        a.rejected[0].message,
        "Pod requires node features that are not available: RestartAllContainersOnContainerExits",
        "in the kubelet's words"
    );
    let on =
        crate::declared_features::target(v(37), &crate::declared_features::Gates::default(), &[]);
    assert!(
        predict_with(&raws[..1], &node(json!({})), v(37), on.as_ref())
            .rejected
            .is_empty(),
        "with the gate at its default (on) the pod is kept"
    );
    assert!(
        predict(&raws[..1], &node(json!({})), v(37))
            .rejected
            .is_empty(),
        "without the handler nothing is checked"
    );
}

#[test]
fn a_pod_whose_feature_depends_on_the_runtime_is_a_warning_not_a_rejection() {
    let gates = crate::declared_features::Gates::read(
        Some("featureGates: {UserNamespacesHostNetworkSupport: true}"),
        None,
    );
    let features = crate::declared_features::target(v(36), &gates, &[]).unwrap();
    let pods = [pod(
        "userns",
        1,
        json!({"spec": {"hostNetwork": true, "hostUsers": false}}),
    )];
    let raws: Vec<&[u8]> = pods.iter().map(|p| p.as_slice()).collect();
    let a = predict_with(&raws, &node(json!({})), v(36), Some(&features));
    assert!(a.rejected.is_empty(), "not rejected on a guess");
    let h = hazards(&a, v(36), "machine1");
    assert_eq!(
        (h.len(), h[0].code.as_str()),
        (1, FEATURE_UNDECIDED),
        "said as one warn"
    );
    assert!(h[0].message.contains("UserNamespacesHostNetworkSupport"));
}
