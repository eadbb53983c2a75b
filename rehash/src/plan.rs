//! The plan: for every record of the store, what the target kubelet will compute, whether we
//! can prove the stored hash, and what to do about it.
//!
//! A stored hash is *proven* when it equals what the FROM kubelet computes for the pod spec we
//! have (and so does the stored `hashWithoutResources`, when there is one). Only proven hashes
//! are rewritten: a stored hash we cannot reproduce means the spec changed since the container
//! was created (or we do not understand it), and the kubelet restarting that container is the
//! right outcome — rewriting would suppress it.

use crate::error::Error;
use crate::pods::{ContainerState, ContainerType, PodIndex};
use crate::static_pods::{plan_pin, uid_origin, StaticManifests, UidOrigin, UidPin};
use hashcompat::{ContainerHashes, Hash, KubeletVersion, SpecError};
use rayon::prelude::*;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use storepatch::bytes::ByContent;
use storepatch::{Hazard, RecordKind, RuntimeKind, RuntimeStore, ScanReport, StoreRecord};

/// The report's types ([`crate::report`], which every step shares) and the node's witnesses
/// ([`crate::node`]), also named here: where the plan's users have always found them.
pub use crate::node::{ApiFacts, InstalledKubelet};
pub use crate::report::{
    ranges, Action, PhaseTiming, Plan, PlanRecord, RecordClass, Stage, Summary, Timings,
    REPORT_FORMAT,
};

/// Which kubelet the node runs now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum From {
    /// Found from the stored hashes: the versions every proven container agrees on.
    Auto,
    /// Given by the operator; every container is judged against it.
    Version(KubeletVersion),
}

/// What the plan reads from the node besides the store and the pods file. Empty (the
/// default) reads nothing more: the plan then judges static pods by their UID's form alone.
#[derive(Debug, Clone, Default)]
pub struct NodeFiles {
    /// The static pod manifests (the kubelet's `staticPodPath`), which tell a pinned UID from
    /// a derived one.
    pub manifests: Option<StaticManifests>,
    /// The kubelet's root directory (`--root-dir`, `/var/lib/kubelet`), whose checkpoint files
    /// the target kubelet must accept.
    pub kubelet_dir: Option<std::path::PathBuf>,
    /// Where the host's cgroup hierarchy is mounted (`/sys/fs/cgroup` when `None`): v1 or v2
    /// decides whether kubelet 1.35+ starts with the node's configuration
    /// ([`crate::hazard::cgroup_v1_hazard`]).
    pub cgroup_fs: Option<std::path::PathBuf>,
    /// What the API server said, when the pods came from it: its version and the Node's
    /// reported kubelet version decide `--from auto` where the hashes cannot and add the
    /// version-skew hazards ([`crate::hazard::version_skew_hazards`]).
    pub api: Option<ApiFacts>,
    /// Offline (no [`NodeFiles::api`]): what the installed kubelet binary says of itself,
    /// which then decides `--from auto` in its place.
    pub installed_kubelet: Option<InstalledKubelet>,
    /// Pin the UID of every static pod the target kubelet would otherwise give a new one
    /// (`--pin-static-pod-uids`): the plan keeps such a pod and lists the manifest edit in
    /// [`Plan::static_pod_pins`], which `patch` writes; a pod it cannot pin is a `block`
    /// hazard `static-pod-pin-refused`.
    pub pin_static_pod_uids: bool,
    /// The Node object (from the API server, or `--node FILE`): the target kubelet's
    /// admission of every pod is predicted against it ([`crate::admission`]). Without it the
    /// plan says admission was not predicted.
    pub node_object: Option<crate::admission::NodeObject>,
    /// The configuration file the target kubelet reads (`--kubelet-config`); unset, the
    /// running kubelet's `--config`, else `config.yaml` in [`NodeFiles::kubelet_dir`]: the
    /// allocatable admission is predicted against is recomputed from it
    /// ([`crate::allocatable`]).
    pub kubelet_config: Option<std::path::PathBuf>,
    /// The running kubelet's command line (without the program), when found: the new kubelet
    /// gets the same flags, which override its configuration file.
    pub kubelet_args: Option<Vec<String>>,
}

/// Containers (of distinct specs) hashed for every version to name the versions the others
/// are hashed for ([`make_plan`]).
const SAMPLE: usize = 8;

/// A spec's hashes, by version in [`KubeletVersion::all`]'s order: `None` where the plan did
/// not need that version's ([`make_plan`]).
type Hashes = Vec<Option<Result<ContainerHashes, SpecError>>>;
/// The hashes of one version out of a [`Hashes`] row.
type HashesAt<'f> =
    &'f dyn Fn(&Hashes, KubeletVersion) -> Option<Result<ContainerHashes, SpecError>>;

/// Whether the target kubelet compares the hash of this container at all: running regular
/// containers always, running native sidecars from 1.32 on; exited, created-but-never-started,
/// init and ephemeral containers never (a changed spec does not restart them). `running` comes
/// from pod status, or from the runtime's recorded pid when the status does not list the id.
fn compared(ctype: ContainerType, running: bool, to: KubeletVersion) -> bool {
    if !running {
        return false;
    }
    match ctype {
        ContainerType::Container => true,
        ContainerType::Sidecar => to.minor() >= 32,
        ContainerType::Init | ContainerType::Ephemeral => false,
    }
}

impl Plan {
    /// Plans a node: reads every record of `store` (never writes) and decides, for each, what
    /// the kubelet `to` will compute and whether the stored hash is proven for `from`.
    /// `pods` is `kubectl get pods -A --field-selector spec.nodeName=NODE -o json`.
    pub fn build(
        pods: &[u8],
        store: &dyn RuntimeStore,
        from: From,
        to: KubeletVersion,
    ) -> Result<Plan, Error> {
        Plan::build_with(pods, store, from, to, &NodeFiles::default())
    }

    /// [`Plan::build`] with what else was read from the node ([`NodeFiles`]).
    pub fn build_with(
        pods: &[u8],
        store: &dyn RuntimeStore,
        from: From,
        to: KubeletVersion,
        node: &NodeFiles,
    ) -> Result<Plan, Error> {
        Plan::build_with_networks(pods, store, from, to, node).map(|(plan, _)| plan)
    }

    /// [`Plan::build_with`], and the pods' networks read in the same parse of the pods file,
    /// for [`crate::cri_dockerd::plan_switch_with_networks`].
    pub fn build_with_networks(
        pods: &[u8],
        store: &dyn RuntimeStore,
        from: From,
        to: KubeletVersion,
        node: &NodeFiles,
    ) -> Result<(Plan, crate::pods::PodNetworks), Error> {
        // The pods file is parsed on a second thread while this one reads the node: on the
        // 2,000-container nodes (9.3 MB of pods) the parse is ~40 ms of CPU that no longer
        // waits in front of the store's scan. A pods file that does not parse is still the
        // error reported, as when it was parsed first (the scan only reads).
        let (parsed, read) = std::thread::scope(|scope| {
            // The parser recurses once per nesting level, up to Go's limit of 10,000: more
            // than a spawned thread's default 2 MiB of stack holds (the main thread has 8).
            let parsing = std::thread::Builder::new()
                .name("pods-parse".into())
                .stack_size(PARSE_STACK)
                .spawn_scoped(scope, || {
                    let parsed = PodIndex::parse(pods);
                    // The hashes need the embedded type trees; built here, beside the scan,
                    // they are not built on the critical path by the first hash.
                    hashcompat::schema::all();
                    parsed
                })
                .ok();
            let read = NodeRead::read(store, to, node);
            (parsing.map(|p| p.join()), read)
        });
        let mut pods = match parsed {
            Some(Ok(parsed)) => parsed?,
            Some(Err(panic)) => std::panic::resume_unwind(panic),
            // no thread to be had: parsed here, after the read
            None => PodIndex::parse(pods)?,
        };
        let plan = Plan::from_read(&pods, read?, store, from, to, node)?;
        Ok((plan, std::mem::take(&mut pods.networks)))
    }

    /// [`Plan::build`] with pods already parsed.
    pub fn from_pods(
        pods: &PodIndex<'_>,
        store: &dyn RuntimeStore,
        from: From,
        to: KubeletVersion,
    ) -> Result<Plan, Error> {
        Plan::from_pods_with(pods, store, from, to, &NodeFiles::default())
    }

    /// [`Plan::build_with`] with pods already parsed.
    pub fn from_pods_with(
        pods: &PodIndex<'_>,
        store: &dyn RuntimeStore,
        from: From,
        to: KubeletVersion,
        node: &NodeFiles,
    ) -> Result<Plan, Error> {
        let read = NodeRead::read(store, to, node)?;
        Plan::from_read(pods, read, store, from, to, node)
    }

    fn from_read(
        pods: &PodIndex<'_>,
        read: NodeRead,
        store: &dyn RuntimeStore,
        from: From,
        to: KubeletVersion,
        node: &NodeFiles,
    ) -> Result<Plan, Error> {
        let NodeRead {
            started,
            checkpoints,
            scan,
            scan_ms,
        } = read;
        let build = |from: From| {
            make_plan(&PlanInput {
                pods,
                scan: &scan,
                runtime: store.kind(),
                root: store.root().display().to_string(),
                from,
                to,
                manifests: node.manifests.as_ref(),
                pin_uids: node.pin_static_pod_uids,
            })
        };
        // who says which kubelet runs: the Node (from the API server), else, offline, the
        // installed binary
        let reported = match (&node.api, &node.installed_kubelet) {
            (Some(a), _) => a
                .node_kubelet_version
                .parse::<KubeletVersion>()
                .ok()
                .map(|v| {
                    (
                        v,
                        format!("Node {} reports kubelet {}", a.node, a.node_kubelet_version),
                    )
                }),
            (None, Some(k)) => k.version.parse::<KubeletVersion>().ok().map(|v| {
                (
                    v,
                    format!(
                        "the installed kubelet {} says {} (--version)",
                        k.path, k.version
                    ),
                )
            }),
            (None, None) => None,
        };
        let mut plan = match (from, reported) {
            (From::Auto, Some((v, witness))) => match build(From::Auto) {
                Ok(auto) if auto.from == Some(v) => auto,
                Ok(auto) if auto.from_candidates.contains(&v) => {
                    // the hashes allow several versions (1.23 and 1.24 hash every spec alike):
                    // the running kubelet's own report decides
                    let mut plan = build(From::Version(v))?;
                    plan.warnings.push(format!(
                        "--from auto: kubelet {v}, as {witness}; the stored hashes allow {}",
                        ranges(&auto.from_candidates.iter().copied().collect())
                    ));
                    plan.from_candidates = auto.from_candidates;
                    plan
                }
                Ok(mut auto) => {
                    let h = Hazard::block(
                        "kubelet-version-disagrees",
                        format!(
                            "{witness} but the stored hashes prove {}: the node's containers were not created by the kubelet that runs (a kubelet swapped without restarting its pods, a binary replaced before its restart, or the wrong node's API credentials): find out which is right, then give --from",
                            ranges(&auto.from_candidates.iter().copied().collect())
                        ),
                    );
                    auto.warnings.push(h.message.clone());
                    auto.hazards.push(h);
                    auto
                }
                // no container to prove a version by: the Node's report is the version
                Err(Error::NothingProven) => build(From::Version(v))?,
                Err(e) => return Err(e),
            },
            (From::Version(f), Some((v, witness))) if f != v => {
                let mut plan = build(from)?;
                let h = Hazard::warn(
                    "kubelet-version-disagrees",
                    format!(
                        "--from {f} is given but {witness}: the plan proves each stored hash against {f}"
                    ),
                );
                plan.warnings.push(h.message.clone());
                plan.hazards.push(h);
                plan
            }
            _ => build(from)?,
        };
        if let Some(api) = &node.api {
            for h in crate::hazard::version_skew_hazards(api, to) {
                plan.warnings.push(h.message.clone());
                plan.hazards.push(h);
            }
        }
        if let Some(h) = crate::hazard::readiness_reset_hazard(pods, to) {
            plan.warnings.push(h.message.clone());
            plan.hazards.push(h);
        }
        for h in crate::hazard::checkpoint_hazards(&checkpoints, to) {
            plan.warnings.push(h.message.clone());
            plan.hazards.push(h);
        }
        if let Some(dir) = &node.kubelet_dir {
            let cgroup_fs = node
                .cgroup_fs
                .clone()
                .unwrap_or_else(|| std::path::PathBuf::from("/sys/fs/cgroup"));
            if let Some(h) = crate::hazard::cgroup_v1_hazard(dir, &cgroup_fs, to) {
                plan.warnings.push(h.message.clone());
                plan.hazards.push(h);
            }
        }
        admit(&mut plan, pods, node, to);
        plan.endpoint = Some(store.endpoint());
        plan.timings.scan_ms = scan_ms;
        plan.timings.total_ms = started.elapsed().as_secs_f64() * 1e3;
        Ok(plan)
    }

    /// Reads a report back: a JSON object of [`REPORT_FORMAT`]; anything else is
    /// [`Error::Report`].
    pub fn from_json(bytes: &[u8]) -> Result<Plan, Error> {
        let v: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| Error::Report {
            reason: format!("not JSON: {e}"),
        })?;
        match v.get("format").and_then(|f| f.as_u64()) {
            Some(f) if f == u64::from(REPORT_FORMAT) => {}
            Some(f) => {
                return Err(Error::Report {
                    reason: format!(
                        "report format {f}; this kubelet-rehash reads format {REPORT_FORMAT}"
                    ),
                })
            }
            None => {
                return Err(Error::Report {
                    reason: "no \"format\" number: not a kubelet-rehash report".into(),
                })
            }
        }
        serde_json::from_value(v).map_err(|e| Error::Report {
            reason: format!("not a kubelet-rehash report: {e}"),
        })
    }
}

/// What [`make_plan`] decides from.
pub(crate) struct PlanInput<'p, 'a> {
    pub pods: &'p PodIndex<'a>,
    pub scan: &'p ScanReport,
    pub runtime: RuntimeKind,
    pub root: String,
    pub from: From,
    pub to: KubeletVersion,
    pub manifests: Option<&'p StaticManifests>,
    /// [`NodeFiles::pin_static_pod_uids`].
    pub pin_uids: bool,
}

/// The pods file must be this node's: when it names nodes, the store's pods must be found on
/// exactly one of them. A wrong file would otherwise plan every container `orphan` — a silent
/// all-clear. Returns the hazard for a file that names other nodes too.
fn check_pods_belong(input: &PlanInput<'_, '_>) -> Result<Option<Hazard>, Error> {
    let named = input.pods.node_names();
    if named.is_empty() {
        return Ok(None);
    }
    let store_uids: BTreeSet<&str> = input
        .scan
        .records
        .iter()
        .filter(|r| matches!(r.kind, RecordKind::Container | RecordKind::Sandbox))
        .filter_map(|r| r.pod_uid.as_deref())
        .collect();
    if store_uids.is_empty() {
        return Ok(None);
    }
    let mut found_on: BTreeMap<&str, usize> = BTreeMap::new();
    for uid in &store_uids {
        if let Some(node) = input.pods.pod(uid).and_then(|p| p.node_name.as_deref()) {
            *found_on.entry(node).or_default() += 1;
        }
    }
    let list = |it: &mut dyn Iterator<Item = &str>| it.collect::<Vec<_>>().join(", ");
    match found_on.len() {
        0 => Err(Error::ForeignPods(format!(
            "none of the store's {} pods is in the pods file, which names node(s) {}: this is another node's pods file (take `kubectl get pods -A --field-selector spec.nodeName=$NODE -o json` for this node)",
            store_uids.len(),
            list(&mut named.iter().copied())
        ))),
        1 if named.len() == 1 => Ok(None),
        1 => {
            let node = *found_on.keys().next().expect("one");
            Ok(Some(Hazard::warn(
                "pods-file-multi-node",
                format!(
                    "the pods file names {} nodes ({}); the store's pods are on {node}, whose pods alone are used",
                    named.len(),
                    list(&mut named.iter().copied())
                ),
            )))
        }
        _ => Err(Error::ForeignPods(format!(
            "the store's pods are found on several nodes of the pods file ({}): one store is one node; give this node's pods only",
            found_on
                .iter()
                .map(|(n, c)| format!("{n}: {c} pod(s)"))
                .collect::<Vec<_>>()
                .join(", ")
        ))),
    }
}

pub(crate) fn make_plan(input: &PlanInput<'_, '_>) -> Result<Plan, Error> {
    let started = std::time::Instant::now();
    let pods_hazard = check_pods_belong(input)?;
    let versions = KubeletVersion::all();
    let matches = |r: &StoreRecord, h: &ContainerHashes| -> bool {
        let Some(stored) = r.hash.as_deref() else {
            return false;
        };
        if stored.parse::<Hash>().ok() != Some(h.hash) {
            return false;
        }
        // A stored hashWithoutResources must match where the version computes one; versions
        // without it (≤1.26, ≥1.31) neither write nor read it, so a stale one left by a 1.30
        // kubelet says nothing against them.
        match (&r.hash_without_resources, h.hash_without_resources) {
            (Some(s), Some(w)) => s.parse::<Hash>().ok() == Some(w),
            _ => true,
        }
    };

    // Every distinct spec is hashed once per version it needs, in parallel.
    // (the replicas of a pod template share one spec: keyed by content, kilobytes each)
    let mut spec_index: HashMap<ByContent<'_>, usize> = HashMap::new();
    let mut specs: Vec<ByContent<'_>> = Vec::new();
    for r in &input.scan.records {
        if let Some(c) = spec_of(input.pods, r) {
            spec_index.entry(ByContent(c.spec)).or_insert_with(|| {
                specs.push(ByContent(c.spec));
                specs.len() - 1
            });
        }
    }
    let mut rows: Vec<Hashes> = vec![vec![None; versions.len()]; specs.len()];
    let spec_of_record =
        |r: &StoreRecord| spec_of(input.pods, r).map(|c| spec_index[&ByContent(c.spec)]);
    // Which versions a record's stored hash matches, among those its row holds.
    let set_of = |rows: &[Hashes], r: &StoreRecord| -> Option<BTreeSet<KubeletVersion>> {
        let row = &rows[spec_of_record(r)?];
        Some(
            row.iter()
                .flatten()
                .filter_map(|x| x.as_ref().ok())
                .filter(|x| matches(r, x))
                .map(|x| x.version)
                .collect(),
        )
    };
    let containers = || {
        input
            .scan
            .records
            .iter()
            .filter(|r| r.kind == RecordKind::Container)
    };
    // Without a source version, a sample of containers names the versions all are hashed
    // for: the source is a version every container that votes matches, so the versions that
    // every sampled voter matches, and the target, are all the others need (all 29 for every
    // spec was most of the planning time). What that leaves unproven gets every version
    // below, and a vote the sample cannot vouch for is taken again on every version.
    let mut sample: Vec<&StoreRecord> = Vec::new();
    let first_list: Vec<KubeletVersion> = match input.from {
        // A downgrade (`to` older than `from`) is proven the same way: the stored value is
        // what `from` computes for the current spec; the target is the older version's hash.
        From::Version(f) => {
            let mut v = vec![f, input.to];
            v.dedup();
            v
        }
        From::Auto => {
            let mut seen = BTreeSet::new();
            let picked: Vec<(&StoreRecord, usize)> = containers()
                .filter_map(|r| Some((r, spec_of_record(r)?)))
                .filter(|(_, i)| seen.insert(*i))
                .take(SAMPLE)
                .collect();
            let which: Vec<usize> = picked.iter().map(|(_, i)| *i).collect();
            fill_rows(&mut rows, &specs, &which, &versions, &versions);
            let sets: Vec<(&StoreRecord, BTreeSet<KubeletVersion>)> = picked
                .iter()
                .map(|(r, _)| (*r, set_of(&rows, r).expect("a spec")))
                .filter(|(_, set)| !set.is_empty())
                .collect();
            // A container whose hash proves versions without the target votes whatever the
            // others hold; when none of the sample does, those holding the target vote
            // (unless another container turns out not to: checked after the vote).
            let lacking: Vec<_> = sets
                .iter()
                .filter(|(_, s)| !s.contains(&input.to))
                .collect();
            let voting: Vec<_> = if lacking.is_empty() {
                sets.iter().collect()
            } else {
                lacking
            };
            sample = voting.iter().map(|(r, _)| *r).collect();
            let mut list: BTreeSet<KubeletVersion> = match voting.split_first() {
                Some(((_, first), rest)) => rest.iter().fold(first.clone(), |a, (_, s)| {
                    a.intersection(s).copied().collect()
                }),
                None => versions.iter().copied().collect(),
            };
            list.insert(input.to);
            versions
                .iter()
                .copied()
                .filter(|v| list.contains(v))
                .collect()
        }
    };
    let all_specs: Vec<usize> = (0..specs.len()).collect();
    fill_rows(&mut rows, &specs, &all_specs, &first_list, &versions);

    let (from, from_candidates) = match input.from {
        From::Version(f) => (Some(f), vec![f]),
        From::Auto => {
            // A record that matches none of the versions hashed may match another: its spec
            // gets them all, so that whether it proves anything is exact.
            let unproven: BTreeSet<usize> = containers()
                .filter(|r| set_of(&rows, r).is_some_and(|s| s.is_empty()))
                .filter_map(&spec_of_record)
                .collect();
            let unproven: Vec<usize> = unproven.into_iter().collect();
            fill_rows(&mut rows, &specs, &unproven, &versions, &versions);
            let decide_from = |rows: &[Hashes]| {
                let proven: Vec<(&StoreRecord, BTreeSet<KubeletVersion>)> = containers()
                    .filter_map(|r| {
                        let set = set_of(rows, r)?;
                        (!set.is_empty()).then_some((r, set))
                    })
                    .collect();
                // A container that already holds its target hash stays unchanged whatever
                // the source version, so it says nothing about it: after an interrupted patch
                // (some containers rewritten, the others not) only the others decide. When
                // every container holds its target (a finished patch), all of them do.
                let pending = proven.iter().any(|(_, set)| !set.contains(&input.to));
                proven
                    .into_iter()
                    .filter(|(_, set)| !(pending && set.contains(&input.to)))
                    .collect::<Vec<_>>()
            };
            // (every spec hashed for every version, and the voters taken again)
            let on_every_version = |rows: &mut Vec<Hashes>| {
                fill_rows(rows, &specs, &all_specs, &versions, &versions);
                decide_from(rows)
            };
            let mut voters = decide_from(&rows);
            // The agreed set is within the versions of every container that votes, so within
            // the list when the sample's voters all vote (a vote without disagreement on the
            // list is then the vote on every version; one with disagreement is taken again):
            // else every spec gets every version and the vote is taken again.
            let narrowed_exact = sample
                .iter()
                .all(|s| voters.iter().any(|(r, _)| std::ptr::eq(*r, *s)));
            if !narrowed_exact {
                voters = on_every_version(&mut rows);
            }
            if voters.is_empty() {
                return Err(Error::NothingProven);
            }
            let vote = |voters: &[(&StoreRecord, BTreeSet<KubeletVersion>)]| {
                let mut agreed: Option<BTreeSet<KubeletVersion>> = None;
                let mut disagreeing: Vec<String> = Vec::new();
                for (r, set) in voters {
                    let next: BTreeSet<KubeletVersion> = match &agreed {
                        None => set.clone(),
                        Some(a) => a.intersection(set).copied().collect(),
                    };
                    if next.is_empty() {
                        disagreeing.push(disagreement(r, set));
                    } else {
                        agreed = Some(next);
                    }
                }
                (agreed, disagreeing)
            };
            let (mut agreed, mut disagreeing) = vote(&voters);
            if !disagreeing.is_empty() && narrowed_exact {
                // The refusal names each disagreeing container with every version it is
                // consistent with: the vote again, on every version of every spec.
                (agreed, disagreeing) = vote(&on_every_version(&mut rows));
            }
            if !disagreeing.is_empty() {
                return Err(Error::FromDisagreement {
                    agreed: ranges(agreed.as_ref().expect("some container agreed")),
                    disagreeing: disagreeing.join("; "),
                });
            }
            let agreed: Vec<KubeletVersion> = agreed.expect("proven").into_iter().collect();
            // All candidates give every proven container the same hash, so any of them plans
            // the same actions; report the oldest (the range is in `from_candidates`).
            let from = agreed[0];
            (Some(from), agreed)
        }
    };
    let hash_ms = started.elapsed().as_secs_f64() * 1e3;
    let hashes_for = |r: &StoreRecord| -> Option<&Hashes> { Some(&rows[spec_of_record(r)?]) };
    let at = |h: &Hashes, v: KubeletVersion| -> Option<Result<ContainerHashes, SpecError>> {
        versions
            .iter()
            .position(|w| *w == v)
            .and_then(|i| h[i].clone())
    };
    let from_v = from.expect("set above");

    let mut records = Vec::with_capacity(input.scan.records.len());
    // Each manifest's pin is decided once, for the first of its pod's containers that needs
    // it (by manifest file: one file, one pod).
    let mut pins: BTreeMap<std::path::PathBuf, Result<UidPin, String>> = BTreeMap::new();
    for r in &input.scan.records {
        records.push(plan_record(
            input,
            r,
            hashes_for(r),
            &at,
            &matches,
            (from_v, &from_candidates),
            &mut pins,
        ));
    }
    let summary = summarize(&records, input.to);
    let mut hazards: Vec<Hazard> = input.scan.warnings.clone();
    let mut static_pod_pins = Vec::new();
    for (file, pin) in pins {
        match pin {
            Ok(p) => static_pod_pins.push(p),
            Err(why) => hazards.push(Hazard::block(
                "static-pod-pin-refused",
                format!(
                    "the static pod of {} keeps a kubelet-derived UID, so kubelet {} restarts it: pinning its UID is refused: {why}. Nothing is written; pin metadata.uid by hand, or give --no-pin-static-pod-uids to accept the restart",
                    file.display(),
                    input.to
                ),
            )),
        }
    }
    hazards.extend(crate::hazard::version_hazards(
        input.runtime,
        from_v,
        input.to,
        &records,
    ));
    hazards.extend(pods_hazard);
    let warnings = hazards.iter().map(|h| h.message.clone()).collect();
    let plan_ms = started.elapsed().as_secs_f64() * 1e3;
    Ok(Plan {
        format: REPORT_FORMAT,
        stage: Stage::Plan,
        from,
        from_candidates,
        to: input.to,
        runtime: input.runtime,
        root: input.root.clone(),
        endpoint: None,
        records,
        summary,
        hazards,
        warnings,
        timings: Timings {
            hash_ms,
            plan_ms,
            ..Timings::default()
        },
        backup_dir: None,
        cri_dockerd: None,
        static_pod_pins,
    })
}

/// Hashes the specs `which` (indexes into `specs`) for those of `list` their row does not
/// hold yet, in parallel; rows are in `versions` order.
fn fill_rows(
    rows: &mut [Hashes],
    specs: &[ByContent<'_>],
    which: &[usize],
    list: &[KubeletVersion],
    versions: &[KubeletVersion],
) {
    let positions: Vec<(usize, KubeletVersion)> = versions
        .iter()
        .copied()
        .enumerate()
        .filter(|(_, v)| list.contains(v))
        .collect();
    // (spec, the row positions hashed, their hashes)
    type Filled = (usize, Vec<usize>, Vec<Result<ContainerHashes, SpecError>>);
    let computed: Vec<Filled> = which
        .par_iter()
        .filter_map(|&i| {
            let (at, missing): (Vec<usize>, Vec<KubeletVersion>) = positions
                .iter()
                .filter(|(p, _)| rows[i][*p].is_none())
                .copied()
                .unzip();
            if missing.is_empty() {
                return None;
            }
            let node =
                hashcompat::parse_json(specs[i].0).expect("a span of a parsed document parses");
            Some((i, at, hashcompat::hash_versions(&node, &missing)))
        })
        .collect();
    for (i, at, hashes) in computed {
        for (p, h) in at.into_iter().zip(hashes) {
            rows[i][p] = Some(h);
        }
    }
}

/// How a `--from auto` refusal names a container that disagrees: with every version `set`
/// its stored hash is consistent with.
fn disagreement(r: &StoreRecord, set: &BTreeSet<KubeletVersion>) -> String {
    format!(
        "{} ({}/{}) is consistent only with {}",
        short(&r.id),
        r.pod.as_deref().unwrap_or("?"),
        r.container.as_deref().unwrap_or("?"),
        ranges(set)
    )
}

fn short(id: &str) -> &str {
    &id[..id.len().min(12)]
}

fn spec_of<'p, 'a>(
    pods: &'p PodIndex<'a>,
    r: &StoreRecord,
) -> Option<&'p crate::pods::PodContainer<'a>> {
    if r.kind != RecordKind::Container {
        return None;
    }
    let pod = pods.pod(r.pod_uid.as_deref()?)?;
    let name = r.container.as_deref()?;
    pod.containers.iter().find(|c| c.name == name)
}

/// [`decide`], then what a static pod adds: a UID the target kubelet derives anew makes the
/// pod a new one, which restarts its running containers whatever the hashes say.
fn plan_record(
    input: &PlanInput<'_, '_>,
    r: &StoreRecord,
    hashes: Option<&Hashes>,
    at: HashesAt<'_>,
    matches: &dyn Fn(&StoreRecord, &ContainerHashes) -> bool,
    (from, from_candidates): (KubeletVersion, &[KubeletVersion]),
    pins: &mut BTreeMap<std::path::PathBuf, Result<UidPin, String>>,
) -> PlanRecord {
    let mut p = decide(input, r, hashes, at, matches, from);
    let Some(uid) = r.pod_uid.as_deref() else {
        return p;
    };
    let Some(pod) = input
        .pods
        .pod(uid)
        .filter(|pod| pod.kubelet_uid.as_deref() == Some(uid))
    else {
        return p;
    };
    p.static_pod = true;
    let manifest = match (input.manifests, pod.node_name.as_deref()) {
        (Some(m), Some(node)) => m.for_mirror(&pod.namespace, &pod.name, node),
        _ => None,
    };
    let origin = uid_origin(manifest, uid);
    let running = p.state.map_or(r.pid.is_some_and(|x| x > 0), |s| {
        s == ContainerState::Running
    });
    // The derived UID changes with the kubelet's minor version. The hashes prove the running
    // kubelet only up to the versions that hash alike (1.31-1.36 all hash {name, image}), so
    // unless every candidate is the target's minor, the restart is possible and is planned: a
    // real 1.31 kubelet backing out of 1.32 restarted such a pod that the oldest candidate
    // (1.31 = the target) had called kept (cli/tests/real_kubelet.rs).
    let other_minor = from_candidates
        .iter()
        .any(|c| c.minor() != input.to.minor());
    if p.kind == RecordClass::Container
        && running
        && origin.changes_across_versions()
        && other_minor
    {
        p.would_restart_without_rewrite = true;
        // With --pin-static-pod-uids, a pod whose manifest can be pinned keeps its UID, and
        // is kept like any other (its containers' hashes decide).
        if let (true, UidOrigin::Derived, Some(m)) = (input.pin_uids, origin, manifest) {
            let pin = pins
                .entry(m.file.clone())
                .or_insert_with(|| plan_pin(m, uid, pod.config_hash.as_deref()));
            if pin.is_ok() {
                p.reason = format!(
                    "{}; static pod kept because its UID gets pinned: its manifest {} sets no metadata.uid, and patch writes metadata.uid {uid} (the UID the kubelet uses now) so kubelet {} does not derive another",
                    p.reason,
                    m.file.display(),
                    input.to
                );
                return p;
            }
        }
        p.would_restart_after_rewrite = true;
        let how = match (origin, manifest) {
            (UidOrigin::Derived, Some(m)) => {
                format!("its manifest {} sets no metadata.uid", m.file.display())
            }
            _ => "no manifest found and the UID has the derived (md5) form".to_string(),
        };
        let unsure = if from_candidates.len() > 1
            && from_candidates
                .iter()
                .any(|c| c.minor() == input.to.minor())
        {
            format!(
                " (unless the running kubelet is already {}: the hashes cannot tell it among {}; --from names it)",
                input.to,
                ranges(&from_candidates.iter().copied().collect())
            )
        } else {
            String::new()
        };
        p.reason = format!(
            "{}; but static pod with a kubelet-derived UID ({how}): kubelet {} derives another UID from its own Pod type, treats the pod as new and restarts it{unsure} ({})",
            p.reason,
            input.to,
            match manifest.and_then(|m| pins.get(&m.file)) {
                Some(Err(why)) => format!("its UID cannot be pinned: {why}"),
                _ if manifest.is_some() => "--pin-static-pod-uids pins metadata.uid in the manifest to keep it".to_string(),
                _ => "pin metadata.uid in its manifest, or give --manifests, to keep it".to_string(),
            }
        );
    }
    p
}

/// What the hashes say about one record.
fn decide(
    input: &PlanInput<'_, '_>,
    r: &StoreRecord,
    hashes: Option<&Hashes>,
    at: HashesAt<'_>,
    matches: &dyn Fn(&StoreRecord, &ContainerHashes) -> bool,
    from: KubeletVersion,
) -> PlanRecord {
    let spec = spec_of(input.pods, r);
    let state = input.pods.status_by_id.get(&r.id).map(|s| s.state);
    let running = match state {
        Some(s) => s == ContainerState::Running,
        None => r.pid.is_some_and(|p| p > 0),
    };
    let mut p = PlanRecord {
        id: r.id.clone(),
        kind: if r.kind == RecordKind::Sandbox {
            RecordClass::Sandbox
        } else {
            RecordClass::Container
        },
        namespace: r.namespace.clone(),
        pod: r.pod.clone(),
        pod_uid: r.pod_uid.clone(),
        container: r.container.clone(),
        container_type: spec.map(|c| c.ctype),
        attempt: r.attempt,
        state,
        pid: r.pid,
        image: r.image.clone(),
        stored_hash: r.hash.clone(),
        from_hash: None,
        target_hash: None,
        stored_hash_without_resources: r.hash_without_resources.clone(),
        from_hash_without_resources: None,
        target_hash_without_resources: None,
        action: Action::NotKubernetes,
        reason: String::new(),
        would_restart_without_rewrite: false,
        would_restart_after_rewrite: false,
        static_pod: false,
    };
    match r.kind {
        RecordKind::Sandbox => {
            p.action = Action::Sandbox;
            p.reason = "pod sandbox: carries no container hash".into();
            return p;
        }
        RecordKind::NotKubernetes => {
            p.action = Action::NotKubernetes;
            p.reason = "not created by the kubelet; never touched".into();
            return p;
        }
        RecordKind::Undecodable => {
            p.action = Action::Undecodable;
            p.reason = format!(
                "store record cannot be decoded: {}; never touched",
                r.problem.as_deref().unwrap_or("unknown problem")
            );
            return p;
        }
        RecordKind::Container => {}
    }
    let (Some(spec), Some(hashes)) = (spec, hashes) else {
        p.action = Action::Orphan;
        p.reason = if input.pods.pod(r.pod_uid.as_deref().unwrap_or("")).is_some() {
            "the pod has no container of this name: the kubelet will remove it".into()
        } else {
            "no pod with this uid in the pods list (deleted?): the kubelet will remove it, not restart it".into()
        };
        return p;
    };
    let target = at(hashes, input.to).expect("target hashed");
    let from_h = at(hashes, from).expect("from hashed");
    let target = match target {
        Ok(t) => t,
        Err(e) => {
            p.action = Action::Unproven;
            p.reason = format!("the target kubelet cannot decode this spec: {e}");
            p.would_restart_without_rewrite = compared(spec.ctype, running, input.to);
            p.would_restart_after_rewrite = p.would_restart_without_rewrite;
            return p;
        }
    };
    p.target_hash = Some(target.hash);
    p.target_hash_without_resources = if r.hash_without_resources.is_some() {
        target.hash_without_resources
    } else {
        None
    };
    if let Ok(f) = &from_h {
        p.from_hash = Some(f.hash);
        p.from_hash_without_resources = f.hash_without_resources;
    }
    let cmp = compared(spec.ctype, running, input.to);
    if let Some(copy) = &r.other_copy {
        // A second copy of the record (CRI-O's runroot config.json) with other hashes: which
        // one the container was created from is unproven, unless that copy already holds the
        // target's hashes (a patch interrupted between its runroot and graphroot writes,
        // which the rewrite finishes) or hashes the current kubelet computes for this spec
        // (the graphroot copy was patched by a run that did not know the runroot).
        let parsed = |s: &Option<String>| s.as_deref().and_then(|s| s.parse::<Hash>().ok());
        let as_record = StoreRecord {
            hash: copy.hash.clone(),
            hash_without_resources: copy.hash_without_resources.clone(),
            ..r.clone()
        };
        let copy_proven =
            matches!(&from_h, Ok(f) if matches(&as_record, f) || resized_in_place(&as_record, f));
        // A rewrite leaves a hashWithoutResources the target does not compute as it is.
        let copy_is_target = parsed(&copy.hash) == Some(target.hash)
            && match p.target_hash_without_resources {
                Some(w) => parsed(&copy.hash_without_resources) == Some(w),
                None => copy.hash_without_resources == r.hash_without_resources,
            };
        if !copy_is_target && !copy_proven {
            p.action = Action::Unproven;
            p.reason = format!(
                "{} holds hash {} but the record holds {}: which one the container was created from is unproven; never rewritten",
                copy.location,
                copy.hash.as_deref().unwrap_or("(none)"),
                r.hash.as_deref().unwrap_or("(none)")
            );
            p.would_restart_without_rewrite =
                cmp && r.hash.as_deref().and_then(|s| s.parse::<Hash>().ok()) != Some(target.hash);
            p.would_restart_after_rewrite = p.would_restart_without_rewrite;
            return p;
        }
    }
    let stored = r.hash.as_deref().and_then(|s| s.parse::<Hash>().ok());
    let stored_eq_target = stored == Some(target.hash)
        && match (&r.hash_without_resources, target.hash_without_resources) {
            (Some(s), Some(w)) => s.parse::<Hash>().ok() == Some(w),
            _ => true,
        };
    p.would_restart_without_rewrite = cmp && stored != Some(target.hash);
    if stored_eq_target {
        p.action = Action::Unchanged;
        p.reason = "the stored hash already equals the target".into();
        return p;
    }
    match &from_h {
        Ok(f) if matches(r, f) => {
            p.action = Action::Rewrite;
            p.reason = format!(
                "stored hash proven for kubelet {from}; target {} differs",
                input.to
            );
        }
        // Resized in place (InPlacePodVerticalScaling, 1.27–1.30): the resources in the spec
        // changed after the container was created, so `hash` no longer matches, but the
        // kubelet keeps the container because `hashWithoutResources` still does. It is proven
        // by that, and rewritten to the target's hash of the current spec.
        Ok(f) if resized_in_place(r, f) => {
            p.action = Action::Rewrite;
            p.reason = format!(
                "resized in place: stored hashWithoutResources proven for kubelet {from} (the resources changed since creation, which that kubelet allows); target {} differs",
                input.to
            );
        }
        Ok(_) => {
            p.action = Action::Unproven;
            p.reason = match r.hash {
                None => "no hash stored".into(),
                Some(_) => format!(
                    "stored hash is not what kubelet {from} computes for the current spec (spec changed since the container was created?): it will restart"
                ),
            };
            p.would_restart_after_rewrite = p.would_restart_without_rewrite;
        }
        Err(e) => {
            p.action = Action::Unproven;
            p.reason = format!("kubelet {from} cannot decode this spec: {e}");
            p.would_restart_after_rewrite = p.would_restart_without_rewrite;
        }
    }
    p
}

fn resized_in_place(r: &StoreRecord, from: &ContainerHashes) -> bool {
    match (&r.hash_without_resources, from.hash_without_resources) {
        (Some(stored), Some(w)) => stored.parse::<Hash>().ok() == Some(w),
        _ => false,
    }
}

fn summarize(records: &[PlanRecord], to: KubeletVersion) -> Summary {
    let mut actions = BTreeMap::new();
    for r in records {
        *actions.entry(r.action).or_insert(0) += 1;
    }
    let sandboxes = records
        .iter()
        .filter(|r| r.kind == RecordClass::Sandbox)
        .count();
    let containers = records
        .iter()
        .filter(|r| {
            matches!(
                r.action,
                Action::Rewrite | Action::Unchanged | Action::Unproven | Action::Orphan
            )
        })
        .count();
    let without = records
        .iter()
        .filter(|r| r.would_restart_without_rewrite)
        .count();
    let after = records
        .iter()
        .filter(|r| r.would_restart_after_rewrite)
        .count();
    let mut reasons = Vec::new();
    let unproven_restart = records
        .iter()
        .filter(|r| r.action == Action::Unproven && r.would_restart_after_rewrite)
        .count();
    if unproven_restart > 0 {
        reasons.push(format!(
            "{unproven_restart} unproven: stored hash does not match the current spec"
        ));
    }
    let new_uid = records
        .iter()
        .filter(|r| r.static_pod && r.action != Action::Unproven && r.would_restart_after_rewrite)
        .count();
    if new_uid > 0 {
        reasons.push(format!(
            "{new_uid} in static pods whose derived UID the target kubelet computes anew"
        ));
    }
    let rejected = records
        .iter()
        .filter(|r| {
            r.would_restart_after_rewrite && r.reason.contains("rejects the pod at admission")
        })
        .count();
    if rejected > 0 {
        reasons.push(format!(
            "{rejected} in pods kubelet {to} rejects at admission"
        ));
    }
    let orphans = actions.get(&Action::Orphan).copied().unwrap_or(0);
    if orphans > 0 {
        reasons.push(format!(
            "{orphans} orphaned container(s) will be removed, not restarted"
        ));
    }
    let sentence = format!(
        "without rewrite {without} of {containers} containers would restart under kubelet {to}; after rewrite {after} will{}",
        if reasons.is_empty() {
            String::new()
        } else {
            format!(" ({})", reasons.join("; "))
        }
    );
    Summary {
        containers,
        sandboxes,
        actions,
        would_restart_without_rewrite: without,
        would_restart_after_rewrite: after,
        sentence,
    }
}

/// The target kubelet's admission of the node's pods ([`crate::admission`]): each pod it
/// rejects is a `block` hazard, and its running containers restart whatever the rewrite does
/// (the kubelet fails the pod and stops them). Without a Node object, a `warn` says admission
/// went unpredicted.
fn admit(plan: &mut Plan, pods: &PodIndex<'_>, files: &NodeFiles, to: KubeletVersion) {
    use crate::admission;
    let Some(node) = files.node_object.as_ref() else {
        let h = Hazard::warn(
            admission::UNKNOWN,
            format!(
                "no Node object (the pods came from a file and no --node was given): whether kubelet {to} admits every pod again at its start (node labels against nodeSelector and affinity, requests against allocatable, host ports, taints, declared features) is not predicted"
            ),
        );
        plan.warnings.push(h.message.clone());
        plan.hazards.push(h);
        return;
    };
    let recomputed;
    let node = match target_allocatable(plan, files, node, to) {
        Some(allocatable) => {
            let mut n = node.clone();
            n.status.allocatable = allocatable;
            recomputed = n;
            &recomputed
        }
        None => node,
    };
    let raws: Vec<&[u8]> = pods.pods.iter().map(|p| p.raw).collect();
    let features =
        crate::declared_features::target(to, &target_gates(files), &node.status.declared_features);
    let verdict = admission::predict_with(&raws, node, to, features.as_ref());
    let hazards = admission::hazards(&verdict, to, &node.metadata.name);
    let rejected: HashMap<&str, &admission::Rejection> = verdict
        .rejected
        .iter()
        .map(|r| (r.uid.as_str(), r))
        .collect();
    let mut changed = false;
    for r in &mut plan.records {
        let Some(why) = r.pod_uid.as_deref().and_then(|u| rejected.get(u)) else {
            continue;
        };
        let running = r.state.map_or(r.pid.is_some_and(|p| p > 0), |s| {
            s == ContainerState::Running
        });
        if r.kind != RecordClass::Container || !running || r.action == Action::Orphan {
            continue;
        }
        r.would_restart_without_rewrite = true;
        r.would_restart_after_rewrite = true;
        r.reason = format!(
            "{}; but kubelet {to} rejects the pod at admission ({}): the pod fails and this container stops",
            r.reason, why.reason
        );
        changed = true;
    }
    if changed {
        plan.summary = summarize(&plan.records, to);
    }
    for h in hazards {
        plan.warnings.push(h.message.clone());
        plan.hazards.push(h);
    }
}

/// The configuration file the target kubelet reads ([`crate::allocatable::config_path`]:
/// `--kubelet-config`, else the running kubelet's `--config`, else kubeadm's default).
fn target_config(files: &NodeFiles) -> Option<std::path::PathBuf> {
    let default = files
        .kubelet_dir
        .as_ref()
        .map(|d| d.join(crate::hazard::KUBELET_CONFIG_FILE));
    crate::allocatable::config_path(
        files.kubelet_config.as_deref(),
        files.kubelet_args.as_deref(),
        default.as_deref(),
    )
}

/// The feature gates the target kubelet runs with on this node: its configuration file's (the
/// one [`target_allocatable`] reads) and the running kubelet's `--feature-gates`, which the new
/// kubelet is given too.
fn target_gates(files: &NodeFiles) -> crate::declared_features::Gates {
    let text = target_config(files)
        .and_then(|c| storepatch::atomic::read_regular_nofollow(&c).ok())
        .map(|(bytes, _)| String::from_utf8_lossy(&bytes).into_owned());
    crate::declared_features::Gates::read(text.as_deref(), files.kubelet_args.as_deref())
}

/// The allocatable the target kubelet admits against when its configuration file gives
/// another one than the Node reports ([`crate::allocatable`]), said as a `warn`
/// `allocatable-changes`; a file that cannot be applied is a `warn`
/// `allocatable-not-recomputed`, and the Node's allocatable is used.
fn target_allocatable(
    plan: &mut Plan,
    files: &NodeFiles,
    node: &crate::admission::NodeObject,
    to: KubeletVersion,
) -> Option<BTreeMap<String, String>> {
    use crate::allocatable::{self, Target};
    let config = target_config(files)?;
    let not_recomputed = |why: String| {
        (
            Hazard::warn("allocatable-not-recomputed", why),
            None::<BTreeMap<String, String>>,
        )
    };
    let (h, allocatable) = match storepatch::atomic::read_regular_nofollow(&config) {
        // a default path that is not there is simply not read; a named one must be
        Err(_) if files.kubelet_config.is_none() => return None,
        Err(_) => not_recomputed(format!(
            "cannot read the kubelet configuration {}: admission is predicted against the Node's allocatable",
            config.display()
        )),
        Ok((bytes, _)) => match allocatable::target(
            &config,
            &String::from_utf8_lossy(&bytes),
            &node.status.capacity,
            &node.status.allocatable,
            files.kubelet_args.as_deref(),
            to,
        ) {
            Target::Unknown | Target::Same => return None,
            Target::NotRecomputed { config, why } => not_recomputed(format!(
                "the allocatable of kubelet {to} is not recomputed from {config}: {why}"
            )),
            Target::Changed {
                config,
                changes,
                allocatable,
            } => {
                let unread = if files.kubelet_args.is_none() {
                    " (the running kubelet's command line was not read: flags such as --max-pods or --kube-reserved override the file)"
                } else {
                    ""
                };
                let list: Vec<String> = changes
                    .iter()
                    .map(|(k, a, b)| {
                        format!("{k} {} → {b}", if a.is_empty() { "(none)" } else { a })
                    })
                    .collect();
                let mut h = Hazard::warn(
                    "allocatable-changes",
                    format!(
                        "kubelet {to} computes another allocatable from {config} than node {} reports: {}; it admits the running pods against the new one, and the plan predicts admission so{unread}",
                        node.metadata.name,
                        list.join(", ")
                    ),
                );
                h.files = vec![config];
                (h, Some(allocatable))
            }
        },
    };
    plan.warnings.push(h.message.clone());
    plan.hazards.push(h);
    allocatable
}

/// What a plan reads of the node besides the pods: the kubelet's checkpoints, then the store.
struct NodeRead {
    started: std::time::Instant,
    checkpoints: Vec<kubeletstate::Finding>,
    scan: storepatch::ScanReport,
    scan_ms: f64,
}

impl NodeRead {
    fn read(store: &dyn RuntimeStore, to: KubeletVersion, node: &NodeFiles) -> Result<Self, Error> {
        let started = std::time::Instant::now();
        // Checkpoints first: a file we cannot judge stops the plan before the store is read.
        let checkpoints = match &node.kubelet_dir {
            Some(dir) => {
                kubeletstate::scan_dir(dir, to).map_err(|e| Error::Checkpoint(e.to_string()))?
            }
            None => Vec::new(),
        };
        let scan = store.scan()?;
        Ok(NodeRead {
            started,
            checkpoints,
            scan,
            scan_ms: started.elapsed().as_secs_f64() * 1e3,
        })
    }
}

/// Stack of the thread that parses the pods file (reserved address space; only what the
/// recursion touches becomes resident).
const PARSE_STACK: usize = 32 << 20;

#[cfg(test)]
mod from_auto_tests;
