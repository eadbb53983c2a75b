//! Grows (or shrinks) a real node of fixtures/nodes or fixtures/nodes-large to N containers,
//! for the scaling runs of scripts/bench-node.sh (issue 16: "500, 2,000 and 10,000 containers,
//! grown from the real nodes") and the tests that prove the grown node plans like the real one.
//!
//! A node is a scenario directory: `pods.json` (`kubectl get pods -o json` of the node) and the
//! runtime's files under `var/lib/docker` or `var/lib/containerd`. The unit of growth is a
//! **pod**: its sandbox(es) and containers in the store, and its item in pods.json (orphan pods,
//! absent from pods.json, are store-only). A clone gets a new pod uid (and, for a mirror pod,
//! a new `kubernetes.io/config.mirror` UID), a new pod name of the same length, and new
//! container ids, written consistently everywhere the kubelet and the runtime keep them:
//!
//! * pods.json: `metadata.uid`, `metadata.name`, the mirror annotation, labels whose value is
//!   the pod name (`statefulset.kubernetes.io/pod-name`), and every `containerID` of the
//!   pod's status. The container specs are untouched, so every hash stays what it was.
//! * Docker: `containers/<new id>/config.v2.json` and `hostconfig.json`, with the ids, the pod
//!   uid and the pod name (labels, `Name`, `Hostname`, log paths) replaced.
//! * containerd: the container and sandbox buckets of `v1/<ns>/containers` in meta.db under
//!   the new ids, their values (CRI extensions, OCI spec, labels, sandbox id, snapshot key) with
//!   the same replacements, and `io.containerd.grpc.v1.cri/containers/<id>/status`.
//!
//! Every replacement keeps the length of what it replaces (ids and uids keep their shape, names
//! their length), so no length prefix inside a protobuf `Any` changes and a clone's records are
//! exactly as large as its original's. The pod name is only replaced where the runtime writes
//! it as the pod's name (label values, `Hostname`, `<ctr>_<pod>_<ns>_<uid>` names,
//! `<ns>_<pod>_<uid>` log paths, the sandbox's CRI metadata), never as a bare substring: a pod
//! named like its image or one of its containers keeps those.
//!
//! Growing clones whole pods round by round (every pod once, then again…) until exactly N
//! containers; shrinking keeps a prefix of pods.json's pods (skipping those that would
//! overshoot). N equal to the node's count copies the node unchanged. containerd's meta.db is
//! bulk-written from the edited tree ([`storepatch::containerd::bolt::build`], in the original's freelist layout);
//! the snapshot, lease and content buckets are copied, not cloned (the patch never reads them).

use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use storepatch::containerd::bolt::build::{self, Item, Tree};
use storepatch::containerd::bolt::Db;

/// The runtime whose store a node holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runtime {
    /// `var/lib/docker/containers/<id>/{config.v2.json,hostconfig.json}`.
    Docker,
    /// `var/lib/containerd` (meta.db + CRI status files).
    Containerd,
}

const DOCKER_ROOT: &str = "var/lib/docker";
const CONTAINERD_ROOT: &str = "var/lib/containerd";
/// Page fill of a rebuilt meta.db (bbolt splits pages at 50 % and a long-lived file sits in
/// between; the bench's earlier 10,000-container file used the same 0.7).
pub const META_DB_FILL: f64 = 0.7;

/// One pod of the store: what is cloned or dropped as a whole.
#[derive(Debug, Clone)]
struct Group {
    /// The pod uid as the runtime records it (the kubelet's UID of a static pod).
    uid: String,
    namespace: String,
    name: String,
    /// Store ids of its sandboxes and containers, in id order.
    ids: Vec<String>,
    /// How many of `ids` are containers (not sandboxes).
    containers: usize,
    /// Index of its item in pods.json (None: an orphan).
    item: Option<usize>,
}

/// One cloned pod, for callers that map a clone's records back to the original's.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PodClone {
    /// Which copy of the original this is (1, 2, …).
    pub copy: usize,
    /// The original pod's runtime uid.
    pub of_uid: String,
    /// The clone's runtime uid.
    pub uid: String,
    /// The original pod's name.
    pub of_name: String,
    /// The clone's name (same namespace).
    pub name: String,
    /// Original store id → clone's store id.
    pub ids: BTreeMap<String, String>,
}

/// What [`grow_node`] made.
#[derive(Debug, Clone, serde::Serialize)]
pub struct GrowReport {
    /// Containers (not sandboxes) in the original store.
    pub containers_before: usize,
    /// Containers in the new store (= the N asked for).
    pub containers: usize,
    /// Sandboxes in the new store.
    pub sandboxes: usize,
    /// Pods in the new pods.json.
    pub pods: usize,
    /// Pods of the original store dropped (shrinking).
    pub dropped_pods: usize,
    /// Every clone made (growing).
    pub clones: Vec<PodClone>,
}

/// Which runtime's store `node` holds.
pub fn runtime_of(node: &Path) -> Result<Runtime, String> {
    if node.join(DOCKER_ROOT).join("containers").is_dir() {
        Ok(Runtime::Docker)
    } else if node
        .join(CONTAINERD_ROOT)
        .join(storepatch::containerd::META_DB)
        .is_file()
    {
        Ok(Runtime::Containerd)
    } else {
        Err(format!(
            "{}: neither var/lib/docker/containers nor var/lib/containerd's meta.db",
            node.display()
        ))
    }
}

/// Writes into `out` (created; must not exist) the node `src` grown or shrunk to exactly
/// `containers` containers: `pods.json`, the runtime's files under `var/`, and `grow.json`
/// (this report). `expected.json` and `runtime-before.json` are not carried over (they describe
/// the original node only). `rebuild`: with `containers` equal to the node's count, still
/// rewrite the store the way a grown one is written (containerd: a bulk-written meta.db),
/// for a like-for-like point on a scaling curve.
pub fn grow_node(
    src: &Path,
    out: &Path,
    containers: usize,
    rebuild: bool,
) -> Result<GrowReport, String> {
    let rt = runtime_of(src)?;
    let pods_bytes = read(&src.join("pods.json"))?;
    let mut pods: serde_json::Value = serde_json::from_slice(&pods_bytes)
        .map_err(|e| format!("{}: {e}", src.join("pods.json").display()))?;
    let items: Vec<serde_json::Value> = pods
        .get("items")
        .and_then(|i| i.as_array())
        .cloned()
        .ok_or("pods.json has no items array")?;
    let store = match rt {
        Runtime::Docker => Store::read_docker(src)?,
        Runtime::Containerd => Store::read_containerd(src)?,
    };
    let mut groups = store.groups(&items)?;
    // pods.json's order first (so a shrunk node keeps a prefix of it), then the orphans
    groups.sort_by_key(|g| (g.item.is_none(), g.item, g.uid.clone()));
    let before: usize = groups.iter().map(|g| g.containers).sum();

    let mut keep = vec![true; groups.len()];
    let mut clones: Vec<(usize, usize)> = Vec::new(); // (group, copy)
    let mut total = before;
    if containers < before {
        total = 0;
        for (i, g) in groups.iter().enumerate() {
            keep[i] =
                total + g.containers <= containers && (g.containers > 0 || total < containers);
            if keep[i] {
                total += g.containers;
            }
        }
    } else if containers > before {
        let mut copy = 0;
        while total < containers {
            copy += 1;
            let start = total;
            for (i, g) in groups.iter().enumerate() {
                // a pod without containers (only a sandbox) is cloned in every round
                if g.containers == 0 || total + g.containers <= containers {
                    clones.push((i, copy));
                    total += g.containers;
                }
            }
            if total == start {
                break;
            }
        }
    }
    if total != containers {
        return Err(format!(
            "cannot make exactly {containers} containers from pods of this node (got {total})"
        ));
    }

    // names and ids already taken, so no clone collides with the node or another clone
    let mut taken_names: BTreeSet<(String, String)> = groups
        .iter()
        .map(|g| (g.namespace.clone(), g.name.clone()))
        .collect();
    for it in &items {
        taken_names.insert((
            str_at(it, &["metadata", "namespace"]).to_string(),
            str_at(it, &["metadata", "name"]).to_string(),
        ));
    }
    let mut taken_ids: BTreeSet<String> = store.records.keys().cloned().collect();
    let mut made = Vec::new();
    for &(gi, copy) in &clones {
        let g = &groups[gi];
        let uid = fresh(&g.uid, copy, &mut taken_ids);
        let mut name = String::new();
        for salt in 0.. {
            name = same_length_name(&g.name, &format!("{}/{copy}/{salt}", g.uid));
            if taken_names.insert((g.namespace.clone(), name.clone())) {
                break;
            }
        }
        let ids = g
            .ids
            .iter()
            .map(|id| (id.clone(), fresh(id, copy, &mut taken_ids)))
            .collect();
        made.push(PodClone {
            copy,
            of_uid: g.uid.clone(),
            uid,
            of_name: g.name.clone(),
            name,
            ids,
        });
    }

    std::fs::create_dir(out).map_err(|e| format!("{}: {e}", out.display()))?;
    let unchanged = clones.is_empty() && keep.iter().all(|k| *k) && !rebuild;
    let dropped: BTreeSet<&str> = groups
        .iter()
        .zip(&keep)
        .filter(|(_, k)| !**k)
        .flat_map(|(g, _)| g.ids.iter().map(String::as_str))
        .collect();
    let edits: Vec<(&PodClone, Vec<Replace>)> = made
        .iter()
        .map(|c| {
            let g = groups.iter().find(|g| g.uid == c.of_uid).unwrap();
            (c, replacements(g, c))
        })
        .collect();
    match rt {
        Runtime::Docker => store.write_docker(src, out, &dropped, &edits)?,
        Runtime::Containerd => store.write_containerd(src, out, &dropped, &edits, unchanged)?,
    }

    // pods.json: drop the items of dropped pods, append one per clone of a listed pod
    let mut new_items = Vec::new();
    for (i, it) in items.iter().enumerate() {
        let g = groups.iter().zip(&keep).find(|(g, _)| g.item == Some(i));
        if g.is_none_or(|(_, k)| *k) {
            new_items.push(it.clone());
        }
    }
    for c in &made {
        let g = groups.iter().find(|g| g.uid == c.of_uid).unwrap();
        if let Some(i) = g.item {
            new_items.push(clone_item(&items[i], g, c)?);
        }
    }
    let n_pods = new_items.len();
    pods["items"] = serde_json::Value::Array(new_items);
    if unchanged {
        std::fs::write(out.join("pods.json"), &pods_bytes)
    } else {
        std::fs::write(
            out.join("pods.json"),
            serde_json::to_vec_pretty(&pods).unwrap(),
        )
    }
    .map_err(|e| format!("pods.json: {e}"))?;

    let kept_sandboxes: usize = groups
        .iter()
        .zip(&keep)
        .filter(|(_, k)| **k)
        .map(|(g, _)| g.ids.len() - g.containers)
        .sum();
    let cloned_sandboxes: usize = clones
        .iter()
        .map(|&(gi, _)| groups[gi].ids.len() - groups[gi].containers)
        .sum();
    let report = GrowReport {
        containers_before: before,
        containers: total,
        sandboxes: kept_sandboxes + cloned_sandboxes,
        pods: n_pods,
        dropped_pods: keep.iter().filter(|k| !**k).count(),
        clones: made,
    };
    std::fs::write(
        out.join("grow.json"),
        serde_json::to_vec_pretty(&report).unwrap(),
    )
    .map_err(|e| format!("grow.json: {e}"))?;
    Ok(report)
}

/// Clones every pod of a containerd meta.db (sandboxes and containers, new ids, uids and
/// names as [`grow_node`] makes them) `copies` times and bulk-writes the result in the given
/// freelist layout: a large store for the back-end's own benchmark, without pods.json.
pub fn grow_meta_db(db_bytes: Vec<u8>, copies: usize, synced_freelist: bool) -> Vec<u8> {
    let db = Db::from_bytes(db_bytes).expect("a bolt file");
    let mut tree = Tree::read(&db).expect("its tree");
    let recs = containerd_records(&tree).expect("containerd containers");
    let store = Store { records: recs };
    let groups = store.groups(&[]).expect("pods");
    assert!(
        !groups.is_empty(),
        "no container of this meta.db carries the kubelet's pod uid label"
    );
    let mut taken: BTreeSet<String> = store.records.keys().cloned().collect();
    let mut add = Vec::new();
    for copy in 1..=copies {
        for g in &groups {
            let c = PodClone {
                copy,
                of_uid: g.uid.clone(),
                uid: fresh(&g.uid, copy, &mut taken),
                of_name: g.name.clone(),
                name: same_length_name(&g.name, &format!("{}/{copy}/0", g.uid)),
                ids: g
                    .ids
                    .iter()
                    .map(|id| (id.clone(), fresh(id, copy, &mut taken)))
                    .collect(),
            };
            add.push((replacements(g, &c), c));
        }
    }
    let edits: Vec<(&PodClone, Vec<Replace>)> = add.iter().map(|(r, c)| (c, r.clone())).collect();
    for (_, ctrs) in containers_buckets(&mut tree) {
        clone_in_bucket(ctrs, &edits);
    }
    build::build(
        &tree,
        db.meta.page_size as usize,
        META_DB_FILL,
        synced_freelist,
    )
}

/// A store record: its pod uid (None: not the kubelet's), kind, pod name / namespace.
#[derive(Debug, Clone)]
struct Record {
    uid: Option<String>,
    sandbox: bool,
    namespace: String,
    name: String,
}

struct Store {
    /// id → record (in id order: the order a pod's records are cloned in)
    records: BTreeMap<String, Record>,
}

impl Store {
    fn read_docker(src: &Path) -> Result<Store, String> {
        let dir = src.join(DOCKER_ROOT).join("containers");
        let mut records = BTreeMap::new();
        for e in std::fs::read_dir(&dir).map_err(|e| format!("{}: {e}", dir.display()))? {
            let e = e.map_err(|e| e.to_string())?;
            let id = e.file_name().to_string_lossy().into_owned();
            let cfg = e.path().join("config.v2.json");
            let v: serde_json::Value = serde_json::from_slice(&read(&cfg)?)
                .map_err(|e| format!("{}: {e}", cfg.display()))?;
            let label = |k: &str| {
                v.get("Config")
                    .and_then(|c| c.get("Labels"))
                    .and_then(|l| l.get(k))
                    .and_then(|s| s.as_str())
                    .map(str::to_string)
            };
            records.insert(
                id,
                Record {
                    uid: label("io.kubernetes.pod.uid"),
                    sandbox: label("io.kubernetes.docker.type").as_deref() == Some("podsandbox"),
                    namespace: label("io.kubernetes.pod.namespace").unwrap_or_default(),
                    name: label("io.kubernetes.pod.name").unwrap_or_default(),
                },
            );
        }
        Ok(Store { records })
    }

    fn read_containerd(src: &Path) -> Result<Store, String> {
        let db = Db::read_path(
            &src.join(CONTAINERD_ROOT)
                .join(storepatch::containerd::META_DB),
        )
        .map_err(|e| e.to_string())?;
        let tree = Tree::read(&db).map_err(|e| e.to_string())?;
        let records = containerd_records(&tree)?;
        Ok(Store { records })
    }

    /// The pods of the store, each matched to its pods.json item (by uid, or a mirror pod's
    /// `kubernetes.io/config.mirror`).
    fn groups(&self, items: &[serde_json::Value]) -> Result<Vec<Group>, String> {
        let mut by_uid: BTreeMap<String, usize> = BTreeMap::new();
        for (i, it) in items.iter().enumerate() {
            by_uid.insert(str_at(it, &["metadata", "uid"]).to_string(), i);
            let mirror = str_at(it, &["metadata", "annotations", MIRROR]);
            if !mirror.is_empty() {
                by_uid.insert(mirror.to_string(), i);
            }
        }
        let mut groups: Vec<Group> = Vec::new();
        let mut at: BTreeMap<String, usize> = BTreeMap::new();
        for id in self.records.keys() {
            let r = &self.records[id];
            let Some(uid) = &r.uid else { continue };
            let gi = *at.entry(uid.clone()).or_insert_with(|| {
                groups.push(Group {
                    uid: uid.clone(),
                    namespace: r.namespace.clone(),
                    name: r.name.clone(),
                    ids: Vec::new(),
                    containers: 0,
                    item: by_uid.get(uid).copied(),
                });
                groups.len() - 1
            });
            let g = &mut groups[gi];
            if g.name != r.name || g.namespace != r.namespace {
                return Err(format!(
                    "pod uid {uid}: records name {}/{} and {}/{}",
                    g.namespace, g.name, r.namespace, r.name
                ));
            }
            g.ids.push(id.clone());
            if !r.sandbox {
                g.containers += 1;
            }
        }
        Ok(groups)
    }

    fn write_docker(
        &self,
        src: &Path,
        out: &Path,
        dropped: &BTreeSet<&str>,
        edits: &[(&PodClone, Vec<Replace>)],
    ) -> Result<(), String> {
        let from = src.join(DOCKER_ROOT).join("containers");
        copy_tree(&src.join("var"), &out.join("var"), &|p| {
            p.parent() == Some(&from)
                && dropped.contains(p.file_name().unwrap().to_string_lossy().as_ref())
        })?;
        let to = out.join(DOCKER_ROOT).join("containers");
        for (c, reps) in edits {
            for (old, new) in &c.ids {
                clone_dir(&from.join(old), &to.join(new), reps)?;
            }
        }
        Ok(())
    }

    fn write_containerd(
        &self,
        src: &Path,
        out: &Path,
        dropped: &BTreeSet<&str>,
        edits: &[(&PodClone, Vec<Replace>)],
        unchanged: bool,
    ) -> Result<(), String> {
        let root = src.join(CONTAINERD_ROOT);
        let db_path = root.join(storepatch::containerd::META_DB);
        let status = root.join(storepatch::containerd::CRI_CONTAINERS);
        copy_tree(&src.join("var"), &out.join("var"), &|p| {
            (!unchanged && p == db_path)
                || (p.parent() == Some(&status)
                    && dropped.contains(p.file_name().unwrap().to_string_lossy().as_ref()))
        })?;
        let to_status = out
            .join(CONTAINERD_ROOT)
            .join(storepatch::containerd::CRI_CONTAINERS);
        for (c, reps) in edits {
            for (old, new) in &c.ids {
                let sd = status.join(old);
                if !sd.is_dir() {
                    continue;
                }
                clone_dir(&sd, &to_status.join(new), reps)?;
            }
        }
        if unchanged {
            return Ok(());
        }
        let db = Db::read_path(&db_path).map_err(|e| e.to_string())?;
        let mut tree = Tree::read(&db).map_err(|e| e.to_string())?;
        for (_, ctrs) in containers_buckets(&mut tree) {
            ctrs.items
                .retain(|(k, _)| !dropped.contains(String::from_utf8_lossy(k).as_ref()));
            clone_in_bucket(
                ctrs,
                &edits
                    .iter()
                    .map(|(c, r)| (*c, r.clone()))
                    .collect::<Vec<_>>(),
            );
        }
        let bytes = build::build(
            &tree,
            db.meta.page_size as usize,
            META_DB_FILL,
            db.meta.freelist_synced(),
        );
        let dst = out
            .join(CONTAINERD_ROOT)
            .join(storepatch::containerd::META_DB);
        std::fs::write(&dst, bytes).map_err(|e| format!("{}: {e}", dst.display()))?;
        copy_perm(&db_path, &dst)
    }
}

const MIRROR: &str = "kubernetes.io/config.mirror";
const LABELS_UID: &[u8] = b"io.kubernetes.pod.uid";
const LABELS_NAME: &[u8] = b"io.kubernetes.pod.name";
const LABELS_NS: &[u8] = b"io.kubernetes.pod.namespace";
const LABELS_KIND: &[u8] = b"io.cri-containerd.kind";

/// Every `v1/<namespace>/containers` bucket.
fn containers_buckets(tree: &mut Tree) -> Vec<(Vec<u8>, &mut Tree)> {
    let mut out = Vec::new();
    let Some(v1) = tree.bucket_mut(&[b"v1"]) else {
        return out;
    };
    for (ns, item) in &mut v1.items {
        if let Item::Bucket { tree, .. } = item {
            if let Some(c) = tree.bucket_mut(&[b"containers"]) {
                out.push((ns.clone(), c));
            }
        }
    }
    out
}

/// The bucket `key` of `t`.
fn sub<'t>(t: &'t Tree, key: &[u8]) -> Option<&'t Tree> {
    t.items.iter().find_map(|(k, v)| match v {
        Item::Bucket { tree, .. } if k == key => Some(tree),
        _ => None,
    })
}

fn containerd_records(tree: &Tree) -> Result<BTreeMap<String, Record>, String> {
    let mut out = BTreeMap::new();
    let namespaces = sub(tree, b"v1").map_or(&[][..], |v1| &v1.items[..]);
    for (_, ns) in namespaces {
        let Item::Bucket { tree: ns, .. } = ns else {
            continue;
        };
        let Some(ctrs) = sub(ns, b"containers") else {
            continue;
        };
        for (id, item) in &ctrs.items {
            let Item::Bucket { tree: c, .. } = item else {
                continue;
            };
            let labels = sub(c, b"labels");
            let label = |key: &[u8]| {
                labels.and_then(|l| {
                    l.items.iter().find_map(|(k, v)| match v {
                        Item::Value(v) if k == key => Some(String::from_utf8_lossy(v).into_owned()),
                        _ => None,
                    })
                })
            };
            out.insert(
                String::from_utf8(id.clone()).map_err(|_| "a container id is not UTF-8")?,
                Record {
                    uid: label(LABELS_UID),
                    sandbox: label(LABELS_KIND).as_deref() == Some("sandbox"),
                    namespace: label(LABELS_NS).unwrap_or_default(),
                    name: label(LABELS_NAME).unwrap_or_default(),
                },
            );
        }
    }
    Ok(out)
}

/// Appends to a containers bucket every clone's records, edited.
fn clone_in_bucket(ctrs: &mut Tree, edits: &[(&PodClone, Vec<Replace>)]) {
    let by_id: BTreeMap<Vec<u8>, Item> = ctrs.items.iter().cloned().collect();
    for (c, reps) in edits {
        for (old, new) in &c.ids {
            let Some(item) = by_id.get(old.as_bytes()) else {
                continue;
            };
            let mut item = item.clone();
            if let Item::Bucket { tree, .. } = &mut item {
                replace_in_tree(tree, reps, &c.of_name, &c.name);
            }
            ctrs.items.push((new.clone().into_bytes(), item));
        }
    }
}

fn replace_in_tree(t: &mut Tree, reps: &[Replace], old_name: &str, new_name: &str) {
    for (k, item) in &mut t.items {
        match item {
            Item::Value(v) => {
                if k == LABELS_NAME && v == old_name.as_bytes() {
                    v.copy_from_slice(new_name.as_bytes());
                }
                apply(v, reps);
            }
            Item::Bucket { tree, .. } => replace_in_tree(tree, reps, old_name, new_name),
        }
    }
}

/// A same-length byte replacement.
type Replace = (Vec<u8>, Vec<u8>);

/// What changes in a clone's store bytes, in order: the pod name in the contexts where the
/// runtime writes it as the pod's name (those that name the uid next to it first, before the
/// uid itself changes), then the ids, then the uid.
fn replacements(g: &Group, c: &PodClone) -> Vec<Replace> {
    let (o, n, ns, uid) = (&c.of_name, &c.name, &g.namespace, &g.uid);
    let mut r: Vec<(String, String)> = vec![
        (format!("_{o}_{ns}_{uid}"), format!("_{n}_{ns}_{uid}")),
        (format!("\"{o}_{ns}_{uid}"), format!("\"{n}_{ns}_{uid}")),
        (format!("{ns}_{o}_{uid}"), format!("{ns}_{n}_{uid}")),
        (
            format!("\"metadata\":{{\"name\":\"{o}\",\"uid\":\"{uid}\""),
            format!("\"metadata\":{{\"name\":\"{n}\",\"uid\":\"{uid}\""),
        ),
        (format!("HOSTNAME={o}\""), format!("HOSTNAME={n}\"")),
    ];
    for key in [
        "io.kubernetes.pod.name",
        "io.kubernetes.cri.sandbox-name",
        "statefulset.kubernetes.io/pod-name",
        "Hostname",
        "hostname",
    ] {
        r.push((format!("\"{key}\":\"{o}\""), format!("\"{key}\":\"{n}\"")));
    }
    for (old, new) in &c.ids {
        r.push((old.clone(), new.clone()));
    }
    r.push((uid.clone(), c.uid.clone()));
    r.into_iter()
        .map(|(a, b)| {
            debug_assert_eq!(a.len(), b.len());
            (a.into_bytes(), b.into_bytes())
        })
        .collect()
}

/// Applies same-length replacements in place, each over the whole buffer.
fn apply(bytes: &mut [u8], reps: &[Replace]) {
    for (from, to) in reps {
        assert_eq!(from.len(), to.len(), "replacements keep lengths");
        if from.is_empty() || from.len() > bytes.len() {
            continue;
        }
        let mut i = 0;
        while i + from.len() <= bytes.len() {
            if bytes[i] == from[0] && &bytes[i..i + from.len()] == from.as_slice() {
                bytes[i..i + from.len()].copy_from_slice(to);
                i += from.len();
            } else {
                i += 1;
            }
        }
    }
}

/// A pods.json item for clone `c` of the pod `g` whose item is `it`: new uid, name, mirror
/// UID and status container ids; the spec as it was.
fn clone_item(
    it: &serde_json::Value,
    g: &Group,
    c: &PodClone,
) -> Result<serde_json::Value, String> {
    let mut v = it.clone();
    let md = v
        .get_mut("metadata")
        .and_then(|m| m.as_object_mut())
        .ok_or("a pod without metadata")?;
    let api_uid = md
        .get("uid")
        .and_then(|u| u.as_str())
        .unwrap_or_default()
        .to_string();
    let new_api_uid = if api_uid == g.uid {
        c.uid.clone()
    } else {
        reshape(&api_uid, &format!("{api_uid}/{}", c.copy))
    };
    md.insert("uid".into(), new_api_uid.into());
    md.insert("name".into(), c.name.clone().into());
    if let Some(a) = md.get_mut("annotations").and_then(|a| a.as_object_mut()) {
        if let Some(m) = a.get(MIRROR).and_then(|m| m.as_str()).map(str::to_string) {
            let new = if m == g.uid {
                c.uid.clone()
            } else {
                reshape(&m, &format!("{m}/{}", c.copy))
            };
            a.insert(MIRROR.into(), new.into());
        }
    }
    if let Some(l) = md.get_mut("labels").and_then(|l| l.as_object_mut()) {
        for (_, val) in l.iter_mut() {
            if val.as_str() == Some(g.name.as_str()) {
                *val = c.name.clone().into();
            }
        }
    }
    if let Some(st) = v.get_mut("status").and_then(|s| s.as_object_mut()) {
        for list in [
            "initContainerStatuses",
            "containerStatuses",
            "ephemeralContainerStatuses",
        ] {
            let Some(arr) = st.get_mut(list).and_then(|a| a.as_array_mut()) else {
                continue;
            };
            for s in arr {
                let fix = |v: Option<&mut serde_json::Value>| {
                    if let Some(v) = v {
                        if let Some(cid) = v.as_str() {
                            let (scheme, id) = cid.split_once("://").unwrap_or(("", cid));
                            let new = c
                                .ids
                                .get(id)
                                .cloned()
                                .unwrap_or_else(|| reshape(id, &format!("{id}/{}", c.copy)));
                            *v = if scheme.is_empty() {
                                new.into()
                            } else {
                                format!("{scheme}://{new}").into()
                            };
                        }
                    }
                };
                fix(s.get_mut("containerID"));
                fix(s
                    .get_mut("lastState")
                    .and_then(|l| l.get_mut("terminated"))
                    .and_then(|t| t.get_mut("containerID")));
            }
        }
    }
    if v.get("spec") != it.get("spec") {
        return Err("a clone's spec changed".into());
    }
    Ok(v)
}

/// A new identifier of the same shape as `old` (hex digits replaced by hex digits from a
/// hash of `seed`; dashes, a uuid's version and variant digits kept), not yet in `taken`.
fn fresh(old: &str, copy: usize, taken: &mut BTreeSet<String>) -> String {
    for salt in 0.. {
        let n = reshape(old, &format!("{old}/{copy}/{salt}"));
        if taken.insert(n.clone()) {
            return n;
        }
    }
    unreachable!()
}

fn reshape(old: &str, seed: &str) -> String {
    let mut stream = HashStream::new(seed);
    let uuid = old.len() == 36 && old.as_bytes()[8] == b'-';
    old.char_indices()
        .map(|(i, ch)| {
            if ch.is_ascii_hexdigit() && !(uuid && (i == 14 || i == 19)) {
                char::from_digit((stream.next() & 15) as u32, 16).unwrap()
            } else {
                ch
            }
        })
        .collect()
}

/// A pod name of the same length: its last (up to) 5 characters replaced by the kube random
/// alphabet's, as a ReplicaSet's pod suffix is (the first character always kept).
fn same_length_name(old: &str, seed: &str) -> String {
    const ALPHA: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut stream = HashStream::new(seed);
    let keep = old.len() - old.len().saturating_sub(1).min(5);
    let mut s = old[..keep].to_string();
    for _ in keep..old.len() {
        s.push(ALPHA[stream.next() as usize % ALPHA.len()] as char);
    }
    s
}

struct HashStream {
    seed: Vec<u8>,
    block: Vec<u8>,
    n: u64,
}

impl HashStream {
    fn new(seed: &str) -> Self {
        HashStream {
            seed: seed.as_bytes().to_vec(),
            block: Vec::new(),
            n: 0,
        }
    }
    fn next(&mut self) -> u8 {
        if self.block.is_empty() {
            let mut h = Sha256::new();
            h.update(&self.seed);
            h.update(self.n.to_le_bytes());
            self.n += 1;
            self.block = h.finalize().to_vec();
        }
        self.block.pop().unwrap()
    }
}

fn str_at<'a>(v: &'a serde_json::Value, path: &[&str]) -> &'a str {
    let mut v = v;
    for p in path {
        match v.get(p) {
            Some(x) => v = x,
            None => return "",
        }
    }
    v.as_str().unwrap_or("")
}

fn read(p: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(p).map_err(|e| format!("{}: {e}", p.display()))
}

fn copy_perm(from: &Path, to: &Path) -> Result<(), String> {
    let m = std::fs::metadata(from).map_err(|e| format!("{}: {e}", from.display()))?;
    std::fs::set_permissions(to, m.permissions()).map_err(|e| format!("{}: {e}", to.display()))
}

/// A record's directory `from` copied to `to` (a new directory, modes kept), its files with
/// the clone's replacements applied (subdirectories copied as they are).
fn clone_dir(from: &Path, to: &Path, reps: &[Replace]) -> Result<(), String> {
    std::fs::create_dir_all(to).map_err(|e| format!("{}: {e}", to.display()))?;
    copy_perm(from, to)?;
    for e in std::fs::read_dir(from).map_err(|e| format!("{}: {e}", from.display()))? {
        let e = e.map_err(|e| e.to_string())?;
        let dst = to.join(e.file_name());
        if e.file_type().map_err(|e| e.to_string())?.is_dir() {
            copy_tree(&e.path(), &dst, &|_| false)?;
            continue;
        }
        let mut bytes = read(&e.path())?;
        apply(&mut bytes, reps);
        std::fs::write(&dst, &bytes).map_err(|e| format!("{}: {e}", dst.display()))?;
        copy_perm(&e.path(), &dst)?;
    }
    Ok(())
}

/// Copies the tree `from` to `to` (modes kept), leaving out what `skip` names.
fn copy_tree(from: &Path, to: &Path, skip: &dyn Fn(&Path) -> bool) -> Result<(), String> {
    std::fs::create_dir_all(to).map_err(|e| format!("{}: {e}", to.display()))?;
    copy_perm(from, to)?;
    let mut entries: Vec<PathBuf> = std::fs::read_dir(from)
        .map_err(|e| format!("{}: {e}", from.display()))?
        .map(|e| e.map(|e| e.path()).map_err(|e| e.to_string()))
        .collect::<Result<_, _>>()?;
    entries.sort();
    for p in entries {
        if skip(&p) {
            continue;
        }
        let dst = to.join(p.file_name().unwrap());
        let ft = std::fs::symlink_metadata(&p)
            .map_err(|e| e.to_string())?
            .file_type();
        if ft.is_dir() {
            copy_tree(&p, &dst, skip)?;
        } else if ft.is_symlink() {
            let t = std::fs::read_link(&p).map_err(|e| e.to_string())?;
            std::os::unix::fs::symlink(t, &dst).map_err(|e| e.to_string())?;
        } else {
            std::fs::copy(&p, &dst).map_err(|e| format!("{}: {e}", p.display()))?;
        }
    }
    Ok(())
}
