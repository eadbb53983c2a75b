//! The node of the real-daemon workflow tests (e2e_live.rs, upgrade_live.rs): pods with
//! golden specs (fixtures/golden/specs.jsonl), the hashes each container stores and what each
//! must become (rewritten, drifted, orphaned), the pods file kubectl would give, and the checks
//! of what the runtime itself serves afterwards.

#![allow(dead_code)]

use hashcompat::KubeletVersion;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::fs;
use testtools::containerd as ctd;

/// What a test's runtime harness lists: the seam the checks below read through.
pub trait Listing {
    /// The runtime's name and version, for messages.
    fn label(&self) -> String;
    /// Every container the runtime lists, by id.
    fn live(&self) -> HashMap<String, Live>;
}

pub const HASH: &str = "io.kubernetes.container.hash";
pub const HASH_WR: &str = "io.kubernetes.container.hashWithoutResources";

pub use crate::under_test::bin;

// ---------------------------------------------------------------------------------------------
// the node: pods, specs, stored hashes, expectations
// ---------------------------------------------------------------------------------------------

pub fn golden(id: &str) -> Value {
    let path = ctd::workspace().join("fixtures/golden/specs.jsonl");
    let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    for l in text.lines() {
        let v: Value = serde_json::from_str(l).unwrap();
        if v["id"] == id {
            return v["container"].clone();
        }
    }
    panic!("{}: no spec {id}", path.display());
}

/// `golden(id)` under another container name.
pub fn named(id: &str, name: &str) -> Value {
    let mut s = golden(id);
    s["name"] = json!(name);
    s
}

#[derive(Debug, Clone, PartialEq)]
pub enum Expect {
    Rewrite {
        target: String,
        target_wr: Option<String>,
    },
    Unchanged,
    Unproven,
    Orphan,
}

#[derive(Debug, Clone)]
pub struct PodDef {
    pub ns: String,
    pub name: String,
    pub uid: String,
    pub sandbox: String,
}

#[derive(Debug, Clone)]
pub struct Ctr {
    pub pod: usize,
    pub name: String,
    /// In the pods file (None: orphan, the pod has no such container).
    pub spec: Option<Value>,
    pub stored: String,
    pub stored_wr: Option<String>,
    pub expect: Expect,
    /// Runtime id, set when created.
    pub id: String,
}

pub fn v(s: &str) -> KubeletVersion {
    s.parse().unwrap()
}

pub fn hashes(spec: &Value, ver: &str) -> (String, Option<String>) {
    let h = hashcompat::hash_container(spec, v(ver))
        .unwrap_or_else(|e| panic!("hashcompat {ver} of {}: {e}", spec["name"]));
    (
        h.hash.to_string(),
        h.hash_without_resources.map(|x| x.to_string()),
    )
}

/// The node: two pods; `specs` = (golden id, container name) of the first pod's proven
/// containers, then a proven one and a drifted one in the second pod, and an orphan. `with_wr`:
/// the FROM kubelet wrote hashWithoutResources (1.27–1.30 with InPlacePodVerticalScaling).
pub fn node(
    tag: &str,
    specs: &[(&str, &str)],
    from: &str,
    to: &str,
    with_wr: bool,
) -> (Vec<PodDef>, Vec<Ctr>) {
    let pods = vec![
        PodDef {
            ns: "shop".into(),
            name: format!("web-{tag}-5d8f7c9b6-x2k4p"),
            uid: format!("e2e00000-{tag:0>4}-4c6d-9e8f-000000000001"),
            sandbox: String::new(),
        },
        PodDef {
            ns: "kube-system".into(),
            name: format!("tools-{tag}-8xk2q"),
            uid: format!("e2e00000-{tag:0>4}-4c6d-9e8f-000000000002"),
            sandbox: String::new(),
        },
    ];
    let mut ctrs = Vec::new();
    let mut add =
        |pod: usize, name: &str, spec: Option<Value>, stored_from: &Value, drifted: bool| {
            let (stored, wr) = hashes(stored_from, from);
            let stored_wr = if with_wr { wr } else { None };
            let expect = match &spec {
                None => Expect::Orphan,
                Some(_) if drifted => Expect::Unproven,
                Some(s) => {
                    let (t, t_wr) = hashes(s, to);
                    let wr_eq = match (&stored_wr, &t_wr) {
                        (Some(a), Some(b)) => a == b,
                        _ => true,
                    };
                    if t == stored && wr_eq {
                        Expect::Unchanged
                    } else {
                        Expect::Rewrite {
                            target: t,
                            target_wr: if stored_wr.is_some() { t_wr } else { None },
                        }
                    }
                }
            };
            ctrs.push(Ctr {
                pod,
                name: name.into(),
                spec,
                stored,
                stored_wr,
                expect,
                id: String::new(),
            });
        };
    let (last, first) = specs.split_last().unwrap();
    for (id, name) in first {
        let s = named(id, name);
        add(0, name, Some(s.clone()), &s, false);
    }
    // orphan: a container of pod 0 the pods file does not list
    add(0, "ghost", None, &named("f001-minimal", "ghost"), false);
    let s = named(last.0, last.1);
    add(1, last.1, Some(s.clone()), &s, false);
    // drifted: the pod's spec is f005, the container was created from (an edited) f008
    add(
        1,
        "shell",
        Some(named("f005-command-args-unicode", "shell")),
        &named("f008-env-values", "shell"),
        true,
    );
    (pods, ctrs)
}

/// `kubectl get pods -A -o json` of the node, as a `List`.
pub fn pods_json(pods: &[PodDef], ctrs: &[Ctr], scheme: &str) -> Value {
    let items: Vec<Value> = pods
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let mine: Vec<&Ctr> = ctrs
                .iter()
                .filter(|c| c.pod == i && c.spec.is_some())
                .collect();
            json!({
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": p.name, "namespace": p.ns, "uid": p.uid},
                "spec": {
                    "containers": mine.iter().map(|c| c.spec.clone().unwrap()).collect::<Vec<_>>(),
                    "nodeName": "e2e-node",
                    "restartPolicy": "Always",
                },
                "status": {
                    "phase": "Running",
                    "containerStatuses": mine.iter().map(|c| json!({
                        "name": c.name,
                        "containerID": format!("{scheme}://{}", c.id),
                        "image": c.spec.as_ref().unwrap()["image"],
                        "imageID": "",
                        "ready": true,
                        "restartCount": 0,
                        "started": true,
                        "state": {"running": {"startedAt": "2026-01-01T10:00:00Z"}},
                    })).collect::<Vec<_>>(),
                },
            })
        })
        .collect();
    json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": items})
}

/// What the runtime reports about one container.
#[derive(Debug)]
pub struct Live {
    pub hash: Option<String>,
    pub hash_wr: Option<String>,
    pub running: bool,
    pub pid: Option<u32>,
}

/// (pid, start time) of every container, from the runtime.
pub fn pids_now<R: Listing + ?Sized>(rt: &R, ctrs: &[Ctr]) -> BTreeMap<String, (u32, u64)> {
    let live = rt.live();
    ctrs.iter()
        .map(|c| {
            let l = live
                .get(&c.id)
                .unwrap_or_else(|| panic!("{}: {} ({}) not listed", rt.label(), c.name, c.id));
            assert!(
                l.running,
                "{}: {} is not running: {l:?}",
                rt.label(),
                c.name
            );
            let pid = l
                .pid
                .unwrap_or_else(|| panic!("{}: no pid for {}", rt.label(), c.name));
            let (_, start) = ctd::proc_stat(pid).expect("container process");
            (c.id.clone(), (pid, start))
        })
        .collect()
}

/// The runtime's view: each container runs as the same process and reports `want(c)`.
pub fn check_live<R: Listing + ?Sized>(
    rt: &R,
    ctrs: &[Ctr],
    pids: &BTreeMap<String, (u32, u64)>,
    want: &dyn Fn(&Ctr) -> (String, Option<String>),
    phase: &str,
) {
    let label = rt.label();
    let live = rt.live();
    for c in ctrs {
        let l = live
            .get(&c.id)
            .unwrap_or_else(|| panic!("{label} {phase}: {} ({}) is not listed", c.name, c.id));
        let (h, wr) = want(c);
        assert_eq!(
            l.hash.as_ref(),
            Some(&h),
            "{label} {phase}: hash of {}",
            c.name
        );
        assert_eq!(
            l.hash_wr, wr,
            "{label} {phase}: hashWithoutResources of {}",
            c.name
        );
        assert!(
            l.running,
            "{label} {phase}: {} is not running: {l:?}",
            c.name
        );
        let (pid, start) = pids[&c.id];
        assert_eq!(
            l.pid,
            Some(pid),
            "{label} {phase}: pid of {} changed",
            c.name
        );
        assert_eq!(
            ctd::proc_stat(pid).map(|s| s.1),
            Some(start),
            "{label} {phase}: pid {pid} of {} is another process",
            c.name
        );
    }
}

pub fn alive<R: Listing + ?Sized>(rt: &R, pids: &BTreeMap<String, (u32, u64)>, phase: &str) {
    for (id, (pid, start)) in pids {
        assert_eq!(
            ctd::proc_stat(*pid).map(|s| s.1),
            Some(*start),
            "{} {phase}: container {id} (pid {pid}) is gone",
            rt.label()
        );
    }
}

pub fn patched_values(c: &Ctr) -> (String, Option<String>) {
    match &c.expect {
        Expect::Rewrite { target, target_wr } => (
            target.clone(),
            target_wr.clone().or_else(|| c.stored_wr.clone()),
        ),
        _ => (c.stored.clone(), c.stored_wr.clone()),
    }
}

pub fn stored_values(c: &Ctr) -> (String, Option<String>) {
    (c.stored.clone(), c.stored_wr.clone())
}
