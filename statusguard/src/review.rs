//! One AdmissionReview in, its answer out: which nodes the guard is armed for, until when, and
//! the holds it remembers.

use crate::pod_ready::{Holds, Outcome};
use base64::Engine as _;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::Instant;

/// What the guard did with one request (every one it amended or passed for a reason worth
/// knowing; the rest are [`Action::Passed`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The node whose kubelet sent the update.
    pub node: String,
    /// `node/NAME` or `pod/NAMESPACE/NAME`.
    pub object: String,
    /// What was done.
    pub action: Action,
    /// What was held back or let through (a message, container names).
    pub detail: String,
    /// Whether the update changes the node's Ready condition or a container's readiness,
    /// whatever was done with it: what `guard --record` keeps as a baseline.
    pub changes_readiness: bool,
}

/// What the guard did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// The node's startup-only `Ready=False` amended to the `True` the API had.
    HeldNodeNotReady,
    /// Containers' reset readiness amended to the `ready: true` the API had.
    HeldPodReadiness,
    /// Containers' `ready: false` let through: their bound is over.
    BoundOver,
    /// Let through untouched.
    Passed,
}

impl Action {
    /// The action's name in the guard's log.
    pub fn name(self) -> &'static str {
        match self {
            Action::HeldNodeNotReady => "held-node-not-ready",
            Action::HeldPodReadiness => "held-pod-readiness",
            Action::BoundOver => "bound-over",
            Action::Passed => "passed",
        }
    }
}

/// How a pod's held readiness is held back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HoldBy {
    /// The update is amended to the readiness the API had (the default: every other field of
    /// the update is stored).
    Amend,
    /// The update is refused (`allowed: false`): the kubelet keeps it and sends it again at
    /// its next status sync. Measured against amending (docs/upgrade.md); the node's Ready is
    /// always amended (a refused node status loses its heartbeat and every other condition).
    Reject,
}

/// The guard: the nodes it is armed for, until when, and the holds it made.
#[derive(Debug)]
pub struct Guard {
    nodes: BTreeSet<String>,
    until: Instant,
    holds: Mutex<Holds>,
    hold_by: HoldBy,
}

impl Guard {
    /// A guard armed for `nodes` until `until`; after it every request passes untouched.
    pub fn new(nodes: impl IntoIterator<Item = String>, until: Instant) -> Guard {
        Guard {
            nodes: nodes.into_iter().collect(),
            until,
            holds: Mutex::new(Holds::new()),
            hold_by: HoldBy::Amend,
        }
    }

    /// The same guard, holding pods' readiness back by `hold_by`.
    pub fn holding_pods_by(mut self, hold_by: HoldBy) -> Guard {
        self.hold_by = hold_by;
        self
    }

    /// Answers one AdmissionReview (the request's body) at `now`: the answer's body, and what
    /// was done. An input that is not an AdmissionReview is an `Err` (the server answers 400;
    /// the API server, with `failurePolicy: Ignore`, goes on without the guard).
    pub fn review(&self, body: &[u8], now: Instant) -> Result<(Vec<u8>, Decision), String> {
        let review: Value = serde_json::from_slice(body).map_err(|e| format!("not JSON: {e}"))?;
        let request = &review["request"];
        let uid = request["uid"]
            .as_str()
            .ok_or("not an AdmissionReview: no request.uid")?;
        let api_version = review["apiVersion"]
            .as_str()
            .unwrap_or("admission.k8s.io/v1");
        let (decision, patch) = self.decide(request, now);
        let mut response = json!({"uid": uid, "allowed": true});
        if patch.is_some()
            && decision.action == Action::HeldPodReadiness
            && self.hold_by == HoldBy::Reject
        {
            response["allowed"] = json!(false);
            response["status"] = json!({
                "code": 409,
                "reason": "Conflict",
                "message": format!("kubelet-rehash status guard: the readiness of {} ({}) is held back while the kubelet's first probes run", decision.object, decision.detail),
            });
        } else if let Some(patch) = patch {
            response["patchType"] = json!("JSONPatch");
            response["patch"] = json!(base64::engine::general_purpose::STANDARD
                .encode(serde_json::to_vec(&patch).expect("a JSON value serializes")));
            response["auditAnnotations"] = json!({"held": decision.detail});
        }
        let answer =
            json!({"apiVersion": api_version, "kind": "AdmissionReview", "response": response});
        Ok((
            serde_json::to_vec(&answer).expect("a JSON value serializes"),
            decision,
        ))
    }

    fn decide(&self, request: &Value, now: Instant) -> (Decision, Option<Vec<Value>>) {
        let username = request["userInfo"]["username"].as_str().unwrap_or("");
        let node = username.strip_prefix("system:node:").unwrap_or("");
        let kind = request["kind"]["kind"].as_str().unwrap_or("");
        let name = request["name"].as_str().unwrap_or("");
        let namespace = request["namespace"].as_str().unwrap_or("");
        let object = match kind {
            "Node" => format!("node/{name}"),
            _ => format!("{}/{namespace}/{name}", kind.to_ascii_lowercase()),
        };
        let (old, new) = (&request["oldObject"], &request["object"]);
        let mut decision = Decision {
            node: node.to_string(),
            object,
            action: Action::Passed,
            detail: String::new(),
            changes_readiness: readiness(old) != readiness(new),
        };
        let armed = !node.is_empty() && self.nodes.contains(node) && now <= self.until;
        if !armed
            || request["operation"] != "UPDATE"
            || request["subResource"] != "status"
            || !old.is_object()
        {
            return (decision, None);
        }
        match kind {
            // a node's identity updates only its own Node (NodeRestriction); checked anyway
            "Node" if name == node => {
                if let Some((patch, held)) = crate::node_ready::review(old, new) {
                    decision.action = Action::HeldNodeNotReady;
                    decision.detail = held;
                    return (decision, Some(patch));
                }
            }
            "Pod" if new["spec"]["nodeName"] == node => {
                let mut holds = self.holds.lock().unwrap_or_else(|p| p.into_inner());
                match crate::pod_ready::review(old, new, now, &mut holds) {
                    Outcome::Untouched => {}
                    Outcome::Held { patch, containers } => {
                        decision.action = Action::HeldPodReadiness;
                        decision.detail = containers.join(",");
                        return (decision, Some(patch));
                    }
                    Outcome::BoundOver { containers } => {
                        decision.action = Action::BoundOver;
                        decision.detail = containers.join(",");
                    }
                }
            }
            _ => {}
        }
        (decision, None)
    }
}

/// The node's Ready condition status, or every container's `ready`: what
/// [`Decision::changes_readiness`] compares.
fn readiness(object: &Value) -> Vec<Value> {
    let mut out: Vec<Value> = crate::condition(object, "Ready")
        .map(|(_, c)| c["status"].clone())
        .into_iter()
        .collect();
    for list in ["containerStatuses", "initContainerStatuses"] {
        for c in object["status"][list].as_array().into_iter().flatten() {
            out.push(c["ready"].clone());
        }
    }
    out
}

#[cfg(test)]
mod tests;
