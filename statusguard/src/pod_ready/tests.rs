use super::*;
use serde_json::json;

/// A pod of the node with containers `web` (readiness probe every `period` s) and `side`
/// (no probe), as the API has it: both ready, running since `t0`.
fn pod(period: u64) -> Value {
    json!({
        "metadata": {"uid": "u1", "name": "web-1", "namespace": "default"},
        "spec": {"nodeName": "n1", "containers": [
            {"name": "web", "readinessProbe": {"httpGet": {"port": 8080}, "periodSeconds": period}},
            {"name": "side"},
        ]},
        "status": {
            "conditions": [
                {"type": "Initialized", "status": "True", "lastTransitionTime": "t-init"},
                {"type": "Ready", "status": "True", "lastTransitionTime": "t-ready"},
                {"type": "ContainersReady", "status": "True", "lastTransitionTime": "t-cr"},
                {"type": "PodScheduled", "status": "True"},
            ],
            "containerStatuses": [
                {"name": "side", "ready": true, "restartCount": 0, "containerID": "containerd://bbb",
                 "state": {"running": {"startedAt": "t0"}}},
                {"name": "web", "ready": true, "restartCount": 0, "containerID": "containerd://aaa",
                 "state": {"running": {"startedAt": "t0"}}},
            ]
        }
    })
}

/// What a kubelet before 1.35 writes at its start: `web` unready, the pod unready.
fn reset(old: &Value) -> Value {
    let mut new = old.clone();
    new["status"]["containerStatuses"][1]["ready"] = json!(false);
    for i in [1, 2] {
        new["status"]["conditions"][i]["status"] = json!("False");
        new["status"]["conditions"][i]["reason"] = json!("ContainersNotReady");
        new["status"]["conditions"][i]["lastTransitionTime"] = json!("t-now");
    }
    new
}

/// `new` with the JSON Patch applied (replace/add/test as the API server would).
fn apply(new: &Value, patch: &[Value]) -> Value {
    let mut out = new.clone();
    for op in patch {
        let path = op["path"].as_str().unwrap();
        match op["op"].as_str().unwrap() {
            "test" => assert_eq!(
                out.pointer(path),
                Some(&op["value"]),
                "the test op holds: {op}"
            ),
            "replace" => *out.pointer_mut(path).unwrap() = op["value"].clone(),
            o => panic!("unexpected op {o}"),
        }
    }
    out
}

#[test]
fn the_same_containers_reset_readiness_is_held_back_to_what_the_api_had() {
    let old = pod(1);
    let new = reset(&old);
    let mut holds = Holds::new();
    let t = Instant::now();
    let Outcome::Held { patch, containers } = review(&old, &new, t, &mut holds) else {
        panic!("the reset of the same container is held back")
    };
    assert_eq!(containers, ["web"], "the held container is named");
    assert_eq!(
        apply(&new, &patch),
        old,
        "the amended update is what the API had, byte for byte as JSON"
    );
}

#[test]
fn a_hold_ends_with_its_bound_and_is_never_made_again() {
    let old = pod(1);
    let new = reset(&old);
    assert_eq!(
        bound(&new, &json!("web")),
        Duration::from_secs(4),
        "3 × 1 s + 1 s timeout"
    );
    assert_eq!(
        bound(&new, &json!("side")),
        Duration::from_secs(10),
        "no probe: one status period"
    );
    let mut holds = Holds::new();
    let t = Instant::now();
    assert!(matches!(
        review(&old, &new, t, &mut holds),
        Outcome::Held { .. }
    ));
    assert!(
        matches!(
            review(&old, &new, t + Duration::from_secs(4), &mut holds),
            Outcome::Held { .. }
        ),
        "still within 4 s"
    );
    assert_eq!(
        review(&old, &new, t + Duration::from_millis(4001), &mut holds),
        Outcome::BoundOver {
            containers: vec!["web".into()]
        },
        "past the bound the false goes through"
    );
    assert!(
        matches!(
            review(&old, &new, t + Duration::from_secs(5), &mut holds),
            Outcome::BoundOver { .. }
        ),
        "and is never held again"
    );

    // once ready again (its probe passed), a later reset is not held either
    let mut holds = Holds::new();
    assert!(matches!(
        review(&old, &new, t, &mut holds),
        Outcome::Held { .. }
    ));
    assert_eq!(
        review(&old, &old, t + Duration::from_secs(1), &mut holds),
        Outcome::Untouched
    );
    assert!(
        matches!(
            review(&old, &new, t + Duration::from_secs(2), &mut holds),
            Outcome::BoundOver { .. }
        ),
        "a container ready again is over"
    );
}

#[test]
fn anything_but_the_same_containers_reset_passes() {
    let old = pod(10);
    let t = Instant::now();
    // (why, how the API's pod and the update differ from a plain reset)
    type Change = Box<dyn Fn(&mut Value, &mut Value)>;
    let cases: Vec<(&str, Change)> = vec![
        (
            "a new container id",
            Box::new(|_, n| {
                n["status"]["containerStatuses"][1]["containerID"] = json!("containerd://ccc")
            }),
        ),
        (
            "a container restarted",
            Box::new(|_, n| n["status"]["containerStatuses"][1]["restartCount"] = json!(1)),
        ),
        (
            "a container no longer running",
            Box::new(|_, n| {
                n["status"]["containerStatuses"][1]["state"] =
                    json!({"terminated": {"exitCode": 1}})
            }),
        ),
        (
            "another start time",
            Box::new(|_, n| {
                n["status"]["containerStatuses"][1]["state"]["running"]["startedAt"] = json!("t1")
            }),
        ),
        (
            "another container unready already",
            Box::new(|o, n| {
                o["status"]["containerStatuses"][0]["ready"] = json!(false);
                n["status"]["containerStatuses"][0]["ready"] = json!(false);
            }),
        ),
        (
            "the API had the pod unready",
            Box::new(|o, _| o["status"]["conditions"][1]["status"] = json!("False")),
        ),
        (
            "a readiness gate false",
            Box::new(|_, n| {
                n["spec"]["readinessGates"] = json!([{"conditionType": "example.com/lb"}]);
                n["status"]["conditions"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"type": "example.com/lb", "status": "False"}));
            }),
        ),
    ];
    for (why, change) in cases {
        let (mut o, mut n) = (old.clone(), reset(&old));
        change(&mut o, &mut n);
        assert_eq!(
            review(&o, &n, t, &mut Holds::new()),
            Outcome::Untouched,
            "passes untouched: {why}"
        );
    }
    assert_eq!(
        review(&old, &old, t, &mut Holds::new()),
        Outcome::Untouched,
        "no readiness change"
    );
}
