//! The guard against what the real thing sent it: AdmissionReviews the lab's real API server
//! sent `kubelet-rehash guard` for real kubelets' status updates (scripts/guard-baseline.sh
//! records them into fixtures/guard/, each with what the guard did then). A fresh guard must
//! decide each the same way, and every amendment must give back what the API had.

use serde_json::Value;
use statusguard::{Action, Guard};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn baselines() -> Vec<(PathBuf, Value)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/guard");
    let mut out = Vec::new();
    for window in std::fs::read_dir(&root).expect("fixtures/guard (scripts/guard-baseline.sh)") {
        let window = window.unwrap().path();
        for f in std::fs::read_dir(&window).unwrap() {
            let f = f.unwrap().path();
            let v: Value = serde_json::from_slice(&std::fs::read(&f).unwrap()).unwrap();
            out.push((f, v));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn node_of(review: &Value) -> String {
    review["request"]["userInfo"]["username"]
        .as_str()
        .unwrap()
        .trim_start_matches("system:node:")
        .to_string()
}

/// `object` with the answer's JSON Patch applied as the API server applies it.
fn patched(review: &Value, answer: &Value) -> Value {
    use base64::Engine as _;
    let mut object = review["request"]["object"].clone();
    let patch: Vec<Value> = serde_json::from_slice(
        &base64::engine::general_purpose::STANDARD
            .decode(answer["response"]["patch"].as_str().expect("a patch"))
            .unwrap(),
    )
    .unwrap();
    for op in patch {
        let path = op["path"].as_str().unwrap();
        match op["op"].as_str().unwrap() {
            "test" => assert_eq!(object.pointer(path), Some(&op["value"]), "test {path}"),
            "replace" => *object.pointer_mut(path).expect("the path exists") = op["value"].clone(),
            o => panic!("unexpected op {o}"),
        }
    }
    object
}

fn condition<'a>(o: &'a Value, t: &str) -> &'a Value {
    o["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == t)
        .unwrap()
}

#[test]
fn a_fresh_guard_decides_every_recorded_update_as_the_guard_did_and_gives_back_what_the_api_had() {
    let all = baselines();
    let count = |a: &str| all.iter().filter(|(_, v)| v["action"] == a).count();
    assert!(
        count("held-pod-readiness") > 0,
        "the baselines hold a readiness reset of a real kubelet"
    );
    assert!(
        count("passed") > 0,
        "the baselines hold updates that passed (a real NotReady, a probe passing)"
    );
    for (file, recorded) in &all {
        let name = file.display();
        let review = &recorded["review"];
        let body = serde_json::to_vec(review).unwrap();
        let t = Instant::now();
        let guard = Guard::new([node_of(review)], t + Duration::from_secs(7200));
        let (answer, decision) = guard.review(&body, t).unwrap();
        let answer: Value = serde_json::from_slice(&answer).unwrap();
        assert_eq!(answer["response"]["allowed"], true, "{name}: never denied");
        let old = &review["request"]["oldObject"];
        match recorded["action"].as_str().unwrap() {
            "passed" => {
                assert_eq!(decision.action, Action::Passed, "{name}: passes again");
                assert!(answer["response"]["patch"].is_null(), "{name}: untouched");
            }
            "held-node-not-ready" => {
                assert_eq!(
                    decision.action,
                    Action::HeldNodeNotReady,
                    "{name}: held again"
                );
                let new = patched(review, &answer);
                let (was, now) = (condition(old, "Ready"), condition(&new, "Ready"));
                assert_eq!(
                    (&now["status"], &now["lastTransitionTime"]),
                    (&was["status"], &was["lastTransitionTime"]),
                    "{name}: Ready as the API had it"
                );
            }
            "held-pod-readiness" | "bound-over" => {
                // (a bound-over was a reset held before: a fresh guard holds it first, and lets
                // it through once its bound is over)
                assert_eq!(
                    decision.action,
                    Action::HeldPodReadiness,
                    "{name}: held by a fresh guard"
                );
                let new = patched(review, &answer);
                for t in ["Ready", "ContainersReady"] {
                    assert_eq!(
                        condition(&new, t),
                        condition(old, t),
                        "{name}: {t} as the API had it"
                    );
                }
                let ready = |o: &Value| -> Vec<Value> {
                    o["status"]["containerStatuses"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|c| c["ready"].clone())
                        .collect()
                };
                assert_eq!(
                    ready(&new),
                    ready(old),
                    "{name}: every container's readiness as the API had it"
                );
                if recorded["action"] == "bound-over" {
                    let (_, later) = guard.review(&body, t + Duration::from_secs(3600)).unwrap();
                    assert_eq!(
                        later.action,
                        Action::BoundOver,
                        "{name}: passes once the bound is over"
                    );
                }
            }
            other => panic!("{name}: unknown action {other}"),
        }
    }
}
