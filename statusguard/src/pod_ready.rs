//! A pod's readiness, reset by a starting kubelet for the very containers it adopted, held back
//! for a bounded time (issue 54).
//!
//! A kubelet up to 1.34 starts every readiness and startup probe worker from "failure"
//! (`prober/worker.go`: `initialValue = results.Failure`; kept across restarts only from 1.35,
//! KEP-4781), so its first status of each running pod writes `ready: false` for every probed
//! container, and the pod's `ContainersReady` and `Ready` conditions `False`, until the first
//! probe passes. The EndpointSlice controller takes the pod out of every Service meanwhile.
//!
//! The rule, every part of which must hold for the update to be amended:
//! - each container (or init container: a native sidecar) whose `ready` goes from true to false
//!   is the very same one the API knew: the same `containerID`, still running since the same
//!   `startedAt`, the same restart count;
//! - every other container is ready in the update, every readiness gate's condition is `True`,
//!   and the API had `ContainersReady` and `Ready` `True`: the containers' reset is all that
//!   makes the pod unready;
//! - each of those containers is inside its bound: the time its own probe gives a running
//!   kubelet to find a failure (`failureThreshold` × `periodSeconds` + `timeoutSeconds`, the
//!   largest of its readiness and startup probes; 10 s, one status period, without a probe),
//!   counted from the first update the guard held back for it, and never held again once its
//!   bound passed or it was ready again.
//!
//! The amendment sets those containers' `ready` back to true and the two conditions back to
//! what the API had (same `lastTransitionTime`): the API keeps what it had, the kubelet's next
//! status (its first probe result) agrees with it, or, past the bound, goes through. A container
//! whose probe really fails is unready in the API at most one bound plus the kubelet's status
//! resync (10 s) after the kubelet's first status of the pod.

use serde_json::{json, Value};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// What the guard remembers of one container it held back: when it first did, and whether it
/// may hold it again (never after its bound or once it was ready again).
#[derive(Debug, Clone, Copy)]
pub struct Hold {
    first: Instant,
    over: bool,
}

/// The guard's holds, by `"<pod uid>/<container id>"`.
pub type Holds = HashMap<String, Hold>;

/// What the guard does with one update of a Pod's status.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Passed untouched: nothing the guard holds back.
    Untouched,
    /// Amended with this JSON Patch: the named containers' readiness held back.
    Held {
        /// The JSON Patch.
        patch: Vec<Value>,
        /// The containers held back, by name.
        containers: Vec<String>,
    },
    /// Passed because these containers' bounds are over: their `ready: false` goes through.
    BoundOver {
        /// The containers, by name, with their bound.
        containers: Vec<String>,
    },
}

/// One container status of the update, where it sits in the object.
struct Status<'a> {
    list: &'static str,
    index: usize,
    value: &'a Value,
}

fn statuses(pod: &Value) -> Vec<Status<'_>> {
    let mut out = Vec::new();
    for list in ["containerStatuses", "initContainerStatuses"] {
        for (index, value) in pod["status"][list]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            out.push(Status { list, index, value });
        }
    }
    out
}

/// The status named `name` in the same list of `pod`.
fn status_named<'a>(pod: &'a Value, list: &str, name: &Value) -> Option<&'a Value> {
    pod["status"][list]
        .as_array()?
        .iter()
        .find(|c| &c["name"] == name)
}

/// Whether `new` is the very container `old` was: same id, running since the same time, not
/// restarted.
fn same_container(old: &Value, new: &Value) -> bool {
    let id = new["containerID"].as_str().unwrap_or("");
    let started = &new["state"]["running"]["startedAt"];
    !id.is_empty()
        && old["containerID"].as_str() == Some(id)
        && started.is_string()
        && &old["state"]["running"]["startedAt"] == started
        && old["restartCount"] == new["restartCount"]
}

/// The bound of the container named `name` (see the module's docs).
pub fn bound(pod: &Value, name: &Value) -> Duration {
    let spec = ["containers", "initContainers"]
        .iter()
        .filter_map(|l| pod["spec"][l].as_array())
        .flatten()
        .find(|c| &c["name"] == name);
    let secs = |probe: &Value, k: &str, default: u64| probe[k].as_u64().unwrap_or(default);
    let probes = spec
        .into_iter()
        .flat_map(|c| [&c["readinessProbe"], &c["startupProbe"]])
        .filter(|p| p.is_object());
    probes
        .map(|p| {
            Duration::from_secs(
                secs(p, "failureThreshold", 3) * secs(p, "periodSeconds", 10)
                    + secs(p, "timeoutSeconds", 1),
            )
        })
        .max()
        .unwrap_or(Duration::from_secs(10))
}

/// Decides one update of a Pod's status at `now`; `holds` is the guard's memory of the
/// containers it held.
pub fn review(old: &Value, new: &Value, now: Instant, holds: &mut Holds) -> Outcome {
    let uid = new["metadata"]["uid"].as_str().unwrap_or("");
    let key = |s: &Value| format!("{uid}/{}", s["containerID"].as_str().unwrap_or(""));
    let all = statuses(new);
    // a container ready in the update is over: it is never held again
    for s in &all {
        if s.value["ready"] == true {
            if let Some(h) = holds.get_mut(&key(s.value)) {
                h.over = true;
            }
        }
    }
    let flipped: Vec<&Status> = all
        .iter()
        .filter(|s| {
            s.value["ready"] == false
                && status_named(old, s.list, &s.value["name"]).is_some_and(|o| o["ready"] == true)
        })
        .collect();
    if flipped.is_empty() {
        return Outcome::Untouched;
    }
    let same = flipped.iter().all(|s| {
        status_named(old, s.list, &s.value["name"]).is_some_and(|o| same_container(o, s.value))
    });
    // completed init containers are never ready; any other container not ready is a reason
    // the pod is unready that the guard does not hold back
    let others_ready = all.iter().all(|s| {
        s.value["ready"] == true
            || flipped.iter().any(|f| std::ptr::eq(f.value, s.value))
            || s.value["state"]["terminated"]["reason"] == "Completed"
                && s.list == "initContainerStatuses"
    });
    let gates_true = new["spec"]["readinessGates"]
        .as_array()
        .into_iter()
        .flatten()
        .all(|g| {
            g["conditionType"].as_str().is_some_and(|t| {
                crate::condition(new, t).is_some_and(|(_, c)| c["status"] == "True")
            })
        });
    let was_ready = ["ContainersReady", "Ready"]
        .iter()
        .all(|t| crate::condition(old, t).is_some_and(|(_, c)| c["status"] == "True"));
    if !(same && others_ready && gates_true && was_ready) {
        return Outcome::Untouched;
    }
    let mut over = Vec::new();
    for s in &flipped {
        let h = holds.entry(key(s.value)).or_insert(Hold {
            first: now,
            over: false,
        });
        if h.over || now.saturating_duration_since(h.first) > bound(new, &s.value["name"]) {
            h.over = true;
            over.push(s.value["name"].as_str().unwrap_or("").to_string());
        }
    }
    if !over.is_empty() {
        return Outcome::BoundOver { containers: over };
    }
    let mut patch = Vec::new();
    let mut containers = Vec::new();
    for s in &flipped {
        let at = format!("/status/{}/{}", s.list, s.index);
        patch.push(json!({"op": "test", "path": format!("{at}/containerID"), "value": s.value["containerID"]}));
        patch.push(json!({"op": "replace", "path": format!("{at}/ready"), "value": true}));
        containers.push(s.value["name"].as_str().unwrap_or("").to_string());
    }
    for t in ["ContainersReady", "Ready"] {
        let (_, was) = crate::condition(old, t).expect("checked above");
        match crate::condition(new, t) {
            Some((_, c)) if c["status"] == "True" => {}
            Some((i, _)) => {
                patch.push(json!({"op": "test", "path": format!("/status/conditions/{i}/type"), "value": t}));
                patch.push(json!({"op": "replace", "path": format!("/status/conditions/{i}"), "value": was}));
            }
            None => patch.push(json!({"op": "add", "path": "/status/conditions/-", "value": was})),
        }
    }
    Outcome::Held { patch, containers }
}

#[cfg(test)]
mod tests;
