//! The target kubelet's admission of the node's pods, predicted (issue 52).
//!
//! A restarted kubelet admits every running pod again — `HandlePodAdditions` sorts them by
//! creation time and calls `canAdmitPod` on each against the pods admitted before it — and
//! rejects (fails) a pod that no longer fits, whatever its containers' hashes say: keeping the
//! hash then keeps nothing. This module replays the predicates of the kubelet's
//! `predicateAdmitHandler.Admit` (pkg/kubelet/lifecycle/predicate.go) on the Node object as
//! the API server holds it, which is what the kubelet's node lister hands to admission
//! (`getNodeAnyWay`, pkg/kubelet/kubelet_getters.go, 1.14–1.37).
//!
//! Replayed, in the kubelet's order, with the version ranges the sources in the Go module
//! cache show:
//! - the OS checks `rejectPodAdmissionBasedOnOSSelector` (the pod's *label*
//!   `kubernetes.io/os` against the node's, which the kubelet takes as `linux` when missing or
//!   different) and `rejectPodAdmissionBasedOnOSField` (`spec.os.name`): 1.23+;
//! - requests against allocatable (`noderesources.Fits`; 1.14–1.17 `PodFitsResources`):
//!   the pod count against `allocatable.pods`, then cpu, memory, ephemeral-storage and every
//!   scalar resource, each pod's request computed as `resource.PodRequests` does (regular
//!   containers and sidecars summed, the largest init container step, plus `overhead`), and
//!   extended resources the node does not list dropped from regular containers
//!   (`removeMissingExtendedResources`);
//! - `spec.nodeSelector` and required node affinity against the node's labels and name
//!   (`GetRequiredNodeAffinity(pod).Match`; 1.14–1.17 `PodMatchNodeSelector`);
//! - `spec.nodeName` (`nodename.Fits`; 1.14–1.17 `PodFitsHost`);
//! - host ports against the pods admitted before (`nodeports.Fits`; restartable init
//!   containers' ports count from 1.33, `schedutil.GetHostPorts`);
//! - untolerated `NoExecute` taints, static pods exempt (`generalFilter`, 1.24+).
//!
//! A critical pod (a static pod, or priority ≥ 2,000,000,000) that fails on resources alone
//! is not rejected: the kubelet evicts lower-priority pods to make room
//! (`CriticalPodAdmissionHandler`, pkg/kubelet/preemption/preemption.go); that is said as a
//! `warn`. After the predicates, from 1.36, the node's declared features
//! ([`crate::declared_features`]: the declared-features admit handler comes after the
//! predicate handler, so a pod both reject is rejected for the predicate). Not replayed: device
//! plugin resources re-registered after the restart (`pluginResourceUpdateFunc`),
//! `SupplementalGroupsPolicy` (1.33+), and the sysctl and AppArmor admit handlers. The
//! allocatable admitted against is the Node's `status.allocatable`, or what the new kubelet's
//! configuration gives when the plan recomputes it ([`crate::allocatable`]): the kubelet's
//! first node status update, which writes it, goes off before its sync loop admits the pods.

use crate::declared_features::{self, NodeFeatures, PodNeeds};
use hashcompat::KubeletVersion;
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use storepatch::Hazard;

/// The hazard of a pod the target kubelet rejects at admission.
pub const REJECTED: &str = "kubelet-rejects-pod-at-admission";
/// The hazard of a critical pod that fits only once the kubelet evicts others.
pub const PREEMPTS: &str = "kubelet-preempts-for-critical-pod";
/// The hazard of a plan made without a Node object: admission is not predicted.
pub const UNKNOWN: &str = "admission-not-predicted";
/// The hazard of a pod that needs a feature the target kubelet declares only if its runtime
/// supports it, which the Node does not say.
pub const FEATURE_UNDECIDED: &str = "declared-feature-undecided";

/// A pod is critical from this priority on (`scheduling.SystemCriticalPriority`).
const SYSTEM_CRITICAL_PRIORITY: i64 = 2_000_000_000;

/// The Node object, as `kubectl get node NAME -o json` (or the API server) serves it: the
/// parts admission reads.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct NodeObject {
    /// `metadata`.
    #[serde(default)]
    pub metadata: NodeMeta,
    /// `spec`.
    #[serde(default)]
    pub spec: NodeSpec,
    /// `status`.
    #[serde(default)]
    pub status: NodeStatus,
}

/// A Node's `metadata`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct NodeMeta {
    /// `name`.
    #[serde(default)]
    pub name: String,
    /// `labels`: what node affinity and selectors match.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
}

/// A Node's `spec`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct NodeSpec {
    /// `taints`.
    #[serde(default)]
    pub taints: Vec<Taint>,
}

/// A Node's `status`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct NodeStatus {
    /// `allocatable`: what admission fits requests into.
    #[serde(default)]
    pub allocatable: BTreeMap<String, String>,
    /// `capacity`: what the target kubelet's allocatable is computed from
    /// ([`crate::allocatable`]).
    #[serde(default)]
    pub capacity: BTreeMap<String, String>,
    /// `declaredFeatures` (1.36+): what the running kubelet declares, which tells what its
    /// runtime supports ([`crate::declared_features`]).
    #[serde(default, rename = "declaredFeatures")]
    pub declared_features: Vec<String>,
}

/// One taint of a Node.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Taint {
    /// `key`.
    #[serde(default)]
    pub key: String,
    /// `value`.
    #[serde(default)]
    pub value: String,
    /// `effect`: only `NoExecute` matters to the kubelet.
    #[serde(default)]
    pub effect: String,
}

impl NodeObject {
    /// Parses a Node object (`kind: Node`, JSON).
    pub fn parse(bytes: &[u8]) -> Result<NodeObject, String> {
        #[derive(Deserialize)]
        struct Kind {
            #[serde(default)]
            kind: String,
        }
        let kind: Kind = serde_json::from_slice(bytes).map_err(|e| format!("not JSON: {e}"))?;
        if kind.kind != "Node" {
            return Err(format!(
                "kind {:?} is not a Node (give `kubectl get node NAME -o json`)",
                kind.kind
            ));
        }
        serde_json::from_slice(bytes).map_err(|e| format!("not a Node: {e}"))
    }
}

/// The parts of a pod admission reads.
#[derive(Debug, Default, Deserialize)]
struct PodIn {
    #[serde(default)]
    metadata: PodMeta,
    #[serde(default)]
    spec: PodSpec,
    #[serde(default)]
    status: PodStatus,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodMeta {
    #[serde(default)]
    name: String,
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    uid: String,
    #[serde(default)]
    creation_timestamp: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PodSpec {
    #[serde(default)]
    node_name: String,
    #[serde(default)]
    node_selector: BTreeMap<String, String>,
    #[serde(default)]
    affinity: Option<Affinity>,
    #[serde(default)]
    tolerations: Vec<Toleration>,
    #[serde(default)]
    containers: Vec<Container>,
    #[serde(default)]
    init_containers: Vec<Container>,
    #[serde(default)]
    overhead: BTreeMap<String, String>,
    #[serde(default)]
    os: Option<PodOs>,
    #[serde(default)]
    priority: Option<i64>,
    #[serde(default)]
    host_network: bool,
    #[serde(default)]
    host_users: Option<bool>,
    #[serde(default)]
    ephemeral_containers: Vec<Container>,
}

#[derive(Debug, Default, Deserialize)]
struct PodStatus {
    #[serde(default)]
    phase: String,
}

#[derive(Debug, Default, Deserialize)]
struct PodOs {
    #[serde(default)]
    name: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Affinity {
    #[serde(default)]
    node_affinity: Option<NodeAffinity>,
}

#[derive(Debug, Default, Deserialize)]
struct NodeAffinity {
    #[serde(default, rename = "requiredDuringSchedulingIgnoredDuringExecution")]
    required: Option<NodeSelector>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct NodeSelector {
    #[serde(default)]
    node_selector_terms: Vec<Term>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Term {
    #[serde(default)]
    match_expressions: Vec<Requirement>,
    #[serde(default)]
    match_fields: Vec<Requirement>,
}

#[derive(Debug, Default, Deserialize)]
struct Requirement {
    #[serde(default)]
    key: String,
    #[serde(default)]
    operator: String,
    #[serde(default)]
    values: Vec<String>,
}

#[derive(Debug, Default, Deserialize)]
struct Toleration {
    #[serde(default)]
    key: String,
    #[serde(default)]
    operator: String,
    #[serde(default)]
    value: String,
    #[serde(default)]
    effect: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Container {
    #[serde(default)]
    resources: Resources,
    #[serde(default)]
    ports: Vec<Port>,
    #[serde(default)]
    restart_policy: Option<String>,
    #[serde(default)]
    restart_policy_rules: Vec<RestartRule>,
    #[serde(default)]
    volume_mounts: Vec<VolumeMount>,
}

#[derive(Debug, Default, Deserialize)]
struct RestartRule {
    #[serde(default)]
    action: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct VolumeMount {
    #[serde(default)]
    bind_mount_options: Vec<String>,
}

/// What the pod's spec says of the node features it needs (`InferForScheduling`).
fn pod_needs(spec: &PodSpec) -> PodNeeds {
    let all = || {
        spec.containers
            .iter()
            .chain(&spec.init_containers)
            .chain(&spec.ephemeral_containers)
    };
    PodNeeds {
        // ephemeral containers carry no restart rules (the feature reads containers and init
        // containers only)
        restart_all_containers: spec
            .containers
            .iter()
            .chain(&spec.init_containers)
            .flat_map(|c| &c.restart_policy_rules)
            .any(|r| r.action == "RestartAllContainers"),
        host_network_user_namespace: spec.host_network && spec.host_users == Some(false),
        bind_mount_options: all()
            .flat_map(|c| &c.volume_mounts)
            .any(|m| !m.bind_mount_options.is_empty()),
    }
}

#[derive(Debug, Default, Deserialize)]
struct Resources {
    #[serde(default)]
    requests: BTreeMap<String, String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Port {
    #[serde(default)]
    host_port: i64,
    #[serde(default, rename = "hostIP")]
    host_ip: String,
    #[serde(default)]
    protocol: String,
}

/// The target kubelet's verdict on one pod it rejects, in its own words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    /// `namespace/name`.
    pub pod: String,
    /// The pod's `metadata.uid` (for a mirror pod: the static pod's, which its runtime
    /// containers carry).
    pub uid: String,
    /// The pod status reason the kubelet sets (`NodeAffinity`, `OutOfcpu`, …).
    pub reason: String,
    /// The message it sets, as that version words it.
    pub message: String,
}

/// What admission decides of the node's pods.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Admission {
    /// The pods the kubelet rejects, in admission order.
    pub rejected: Vec<Rejection>,
    /// Critical pods it admits only by evicting others (`namespace/name`, reason).
    pub preempting: Vec<(String, String)>,
    /// Pods that need features the kubelet declares only if its runtime supports them
    /// (`namespace/name`, the features).
    pub undecided: Vec<(String, Vec<&'static str>)>,
}

/// A request or an allocatable amount in the unit the kubelet compares (cpu in millicores,
/// everything else in whole units, each rounded up as `MilliValue`/`Value` round).
fn amount(resource: &str, q: &str) -> Option<i128> {
    let millis = parse_quantity_millis(q)?;
    Some(if resource == "cpu" {
        millis
    } else {
        // Value() rounds up
        (millis + 999).div_euclid(1000)
    })
}

/// A Kubernetes quantity (`500m`, `1.5Gi`, `2e3`, `128974848`) times 1000, rounded up.
pub fn parse_quantity_millis(q: &str) -> Option<i128> {
    let q = q.trim();
    let (sign, q) = match q.strip_prefix('-') {
        Some(rest) => (-1, rest),
        None => (1, q.strip_prefix('+').unwrap_or(q)),
    };
    let end = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(q.len());
    let (num, suffix) = q.split_at(end);
    if num.is_empty() || num == "." {
        return None;
    }
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    let digits: i128 = format!("{int}{frac}").parse().ok()?;
    let scale = frac.len() as i32;
    // (binary power of two, decimal power of ten)
    let (bin, dec): (u32, i32) = match suffix {
        "" => (0, 0),
        "Ki" => (10, 0),
        "Mi" => (20, 0),
        "Gi" => (30, 0),
        "Ti" => (40, 0),
        "Pi" => (50, 0),
        "Ei" => (60, 0),
        "n" => (0, -9),
        "u" => (0, -6),
        "m" => (0, -3),
        "k" => (0, 3),
        "M" => (0, 6),
        "G" => (0, 9),
        "T" => (0, 12),
        "P" => (0, 15),
        "E" => (0, 18),
        s if s.starts_with(['e', 'E']) => (0, s[1..].parse().ok()?),
        _ => return None,
    };
    let exp = dec + 3 - scale;
    let base = digits.checked_mul(1i128.checked_shl(bin)?)?;
    let v = if exp >= 0 {
        base.checked_mul(10i128.checked_pow(exp as u32)?)?
    } else {
        let d = 10i128.checked_pow((-exp) as u32)?;
        (base + d - 1) / d
    };
    Some(sign * v)
}

/// `v1helper.IsExtendedResourceName`: a domain-prefixed name outside `kubernetes.io/`, not a
/// quota's `requests.` name.
fn is_extended(name: &str) -> bool {
    name.contains('/') && !name.contains("kubernetes.io/") && !name.starts_with("requests.")
}

type Amounts = BTreeMap<String, i128>;

fn add(into: &mut Amounts, from: &Amounts) {
    for (k, v) in from {
        *into.entry(k.clone()).or_default() += v;
    }
}

fn max_into(into: &mut Amounts, from: &Amounts) {
    for (k, v) in from {
        let e = into.entry(k.clone()).or_default();
        *e = (*e).max(*v);
    }
}

fn amounts(list: &BTreeMap<String, String>, keep: &dyn Fn(&str) -> bool) -> Amounts {
    list.iter()
        .filter(|(k, _)| keep(k))
        .filter_map(|(k, v)| Some((k.clone(), amount(k, v)?)))
        .collect()
}

/// `resource.PodRequests` (k8s.io/component-helpers/resource, 1.28+; the sidecar terms are
/// empty for the pods of older versions, which have no restartable init containers): regular
/// containers and sidecars summed; each init container with the sidecars started before it;
/// the larger of the two; plus the pod's overhead. Extended resources the node does not list
/// are dropped from regular containers, as `removeMissingExtendedResources` does.
fn pod_requests(spec: &PodSpec, node_has: &dyn Fn(&str) -> bool) -> Amounts {
    let mut reqs = Amounts::new();
    for c in &spec.containers {
        add(
            &mut reqs,
            &amounts(&c.resources.requests, &|k| !is_extended(k) || node_has(k)),
        );
    }
    let mut sidecars = Amounts::new();
    let mut init = Amounts::new();
    for c in &spec.init_containers {
        let own = amounts(&c.resources.requests, &|_| true);
        let step = if c.restart_policy.as_deref() == Some("Always") {
            add(&mut reqs, &own);
            add(&mut sidecars, &own);
            sidecars.clone()
        } else {
            let mut s = own;
            add(&mut s, &sidecars);
            s
        };
        max_into(&mut init, &step);
    }
    max_into(&mut reqs, &init);
    add(&mut reqs, &amounts(&spec.overhead, &|_| true));
    reqs
}

/// `NodeSelectorRequirement` against a value (`nodeSelectorRequirementsAsSelector`): an
/// operator it does not know, or a `Gt`/`Lt` value that is not an integer, matches nothing
/// (the kubelet ignores the parse error and the term fails).
fn requirement_matches(r: &Requirement, value: Option<&str>) -> bool {
    match r.operator.as_str() {
        "In" => value.is_some_and(|v| r.values.iter().any(|x| x == v)),
        "NotIn" => value.is_none_or(|v| !r.values.iter().any(|x| x == v)),
        "Exists" => value.is_some(),
        "DoesNotExist" => value.is_none(),
        "Gt" | "Lt" => {
            let (Some(v), [bound]) = (value, r.values.as_slice()) else {
                return false;
            };
            match (v.parse::<i64>(), bound.parse::<i64>()) {
                (Ok(v), Ok(b)) if r.operator == "Gt" => v > b,
                (Ok(v), Ok(b)) => v < b,
                _ => false,
            }
        }
        _ => false,
    }
}

/// `GetRequiredNodeAffinity(pod).Match(node)` (k8s.io/component-helpers/scheduling/corev1/
/// nodeaffinity): every `nodeSelector` pair, and one of the required terms; a term without
/// requirements matches nothing, and `matchFields` knows `metadata.name` alone.
fn affinity_matches(spec: &PodSpec, node: &NodeObject) -> bool {
    let labels = &node.metadata.labels;
    if !spec
        .node_selector
        .iter()
        .all(|(k, v)| labels.get(k) == Some(v))
    {
        return false;
    }
    let Some(required) = spec
        .affinity
        .as_ref()
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|n| n.required.as_ref())
    else {
        return true;
    };
    required.node_selector_terms.iter().any(|t| {
        if t.match_expressions.is_empty() && t.match_fields.is_empty() {
            return false;
        }
        t.match_expressions
            .iter()
            .all(|r| requirement_matches(r, labels.get(&r.key).map(String::as_str)))
            && t.match_fields.iter().all(|r| {
                r.key == "metadata.name"
                    && requirement_matches(r, Some(node.metadata.name.as_str()))
            })
    })
}

/// `v1helper.TolerationsTolerateTaint` for one taint.
fn tolerates(t: &Toleration, taint: &Taint) -> bool {
    if !t.effect.is_empty() && t.effect != taint.effect {
        return false;
    }
    if !t.key.is_empty() && t.key != taint.key {
        return false;
    }
    match t.operator.as_str() {
        "Exists" => true,
        "" | "Equal" => t.value == taint.value,
        _ => false,
    }
}

/// A host port in use: (host IP, protocol, port), defaults filled as `HostPortInfo` does.
type HostPort = (String, String, i64);

fn host_ports(spec: &PodSpec, to: KubeletVersion) -> Vec<HostPort> {
    // schedutil.GetHostPorts counts restartable init containers from 1.33 on
    let sidecars = spec
        .init_containers
        .iter()
        .filter(|c| to.minor() >= 33 && c.restart_policy.as_deref() == Some("Always"));
    spec.containers
        .iter()
        .chain(sidecars)
        .flat_map(|c| &c.ports)
        .filter(|p| p.host_port > 0)
        .map(|p| {
            let ip = if p.host_ip.is_empty() {
                "0.0.0.0".to_string()
            } else {
                p.host_ip.clone()
            };
            let proto = if p.protocol.is_empty() {
                "TCP".to_string()
            } else {
                p.protocol.clone()
            };
            (ip, proto, p.host_port)
        })
        .collect()
}

/// `HostPortInfo.CheckConflict`: the same protocol and port on the same IP, or on any IP
/// when either side is `0.0.0.0`.
fn port_conflicts(used: &BTreeSet<HostPort>, (ip, proto, port): &HostPort) -> bool {
    used.iter().any(|(uip, uproto, uport)| {
        uport == port && uproto == proto && (uip == ip || uip == "0.0.0.0" || ip == "0.0.0.0")
    })
}

/// The name and description of a predicate failure, as version `to` words it.
enum Predicate {
    Affinity,
    NodeName,
    Ports,
    Taints,
}

impl Predicate {
    fn words(&self, to: KubeletVersion) -> (&'static str, &'static str) {
        let framework = to.minor() >= 18;
        match self {
            // 1.14–1.17: predicates.ErrNodeSelectorNotMatch; 1.18–1.19 the nodeaffinity
            // plugin's ErrReason; 1.20+ its ErrReasonPod
            Predicate::Affinity if !framework => {
                ("MatchNodeSelector", "node(s) didn't match node selector")
            }
            Predicate::Affinity if to.minor() < 20 => {
                ("NodeAffinity", "node(s) didn't match node selector")
            }
            Predicate::Affinity => (
                "NodeAffinity",
                "node(s) didn't match Pod's node affinity/selector",
            ),
            Predicate::NodeName if !framework => {
                ("HostName", "node(s) didn't match the requested hostname")
            }
            Predicate::NodeName if to.minor() < 21 => {
                ("NodeName", "node(s) didn't match the requested hostname")
            }
            Predicate::NodeName => ("NodeName", "node(s) didn't match the requested node name"),
            Predicate::Ports if !framework => (
                "PodFitsHostPorts",
                "node(s) didn't have free ports for the requested pod ports",
            ),
            Predicate::Ports => (
                "NodePorts",
                "node(s) didn't have free ports for the requested pod ports",
            ),
            Predicate::Taints => (
                "TaintToleration",
                "node(s) had taints that the pod didn't tolerate",
            ),
        }
    }

    /// `PredicateFailureError.Error()`: the description joined from 1.31 on.
    fn failure(&self, to: KubeletVersion) -> (String, String) {
        let (name, desc) = self.words(to);
        let message = if to.minor() >= 31 {
            format!("Predicate {name} failed: {desc}")
        } else {
            format!("Predicate {name} failed")
        };
        (name.to_string(), message)
    }
}

/// One admission failure: (reason, message), and whether it is about resources.
type Failure = (String, String, bool);

/// The running pods of `pods_json` in the order the kubelet admits them, each with its
/// `metadata.uid` or, for a mirror pod, the static pod's UID.
fn admission_order(pods: &[&[u8]]) -> Vec<PodIn> {
    let mut out: Vec<PodIn> = pods
        .iter()
        .filter_map(|raw| serde_json::from_slice::<PodIn>(raw).ok())
        // terminal pods are neither admitted nor counted (filterOutInactivePods)
        .filter(|p| !matches!(p.status.phase.as_str(), "Succeeded" | "Failed"))
        .collect();
    // PodsByCreationTime; a static pod comes from its file source before the API server's
    // pods (its creation time is the kubelet's own)
    out.sort_by(|a, b| {
        let key = |p: &PodIn| {
            (
                !is_static(p),
                p.metadata.creation_timestamp.clone().unwrap_or_default(),
            )
        };
        key(a).cmp(&key(b))
    });
    out
}

/// `kubetypes.IsStaticPod`: a pod from a source other than the API server; its mirror pod
/// carries the source annotation and the mirror annotation.
fn is_static(p: &PodIn) -> bool {
    let a = &p.metadata.annotations;
    a.contains_key(crate::pods::MIRROR_ANNOTATION)
        || a.get("kubernetes.io/config.source")
            .is_some_and(|s| s != "api")
}

fn pod_uid(p: &PodIn) -> String {
    p.metadata
        .annotations
        .get(crate::pods::MIRROR_ANNOTATION)
        .filter(|u| !u.is_empty())
        .unwrap_or(&p.metadata.uid)
        .clone()
}

/// The target kubelet `to`'s admission of `pods` (each a Pod's JSON, as served) on `node`,
/// on a Linux node, with no declared-features admit handler (before 1.36).
pub fn predict(pods: &[&[u8]], node: &NodeObject, to: KubeletVersion) -> Admission {
    predict_with(pods, node, to, None)
}

/// [`predict`], with the features the target kubelet declares when it registers the
/// declared-features admit handler ([`declared_features::target`]): it runs after the
/// predicate handler, so a pod the predicates reject is rejected for that.
pub fn predict_with(
    pods: &[&[u8]],
    node: &NodeObject,
    to: KubeletVersion,
    features: Option<&NodeFeatures>,
) -> Admission {
    let allocatable: Amounts = amounts(&node.status.allocatable, &|_| true);
    let knows_allocatable = !node.status.allocatable.is_empty();
    let node_has = |k: &str| allocatable.contains_key(k);
    let mut requested = Amounts::new();
    let mut admitted = 0i128;
    let mut ports: BTreeSet<HostPort> = BTreeSet::new();
    let mut out = Admission::default();
    for pod in admission_order(pods) {
        let name = format!("{}/{}", pod.metadata.namespace, pod.metadata.name);
        let spec = &pod.spec;
        let mut failures: Vec<Failure> = Vec::new();
        if to.minor() >= 23 {
            // rejectPodAdmissionBasedOnOSSelector reads the pod's labels, not its
            // nodeSelector, and takes the node's label as runtime.GOOS when it is missing
            // or differs
            if pod
                .metadata
                .labels
                .get("kubernetes.io/os")
                .is_some_and(|os| os != "linux")
            {
                failures.push((
                    "PodOSSelectorNodeLabelDoesNotMatch".into(),
                    "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label"
                        .into(),
                    false,
                ));
            } else if spec.os.as_ref().is_some_and(|os| os.name != "linux") {
                failures.push((
                    "PodOSNotSupported".into(),
                    "Failed to admit pod as the OS field doesn't match node OS".into(),
                    false,
                ));
            }
        }
        let reqs = pod_requests(spec, &node_has);
        if failures.is_empty() {
            let mut insufficient = |resource: &str, want: i128, used: i128, cap: i128| {
                failures.push((
                    format!("OutOf{resource}"),
                    format!("Node didn't have enough resource: {resource}, requested: {want}, used: {used}, capacity: {cap}"),
                    true,
                ));
            };
            // A Node with no `status.allocatable` at all was never written by a kubelet (every
            // kubelet reports it from its first status): what it fits is unknown, so requests
            // are not judged rather than judged against nothing
            let allowed = allocatable.get("pods").copied().unwrap_or(0);
            if knows_allocatable && admitted + 1 > allowed {
                insufficient("pods", 1, admitted, allowed);
            }
            if knows_allocatable && reqs.values().any(|v| *v != 0) {
                let named = ["cpu", "memory", "ephemeral-storage"];
                let scalars = reqs
                    .keys()
                    .filter(|k| !named.contains(&k.as_str()) && k.as_str() != "pods");
                for r in named.iter().copied().chain(scalars.map(String::as_str)) {
                    let want = reqs.get(r).copied().unwrap_or(0);
                    let cap = allocatable.get(r).copied().unwrap_or(0);
                    let used = requested.get(r).copied().unwrap_or(0);
                    if want > 0 && want > cap - used {
                        insufficient(r, want, used, cap);
                    }
                }
            }
            if !affinity_matches(spec, node) {
                let (r, m) = Predicate::Affinity.failure(to);
                failures.push((r, m, false));
            }
            if !spec.node_name.is_empty() && spec.node_name != node.metadata.name {
                let (r, m) = Predicate::NodeName.failure(to);
                failures.push((r, m, false));
            }
            if host_ports(spec, to)
                .iter()
                .any(|p| port_conflicts(&ports, p))
            {
                let (r, m) = Predicate::Ports.failure(to);
                failures.push((r, m, false));
            }
            let untolerated = node.spec.taints.iter().any(|taint| {
                taint.effect == "NoExecute" && !spec.tolerations.iter().any(|t| tolerates(t, taint))
            });
            if to.minor() >= 24 && !is_static(&pod) && untolerated {
                let (r, m) = Predicate::Taints.failure(to);
                failures.push((r, m, false));
            }
        }
        let critical =
            is_static(&pod) || spec.priority.is_some_and(|p| p >= SYSTEM_CRITICAL_PRIORITY);
        if critical {
            // CriticalPodAdmissionHandler: the resource failures are answered by evicting
            // lower-priority pods, and only the others remain
            if let Some(first) = failures.iter().find(|f| f.2) {
                if failures.iter().all(|f| f.2) {
                    out.preempting.push((name.clone(), first.1.clone()));
                }
            }
            failures.retain(|f| !f.2);
        }
        if let (true, Some(declared)) = (failures.is_empty(), features) {
            match declared_features::verdict(to, declared, &pod_needs(spec)) {
                declared_features::Verdict::Admitted => {}
                declared_features::Verdict::Rejected(message) => {
                    failures.push((declared_features::REASON.into(), message, false))
                }
                declared_features::Verdict::Undecided(list) => {
                    out.undecided.push((name.clone(), list))
                }
            }
        }
        if let Some((reason, message, _)) = failures.into_iter().next() {
            // only the first failure is reported (predicateAdmitHandler.Admit)
            out.rejected.push(Rejection {
                pod: name,
                uid: pod_uid(&pod),
                reason,
                message,
            });
            continue;
        }
        admitted += 1;
        add(&mut requested, &reqs);
        ports.extend(host_ports(spec, to));
    }
    out
}

/// The hazards of `admission` for kubelet `to`: a `block` per rejected pod naming it and the
/// kubelet's reason (its containers restart however the hashes are rewritten), a `warn` per
/// critical pod the kubelet admits by evicting others.
pub fn hazards(admission: &Admission, to: KubeletVersion, node: &str) -> Vec<Hazard> {
    let mut out = Vec::new();
    for r in &admission.rejected {
        out.push(
            Hazard::block(
                REJECTED,
                format!(
                    "pod {}: kubelet {to} rejects it when it admits the node's pods again at its start ({}: {}), on node {node} as the API server describes it now: the pod fails and its containers are stopped whatever their hashes; fix the node or the pod before the window, or give --accept-restarts to go on knowing",
                    r.pod, r.reason, r.message
                ),
            )
            .reference("https://github.com/kubernetes/kubernetes/pull/127374"),
        );
    }
    for (pod, features) in &admission.undecided {
        out.push(Hazard::warn(
            FEATURE_UNDECIDED,
            format!(
                "pod {pod} needs {}: kubelet {to} declares a feature only when its gate is on and its runtime supports it, and node {node} does not declare it now; if the runtime does not, kubelet {to} rejects the pod at its start (PodFeatureUnsupported)",
                features.join(", ")
            ),
        ));
    }
    for (pod, why) in &admission.preempting {
        out.push(Hazard::warn(
            PREEMPTS,
            format!(
                "critical pod {pod} no longer fits node {node} ({why}): kubelet {to} admits it by evicting lower-priority pods, which then restart elsewhere"
            ),
        ));
    }
    out
}

#[cfg(test)]
mod tests;
