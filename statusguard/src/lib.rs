//! The status guard: an admission webhook that keeps a node and its pods ready in the API while
//! the node's kubelet restarts onto the very containers it left running (issues 54 and 56).
//!
//! Why it exists: `kubelet-rehash upgrade` keeps every container running and the node's Lease
//! renewed through the window, but a kubelet that starts writes two things it does not know
//! yet, and the control plane acts on both:
//! - up to 1.30 its first node status says `Ready=False` (`KubeletNotReady`, "container
//!   runtime status check may not have completed yet": its runtime check has not run once in
//!   this process, kubernetes#124397, fixed in 1.31 by #124430); the node lifecycle controller
//!   taints the node not-ready for the ~10 s until its next status;
//! - up to 1.34 every readiness (and startup) probe starts from "failure" (fixed in 1.35,
//!   KEP-4781), so each probed container is written `ready: false` until its first probe
//!   passes, and the EndpointSlice controller takes the pod out of every Service.
//!
//! Both writes come from the node's own identity (`system:node:NAME`) as an update of a
//! `status` subresource, and both can be told apart from a real failure by what the old object
//! says: [`node_ready`] and [`pod_ready`] hold each of them back, once and for a bounded time,
//! by amending the update to what the API already had. Everything else passes untouched, and a
//! guard that is down changes nothing (its webhook's `failurePolicy` is `Ignore`).
//!
//! [`review::Guard`] answers one AdmissionReview; [`server`] serves it over HTTPS with a
//! certificate made for the run; [`webhook`] is the configuration that registers it, scoped to
//! the nodes in a window.

#![deny(missing_docs)]

pub mod node_ready;
pub mod pod_ready;
pub mod review;
pub mod server;
pub mod webhook;

pub use review::{Action, Decision, Guard, HoldBy};

/// Finds the condition of `type` in `object.status.conditions`: its index and value.
pub(crate) fn condition<'a>(
    object: &'a serde_json::Value,
    kind: &str,
) -> Option<(usize, &'a serde_json::Value)> {
    object["status"]["conditions"]
        .as_array()?
        .iter()
        .enumerate()
        .find(|(_, c)| c["type"] == kind)
}
