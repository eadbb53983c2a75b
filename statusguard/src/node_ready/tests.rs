use super::*;
use serde_json::json;

/// A Node as a kubelet of `version` writes it, with its Ready condition.
fn node(version: &str, status: &str, reason: &str, message: &str) -> Value {
    json!({
        "metadata": {"name": "n1"},
        "status": {
            "nodeInfo": {"kubeletVersion": version},
            "conditions": [
                {"type": "MemoryPressure", "status": "False", "reason": "KubeletHasSufficientMemory"},
                {"type": "Ready", "status": status, "reason": reason, "message": message,
                 "lastHeartbeatTime": format!("hb-{status}"), "lastTransitionTime": format!("tt-{status}")},
            ]
        }
    })
}

fn ready(version: &str) -> Value {
    node(
        version,
        "True",
        "KubeletReady",
        "kubelet is posting ready status",
    )
}

#[test]
fn a_starting_kubelets_own_not_ready_is_held_back_once() {
    for (version, message) in [
        ("v1.30.14", "container runtime status check may not have completed yet"),
        ("v1.28.15", "[container runtime status check may not have completed yet, PLEG is not healthy: pleg has yet to be successful]"),
        ("v1.24.17", "[container runtime status check may not have completed yet, PLEG is not healthy: pleg has yet to be successful, network state unknown]"),
        ("v1.14.10", "container runtime status check may not have completed yet,PLEG is not healthy: pleg has yet to be successful"),
        ("v1.12.10", "container runtime is down,PLEG is not healthy: pleg was last seen active 2562047h47m16.854775807s ago; threshold is 3m0s"),
    ] {
        let new = node(version, "False", "KubeletNotReady", message);
        let (patch, held) = review(&ready(version), &new)
            .unwrap_or_else(|| panic!("{version}: the startup-only NotReady {message:?} is held back"));
        assert_eq!(held, message, "{version}: the message held back is reported");
        assert_eq!(patch[0], json!({"op": "test", "path": "/status/conditions/1/type", "value": "Ready"}), "{version}: the patch tests the condition it replaces");
        let amended = &patch[1]["value"];
        assert_eq!(amended["status"], "True", "{version}: the API keeps Ready=True");
        assert_eq!(amended["lastTransitionTime"], "tt-True", "{version}: the transition time the API had is kept");
        assert_eq!(amended["lastHeartbeatTime"], "hb-False", "{version}: the kubelet's new heartbeat is taken");
        assert!(amended["message"].as_str().unwrap().contains(MARK), "{version}: the guard's True is marked");
        // one shot: the guard's own True followed by another False lets the False through
        assert_eq!(
            review(&json!({"status": {"conditions": [amended.clone()]}}), &new),
            None,
            "{version}: a second NotReady in a row passes"
        );
    }
}

#[test]
fn every_other_not_ready_passes() {
    let v = "v1.28.15";
    for (old, new, why) in [
        (node(v, "False", "KubeletNotReady", "x"), node(v, "False", "KubeletNotReady", "container runtime status check may not have completed yet"), "the API had it not ready"),
        (node(v, "Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status."), node(v, "False", "KubeletNotReady", "container runtime status check may not have completed yet"), "the controller had judged the node"),
        (ready(v), node(v, "False", "KubeletNotReady", "container runtime is down"), "a runtime down (1.13+: a real outage)"),
        (ready(v), node(v, "False", "KubeletNotReady", "[container runtime status check may not have completed yet, container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized]"), "a real error beside a startup one"),
        (ready(v), node(v, "False", "KubeletNotReady", "PLEG is not healthy: pleg was last seen active 3m0.5s ago; threshold is 3m0s"), "an unhealthy PLEG"),
        (ready(v), node(v, "False", "KubeletNotReady", ""), "no message"),
        (ready(v), node(v, "False", "SomethingElse", "container runtime status check may not have completed yet"), "another reason"),
        (ready(v), node(v, "Unknown", "KubeletNotReady", "container runtime status check may not have completed yet"), "not False"),
        (ready(v), ready(v), "a Ready node"),
        (ready("v1.12.10"), node("v1.12.10", "False", "KubeletNotReady", "PLEG is not healthy: pleg was last seen active 3m1s ago; threshold is 3m0s"), "1.12: a PLEG really late"),
    ] {
        assert_eq!(review(&old, &new), None, "passes untouched: {why}");
    }
}

#[test]
fn the_startup_errors_are_read_per_version() {
    assert!(startup_only("network state unknown", Some(30)));
    assert!(
        !startup_only("container runtime is down", Some(13)),
        "1.13+ says 'not completed yet' at start: 'down' is a real outage"
    );
    assert!(
        startup_only("container runtime is down", Some(12)),
        "before 1.13 the zero time reads as 'down'"
    );
    assert!(
        !startup_only("[]", Some(30)),
        "an empty list is no startup error"
    );
    assert!(
        !startup_only(
            "container runtime status check may not have completed yet, ",
            Some(30)
        ),
        "an empty element is not one"
    );
}
