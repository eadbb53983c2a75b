//! The MutatingWebhookConfiguration that puts the guard on the path of the armed nodes'
//! status updates, and only there.
//!
//! - `failurePolicy: Ignore` and a short timeout: a guard that is down, slow or gone lets
//!   every update through as if it never existed; it can never block a kubelet.
//! - `nodes/status` and `pods/status` updates only; from 1.30 (`matchConditions`, GA) the API
//!   server itself calls the guard only for the armed nodes' own identities, before that the
//!   guard checks the identity (every other request passes untouched).
//! - `admissionregistration.k8s.io/v1` from 1.16, `v1beta1` before (served 1.9–1.21).
//! - Labelled and annotated with the run and its end: `kubelet-rehash guard --remove` finds
//!   what a killed run left.

use base64::Engine as _;
use serde_json::{json, Value};

/// The label every guard's configuration carries.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "kubelet-rehash-guard");

/// The configuration's name unless the operator gives one.
pub const DEFAULT_NAME: &str = "kubelet-rehash-status-guard";

/// What one run registers.
#[derive(Debug, Clone)]
pub struct Registration {
    /// The configuration's name.
    pub name: String,
    /// The guard's URL (`https://HOST:PORT/...`).
    pub url: String,
    /// The CA that signed the guard's certificate, PEM.
    pub ca_pem: String,
    /// The armed nodes.
    pub nodes: Vec<String>,
    /// When the run ends (RFC 3339), recorded for whoever finds it.
    pub expires: String,
    /// The run's identity (host and pid): a configuration of another run is never removed by
    /// this one.
    pub run: String,
    /// The API server's minor version.
    pub server_minor: u32,
}

impl Registration {
    /// Where the configurations of this API server's version live.
    pub fn collection(&self) -> &'static str {
        Self::collection_for(self.server_minor)
    }

    /// Where the configurations of an API server of minor `server_minor` live.
    pub fn collection_for(server_minor: u32) -> &'static str {
        if server_minor >= 16 {
            "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
        } else {
            "/apis/admissionregistration.k8s.io/v1beta1/mutatingwebhookconfigurations"
        }
    }

    /// The configuration object.
    pub fn object(&self) -> Value {
        let v1 = self.server_minor >= 16;
        let mut hook = json!({
            "name": "status.guard.kubelet-rehash.io",
            "clientConfig": {
                "url": self.url,
                "caBundle": base64::engine::general_purpose::STANDARD.encode(&self.ca_pem),
            },
            "rules": [{
                "operations": ["UPDATE"],
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "resources": ["nodes/status", "pods/status"],
            }],
            "failurePolicy": "Ignore",
            "sideEffects": "None",
            "timeoutSeconds": 2,
            "admissionReviewVersions": ["v1", "v1beta1"],
        });
        if !v1 {
            // v1beta1 before 1.12 knows no sideEffects; unknown fields are dropped anyway
            hook["admissionReviewVersions"] = json!(["v1beta1"]);
        }
        if self.server_minor >= 30 {
            let users: Vec<String> = self
                .nodes
                .iter()
                .map(|n| format!("'system:node:{n}'"))
                .collect();
            hook["matchConditions"] = json!([{
                "name": "armed-nodes",
                "expression": format!("request.userInfo.username in [{}]", users.join(", ")),
            }]);
        }
        json!({
            "apiVersion": if v1 { "admissionregistration.k8s.io/v1" } else { "admissionregistration.k8s.io/v1beta1" },
            "kind": "MutatingWebhookConfiguration",
            "metadata": {
                "name": self.name,
                "labels": {MANAGED_BY.0: MANAGED_BY.1},
                "annotations": {
                    "kubelet-rehash.io/nodes": self.nodes.join(","),
                    "kubelet-rehash.io/expires": self.expires,
                    "kubelet-rehash.io/run": self.run,
                },
            },
            "webhooks": [hook],
        })
    }
}

/// Whether a node name can be put in the configuration's expression as is: a DNS subdomain
/// (what the API server accepts as a Node's name).
pub fn valid_node_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && !name.starts_with(['-', '.'])
        && !name.ends_with(['-', '.'])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg(minor: u32) -> Registration {
        Registration {
            name: DEFAULT_NAME.into(),
            url: "https://127.0.0.1:9443/mutate".into(),
            ca_pem: "PEM".into(),
            nodes: vec!["node-a".into(), "node-b".into()],
            expires: "2026-12-07T12:00:00Z".into(),
            run: "host/1".into(),
            server_minor: minor,
        }
    }

    #[test]
    fn the_configuration_fails_open_and_is_scoped_to_status_updates() {
        for minor in [15, 16, 29, 30, 37] {
            let o = reg(minor).object();
            let h = &o["webhooks"][0];
            assert_eq!(
                h["failurePolicy"], "Ignore",
                "1.{minor}: a guard that is down never blocks a kubelet"
            );
            assert_eq!(
                h["timeoutSeconds"], 2,
                "1.{minor}: a slow guard costs a kubelet at most 2 s"
            );
            assert_eq!(
                h["rules"][0]["operations"],
                json!(["UPDATE"]),
                "1.{minor}: updates only"
            );
            assert_eq!(
                h["rules"][0]["resources"],
                json!(["nodes/status", "pods/status"]),
                "1.{minor}: the two status subresources only"
            );
            assert_eq!(
                o["metadata"]["labels"][MANAGED_BY.0], MANAGED_BY.1,
                "1.{minor}: found by --remove"
            );
            assert_eq!(
                h["clientConfig"]["caBundle"], "UEVN",
                "1.{minor}: the CA, base64"
            );
        }
        assert_eq!(
            reg(15).object()["apiVersion"],
            "admissionregistration.k8s.io/v1beta1",
            "1.15 serves v1beta1 only"
        );
        assert_eq!(
            reg(16).object()["apiVersion"],
            "admissionregistration.k8s.io/v1",
            "v1 from 1.16"
        );
        assert!(
            reg(29).object()["webhooks"][0]["matchConditions"].is_null(),
            "no matchConditions before 1.30 (not GA)"
        );
        assert_eq!(
            reg(30).object()["webhooks"][0]["matchConditions"][0]["expression"],
            "request.userInfo.username in ['system:node:node-a', 'system:node:node-b']",
            "from 1.30 the API server calls the guard only for the armed nodes"
        );
    }

    #[test]
    fn node_names_are_checked_before_they_enter_an_expression() {
        assert!(valid_node_name("k8s-lab.local"));
        for bad in ["", "a'b", "A", "a b", "-a", "a]", &"a".repeat(254)] {
            assert!(!valid_node_name(bad), "{bad:?} is refused");
        }
    }
}
