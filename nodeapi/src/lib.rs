//! What kubelet-rehash asks the Kubernetes API server, with the node's own identity (issue
//! 36): the pods bound to the node, the Node object, and the server's version.
//!
//! Why the node's identity: the kubelet's client certificate (`system:node:<name>`, group
//! `system:nodes`) is already on every node, and the API server's Node authorizer lets it read
//! exactly the pods bound to that node and the Node itself. Nothing else has to be handed out,
//! and the pods are read inside the window instead of copied in beforehand.
//!
//! Why raw requests: the plan hashes container specs as the kubelet decodes them, so the pods
//! must reach the planner exactly as the API server serves them. Typed objects of a client
//! library drop every field their API version does not know (a container field added in a
//! newer Kubernetes), which would change the hash; [`NodeApi::pods_of_node`] returns the
//! served items byte for byte, joined into one `PodList`.
//!
//! Nothing here writes to the node; the one write to the API server is the node's heartbeat
//! ([`heartbeat`]: its Lease's renewTime, or its Ready condition's lastHeartbeatTime), which
//! `upgrade` renews while the kubelet is down.
//!
//! The same client also serves the operator's side ([`NodeApi::create_object`] and its
//! siblings, with an administrator's kubeconfig): the status guard registers its webhook
//! configuration through it.

#![deny(missing_docs)]

mod cert;
mod client;
mod error;
pub mod heartbeat;
mod kubeconfig;
mod objects;

pub use cert::Certificate;
pub use client::{Guard, NodeApi, NodeInfo, Options, ServerVersion};
pub use error::{Error, ErrorClass};
pub use heartbeat::{NodeLease, Renewal};
pub use kubeconfig::{Kubeconfig, NodeRoot, KUBELET_KUBECONFIGS};
