//! The node's own `Ready=False` at a kubelet's start, held back once (issue 56).
//!
//! A kubelet up to 1.30 computes its first node status before its first runtime check has run
//! (`Kubelet.Run` starts `syncNodeStatus` and `updateRuntimeUp` side by side; only the latter
//! sets `lastBaseRuntimeSync`), so it reports `Ready=False`, reason `KubeletNotReady`, with a
//! message made only of the checks that have not run yet in this process. The next status, one
//! `nodeStatusUpdateFrequency` (10 s) later, is `True` (docs/research/kubelet-notready-at-start.md
//! cites each version's files). The node lifecycle controller meanwhile adds the
//! `node.kubernetes.io/not-ready` taints.
//!
//! The rule, every part of which must hold:
//! - the API's condition was `Ready=True` (the controller had not judged the node), and was not
//!   itself written by this guard (one shot: a second `False` in a row always passes);
//! - the update says `False`, `KubeletNotReady`, and every error in its message is one that
//!   only a kubelet process that has not yet completed its first runtime check or relist can
//!   report ([`startup_only`]).
//!
//! The update is then amended to the `True` the API had, with the new heartbeat and a message
//! that names what was held back. Bound: a kubelet that is really not ready reports `False`
//! again at its next status and is shown, at most one status period later than without the
//! guard.

use serde_json::{json, Value};

/// Written into the amended condition's message: marks the guard's own `True` (the one-shot
/// rule reads it) and tells whoever reads the Node what happened.
pub const MARK: &str = "kubelet-rehash status guard";

/// The errors of a kubelet process whose first runtime check (`updateRuntimeUp`), PLEG relist or
/// network status has not come yet, 1.13 on (`runtime.go`, `pleg/generic.go`).
const STARTUP_ERRORS: &[&str] = &[
    "container runtime status check may not have completed yet",
    "PLEG is not healthy: pleg has yet to be successful",
    "network state unknown",
];

/// The same before 1.13: no separate text for "not yet"; the zero time of the last runtime
/// sync reads as a runtime down, and PLEG's as 292 years ago.
const STARTUP_ERRORS_BEFORE_1_13: &[&str] = &[
    "container runtime is down",
    "PLEG is not healthy: pleg was last seen active 2562047h47m16.854775807s ago; threshold is 3m0s",
    "network state unknown",
];

/// Whether every error of a `KubeletNotReady` message is a startup-only one for a kubelet of
/// minor `kubelet_minor` (`None`: unknown, read as 1.13+). The kubelet joins several errors as
/// `[a, b]` (1.15+, `utilerrors.NewAggregate`) or `a,b` (up to 1.14).
pub fn startup_only(message: &str, kubelet_minor: Option<u32>) -> bool {
    let known = match kubelet_minor {
        Some(m) if m < 13 => STARTUP_ERRORS_BEFORE_1_13,
        _ => STARTUP_ERRORS,
    };
    let m = message.trim();
    let inner = m
        .strip_prefix('[')
        .and_then(|x| x.strip_suffix(']'))
        .unwrap_or(m);
    !inner.is_empty() && inner.split(',').map(str::trim).all(|e| known.contains(&e))
}

/// The minor of `status.nodeInfo.kubeletVersion` (`v1.12.10`).
fn kubelet_minor(node: &Value) -> Option<u32> {
    node["status"]["nodeInfo"]["kubeletVersion"]
        .as_str()?
        .trim_start_matches('v')
        .split('.')
        .nth(1)?
        .parse()
        .ok()
}

/// What the guard does with one update of a Node's status: `None` passes it untouched;
/// `Some((patch, held))` amends it with the JSON Patch `patch`, `held` being the message it
/// held back.
pub fn review(old: &Value, new: &Value) -> Option<(Vec<Value>, String)> {
    let (_, was) = crate::condition(old, "Ready")?;
    let (i, now) = crate::condition(new, "Ready")?;
    let text = |c: &Value, k: &str| c[k].as_str().unwrap_or("").to_string();
    if text(was, "status") != "True" || text(was, "message").contains(MARK) {
        return None;
    }
    if text(now, "status") != "False" || text(now, "reason") != "KubeletNotReady" {
        return None;
    }
    let held = text(now, "message");
    if !startup_only(&held, kubelet_minor(new)) {
        return None;
    }
    let mut amended = was.clone();
    amended["lastHeartbeatTime"] = now["lastHeartbeatTime"].clone();
    amended["message"] = Value::String(format!(
        "{} ({MARK}: held back the starting kubelet's NotReady \"{held}\" once)",
        text(was, "message")
    ));
    let patch = vec![
        json!({"op": "test", "path": format!("/status/conditions/{i}/type"), "value": "Ready"}),
        json!({"op": "replace", "path": format!("/status/conditions/{i}"), "value": amended}),
    ];
    Some((patch, held))
}

#[cfg(test)]
mod tests;
