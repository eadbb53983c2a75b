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
