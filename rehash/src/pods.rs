//! The node's pods as `kubectl get pods -o json` serves them: the specs the upgraded kubelet
//! will hash, and the status that says which runtime container is which and whether it runs.

use hashcompat::{parse_json, parse_json_streaming, Node, NodeValue};
use std::collections::HashMap;

/// The mirror pod's annotation naming the static pod's kubelet UID.
pub const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";
/// The annotation the kubelet puts on every static pod (and so on its mirror pod): the UID it
/// gave the pod.
pub const CONFIG_HASH_ANNOTATION: &str = "kubernetes.io/config.hash";

/// How the kubelet treats a container (decides whether a changed hash restarts it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ContainerType {
    /// A regular container.
    Container,
    /// An init container that runs to completion.
    Init,
    /// An init container with `restartPolicy: Always` (native sidecar, 1.28+).
    Sidecar,
    /// An ephemeral (debug) container.
    Ephemeral,
}

/// The state pod status gives a runtime container.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ContainerState {
    /// Running now.
    Running,
    /// Terminated (or the previous attempt of a restarted container).
    Exited,
    /// Created or waiting to start.
    Waiting,
}

/// One container spec of a pod.
#[derive(Debug, Clone)]
pub struct PodContainer<'a> {
    /// The container's name (unique within the pod).
    pub name: String,
    /// How the kubelet treats it.
    pub ctype: ContainerType,
    /// The spec exactly as the API server served it: the bytes the kubelet decodes (hashed
    /// by the plan; kept as bytes, not a tree, so a node's pods cost their file size).
    pub spec: &'a [u8],
}

/// One pod of the node.
#[derive(Debug, Clone)]
pub struct Pod<'a> {
    /// `metadata.namespace`.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
    /// `metadata.uid`: what the runtime's labels tie each container to — except for a mirror
    /// pod, whose runtime containers carry [`Pod::kubelet_uid`].
    pub uid: String,
    /// A mirror pod's `kubernetes.io/config.mirror` annotation: the UID the kubelet gave the
    /// static pod, which its runtime containers carry (crate::static_pods).
    pub kubelet_uid: Option<String>,
    /// A mirror pod's `kubernetes.io/config.hash` annotation: the kubelet sets it to the
    /// static pod's UID too (pkg/kubelet/config/common.go), so it is a second witness of
    /// [`Pod::kubelet_uid`].
    pub config_hash: Option<String>,
    /// `spec.nodeName`: which node the API server bound the pod to.
    pub node_name: Option<String>,
    /// Init, regular and ephemeral containers.
    pub containers: Vec<PodContainer<'a>>,
    /// The pod exactly as served: what the admission prediction reads its scheduling
    /// constraints and requests from ([`crate::admission`]).
    pub raw: &'a [u8],
}

/// What pod status says about one runtime container id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusEntry {
    /// The container's state.
    pub state: ContainerState,
}

/// The node's pods, by uid, and the status of every runtime container id they list.
#[derive(Debug, Default)]
pub struct PodIndex<'a> {
    /// Every pod, in file order.
    pub pods: Vec<Pod<'a>>,
    by_uid: HashMap<String, usize>,
    /// Runtime container id (without `docker://` etc.) → state, from pod status.
    pub status_by_id: HashMap<String, StatusEntry>,
    /// Every pod's network, by `metadata.uid`: what the dockershim → cri-dockerd switch writes
    /// into the sandboxes' checkpoints ([`crate::cri_dockerd`]), read in the same pass.
    pub networks: PodNetworks,
}

/// `metadata.uid` → (`spec.hostNetwork`, `status.podIP` when not empty).
pub type PodNetworks = std::collections::BTreeMap<String, (bool, Option<String>)>;

/// One pod's entry of [`PodNetworks`]; `None` without a string `metadata.uid`.
pub(crate) fn pod_network(p: &Node<'_>) -> Option<(String, (bool, Option<String>))> {
    let uid = p.get("metadata")?.get("uid")?.as_str()?;
    let host = matches!(
        p.get("spec").and_then(|s| s.get("hostNetwork")),
        Some(Node {
            value: NodeValue::Bool(true),
            ..
        })
    );
    let ip = p
        .get("status")
        .and_then(|s| s.get("podIP"))
        .and_then(|i| i.as_str())
        .filter(|i| !i.is_empty())
        .map(String::from);
    Some((uid.to_string(), (host, ip)))
}

/// A pods file the workflow cannot use; maps to exit code 2.
#[derive(Debug, Clone, thiserror::Error)]
#[error("pods file: {0}")]
pub struct PodsError(pub String);

fn str_at<'n>(n: &'n Node<'_>, path: &[&str]) -> Option<&'n str> {
    let mut cur = n;
    for p in path {
        cur = cur.get(p)?;
    }
    cur.as_str()
}

fn array<'n, 'a>(n: Option<&'n Node<'a>>) -> &'n [Node<'a>] {
    match n {
        Some(Node {
            value: NodeValue::Array(items),
            ..
        }) => items,
        _ => &[],
    }
}

fn strip_runtime_prefix(id: &str) -> &str {
    id.split_once("://").map(|(_, rest)| rest).unwrap_or(id)
}

impl<'a> PodIndex<'a> {
    /// Parses a PodList, a `List` of pods, or a single Pod. The items of a list are parsed and
    /// indexed one at a time ([`hashcompat::parse_json_streaming`]): what is kept of a pod is
    /// small (names, status states, its container specs as byte spans of `input`), so the peak
    /// memory is `input` plus one pod's tree, not the whole document's tree.
    pub fn parse(input: &'a [u8]) -> Result<PodIndex<'a>, PodsError> {
        let mut index = PodIndex::default();
        let mut first_error = None;
        let mut count = 0usize;
        let mut member = 0;
        let streamed = parse_json_streaming(input, "items", |occurrence, item| {
            if occurrence != member {
                // A later `items` member: Go's decoder keeps only the last one.
                member = occurrence;
                index = PodIndex::default();
                first_error = None;
                count = 0;
            }
            if first_error.is_none() {
                if let Err(e) = index.add(count, &item) {
                    first_error = Some(e);
                }
            }
            count += 1;
        })
        .map_err(|e| PodsError(format!("not JSON: {e}")))?;
        let doc = &streamed.doc;
        let kind = str_at(doc, &["kind"]);
        match kind {
            // (the last `items` member is the one Go decodes; a streamed one is left empty)
            Some("PodList") | Some("List")
                if streamed.streamed
                    && matches!(
                        doc.get("items"),
                        Some(Node {
                            value: NodeValue::Array(_),
                            ..
                        })
                    ) => {}
            Some("PodList") | Some("List") => {
                return Err(PodsError(format!("{} without an items array", kind.unwrap_or(""))))
            }
            Some("Pod") => {
                // One pod: small, and its own fields (an `items` among them) are not a list's.
                let doc = parse_json(input).map_err(|e| PodsError(format!("not JSON: {e}")))?;
                let mut index = PodIndex::default();
                index.add(0, &doc)?;
                return Ok(index);
            }
            Some(other) => {
                return Err(PodsError(format!(
                    "kind {other:?} is not a Pod, PodList or List (give `kubectl get pods -A --field-selector spec.nodeName=NODE -o json`)"
                )))
            }
            None => {
                return Err(PodsError(
                    "no \"kind\": expected a Pod, PodList or List from `kubectl get pods -o json`".into(),
                ))
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(index),
        }
    }

    /// Indexes item `i` of the list: one pod.
    fn add(&mut self, i: usize, item: &Node<'a>) -> Result<(), PodsError> {
        let index = self;
        index.networks.extend(pod_network(item));
        let item_kind = str_at(item, &["kind"]);
        if item_kind.is_some_and(|k| k != "Pod") {
            return Err(PodsError(format!(
                "item {i} is a {}, not a Pod",
                item_kind.unwrap_or_default()
            )));
        }
        let name = str_at(item, &["metadata", "name"])
            .filter(|s| !s.is_empty())
            .ok_or_else(|| PodsError(format!("item {i} has no metadata.name")))?;
        let namespace = str_at(item, &["metadata", "namespace"]).unwrap_or("default");
        let uid = str_at(item, &["metadata", "uid"])
            .filter(|s| !s.is_empty())
            .ok_or_else(|| PodsError(format!("pod {namespace}/{name} has no metadata.uid")))?;
        if index.by_uid.contains_key(uid) {
            // (also a uid that an earlier mirror pod's annotation claimed)
            return Err(PodsError(format!(
                "uid {uid} appears twice (pod {namespace}/{name}); a node's pods have distinct uids"
            )));
        }
        let spec = item
            .get("spec")
            .ok_or_else(|| PodsError(format!("pod {namespace}/{name} has no spec")))?;
        let mut containers = Vec::new();
        for (list, base) in [
            ("initContainers", ContainerType::Init),
            ("containers", ContainerType::Container),
            ("ephemeralContainers", ContainerType::Ephemeral),
        ] {
            for c in array(spec.get(list)) {
                let cname = c.get("name").and_then(|n| n.as_str()).ok_or_else(|| {
                    PodsError(format!(
                        "pod {namespace}/{name}: a container in {list} has no name"
                    ))
                })?;
                let ctype = if base == ContainerType::Init
                    && c.get("restartPolicy").and_then(|r| r.as_str()) == Some("Always")
                {
                    ContainerType::Sidecar
                } else {
                    base
                };
                if containers.iter().any(|x: &PodContainer| x.name == cname) {
                    return Err(PodsError(format!(
                        "pod {namespace}/{name}: container name {cname:?} appears twice"
                    )));
                }
                containers.push(PodContainer {
                    name: cname.to_string(),
                    ctype,
                    spec: c.raw,
                });
            }
        }
        if let Some(status) = item.get("status") {
            for list in [
                "initContainerStatuses",
                "containerStatuses",
                "ephemeralContainerStatuses",
            ] {
                for st in array(status.get(list)) {
                    if let Some(id) = str_at(st, &["containerID"]).filter(|s| !s.is_empty()) {
                        let state = match st.get("state") {
                            Some(s) if s.get("running").is_some() => ContainerState::Running,
                            Some(s) if s.get("terminated").is_some() => ContainerState::Exited,
                            _ => ContainerState::Waiting,
                        };
                        index
                            .status_by_id
                            .insert(strip_runtime_prefix(id).to_string(), StatusEntry { state });
                    }
                    if let Some(id) = str_at(st, &["lastState", "terminated", "containerID"])
                        .filter(|s| !s.is_empty())
                    {
                        index
                            .status_by_id
                            .entry(strip_runtime_prefix(id).to_string())
                            .or_insert(StatusEntry {
                                state: ContainerState::Exited,
                            });
                    }
                }
            }
        }
        let config_hash = item
            .get("metadata")
            .and_then(|m| m.get("annotations"))
            .and_then(|a| a.get(CONFIG_HASH_ANNOTATION))
            .and_then(|v| v.as_str())
            .filter(|s| !s.is_empty())
            .map(str::to_string);
        let kubelet_uid = item
            .get("metadata")
            .and_then(|m| m.get("annotations"))
            .and_then(|a| a.get(MIRROR_ANNOTATION))
            .and_then(|v| v.as_str())
            .filter(|s| !s.is_empty() && *s != uid);
        if let Some(k) = kubelet_uid {
            if index.by_uid.contains_key(k) {
                return Err(PodsError(format!(
                    "uid {k} (the {MIRROR_ANNOTATION} of pod {namespace}/{name}) appears twice; a node's pods have distinct uids"
                )));
            }
            index.by_uid.insert(k.to_string(), index.pods.len());
        }
        index.by_uid.insert(uid.to_string(), index.pods.len());
        index.pods.push(Pod {
            namespace: namespace.to_string(),
            name: name.to_string(),
            uid: uid.to_string(),
            kubelet_uid: kubelet_uid.map(str::to_string),
            config_hash,
            node_name: str_at(spec, &["nodeName"])
                .filter(|s| !s.is_empty())
                .map(str::to_string),
            containers,
            raw: item.raw,
        });
        Ok(())
    }

    /// The pod with this uid: its `metadata.uid`, or for a mirror pod the kubelet's UID of the
    /// static pod.
    pub fn pod(&self, uid: &str) -> Option<&Pod<'a>> {
        self.by_uid.get(uid).map(|&i| &self.pods[i])
    }

    /// Every `spec.nodeName` the list names.
    pub fn node_names(&self) -> std::collections::BTreeSet<&str> {
        self.pods
            .iter()
            .filter_map(|p| p.node_name.as_deref())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(uid: &str, container: &str) -> String {
        format!(
            r#"{{"kind":"Pod","metadata":{{"name":"p-{uid}","namespace":"ns","uid":"{uid}"}},"spec":{{"containers":[{{"name":"{container}","image":"busybox"}}]}}}}"#
        )
    }

    #[test]
    fn a_list_keeps_each_container_spec_as_its_exact_bytes() {
        let doc = format!(
            r#"{{"apiVersion":"v1","items":[{},{}],"kind":"List","metadata":{{}}}}"#,
            pod("u1", "a"),
            pod("u2", "b")
        );
        let index = PodIndex::parse(doc.as_bytes()).unwrap();
        assert_eq!(index.pods.len(), 2, "every item is a pod of the index");
        let spec = index.pod("u2").unwrap().containers[0].spec;
        assert_eq!(
            spec, br#"{"name":"b","image":"busybox"}"#,
            "the spec is the served bytes, not a re-serialisation"
        );
    }

    #[test]
    fn only_the_last_items_member_counts_as_go_decodes_it() {
        let doc = format!(
            r#"{{"kind":"List","items":[{},{}],"items":[{}]}}"#,
            pod("u1", "a"),
            pod("u1", "a"),
            pod("u3", "c")
        );
        let index = PodIndex::parse(doc.as_bytes()).unwrap();
        let uids: Vec<&str> = index.pods.iter().map(|p| p.uid.as_str()).collect();
        assert_eq!(
            uids,
            ["u3"],
            "the earlier items array (with its duplicate uid) is replaced by the last"
        );
        let doc = format!(
            r#"{{"kind":"List","items":[{}],"items":null}}"#,
            pod("u1", "a")
        );
        let err = PodIndex::parse(doc.as_bytes()).unwrap_err();
        assert!(
            err.0.contains("without an items array"),
            "a last items member that is not an array is refused: {err}"
        );
    }

    #[test]
    fn a_single_pod_is_one_pod_even_with_an_items_field() {
        let doc = pod("u1", "a").replacen(r#""kind":"Pod","#, r#""kind":"Pod","items":[1],"#, 1);
        let index = PodIndex::parse(doc.as_bytes()).unwrap();
        assert_eq!(index.pods.len(), 1, "a Pod's own fields are not list items");
        assert_eq!(index.pods[0].containers[0].name, "a");
    }

    #[test]
    fn a_bad_item_is_named_after_a_syntax_check_of_the_whole_file() {
        let doc = r#"{"kind":"List","items":[{"kind":"Pod","metadata":{}}, {"#;
        let err = PodIndex::parse(doc.as_bytes()).unwrap_err();
        assert!(err.0.starts_with("not JSON"), "syntax first: {err}");
        let doc = r#"{"kind":"List","items":[{"kind":"Pod","metadata":{}}]}"#;
        let err = PodIndex::parse(doc.as_bytes()).unwrap_err();
        assert!(err.0.contains("item 0 has no metadata.name"), "{err}");
    }
}
