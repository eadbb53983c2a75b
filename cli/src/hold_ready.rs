//! `upgrade`'s hold of the node's Ready condition: the node's heartbeat in the API server
//! ([`nodeapi::heartbeat`]) behind the library's [`NodeHeartbeat`].

use std::time::Duration;

use nodeapi::{NodeApi, NodeLease, Renewal};
use rehash::upgrade::{Beat, GoOn, NodeHeartbeat};

/// How the heartbeat is renewed (`--hold-ready-via`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Via {
    /// The node's Lease when it has one, else its Ready condition.
    Auto,
    /// The Lease in kube-node-lease (node leases: on by default from 1.14, GA in 1.17).
    Lease,
    /// The Ready condition's lastHeartbeatTime (a cluster without node leases).
    NodeStatus,
}

/// The node's Lease, renewed conditionally on its resourceVersion.
#[derive(Debug)]
pub struct LeaseHeartbeat {
    api: NodeApi,
    node: String,
    /// The lease as this holder last wrote it (or first read it).
    last: NodeLease,
    /// Whether this holder has written it: before that, what is there is the old kubelet's
    /// last word (it may renew until it stops), read again at the first renewal.
    written: bool,
}

impl NodeHeartbeat for LeaseHeartbeat {
    fn mechanism(&self) -> &'static str {
        "lease"
    }
    fn describe(&self) -> String {
        format!(
            "lease {}/{} as {}",
            nodeapi::heartbeat::NODE_LEASE_NAMESPACE,
            self.node,
            self.api.identity()
        )
    }
    fn interval(&self) -> Duration {
        self.last.renew_interval()
    }
    fn check(&mut self) -> Result<(), String> {
        match self
            .api
            .renew_node_lease(&self.node, &self.last, true, None)
        {
            Ok(_) => Ok(()),
            Err(e) => Err(e.to_string()),
        }
    }
    fn beat(&mut self, go_on: GoOn<'_>) -> Result<Beat, String> {
        if !self.written {
            self.reread(go_on)?;
        }
        match self
            .api
            .renew_node_lease(&self.node, &self.last, false, Some(go_on))
            .map_err(|e| e.to_string())?
        {
            Renewal::Renewed(l) => {
                let t = l.renew_time.clone();
                self.last = l;
                self.written = true;
                Ok(Beat::Renewed(t))
            }
            Renewal::Conflict => Ok(Beat::WrittenByOther(self.who(go_on)?)),
        }
    }
    fn written_by_other(&mut self, go_on: GoOn<'_>) -> Result<Option<String>, String> {
        let now = self.current(go_on)?;
        Ok((now.resource_version != self.last.resource_version).then(|| describe_write(&now)))
    }
}

fn describe_write(l: &NodeLease) -> String {
    format!(
        "renewTime {} by {}, resourceVersion {}",
        l.renew_time, l.holder_identity, l.resource_version
    )
}

impl LeaseHeartbeat {
    /// The lease as the API server has it now.
    fn current(&self, go_on: GoOn<'_>) -> Result<NodeLease, String> {
        self.api
            .node_lease(&self.node, Some(go_on))
            .map_err(|e| e.to_string())?
            .ok_or_else(|| "the lease is gone".to_string())
    }
    fn reread(&mut self, go_on: GoOn<'_>) -> Result<(), String> {
        self.last = self.current(go_on)?;
        Ok(())
    }
    fn who(&self, go_on: GoOn<'_>) -> Result<String, String> {
        Ok(describe_write(&self.current(go_on)?))
    }
}

/// The Ready condition's lastHeartbeatTime, for clusters without node leases.
#[derive(Debug)]
pub struct StatusHeartbeat {
    api: NodeApi,
    node: String,
    /// The lastHeartbeatTime this holder last wrote (or first read).
    last: String,
}

impl NodeHeartbeat for StatusHeartbeat {
    fn mechanism(&self) -> &'static str {
        "node-status"
    }
    fn describe(&self) -> String {
        format!(
            "Ready condition's lastHeartbeatTime of node {} as {}",
            self.node,
            self.api.identity()
        )
    }
    fn interval(&self) -> Duration {
        // the kubelet's nodeStatusUpdateFrequency
        Duration::from_secs(10)
    }
    fn check(&mut self) -> Result<(), String> {
        self.api
            .beat_ready(&self.node, true, None)
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
    fn beat(&mut self, go_on: GoOn<'_>) -> Result<Beat, String> {
        if let Some(who) = self.written_by_other(go_on)? {
            return Ok(Beat::WrittenByOther(who));
        }
        let t = self
            .api
            .beat_ready(&self.node, false, Some(go_on))
            .map_err(|e| e.to_string())?;
        self.last = t.clone();
        Ok(Beat::Renewed(t))
    }
    fn written_by_other(&mut self, go_on: GoOn<'_>) -> Result<Option<String>, String> {
        if self.last.is_empty() {
            return Ok(None);
        }
        let (_, now) = self
            .api
            .ready_heartbeat(&self.node, Some(go_on))
            .map_err(|e| e.to_string())?;
        Ok((now != self.last).then(|| format!("lastHeartbeatTime {now}")))
    }
}

/// The heartbeat to hold the node with: its Lease, or its Ready condition. Refused (a
/// sentence) when the node is not Ready now: holding would keep a broken node's pods in the
/// endpoints.
pub fn heartbeat(api: NodeApi, node: &str, via: Via) -> Result<Box<dyn NodeHeartbeat>, String> {
    let (ready, _) = api.ready_heartbeat(node, None).map_err(|e| e.to_string())?;
    if !ready {
        return Err(format!(
            "node {node} is not Ready now: holding it Ready would hide that (--no-hold-ready)"
        ));
    }
    let lease = match via {
        Via::NodeStatus => None,
        Via::Auto | Via::Lease => api.node_lease(node, None).map_err(|e| e.to_string())?,
    };
    match (lease, via) {
        (Some(last), _) => Ok(Box::new(LeaseHeartbeat {
            api,
            node: node.to_string(),
            last,
            written: false,
        })),
        (None, Via::Lease) => Err(format!(
            "node {node} has no lease in {} (--hold-ready-via node-status)",
            nodeapi::heartbeat::NODE_LEASE_NAMESPACE
        )),
        (None, _) => Ok(Box::new(StatusHeartbeat {
            api,
            node: node.to_string(),
            last: String::new(),
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;
    use testtools::apiserver::{status, FakeApi, Reply, Request};

    /// A node-1 that is Ready and has a lease, whose lease renewals get `put`.
    fn server(put: impl Fn() -> Reply + Send + Sync + 'static) -> FakeApi {
        FakeApi::start("node-1", move |r: &Request| {
            match (r.method.as_str(), r.path.as_str()) {
                ("GET", "/api/v1/nodes/node-1") => Reply::Json(
                    200,
                    serde_json::json!({"kind": "Node", "metadata": {"name": "node-1"}, "status": {"conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-12-05T10:00:00Z"}]}}).to_string(),
                ),
                ("GET", p) if p.contains("/leases/node-1") => Reply::Json(
                    200,
                    serde_json::json!({"kind": "Lease", "apiVersion": "coordination.k8s.io/v1", "metadata": {"name": "node-1", "resourceVersion": "7"}, "spec": {"holderIdentity": "node-1", "leaseDurationSeconds": 40, "renewTime": "2026-12-05T10:00:00.000000Z"}}).to_string(),
                ),
                ("PUT", _) => put(),
                _ => Reply::Json(404, status(404, "not found")),
            }
        })
    }

    fn lease_heartbeat(api: &FakeApi, dir: &tempfile::TempDir) -> Box<dyn NodeHeartbeat> {
        let kc = nodeapi::Kubeconfig::load(&api.kubeconfig(dir.path(), None, None), None).unwrap();
        let api = NodeApi::connect(&kc, nodeapi::Options::default()).unwrap();
        heartbeat(api, "node-1", Via::Lease).unwrap()
    }

    fn puts(api: &FakeApi) -> Vec<Request> {
        api.requests()
            .into_iter()
            .filter(|r| r.method == "PUT")
            .collect()
    }

    /// Issue 51, item 4: a renewal answered 503 + Retry-After is not tried again once the
    /// hold's conditions fail (a watched container died meanwhile).
    #[test]
    fn a_failed_renewal_is_not_retried_after_the_holds_conditions_fail() {
        let api = server(|| {
            Reply::WithHeaders(
                503,
                vec![("retry-after".into(), "4".into())],
                status(503, "overloaded"),
            )
        });
        let dir = tempfile::tempdir().unwrap();
        let mut hb = lease_heartbeat(&api, &dir);
        let t0 = Instant::now();
        let died = Duration::from_millis(300);
        let go_on = || -> Result<Duration, String> {
            if t0.elapsed() > died {
                Err("container web/app died".into())
            } else {
                Ok(Duration::from_secs(300))
            }
        };
        let e = hb.beat(&go_on).unwrap_err();
        assert!(
            e.contains("container web/app died"),
            "the renewal stops with the hold's reason: {e}"
        );
        let puts = puts(&api);
        assert_eq!(
            puts.len(),
            1,
            "one renewal sent, none retried after the container died"
        );
        assert!(
            puts.iter().all(|r| r.at.duration_since(t0) < died),
            "no renewal was sent after the container died"
        );
    }

    /// Issue 51, item 5: a renewal never answered is abandoned when the run ends.
    #[test]
    fn a_renewal_never_answered_is_abandoned_when_the_run_ends() {
        let api = server(|| Reply::Silent(Duration::from_secs(60)));
        let dir = tempfile::tempdir().unwrap();
        let mut hb = lease_heartbeat(&api, &dir);
        let t0 = Instant::now();
        let go_on = || -> Result<Duration, String> {
            if t0.elapsed() > Duration::from_millis(300) {
                Err("upgrade returned".into())
            } else {
                Ok(Duration::from_secs(300))
            }
        };
        hb.beat(&go_on).unwrap_err();
        assert!(
            t0.elapsed() < Duration::from_millis(1_000),
            "the stuck renewal returned within a guard step of the run's end: {:?}",
            t0.elapsed()
        );
        assert_eq!(puts(&api).len(), 1, "the renewal was sent once");
    }
}
