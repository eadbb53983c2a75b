//! The node's heartbeat, written with the node's own identity (issue 37): its Lease in
//! `kube-node-lease`, or, where the cluster has no node leases, the `lastHeartbeatTime` of its
//! Ready condition. The node lifecycle controller takes either as "the kubelet is alive"; the
//! Node authorizer lets `system:node:NAME` write both for its own node, and nothing else.
//!
//! These are the only writes of this crate, and they write nothing but a time: the holder
//! identity, the lease duration and every condition's status stay as the kubelet left them.

use serde_json::Value;

use crate::client::{percent, Call, Guard};
use crate::{Error, NodeApi};

/// The namespace of the node leases.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

/// The node's Lease as served.
#[derive(Debug, Clone)]
pub struct NodeLease {
    /// `spec.holderIdentity` (the kubelet writes the node's name).
    pub holder_identity: String,
    /// `spec.leaseDurationSeconds` (the kubelet's `nodeLeaseDurationSeconds`, 40 by default).
    pub duration_seconds: Option<u32>,
    /// `spec.renewTime`, as served (RFC 3339 with microseconds).
    pub renew_time: String,
    /// `metadata.resourceVersion`: any write of anybody changes it.
    pub resource_version: String,
    /// The object as served: a renewal sends it back with a new `renewTime` only.
    object: Value,
}

impl NodeLease {
    /// How often the kubelet renews it: a quarter of its duration (the kubelet's
    /// `renewInterval`), 10 s for the default 40 s.
    pub fn renew_interval(&self) -> std::time::Duration {
        std::time::Duration::from_millis(u64::from(self.duration_seconds.unwrap_or(40)) * 250)
    }

    fn from_json(text: &str) -> Result<NodeLease, String> {
        let object: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        if object["kind"] != "Lease" {
            return Err(format!("not a Lease (kind {})", object["kind"]));
        }
        let s = |p: &str| {
            object
                .pointer(p)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        Ok(NodeLease {
            holder_identity: s("/spec/holderIdentity"),
            duration_seconds: object
                .pointer("/spec/leaseDurationSeconds")
                .and_then(Value::as_u64)
                .and_then(|d| u32::try_from(d).ok()),
            renew_time: s("/spec/renewTime"),
            resource_version: s("/metadata/resourceVersion"),
            object,
        })
    }
}

/// What a renewal found.
#[derive(Debug, Clone)]
pub enum Renewal {
    /// Written: the lease as the API server now has it.
    Renewed(NodeLease),
    /// Somebody else wrote the lease since it was read (409 Conflict): nothing was written.
    Conflict,
}

/// `2026-12-05T10:30:00.123456Z`: a MicroTime, as the kubelet writes `renewTime`.
pub fn micro_time(t: std::time::SystemTime) -> String {
    let d = t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs() as i64;
    let day = crate::cert::format_time(secs); // "YYYY-MM-DD HH:MM:SS UTC"
    let (date, rest) = day.split_once(' ').unwrap_or((&day, ""));
    let clock = rest.trim_end_matches(" UTC");
    format!("{date}T{clock}.{:06}Z", d.subsec_micros())
}

impl NodeApi {
    fn own_only(&self, node: &str) -> Result<(), Error> {
        match self.own_node.as_deref() {
            Some(own) if own != node => Err(Error::NotThisNode {
                server: self.server.clone(),
                name: node.to_string(),
                own: own.to_string(),
            }),
            _ => Ok(()),
        }
    }

    /// One write; `dry_run`: authorized and admitted, nothing stored (`?dryRun=All`).
    #[allow(clippy::too_many_arguments)]
    fn write(
        &self,
        method: &'static str,
        path: &str,
        body: &[u8],
        content_type: &'static str,
        dry_run: bool,
        verb: &'static str,
        what: &str,
        guard: Option<Guard<'_>>,
    ) -> Result<String, Error> {
        let path = if dry_run {
            format!("{path}?dryRun=All")
        } else {
            path.to_string()
        };
        let call = Call {
            method,
            path: &path,
            body,
            content_type: Some(content_type),
        };
        self.send(call, verb, what, guard)
    }

    fn lease_path(node: &str) -> String {
        format!(
            "/apis/coordination.k8s.io/v1/namespaces/{NODE_LEASE_NAMESPACE}/leases/{}",
            percent(node)
        )
    }

    /// `GET` the node's Lease; `None` when there is none (404: a cluster without node leases,
    /// or a kubelet that never made one). `guard`: as for every call of the hold, asked before
    /// each attempt and while it runs ([`Guard`]).
    pub fn node_lease(
        &self,
        node: &str,
        guard: Option<Guard<'_>>,
    ) -> Result<Option<NodeLease>, Error> {
        self.own_only(node)?;
        let path = Self::lease_path(node);
        match self.send(
            Call::get(&path),
            "get",
            &format!("lease {NODE_LEASE_NAMESPACE}/{node}"),
            guard,
        ) {
            Ok(text) => NodeLease::from_json(&text)
                .map(Some)
                .map_err(|e| self.unexpected(&path, e)),
            Err(Error::Unexpected { what, .. }) if what.starts_with("404") => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `PUT` the lease back with `renewTime` now, nothing else changed; conditional on its
    /// resourceVersion, so a write of the kubelet since `lease` was read is never overwritten
    /// ([`Renewal::Conflict`]). `dry_run`: the API server authorizes and admits it but stores
    /// nothing (`?dryRun=All`): the preflight's proof that the renewals will be allowed.
    /// `guard`: asked before each attempt and while it runs ([`Guard`]): a renewal is neither
    /// sent nor retried once the hold's conditions no longer stand.
    pub fn renew_node_lease(
        &self,
        node: &str,
        lease: &NodeLease,
        dry_run: bool,
        guard: Option<Guard<'_>>,
    ) -> Result<Renewal, Error> {
        self.own_only(node)?;
        let mut object = lease.object.clone();
        object["spec"]["renewTime"] = Value::String(micro_time(std::time::SystemTime::now()));
        let body = serde_json::to_vec(&object).expect("a JSON value serializes");
        let path = Self::lease_path(node);
        let what = format!("lease {NODE_LEASE_NAMESPACE}/{node}");
        match self.write(
            "PUT",
            &path,
            &body,
            "application/json",
            dry_run,
            "update",
            &what,
            guard,
        ) {
            Ok(text) => NodeLease::from_json(&text)
                .map(Renewal::Renewed)
                .map_err(|e| self.unexpected(&path, e)),
            Err(Error::Unexpected { what, .. }) if what.starts_with("409") => Ok(Renewal::Conflict),
            Err(e) => Err(e),
        }
    }

    /// The `lastHeartbeatTime` of the node's Ready condition, and whether it is `True`.
    pub fn ready_heartbeat(
        &self,
        node: &str,
        guard: Option<Guard<'_>>,
    ) -> Result<(bool, String), Error> {
        self.own_only(node)?;
        let path = format!("/api/v1/nodes/{}", percent(node));
        let text = self.send(Call::get(&path), "get", &format!("node {node}"), guard)?;
        let v: Value = serde_json::from_str(&text)
            .map_err(|e| self.unexpected(&path, format!("not JSON: {e}")))?;
        let ready = v["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "Ready")
            .ok_or_else(|| self.unexpected(&path, "the node has no Ready condition".into()))?;
        Ok((
            ready["status"] == "True",
            ready["lastHeartbeatTime"]
                .as_str()
                .unwrap_or("")
                .to_string(),
        ))
    }

    /// Sets the Ready condition's `lastHeartbeatTime` to a second ago (a strategic merge patch of the
    /// node's status, keyed by the condition's type: its status, reason and message stay);
    /// returns the time written. For clusters without node leases. `guard`: as for
    /// [`NodeApi::renew_node_lease`].
    pub fn beat_ready(
        &self,
        node: &str,
        dry_run: bool,
        guard: Option<Guard<'_>>,
    ) -> Result<String, Error> {
        self.own_only(node)?;
        // metav1.Time: whole seconds. One second in the past on purpose: the controller takes
        // any change of the value as a heartbeat, and a kubelet on this node writes its own
        // "now", which is then always later than what this wrote, never equal to it: its
        // first status after its start is told from ours by the value alone.
        let now = micro_time(std::time::SystemTime::now() - std::time::Duration::from_secs(1));
        let now = format!("{}Z", &now[..19]);
        let body = serde_json::to_vec(&serde_json::json!({
            "status": {"conditions": [{"type": "Ready", "lastHeartbeatTime": now}]}
        }))
        .expect("a JSON value serializes");
        let path = format!("/api/v1/nodes/{}/status", percent(node));
        let what = format!("the status of node {node}");
        let ct = "application/strategic-merge-patch+json";
        self.write("PATCH", &path, &body, ct, dry_run, "patch", &what, guard)?;
        Ok(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn micro_time_is_rfc3339_with_microseconds() {
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_micros(1_796_465_461_000_042);
        assert_eq!(micro_time(t), "2026-12-05T10:11:01.000042Z");
    }

    #[test]
    fn a_lease_is_read_and_its_interval_is_a_quarter_of_its_duration() {
        let l = NodeLease::from_json(
            r#"{"kind":"Lease","apiVersion":"coordination.k8s.io/v1","metadata":{"name":"n1","resourceVersion":"77"},"spec":{"holderIdentity":"n1","leaseDurationSeconds":40,"renewTime":"2026-12-05T10:11:01.000042Z"}}"#,
        )
        .unwrap();
        assert_eq!(l.holder_identity, "n1");
        assert_eq!(l.resource_version, "77");
        assert_eq!(l.renew_interval(), std::time::Duration::from_secs(10));
        assert!(NodeLease::from_json(r#"{"kind":"Pod"}"#).is_err());
    }
}
