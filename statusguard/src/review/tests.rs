use super::*;
use serde_json::json;
use std::time::Duration;

fn admission(api: &str, user: &str, kind: &str, name: &str, old: Value, new: Value) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "apiVersion": api,
        "kind": "AdmissionReview",
        "request": {
            "uid": "req-1", "kind": {"group": "", "version": "v1", "kind": kind},
            "resource": {"group": "", "version": "v1", "resource": if kind == "Node" {"nodes"} else {"pods"}},
            "subResource": "status", "operation": "UPDATE", "name": name, "namespace": if kind == "Node" {""} else {"default"},
            "userInfo": {"username": user, "groups": ["system:nodes", "system:authenticated"]},
            "object": new, "oldObject": old,
        }
    }))
    .unwrap()
}

fn ready_node(status: &str, message: &str) -> Value {
    json!({"metadata": {"name": "n1"}, "status": {"nodeInfo": {"kubeletVersion": "v1.24.17"}, "conditions": [
        {"type": "Ready", "status": status, "reason": if status == "True" {"KubeletReady"} else {"KubeletNotReady"}, "message": message}
    ]}})
}

/// Node n1's own update from Ready to a kubelet's startup-only NotReady, in AdmissionReview
/// version `api`.
fn startup_not_ready(api: &str) -> Vec<u8> {
    admission(
        api,
        "system:node:n1",
        "Node",
        "n1",
        ready_node("True", "kubelet is posting ready status"),
        ready_node(
            "False",
            "container runtime status check may not have completed yet",
        ),
    )
}

#[test]
fn the_answer_is_an_admission_review_of_the_requests_version_with_a_json_patch() {
    let guard = Guard::new(["n1".to_string()], Instant::now() + Duration::from_secs(60));
    for api in ["admission.k8s.io/v1", "admission.k8s.io/v1beta1"] {
        let body = startup_not_ready(api);
        let (answer, decision) = guard.review(&body, Instant::now()).unwrap();
        let answer: Value = serde_json::from_slice(&answer).unwrap();
        assert_eq!(
            answer["apiVersion"], api,
            "answered in the request's version"
        );
        assert_eq!(answer["response"]["uid"], "req-1", "the request's uid");
        assert_eq!(
            answer["response"]["allowed"], true,
            "the guard never denies"
        );
        assert_eq!(answer["response"]["patchType"], "JSONPatch");
        let patch: Value = serde_json::from_slice(
            &base64::engine::general_purpose::STANDARD
                .decode(answer["response"]["patch"].as_str().unwrap())
                .unwrap(),
        )
        .unwrap();
        assert_eq!(
            patch[1]["value"]["status"], "True",
            "the patch keeps Ready=True"
        );
        assert_eq!(decision.action, Action::HeldNodeNotReady);
        assert_eq!(
            (decision.node.as_str(), decision.object.as_str()),
            ("n1", "node/n1")
        );
    }
}

#[test]
fn only_the_armed_nodes_own_status_updates_within_the_run_are_touched() {
    let t = Instant::now();
    let guard = Guard::new(["n1".to_string()], t + Duration::from_secs(60));
    let old = ready_node("True", "kubelet is posting ready status");
    let new = ready_node(
        "False",
        "container runtime status check may not have completed yet",
    );
    let passes = |body: Vec<u8>, now: Instant, why: &str| {
        let (answer, decision) = guard.review(&body, now).unwrap();
        let answer: Value = serde_json::from_slice(&answer).unwrap();
        assert!(
            answer["response"]["patch"].is_null(),
            "passes untouched: {why}"
        );
        assert_eq!(answer["response"]["allowed"], true, "allowed: {why}");
        assert_eq!(decision.action, Action::Passed, "{why}");
    };
    let v1 = "admission.k8s.io/v1";
    passes(
        admission(v1, "system:node:n2", "Node", "n2", old.clone(), new.clone()),
        t,
        "another node",
    );
    passes(
        admission(v1, "system:node:n2", "Node", "n1", old.clone(), new.clone()),
        t,
        "another node's identity on n1",
    );
    passes(
        admission(v1, "admin", "Node", "n1", old.clone(), new.clone()),
        t,
        "not a node's identity",
    );
    passes(
        admission(v1, "system:node:n1", "Node", "n1", old.clone(), new.clone()),
        t + Duration::from_secs(61),
        "after the run's end",
    );
    let mut create: Value = serde_json::from_slice(&admission(
        v1,
        "system:node:n1",
        "Node",
        "n1",
        old.clone(),
        new.clone(),
    ))
    .unwrap();
    create["request"]["operation"] = json!("CREATE");
    create["request"]["oldObject"] = Value::Null;
    passes(serde_json::to_vec(&create).unwrap(), t, "not an update");
    assert!(
        guard.review(b"{}", t).is_err(),
        "not an AdmissionReview: an error (400), never a verdict"
    );
    assert!(guard.review(b"\x00", t).is_err(), "not JSON: an error");
}

#[test]
fn a_rejecting_guard_refuses_the_held_pod_update_and_still_amends_the_node() {
    let t = Instant::now();
    let guard =
        Guard::new(["n1".to_string()], t + Duration::from_secs(60)).holding_pods_by(HoldBy::Reject);
    let pod = |ready: bool| {
        json!({
            "metadata": {"uid": "u1", "name": "p", "namespace": "default"},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "readinessProbe": {"periodSeconds": 1}}]},
            "status": {"conditions": [
                {"type": "Ready", "status": if ready {"True"} else {"False"}},
                {"type": "ContainersReady", "status": if ready {"True"} else {"False"}}],
              "containerStatuses": [{"name": "c", "ready": ready, "restartCount": 0, "containerID": "containerd://a", "state": {"running": {"startedAt": "t0"}}}]}
        })
    };
    let v1 = "admission.k8s.io/v1";
    let (answer, decision) = guard
        .review(
            &admission(v1, "system:node:n1", "Pod", "p", pod(true), pod(false)),
            t,
        )
        .unwrap();
    let answer: Value = serde_json::from_slice(&answer).unwrap();
    assert_eq!(decision.action, Action::HeldPodReadiness);
    assert_eq!(
        answer["response"]["allowed"], false,
        "the held pod update is refused"
    );
    assert!(answer["response"]["patch"].is_null(), "and not amended");
    let (answer, _) = guard.review(&startup_not_ready(v1), t).unwrap();
    let answer: Value = serde_json::from_slice(&answer).unwrap();
    assert_eq!(
        answer["response"]["allowed"], true,
        "the node's status is never refused"
    );
    assert_eq!(
        answer["response"]["patchType"], "JSONPatch",
        "it is amended"
    );
}
